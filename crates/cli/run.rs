//! `weightport run JOB.toml`: every output of a job file, in order, each its own verified
//! transaction (a failed output does not undo the others), resumable.
//!
//! Outputs of one `[[job]]` whose inputs are opened alike share one opened input (headers
//! parsed once; each output then reads the tensor data it needs, see docs/design-notes.md).
//!
//! Resuming: after an output is committed, the job's state file records what made it (its
//! options, each input file's size and mtime, the weightport version) and what it is (every
//! file with its sha256: the attestation's subjects when one was asked for). A rerun skips an
//! output whose record still holds: same options and inputs, every file there with its
//! sha256, the attestation (and report) still there. Any other output is made again, replacing
//! what the record says this job made; an output that exists without a record is refused
//! (exit 2) unless `force`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use weightport_core::Error;
use weightport_pipeline::{convert_input, input_request, open_inputs, ConvertReport, Progress};

use crate::args::RunArgs;
use crate::job::{self, Job, PlannedOutput};
use crate::output::{convert_options, human, p, Global};
use crate::Failure;

/// The job's state file: per output path, the record of the run that made it.
#[derive(Serialize, Deserialize, Default)]
struct State {
    version: u32,
    outputs: BTreeMap<String, Record>,
}

/// What made an output, and what it is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Record {
    recipe: Value,
    inputs: Vec<InputFile>,
    attestation: Option<PathBuf>,
    report: Option<PathBuf>,
    /// The directory `files` are named relative to.
    root: PathBuf,
    files: Vec<FileDigest>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct InputFile {
    path: PathBuf,
    size: u64,
    mtime_ns: i128,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct FileDigest {
    name: String,
    sha256: String,
}

impl State {
    fn load(path: &Path) -> Result<State, Error> {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(State::default()),
            Err(e) => return Err(Error::io(path, "read", e)),
        };
        serde_json::from_slice(&text).map_err(|e| {
            Error::Usage(format!(
                "{}: not a weightport job state ({e}); remove it to make every output again",
                p(path)
            ))
        })
    }

    fn save(&mut self, path: &Path) -> Result<(), Error> {
        self.version = 1;
        let mut text = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::Internal(format!("job state: {e}")))?;
        text.push(b'\n');
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create", e))?;
        }
        crate::attest::write_atomic(path, &text)
    }
}

/// Each input file's size and mtime (a directory: its files, top level, dot files excepted).
fn fingerprint(inputs: &[PathBuf]) -> Vec<InputFile> {
    let mut files = Vec::new();
    for i in inputs {
        match std::fs::read_dir(i) {
            Ok(rd) => files.extend(
                rd.filter_map(|e| e.ok())
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .map(|e| e.path()),
            ),
            Err(_) => files.push(i.clone()),
        }
    }
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let m = std::fs::metadata(&path).ok().filter(|m| m.is_file())?;
            use std::os::unix::fs::MetadataExt;
            let mtime_ns = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
            Some(InputFile {
                path,
                size: m.size(),
                mtime_ns,
            })
        })
        .collect()
}

/// The record an output would get now, before its files are known.
fn expected_record(o: &PlannedOutput) -> Record {
    let mut options = serde_json::to_value(&o.options).unwrap_or(Value::Null);
    if let Some(m) = options.as_object_mut() {
        // What does not change the output's bytes.
        for k in [
            "threads",
            "max_memory",
            "force",
            "verify",
            "attest",
            "report",
        ] {
            m.remove(k);
        }
        m.retain(|_, v| !v.is_null());
    }
    Record {
        recipe: json!({
            "inputs": o.args.inputs,
            "output": o.args.output,
            "options": options,
            "weightport": env!("CARGO_PKG_VERSION"),
        }),
        inputs: fingerprint(&o.args.inputs),
        attestation: o.args.attest.clone(),
        report: o.args.report.clone(),
        root: PathBuf::new(),
        files: Vec::new(),
    }
}

/// The subjects of an attestation file, sorted.
fn subjects(file: &Path) -> Result<Vec<FileDigest>, String> {
    let text = std::fs::read(file).map_err(|_| format!("{} is missing", p(file)))?;
    let st: Value =
        serde_json::from_slice(&text).map_err(|_| format!("{} is not JSON", p(file)))?;
    let mut v: Vec<FileDigest> = st["subject"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            Some(FileDigest {
                name: s["name"].as_str()?.to_string(),
                sha256: s["digest"]["sha256"].as_str()?.to_string(),
            })
        })
        .collect();
    v.sort();
    Ok(v)
}

