//! Staged output files: temp files beside their target, and the renames that publish them.
//!
//! Every byte weightport writes goes first into a [`TempFile`] in the target's directory, named
//! `.{target}.{pid}.{random}.wp-tmp`: hidden, saying what it is, and which process made it, so
//! a later run can remove the leftovers of a run that was killed ([`stale_temp_owner`]). Temp
//! files are created with mode `0666` and the process umask applies, as for `cp` and
//! `save_file`. Each live temp path is also kept in a fixed table readable from a signal
//! handler ([`emergency_unlink_all`]), so a fatal signal (SIGBUS when an input is truncated
//! under its memory map) still removes them.
//!
//! [`rename_noreplace`] publishes a file only if its target does not exist, in one step
//! (`renameat2(RENAME_NOREPLACE)`), so "check, then rename" cannot race with another writer.

use std::ffi::CString;
use std::fs::{File, Permissions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize};
use std::sync::Arc;

use crate::error::{Error, Result};
pub use crate::io_counts::start_writeback;
use crate::io_counts::{write_all_at, IoCounter, Writeback};

/// The suffix of every temp file weightport creates.
pub const TEMP_SUFFIX: &str = ".wp-tmp";

const SLOTS: usize = 4096;
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());
static LIVE: [AtomicPtr<libc::c_char>; SLOTS] = [EMPTY; SLOTS];

/// Set (for good) by [`emergency_unlink_all`] before it reads the table: from then on a path
/// that leaves the table is never freed, since the handler may be reading it.
static UNLINKING: AtomicBool = AtomicBool::new(false);

/// Records `path` in the signal-safe table; returns its slot.
fn remember(path: &Path) -> Option<usize> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    let raw = c.into_raw();
    for (i, slot) in LIVE.iter().enumerate() {
        if slot
            .compare_exchange(std::ptr::null_mut(), raw, SeqCst, Relaxed)
            .is_ok()
        {
            return Some(i);
        }
    }
    // SAFETY: `raw` came from `into_raw` above and was published nowhere.
    drop(unsafe { CString::from_raw(raw) });
    None
}

/// Takes a path out of the table and frees it. Dekker-style with [`emergency_unlink_all`]
/// (sequentially consistent, so one total order): if this load of `UNLINKING` sees false, the
/// handler's store comes later in the order, after the swap, so its reads of the table see the
/// slot empty and never this pointer; if it sees true, the pointer is leaked (the process is
/// exiting). A long-running process (the Python API, a fuzzer) so keeps no path per temp file.
fn forget(slot: Option<usize>) {
    let Some(i) = slot else { return };
    let p = LIVE[i].swap(std::ptr::null_mut(), SeqCst);
    if !p.is_null() && !UNLINKING.load(SeqCst) {
        FREED.fetch_add(1, Relaxed);
        // SAFETY: `p` came from `CString::into_raw` in `remember`, left the table in the swap
        // above (so no other `forget` gets it), and no handler can still read it (see above).
        drop(unsafe { CString::from_raw(p) });
    }
}

/// Paths freed by [`forget`] (a count for tests).
static FREED: AtomicUsize = AtomicUsize::new(0);

/// Unlinks every live temp file. Async-signal-safe (atomic loads and `unlink` only): meant
/// for a fatal-signal handler that then exits.
pub fn emergency_unlink_all() {
    UNLINKING.store(true, SeqCst);
    for slot in LIVE.iter() {
        let p = slot.load(SeqCst);
        if !p.is_null() {
            // SAFETY: `p` came from `CString::into_raw`; `forget` no longer frees (see it).
            unsafe { libc::unlink(p) };
        }
    }
}

