//! `weightport unit PLAN --index I`: one unit's part, written, verified and recorded.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use weightport_core::hash::{self, LeafHasher};
use weightport_core::kernel_copy::{self, Origin};
use weightport_core::staging::{stale_temp_owner, sync_dir, TempFile};
use weightport_core::{ContentHash, Error, IoCounter, IoCounts, Location, Result, TensorInfo};
use weightport_engine::side::{self, SideFile};
use weightport_engine::{ConvertOptions, Emit, Job, Progress};

use super::planfile::{with_planned_job, UnitPlan};

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
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct UnitReport {
    /// Unit index.
    pub index: usize,
    /// Of how many.
    pub units: usize,
    /// What happened.
    pub outcome: UnitOutcome,
    /// The part files (one per output file range the unit writes): path, size, sha256 (hex).
    pub parts: Vec<(PathBuf, u64, String)>,
    /// Their total size.
    pub bytes: u64,
    /// Output tensors in them.
    pub tensors: usize,
    /// Worker threads used (0 when nothing was done).
    pub threads: usize,
    /// The writes, opens and syncs of its parts and record (none when nothing was done).
    pub io: IoCounts,
}

/// Part `j` of unit `i`: the unit's `j`th segment of an output file (`in_place`: the shared
/// staging file of that output file).
pub(crate) fn part_path(plan: &UnitPlan, i: usize, j: usize) -> PathBuf {
    match plan.segments.get(i).and_then(|s| s.get(j)) {
        Some(s) if plan.in_place => super::in_place::in_place_path(plan, s.file),
        _ => plan.staging.join(format!("unit-{i:05}.{j}.part")),
    }
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
        && doc["plan_sha256"].as_str() == Some(plan.plan_sha256.as_str())
        && doc["index"].as_u64() == Some(i as u64))
    .then_some(doc)
}

/// Refuses a staging directory that is not a plain directory (a symlink could send the parts,
/// and then the output, anywhere).
pub(crate) fn check_staging(plan: &UnitPlan) -> Result<()> {
    match std::fs::symlink_metadata(&plan.staging) {
        Ok(m) if !m.is_dir() => Err(Error::Usage(format!(
            "{}: the staging directory is a symlink or not a directory; remove it (units \
             recreate it beside the output)",
            plan.staging.display()
        ))),
        _ => Ok(()),
    }
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
            "unit index {index}: {} has units 0 to {}",
            plan.path.display(),
            n - 1
        )));
    };
    check_staging(plan)?;
    if let Some(r) = read_record(plan, index) {
        return Ok(report_of(plan, index, &r, UnitOutcome::AlreadyDone, 0));
    }
    std::fs::create_dir_all(&plan.staging)
        .map_err(|e| Error::io(&plan.staging, "create staging directory", e))?;
    check_staging(plan)?;
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
        let u = UnitRun {
            plan,
            job,
            opts,
            index,
            tensors,
            progress,
        };
        let mut report = match plan.in_place {
            true => write_in_place(&u),
            false => write_part(&u),
        }?;
        report.io = job.io().counts();
        Ok(report)
    });
    match &r {
        Err(Error::Interrupted) | Ok(_) => {}
        Err(e) => {
            let doc =
                json!({"index": index, "fingerprint": plan.fingerprint, "error": e.to_string()});
            // Through a fresh temp file and a rename: nothing planted under the record's name
            // in the staging directory is written through.
            let record = SideFile::new("unit record", &failed_path(plan, index));
            let _ = side::write(&record.replacing(true), doc.to_string().as_bytes());
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
    let parts = r["parts"].as_array().into_iter().flatten().enumerate();
    UnitReport {
        index: i,
        units: plan.units.len(),
        outcome,
        parts: parts
            .map(|(j, p)| {
                let sha = p["sha256"].as_str().unwrap_or_default().to_string();
                (part_path(plan, i, j), p["bytes"].as_u64().unwrap_or(0), sha)
            })
            .collect(),
        bytes: r["bytes"].as_u64().unwrap_or(0),
        tensors: r["tensors"].as_array().map_or(0, |a| a.len()),
        threads,
        io: IoCounts::default(),
    }
}

/// Where each of the unit's tensors goes: (its part, offset in the part).
fn places(plan: &UnitPlan, index: usize, tensors: &[usize]) -> Result<Vec<(usize, u64)>> {
    let segs = &plan.segments[index];
    tensors
        .iter()
        .map(|&k| {
            let (f, off) = plan.at[k];
            let end = off + plan.bytes[k];
            let j = segs
                .iter()
                .position(|s| s.file == f && s.start <= off && end <= s.end)
                .ok_or_else(|| {
                    Error::Internal(format!("tensor {k} is in no part of unit {index}"))
                })?;
            Ok((j, off - segs[j].start))
        })
        .collect()
}

/// What running one unit works with.
#[derive(Clone, Copy)]
struct UnitRun<'a> {
    plan: &'a UnitPlan,
    job: &'a Job<'a>,
    opts: &'a ConvertOptions,
    index: usize,
    tensors: &'a [usize],
    progress: &'a dyn Progress,
}