/// `Ok` when `rec` still describes the output `now` asks for; else why not.
fn still_holds(rec: &Record, now: &Record) -> Result<(), String> {
    if rec.recipe != now.recipe {
        return Err("its options changed".into());
    }
    if rec.inputs != now.inputs {
        return Err("an input file changed".into());
    }
    if (&rec.attestation, &rec.report) != (&now.attestation, &now.report) {
        return Err("its attestation or report path changed".into());
    }
    if let Some(a) = &rec.attestation {
        if subjects(a)? != rec.files {
            return Err(format!("{} is not the one recorded", p(a)));
        }
    }
    if let Some(r) = rec.report.as_ref().filter(|r| !r.is_file()) {
        return Err(format!("{} is missing", p(r)));
    }
    for f in &rec.files {
        let path = rec.root.join(&f.name);
        match weightport_pipeline::attest::sha256_file(&path) {
            Ok(h) if h == f.sha256 => {}
            Ok(_) => return Err(format!("{} changed", p(&path))),
            Err(_) => return Err(format!("{} is missing", p(&path))),
        }
    }
    Ok(())
}

/// Every file a committed output consists of, named relative to the directory it lies in.
fn digests(r: &ConvertReport, rec: &Record) -> Result<(PathBuf, Vec<FileDigest>), Error> {
    let first = r.files.first().map(|f| f.path.clone()).unwrap_or_default();
    let root = first.parent().unwrap_or(Path::new("")).to_path_buf();
    if let Some(a) = &rec.attestation {
        return Ok((root, subjects(a).map_err(Error::Internal)?));
    }
    let mut all: Vec<PathBuf> = r.files.iter().map(|f| f.path.clone()).collect();
    all.extend(r.index.iter().cloned());
    all.extend(r.copied.iter().cloned());
    let mut v = Vec::new();
    for f in all {
        let name = f.strip_prefix(&root).unwrap_or(&f).to_string_lossy().into();
        v.push(FileDigest {
            name,
            sha256: weightport_pipeline::attest::sha256_file(&f)?,
        });
    }
    v.sort();
    Ok((root, v))
}

/// What happened to one output.
enum Outcome {
    Made(Box<ConvertReport>),
    Planned(Box<ConvertReport>),
    Skipped,
    Failed(Error),
}

struct Done {
    outcome: Outcome,
    /// Why an output with a record was made again.
    redone: Option<String>,
    seconds: f64,
}

/// The input the previous output opened, kept for the next one when it asks for the same.
#[derive(Default)]
struct Opened {
    key: String,
    input: Option<weightport_pipeline::Input>,
}

impl Opened {
    fn get(
        &mut self,
        inputs: &[PathBuf],
        req: &weightport_pipeline::OpenRequest,
    ) -> Result<&weightport_pipeline::Input, Error> {
        let key = format!("{inputs:?} {req:?}");
        if self.key != key || self.input.is_none() {
            self.input = None;
            self.input = Some(open_inputs(inputs, req)?);
            self.key = key;
        }
        Ok(self.input.as_ref().expect("opened above"))
    }
}

/// Everything one output needs from the run.
struct Ctx<'a> {
    file: &'a Path,
    run: &'a RunArgs,
    global: &'a Global,
    json: bool,
    progress: &'a dyn Progress,
}

