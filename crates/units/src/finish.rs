//! `weightport finish PLAN`: the output assembled from the units' parts and committed.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;
use weightport_core::io_counts::write_all_at;
use weightport_core::staging::TempFile;
use weightport_core::{
    ContentHash, Error, FinishedFile, IoCounter, IoCounts, Location, Result, StagedFile,
};
use weightport_engine::{ConvertOptions, FileReport, Job, Progress};

use super::in_place::in_place_path;
use super::planfile::{with_planned_job, UnitPlan};
use super::unit::{check_staging, failed_path, part_path, read_record};

/// What `finish` committed.
#[non_exhaustive]
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
    /// The writes, opens and syncs of the output files, their scratch layout and the parts
    /// written to.
    pub io: IoCounts,
}

/// The unit records, or an error naming every unit missing or failed.
fn records(plan: &UnitPlan) -> Result<Vec<Value>> {
    check_staging(plan)?;
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
            "{} of {} units are not finished: {}; run them (`{} {} {} I`), \
             then finish again; nothing was written",
            missing.len() + failed.len(),
            plan.units.len(),
            what.join("; "),
            weightport_core::Knob::RunUnit,
            plan.path.display(),
            weightport_core::Knob::Index
        ),
    })
}

fn bad_record(plan: &UnitPlan, u: usize, what: &str) -> Error {
    Error::Verify {
        at: Location::file(super::unit::record_path(plan, u)),
        reason: format!("unit {u}'s completion record {what}; rerun the unit after deleting it"),
    }
}

fn altered(plan: &UnitPlan, u: usize, part: &Path, what: String) -> Error {
    Error::Verify {
        at: Location::file(part),
        reason: format!(
            "unit {u}'s part changed after the unit recorded it ({what}); delete {} and rerun \
             the unit; nothing was written",
            super::unit::record_path(plan, u).display()
        ),
    }
}