/// A temp file beside its final path; removed on drop unless published.
///
/// It holds no descriptor of its own: the one that created it is kept in the process's cache
/// of staged-file descriptors ([`crate::descriptors`], bounded under the soft limit on open
/// files, least recently used closed first), and if that one was closed the next call reopens
/// the file (`O_NOFOLLOW`, checked to be the file created). So a one-file output is opened
/// once, and an output of thousands of shards stays within any descriptor limit (`ulimit -n
/// 256`). Every write, open and sync is counted in the job's [`IoCounter`].
#[derive(Debug)]
pub struct TempFile {
    inner: Option<tempfile::TempPath>,
    /// Device and inode of the file created.
    id: (u64, u64),
    target: PathBuf,
    slot: Option<usize>,
    /// Its descriptor's key in [`crate::descriptors`].
    key: u64,
    io: IoCounter,
    writeback: Writeback,
}

fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn file_id(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

/// Whether `e` says the process (or system) ran out of descriptors.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

impl TempFile {
    /// Creates an empty temp file in `target`'s directory, counting it in `io`.
    pub fn beside(target: &Path, io: &IoCounter) -> Result<TempFile> {
        let dir = dir_of(target);
        let base = target
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let create = || {
            tempfile::Builder::new()
                .prefix(&format!(".{base}.{}.", std::process::id()))
                .suffix(TEMP_SUFFIX)
                .rand_bytes(6)
                .permissions(Permissions::from_mode(0o666))
                .tempfile_in(dir)
        };
        let created = match create() {
            Err(e) if out_of_descriptors(&e) => {
                crate::descriptors::close_all();
                create()
            }
            r => r,
        }
        .map_err(|e| Error::io(dir, "create temp file in", e))?;
        io.first_open();
        let meta = created
            .as_file()
            .metadata()
            .map_err(|e| Error::io(created.path(), "stat", e))?;
        let slot = remember(created.path());
        let (file, path) = created.into_parts();
        let key = crate::descriptors::new_key();
        crate::descriptors::put(key, file);
        Ok(TempFile {
            inner: Some(path),
            id: file_id(&meta),
            target: target.to_path_buf(),
            slot,
            key,
            io: io.clone(),
            writeback: Writeback::default(),
        })
    }

    /// The open descriptor: the cached one, else the file reopened (and cached).
    fn file(&self) -> Result<Arc<File>> {
        if let Some(f) = crate::descriptors::get(self.key) {
            return Ok(f);
        }
        let f = match self.reopen() {
            Err(Error::Io { source, .. }) if out_of_descriptors(&source) => {
                crate::descriptors::close_all();
                self.reopen()
            }
            r => r,
        }?;
        Ok(crate::descriptors::put(self.key, f))
    }

    /// Opens the temp file for reading and writing (counted), refusing a path that no longer
    /// names the file created (replaced, or a symlink).
    fn reopen(&self) -> Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.path();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| Error::io(path, "open temp file", e))?;
        self.io.opened();
        let meta = f.metadata().map_err(|e| Error::io(path, "stat", e))?;
        if file_id(&meta) != self.id {
            return Err(replaced(path));
        }
        Ok(f)
    }

    /// The temp file's path.
    pub fn path(&self) -> &Path {
        self.inner.as_ref().expect("live temp file")
    }

    /// Where it goes when published.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Sets its length (zeros past the old end).
    pub fn set_len(&self, len: u64) -> Result<()> {
        self.file()?
            .set_len(len)
            .map_err(|e| Error::io(self.path(), "resize", e))
    }

    /// Writes `bytes` at `offset`; every few MiB written ([`Writeback`]) the kernel is asked to
    /// start writing the file back, so the final fsync finds most of it on its way to disk.
    pub fn write_at(&self, bytes: &[u8], offset: u64) -> Result<()> {
        let f = self.file()?;
        write_all_at(&f, self.path(), bytes, offset, &self.io)?;
        self.writeback.wrote(&f, bytes.len() as u64, &self.io);
        Ok(())
    }

    /// Copies `len` bytes at `from.offset` of an input file to `offset` in the kernel
    /// ([`crate::kernel_copy::copy_range`]); returns the bytes copied, fewer than `len` where
    /// the kernel refused (the caller writes the rest).
    pub fn copy_in(&self, from: &crate::kernel_copy::Origin, len: u64, offset: u64) -> Result<u64> {
        let f = self.file()?;
        let n = crate::kernel_copy::copy_range(&from.file, from.offset, &f, offset, len, |n| {
            self.io.copied(n)
        })
        .map_err(|e| Error::io(self.path(), "copy into", e))?;
        self.writeback.wrote(&f, n, &self.io);
        Ok(n)
    }

    /// Copies the whole file `src` in at offset 0 (a companion file of an output).
    pub fn copy_from(&self, src: &Path) -> Result<()> {
        use std::io::Read;
        let mut from = File::open(src).map_err(|e| Error::io(src, "open", e))?;
        let mut buf = vec![0u8; 8 << 20];
        let mut at = 0u64;
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io(src, "read", e)),
            };
            self.write_at(&buf[..n], at)?;
            at += n as u64;
        }
    }

    /// Flushes data and metadata to disk.
    pub fn sync(&self) -> Result<()> {
        let f = self.file()?;
        self.io.synced();
        f.sync_all().map_err(|e| Error::io(self.path(), "fsync", e))
    }

    /// Makes the file at `built` this temp file: hard-linked (else moved) to the temp name in
    /// place of the file created, which is removed.
    pub fn adopt(&mut self, built: &Path) -> Result<()> {
        crate::descriptors::forget(self.key);
        let path = self.path().to_path_buf();
        std::fs::remove_file(&path).map_err(|e| Error::io(&path, "replace temp file", e))?;
        if std::fs::hard_link(built, &path).is_err() {
            std::fs::rename(built, &path).map_err(|e| Error::io(&path, "move built file to", e))?;
        }
        let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::io(&path, "stat", e))?;
        self.id = file_id(&meta);
        Ok(())
    }

    /// Renames onto the target: refusing to replace an existing file unless `replace`, and a
    /// temp path that no longer names the file this run wrote (replaced, or a symlink).
    /// The caller fsyncs the directory afterwards ([`sync_dir`]).
    pub fn publish(mut self, replace: bool) -> Result<PathBuf> {
        crate::descriptors::forget(self.key);
        let now = std::fs::symlink_metadata(self.path())
            .map_err(|e| Error::io(self.path(), "stat temp file", e))?;
        if file_id(&now) != self.id {
            return Err(replaced(self.path()));
        }
        let tmp = self.inner.take().expect("live temp file");
        let from = tmp
            .keep()
            .map_err(|e| Error::io(&self.target, "keep temp", e.error))?;
        let r = if replace {
            std::fs::rename(&from, &self.target)
        } else {
            rename_noreplace(&from, &self.target)
        };
        if let Err(e) = r {
            let _ = std::fs::remove_file(&from);
            forget(self.slot.take());
            return Err(if e.kind() == std::io::ErrorKind::AlreadyExists {
                Error::Usage(format!(
                    "{}: appeared while this run was writing (another process?); nothing was replaced",
                    self.target.display()
                ))
            } else {
                Error::io(&self.target, "rename into place", e)
            });
        }
        forget(self.slot.take());
        Ok(self.target.clone())
    }
}

