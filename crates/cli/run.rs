//! `weightport run JOB.toml` (and `convert` with several `-o`): every output of a job, each its
//! own verified transaction (a failed output does not undo the others), resumable.
//!
//! Outputs of one `[[job]]` whose inputs are opened alike are made from one read of the input
//! (`pipeline::convert_many`: one executor pass for all of them, each input byte taken once;
//! see docs/design-notes.md).
//!
//! Resuming: after an output is committed, the job's state file (`crate::state`) records what
//! made it (its options, every input file with its sha256, the job file's, the weightport
//! version) and what it is (every file with its sha256: the attestation's subjects when one
//! was asked for). A rerun skips an output whose record still holds: same options, inputs
//! unchanged (by stat where that proves it, else by sha256), every file there with its sha256,
//! the attestation (and report) still there. Any other output is made again, replacing what
//! the record says this job made; an output that exists without a record is refused (exit 2)
//! unless `force`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{json, Value};
use weightport_core::{Error, IoCounts};
use weightport_engine::{
    convert_input, convert_many, open_inputs, route, ConvertOptions, ConvertReport, Input,
    OpenRequest, Progress, Route,
};
use weightport_engine::{ThreadsOutOfRange, Workers, MAX_THREADS};

use crate::args::RunArgs;
use crate::job::{self, Job, PlannedOutput};
use crate::output::{convert_options, human, io_json, p, Global};
use crate::state::{self, FileDigest, Hashes, InputFile, Material, Record, Stat, State};
use crate::Failure;

/// The record an output would get now, before its inputs and files are known.
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
        inputs: Vec::new(),
        job_file: None,
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

/// `Ok` when `rec` still describes output `o` (`Some`: its inputs' stats refreshed, for
/// inputs that had to be hashed to show them unchanged); else why not.
fn record_holds(
    rec: &Record,
    o: &PlannedOutput,
    hashes: &mut Hashes,
) -> Result<Option<Vec<InputFile>>, String> {
    let now = expected_record(o);
    if rec.recipe != now.recipe {
        return Err("its options changed".into());
    }
    let refreshed = state::inputs_hold(rec, o, hashes)?;
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
        match weightport_provenance::sha256_file(&path) {
            Ok(h) if h == f.sha256 => {}
            Ok(_) => return Err(format!("{} changed", p(&path))),
            Err(_) => return Err(format!("{} is missing", p(&path))),
        }
    }
    Ok(refreshed)
}

/// Every file a committed output consists of, named relative to the directory it lies in.
/// `known` holds the sha256 of files already hashed ([`hash_made`]); others are hashed here.
fn digests(
    r: &ConvertReport,
    rec: &Record,
    known: &BTreeMap<PathBuf, String>,
) -> Result<(PathBuf, Vec<FileDigest>), Error> {
    let first = r.files.first().map(|f| f.path.clone()).unwrap_or_default();
    let root = first.parent().unwrap_or(Path::new("")).to_path_buf();
    if let Some(a) = &rec.attestation {
        return Ok((root, subjects(a).map_err(Error::Internal)?));
    }
    let mut v = Vec::new();
    for f in files_made(r) {
        let name = f.strip_prefix(&root).unwrap_or(&f).to_string_lossy().into();
        let sha256 = match known.get(&f) {
            Some(h) => h.clone(),
            None => weightport_provenance::sha256_file(&f)?,
        };
        v.push(FileDigest { name, sha256 });
    }
    v.sort();
    Ok((root, v))
}

/// Every file an output consists of: weights, index, companions.
fn files_made(r: &ConvertReport) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = r.files.iter().map(|f| f.path.clone()).collect();
    all.extend(r.index.iter().cloned());
    all.extend(r.copied.iter().cloned());
    all
}

/// The sha256 of every file of the outputs of one read that were made without an
/// attestation (whose subjects already are the digests), hashed several at once: the state's
/// records (one pass per file; a 2.4 GB repo and two GGUFs took 5.5 s one after another).
fn hash_made(
    results: &[Result<ConvertReport, Error>],
    workers: &Workers,
) -> Result<BTreeMap<PathBuf, String>, Error> {
    let files: Vec<PathBuf> = results
        .iter()
        .flatten()
        .filter(|r| !r.dry_run && r.provenance.is_none())
        .flat_map(files_made)
        .collect();
    let sums = weightport_engine::sha256_files(&files, workers)?;
    Ok(files.into_iter().zip(sums).collect())
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
    /// Wall time of the conversion it was made in (shared by the outputs of one read).
    seconds: f64,
}

