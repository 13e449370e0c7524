//! The plan file: what `weightport plan` writes and `unit`/`finish` read.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use weightport_core::registry::ExtraContent;
use weightport_core::{shown, Error, Location, Result};

use super::balance::{split, UnitSplit};
use weightport_engine::side::{self, SideFile};
use weightport_engine::{ConvertOptions, Job};

use super::job::{with_job, JobCosts};
use super::layout::{layout, Layout};

/// Version of the plan file (`weightport_plan`).
pub const PLAN_VERSION: u64 = 3;
/// Input files up to this size are hashed whole; larger ones by their first [`HEAD`] bytes.
const WHOLE: u64 = 16 << 20;
const HEAD: u64 = 1 << 20;

/// What `plan` wrote.
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct PlannedUnits {
    /// The plan file.
    pub plan: PathBuf,
    /// The output it plans.
    pub output: PathBuf,
    /// The staging directory units write into.
    pub staging: PathBuf,
    /// Output weights files (path, size).
    pub files: Vec<(PathBuf, u64)>,
    /// Per unit: tensors, part bytes, output files it writes whole.
    pub units: Vec<(usize, u64, Vec<PathBuf>)>,
    /// Output tensors.
    pub tensors: usize,
    /// Input files whose identity the plan records.
    pub input_files: usize,
}

/// A plan file as read back.
#[derive(Debug, Clone)]
pub struct UnitPlan {
    /// Where it was read from.
    pub path: PathBuf,
    /// The convert arguments (after the command name) the plan was made from.
    pub command: Vec<String>,
    /// The inputs, absolute.
    pub inputs: Vec<PathBuf>,
    /// The output, absolute.
    pub output: PathBuf,
    /// Where units stage their parts.
    pub staging: PathBuf,
    pub(crate) fingerprint: String,
    pub(crate) identities: Vec<Value>,
    /// Per unit, the output tensors (indices in output order) it writes.
    pub units: Vec<Vec<usize>>,
    /// sha256 of the plan document (without this field): what unit records must name.
    pub(crate) plan_sha256: String,
    /// Output weights files, in plan order.
    pub(crate) files: Vec<PlanFile>,
    /// Per output tensor: (file, absolute offset of its data in that file).
    pub(crate) at: Vec<(usize, u64)>,
    /// Per output tensor: its length in bytes.
    pub(crate) bytes: Vec<u64>,
    /// Per output tensor: its name.
    pub(crate) tensor_names: Vec<String>,
    /// Per unit: the byte ranges of output files it writes, each staged as one part file
    /// (or, `in_place`, written into the output file's one shared staging file).
    pub(crate) segments: Vec<Vec<Segment>>,
    /// `plan --in-place`: units write their tensors straight into one staging file per output
    /// file, at their offsets in it, and `finish` publishes that file (no parts to append).
    pub in_place: bool,
}

/// An output weights file of a plan.
#[derive(Debug, Clone)]
pub(crate) struct PlanFile {
    /// Final path.
    pub path: PathBuf,
    /// Exact size.
    pub size: u64,
    /// Bytes before its first tensor's data (header, alignment padding).
    pub data_start: u64,
}

/// A unit's share of one output file: its bytes `[start, end)`. The segments of a file
/// partition it; the first (from 0) leaves the header's room as zeros, `finish` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(crate) struct Segment {
    /// Index into the plan's files.
    pub file: usize,
    /// First byte, in the output file.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

impl UnitPlan {
    /// The segments of output file `f` in file order, as (unit, index in the unit, segment).
    pub(crate) fn segments_of_file(&self, f: usize) -> Vec<(usize, usize, Segment)> {
        let mut v: Vec<(usize, usize, Segment)> = self
            .segments
            .iter()
            .enumerate()
            .flat_map(|(u, segs)| segs.iter().enumerate().map(move |(j, s)| (u, j, *s)))
            .filter(|(_, _, s)| s.file == f)
            .collect();
        v.sort_by_key(|(_, _, s)| (s.start, s.end));
        v
    }
}