fn replaced(path: &Path) -> Error {
    Error::io(
        path,
        "open temp file",
        std::io::Error::other("replaced by another file while this run was writing"),
    )
}

impl Drop for TempFile {
    fn drop(&mut self) {
        crate::descriptors::forget(self.key);
        // TempPath's own drop removes the file; then forget the path.
        self.inner.take();
        forget(self.slot.take());
    }
}

/// `rename(from, to)` that fails with `AlreadyExists` instead of replacing `to`, atomically.
pub fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    let cf = CString::new(from.as_os_str().as_bytes())?;
    let ct = CString::new(to.as_os_str().as_bytes())?;
    // SAFETY: both are valid NUL-terminated paths; AT_FDCWD resolves them like rename(2).
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            cf.as_ptr(),
            libc::AT_FDCWD,
            ct.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        // Filesystems without renameat2 flags: link (fails if `to` exists) + unlink.
        Some(libc::EINVAL) | Some(libc::ENOSYS) => {
            std::fs::hard_link(from, to)?;
            std::fs::remove_file(from)
        }
        _ => Err(e),
    }
}

/// fsyncs a directory so the renames in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    let d = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(d)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(d, "fsync directory", e))
}

/// If `name` is a weightport temp file whose creating process no longer runs, that pid.
pub fn stale_temp_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?.strip_suffix(TEMP_SUFFIX)?;
    let mut parts = rest.rsplitn(3, '.');
    let _random = parts.next()?;
    let pid: u32 = parts.next()?.parse().ok()?;
    parts.next()?;
    let pid_t = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: kill with signal 0 only checks whether the process exists.
    let alive = unsafe { libc::kill(pid_t, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    (!alive && pid != std::process::id()).then_some(pid)
}

/// An advisory lock (`flock` on a lock file beside the output) held while a run writes that
/// output. The lock file is removed when the lock is released.
#[derive(Debug)]
pub struct OutputLock {
    file: Option<File>,
    /// The lock file.
    pub path: PathBuf,
}

fn same_inode(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

impl OutputLock {
    /// Takes the lock file `path` (created if needed), failing at once if another process holds
    /// it. `what` is the output, for the message.
    pub fn acquire(path: &Path, what: &Path) -> Result<OutputLock> {
        Self::take(path, what, libc::LOCK_EX | libc::LOCK_NB)
    }

    /// Takes the lock file `path` (created if needed), waiting while another process holds it:
    /// for short updates many processes make in turn (a job's state file).
    pub fn wait(path: &Path) -> Result<OutputLock> {
        Self::take(path, path, libc::LOCK_EX)
    }

    fn take(path: &Path, what: &Path, how: libc::c_int) -> Result<OutputLock> {
        loop {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .map_err(|e| Error::io(path, "open lock file", e))?;
            // SAFETY: flock on a descriptor we own.
            let rc = unsafe { libc::flock(std::os::unix::io::AsRawFd::as_raw_fd(&file), how) };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                    return Err(Error::Usage(format!(
                        "{}: another weightport run is writing this output; wait for it or \
                         choose another output",
                        crate::shown(what)
                    )));
                }
                return Err(Error::io(path, "lock", e));
            }
            // The holder before us may have removed the file between our open and our flock:
            // then we hold a lock nobody else can see; start again on the current file.
            let mine = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
            match std::fs::metadata(path) {
                Ok(now) if same_inode(&mine, &now) => {
                    let _ = writeln!(&file, "{}", std::process::id());
                    return Ok(OutputLock {
                        file: Some(file),
                        path: path.to_path_buf(),
                    });
                }
                _ => continue,
            }
        }
    }
}

