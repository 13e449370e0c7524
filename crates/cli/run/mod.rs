//! `weightport run JOB.toml` (and `convert` with several `-o`): every output of a job, each its
//! own verified transaction (a failed output does not undo the others), resumable.
//!
//! Outputs of one `[[job]]` whose inputs are opened alike are made from one read of the input
//! (`pipeline::convert_many`: one executor pass for all of them, each input byte taken once;
//! see docs/design-notes.md).
//!
//! Resuming: after an output is committed, the job's state file ([`state`]) records what
//! made it (its options, every input file with its sha256, the job file's, the weightport
//! version) and what it is (every file with its sha256: the attestation's subjects when one
//! was asked for). A rerun skips an output whose record still holds: same options, inputs
//! unchanged (by stat where that proves it, else by sha256), every file there with its sha256,
//! the attestation (and report) still there. Any other output is made again, replacing what
//! the record says this job made; an output that exists without a record is refused (exit 2)
//! unless `force`.

mod groups;
mod records;
mod render;
mod state;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{json, Value};
use weightport_core::{Error, IoCounts};
use weightport_engine::{
    convert_input, convert_many, open_inputs, route, sha256_files_beside, ConvertOptions,
    ConvertReport, Input, OpenRequest, Progress, Route,
};
use weightport_engine::{ThreadsOutOfRange, Workers, MAX_THREADS};

use crate::args::RunArgs;
use crate::job::{self, Job, PlannedOutput};
use crate::options::{convert_options, Global};
use crate::render::{human, io_json, p};
use crate::Failure;
use state::{FileDigest, Hashes, InputFile, Material, Record, Stat, State};

use groups::*;
use records::*;
use render::*;

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

/// Where and how a run records what it made.
struct Recorder<'a> {
    /// The state file (none for `convert` with several `-o`).
    path: Option<&'a Path>,
    /// `--force`: a file at the state's path that is not a job state is replaced.
    force: bool,
    job_file: Option<Material>,
    /// sha256 of the input files, hashed beside the conversion and after it (the files it read
    /// that its inputs did not list).
    inputs: Hashes,
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

/// `weightport run JOB.toml`.
pub(crate) fn run(
    a: &RunArgs,
    global: &Global,
    json: bool,
    progress: &dyn Progress,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let mut job = job::load(&a.job)?;
    crate::overlaps::refuse(&job)?;
    // Each remote input laid out once, its view kept until every output that reads it is made.
    let max_memory = global.workers.max_memory();
    let _views = crate::remote::localize_job(&mut job, a.dry_run, max_memory)?;
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
        let (results, read) = convert_hashing_inputs(&g, job, &mut rec, progress)?;
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