/// The staging directory of `output`: `.NAME.wp-units` beside it.
pub(super) fn staging_of(output: &Path) -> PathBuf {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    dir.join(format!(".{name}.wp-units"))
}

fn sha256_of(path: &Path, limit: u64) -> Result<String> {
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let mut h = Sha256::new();
    let mut r = f.take(limit);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = r.read(&mut buf).map_err(|e| Error::io(path, "read", e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("{:x}", h.finalize()))
}

/// How a plan records, names and checks input files that are not local files: a remote
/// input's view (laid out by the caller, weightport-remote). Set once by the caller that lays
/// remote inputs out ([`set_remote_inputs`]); without it every input file is local.
#[derive(Debug, Clone, Copy)]
pub struct RemoteInputs {
    /// The identity of the input file at `path` when it is a remote input's file: a document
    /// with its `path` (the remote address, pinned: a Hub file at its commit), `size`,
    /// `sha256` (published, or `null`), `etag` and `hashed: "remote"`; `None` for a local file.
    pub identity: fn(&Path) -> Option<Result<Value>>,
    /// The identity now of the remote file a plan recorded at `address` (of the inputs laid
    /// out for this process from the plan's pinned addresses).
    pub now: fn(&str) -> Result<Value>,
    /// How a plan names the input file at `path`: a remote file by its address.
    pub name: fn(&Path) -> String,
}

fn remote_inputs() -> &'static std::sync::RwLock<Option<RemoteInputs>> {
    static R: std::sync::OnceLock<std::sync::RwLock<Option<RemoteInputs>>> =
        std::sync::OnceLock::new();
    R.get_or_init(Default::default)
}

/// Sets how plans record, name and check remote input files (see [`RemoteInputs`]).
pub fn set_remote_inputs(r: Option<RemoteInputs>) {
    *remote_inputs().write().unwrap_or_else(|e| e.into_inner()) = r;
}

fn remote() -> Option<RemoteInputs> {
    *remote_inputs().read().unwrap_or_else(|e| e.into_inner())
}

/// How a plan names input file `path`.
fn input_name(path: &Path) -> String {
    match remote() {
        Some(r) => (r.name)(path),
        None => path.display().to_string(),
    }
}

/// Size, mtime, ctime, inode and sha256 (whole for small files, of the first MiB for large
/// ones) of `path`; a remote input's file by its address, sha256 and ETag ([`RemoteInputs`]).
fn identity(path: &Path) -> Result<Value> {
    if let Some(id) = remote().and_then(|r| (r.identity)(path)) {
        return id;
    }
    let m = std::fs::metadata(path).map_err(|e| Error::io(path, "stat", e))?;
    let whole = m.len() <= WHOLE;
    Ok(json!({
        "path": path.display().to_string(),
        "size": m.len(),
        "mtime_ns": m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
        "ctime_ns": m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128,
        "ino": m.ino(),
        "sha256": sha256_of(path, if whole { WHOLE } else { HEAD })?,
        "hashed": if whole { "whole" } else { "first-mib" },
    }))
}

/// Every file the job's output depends on: weights, copied companions, the repo's top-level
/// files (config, tokenizer, index), deduplicated and sorted.
fn input_files(job: &Job) -> Vec<PathBuf> {
    let mut v = job.source().files();
    for e in &job.output_plan().extras {
        if let ExtraContent::CopyOf(p) = &e.content {
            v.push(p.clone());
        }
    }
    if let Some(dir) = job.repo_dir() {
        if let Ok(rd) = std::fs::read_dir(dir) {
            v.extend(rd.flatten().map(|e| e.path()).filter(|p| {
                p.is_file()
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            }));
        }
    }
    v.sort();
    v.dedup();
    v
}