use std::io::Write as _;

impl Drop for OutputLock {
    fn drop(&mut self) {
        // Unlink while still holding the lock, then release (see `acquire`).
        let _ = std::fs::remove_file(&self.path);
        self.file.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fuzz finding (fuzz/formats roundtrip, LeakSanitizer): every temp file leaked its path in
    /// the signal table, ~60 bytes each, forever: unbounded in a long-running process (the
    /// Python API, a fuzzer). A dropped or published temp file now frees it.
    #[test]
    fn roundtrip_leak_temp_paths_are_freed_when_the_temp_file_goes() {
        let d = tempfile::tempdir().unwrap();
        let before = FREED.load(Relaxed);
        for i in 0..2000 {
            let t = TempFile::beside(
                &d.path().join(format!("m{i}.safetensors")),
                &IoCounter::new(),
            )
            .unwrap();
            drop(t);
        }
        // Other tests of this process may free theirs too: at least ours were freed.
        assert!(FREED.load(Relaxed) - before >= 2000);
    }

    #[test]
    fn temp_names_say_who_made_them() {
        let d = tempfile::tempdir().unwrap();
        let t = TempFile::beside(&d.path().join("model.safetensors"), &IoCounter::new()).unwrap();
        let name = t.path().file_name().unwrap().to_str().unwrap().to_string();
        assert!(name.starts_with(&format!(".model.safetensors.{}.", std::process::id())));
        assert!(name.ends_with(TEMP_SUFFIX));
        assert_eq!(stale_temp_owner(&name), None, "our own temp is not stale");
        // pid 0x7ffffffe is never a live process here.
        assert_eq!(
            stale_temp_owner(".model.safetensors.2147483646.abcdef.wp-tmp"),
            Some(2147483646)
        );
        assert_eq!(stale_temp_owner("model.safetensors"), None);
        let p = t.path().to_path_buf();
        drop(t);
        assert!(!p.exists());
    }

    #[test]
    fn noreplace_refuses_existing_target_and_mode_follows_umask() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("x");
        std::fs::write(&target, b"old").unwrap();
        let t = TempFile::beside(&target, &IoCounter::new()).unwrap();
        let tmp = t.path().to_path_buf();
        assert!(t.publish(false).is_err());
        assert!(!tmp.exists());
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        let fresh = d.path().join("y");
        let t = TempFile::beside(&fresh, &IoCounter::new()).unwrap();
        t.publish(false).unwrap();
        // SAFETY: reading the umask by setting and restoring it; single-threaded test body.
        let mask = unsafe {
            let m = libc::umask(0o022);
            libc::umask(m);
            m
        };
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666 & !(mask as u32));
    }

    /// The descriptor that created a temp file serves every write and the fsync: one open
    /// for the file's life, every call counted.
    #[test]
    fn a_temp_file_is_opened_once_and_counts_its_io() {
        let d = tempfile::tempdir().unwrap();
        let io = IoCounter::new();
        let t = TempFile::beside(&d.path().join("m.safetensors"), &io).unwrap();
        t.set_len(4).unwrap();
        for k in 0..3 {
            t.write_at(b"ab", 2 * k).unwrap();
        }
        t.sync().unwrap();
        assert_eq!(std::fs::read(t.path()).unwrap(), b"abababab"[..6]);
        let c = io.counts();
        assert_eq!(
            (c.files, c.opens, c.writes, c.bytes_written, c.syncs),
            (1, 1, 3, 6, 1)
        );
    }

    /// A temp path replaced while the run writes (a symlink to another file, or another file
    /// renamed over it) is refused when reopened and when published: the other file is never
    /// written through the link, nor published as the output.
    #[test]
    fn a_temp_file_refuses_a_replaced_path() {
        let d = tempfile::tempdir().unwrap();
        let io = IoCounter::new();
        let t = TempFile::beside(&d.path().join("m.safetensors"), &io).unwrap();
        t.write_at(b"abc", 2).unwrap();
        t.sync().unwrap();
        assert_eq!(std::fs::read(t.path()).unwrap(), b"\0\0abc");
        let other = d.path().join("other");
        std::fs::write(&other, b"x").unwrap();
        std::fs::remove_file(t.path()).unwrap();
        std::os::unix::fs::symlink(&other, t.path()).unwrap();
        crate::descriptors::forget(t.key);
        assert!(t.write_at(b"!", 0).is_err(), "reopened through a symlink");
        // A file that existed beside it (another inode) renamed over it.
        std::fs::rename(&other, t.path()).unwrap();
        assert!(t.reopen().is_err(), "another file under the temp name");
        let target = t.target().to_path_buf();
        assert!(t.publish(true).is_err(), "published another file");
        assert!(!target.exists());
    }

    #[test]
    fn a_held_lock_refuses_a_second_writer_and_vanishes_when_released() {
        let d = tempfile::tempdir().unwrap();
        let lp = d.path().join(".out.wp-lock");
        let a = OutputLock::acquire(&lp, Path::new("out")).unwrap();
        let b = OutputLock::acquire(&lp, Path::new("out"));
        assert!(matches!(b, Err(Error::Usage(_))), "{b:?}");
        drop(a);
        assert!(!lp.exists());
        let _c = OutputLock::acquire(&lp, Path::new("out")).unwrap();
    }
}
