//! `weightport finish PLAN`: the output assembled from the units' parts and committed.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use serde_json::Value;
use weightport_core::{
    ContentHash, Error, Format, Location, Metadata, Result, TensorInfo, TensorSource,
};

use super::job::Job;
use super::planfile::{with_planned_job, UnitPlan};
use super::unit::{failed_path, part_path, read_record};
use crate::convert::{ConvertOptions, FileReport};
use crate::exec::{identity_plan, run, Progress};
use crate::txn;
use crate::verify::verify_staged;

/// What `finish` committed.
#[derive(Debug, Clone)]
pub struct FinishReport {
    /// Output weights files.
    pub files: Vec<FileReport>,
    /// Index and companion files.
    pub extras: Vec<PathBuf>,
    /// Stale files removed (`--force`).
    pub removed: Vec<PathBuf>,
    /// Units assembled.
    pub units: usize,
    /// Output tensors.
    pub tensors: usize,
    /// Tensor data bytes.
    pub data_bytes: u64,
    /// Every staged file was re-read and its hashes matched.
    pub verified: bool,
}

/// The unit records, or an error naming every unit missing or failed.
fn records(plan: &UnitPlan) -> Result<Vec<Value>> {
    if !plan.staging.is_dir() {
        return Err(Error::Verify {
            at: Location::file(&plan.staging),
            reason: format!(
                "no unit of {} has run (or finish already committed its output and removed \
                 the staging directory); nothing was written",
                plan.path.display()
            ),
        });
    }
    let (mut got, mut missing, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..plan.units.len() {
        match read_record(plan, i) {
            Some(r) => got.push(r),
            None => match std::fs::read(failed_path(plan, i)) {
                Ok(b) => {
                    let doc: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
                    failed.push(format!(
                        "{i} ({})",
                        doc["error"].as_str().unwrap_or("no message")
                    ));
                }
                Err(_) => missing.push(i.to_string()),
            },
        }
    }
    if missing.is_empty() && failed.is_empty() {
        return Ok(got);
    }
    let mut what = Vec::new();
    if !missing.is_empty() {
        what.push(format!(
            "missing (not run, running, or killed): {}",
            missing.join(", ")
        ));
    }
    if !failed.is_empty() {
        what.push(format!("failed: {}", failed.join("; ")));
    }
    Err(Error::Verify {
        at: Location::file(&plan.path),
        reason: format!(
            "{} of {} units are not finished: {}; run them (`weightport unit {} --index I`), \
             then finish again; nothing was written",
            missing.len() + failed.len(),
            plan.units.len(),
            what.join("; "),
            plan.path.display()
        ),
    })
}

/// Units' parts as a source: output tensor `k` is the bytes its unit wrote for it.
struct Parts<'p> {
    plan: &'p UnitPlan,
    files: Vec<std::fs::File>,
    paths: Vec<PathBuf>,
    tensors: Vec<TensorInfo>,
    /// Per output tensor: (unit, offset in its part, content hash recorded).
    at: Vec<(usize, u64, ContentHash)>,
    metadata: Metadata,
    format: Format,
}

fn bad_record(plan: &UnitPlan, u: usize, what: &str) -> Error {
    Error::Verify {
        at: Location::file(super::unit::record_path(plan, u)),
        reason: format!("unit {u}'s completion record {what}; rerun the unit after deleting it"),
    }
}

impl<'p> Parts<'p> {
    fn open(plan: &'p UnitPlan, job: &Job, records: &[Value]) -> Result<Parts<'p>> {
        let mut at = vec![None; job.outs.len()];
        let (mut files, mut paths) = (Vec::new(), Vec::new());
        for (u, r) in records.iter().enumerate() {
            let ts = r["tensors"]
                .as_array()
                .ok_or_else(|| bad_record(plan, u, "lists no tensors"))?;
            if ts.len() != plan.units[u].len() {
                return Err(bad_record(plan, u, "lists other tensors than the plan's"));
            }
            for (t, &k) in ts.iter().zip(&plan.units[u]) {
                let hash = t["hash"]
                    .as_str()
                    .and_then(|h| u128::from_str_radix(h, 16).ok());
                match (t["index"].as_u64(), t["offset"].as_u64(), hash) {
                    (Some(i), Some(off), Some(h)) if i as usize == k => {
                        at[k] = Some((u, off, ContentHash(h)))
                    }
                    _ => return Err(bad_record(plan, u, "lists other tensors than the plan's")),
                }
            }
            let p = part_path(plan, u);
            files.push(std::fs::File::open(&p).map_err(|e| Error::io(&p, "open part", e))?);
            paths.push(p);
        }
        Ok(Parts {
            plan,
            files,
            paths,
            tensors: job.outs.iter().map(|o| o.info.clone()).collect(),
            at: at
                .into_iter()
                .map(|a| a.expect("every tensor in a unit"))
                .collect(),
            metadata: Metadata::default(),
            format: job.source().format(),
        })
    }
}

impl TensorSource for Parts<'_> {
    fn format(&self) -> Format {
        self.format
    }
    fn metadata(&self) -> &Metadata {
        &self.metadata
    }
    fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }
    fn files(&self) -> Vec<PathBuf> {
        self.paths.clone()
    }
    fn file_of(&self, index: usize) -> PathBuf {
        self.paths[self.at[index].0].clone()
    }
    fn bytes(&self, _index: usize) -> Option<&[u8]> {
        None
    }
    fn read_into(&self, index: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        let (u, base, _) = self.at[index];
        self.files[u]
            .read_exact_at(dst, base + offset)
            .map_err(|e| Error::io(&self.paths[u], "read part", e))
    }
}

