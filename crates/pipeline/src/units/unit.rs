//! `weightport unit PLAN --index I`: one unit's part, written, verified and recorded.

use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use weightport_core::hash::{self, LeafHasher};
use weightport_core::staging::{stale_temp_owner, sync_dir, TempFile};
use weightport_core::{ContentHash, Error, Location, Result};

use super::job::Job;
use super::planfile::{with_planned_job, UnitPlan};
use crate::convert::{default_max_memory, ConvertOptions, MAX_THREADS};
use crate::exec::{leaf_of, run, worker_bytes, Progress};
use crate::plan::OutTensor;

/// What running a unit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitOutcome {
    /// The part was written, verified and recorded by this process.
    Done,
    /// Its completion record was already there: nothing was done.
    AlreadyDone,
    /// Another process recorded the unit while this one wrote it; this one's record was
    /// discarded (the parts are the same bytes).
    LostRace,
}

/// A unit's result.
#[derive(Debug, Clone)]
pub struct UnitReport {
    /// Unit index.
    pub index: usize,
    /// Of how many.
    pub units: usize,
    /// What happened.
    pub outcome: UnitOutcome,
    /// The part file.
    pub part: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Output tensors in it.
    pub tensors: usize,
    /// Its sha256 (hex).
    pub sha256: String,
    /// Worker threads used (0 when nothing was done).
    pub threads: usize,
}

pub(crate) fn part_path(plan: &UnitPlan, i: usize) -> PathBuf {
    plan.staging.join(format!("unit-{i:05}.part"))
}

pub(crate) fn record_path(plan: &UnitPlan, i: usize) -> PathBuf {
    plan.staging.join(format!("unit-{i:05}.done.json"))
}

pub(crate) fn failed_path(plan: &UnitPlan, i: usize) -> PathBuf {
    plan.staging.join(format!("unit-{i:05}.failed.json"))
}

/// The completion record of unit `i`, if there is one for this plan.
pub(crate) fn read_record(plan: &UnitPlan, i: usize) -> Option<Value> {
    let doc: Value = serde_json::from_slice(&std::fs::read(record_path(plan, i)).ok()?).ok()?;
    (doc["fingerprint"].as_str() == Some(plan.fingerprint.as_str())
        && doc["index"].as_u64() == Some(i as u64))
    .then_some(doc)
}