impl Done {
    fn new(outcome: Outcome, redone: Option<String>, seconds: f64) -> Done {
        Done {
            outcome,
            redone,
            seconds,
        }
    }
}

/// Everything one output needs from the run.
struct Ctx<'a> {
    file: &'a Path,
    dry_run: bool,
    force: bool,
    global: &'a Global,
    json: bool,
}

/// An output to make (or plan): its options, and why it is made again.
struct Pending {
    index: usize,
    opts: ConvertOptions,
    /// The opened input it reads: its paths and open request.
    key: String,
    /// Its route: how its input is opened, the output format.
    route: Route,
    redone: Option<String>,
    /// The stat of each file it lists, taken before it is made.
    before: BTreeMap<PathBuf, Stat>,
}

/// What the run knows of the job's state while it decides what to make.
#[derive(Default)]
struct Decide {
    state: State,
    hashes: Hashes,
    /// Records that hold, with the stats of inputs that had to be hashed to show it.
    refreshed: Vec<(String, Record)>,
}

/// The pipeline's options of every output of `job`, or the first refused (labelled with its
/// output): the whole job is checked before any of it runs.
fn job_options(job: &Job, cx: &Ctx) -> Result<Vec<ConvertOptions>, Error> {
    let mut all = Vec::with_capacity(job.outputs.len());
    for o in &job.outputs {
        let label = |e: Error| match e {
            Error::Usage(m) => Error::Usage(format!("{}: {m}", o.label(&job.file))),
            e => e,
        };
        let asked = &cx.global.workers;
        let workers = Workers::new(
            asked.threads().or(o.threads),
            asked.max_memory().or(o.max_memory),
        )
        .map_err(|ThreadsOutOfRange(n)| {
            label(Error::Usage(format!(
                "threads = {n}: must be between 1 and {MAX_THREADS}"
            )))
        })?;
        let g = Global { workers };
        all.push(convert_options(&o.args, &g, cx.json).map_err(label)?);
    }
    Ok(all)
}

/// Output `o` (number `index` of the job, its options `opts`) to make, or (`Err`) what
/// happened to it already: its record still holds, or its input is refused.
fn pending(
    index: usize,
    o: &PlannedOutput,
    mut opts: ConvertOptions,
    cx: &Ctx,
    d: &mut Decide,
) -> Result<Pending, Box<(Outcome, Option<String>)>> {
    let key = o.args.output.display().to_string();
    let before = state::stats_before(o);
    let redone = match d.state.outputs.get(&key) {
        None => None,
        Some(rec) => match record_holds(rec, o, &mut d.hashes) {
            Ok(fresh) => {
                if let Some(inputs) = fresh {
                    d.refreshed.push((
                        key,
                        Record {
                            inputs,
                            ..rec.clone()
                        },
                    ));
                }
                return Err(Box::new((Outcome::Skipped, None)));
            }
            Err(why) => Some(why),
        },
    };
    let failed = |e| Box::new((Outcome::Failed(e), redone.clone()));
    opts.dry_run |= cx.dry_run;
    // An output this job recorded is its own to replace, and so are the statement and report
    // its record names (not others, when their paths changed).
    opts.force |= cx.force || redone.is_some();
    let rec = d.state.outputs.get(&key);
    for s in &mut opts.side_files {
        let recorded =
            rec.is_some_and(|r| [&r.attestation, &r.report].contains(&&Some(s.path.clone())));
        s.replace |= cx.force || recorded;
    }
    let route = route(&opts).map_err(failed)?;
    Ok(Pending {
        index,
        key: group_key(o.job, &opts, &route.open),
        opts,
        route,
        redone,
        before,
    })
}

/// Where and how a run records what it made.
struct Recorder<'a> {
    /// The state file (none for `convert` with several `-o`).
    path: Option<&'a Path>,
    /// `--force`: a file at the state's path that is not a job state is replaced.
    force: bool,
    job_file: Option<Material>,
    /// sha256 of the input files, hashed after the conversion.
    inputs: Hashes,
}

/// The outputs of a group just made get their statements and reports (as `convert` writes
/// them, after the commit).
fn side_files(g: &Group, job: &Job, cx: &Ctx, results: Results) -> Results {
    let with_side = |m: &Pending, r: ConvertReport| {
        let o = &job.outputs[m.index];
        if !r.dry_run {
            let made_as = json!({"file": cx.file, "job": o.job, "output": o.output,
                                 "line": o.line, "convert": o.argv});
            crate::attest::write_outputs(&o.args, &r, Some(made_as), &m.opts.side_files)?;
        }
        Ok(r)
    };
    g.members
        .iter()
        .zip(results)
        .map(|(m, r)| r.and_then(|r| with_side(m, r)))
        .collect()
}

