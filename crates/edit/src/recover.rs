//! Rolling a journal back: every range's pre-image written back, the files fsynced, then the
//! journal removed. Idempotent, so a rollback killed half-way is finished by the next one.
//!
//! Used three ways: a reader finding a killed edit's journal ([`crate::lock::settle`]),
//! `edit --recover`, and `edit --undo` (which first turns the kept undo journal back into a
//! pending one, so a killed undo is finished by the next opener too).

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use weightport_core::staging::{stale_temp_owner, sync_dir, OutputLock};
use weightport_core::{sanitize, shown, Error, Location, Result};

use crate::journal::{journals_for, Journal};
use crate::target::open_rw;

/// The journal of a killed edit that covers the resolved file `real`, if there is one.
pub fn pending_for(real: &Path) -> Result<Option<PathBuf>> {
    Ok(journals_for(real)
        .into_iter()
        .find(|j| std::fs::symlink_metadata(j).is_ok()))
}

/// Removes the half-written journal temp files (`.{journal}.{pid}.{random}.wp-tmp`, for any
/// file of the directory) of edits killed before they published their journal: their process
/// is gone, and the target was not touched yet (nothing is written to it before the journal is
/// published). Best effort: a temp that cannot be removed is left for the next opener. Each
/// directory is listed once per process (a repo of many shards is not listed once per shard).
pub fn sweep_stale_temps(real: &Path) {
    static SWEPT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let dir = real.parent().unwrap_or(Path::new("."));
    match SWEPT.lock() {
        Ok(mut seen) if !seen.iter().any(|d| d == dir) => seen.push(dir.to_path_buf()),
        _ => return,
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("..") && n.contains(".wp-journal.") && stale_temp_owner(&n).is_some() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Checks the journal's files are the ones it was written for and opens them for writing, in
/// its order. The caller holds (or takes, with `lock`) their exclusive locks.
fn open_files(j: &Journal, lock: bool) -> Result<Vec<File>> {
    let mut out = Vec::new();
    for (f, p) in j.files.iter().zip(j.file_paths()) {
        let fd = open_rw(&p)?;
        if lock && !exclusive_soon(&fd, &p)? {
            return Err(Error::Usage(format!(
                "{}: an interrupted edit must be rolled back, but another process keeps the \
                 file open; retry when it finishes",
                shown(&p)
            )));
        }
        let m = fd.metadata().map_err(|e| Error::io(&p, "stat", e))?;
        if (m.dev(), m.ino(), m.len()) != (f.dev, f.ino, f.size) {
            return Err(Error::Refused {
                at: Location::file(&p),
                reason: format!(
                    "the edit journal {} was written for another file of this name (replaced or \
                     resized since); it was not applied. If the file was replaced on purpose, \
                     remove the journal",
                    shown(&j.path)
                ),
            });
        }
        out.push(fd);
    }
    Ok(out)
}

/// Takes an exclusive flock, retrying for up to about two seconds (another reader may be
/// between finding the journal and rolling it back itself).
fn exclusive_soon(fd: &File, p: &Path) -> Result<bool> {
    use std::os::fd::AsRawFd;
    for _ in 0..100 {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) && e.raw_os_error() != Some(libc::EINTR) {
            return Err(Error::io(p, "lock", e));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(false)
}

/// Writes every pre-image of `j` back into `files` (its files, in order) and fsyncs them.
pub fn restore(j: &Journal, files: &[File]) -> Result<u64> {
    let paths = j.file_paths();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    for (i, r) in j.ranges.iter().enumerate() {
        let size = j.files[r.file].size;
        if r.offset.checked_add(r.len).is_none_or(|e| e > size) {
            return Err(Error::malformed(
                Location::file(&j.path).tensor(r.tensor.clone()),
                None,
                format!(
                    "edit journal: range {}+{} is past the end of the file",
                    r.offset, r.len
                ),
            ));
        }
        let mut done = 0u64;
        while done < r.len {
            let n = (r.len - done).min(buf.len() as u64) as usize;
            j.read(i, done, &mut buf[..n])?;
            files[r.file]
                .write_all_at(&buf[..n], r.offset + done)
                .map_err(|e| Error::io(&paths[r.file], "restore", e))?;
            done += n as u64;
        }
        total += r.len;
    }
    for (f, p) in files.iter().zip(&paths) {
        f.sync_all().map_err(|e| Error::io(p, "fsync", e))?;
    }
    Ok(total)
}

/// Tensors named by a journal's ranges, deduplicated, for messages.
pub fn tensors_of(j: &Journal) -> Vec<String> {
    let mut v: Vec<String> = j.ranges.iter().map(|r| r.tensor.clone()).collect();
    v.dedup();
    v.sort();
    v.dedup();
    v
}

/// What a rollback did, in words.
pub fn rolled_back_text(j: &Journal, bytes: u64, what: &str) -> String {
    let names: Vec<String> = j.files.iter().map(|f| f.name.clone()).collect();
    let tensors = tensors_of(j);
    let shown_tensors: Vec<String> = tensors
        .iter()
        .take(5)
        .map(|t| format!("`{}`", sanitize(t)))
        .collect();
    let more = tensors.len().saturating_sub(5);
    format!(
        "{what} of {}: {} ranges ({bytes} bytes) of {}{} restored from {}",
        sanitize(&names.join(", ")),
        j.ranges.len(),
        shown_tensors.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        },
        shown(&j.path)
    )
}

/// Rolls back the pending journal `jpath` under the edit's locks (taken here). `Ok(None)` when
/// another process rolled it back first. The text says what was restored.
pub fn roll_back_journal(jpath: &Path, shown_as: &Path) -> Result<Option<String>> {
    let dir = jpath.parent().unwrap_or(Path::new("."));
    let mut side = vec![
        OutputLock::acquire(&dir.join(".weightport.lock"), shown_as).map_err(|_| {
            Error::Usage(format!(
                "{}: an interrupted edit must be rolled back, but another weightport run holds \
             its directory; retry when it finishes",
                shown(shown_as)
            ))
        })?,
    ];
    if std::fs::symlink_metadata(jpath).is_err() {
        return Ok(None);
    }
    let j = Journal::open(jpath)?;
    for f in &j.files {
        side.push(OutputLock::acquire(
            &dir.join(format!(".{}.wp-lock", f.name)),
            shown_as,
        )?);
    }
    let files = open_files(&j, true)?;
    let bytes = restore(&j, &files)?;
    std::fs::remove_file(jpath).map_err(|e| Error::io(jpath, "remove journal", e))?;
    sync_dir(dir)?;
    drop(side);
    Ok(Some(rolled_back_text(
        &j,
        bytes,
        "rolled back an interrupted edit",
    )))
}

/// Rolls back a pending journal with the locks the caller already holds (`files`: the target's
/// files, which must be the journal's).
pub fn roll_back_held(jpath: &Path, files: &[File]) -> Result<String> {
    let j = Journal::open(jpath)?;
    let _check = open_files(&j, false)?;
    let bytes = restore(&j, files)?;
    std::fs::remove_file(jpath).map_err(|e| Error::io(jpath, "remove journal", e))?;
    sync_dir(jpath.parent().unwrap_or(Path::new(".")))?;
    Ok(rolled_back_text(&j, bytes, "reverted"))
}
