//! A job's state file (`weightport run`): per output, the record of the run that made it.
//!
//! A record holds what decides the output's bytes by content: the options, every input file
//! (weights, index, configs, tokenizer files, the importance matrix) with its sha256, the job
//! file's sha256; and what the output is (every file with its sha256). A rerun tells whether an
//! input changed cheaply: a file whose size, mtime, ctime and inode are the recorded ones, and
//! whose ctime was already old when it was recorded, is unchanged without being read (any write
//! sets the ctime, which `touch -r` does not put back; a replaced file has another inode); any
//! other file is hashed and compared with its recorded sha256.
//!
//! The file is a side file of the job: it never replaces the job file, an input, an output, a
//! statement or report, or an existing file that is not a job state (unless `--force`); it is
//! written through a temp file (fsynced, renamed into place) under a lock, each update merged
//! into what is on disk then, so runs at once sharing one state keep every record.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weightport_core::staging::OutputLock;
use weightport_core::Error;
use weightport_engine::sha256_files;
use weightport_engine::side::SideFile;
use weightport_engine::Workers;
use weightport_provenance::sha256_file;

use crate::job::{Job, PlannedOutput};
use crate::remote::{is_view, RemoteId};
use crate::render::p;

/// Version of the state file (2: inputs by content, ctime and inode).
const VERSION: u32 = 2;

/// A file whose ctime is this close to the moment its stat was recorded (or later) may have
/// been written again within the clock's granularity without its stat changing: it is hashed.
const RACY_NS: i128 = 2_000_000_000;

/// The job's state file: per output path, the record of the run that made it.
#[derive(Serialize, Deserialize, Default)]
pub(crate) struct State {
    version: u32,
    pub outputs: BTreeMap<String, Record>,
}

/// What made an output, and what it is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct Record {
    pub recipe: Value,
    /// Every input file the output was made from, with its sha256.
    pub inputs: Vec<InputFile>,
    /// The job file, by content (the recipe holds what it says for this output).
    #[serde(default)]
    pub job_file: Option<Material>,
    pub attestation: Option<PathBuf>,
    pub report: Option<PathBuf>,
    /// The directory `files` are named relative to.
    pub root: PathBuf,
    pub files: Vec<FileDigest>,
}

/// A file by content.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct Material {
    pub path: PathBuf,
    pub sha256: String,
}

/// What `stat` tells of a file, enough to show it unchanged without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stat {
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
}

/// An input file as recorded: its stat when recorded, and its sha256 (none when it changed
/// while it was hashed: then it is never taken as unchanged).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct InputFile {
    pub path: PathBuf,
    size: u64,
    mtime_ns: i128,
    #[serde(default)]
    ctime_ns: i128,
    #[serde(default)]
    ino: u64,
    #[serde(default)]
    sha256: Option<String>,
    /// When the stat was taken, ns since the epoch.
    #[serde(default)]
    checked_ns: i128,
    /// A file of a remote input: `path` is its address (a Hub file's with the commit its
    /// revision was resolved to), and it is unchanged when that address, its sha256 and its
    /// ETag are the ones recorded (no stat: the view it was read through is a temp directory).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    remote: bool,
    /// The ETag a remote file's ranged reads were pinned to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    etag: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FileDigest {
    pub name: String,
    pub sha256: String,
}

fn now_ns() -> i128 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    d.map_or(0, |d| d.as_nanos() as i128)
}