/// After output `m.index` was made (and its side files written): its record in the state.
fn made(
    o: &PlannedOutput,
    m: &Pending,
    report: ConvertReport,
    rec: &Recorder,
    known: &BTreeMap<PathBuf, String>,
) -> Result<Outcome, Error> {
    if report.dry_run {
        return Ok(Outcome::Planned(Box::new(report)));
    }
    if let Some(path) = rec.path {
        let mut now = expected_record(o);
        (now.root, now.files) = digests(&report, &now, known)?;
        let read: Vec<PathBuf> = report.reads.iter().map(|(f, _)| f.clone()).collect();
        now.inputs = state::inputs_made(&m.before, &read, &rec.inputs);
        now.job_file = rec.job_file.clone();
        let key = o.args.output.display().to_string();
        state::update(path, rec.force, &files_made(&report), |st| {
            st.outputs.insert(key, now);
        })?;
    }
    Ok(Outcome::Made(Box::new(report)))
}

/// The sha256 of the input files of a group's made outputs, for their records: taken from the
/// statements written (their materials: an attested input is not hashed twice), the rest
/// hashed several at once.
fn hash_inputs(
    g: &Group,
    job: &Job,
    results: &Results,
    rec: &mut Recorder,
    workers: &Workers,
) -> Result<(), Error> {
    for (m, r) in g.members.iter().zip(results) {
        if let (Ok(_), Some(a)) = (r, &job.outputs[m.index].args.attest) {
            rec.inputs.seed_from_statement(a);
        }
    }
    rec.inputs.fill(&inputs_of(&g.members, results), workers)
}

/// Every input file the made outputs of a group listed or read, to hash for their records.
fn inputs_of(members: &[Pending], results: &Results) -> BTreeSet<PathBuf> {
    let mut all = BTreeSet::new();
    for (m, r) in members.iter().zip(results) {
        if let Some(r) = r.as_ref().ok().filter(|r| !r.dry_run) {
            all.extend(m.before.keys().cloned());
            all.extend(r.reads.iter().map(|(f, _)| f.clone()));
        }
    }
    all
}

/// Outputs of one `[[job]]` that read one opened input: one read, fanned out to all of them.
struct Group {
    members: Vec<Pending>,
}

/// What one group's read took: the outputs it fed (indices in the job), bytes per input file.
pub(crate) struct GroupRead {
    outputs: Vec<usize>,
    read_bytes: u64,
    files: Vec<(PathBuf, u64)>,
}

/// Pending outputs grouped by the input they read, in the order of their first member.
fn groups(pending: Vec<Pending>) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for p in pending {
        match groups.iter_mut().find(|g| g.members[0].key == p.key) {
            Some(g) => g.members.push(p),
            None => groups.push(Group { members: vec![p] }),
        }
    }
    groups
}

/// Per member of a group, its conversion's report or error; and what each read took.
type Converted = (Results, Vec<GroupRead>);

/// Per output, its conversion's report or error.
type Results = Vec<Result<ConvertReport, Error>>;

/// The key outputs share an input by: the job, the paths, the open request up to whether tied
/// pickle tensors keep every name (`shared_copy`, which [`same_tensors`] settles).
fn group_key(job: usize, opts: &ConvertOptions, req: &OpenRequest) -> String {
    let mut r = req.clone();
    r.read.shared_copy = false;
    format!("{job} {:?} {r:?}", opts.inputs)
}

/// Two opens of one input that list the same tensors of the same files (no tied tensors,
/// so `shared_copy` changed nothing): one read serves both.
fn same_tensors(a: &Input, b: &Input) -> bool {
    let (x, y) = (a.source.as_ref(), b.source.as_ref());
    x.tensors() == y.tensors()
        && x.files() == y.files()
        && x.unconverted() == y.unconverted()
        && (0..x.tensors().len()).all(|i| x.file_of(i) == y.file_of(i))
}

