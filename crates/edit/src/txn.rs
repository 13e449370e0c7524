//! The in-place transaction.
//!
//! ```text
//! settle:  roll back a killed edit's journal (as every reader does)
//! lock:    convert's lock files for the file and its directory + flock(EX) on every file
//! scan:    per tensor, chunks of the candidate ranges: old bytes → steps → new bytes;
//!          the units whose bytes differ, merged across gaps under 512 bytes
//! journal: the pre-image of every changed range → temp file → fsync → renamed to
//!          .NAME.wp-journal → directory fsynced          (nothing written to the target yet)
//! write:   the new bytes of each range (pwrite), hashed → fsync every file
//! check:   each range dropped from the page cache and read back; its hash must be the written
//!          one (else the journal is rolled back and the edit fails)
//! rest:    with --verify-rest, every byte outside the changed ranges hashed again and
//!          compared with its hash from before the scan
//! commit:  remove the journal (fsync dir); with --keep-undo append the post-image hashes and
//!          rename it to .NAME.wp-undo instead
//! ```
//! A kill before the journal's rename leaves the file untouched; after it, the next opener rolls
//! back. Up to [`IN_MEMORY`] bytes of candidates are scanned once and kept; beyond, the scan and
//! the write each read the ranges again in [`CHUNK`]-sized pieces, so memory stays bounded.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use weightport_core::staging::sync_dir;
use weightport_core::{shown, Error, Location, Result};
use xxhash_rust::xxh3::Xxh3;

use crate::journal::{append_post, JournalWriter, Range};
use crate::lock::EditLock;
use crate::ops::TensorEdit;
use crate::target::Target;

/// Candidate bytes up to which the scan keeps old and new bytes in memory.
pub(crate) const IN_MEMORY: u64 = 16 << 20;
/// Piece size of the streaming scan and write.
pub(crate) const CHUNK: u64 = 4 << 20;
/// Changed runs separated by fewer unchanged bytes are written as one range.
pub(crate) const GAP: u64 = 512;

/// How to run an edit.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct EditOptions {
    /// Report what would change; write nothing.
    pub dry_run: bool,
    /// Keep the journal so `--undo` can revert this edit.
    pub keep_undo: bool,
    /// Re-hash every byte outside the changed ranges and compare with before.
    pub verify_rest: bool,
}

/// What changed in one tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorChange {
    /// Index into [`Target::tensors`].
    pub tensor: usize,
    /// Elements whose bytes changed (for a block type: elements of changed rows).
    pub elements: u64,
    /// Absolute byte ranges written, `[start, end)`, in its file.
    pub ranges: Vec<(u64, u64)>,
}

/// What an edit did (or, dry, would do).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct EditReport {
    /// Changed tensors, in file order.
    pub changes: Vec<TensorChange>,
    /// Bytes written to the target (or that would be).
    pub bytes: u64,
    /// The undo journal kept, if any.
    pub undo: Option<PathBuf>,
    /// An older undo journal this edit made stale and removed.
    pub dropped_undo: Option<PathBuf>,
    /// True when every byte outside the changed ranges was re-hashed and found unchanged.
    pub verified_rest: bool,
}

/// The scan's result for one tensor.
struct Scanned {
    change: TensorChange,
    /// Tensor-relative ranges, and (in memory) their old and new bytes.
    ranges: Vec<(u64, u64)>,
    kept: Option<Vec<(Vec<u8>, Vec<u8>)>>,
}

fn pread(f: &File, path: &Path, off: u64, buf: &mut [u8]) -> Result<()> {
    f.read_exact_at(buf, off)
        .map_err(|e| Error::io(path, "read", e))
}