/// Each part's size against its record (its content is re-hashed, tensor by tensor, while the
/// output is assembled from it).
fn check_parts(plan: &UnitPlan, records: &[Value]) -> Result<()> {
    for (u, r) in records.iter().enumerate() {
        let p = part_path(plan, u);
        let size = std::fs::metadata(&p)
            .map_err(|e| Error::io(&p, "stat part", e))?
            .len();
        if Some(size) != r["bytes"].as_u64() {
            return Err(altered(
                plan,
                u,
                format!("is {size} bytes, recorded {}", r["bytes"]),
            ));
        }
    }
    Ok(())
}

fn altered(plan: &UnitPlan, u: usize, what: String) -> Error {
    Error::Verify {
        at: Location::file(part_path(plan, u)),
        reason: format!(
            "unit {u}'s part changed after the unit recorded it ({what}); delete {} and rerun \
             the unit; nothing was written",
            super::unit::record_path(plan, u).display()
        ),
    }
}

/// Checks every unit's record and part, writes the output from the parts with the format's
/// sink, verifies it, and commits it with `convert`'s transaction; then removes the staging
/// directory. `opts` is the plan's command as convert options.
pub fn finish(
    plan: &UnitPlan,
    opts: &ConvertOptions,
    progress: &dyn Progress,
) -> Result<FinishReport> {
    let records = records(plan)?;
    let threads = opts
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, crate::convert::MAX_THREADS);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::Internal(format!("cannot start {threads} worker threads: {e}")))?;
    let report = with_planned_job(plan, opts, |job| {
        check_parts(plan, &records)?;
        let parts = Parts::open(plan, job, &records)?;
        let prepared = txn::prepare(&job.plan, &opts.output, opts.force, false)?;
        let committed = pool.install(|| assemble(job, &parts, prepared, opts, progress))?;
        Ok(FinishReport {
            files: committed
                .files
                .into_iter()
                .map(|w| FileReport {
                    path: w.path,
                    size: w.size,
                    tensors: w.tensors,
                })
                .collect(),
            extras: committed.extras,
            removed: committed.removed,
            units: plan.units.len(),
            tensors: job.outs.len(),
            data_bytes: job.outs.iter().map(|o| o.info.byte_len).sum(),
            verified: opts.verify,
        })
    })?;
    std::fs::remove_dir_all(&plan.staging)
        .map_err(|e| Error::io(&plan.staging, "remove staging directory", e))?;
    Ok(report)
}

fn assemble(
    job: &Job,
    parts: &Parts,
    prepared: txn::Prepared,
    opts: &ConvertOptions,
    progress: &dyn Progress,
) -> Result<txn::Committed> {
    let outs = identity_plan(parts);
    let req = job.request(opts);
    let mut sink = (job.fmt.sink)(&req, &job.plan)?;
    let staged = sink.plan(&job.infos, &job.metadata)?;
    let total = outs.iter().map(|o| o.info.byte_len).sum();
    progress.start("assemble", total);
    let hashes = run(parts, &outs, opts.chunk, progress, |k, off, b| {
        sink.write_at(k, off, b)
    })?;
    progress.finish();
    for (k, h) in hashes.out.iter().enumerate() {
        let (u, _, want) = parts.at[k];
        if *h != want {
            let name = weightport_core::sanitize(&outs[k].info.name);
            return Err(altered(
                parts.plan,
                u,
                format!("tensor `{name}` reads as {h}, the unit wrote {want}"),
            ));
        }
    }
    if opts.verify {
        progress.start("verify", total);
        for f in &staged.files {
            verify_staged(f, &outs, &hashes, parts, &opts.open, opts.chunk, progress)?;
        }
        progress.finish();
    }
    let finished = sink.finish()?;
    txn::commit(prepared, &job.plan, finished, opts.force)
}