/// Opens a group's input (once per distinct request, once in all when the opens agree) and
/// converts it into every member: one shared read for the members of one open.
fn convert_group(g: &Group, progress: &dyn Progress) -> Result<Converted, Error> {
    let n = g.members.len();
    let mut opened: Vec<(bool, Result<Input, Error>)> = Vec::new();
    let mut which = Vec::with_capacity(n);
    for m in &g.members {
        let sc = m.route.open.read.shared_copy;
        let at = match opened.iter().position(|(s, _)| *s == sc) {
            Some(i) => i,
            None => {
                opened.push((sc, open_inputs(&m.opts.inputs, &m.route.open)));
                opened.len() - 1
            }
        };
        which.push(at);
    }
    if let [(_, Ok(a)), (_, Ok(b))] = opened.as_slice() {
        if same_tensors(a, b) {
            which.iter_mut().for_each(|w| *w = 0);
        }
    }
    let mut results: Vec<Option<Result<ConvertReport, Error>>> = (0..n).map(|_| None).collect();
    let mut reads = Vec::new();
    for (x, (_, input)) in opened.iter().enumerate() {
        let members: Vec<usize> = (0..n).filter(|&i| which[i] == x).collect();
        if members.is_empty() {
            continue;
        }
        let input = match input {
            Ok(i) => i,
            Err(Error::Interrupted) => return Err(Error::Interrupted),
            Err(e) => {
                for &i in &members {
                    results[i] = Some(Err(Error::Usage(e.to_string())));
                }
                continue;
            }
        };
        let ms: Vec<&Pending> = members.iter().map(|&i| &g.members[i]).collect();
        let (rs, read) = convert_members(input, &ms, progress)?;
        reads.extend(read);
        for (i, r) in members.into_iter().zip(rs) {
            results[i] = Some(r);
        }
    }
    let results = results
        .into_iter()
        .map(|r| r.expect("every member converted"));
    Ok((results.collect(), reads))
}

/// Converts one opened input into `members` (one shared read when there are several).
fn convert_members(
    input: &Input,
    members: &[&Pending],
    progress: &dyn Progress,
) -> Result<(Results, Option<GroupRead>), Error> {
    let indices: Vec<usize> = members.iter().map(|m| m.index).collect();
    if let [one] = members {
        let r = convert_input(input, &one.opts, &one.route, progress);
        let read = r.as_ref().ok().filter(|r| !r.dry_run).map(|r| GroupRead {
            outputs: indices,
            read_bytes: r.read_bytes,
            files: r.reads.clone(),
        });
        return Ok((vec![r], read));
    }
    let outputs: Vec<(ConvertOptions, Route)> = members
        .iter()
        .map(|m| (m.opts.clone(), m.route.clone()))
        .collect();
    let many = convert_many(input, &outputs, progress)?;
    let read = (!outputs[0].0.dry_run).then(|| GroupRead {
        outputs: indices,
        read_bytes: many.read_bytes,
        files: many.reads.clone(),
    });
    Ok((many.outputs, read))
}

/// `weightport run JOB.toml`.
pub(crate) fn run(
    a: &RunArgs,
    global: &Global,
    json: bool,
    progress: &dyn Progress,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let job = job::load(&a.job)?;
    run_job(&job, (a.dry_run, a.force), global, json, progress, out)
}