/// The content hash of every output tensor, as the units recorded them (checked against the
/// plan: the same tensors, in the same parts).
fn recorded_hashes(plan: &UnitPlan, records: &[Value]) -> Result<Vec<ContentHash>> {
    let mut out = vec![None; plan.at.len()];
    for (u, r) in records.iter().enumerate() {
        let ts = r["tensors"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let parts = r["parts"].as_array().map_or(0, Vec::len);
        let planned = if plan.in_place {
            0
        } else {
            plan.segments[u].len()
        };
        if ts.len() != plan.units[u].len() || parts != planned {
            return Err(bad_record(
                plan,
                u,
                "lists other tensors or parts than the plan's",
            ));
        }
        for (t, &k) in ts.iter().zip(&plan.units[u]) {
            let hash = t["hash"]
                .as_str()
                .and_then(|h| u128::from_str_radix(h, 16).ok());
            match (t["index"].as_u64(), hash) {
                (Some(i), Some(h)) if i as usize == k => out[k] = Some(ContentHash(h)),
                _ => return Err(bad_record(plan, u, "lists other tensors than the plan's")),
            }
        }
    }
    let out = out.into_iter().collect::<Option<Vec<_>>>();
    out.ok_or_else(|| Error::Internal("a tensor in no unit record".into()))
}

/// Each part's size against the plan. The part a file is assembled into may be longer (a
/// finish killed while appending): it is cut back before assembly.
fn check_parts(plan: &UnitPlan) -> Result<()> {
    if plan.in_place {
        return check_shared(plan);
    }
    for (u, segs) in plan.segments.iter().enumerate() {
        for (j, s) in segs.iter().enumerate() {
            let p = part_path(plan, u, j);
            let m = std::fs::symlink_metadata(&p).map_err(|e| Error::io(&p, "stat part", e))?;
            let want = s.end - s.start;
            if !m.is_file() || m.len() < want || (m.len() > want && s.start != 0) {
                let what = format!("is {} bytes, recorded {want}", m.len());
                return Err(altered(plan, u, &p, what));
            }
        }
    }
    Ok(())
}

/// `in_place`: each output file's shared staging file, a plain file of exactly its size.
fn check_shared(plan: &UnitPlan) -> Result<()> {
    for (f, pf) in plan.files.iter().enumerate() {
        let p = in_place_path(plan, f);
        let m = std::fs::symlink_metadata(&p).map_err(|e| Error::io(&p, "stat", e))?;
        if !m.is_file() || m.len() != pf.size {
            return Err(Error::Verify {
                at: Location::file(&p),
                reason: format!(
                    "the shared staging file is {} bytes (or not a plain file), planned {}",
                    m.len(),
                    pf.size
                ),
            });
        }
    }
    Ok(())
}

/// Checks every unit's record and part, assembles each output file in the staging directory
/// (a file one unit wrote whole is its part; others are the first part with the rest
/// appended), verifies it, and commits with `convert`'s transaction; then removes the staging
/// directory. `opts` is the plan's command as convert options.
pub fn finish(
    plan: &UnitPlan,
    opts: &ConvertOptions,
    progress: &dyn Progress,
) -> Result<FinishReport> {
    let records = records(plan)?;
    // Held until the staging directory is gone: no unit writes into a published file.
    let _no_unit_writes = match plan.in_place {
        true => (0..plan.files.len())
            .map(|f| super::in_place::lock_for_finish(plan, f))
            .collect::<Result<Vec<_>>>()?,
        false => Vec::new(),
    };
    let report = with_planned_job(plan, opts, |job| {
        let hashes = recorded_hashes(plan, &records)?;
        check_parts(plan)?;
        let prepared = job.prepare(false)?;
        let files = assemble(plan, job, &hashes, progress)?;
        let committed = job.commit(prepared, files)?;
        Ok(FinishReport {
            files: committed.files,
            extras: committed.extras,
            removed: committed.removed,
            units: plan.units.len(),
            tensors: job.tensor_count(),
            data_bytes: data_bytes(job),
            verified: true,
            io: job.io().counts(),
        })
    })?;
    std::fs::remove_dir_all(&plan.staging)
        .map_err(|e| Error::io(&plan.staging, "remove staging directory", e))?;
    Ok(report)
}

/// Every output file built from the parts and verified (the format's sink lays the files out
/// as `convert` does: their headers are copied from it), then linked beside its target as the
/// temp file the transaction publishes.
fn assemble(
    plan: &UnitPlan,
    job: &Job,
    hashes: &[ContentHash],
    progress: &dyn Progress,
) -> Result<Vec<FinishedFile>> {
    let (sink, staged) = job.stage(None)?;
    progress.start("verify", data_bytes(job));
    if plan.files.len() != job.output_plan().files.len() {
        return Err(Error::Internal("the plan's files are not the job's".into()));
    }
    let mut built = Vec::with_capacity(plan.files.len());
    for (f, pf) in plan.files.iter().enumerate() {
        let st = staged.iter().find(|s| s.path == pf.path);
        let one = st
            .ok_or_else(|| Error::Internal(format!("the sink did not stage {}", pf.path.display())))
            .and_then(|st| {
                let header = read_header(&st.temp, plan.files[f].data_start)?;
                let first = build_file(plan, f, &header, job.io())?;
                let check = StagedFile {
                    temp: first.clone(),
                    ..st.clone()
                };
                job.verify(&check, hashes, progress)
                    .map_err(|e| blame(plan, f, e))?;
                check_between_tensors(plan, f, &first, &st.temp)?;
                Ok((first, check))
            });
        match one {
            Ok(b) => built.push(b),
            Err(e) => {
                (0..=f).for_each(|g| cut_back(plan, g));
                return Err(e);
            }
        }
    }
    progress.finish();
    drop(sink);
    built
        .iter()
        .map(|(first, st)| link_beside(first, st, job.io()))
        .collect()
}

/// The job's tensor data bytes.
fn data_bytes(job: &Job) -> u64 {
    (0..job.tensor_count())
        .map(|k| job.tensor(k).byte_len)
        .sum()
}

/// The byte ranges of output file `f` that hold no tensor: the header, the padding between
/// tensors, the end.
fn between_tensors(plan: &UnitPlan, f: usize) -> Vec<(u64, u64)> {
    let mut tensors: Vec<(u64, u64)> = (0..plan.at.len())
        .filter(|&k| plan.at[k].0 == f)
        .map(|k| (plan.at[k].1, plan.at[k].1 + plan.bytes[k]))
        .collect();
    tensors.sort_unstable();
    let (mut gaps, mut at) = (Vec::new(), 0);
    for (start, end) in tensors.into_iter().chain([(plan.files[f].size, 0)]) {
        if start > at {
            gaps.push((at, start));
        }
        at = at.max(end);
    }
    gaps
}

/// Every byte of the built file `built` outside its tensors (header, padding, end) against the
/// format's own layout of the file (`layout`, the sink's staged file: the header it rendered,
/// its padding): the tensors are checked by their content hashes, these bytes one by one, so
/// no byte of the file reaches the output unchecked.
fn check_between_tensors(plan: &UnitPlan, f: usize, built: &Path, layout: &Path) -> Result<()> {
    let open = |p: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(p)
            .map_err(|e| Error::io(p, "open", e))
    };
    let (got, want) = (open(built)?, open(layout)?);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for (start, end) in between_tensors(plan, f) {
        let mut at = start;
        while at < end {
            let n = (end - at).min(1 << 20) as usize;
            a.resize(n, 0);
            b.resize(n, 0);
            got.read_exact_at(&mut a, at)
                .map_err(|e| Error::io(built, "read back", e))?;
            want.read_exact_at(&mut b, at)
                .map_err(|e| Error::io(layout, "read", e))?;
            if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
                return Err(padding_altered(plan, f, at + i as u64, a[i], b[i]));
            }
            at += n as u64;
        }
    }
    Ok(())
}