/// Makes (or plans) output `o`, unless its record still holds.
fn one(
    o: &PlannedOutput,
    cx: &Ctx,
    state: &mut State,
    state_path: &Path,
    opened: &mut Opened,
) -> Result<(Outcome, Option<String>), Error> {
    let key = o.args.output.display().to_string();
    let mut now = expected_record(o);
    let redone = match state.outputs.get(&key) {
        None => None,
        Some(rec) => match still_holds(rec, &now) {
            Ok(()) => return Ok((Outcome::Skipped, None)),
            Err(why) => Some(why),
        },
    };
    let g = Global {
        threads: cx.global.threads.or(o.threads),
        max_memory: cx.global.max_memory.or(o.max_memory),
    };
    let mut opts = convert_options(&o.args, &g, cx.json)?;
    opts.dry_run = cx.run.dry_run;
    // An output this job recorded is its own to replace.
    opts.force |= cx.run.force || redone.is_some();
    let req = input_request(&opts)?;
    let input = opened.get(&opts.inputs, &req)?;
    let report = convert_input(input, &opts, cx.progress)?;
    if opts.dry_run {
        return Ok((Outcome::Planned(Box::new(report)), redone));
    }
    let made_as = json!({"file": cx.file, "job": o.job, "output": o.output, "line": o.line,
                         "convert": o.argv});
    crate::attest::write_outputs(&o.args, &report, Some(made_as))?;
    (now.root, now.files) = digests(&report, &now)?;
    state.outputs.insert(key, now);
    state.save(state_path)?;
    Ok((Outcome::Made(Box::new(report)), redone))
}

/// `weightport run JOB.toml`.
pub fn run(
    a: &RunArgs,
    global: &Global,
    json: bool,
    progress: &dyn Progress,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let t0 = Instant::now();
    let job = job::load(&a.job)?;
    let mut state = State::load(&job.state)?;
    let cx = Ctx {
        file: &job.file,
        run: a,
        global,
        json,
        progress,
    };
    let mut opened = Opened::default();
    let mut done = Vec::new();
    for o in &job.outputs {
        let t = Instant::now();
        let (outcome, redone) = match one(o, &cx, &mut state, &job.state, &mut opened) {
            Ok(r) => r,
            Err(Error::Interrupted) => return Err(Error::Interrupted.into()),
            Err(e) => (Outcome::Failed(e), None),
        };
        if let Outcome::Failed(e) = &outcome {
            eprintln!("weightport: {}: {e}", o.label(&job.file));
        }
        done.push(Done {
            outcome,
            redone,
            seconds: t.elapsed().as_secs_f64(),
        });
    }
    let secs = t0.elapsed().as_secs_f64();
    if json {
        writeln!(out, "{}", run_json(&job, &done, a.dry_run, secs))?;
    } else {
        run_text(&job, &done, out)?;
    }
    finish(&job, &done)
}

/// How many outputs were made, skipped, planned and failed.
fn counts(done: &[Done]) -> [usize; 4] {
    let mut c = [0; 4];
    for d in done {
        c[match d.outcome {
            Outcome::Made(_) => 0,
            Outcome::Skipped => 1,
            Outcome::Planned(_) => 2,
            Outcome::Failed(_) => 3,
        }] += 1;
    }
    c
}

/// The summary on stderr, and the exit code: the highest of the failed outputs' codes.
fn finish(job: &Job, done: &[Done]) -> Result<(), Failure> {
    let [made, skipped, planned, failed] = counts(done);
    let what = if planned > 0 || done.is_empty() {
        format!("{planned} planned")
    } else {
        format!("{made} made")
    };
    let summary = format!(
        "{}: {what}, {skipped} skipped, {failed} failed",
        p(&job.file)
    );
    let code = done
        .iter()
        .filter_map(|d| match &d.outcome {
            Outcome::Failed(e) => Some(e.exit_code()),
            _ => None,
        })
        .max();
    match code {
        None => {
            eprintln!("weightport: {summary}");
            Ok(())
        }
        Some(c) => Err(Failure::Findings(
            u8::try_from(c).unwrap_or(1),
            Some(summary),
        )),
    }
}

fn status(o: &Outcome) -> &'static str {
    match o {
        Outcome::Made(_) => "made",
        Outcome::Skipped => "skipped",
        Outcome::Planned(_) => "planned",
        Outcome::Failed(_) => "failed",
    }
}

/// One output in `--json`.
fn output_json(o: &PlannedOutput, d: &Done) -> Value {
    let path = |x: &Option<PathBuf>| x.as_ref().map(|p| p.display().to_string());
    let mut v = json!({
        "job": o.job,
        "output": o.output,
        "line": o.line,
        "inputs": o.args.inputs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "path": o.args.output.display().to_string(),
        "status": status(&d.outcome),
        "redone_because": d.redone,
        "attestation": path(&o.args.attest),
        "report": path(&o.args.report),
        "seconds": d.seconds,
        "error": Value::Null,
        "result": Value::Null,
    });
    match &d.outcome {
        Outcome::Made(r) | Outcome::Planned(r) => v["result"] = report_json(r),
        Outcome::Failed(e) => {
            v["error"] =
                json!({"kind": e.kind(), "message": e.to_string(), "exit_code": e.exit_code()})
        }
        Outcome::Skipped => {}
    }
    v
}