/// The stat of the file at `path` (symlinks followed: the content is what counts), `None` when
/// it is not a readable regular file.
pub(crate) fn stat_of(path: &Path) -> Option<Stat> {
    let m = std::fs::metadata(path).ok().filter(|m| m.is_file())?;
    Some(Stat {
        size: m.size(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        ino: m.ino(),
    })
}

impl InputFile {
    fn stat(&self) -> Stat {
        Stat {
            size: self.size,
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
            ino: self.ino,
        }
    }

    fn new(path: PathBuf, stat: Stat, sha256: Option<String>, checked_ns: i128) -> InputFile {
        InputFile {
            path,
            size: stat.size,
            mtime_ns: stat.mtime_ns,
            ctime_ns: stat.ctime_ns,
            ino: stat.ino,
            sha256,
            checked_ns,
            remote: false,
            etag: None,
        }
    }

    /// A file of a remote input, by its identity.
    fn remote(id: RemoteId, checked_ns: i128) -> InputFile {
        InputFile {
            path: PathBuf::from(id.address),
            size: id.len,
            mtime_ns: 0,
            ctime_ns: 0,
            ino: 0,
            sha256: id.sha256,
            checked_ns,
            remote: true,
            etag: id.etag,
        }
    }

    /// What shows a remote file unchanged: its address, sha256 and ETag.
    fn remote_identity(&self) -> (&Path, u64, Option<&str>, Option<&str>) {
        let (sha, etag) = (self.sha256.as_deref(), self.etag.as_deref());
        (self.path.as_path(), self.size, sha, etag)
    }

    /// `now` shows the file unchanged without reading it.
    fn proven_by(&self, now: Stat) -> bool {
        self.stat() == now && now.ctime_ns < self.checked_ns - RACY_NS
    }
}

/// The sha256 of input files hashed in this run, with the stat each had (the same before and
/// after it was read).
#[derive(Default)]
pub(crate) struct Hashes(BTreeMap<PathBuf, (Stat, String)>);

impl Hashes {
    /// The sha256 of `path` as it is now; `None` when it cannot be read or changed while read.
    fn now(&mut self, path: &Path) -> Option<String> {
        let before = stat_of(path)?;
        if let Some((_, h)) = self.0.get(path).filter(|(s, _)| *s == before) {
            return Some(h.clone());
        }
        let h = sha256_file(path).ok()?;
        (stat_of(path)? == before).then(|| {
            self.0.insert(path.to_path_buf(), (before, h.clone()));
            h
        })
    }

    /// Takes the sha256 of the materials of the in-toto statement at `file` (written just now
    /// by this run, which hashed them after the commit) for the files whose stat is what it
    /// is now: those need not be read again.
    pub(crate) fn seed_from_statement(&mut self, file: &Path) {
        let Ok(text) = std::fs::read(file) else {
            return;
        };
        let st: Value = serde_json::from_slice(&text).unwrap_or(Value::Null);
        let materials = st["predicate"]["materials"]
            .as_array()
            .into_iter()
            .flatten();
        for m in materials {
            let (Some(name), Some(h)) = (m["name"].as_str(), m["digest"]["sha256"].as_str()) else {
                continue;
            };
            let path = PathBuf::from(name);
            if let Some(now) = stat_of(&path) {
                self.0.entry(path).or_insert((now, h.to_string()));
            }
        }
    }

    /// Hashes `paths` not yet hashed at their current stat, several at once.
    pub(crate) fn fill(
        &mut self,
        paths: &BTreeSet<PathBuf>,
        workers: &Workers,
    ) -> Result<(), Error> {
        let todo = self.unhashed(paths);
        let files: Vec<PathBuf> = todo.iter().map(|(p, _)| p.clone()).collect();
        let sums = sha256_files(&files, workers)?;
        self.record(todo, sums.into_iter().map(Some));
        Ok(())
    }

    /// Those of `paths` not yet hashed at their current stat, with that stat.
    pub(crate) fn unhashed(&self, paths: &BTreeSet<PathBuf>) -> Vec<(PathBuf, Stat)> {
        paths
            .iter()
            .filter_map(|p| Some((p.clone(), stat_of(p)?)))
            .filter(|(p, s)| self.0.get(p).is_none_or(|(had, _)| had != s))
            .collect()
    }

    /// Keeps the sha256 of each file of `todo` (from [`Hashes::unhashed`]) whose stat is still
    /// the one taken before it was hashed; a file not hashed (`None`) is left for a later fill.
    pub(crate) fn record(
        &mut self,
        todo: Vec<(PathBuf, Stat)>,
        sums: impl IntoIterator<Item = Option<String>>,
    ) {
        for ((path, before), h) in todo.into_iter().zip(sums) {
            if let Some(h) = h.filter(|_| stat_of(&path) == Some(before)) {
                self.0.insert(path, (before, h));
            }
        }
    }
}

/// Every input file output `o` names: its input files, the top-level files of an input
/// directory (dot files excepted), its importance matrix.
pub(crate) fn listing(o: &PlannedOutput) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for i in &o.args.inputs {
        match std::fs::read_dir(i) {
            Ok(rd) => files.extend(
                rd.filter_map(|e| e.ok())
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .map(|e| e.path()),
            ),
            Err(_) => files.push(i.clone()),
        }
    }
    files.extend(o.args.quant.imatrix.iter().cloned());
    files.extend(o.args.quant.metadata.iter().cloned());
    files.retain(|f| f.is_file());
    files.sort();
    files.dedup();
    files
}

/// The stat of every local file of `o`'s listing, taken before it is made (a remote input's
/// files are recorded by [`remote_inputs`]).
pub(crate) fn stats_before(o: &PlannedOutput) -> BTreeMap<PathBuf, Stat> {
    listing(o)
        .into_iter()
        .filter(|f| !is_view(f))
        .filter_map(|f| Some((f.clone(), stat_of(&f)?)))
        .collect()
}