/// Byte `off` of output file `f` (no tensor's) is `got`, the format lays out `want`: blamed on
/// the part (or shared staging file) that holds it.
fn padding_altered(plan: &UnitPlan, f: usize, off: u64, got: u8, want: u8) -> Error {
    let what = format!(
        "byte {off} of {} (padding or header, no tensor's) is {got:#04x}, the format writes \
         {want:#04x}",
        plan.files[f].path.display()
    );
    if plan.in_place {
        let path = in_place_path(plan, f);
        return Error::Verify {
            reason: format!(
                "the shared staging file changed after the units wrote it ({what}); delete \
                 {} and the units' records, and rerun the units; nothing was written",
                path.display()
            ),
            at: Location::file(path).at(off),
        };
    }
    let seg = plan
        .segments_of_file(f)
        .into_iter()
        .find(|(_, _, s)| s.start <= off && off < s.end);
    match seg {
        Some((u, j, s)) => {
            let e = altered(plan, u, &part_path(plan, u, j), what);
            match e {
                Error::Verify { at, reason } => Error::Verify {
                    at: at.at(off - s.start),
                    reason,
                },
                other => other,
            }
        }
        None => Error::Internal(what),
    }
}

fn read_header(temp: &Path, len: u64) -> Result<Vec<u8>> {
    let f = std::fs::File::open(temp).map_err(|e| Error::io(temp, "open", e))?;
    let mut h = vec![0u8; len as usize];
    f.read_exact_at(&mut h, 0)
        .map_err(|e| Error::io(temp, "read header", e))?;
    Ok(h)
}

/// A verification failure of file `f` as the unit whose part holds the tensor.
fn blame(plan: &UnitPlan, f: usize, e: Error) -> Error {
    let Error::Verify { at, reason } = &e else {
        return e;
    };
    let names = &plan.tensor_names;
    let hit = at
        .tensor
        .as_ref()
        .and_then(|t| (0..plan.at.len()).find(|&k| plan.at[k].0 == f && names.get(k) == Some(t)));
    let Some(k) = hit else {
        return e;
    };
    let Some(u) = plan.units.iter().position(|ts| ts.contains(&k)) else {
        return e;
    };
    let off = plan.at[k].1;
    let j = plan.segments[u]
        .iter()
        .position(|s| s.file == f && s.start <= off && off <= s.end)
        .unwrap_or(0);
    let name = weightport_core::sanitize(&names[k]);
    altered(
        plan,
        u,
        &part_path(plan, u, j),
        format!("tensor `{name}`: {reason}"),
    )
}

/// Output file `f` built in the staging directory from its parts, in file order: the first
/// (from byte 0) gets the header over its zeros and the others appended (`copy_file_range`:
/// in the kernel, or a clone of the extents where the filesystem can). One part: nothing is
/// copied. Returns the first part's path, now the whole file (fsynced).
fn build_file(plan: &UnitPlan, f: usize, header: &[u8], io: &IoCounter) -> Result<PathBuf> {
    let segs = plan.segments_of_file(f);
    let &(u0, j0, s0) = segs
        .first()
        .ok_or_else(|| Error::Internal(format!("no part of output file {f}")))?;
    let first = part_path(plan, u0, j0);
    if plan.in_place {
        return header_into_shared(&first, header, io);
    }
    let out = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&first)
        .map_err(|e| Error::io(&first, "open part", e))?;
    io.first_open();
    let m = out
        .metadata()
        .map_err(|e| Error::io(&first, "stat part", e))?;
    if m.nlink() > 1 {
        return Err(Error::Verify {
            at: Location::file(&first),
            reason: "the part has another link (an output file published by a finish that was \
                     stopped before removing the staging directory?); check the output, then \
                     remove the staging directory"
                .into(),
        });
    }
    let err = |what: &'static str| {
        let p = first.clone();
        move |e| Error::io(&p, what, e)
    };
    out.set_len(s0.end).map_err(err("truncate"))?;
    let r = append(plan, &out, header, &segs, io);
    if r.is_err() {
        let _ = out.set_len(s0.end);
    }
    r?;
    io.synced();
    out.sync_all().map_err(err("fsync"))?;
    Ok(first)
}