/// Removes temp files of processes that no longer run from the staging directory.
fn clean_stale(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if stale_temp_owner(&e.file_name().to_string_lossy()).is_some() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Runs unit `index` of `plan`; `opts` is the plan's command as convert options.
pub fn run_unit(
    plan: &UnitPlan,
    opts: &ConvertOptions,
    index: usize,
    progress: &dyn Progress,
) -> Result<UnitReport> {
    let n = plan.units.len();
    let Some(tensors) = plan.units.get(index) else {
        return Err(Error::Usage(format!(
            "--index {index}: {} has units 0 to {}",
            plan.path.display(),
            n - 1
        )));
    };
    if let Some(r) = read_record(plan, index) {
        return Ok(report_of(plan, index, &r, UnitOutcome::AlreadyDone, 0));
    }
    std::fs::create_dir_all(&plan.staging)
        .map_err(|e| Error::io(&plan.staging, "create staging directory", e))?;
    clean_stale(&plan.staging);
    if let Ok(b) = std::fs::read(record_path(plan, index)) {
        match read_record(plan, index) {
            // Recorded by another process since the check above.
            Some(r) => return Ok(report_of(plan, index, &r, UnitOutcome::AlreadyDone, 0)),
            // A record of an earlier plan of the same output (or unreadable): stale.
            None if !b.is_empty() => {
                let _ = std::fs::remove_file(record_path(plan, index));
            }
            None => {}
        }
    }
    let r = with_planned_job(plan, opts, |job| {
        write_part(plan, job, opts, index, tensors, progress)
    });
    match &r {
        Err(Error::Interrupted) | Ok(_) => {}
        Err(e) => {
            let doc =
                json!({"index": index, "fingerprint": plan.fingerprint, "error": e.to_string()});
            let _ = std::fs::write(failed_path(plan, index), doc.to_string());
        }
    }
    r
}

fn report_of(
    plan: &UnitPlan,
    i: usize,
    r: &Value,
    outcome: UnitOutcome,
    threads: usize,
) -> UnitReport {
    UnitReport {
        index: i,
        units: plan.units.len(),
        outcome,
        part: part_path(plan, i),
        bytes: r["bytes"].as_u64().unwrap_or(0),
        tensors: r["tensors"].as_array().map_or(0, |a| a.len()),
        sha256: r["sha256"].as_str().unwrap_or_default().to_string(),
        threads,
    }
}

fn threads_for(job: &Job, outs: &[OutTensor], opts: &ConvertOptions) -> Result<usize> {
    let asked = opts
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if asked == 0 || asked > MAX_THREADS {
        return Err(Error::Usage(format!(
            "--threads {asked}: must be between 1 and {MAX_THREADS}"
        )));
    }
    let budget = opts.max_memory.unwrap_or_else(default_max_memory);
    let worker = worker_bytes(job.source(), outs, opts.chunk).max(1);
    if worker > budget {
        return Err(Error::Usage(format!(
            "--max-memory {budget}: one worker needs {worker} bytes for this unit"
        )));
    }
    Ok(asked.min((budget / worker) as usize).max(1))
}

fn write_part(
    plan: &UnitPlan,
    job: &Job,
    opts: &ConvertOptions,
    index: usize,
    tensors: &[usize],
    progress: &dyn Progress,
) -> Result<UnitReport> {
    let outs: Vec<OutTensor> = tensors.iter().map(|&k| job.outs[k].clone()).collect();
    let mut offsets = Vec::with_capacity(outs.len());
    let mut total = 0u64;
    for o in &outs {
        offsets.push(total);
        total += o.info.byte_len;
    }
    let threads = threads_for(job, &outs, opts)?;
    let part = part_path(plan, index);
    let temp = TempFile::beside(&part)?;
    let file = temp.open()?;
    file.set_len(total)
        .map_err(|e| Error::io(temp.path(), "size", e))?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::Internal(format!("cannot start {threads} worker threads: {e}")))?;
    progress.start("write", total);
    let hashes = pool.install(|| {
        run(job.source(), &outs, opts.chunk, progress, |k, off, b| {
            file.write_all_at(b, offsets[k] + off)
                .map_err(|e| Error::io(temp.path(), "write", e))
        })
    })?;
    progress.finish();
    file.sync_all()
        .map_err(|e| Error::io(temp.path(), "fsync", e))?;
    drop(file);
    progress.start("verify", total);
    let sha256 = verify_part(temp.path(), &part, &outs, &hashes.out, opts.chunk, progress)?;
    progress.finish();
    let record = json!({
        "weightport_unit": 1,
        "index": index,
        "fingerprint": plan.fingerprint,
        "part": part.file_name().map(|n| n.to_string_lossy().into_owned()),
        "bytes": total,
        "sha256": sha256,
        "tensors": tensors.iter().zip(&offsets).zip(&hashes.out).zip(&outs).map(|(((k, off), h), o)| {
            json!({"index": k, "name": o.info.name, "offset": off, "bytes": o.info.byte_len, "hash": h.to_string()})
        }).collect::<Vec<_>>(),
    });
    temp.publish(true)?;
    let outcome = publish_record(plan, index, &record)?;
    let _ = std::fs::remove_file(failed_path(plan, index));
    sync_dir(&plan.staging)?;
    Ok(report_of(plan, index, &record, outcome, threads))
}

/// Publishes the completion record without replacing one another process published first.
fn publish_record(plan: &UnitPlan, index: usize, record: &Value) -> Result<UnitOutcome> {
    let path = record_path(plan, index);
    let t = TempFile::beside(&path)?;
    t.open()?
        .write_all(record.to_string().as_bytes())
        .map_err(|e| Error::io(t.path(), "write", e))?;
    t.sync()?;
    match t.publish(false) {
        Ok(_) => Ok(UnitOutcome::Done),
        Err(_) if read_record(plan, index).is_some() => Ok(UnitOutcome::LostRace),
        Err(e) => Err(e),
    }
}

/// Re-reads the part front to back: every tensor's content hash must be the one computed while
/// writing it. Returns the part's sha256.
pub(crate) fn verify_part(
    path: &Path,
    shown_as: &Path,
    outs: &[OutTensor],
    expected: &[ContentHash],
    base: u64,
    progress: &dyn Progress,
) -> Result<String> {
    let mut f = std::io::BufReader::with_capacity(
        1 << 20,
        std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?,
    );
    let mut sha = Sha256::new();
    let mut buf = Vec::new();
    for (o, want) in outs.iter().zip(expected) {
        let leaf = leaf_of(o, base);
        let mut leaves = Vec::new();
        let mut left = o.info.byte_len;
        while left > 0 || leaves.is_empty() {
            let n = left.min(leaf) as usize;
            buf.resize(n, 0);
            f.read_exact(&mut buf)
                .map_err(|e| Error::io(path, "read back", e))?;
            sha.update(&buf);
            let mut h = LeafHasher::new();
            h.update(&buf);
            leaves.push(h.finish());
            progress.advance(n as u64);
            left -= n as u64;
            if n == 0 {
                break;
            }
        }
        let got = hash::root(o.info.dtype, &o.info.shape, o.info.byte_len, &leaves);
        if got != *want {
            return Err(Error::Verify {
                at: Location::file(shown_as).tensor(o.info.name.clone()),
                reason: format!("read back as {got}, written as {want}"),
            });
        }
    }
    Ok(format!("{:x}", sha.finalize()))
}