/// The unit's output tensors, each checked against the plan's length.
fn unit_outs<'j>(plan: &UnitPlan, job: &'j Job, tensors: &[usize]) -> Result<Vec<&'j TensorInfo>> {
    let outs: Vec<&TensorInfo> = tensors.iter().map(|&k| job.tensor(k)).collect();
    if let Some((k, o)) = tensors
        .iter()
        .zip(&outs)
        .find(|(&k, o)| o.byte_len != plan.bytes[k])
    {
        return Err(Error::Internal(format!(
            "tensor {k} is {} bytes, the plan says {}",
            o.byte_len, plan.bytes[*k]
        )));
    }
    Ok(outs)
}

/// The completion record of unit `index`: its parts (none `in_place`), its tensors' hashes.
fn record_of(
    plan: &UnitPlan,
    index: usize,
    tensors: &[usize],
    outs: &[&TensorInfo],
    hashes: &[ContentHash],
    parts: Vec<Value>,
) -> Value {
    json!({
        "weightport_unit": 2,
        "index": index,
        "fingerprint": plan.fingerprint,
        "plan_sha256": plan.plan_sha256,
        "in_place": plan.in_place,
        "bytes": plan.segments[index].iter().map(|s| s.end - s.start).sum::<u64>(),
        "parts": parts,
        "tensors": tensors.iter().zip(hashes).zip(outs).map(|((k, h), o)| {
            json!({"index": k, "name": o.name, "bytes": o.byte_len, "hash": h.to_string()})
        }).collect::<Vec<_>>(),
    })
}

/// Records a written and verified unit (see [`publish_record`]).
fn complete(u: &UnitRun, record: &Value, threads: usize) -> Result<UnitReport> {
    let (plan, index) = (u.plan, u.index);
    // An input changed while the unit read it: no record.
    super::planfile::check_inputs(plan)?;
    let outcome = publish_record(plan, index, record, u.job.io())?;
    let _ = std::fs::remove_file(failed_path(plan, index));
    sync_dir(&plan.staging)?;
    Ok(report_of(plan, index, record, outcome, threads))
}

/// Output tensor `k` at `(file, offset)` of the shared staging files: written, or copied in
/// the kernel.
struct IntoShared<'a>(&'a super::in_place::InPlaceFiles, &'a [(usize, u64)]);

impl Emit for IntoShared<'_> {
    fn bytes(&self, k: usize, off: u64, b: &[u8]) -> Result<()> {
        self.0.write_at(self.1[k].0, self.1[k].1 + off, b)
    }
    fn copies(&self) -> bool {
        kernel_copy::enabled()
    }
    fn copy(&self, k: usize, off: u64, from: &Origin, len: u64) -> Result<u64> {
        self.0.copy_in(self.1[k].0, self.1[k].1 + off, from, len)
    }
}

