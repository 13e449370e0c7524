//! The plan file: what `weightport plan` writes and `unit`/`finish` read.

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use weightport_core::registry::ExtraContent;
use weightport_core::staging::TempFile;
use weightport_core::{shown, Error, Location, Result};

use super::job::{with_job, Job};
use crate::convert::ConvertOptions;

/// Version of the plan file (`weightport_plan`).
pub const PLAN_VERSION: u64 = 1;
/// Input files up to this size are hashed whole; larger ones by their first [`HEAD`] bytes.
const WHOLE: u64 = 16 << 20;
const HEAD: u64 = 1 << 20;

/// How many units: `--units N` or `--unit-size SIZE` (bytes read + written per unit).
#[derive(Debug, Clone, Copy)]
pub enum UnitSplit {
    /// Exactly this many units.
    Count(usize),
    /// As many units as needed for each to cost at most about this many bytes.
    Size(u64),
}

/// What `plan` wrote.
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
    /// Per unit, the output tensors (indices in output order) it writes, in part order.
    pub units: Vec<Vec<usize>>,
}

/// The staging directory of `output`: `.NAME.wp-units` beside it.
pub fn staging_of(output: &Path) -> PathBuf {
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

/// Size, mtime and sha256 (whole for small files, of the first MiB for large ones) of `path`.
fn identity(path: &Path) -> Result<Value> {
    let m = std::fs::metadata(path).map_err(|e| Error::io(path, "stat", e))?;
    let whole = m.len() <= WHOLE;
    Ok(json!({
        "path": path.display().to_string(),
        "size": m.len(),
        "mtime_ns": m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
        "sha256": sha256_of(path, if whole { WHOLE } else { HEAD })?,
        "hashed": if whole { "whole" } else { "first-mib" },
    }))
}

/// Every file the job's output depends on: weights, copied companions, the repo's top-level
/// files (config, tokenizer, index), deduplicated and sorted.
fn input_files(job: &Job) -> Vec<PathBuf> {
    let mut v = job.source().files();
    for e in &job.plan.extras {
        if let ExtraContent::CopyOf(p) = &e.content {
            v.push(p.clone());
        }
    }
    if let Some(dir) = job.repo_dir {
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

/// Checks every input file still has the identity the plan recorded.
pub(crate) fn check_inputs(plan: &UnitPlan) -> Result<()> {
    for (i, id) in plan.identities.iter().enumerate() {
        let path = PathBuf::from(id["path"].as_str().unwrap_or_default());
        let now = identity(&path).map_err(|e| Error::Verify {
            at: Location::file(&path),
            reason: format!("input of the plan is gone or unreadable: {e}"),
        })?;
        for field in ["size", "mtime_ns", "sha256"] {
            if now[field] != id[field] {
                return Err(Error::Verify {
                    at: Location::file(&path),
                    reason: format!(
                        "changed since the plan {} was made ({field} {} → {}; input_files[{i}]); \
                         make a new plan",
                        shown(&plan.path),
                        id[field],
                        now[field]
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Atoms units are made of: whole output files when there are at least `n` of them, else
/// single tensors, in file order.
fn atoms(job: &Job, n: usize) -> Vec<Vec<usize>> {
    if job.plan.files.len() >= n && job.plan.files.len() > 1 {
        return job.plan.files.iter().map(|f| f.tensors.clone()).collect();
    }
    let mut order: Vec<usize> = job
        .plan
        .files
        .iter()
        .flat_map(|f| f.tensors.clone())
        .collect();
    if order.is_empty() {
        order = (0..job.outs.len()).collect();
    }
    order.into_iter().map(|k| vec![k]).collect()
}

/// Splits the job into `n` contiguous, non-empty groups of atoms balanced by cost.
fn split(job: &Job, how: UnitSplit) -> Result<Vec<Vec<usize>>> {
    let total: u64 = (0..job.outs.len()).map(|k| job.cost(k)).sum::<u64>().max(1);
    let n = match how {
        UnitSplit::Count(n) => n,
        UnitSplit::Size(s) => total.div_ceil(s.max(1)) as usize,
    };
    if n == 0 || n > job.outs.len() {
        return Err(Error::Usage(format!(
            "{n} units: this output has {0} tensors, so between 1 and {0} units",
            job.outs.len()
        )));
    }
    let atoms = atoms(job, n);
    let (mut units, mut cum) = (vec![Vec::new()], 0u64);
    for (i, a) in atoms.iter().enumerate() {
        cum += a.iter().map(|&k| job.cost(k)).sum::<u64>();
        units.last_mut().expect("a unit").extend(a);
        let (done, left) = (units.len(), atoms.len() - i - 1);
        let due = cum as u128 * n as u128 >= total as u128 * done as u128;
        if done < n && (due || left == n - done) {
            units.push(Vec::new());
        }
    }
    Ok(units)
}

/// What unit `tensors` reads: per output tensor, the input file, tensor and byte range.
fn reads(job: &Job, tensors: &[usize]) -> Vec<Value> {
    let mut v = Vec::new();
    for &k in tensors {
        let o = &job.outs[k];
        let needs = match &o.op {
            None => vec![(0, 0..o.info.byte_len)],
            Some(op) => op.needs(0..o.info.byte_len),
        };
        for (j, r) in needs {
            let i = o.inputs[j];
            v.push(json!({
                "file": job.source().file_of(i).display().to_string(),
                "tensor": job.source().tensors()[i].name,
                "range": [r.start, r.end],
            }));
        }
    }
    v
}

fn unit_docs(job: &Job, units: &[Vec<usize>]) -> Vec<Value> {
    units
        .iter()
        .enumerate()
        .map(|(u, ts)| {
            let bytes: u64 = ts.iter().map(|&k| job.outs[k].info.byte_len).sum();
            let whole: Vec<String> = job
                .plan
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
                "reads": reads(job, ts),
            })
        })
        .collect()
}

fn plan_doc(
    job: &Job,
    opts: &ConvertOptions,
    command: &[String],
    units: &[Vec<usize>],
) -> Result<Value> {
    let files: Vec<Value> = job
        .plan
        .files
        .iter()
        .map(
            |f| json!({"path": f.path.display().to_string(), "size": f.size, "tensors": f.tensors}),
        )
        .collect();
    let extras: Vec<Value> = job
        .plan
        .extras
        .iter()
        .map(|e| json!({"path": e.path.display().to_string(), "size": e.size(), "index": e.is_index}))
        .collect();
    let mut unit_of = vec![0usize; job.outs.len()];
    for (u, ts) in units.iter().enumerate() {
        ts.iter().for_each(|&k| unit_of[k] = u);
    }
    let tensors: Vec<Value> = job
        .outs
        .iter()
        .zip(&unit_of)
        .map(|(o, u)| {
            json!({
                "name": o.info.name, "dtype": o.info.dtype.to_string(), "shape": o.info.shape,
                "bytes": o.info.byte_len, "op": o.op.as_ref().map(|op| op.describe()), "unit": u,
            })
        })
        .collect();
    let identities = input_files(job)
        .iter()
        .map(|p| identity(p))
        .collect::<Result<Vec<_>>>()?;
    Ok(json!({
        "weightport_plan": PLAN_VERSION,
        "command": command,
        "inputs": opts.inputs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "output": opts.output.display().to_string(),
        "format": job.fmt.name,
        "staging": staging_of(&opts.output).display().to_string(),
        "fingerprint": job.fingerprint(),
        "input_files": identities,
        "files": files,
        "extras": extras,
        "tensors": tensors,
        "units": unit_docs(job, units),
    }))
}

/// Plans the conversion `opts` (inputs and output absolute) split into units and writes the
/// plan file `plan_path` (replacing one only with `opts.force`). `command` is the convert
/// arguments the plan was made from; unit and finish rebuild the job from them.
pub fn plan_units(
    opts: &ConvertOptions,
    how: UnitSplit,
    command: &[String],
    plan_path: &Path,
) -> Result<PlannedUnits> {
    if !opts.force && plan_path.exists() {
        return Err(Error::Usage(format!(
            "{}: already exists; pass --force to replace it",
            shown(plan_path)
        )));
    }
    let (doc, report) = with_job(opts, |job| {
        // Refuse now what `finish` would refuse (an existing output without --force, ...).
        crate::txn::prepare(&job.plan, &opts.output, opts.force, true)?;
        let units = split(job, how)?;
        let doc = plan_doc(job, opts, command, &units)?;
        let report = PlannedUnits {
            plan: plan_path.to_path_buf(),
            output: opts.output.clone(),
            staging: staging_of(&opts.output),
            files: job
                .plan
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
            tensors: job.outs.len(),
            input_files: doc["input_files"].as_array().map_or(0, |a| a.len()),
        };
        Ok((doc, report))
    })?;
    let t = TempFile::beside(plan_path)?;
    let mut f = t.open()?;
    let text = serde_json::to_string_pretty(&doc).map_err(|e| Error::Internal(e.to_string()))?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.write_all(b"\n"))
        .map_err(|e| Error::io(t.path(), "write", e))?;
    t.sync()?;
    t.publish(opts.force)?;
    Ok(report)
}

fn field_error(path: &Path, field: &str, what: &str) -> Error {
    Error::malformed(
        Location::file(path),
        None,
        format!("plan file field `{field}`: {what}"),
    )
}

fn strings(doc: &Value, path: &Path, field: &str) -> Result<Vec<String>> {
    doc[field]
        .as_array()
        .and_then(|a| a.iter().map(|s| s.as_str().map(str::to_string)).collect())
        .ok_or_else(|| field_error(path, field, "expected an array of strings"))
}

fn string(doc: &Value, path: &Path, field: &str) -> Result<String> {
    doc[field]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| field_error(path, field, "expected a string"))
}

/// Unit tensor lists; each output tensor in exactly one unit.
fn units_of(doc: &Value, path: &Path) -> Result<Vec<Vec<usize>>> {
    let n = doc["tensors"]
        .as_array()
        .ok_or_else(|| field_error(path, "tensors", "expected an array"))?
        .len();
    let units = doc["units"]
        .as_array()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| field_error(path, "units", "expected a non-empty array"))?;
    let mut seen = vec![false; n];
    let mut out = Vec::with_capacity(units.len());
    for (u, unit) in units.iter().enumerate() {
        let field = format!("units[{u}].tensors");
        let ts: Vec<usize> = unit["tensors"]
            .as_array()
            .and_then(|a| a.iter().map(|k| k.as_u64().map(|k| k as usize)).collect())
            .ok_or_else(|| field_error(path, &field, "expected an array of tensor indices"))?;
        for &k in &ts {
            if k >= n || std::mem::replace(&mut seen[k], true) {
                return Err(field_error(
                    path,
                    &field,
                    &format!("tensor {k} is out of range or in two units"),
                ));
            }
        }
        out.push(ts);
    }
    if let Some(k) = seen.iter().position(|s| !s) {
        return Err(field_error(
            path,
            "units",
            &format!("tensor {k} is in no unit"),
        ));
    }
    Ok(out)
}

/// Reads and checks a plan file.
pub fn read_plan(path: &Path) -> Result<UnitPlan> {
    let text = std::fs::read(path).map_err(|e| Error::io(path, "read plan file", e))?;
    let doc: Value = serde_json::from_slice(&text).map_err(|e| {
        Error::malformed(
            Location::file(path),
            None,
            format!("plan file is not JSON: {e}"),
        )
    })?;
    match doc["weightport_plan"].as_u64() {
        Some(PLAN_VERSION) => {}
        Some(v) => {
            return Err(field_error(
                path,
                "weightport_plan",
                &format!("version {v}; this weightport reads version {PLAN_VERSION}"),
            ))
        }
        None => {
            return Err(field_error(
                path,
                "weightport_plan",
                "missing: not a weightport plan file",
            ))
        }
    }
    let identities = doc["input_files"]
        .as_array()
        .filter(|a| a.iter().all(|i| i["path"].is_string()))
        .cloned()
        .ok_or_else(|| {
            field_error(
                path,
                "input_files",
                "expected an array of {path, size, mtime_ns, sha256}",
            )
        })?;
    Ok(UnitPlan {
        path: path.to_path_buf(),
        command: strings(&doc, path, "command")?,
        inputs: strings(&doc, path, "inputs")?
            .into_iter()
            .map(PathBuf::from)
            .collect(),
        output: PathBuf::from(string(&doc, path, "output")?),
        staging: PathBuf::from(string(&doc, path, "staging")?),
        fingerprint: string(&doc, path, "fingerprint")?,
        identities,
        units: units_of(&doc, path)?,
    })
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