/// `Ok(None)` when every input of `rec` is unchanged as `o` lists them now, `Ok(Some(inputs))`
/// when they are but some had to be hashed to show it (the record's stats, refreshed), else
/// why not.
pub(crate) fn inputs_hold(
    rec: &Record,
    o: &PlannedOutput,
    hashes: &mut Hashes,
) -> Result<Option<Vec<InputFile>>, String> {
    remote_hold(rec, o)?;
    let recorded: BTreeSet<&Path> = rec.inputs.iter().map(|f| f.path.as_path()).collect();
    let local = listing(o).into_iter().filter(|f| !is_view(f));
    if let Some(new) = local.into_iter().find(|f| !recorded.contains(f.as_path())) {
        return Err(format!("{} is a new input file", p(&new)));
    }
    let mut inputs = rec.inputs.clone();
    let mut refreshed = false;
    for f in inputs.iter_mut().filter(|f| !f.remote) {
        let changed = || format!("an input file changed: {}", p(&f.path));
        let gone = || format!("an input file is gone: {}", p(&f.path));
        let now = stat_of(&f.path).ok_or_else(gone)?;
        if f.proven_by(now) {
            continue;
        }
        let h = hashes.now(&f.path).ok_or_else(changed)?;
        if f.sha256.as_deref() != Some(h.as_str()) {
            return Err(changed());
        }
        *f = InputFile::new(f.path.clone(), now, Some(h), now_ns());
        refreshed = true;
    }
    Ok(refreshed.then_some(inputs))
}

/// `Ok` when the remote input files of `rec` are those of `o`'s views now: the same addresses
/// (a Hub revision resolved to the same commit), sha256 and ETags; else why not. Each file
/// read by ranges is opened for its ETag (one request; the conversion reuses the object).
fn remote_hold(rec: &Record, o: &PlannedOutput) -> Result<(), String> {
    let mut listed = BTreeMap::new();
    for f in remote_files(o, &[]) {
        if let Some(n) = remote_file(&f)? {
            listed.insert(n.path.clone(), n);
        }
    }
    for r in rec.inputs.iter().filter(|r| r.remote) {
        // A file the conversion read beyond the listing (a gguf-split set's other parts beside
        // the part named) is found in the views by its address.
        let beside = || match weightport_remote::view_file(&r.path.to_string_lossy()) {
            Some(f) => remote_file(&f),
            None => Ok(None),
        };
        let now = match listed.remove(&r.path) {
            Some(n) => Some(n),
            None => beside()?,
        };
        match now {
            Some(n) if n.remote_identity() == r.remote_identity() => {}
            Some(_) => return Err(format!("a remote input file changed: {}", p(&r.path))),
            None => {
                return Err(format!(
                    "a remote input file is not at the commit or address recorded: {}",
                    p(&r.path)
                ))
            }
        }
    }
    match listed.into_keys().next() {
        Some(new) => Err(format!("{} is a new input file", p(&new))),
        None => Ok(()),
    }
}

/// The identity now of the view's file at `path` (`None`: not a view's file).
fn remote_file(path: &Path) -> Result<Option<InputFile>, String> {
    match crate::remote::identity(path) {
        None => Ok(None),
        Some(id) => Ok(Some(InputFile::remote(id.map_err(|e| e.to_string())?, 0))),
    }
}

/// The files of `o`'s remote inputs' views it lists or `read`, sorted (the files of a view a
/// conversion read beyond its listing: a gguf-split set's other parts beside a file named).
fn remote_files(o: &PlannedOutput, read: &[PathBuf]) -> BTreeSet<PathBuf> {
    let listed = listing(o).into_iter().filter(|f| is_view(f));
    listed.chain(read.iter().cloned()).collect()
}

/// The remote input files of an output just made (its remote listing and the remote files
/// it read), by identity.
pub(crate) fn remote_inputs(o: &PlannedOutput, read: &[PathBuf]) -> Result<Vec<InputFile>, Error> {
    let at = now_ns();
    let mut v = Vec::new();
    for f in remote_files(o, read) {
        if let Some(id) = crate::remote::identity(&f) {
            v.push(InputFile::remote(id?, at));
        }
    }
    v.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(v)
}

/// The input files of an output just made (its listing and every file the conversion read),
/// each with the stat it had before (`before`) and its sha256 when the file was hashed at that
/// stat (`hashes`, filled after the conversion).
pub(crate) fn inputs_made(
    listed: &BTreeMap<PathBuf, Stat>,
    read: &[PathBuf],
    hashes: &Hashes,
) -> Vec<InputFile> {
    let mut all: BTreeSet<PathBuf> = listed.keys().cloned().collect();
    all.extend(read.iter().cloned());
    let at = now_ns();
    all.into_iter()
        .filter_map(|path| {
            let hashed = hashes.0.get(&path);
            let stat = listed.get(&path).copied().or(hashed.map(|h| h.0))?;
            let sha = hashed.filter(|(s, _)| *s == stat).map(|(_, h)| h.clone());
            Some(InputFile::new(path, stat, sha, at))
        })
        .collect()
}