/// Output tensor `k` at `(part, offset)` of the unit's temp parts: written, or copied in the
/// kernel.
struct IntoParts<'a>(&'a [TempFile], &'a [(usize, u64)]);

impl Emit for IntoParts<'_> {
    fn bytes(&self, k: usize, off: u64, b: &[u8]) -> Result<()> {
        let (j, base) = self.1[k];
        self.0[j].write_at(b, base + off)
    }
    fn copies(&self) -> bool {
        kernel_copy::enabled()
    }
    fn copy(&self, k: usize, off: u64, from: &Origin, len: u64) -> Result<u64> {
        let (j, base) = self.1[k];
        self.0[j].copy_in(from, len, base + off)
    }
}

/// `plan --in-place`: the unit's tensors written at their offsets into the shared staging
/// files ([`super::in_place`]), fsynced, read back and checked, then recorded.
fn write_in_place(u: &UnitRun) -> Result<UnitReport> {
    let outs = unit_outs(u.plan, u.job, u.tensors)?;
    let at: Vec<(usize, u64)> = u.tensors.iter().map(|&k| u.plan.at[k]).collect();
    let mut files: Vec<usize> = at.iter().map(|&(f, _)| f).collect();
    files.sort_unstable();
    files.dedup();
    let shared = super::in_place::InPlaceFiles::open(u.plan, &files, u.job.io())?;
    let threads = u.job.threads(u.tensors, "this unit")?;
    let total: u64 = outs.iter().map(|o| o.byte_len).sum();
    let emit = IntoShared(&shared, &at);
    let hashes = u.job.execute(u.tensors, threads, u.progress, emit)?;
    shared.sync()?;
    u.progress.start("verify", total);
    let items: Vec<_> = (0..outs.len())
        .map(|i| {
            let leaf = u.job.leaf_bytes(u.tensors[i], u.opts.chunk);
            (at[i].0, at[i].1, outs[i], leaf, hashes[i])
        })
        .collect();
    shared.verify(&items, u.progress)?;
    u.progress.finish();
    let record = record_of(u.plan, u.index, u.tensors, &outs, &hashes, Vec::new());
    complete(u, &record, threads)
}

/// The unit's tensors written into one temp part per segment, verified, renamed into place and
/// recorded.
fn write_part(u: &UnitRun) -> Result<UnitReport> {
    let outs = unit_outs(u.plan, u.job, u.tensors)?;
    let place = places(u.plan, u.index, u.tensors)?;
    let segs = &u.plan.segments[u.index];
    let threads = u.job.threads(u.tensors, "this unit")?;
    let temps = segs
        .iter()
        .enumerate()
        .map(|(j, s)| {
            let t = TempFile::beside(&part_path(u.plan, u.index, j), u.job.io())?;
            t.set_len(s.end - s.start)?;
            Ok(t)
        })
        .collect::<Result<Vec<_>>>()?;
    let total: u64 = outs.iter().map(|o| o.byte_len).sum();
    let emit = IntoParts(&temps, &place);
    let hashes = u.job.execute(u.tensors, threads, u.progress, emit)?;
    u.progress.start("verify", total);
    let parts = check_parts(u, &temps, &place, &outs, &hashes)?;
    u.progress.finish();
    let record = record_of(u.plan, u.index, u.tensors, &outs, &hashes, parts);
    for t in temps {
        t.publish(true)?;
    }
    complete(u, &record, threads)
}