/// Checks every input file is still the one planned: the same size and sha256 (of the whole
/// file up to 16 MiB: its mtime does not matter, so a re-checked-out or touched copy is the
/// planned one), and for a larger file, whose sha256 covers only its first MiB, the same inode
/// and ctime too. A write anywhere in the file sets its ctime (which, unlike the mtime, no
/// `touch -r` puts back) and a replacement changes its inode, so a file that kept both is the
/// planned one without reading it; one that did not cannot be shown to be.
pub(crate) fn check_inputs(plan: &UnitPlan) -> Result<()> {
    for (i, id) in plan.identities.iter().enumerate() {
        let path = PathBuf::from(id["path"].as_str().unwrap_or_default());
        let is_remote = id["hashed"] == "remote";
        let now = match is_remote {
            true => remote_now(&path),
            false => identity(&path),
        };
        let now = now.map_err(|e| Error::Verify {
            at: Location::file(&path),
            reason: format!("input of the plan is gone or unreadable: {e}"),
        })?;
        let whole = id["hashed"] == "whole";
        let fields: &[&str] = match (is_remote, whole) {
            (true, _) => &["size", "sha256", "etag"],
            (false, true) => &["size", "sha256"],
            (false, false) => &["size", "sha256", "ino", "ctime_ns"],
        };
        if let Some(field) = fields.iter().find(|f| now[**f] != id[**f]) {
            let why = match whole {
                false if ["ino", "ctime_ns"].contains(field) => {
                    ": rewritten in place, replaced or its metadata changed; the plan hashed \
                     its first MiB only, so the rest cannot be shown to be the planned bytes"
                }
                _ => "",
            };
            return Err(Error::Verify {
                at: Location::file(&path),
                reason: format!(
                    "changed since the plan {} was made ({field} {} → {}; input_files[{i}]{why}); \
                     make a new plan",
                    shown(&plan.path),
                    id[*field],
                    now[*field]
                ),
            });
        }
    }
    Ok(())
}

/// The identity now of the remote file recorded at `address`.
fn remote_now(address: &Path) -> Result<Value> {
    let r = remote().ok_or_else(|| {
        Error::Usage("a remote input, and this caller reads local inputs only".into())
    })?;
    (r.now)(&address.to_string_lossy())
}

/// Each unit's segments: per file, its tensors by offset, a new segment wherever the unit
/// changes; the first segment starts at 0 (the header), each ends where the next starts.
fn segments(job: &Job, lay: &Layout, units: &[Vec<usize>]) -> Vec<Vec<Segment>> {
    let mut unit_of = vec![0usize; job.tensor_count()];
    for (u, ts) in units.iter().enumerate() {
        ts.iter().for_each(|&k| unit_of[k] = u);
    }
    let mut out = vec![Vec::new(); units.len()];
    for (f, pf) in job.output_plan().files.iter().enumerate() {
        let mut ts = pf.tensors.clone();
        ts.sort_by_key(|&k| lay.at[k].1);
        let mut cur: Option<(usize, u64)> = None;
        for &k in &ts {
            let (u, off) = (unit_of[k], lay.at[k].1);
            match cur {
                Some((cu, _)) if cu == u => {}
                Some((cu, start)) => {
                    out[cu].push(Segment {
                        file: f,
                        start,
                        end: off,
                    });
                    cur = Some((u, off));
                }
                None => cur = Some((u, 0)),
            }
        }
        let (u, start) = cur.unwrap_or((0, 0));
        out[u].push(Segment {
            file: f,
            start,
            end: pf.size,
        });
    }
    out
}