/// Makes (or with `dry_run`, plans) every output of `job`; `force` replaces existing outputs.
pub(crate) fn run_job(
    job: &Job,
    (dry_run, force): (bool, bool),
    global: &Global,
    json: bool,
    progress: &dyn Progress,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let t0 = Instant::now();
    state::check_path(job, force)?;
    let mut d = Decide::default();
    if let Some(s) = &job.state {
        d.state = state::load(s).or_else(|e| if force { Ok(State::default()) } else { Err(e) })?;
    }
    let cx = Ctx {
        file: &job.file,
        dry_run,
        force,
        global,
        json,
    };
    let opts = job_options(job, &cx)?;
    let mut done: Vec<Option<Done>> = job.outputs.iter().map(|_| None).collect();
    let mut todo = Vec::new();
    for ((i, o), opts) in job.outputs.iter().enumerate().zip(opts) {
        match pending(i, o, opts, &cx, &mut d) {
            Ok(p) => todo.push(p),
            Err(b) => done[i] = Some(Done::new(b.0, b.1, 0.0)),
        }
    }
    let (todo, _locks) = lock_side_files(todo, &mut done);
    let mut rec = Recorder {
        path: job.state.as_deref().filter(|_| !dry_run),
        force,
        job_file: job.state.as_ref().and_then(|_| state::job_material(job)),
        inputs: std::mem::take(&mut d.hashes),
    };
    refresh(&rec, std::mem::take(&mut d.refreshed))?;
    let mut reads = Vec::new();
    for g in groups(todo) {
        let t = Instant::now();
        let (results, read) = convert_group(&g, progress)?;
        reads.extend(read);
        let results = side_files(&g, job, &cx, results);
        let known = match rec.path {
            Some(_) => {
                hash_inputs(&g, job, &results, &mut rec, &global.workers)?;
                hash_made(&results, &global.workers)?
            }
            None => BTreeMap::new(),
        };
        let secs = t.elapsed().as_secs_f64();
        for (m, r) in g.members.into_iter().zip(results) {
            let o = &job.outputs[m.index];
            let outcome = match r.and_then(|r| made(o, &m, r, &rec, &known)) {
                Ok(x) => x,
                Err(Error::Interrupted) => return Err(Error::Interrupted.into()),
                Err(e) => Outcome::Failed(e),
            };
            done[m.index] = Some(Done::new(outcome, m.redone, secs));
        }
    }
    let done: Vec<Done> = done
        .into_iter()
        .map(|d| d.expect("every output done"))
        .collect();
    for (o, d) in job.outputs.iter().zip(&done) {
        if let Outcome::Failed(e) = &d.outcome {
            eprintln!("weightport: {}: {e}", o.label(&job.file));
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    if json {
        writeln!(out, "{}", run_json(job, &done, &reads, dry_run, secs))?;
    } else {
        run_text(job, &done, &reads, out)?;
    }
    finish(job, &done)
}

/// The pending outputs whose side files could be locked, and the locks (held until the run
/// ends); an output whose side file another run is writing is failed now, before any runs.
fn lock_side_files(
    todo: Vec<Pending>,
    done: &mut [Option<Done>],
) -> (Vec<Pending>, Vec<weightport_core::staging::OutputLock>) {
    let mut locks = Vec::new();
    let mut kept = Vec::with_capacity(todo.len());
    for p in todo {
        match crate::attest::lock_side_files(&p.opts) {
            Ok(l) => {
                locks.extend(l);
                kept.push(p);
            }
            Err(e) => done[p.index] = Some(Done::new(Outcome::Failed(e), p.redone, 0.0)),
        }
    }
    (kept, locks)
}

/// Records that still hold but whose inputs had to be hashed to show it get the inputs' new
/// stats (so the next run need not hash them), where the record on disk is still the one
/// checked.
fn refresh(rec: &Recorder, refreshed: Vec<(String, Record)>) -> Result<(), Error> {
    let Some(path) = rec.path.filter(|_| !refreshed.is_empty()) else {
        return Ok(());
    };
    state::update(path, rec.force, &[], |st| {
        for (key, fresh) in refreshed {
            if let Some(r) = st.outputs.get_mut(&key) {
                if (&r.recipe, &r.files) == (&fresh.recipe, &fresh.files) {
                    r.inputs = fresh.inputs;
                }
            }
        }
    })
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
        "read_bytes": r.read_bytes,
        "io": io_json(&r.io),
    })
}

/// The I/O of every output made.
fn io_total(done: &[Done]) -> IoCounts {
    let mut sum = IoCounts::default();
    for d in done {
        if let Outcome::Made(r) = &d.outcome {
            sum += r.io;
        }
    }
    sum
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

/// The reads of a run in `--json`.
fn reads_json(reads: &[GroupRead]) -> Value {
    let files = |f: &[(PathBuf, u64)]| -> Vec<Value> {
        f.iter()
            .map(|(p, n)| json!({"path": p.display().to_string(), "bytes": n}))
            .collect()
    };
    reads
        .iter()
        .map(
            |g| json!({"outputs": g.outputs, "read_bytes": g.read_bytes, "files": files(&g.files)}),
        )
        .collect()
}

fn run_json(job: &Job, done: &[Done], reads: &[GroupRead], dry_run: bool, secs: f64) -> Value {
    let [made, skipped, planned, failed] = counts(done);
    let (needed, free) = disk(done);
    json!({
        "ok": failed == 0,
        "command": if job.state.is_some() { "run" } else { "convert" },
        "job_file": job.state.as_ref().map(|_| job.file.display().to_string()),
        "state": job.state.as_ref().map(|s| s.display().to_string()),
        "dry_run": dry_run,
        "made": made,
        "skipped": skipped,
        "planned": planned,
        "failed": failed,
        "needed_bytes": needed,
        "free_bytes": free,
        "outputs": job.outputs.iter().zip(done).map(|(o, d)| output_json(o, d)).collect::<Vec<_>>(),
        "reads": reads_json(reads),
        "io": io_json(&io_total(done)),
        "seconds": secs,
    })
}

/// One line per output on stdout (failures are also on stderr, as they happen).
fn run_text(
    job: &Job,
    done: &[Done],
    reads: &[GroupRead],
    out: &mut impl Write,
) -> std::io::Result<()> {
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
    for g in reads.iter().filter(|g| g.outputs.len() > 1) {
        let names: Vec<String> = g
            .outputs
            .iter()
            .map(|&i| p(&job.outputs[i].args.output))
            .collect();
        writeln!(
            out,
            "one read of {} for {}",
            human(g.read_bytes),
            weightport_core::sanitize(&names.join(", "))
        )?;
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