/// The job file by content.
pub(crate) fn job_material(job: &Job) -> Option<Material> {
    let sha256 = sha256_file(&job.file).ok()?;
    Some(Material {
        path: std::path::absolute(&job.file).unwrap_or_else(|_| job.file.clone()),
        sha256,
    })
}

/// `path` absolute with `.` and `..` resolved and the symlinks of its longest existing
/// ancestor resolved: two spellings of one place compare equal.
fn resolved(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut lexical = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                lexical.pop();
            }
            Component::CurDir => {}
            other => lexical.push(other),
        }
    }
    let mut head = lexical.clone();
    let mut tail = Vec::new();
    while !head.exists() {
        match head.file_name() {
            Some(n) => tail.push(n.to_os_string()),
            None => break,
        }
        head.pop();
    }
    let mut out = std::fs::canonicalize(&head).unwrap_or(head);
    out.extend(tail.iter().rev());
    out
}

/// What the state file must never replace or lie in, by resolved path, with what it is and
/// whether it is an input (in an input directory a dot file may lie: no input listing takes
/// dot files).
fn never_replaced(job: &Job) -> Vec<(PathBuf, String, bool)> {
    let mut v = vec![(resolved(&job.file), "the job file".to_string(), false)];
    for o in &job.outputs {
        let a = &o.args;
        v.push((
            resolved(&a.output),
            format!("output {}", p(&a.output)),
            false,
        ));
        for side in a.attest.iter().chain(&a.report) {
            let what = format!("{} (a statement or report)", p(side));
            v.push((resolved(side), what, false));
        }
        for i in a
            .inputs
            .iter()
            .chain(&a.quant.imatrix)
            .chain(&a.quant.metadata)
        {
            v.push((resolved(i), format!("input {}", p(i)), true));
        }
    }
    v
}

/// Refuses a state path that is (or lies in) the job file, an output, a statement, a report
/// or an input (but for a dot file in an input directory); and an existing file that is not a
/// job state, unless `force`.
pub(crate) fn check_path(job: &Job, force: bool) -> Result<(), Error> {
    let Some(state) = &job.state else {
        return Ok(());
    };
    let s = resolved(state);
    let refuse = |what: &str| {
        Error::Usage(format!(
            "{}: the job's state file would replace {what}; give `state` another path",
            p(state)
        ))
    };
    let dot = s
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with('.'));
    for (path, what, input) in never_replaced(job) {
        if s == path {
            return Err(refuse(&what));
        }
        if s.starts_with(&path) && !(input && dot) {
            return Err(refuse(&format!("a file in {what}")));
        }
    }
    if std::fs::symlink_metadata(state).is_ok_and(|m| !m.is_file()) {
        return Err(refuse("something that is not a regular file"));
    }
    match load(state) {
        Err(_) if force => Ok(()),
        r => r.map(|_| ()),
    }
}

/// Reads the state at `path` (none yet: empty).
pub(crate) fn load(path: &Path) -> Result<State, Error> {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(State::default()),
        Err(e) => return Err(Error::io(path, "read", e)),
    };
    serde_json::from_slice(&text).map_err(|e| {
        Error::Usage(format!(
            "{}: not a weightport job state ({e}); it is not replaced: remove it to make every \
             output again, or run with --force to replace it",
            p(path)
        ))
    })
}

/// Applies `change` to the state at `path` under its lock, merged into what is on disk then
/// (another run may have recorded outputs since this one read it), and writes it atomically:
/// a temp file beside it, fsynced, renamed into place, the directory fsynced. `made` are the
/// files of this run's outputs: the state never replaces one of them. `force`: a file there
/// that is not a job state is replaced.
pub(crate) fn update(
    path: &Path,
    force: bool,
    made: &[PathBuf],
    change: impl FnOnce(&mut State),
) -> Result<(), Error> {
    let s = resolved(path);
    if let Some(f) = made.iter().find(|f| resolved(f) == s) {
        return Err(Error::Usage(format!(
            "{}: the job's state file would replace output file {}; not recorded: give \
             `state` another path",
            p(path),
            p(f)
        )));
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create", e))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let _lock = OutputLock::wait(&dir.join(format!(".{}.lock", name.unwrap_or_default())))?;
    let mut state = match load(path) {
        Err(_) if force => State::default(),
        r => r?,
    };
    change(&mut state);
    state.version = VERSION;
    let mut text = serde_json::to_vec_pretty(&state)
        .map_err(|e| Error::Internal(format!("job state: {e}")))?;
    text.push(b'\n');
    weightport_engine::side::write(&SideFile::new("state", path).replacing(true), &text)
}