/// What unit `tensors` reads: per output tensor, the input file, tensor and byte ranges (the
/// ranges an operation needs, sorted and merged where they touch: a permutation of rows reads
/// a whole tensor as one range, not one per row).
fn reads(job: &Job, tensors: &[usize]) -> Vec<Value> {
    let mut v = Vec::new();
    for &k in tensors {
        let needs = job.reads(k);
        let mut by_input: Vec<(usize, Vec<std::ops::Range<u64>>)> = Vec::new();
        for (j, r) in needs {
            match by_input.iter_mut().find(|(i, _)| *i == j) {
                Some((_, rs)) => rs.push(r),
                None => by_input.push((j, vec![r])),
            }
        }
        for (j, mut rs) in by_input {
            rs.sort_by_key(|r| (r.start, r.end));
            let mut merged: Vec<std::ops::Range<u64>> = Vec::with_capacity(rs.len());
            for r in rs {
                match merged.last_mut() {
                    Some(m) if r.start <= m.end => m.end = m.end.max(r.end),
                    _ => merged.push(r),
                }
            }
            let i = job.inputs(k)[j];
            for r in merged {
                v.push(json!({
                    "file": input_name(&job.source().file_of(i)),
                    "tensor": job.source().tensors()[i].name,
                    "range": [r.start, r.end],
                }));
            }
        }
    }
    v
}

fn unit_docs(job: &Job, units: &[Vec<usize>], segs: &[Vec<Segment>]) -> Vec<Value> {
    units
        .iter()
        .zip(segs)
        .enumerate()
        .map(|(u, (ts, segs))| {
            let bytes: u64 = ts.iter().map(|&k| job.tensor(k).byte_len).sum();
            let whole: Vec<String> = job
                .output_plan()
                .files
                .iter()
                .filter(|f| !f.tensors.is_empty() && f.tensors.iter().all(|k| ts.contains(k)))
                .map(|f| f.path.display().to_string())
                .collect();
            json!({
                "index": u,
                "tensors": ts,
                "part_bytes": bytes,
                "cost_bytes": ts.iter().map(|&k| job.cost(k)).sum::<u64>(),
                "whole_files": whole,
                "segments": segs.iter().map(|s| json!({"file": s.file, "start": s.start, "end": s.end})).collect::<Vec<_>>(),
                "reads": reads(job, ts),
            })
        })
        .collect()
}

fn plan_doc(
    job: &Job,
    opts: &ConvertOptions,
    command: &[String],
    lay: &Layout,
    units: &[Vec<usize>],
) -> Result<Value> {
    let files: Vec<Value> = job
        .output_plan()
        .files
        .iter()
        .zip(&lay.data_start)
        .map(|(f, start)| {
            json!({"path": f.path.display().to_string(), "size": f.size, "data_start": start, "tensors": f.tensors})
        })
        .collect();
    let extras: Vec<Value> = job
        .output_plan()
        .extras
        .iter()
        .map(|e| json!({"path": e.path.display().to_string(), "size": e.size(), "index": e.is_index}))
        .collect();
    let mut unit_of = vec![0usize; job.tensor_count()];
    for (u, ts) in units.iter().enumerate() {
        ts.iter().for_each(|&k| unit_of[k] = u);
    }
    let tensors: Vec<Value> = (0..job.tensor_count())
        .zip(&unit_of)
        .zip(&lay.at)
        .map(|((k, u), (f, off))| {
            let i = job.tensor(k);
            json!({
                "name": i.name, "dtype": i.dtype.to_string(), "shape": i.shape,
                "bytes": i.byte_len, "op": job.operation(k).map(|op| op.describe()), "unit": u,
                "file": f, "offset": off,
            })
        })
        .collect();
    let identities = input_files(job)
        .iter()
        .map(|p| identity(p))
        .collect::<Result<Vec<_>>>()?;
    let mut doc = json!({
        "weightport_plan": PLAN_VERSION,
        "command": command,
        "inputs": opts.inputs.iter().map(|p| input_name(p)).collect::<Vec<_>>(),
        "output": opts.output.display().to_string(),
        "format": job.format_name(),
        "staging": staging_of(&opts.output).display().to_string(),
        "fingerprint": job.fingerprint(),
        "input_files": identities,
        "files": files,
        "extras": extras,
        "tensors": tensors,
        "units": unit_docs(job, units, &segments(job, lay, units)),
    });
    let sha = doc_sha256(&doc);
    doc["plan_sha256"] = sha.into();
    Ok(doc)
}