/// fsyncs each temp part, re-reads it and checks its tensors' content hashes; returns what the
/// record says of each part.
fn check_parts(
    u: &UnitRun,
    temps: &[TempFile],
    place: &[(usize, u64)],
    outs: &[&TensorInfo],
    hashes: &[ContentHash],
) -> Result<Vec<Value>> {
    let (plan, index, opts, progress) = (u.plan, u.index, u.opts, u.progress);
    let segs = &plan.segments[index];
    let mut parts = Vec::with_capacity(temps.len());
    for (j, t) in temps.iter().enumerate() {
        t.sync()?;
        let mut mine: Vec<usize> = (0..outs.len()).filter(|&i| place[i].0 == j).collect();
        mine.sort_by_key(|&i| place[i].1);
        let items: Vec<(u64, &TensorInfo, u64, ContentHash)> = mine
            .iter()
            .map(|&i| {
                let leaf = u.job.leaf_bytes(u.tensors[i], opts.chunk);
                (place[i].1, outs[i], leaf, hashes[i])
            })
            .collect();
        let len = segs[j].end - segs[j].start;
        let shown = part_path(plan, index, j);
        // The part is reopened once to be read back.
        u.job.io().opened();
        let sha = verify_part(t.path(), &shown, len, &items, progress)?;
        parts.push(
            json!({"file": segs[j].file, "start": segs[j].start, "bytes": len, "sha256": sha}),
        );
    }
    Ok(parts)
}

/// Publishes the completion record without replacing one another process published first.
fn publish_record(
    plan: &UnitPlan,
    index: usize,
    record: &Value,
    io: &IoCounter,
) -> Result<UnitOutcome> {
    let path = record_path(plan, index);
    let t = TempFile::beside(&path, io)?;
    t.write_at(record.to_string().as_bytes(), 0)?;
    t.sync()?;
    match t.publish(false) {
        Ok(_) => Ok(UnitOutcome::Done),
        Err(_) if read_record(plan, index).is_some() => Ok(UnitOutcome::LostRace),
        Err(e) => Err(e),
    }
}

/// Reads `n` bytes of `f` into `buf`, adding them to `sha`.
fn take(f: &mut impl Read, path: &Path, sha: &mut Sha256, buf: &mut Vec<u8>, n: u64) -> Result<()> {
    buf.resize(n as usize, 0);
    f.read_exact(buf)
        .map_err(|e| Error::io(path, "read back", e))?;
    sha.update(&buf[..]);
    Ok(())
}

/// Re-reads a part front to back (`len` bytes; `items` its tensors by offset, with their leaf
/// length and the content hash computed while writing each): every tensor must hash the same.
/// Returns the part's sha256.
fn verify_part(
    path: &Path,
    shown_as: &Path,
    len: u64,
    items: &[(u64, &TensorInfo, u64, ContentHash)],
    progress: &dyn Progress,
) -> Result<String> {
    let mut f = std::io::BufReader::with_capacity(
        1 << 20,
        std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?,
    );
    let mut sha = Sha256::new();
    let mut buf = Vec::new();
    let mut pos = 0u64;
    let gap = |f: &mut std::io::BufReader<std::fs::File>,
               sha: &mut Sha256,
               buf: &mut Vec<u8>,
               mut n: u64| {
        while n > 0 {
            let m = n.min(1 << 20);
            take(f, path, sha, buf, m)?;
            n -= m;
        }
        Ok::<(), Error>(())
    };
    for &(off, o, leaf, want) in items {
        gap(&mut f, &mut sha, &mut buf, off - pos)?;
        let leaf = leaf.max(1);
        let mut leaves = Vec::new();
        let mut left = o.byte_len;
        loop {
            let n = left.min(leaf);
            take(&mut f, path, &mut sha, &mut buf, n)?;
            let mut h = LeafHasher::new();
            h.update(&buf);
            leaves.push(h.finish());
            progress.advance(n);
            left -= n;
            if left == 0 {
                break;
            }
        }
        let got = hash::root(o.dtype, &o.shape, o.byte_len, &leaves);
        if got != want {
            return Err(Error::Verify {
                at: Location::file(shown_as).tensor(o.name.clone()),
                reason: format!("read back as {got}, written as {want}"),
            });
        }
        pos = off + o.byte_len;
    }
    gap(&mut f, &mut sha, &mut buf, len - pos)?;
    Ok(format!("{:x}", sha.finalize()))
}