/// `in_place`: the header written into the shared staging file `path` (every unit wrote its
/// tensors there), fsynced; nothing appended.
fn header_into_shared(path: &Path, header: &[u8], io: &IoCounter) -> Result<PathBuf> {
    let out = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| Error::io(path, "open shared staging file", e))?;
    io.first_open();
    let m = out.metadata().map_err(|e| Error::io(path, "stat", e))?;
    if m.nlink() > 1 {
        return Err(Error::Verify {
            at: Location::file(path),
            reason: "the staging file has another link (an output file published by a finish \
                     that was stopped before removing the staging directory?); check the \
                     output, then remove the staging directory"
                .into(),
        });
    }
    write_all_at(&out, path, header, 0, io)?;
    io.synced();
    out.sync_all().map_err(|e| Error::io(path, "fsync", e))?;
    Ok(path.to_path_buf())
}

/// Cuts the first part of output file `f` back to the length its unit wrote (best effort: the
/// next `finish` does it again), so a failed `finish` leaves the parts as the units left them
/// but for the header's bytes.
fn cut_back(plan: &UnitPlan, f: usize) {
    if plan.in_place {
        return; // nothing was appended
    }
    let Some(&(u, j, s)) = plan.segments_of_file(f).first() else {
        return;
    };
    let first = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(part_path(plan, u, j));
    if let Ok(file) = first {
        if file.metadata().is_ok_and(|m| m.nlink() == 1) {
            let _ = file.set_len(s.end);
        }
    }
}

fn append(
    plan: &UnitPlan,
    out: &File,
    header: &[u8],
    segs: &[(usize, usize, crate::planfile::Segment)],
    io: &IoCounter,
) -> Result<()> {
    let (u0, j0, s0) = segs[0];
    let first = part_path(plan, u0, j0);
    write_all_at(out, &first, header, 0, io)?;
    let mut at = s0.end;
    for &(u, j, s) in &segs[1..] {
        let p = part_path(plan, u, j);
        let r = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&p)
            .map_err(|e| Error::io(&p, "open part", e))?;
        let n = copy_whole(&r, out, &first, at, io)?;
        at += n;
        if n != s.end - s.start {
            return Err(altered(
                plan,
                u,
                &p,
                format!("is {n} bytes, recorded {}", s.end - s.start),
            ));
        }
    }
    Ok(())
}

/// Copies all of `from` into `to` (`to_path` in errors) from offset `at` on, with
/// `copy_file_range` (in the kernel, or a clone of the extents where the filesystem can), else
/// by reads and writes; returns the bytes copied. Every call that writes is counted in `io`.
fn copy_whole(from: &File, to: &File, to_path: &Path, at: u64, io: &IoCounter) -> Result<u64> {
    use std::os::fd::AsRawFd;
    let fail = |e| Error::io(to_path, "append part", e);
    let (mut off_in, mut off_out) = (0i64, i64::try_from(at).map_err(|_| fail(overflow()))?);
    loop {
        // SAFETY: two open descriptors and two offsets owned here; the kernel copies between
        // the files and advances the offsets.
        let n = unsafe {
            libc::copy_file_range(
                from.as_raw_fd(),
                &mut off_in,
                to.as_raw_fd(),
                &mut off_out,
                1 << 30,
                0,
            )
        };
        match n {
            0 => return Ok(off_in as u64),
            n if n > 0 => io.wrote(n as u64),
            _ => {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::EXDEV | libc::ENOSYS | libc::EOPNOTSUPP | libc::EINVAL)
                        if off_in == 0 =>
                    {
                        return copy_by_reads(from, to, to_path, at, io)
                    }
                    _ => return Err(fail(e)),
                }
            }
        }
    }
}

fn overflow() -> std::io::Error {
    std::io::Error::other("offset out of range")
}

/// [`copy_whole`] where the kernel cannot copy between the two files.
fn copy_by_reads(from: &File, to: &File, to_path: &Path, at: u64, io: &IoCounter) -> Result<u64> {
    let mut buf = vec![0u8; 8 << 20];
    let mut done = 0u64;
    loop {
        let n = match from.read_at(&mut buf, done) {
            Ok(0) => return Ok(done),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(to_path, "append part", e)),
        };
        write_all_at(to, to_path, &buf[..n], at + done, io)?;
        done += n as u64;
    }
}

/// Links (else moves) a built file to a temp name beside its target: the transaction renames it
/// into place. A commit that fails removes the link and leaves the part where it was.
fn link_beside(built: &Path, st: &StagedFile, io: &IoCounter) -> Result<FinishedFile> {
    let mut t = TempFile::beside(&st.path, io)?;
    t.adopt(built)?;
    Ok(FinishedFile {
        temp: t,
        size: st.size,
        tensors: st.tensors.len(),
    })
}