/// What an input's identity records about this machine's copy of it (its inode, when it was
/// written here), not about its bytes: `check_inputs` compares them on this machine, and
/// `plan_sha256` leaves them out.
const LOCAL_FIELDS: [&str; 3] = ["mtime_ns", "ctime_ns", "ino"];

/// sha256 (hex) of a plan document without its `plan_sha256` field and the machine-local fields
/// of its input files, as compact JSON. Records name it, so units run on machines that each
/// made the same plan from their own copy of the inputs (the GitHub Actions recipe: another
/// checkout, other mtimes and inodes) agree on it, while another size or sha256 of any input
/// changes it.
#[doc(hidden)]
pub fn doc_sha256(doc: &Value) -> String {
    let mut d = doc.clone();
    if let Some(m) = d.as_object_mut() {
        m.remove("plan_sha256");
    }
    for f in d["input_files"].as_array_mut().into_iter().flatten() {
        if let Some(m) = f.as_object_mut() {
            for k in LOCAL_FIELDS {
                m.remove(k);
            }
        }
    }
    format!("{:x}", Sha256::digest(d.to_string().as_bytes()))
}

/// Plans the conversion `opts` (inputs and output absolute) split into units and writes the
/// plan file `plan_path` (replacing one only with `opts.force`). `command` is the convert
/// arguments the plan was made from; unit and finish rebuild the job from them.
pub fn plan_units(
    opts: &ConvertOptions,
    how: UnitSplit,
    in_place: bool,
    command: &[String],
    plan_path: &Path,
) -> Result<PlannedUnits> {
    if !opts.force && plan_path.exists() {
        return Err(Error::Usage(format!(
            "{}: already exists; pass {} to replace it",
            shown(plan_path),
            weightport_core::Knob::Force
        )));
    }
    let (doc, report) = with_job(opts, |job| {
        let plan_file = SideFile::new(&weightport_core::Knob::Plan.to_string(), plan_path)
            .replacing(opts.force);
        job.check_side_files(&[plan_file])?;
        // Refuse now what `finish` would refuse (an existing output without --force, ...).
        job.prepare(true)?;
        let lay = layout(job, opts)?;
        let units = split(job, &lay, how, in_place)?;
        let mut doc = plan_doc(job, opts, command, &lay, &units)?;
        if in_place {
            doc["in_place"] = true.into();
            doc["plan_sha256"] = doc_sha256(&doc).into();
        }
        let report = PlannedUnits {
            plan: plan_path.to_path_buf(),
            output: opts.output.clone(),
            staging: staging_of(&opts.output),
            files: job
                .output_plan()
                .files
                .iter()
                .map(|f| (f.path.clone(), f.size))
                .collect(),
            units: units
                .iter()
                .zip(doc["units"].as_array().into_iter().flatten())
                .map(|(ts, u)| {
                    let whole = u["whole_files"].as_array().into_iter().flatten();
                    let whole = whole
                        .filter_map(|p| p.as_str().map(PathBuf::from))
                        .collect();
                    (ts.len(), u["part_bytes"].as_u64().unwrap_or(0), whole)
                })
                .collect(),
            tensors: job.tensor_count(),
            input_files: doc["input_files"].as_array().map_or(0, |a| a.len()),
        };
        Ok((doc, report))
    })?;
    let mut text =
        serde_json::to_string_pretty(&doc).map_err(|e| Error::Internal(e.to_string()))?;
    text.push('\n');
    let plan_file =
        SideFile::new(&weightport_core::Knob::Plan.to_string(), plan_path).replacing(opts.force);
    side::write(&plan_file, text.as_bytes())?;
    Ok(report)
}