/// Runs an edit of `t` (the caller has settled its files; `lock` is held unless dry).
pub(crate) fn run(
    t: &Target,
    edits: &[TensorEdit],
    lock: Option<&EditLock>,
    opts: EditOptions,
) -> Result<EditReport> {
    let readers: Vec<File> = match lock {
        Some(l) => l
            .files
            .iter()
            .map(|f| f.try_clone())
            .collect::<std::io::Result<_>>()
            .map_err(|e| Error::io(&t.given, "dup", e))?,
        None => t
            .files
            .iter()
            .map(|f| File::open(&f.path).map_err(|e| Error::io(&f.shown, "open", e)))
            .collect::<Result<_>>()?,
    };
    let total: u64 = edits
        .iter()
        .flat_map(|e| e.candidates(&t.tensors[e.tensor]))
        .map(|(a, b)| b - a)
        .sum();
    let keep = total <= IN_MEMORY;
    let rest_before = match (opts.verify_rest, lock) {
        (true, Some(_)) => Some(rest_hashes(t, &readers, edits)?),
        _ => None,
    };
    let scanned: Vec<Scanned> = edits
        .iter()
        .map(|e| scan(t, e, &readers, keep))
        .collect::<Result<_>>()?;
    let mut report = EditReport {
        bytes: scanned
            .iter()
            .flat_map(|s| &s.ranges)
            .map(|(a, b)| b - a)
            .sum(),
        changes: scanned
            .iter()
            .filter(|s| !s.ranges.is_empty())
            .map(|s| s.change.clone())
            .collect(),
        ..Default::default()
    };
    let Some(lock) = lock.filter(|_| !opts.dry_run) else {
        return Ok(report);
    };
    let undo_path = t.side("wp-undo");
    if report.changes.is_empty() {
        return Ok(report);
    }
    check_space(t, report.bytes)?;
    reserve(t, &lock.files, &scanned, edits)?;
    let jpath = write_journal(t, &readers, &scanned, edits)?;
    let post = write_ranges(t, &lock.files, &readers, &scanned, edits)?;
    sync_files(t, &lock.files)?;
    if let Err(e) = read_back(t, &readers, &scanned, edits, &post) {
        crate::recover::roll_back_held(&jpath, &lock.files)?;
        return Err(e);
    }
    if let Some(before) = rest_before {
        let after = rest_hashes(t, &readers, edits)?;
        if let Some(k) = before.iter().zip(&after).position(|(a, b)| a != b) {
            append_post(&jpath, &post)?;
            std::fs::rename(&jpath, &undo_path)
                .map_err(|e| Error::io(&undo_path, "keep undo journal", e))?;
            sync_dir(&t.dir)?;
            return Err(rest_changed(t, k, &undo_path));
        }
        report.verified_rest = true;
    }
    commit(t, &jpath, &undo_path, &post, opts, &mut report)?;
    Ok(report)
}

/// Journal first, target after: is the directory short of room for the journal?
fn check_space(t: &Target, bytes: u64) -> Result<()> {
    let Some((free, block)) = fs_space(&t.dir) else {
        return Ok(());
    };
    let need = (bytes + (1 << 20)).div_ceil(block) * block;
    if free < need {
        return Err(Error::io(
            &t.dir,
            "check free space for the edit journal in",
            std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                format!("the journal needs {need} bytes (the pre-images of the changed ranges), {free} are free; nothing was changed"),
            ),
        ));
    }
    Ok(())
}

/// Free bytes and block size where `path` is.
fn fs_space(path: &Path) -> Option<(u64, u64)> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value to be overwritten.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    #[allow(clippy::unnecessary_cast)]
    (rc == 0).then(|| {
        (
            s.f_bavail as u64 * s.f_frsize as u64,
            (s.f_frsize as u64).max(512),
        )
    })
}