/// The part of a conversion's report a job summary carries.
fn report_json(r: &ConvertReport) -> Value {
    let mut types: BTreeMap<&str, usize> = BTreeMap::new();
    for t in &r.plan {
        *types.entry(t.dtype.name()).or_default() += 1;
    }
    json!({
        "output_format": r.output_format,
        "verified": r.verified,
        "files": r.files.iter().map(|f| json!({"path": f.path.display().to_string(), "bytes": f.size, "tensors": f.tensors})).collect::<Vec<_>>(),
        "tensors": r.tensors,
        "types": types,
        "total_bytes": r.total_bytes,
        "needed_bytes": r.needed_bytes,
        "free_bytes": r.free_bytes,
        "threads": r.threads,
        "memory_bytes": r.memory_bytes,
    })
}

/// Disk the made or planned outputs need, summed, and the least free space where they go.
fn disk(done: &[Done]) -> (u64, Option<u64>) {
    let reports = done.iter().filter_map(|d| match &d.outcome {
        Outcome::Planned(r) | Outcome::Made(r) => Some(r),
        _ => None,
    });
    let (mut needed, mut free) = (0, None::<u64>);
    for r in reports {
        needed += r.needed_bytes;
        free = match (free, r.free_bytes) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    (needed, free)
}

fn run_json(job: &Job, done: &[Done], dry_run: bool, secs: f64) -> Value {
    let [made, skipped, planned, failed] = counts(done);
    let (needed, free) = disk(done);
    json!({
        "ok": failed == 0,
        "command": "run",
        "job_file": job.file.display().to_string(),
        "state": job.state.display().to_string(),
        "dry_run": dry_run,
        "made": made,
        "skipped": skipped,
        "planned": planned,
        "failed": failed,
        "needed_bytes": needed,
        "free_bytes": free,
        "outputs": job.outputs.iter().zip(done).map(|(o, d)| output_json(o, d)).collect::<Vec<_>>(),
        "seconds": secs,
    })
}

/// One line per output on stdout (failures are also on stderr, as they happen).
fn run_text(job: &Job, done: &[Done], out: &mut impl Write) -> std::io::Result<()> {
    for (o, d) in job.outputs.iter().zip(done) {
        let what = match &d.outcome {
            Outcome::Made(r) | Outcome::Planned(r) => result_text(r, d.seconds),
            Outcome::Skipped => "verified against its recorded provenance".into(),
            Outcome::Failed(e) => e.to_string(),
        };
        let why = d.redone.as_deref().map(|w| format!(" (made again: {w})"));
        writeln!(
            out,
            "{:<8} {}  {}{}",
            status(&d.outcome),
            p(&o.args.output),
            weightport_core::sanitize(&what),
            why.unwrap_or_default()
        )?;
    }
    if done
        .iter()
        .any(|d| matches!(d.outcome, Outcome::Planned(_)))
    {
        let (needed, free) = disk(done);
        let free = free.map(human).unwrap_or_else(|| "unknown".into());
        writeln!(out, "disk needed {} in all; free {free}", human(needed))?;
    }
    Ok(())
}

fn result_text(r: &ConvertReport, secs: f64) -> String {
    let mut types: BTreeMap<&str, usize> = BTreeMap::new();
    for t in &r.plan {
        *types.entry(t.dtype.name()).or_default() += 1;
    }
    let types: Vec<String> = types.iter().map(|(t, n)| format!("{t}×{n}")).collect();
    let tail = if r.dry_run {
        format!("{} needed", human(r.needed_bytes))
    } else {
        let v = if r.verified {
            "verified"
        } else {
            "NOT verified"
        };
        format!("{v}, {secs:.2} s")
    };
    format!(
        "{} files, {}, {} tensors ({}); {tail}",
        r.files.len(),
        human(r.total_bytes),
        r.tensors,
        types.join(" ")
    )
}