fn field_error(path: &Path, field: &str, what: &str) -> Error {
    Error::malformed(
        Location::file(path),
        None,
        format!("plan file field `{field}`: {what}"),
    )
}

/// A plan document's fields that `unit` and `finish` read (the rest is for people and
/// schedulers: reads, costs, dtypes).
#[derive(Deserialize)]
struct PlanDoc {
    command: Vec<String>,
    inputs: Vec<PathBuf>,
    output: PathBuf,
    staging: PathBuf,
    fingerprint: String,
    input_files: Vec<InputIdentity>,
    files: Vec<FileDoc>,
    tensors: Vec<TensorDoc>,
    units: Vec<UnitDoc>,
    plan_sha256: String,
    /// Absent in plans of earlier weightports: false.
    #[serde(default)]
    in_place: bool,
}

/// An input file's identity: its path, and what [`check_inputs`] compares (size, sha256, …).
#[derive(Deserialize)]
struct InputIdentity {
    path: String,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

impl InputIdentity {
    fn into_value(self) -> Value {
        let mut m = self.rest;
        m.insert("path".into(), self.path.into());
        Value::Object(m)
    }
}

#[derive(Deserialize)]
struct FileDoc {
    path: PathBuf,
    size: u64,
    data_start: u64,
}

#[derive(Deserialize)]
struct TensorDoc {
    file: usize,
    offset: u64,
    bytes: u64,
    name: String,
}

#[derive(Deserialize)]
struct UnitDoc {
    tensors: Vec<usize>,
    segments: Vec<Segment>,
}

/// Each output tensor in exactly one unit, and at least one unit.
fn check_units(units: &[Vec<usize>], n: usize, path: &Path) -> Result<()> {
    if units.is_empty() {
        return Err(field_error(path, "units", "expected a non-empty array"));
    }
    let mut seen = vec![false; n];
    for (u, ts) in units.iter().enumerate() {
        for &k in ts {
            if k >= n || std::mem::replace(&mut seen[k], true) {
                let what = format!("tensor {k} is out of range or in two units");
                return Err(field_error(path, &format!("units[{u}].tensors"), &what));
            }
        }
    }
    match seen.iter().position(|s| !s) {
        Some(k) => Err(field_error(
            path,
            "units",
            &format!("tensor {k} is in no unit"),
        )),
        None => Ok(()),
    }
}

/// The plan's output files, each header within the file.
fn files_of(docs: Vec<FileDoc>, path: &Path) -> Result<Vec<PlanFile>> {
    let mut out = Vec::with_capacity(docs.len());
    for (f, d) in docs.into_iter().enumerate() {
        if d.data_start > d.size {
            let field = format!("files[{f}].data_start");
            return Err(field_error(path, &field, "past the file's end"));
        }
        out.push(PlanFile {
            path: d.path,
            size: d.size,
            data_start: d.data_start,
        });
    }
    Ok(out)
}

/// Per tensor (file, offset), length and name.
type TensorLayout = (Vec<(usize, u64)>, Vec<u64>, Vec<String>);

/// Every tensor inside its file's data section.
fn tensors_of(docs: Vec<TensorDoc>, path: &Path, files: &[PlanFile]) -> Result<TensorLayout> {
    let (mut at, mut bytes, mut names) = (Vec::new(), Vec::new(), Vec::new());
    for (k, t) in docs.into_iter().enumerate() {
        let inside = files.get(t.file).is_some_and(|pf| {
            t.offset >= pf.data_start && t.offset.checked_add(t.bytes).is_some_and(|e| e <= pf.size)
        });
        if !inside {
            let field = format!("tensors[{k}].offset");
            return Err(field_error(
                path,
                &field,
                "not inside its file's data section",
            ));
        }
        at.push((t.file, t.offset));
        bytes.push(t.bytes);
        names.push(t.name);
    }
    check_overlaps(&at, &bytes, path)?;
    Ok((at, bytes, names))
}

/// No two tensors of a file share a byte (a unit re-reads its part tensor after tensor, by
/// offset). Empty tensors hold no byte.
fn check_overlaps(at: &[(usize, u64)], bytes: &[u64], path: &Path) -> Result<()> {
    let mut held: Vec<usize> = (0..at.len()).filter(|&k| bytes[k] > 0).collect();
    held.sort_by_key(|&k| (at[k], k));
    for w in held.windows(2) {
        let (a, b) = (w[0], w[1]);
        if at[a].0 == at[b].0 && at[b].1 < at[a].1 + bytes[a] {
            let field = format!("tensors[{b}].offset");
            let what = format!("overlaps tensors[{a}]");
            return Err(field_error(path, &field, &what));
        }
    }
    Ok(())
}

/// Checks the plan's segments: each inside the plan's files, the segments of each file
/// partition it, and every tensor of a unit lies in one of that unit's segments.
fn check_segments(p: &UnitPlan, path: &Path) -> Result<()> {
    for (u, segs) in p.segments.iter().enumerate() {
        if segs
            .iter()
            .any(|s| s.file >= p.files.len() || s.start > s.end)
        {
            let field = format!("units[{u}].segments");
            return Err(field_error(
                path,
                &field,
                "a segment outside the plan's files",
            ));
        }
    }
    for f in 0..p.files.len() {
        let mut pos = 0;
        for (_, _, s) in p.segments_of_file(f) {
            if s.start != pos {
                let what =
                    format!("the segments of files[{f}] do not cover it once (at byte {pos})");
                return Err(field_error(path, "units", &what));
            }
            pos = s.end;
        }
        if pos != p.files[f].size {
            let what = format!("the segments of files[{f}] end at byte {pos}");
            return Err(field_error(path, "units", &what));
        }
    }
    for (u, ts) in p.units.iter().enumerate() {
        for &k in ts {
            let (f, off) = p.at[k];
            let end = off + p.bytes[k];
            let held = p.segments[u]
                .iter()
                .any(|s| s.file == f && s.start <= off && end <= s.end);
            if !held {
                let what = format!("tensor {k} is in none of the unit's segments");
                return Err(field_error(path, &format!("units[{u}].segments"), &what));
            }
        }
    }
    Ok(())
}

/// The plan file's version, checked before anything else is read.
fn check_version(doc: &Value, path: &Path) -> Result<()> {
    match doc["weightport_plan"].as_u64() {
        Some(PLAN_VERSION) => Ok(()),
        Some(v) => Err(field_error(
            path,
            "weightport_plan",
            &format!("version {v}; this weightport reads version {PLAN_VERSION}"),
        )),
        None => Err(field_error(
            path,
            "weightport_plan",
            "missing: not a weightport plan file",
        )),
    }
}

/// Reads and checks a plan file.
pub fn read_plan(path: &Path) -> Result<UnitPlan> {
    let text = std::fs::read(path).map_err(|e| Error::io(path, "read plan file", e))?;
    parse_plan(path, &text)
}

/// Checks a plan file's bytes `text` (read from `path`, which errors name): its version, its
/// fields, their cross-checks (every tensor in one unit and inside its file, segments
/// partitioning the files), then its hash. Untrusted bytes give an error, never a panic.
pub fn parse_plan(path: &Path, text: &[u8]) -> Result<UnitPlan> {
    let doc: Value = serde_json::from_slice(text).map_err(|e| {
        Error::malformed(
            Location::file(path),
            None,
            format!("plan file is not JSON: {e}"),
        )
    })?;
    check_version(&doc, path)?;
    let d: PlanDoc = serde_path_to_error::deserialize(&doc)
        .map_err(|e| field_error(path, &e.path().to_string(), &e.inner().to_string()))?;
    let identities = d
        .input_files
        .into_iter()
        .map(InputIdentity::into_value)
        .collect();
    let files = files_of(d.files, path)?;
    let (at, bytes, tensor_names) = tensors_of(d.tensors, path, &files)?;
    let (units, segments) = d.units.into_iter().map(|u| (u.tensors, u.segments)).unzip();
    let plan = UnitPlan {
        path: path.to_path_buf(),
        command: d.command,
        inputs: d.inputs,
        output: d.output,
        staging: d.staging,
        fingerprint: d.fingerprint,
        identities,
        units,
        plan_sha256: d.plan_sha256,
        files,
        at,
        bytes,
        tensor_names,
        segments,
        in_place: d.in_place,
    };
    check_units(&plan.units, plan.at.len(), path)?;
    check_segments(&plan, path)?;
    let sha = doc_sha256(&doc);
    if sha != plan.plan_sha256 {
        return Err(Error::Verify {
            at: Location::file(path),
            reason: format!(
                "the plan file was edited after `weightport plan` wrote it (its content hashes \
                 to {sha}, `plan_sha256` says {}); units and finish run only the plan as \
                 written: make a new plan",
                plan.plan_sha256
            ),
        });
    }
    Ok(plan)
}

/// Rebuilds the job of `plan` (`opts` made from its command) and checks it is the planned one.
pub(crate) fn with_planned_job<R>(
    plan: &UnitPlan,
    opts: &ConvertOptions,
    f: impl FnOnce(&Job) -> Result<R>,
) -> Result<R> {
    check_inputs(plan)?;
    with_job(opts, |job| {
        if job.fingerprint() != plan.fingerprint {
            return Err(Error::Verify {
                at: Location::file(&plan.path),
                reason: "the job planned from its command differs from the plan (fingerprint); \
                         make a new plan with this weightport"
                    .into(),
            });
        }
        f(job)
    })
}

/// Every index the unit and finish commands take from an accepted plan, walked: each unit's
/// segments and tensors, each tensor's file, offset, length and name, each file's segments in
/// order. `Err` names the first one out of range or inconsistent. (The plan reader's contract,
/// checked by the `plan_file` fuzz target on every plan it accepts.)
#[doc(hidden)]
pub fn check_indices(p: &UnitPlan) -> std::result::Result<(), String> {
    let n = p.at.len();
    if p.bytes.len() != n || p.tensor_names.len() != n || p.segments.len() != p.units.len() {
        return Err("per-tensor or per-unit lists of different lengths".into());
    }
    for (u, ts) in p.units.iter().enumerate() {
        for &k in ts {
            let (f, off) = *p.at.get(k).ok_or(format!("unit {u}: tensor {k}"))?;
            let file = p.files.get(f).ok_or(format!("tensor {k}: file {f}"))?;
            let end = off
                .checked_add(p.bytes[k])
                .ok_or(format!("tensor {k}: end"))?;
            if off < file.data_start || end > file.size {
                return Err(format!("tensor {k} outside its file's data"));
            }
            if !p.segments[u]
                .iter()
                .any(|s| s.file == f && s.start <= off && end <= s.end)
            {
                return Err(format!("tensor {k} in no segment of unit {u}"));
            }
        }
    }
    let mut held: Vec<usize> = (0..n).filter(|&k| p.bytes[k] > 0).collect();
    held.sort_by_key(|&k| (p.at[k], k));
    for w in held.windows(2) {
        let (a, b) = (w[0], w[1]);
        if p.at[a].0 == p.at[b].0 && p.at[b].1 < p.at[a].1 + p.bytes[a] {
            return Err(format!("tensors {a} and {b} overlap"));
        }
    }
    for f in 0..p.files.len() {
        let mut pos = 0;
        for (u, j, s) in p.segments_of_file(f) {
            if p.segments.get(u).and_then(|v| v.get(j)) != Some(&s) || s.start != pos {
                return Err(format!("file {f}: segments do not partition it"));
            }
            pos = s.end;
        }
        if pos != p.files[f].size {
            return Err(format!("file {f}: segments end at {pos}"));
        }
    }
    Ok(())
}
