//! Who may touch a file while an edit runs.
//!
//! * An edit (and `--recover`, `--undo`) holds [`EditLock`]: the lock files `convert` takes for
//!   an output (`.NAME.wp-lock` for the file, `.weightport.lock` for its directory, see
//!   `core::staging::OutputLock`), so a conversion writing that file or repo and an edit exclude
//!   each other; and an exclusive `flock` on each target file itself.
//! * A reader ([`settle`], called by the registry for every file it opens) holds a shared
//!   `flock` on the file for as long as it reads it: an edit does not start while a conversion
//!   reads the file, and a reader waits while an edit runs. Before taking it, a reader finds the
//!   journal of an edit that was killed and rolls it back (so nothing ever reads a half-edited
//!   file), and records a notice saying so ([`take_notices`], printed by the CLI).
//!
//! Locks are `flock`s: released by the kernel when their process dies, so a killed edit never
//! leaves a lock behind (only its journal, which the next opener rolls back).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Mutex;

use weightport_core::staging::OutputLock;
use weightport_core::{shown, Error, Result};

use crate::target::{file_name, open_rw, Target};

static NOTICES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records something a command should tell its user (an edit rolled back on open).
pub(crate) fn notice(text: String) {
    if let Ok(mut n) = NOTICES.lock() {
        n.push(text);
    }
}

/// The notices recorded so far, left in place for [`take_notices`] (a command's JSON document
/// lists them; the CLI prints them all on stderr as it exits).
pub fn notices() -> Vec<String> {
    NOTICES.lock().map(|n| n.clone()).unwrap_or_default()
}

/// Takes the notices recorded so far (the CLI prints them on stderr).
pub fn take_notices() -> Vec<String> {
    NOTICES
        .lock()
        .map(|mut n| std::mem::take(&mut *n))
        .unwrap_or_default()
}

/// `flock(how)` on `f`, retried on EINTR. `Ok(false)`: another holder (non-blocking only).
fn flock(f: &File, how: libc::c_int, path: &Path) -> Result<bool> {
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), how) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(false),
            _ => return Err(Error::io(path, "lock", e)),
        }
    }
}

/// What an edit holds while it runs (module docs).
#[derive(Debug)]
pub(crate) struct EditLock {
    _side: Vec<OutputLock>,
    /// The target files, opened for reading and writing, each under an exclusive flock (in
    /// [`Target::files`] order).
    pub files: Vec<File>,
}

fn busy(what: &Path, holder: &str) -> Error {
    Error::Usage(format!(
        "{}: {holder}; nothing was changed (try again when it finishes)",
        shown(what)
    ))
}

impl EditLock {
    /// Takes every lock of an edit of `t`, failing at once if any is held.
    pub(crate) fn acquire(t: &Target) -> Result<EditLock> {
        let mut side = Vec::new();
        let mut locks = vec![t.dir.join(".weightport.lock")];
        locks.extend(
            t.files
                .iter()
                .map(|f| t.dir.join(format!(".{}.wp-lock", file_name(&f.path)))),
        );
        for l in locks {
            side.push(OutputLock::acquire(&l, &t.given).map_err(|e| match e {
                Error::Usage(_) => busy(
                    &t.given,
                    "another weightport run is writing this file or its directory (a convert \
                     into it, or another edit)",
                ),
                other => other,
            })?);
        }
        let mut files = Vec::new();
        for f in &t.files {
            let fd = open_rw(&f.path)?;
            if !flock(&fd, libc::LOCK_EX | libc::LOCK_NB, &f.path)? {
                return Err(busy(
                    &f.shown,
                    "being read by another process (a weightport convert, diff, slice or inspect)",
                ));
            }
            check_same(&fd, f)?;
            files.push(fd);
        }
        Ok(EditLock { _side: side, files })
    }
}

/// Refuses a descriptor that is not the file the target's header was read from.
fn check_same(fd: &File, f: &crate::target::TargetFile) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = fd.metadata().map_err(|e| Error::io(&f.path, "stat", e))?;
    if (m.dev(), m.ino(), m.len()) != (f.dev, f.ino, f.size) {
        return Err(Error::Usage(format!(
            "{}: replaced or resized while the edit was starting; nothing was changed",
            shown(&f.shown)
        )));
    }
    Ok(())
}

/// A reader's shared lock on one file (module docs); released when dropped.
///
/// It holds no descriptor: the lock is taken on a descriptor that then maps one page of the
/// file and is closed. A `flock` belongs to the open file description, which the mapping keeps
/// alive, so the lock lasts until the page is unmapped (Linux releases it when the last
/// reference to the description goes, `locks_remove_file` in `__fput`). Readers of a 700-shard
/// repo therefore stay within `ulimit -n 256`, as the rest of weightport does.
#[derive(Debug)]
pub struct ReadGuard {
    _held: Held,
}

#[derive(Debug)]
enum Held {
    /// One mapped page of the locked description.
    Page(#[allow(dead_code)] memmap2::Mmap),
    /// An empty file (nothing to map): the descriptor itself.
    File(#[allow(dead_code)] File),
}

impl ReadGuard {
    fn hold(f: File) -> ReadGuard {
        if f.metadata().is_ok_and(|m| m.len() > 0) {
            // SAFETY: a read-only shared map of one page that is never read: a truncation of the
            // file (which would make touching it raise SIGBUS) cannot affect it.
            if let Ok(m) = unsafe { memmap2::MmapOptions::new().len(1).map(&f) } {
                return ReadGuard {
                    _held: Held::Page(m),
                };
            }
        }
        ReadGuard {
            _held: Held::File(f),
        }
    }
}

/// Makes `path` safe to read and keeps it so: rolls back a killed edit's journal (recording a
/// notice, [`take_notices`]), then holds a shared lock for as long as the guard lives (module
/// docs). Waits while an edit of the file runs.
pub fn settle(path: &Path) -> Result<ReadGuard> {
    let (g, n) = settle_noting(path)?;
    n.into_iter().for_each(notice);
    Ok(g)
}

/// [`settle`], returning what was rolled back instead of recording it.
pub(crate) fn settle_noting(path: &Path) -> Result<(ReadGuard, Vec<String>)> {
    let real = path
        .canonicalize()
        .map_err(|e| Error::io(path, "open", e))?;
    let mut notes = Vec::new();
    loop {
        let f = File::open(&real).map_err(|e| Error::io(path, "open", e))?;
        if f.metadata().is_ok_and(|m| !m.is_file()) {
            return Ok((ReadGuard::hold(f), notes));
        }
        flock(&f, libc::LOCK_SH, path)?;
        crate::recover::sweep_stale_temps(&real);
        let Some(j) = crate::recover::pending_for(&real)? else {
            return Ok((ReadGuard::hold(f), notes));
        };
        // We hold a shared lock and a journal is there: its edit is dead (an edit holds its
        // exclusive lock for the journal's whole life). Roll it back under the edit's locks.
        drop(f);
        notes.extend(crate::recover::roll_back_journal(&j, path)?);
    }
}