/// Makes sure every range to write is allocated (a sparse file's holes need blocks), so a full
/// disk fails here, before the journal, not in the middle of the writes.
fn reserve(t: &Target, files: &[File], scanned: &[Scanned], edits: &[TensorEdit]) -> Result<()> {
    use std::os::fd::AsRawFd;
    for (s, e) in scanned.iter().zip(edits) {
        let p = &t.tensors[e.tensor];
        for &(a, b) in &s.ranges {
            // SAFETY: fallocate on a descriptor we own; KEEP_SIZE never changes the length.
            let rc = unsafe {
                libc::fallocate(
                    files[p.file].as_raw_fd(),
                    libc::FALLOC_FL_KEEP_SIZE,
                    (p.offset + a) as i64,
                    (b - a) as i64,
                )
            };
            if rc != 0 {
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
                    return Err(Error::io(
                        &t.files[p.file].shown,
                        "reserve the ranges to write",
                        err,
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Finds the changed ranges of one tensor (module docs).
fn scan(t: &Target, e: &TensorEdit, readers: &[File], keep: bool) -> Result<Scanned> {
    let p = &t.tensors[e.tensor];
    let unit = p.unit().max(1);
    let step = (CHUNK / unit).max(1) * unit;
    let per_unit = if p.dtype.is_block() {
        p.shape.last().copied().unwrap_or(1)
    } else {
        1
    };
    let (f, path) = (&readers[p.file], &t.files[p.file].shown);
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut kept = keep.then(Vec::new);
    let mut units = 0u64;
    for (a, b) in e.candidates(p) {
        let mut s = a;
        while s < b {
            let n = step.min(b - s);
            let mut old = vec![0u8; n as usize];
            pread(f, path, p.offset + s, &mut old)?;
            let mut new = old.clone();
            e.apply(p, s, &mut new)
                .map_err(|err| at_tensor(err, t, e.tensor))?;
            for (k, (o, w)) in old
                .chunks_exact(unit as usize)
                .zip(new.chunks_exact(unit as usize))
                .enumerate()
            {
                if o != w {
                    units += 1;
                    add_unit(&mut ranges, s + k as u64 * unit, unit);
                }
            }
            if let Some(k) = kept.as_mut() {
                k.push((s, old, new));
            }
            s += n;
        }
    }
    let kept = kept
        .map(|k| slice_kept(&ranges, k, f, path, p.offset))
        .transpose()?;
    let change = TensorChange {
        tensor: e.tensor,
        elements: units * per_unit,
        ranges: ranges
            .iter()
            .map(|(a, b)| (p.offset + a, p.offset + b))
            .collect(),
    };
    Ok(Scanned {
        change,
        ranges,
        kept,
    })
}

fn add_unit(ranges: &mut Vec<(u64, u64)>, at: u64, unit: u64) {
    match ranges.last_mut() {
        Some(last) if at <= last.1 + GAP => last.1 = at + unit,
        _ => ranges.push((at, at + unit)),
    }
}

/// The old and new bytes of each changed range: the old read again (a merged range may span
/// bytes between candidate ranges, which were not scanned and do not change), the new taken from
/// the scanned chunks over them.
fn slice_kept(
    ranges: &[(u64, u64)],
    chunks: Vec<(u64, Vec<u8>, Vec<u8>)>,
    f: &File,
    path: &Path,
    base: u64,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    ranges
        .iter()
        .map(|&(a, b)| {
            let mut old = vec![0u8; (b - a) as usize];
            pread(f, path, base + a, &mut old)?;
            let mut new = old.clone();
            for (s, _, n) in &chunks {
                let e = s + n.len() as u64;
                let (lo, hi) = (a.max(*s), b.min(e));
                if lo < hi {
                    new[(lo - a) as usize..(hi - a) as usize]
                        .copy_from_slice(&n[(lo - s) as usize..(hi - s) as usize]);
                }
            }
            Ok((old, new))
        })
        .collect()
}

/// A step's refusal, located at the tensor in the target.
fn at_tensor(e: Error, t: &Target, i: usize) -> Error {
    match e {
        Error::Refused { at, reason } if at.path.as_os_str().is_empty() => Error::Refused {
            at: t.tensors[i].at(t),
            reason,
        },
        other => other,
    }
}

/// The pre-images of every range, sealed and published.
fn write_journal(
    t: &Target,
    readers: &[File],
    scanned: &[Scanned],
    edits: &[TensorEdit],
) -> Result<PathBuf> {
    let mut j = JournalWriter::create(t, &t.side("wp-journal"))?;
    for (s, e) in scanned.iter().zip(edits) {
        let p = &t.tensors[e.tensor];
        for (k, &(a, b)) in s.ranges.iter().enumerate() {
            let range = Range {
                file: p.file,
                offset: p.offset + a,
                len: b - a,
                tensor: p.name.clone(),
            };
            match &s.kept {
                Some(kept) => j.add(range, &kept[k].0)?,
                None => {
                    j.start(range);
                    let mut at = a;
                    while at < b {
                        let mut buf = vec![0u8; CHUNK.min(b - at) as usize];
                        pread(
                            &readers[p.file],
                            &t.files[p.file].shown,
                            p.offset + at,
                            &mut buf,
                        )?;
                        j.extend(&buf)?;
                        at += buf.len() as u64;
                    }
                }
            }
        }
    }
    j.seal()
}

/// Writes every range's new bytes; returns the hash of each, in journal order.
fn write_ranges(
    t: &Target,
    files: &[File],
    readers: &[File],
    scanned: &[Scanned],
    edits: &[TensorEdit],
) -> Result<Vec<u128>> {
    let mut post = Vec::new();
    for (s, e) in scanned.iter().zip(edits) {
        let p = &t.tensors[e.tensor];
        let path = &t.files[p.file].shown;
        for (k, &(a, b)) in s.ranges.iter().enumerate() {
            let mut h = Xxh3::new();
            let mut put = |at: u64, bytes: &[u8]| -> Result<()> {
                h.update(bytes);
                files[p.file]
                    .write_all_at(bytes, p.offset + at)
                    .map_err(|err| Error::io(path, "write", err))
            };
            match &s.kept {
                Some(kept) => put(a, &kept[k].1)?,
                None => {
                    let step = (CHUNK / p.unit().max(1)).max(1) * p.unit().max(1);
                    let mut at = a;
                    while at < b {
                        let mut buf = vec![0u8; step.min(b - at) as usize];
                        pread(&readers[p.file], path, p.offset + at, &mut buf)?;
                        e.apply(p, at, &mut buf)?;
                        put(at, &buf)?;
                        at += buf.len() as u64;
                    }
                }
            }
            post.push(h.digest128());
        }
    }
    Ok(post)
}

fn sync_files(t: &Target, files: &[File]) -> Result<()> {
    for (f, tf) in files.iter().zip(&t.files) {
        f.sync_all().map_err(|e| Error::io(&tf.shown, "fsync", e))?;
    }
    Ok(())
}

/// Drops each written range from the page cache and reads it back from the disk; its hash must
/// be the one written.
fn read_back(
    t: &Target,
    readers: &[File],
    scanned: &[Scanned],
    edits: &[TensorEdit],
    post: &[u128],
) -> Result<()> {
    use std::os::fd::AsRawFd;
    let mut k = 0;
    for (s, e) in scanned.iter().zip(edits) {
        let p = &t.tensors[e.tensor];
        let f = &readers[p.file];
        for &(a, b) in &s.ranges {
            // SAFETY: an advisory call on a descriptor we own; it only drops clean cached pages.
            unsafe {
                libc::posix_fadvise(
                    f.as_raw_fd(),
                    (p.offset + a) as i64,
                    (b - a) as i64,
                    libc::POSIX_FADV_DONTNEED,
                )
            };
            let mut h = Xxh3::new();
            let mut at = a;
            while at < b {
                let mut buf = vec![0u8; CHUNK.min(b - at) as usize];
                pread(f, &t.files[p.file].shown, p.offset + at, &mut buf)?;
                h.update(&buf);
                at += buf.len() as u64;
            }
            if h.digest128() != post[k] {
                return Err(Error::Verify {
                    at: Location::file(&t.files[p.file].shown).tensor(p.name.clone()).at(p.offset + a),
                    reason: format!("bytes {}..{} read back differ from what was written; the edit was rolled back", p.offset + a, p.offset + b),
                });
            }
            k += 1;
        }
    }
    Ok(())
}

/// Hashes of every tensor's bytes outside the edited tensors' candidate ranges, and of each
/// file's bytes outside every tensor (its header and padding), in a fixed order.
fn rest_hashes(t: &Target, readers: &[File], edits: &[TensorEdit]) -> Result<Vec<u128>> {
    let mut out = Vec::new();
    for (fi, tf) in t.files.iter().enumerate() {
        let mut skip: Vec<(u64, u64)> = edits
            .iter()
            .filter(|e| t.tensors[e.tensor].file == fi)
            .flat_map(|e| {
                let p = &t.tensors[e.tensor];
                e.candidates(p)
                    .into_iter()
                    .map(|(a, b)| (p.offset + a, p.offset + b))
                    .collect::<Vec<_>>()
            })
            .collect();
        skip = crate::ops::merge(skip);
        let mut bounds: Vec<(u64, u64)> = t
            .tensors
            .iter()
            .filter(|p| p.file == fi)
            .map(|p| (p.offset, p.offset + p.byte_len))
            .collect();
        bounds.sort_unstable();
        let mut header = Xxh3::new();
        let mut pos = 0;
        for &(a, b) in &bounds {
            hash_span(&readers[fi], &tf.shown, pos, a, &[], &mut header)?;
            let mut h = Xxh3::new();
            hash_span(&readers[fi], &tf.shown, a, b, &skip, &mut h)?;
            out.push(h.digest128());
            pos = b;
        }
        hash_span(&readers[fi], &tf.shown, pos, tf.size, &[], &mut header)?;
        out.push(header.digest128());
    }
    Ok(out)
}

/// Hashes `[a, b)` of `f` except the (sorted, absolute) `skip` ranges.
fn hash_span(
    f: &File,
    path: &Path,
    a: u64,
    b: u64,
    skip: &[(u64, u64)],
    h: &mut Xxh3,
) -> Result<()> {
    let mut pos = a;
    let mut buf = vec![0u8; CHUNK as usize];
    for &(s, e) in skip
        .iter()
        .filter(|(s, e)| *e > a && *s < b)
        .chain(std::iter::once(&(b, b)))
    {
        let stop = s.clamp(pos, b);
        while pos < stop {
            let n = (stop - pos).min(CHUNK) as usize;
            pread(f, path, pos, &mut buf[..n])?;
            h.update(&buf[..n]);
            pos += n as u64;
        }
        pos = pos.max(e.min(b));
    }
    Ok(())
}

/// Which tensor (or header) the `k`-th rest hash belongs to.
fn rest_changed(t: &Target, k: usize, undo: &Path) -> Error {
    let mut i = 0;
    for (fi, tf) in t.files.iter().enumerate() {
        let mut names: Vec<(u64, &str)> = t
            .tensors
            .iter()
            .filter(|p| p.file == fi)
            .map(|p| (p.offset, p.name.as_str()))
            .collect();
        names.sort_unstable();
        for (_, n) in names {
            if i == k {
                return Error::Verify {
                    at: Location::file(&tf.shown).tensor(n.to_string()),
                    reason: format!(
                        "bytes outside the edited ranges changed during the edit (another \
                         writer?); the edit was kept and can be reverted with {} ({})",
                        weightport_core::Knob::Undo,
                        shown(undo)
                    ),
                };
            }
            i += 1;
        }
        if i == k {
            return Error::Verify {
                at: Location::file(&tf.shown),
                reason: "the header or padding changed during the edit (another writer?)".into(),
            };
        }
        i += 1;
    }
    Error::Internal("rest hash index out of range".into())
}

/// Removes the journal (or keeps it as the undo journal) and the stale undo journal.
fn commit(
    t: &Target,
    jpath: &Path,
    undo: &Path,
    post: &[u128],
    opts: EditOptions,
    report: &mut EditReport,
) -> Result<()> {
    if opts.keep_undo {
        append_post(jpath, post)?;
        std::fs::rename(jpath, undo).map_err(|e| Error::io(undo, "keep undo journal", e))?;
        report.undo = Some(undo.to_path_buf());
    } else {
        std::fs::remove_file(jpath).map_err(|e| Error::io(jpath, "remove journal", e))?;
        if std::fs::symlink_metadata(undo).is_ok() {
            std::fs::remove_file(undo)
                .map_err(|e| Error::io(undo, "remove stale undo journal", e))?;
            report.dropped_undo = Some(undo.to_path_buf());
        }
    }
    sync_dir(&t.dir)
}
