//! Local files as [`ByteSource`]s ([`LocalFile`], opened by the [`LocalFiles`] storage), and
//! page hints for read-only file maps: where zero-copy lives.
//!
//! The contract of every weightport map: memmap2 maps the file shared and read-only, weightport
//! never writes through it, and the file must not be modified or truncated while mapped (the
//! CLI turns the SIGBUS a truncation raises into "input changed while reading"). Under it,
//! dropping resident pages is harmless: they fault back in with the same bytes, and a mapped
//! file's `read_at` copies out of the map with no system call and no per-read identity check
//! (the contract is the check). A file opened with [`LocalFile::open_pread`] is never mapped:
//! each `read_at` is one `pread`, followed by an `fstat` that must find the device, inode,
//! ctime and size it was opened with.

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::{Advice, Mmap, UncheckedAdvice};

use crate::bytes::{changed, past_end, ByteSource, Identity, Storage};
use crate::error::{Error, Result};

/// Reads up to 4 KiB from the start of `path`, refusing anything that is not a regular file.
pub fn head_of(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    regular_file(path)?;
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let mut buf = Vec::with_capacity(4096);
    (&mut f)
        .take(4096)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io(path, "read", e))?;
    Ok(buf)
}

/// Refuses anything that is not a regular file, as [`head_of`] does.
pub fn regular_file(path: &Path) -> Result<()> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, "open", e))?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "is a directory, expected a weights file"
        } else {
            "is not a regular file (a FIFO, socket or device): weightport reads weights files only"
        };
        return Err(Error::Usage(format!("{}: {what}", crate::shown(path))));
    }
    Ok(())
}

/// Opens the input `path` for reading and returns it with its length. A directory is a usage
/// error, "`path`: is a directory" followed by `expected` (each reader says what it wants).
pub fn open_input(path: &Path, expected: &str) -> Result<(std::fs::File, u64)> {
    let (file, meta) = open_stat(path, expected)?;
    Ok((file, meta.len()))
}

fn open_stat(path: &Path, expected: &str) -> Result<(std::fs::File, std::fs::Metadata)> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
    if meta.is_dir() {
        return Err(Error::Usage(format!(
            "{}: is a directory{expected}",
            path.display()
        )));
    }
    Ok((file, meta))
}

fn identity_of(m: &std::fs::Metadata) -> Identity {
    Identity::File {
        dev: m.dev(),
        ino: m.ino(),
        ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        len: m.len(),
    }
}

/// A local file as a [`ByteSource`]: mapped read-only (zero-copy; [`LocalFile::open`]), read
/// by `pread` with its identity checked on every read ([`LocalFile::open_pread`]), or a map
/// this process already holds ([`LocalFile::from_map`]).
pub struct LocalFile {
    name: PathBuf,
    /// The open file, for `pread` (`None` when mapped: the map needs no descriptor).
    file: Option<std::fs::File>,
    len: u64,
    identity: Identity,
    /// The map, for a mapped file that is not empty.
    map: Option<Arc<Mmap>>,
    /// Zero-copy: [`ByteSource::map`] answers (an empty file as an empty slice).
    mapped: bool,
    /// The map is recorded for kernel copies ([`crate::kernel_copy`]) until this is dropped.
    recorded: bool,
}

impl Drop for LocalFile {
    fn drop(&mut self) {
        if let (true, Some(m)) = (self.recorded, &self.map) {
            crate::kernel_copy::forget(m);
        }
    }
}

impl std::fmt::Debug for LocalFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalFile")
            .field("name", &self.name)
            .field("len", &self.len)
            .field("mapped", &self.mapped)
            .finish()
    }
}

impl LocalFile {
    /// Opens `path` and maps it (an empty file is not mapped: a zero-length map is not
    /// portable). A directory is refused with "is a directory" followed by `expected`.
    pub fn open(path: &Path, expected: &str) -> Result<LocalFile> {
        let (file, meta) = open_stat(path, expected)?;
        let map = match meta.len() {
            0 => None,
            _ => Some(Arc::new(map(&file, path)?)),
        };
        // The map outlives the descriptor: a set of 700 mapped parts holds no descriptor.
        drop(file);
        let identity = identity_of(&meta);
        if let Some(m) = &map {
            crate::kernel_copy::record(m, path, identity.clone());
        }
        Ok(LocalFile {
            name: path.to_path_buf(),
            file: None,
            len: meta.len(),
            identity,
            map,
            mapped: true,
            recorded: true,
        })
    }

    /// Opens `path` without mapping it: every read is a `pread` checked against the identity
    /// the file had when opened (what a remote object does with its ETag).
    pub fn open_pread(path: &Path, expected: &str) -> Result<LocalFile> {
        let (file, meta) = open_stat(path, expected)?;
        Ok(LocalFile {
            name: path.to_path_buf(),
            file: Some(file),
            len: meta.len(),
            identity: identity_of(&meta),
            map: None,
            mapped: false,
            recorded: false,
        })
    }

    /// A map this process already holds (a member a scan unpacked into an unlinked temp file),
    /// named `name` in messages.
    pub fn from_map(name: impl Into<PathBuf>, map: Arc<Mmap>) -> LocalFile {
        LocalFile {
            name: name.into(),
            file: None,
            len: map.len() as u64,
            identity: Identity::Private,
            map: Some(map),
            mapped: true,
            recorded: false,
        }
    }

    /// One `pread` of `buf` at `offset`, then the identity check.
    fn pread(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let file = self.file.as_ref().expect("an unmapped file is open");
        file.read_exact_at(buf, offset)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => changed(&self.name),
                _ => Error::io(&self.name, "read", e),
            })?;
        let now = file
            .metadata()
            .map_err(|e| Error::io(&self.name, "stat", e))?;
        if identity_of(&now) != self.identity {
            return Err(changed(&self.name));
        }
        Ok(())
    }
}

impl ByteSource for LocalFile {
    fn name(&self) -> &Path {
        &self.name
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn identity(&self) -> &Identity {
        &self.identity
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let len = buf.len() as u64;
        let end = offset.checked_add(len).filter(|&e| e <= self.len);
        let end = end.ok_or_else(|| past_end(&self.name, offset, len, self.len))?;
        match self.map() {
            Some(map) => {
                buf.copy_from_slice(&map[offset as usize..end as usize]);
                Ok(())
            }
            None if buf.is_empty() => Ok(()),
            None => self.pread(offset, buf),
        }
    }

    fn map(&self) -> Option<&[u8]> {
        self.mapped
            .then(|| self.map.as_deref().map_or(&[][..], |m| &m[..]))
    }

    fn will_need(&self, start: u64, end: u64) {
        if let Some(m) = &self.map {
            will_need(m, start as usize, end as usize);
        }
    }

    fn release(&self, start: u64, end: u64) {
        if let Some(m) = &self.map {
            release(m, start as usize, end as usize);
        }
    }
}

/// Local files as a [`Storage`]: mapped (the default), or read by `pread` only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalFiles {
    /// Never map: every read is a checked `pread` ([`LocalFile::open_pread`]).
    pub pread_only: bool,
}

impl Storage for LocalFiles {
    fn open(&self, name: &Path, expected: &str) -> Result<Arc<dyn ByteSource>> {
        Ok(Arc::new(match self.pread_only {
            false => LocalFile::open(name, expected)?,
            true => LocalFile::open_pread(name, expected)?,
        }))
    }

    fn exists(&self, name: &Path) -> bool {
        name.exists()
    }
}

/// Maps `file` read-only and shared, under the contract in the module docs.
pub fn map(file: &std::fs::File, path: &Path) -> Result<Mmap> {
    // SAFETY: memmap2 maps the file shared and read-only: the bytes seen through the map are
    // the file's current contents. Weightport never writes through the map; the contract it
    // cannot enforce from here is that no process modifies or truncates the file while it is
    // mapped. If another process truncates it anyway, touching a page past the new end raises
    // SIGBUS: the CLI handles that signal by removing its temp files and exiting with "input
    // changed while reading", so no partial output survives.
    unsafe { Mmap::map(file) }.map_err(|e| Error::io(path, "mmap", e))
}

/// The OS page size (4 KiB on x86-64, 16/64 KiB on some aarch64 kernels).
pub fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
    })
}

/// Drops the resident pages lying wholly inside `[begin, end)` of `map`, so resident memory
/// stays bounded by the chunks in flight rather than the file. Never changes what later reads
/// return.
pub fn release(map: &Mmap, begin: usize, end: usize) {
    let page = page_size();
    let start = begin.checked_next_multiple_of(page).unwrap_or(usize::MAX);
    let end = end.min(map.len()) / page * page;
    if end > start {
        // SAFETY: a shared read-only file mapping nobody writes through (module docs);
        // MADV_DONTNEED only drops resident pages, which fault back in from the file with the
        // same bytes. No reference into the range relies on particular pages being resident.
        let _ =
            unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, start, end - start) };
    }
}

/// Populates the page tables of `[begin, end)` of `map` in one call instead of one fault per
/// page, ahead of reads. A hint: failure (old kernels) is harmless.
pub fn will_need(map: &Mmap, begin: usize, end: usize) {
    let start = begin / page_size() * page_size();
    let end = end.min(map.len());
    if end > start {
        let _ = map.advise_range(Advice::PopulateRead, start, end - start);
    }
}

static DEFAULT_STORAGE: std::sync::RwLock<Option<Arc<dyn Storage>>> = std::sync::RwLock::new(None);

/// Sets the storage every [`crate::ReadOptions::default`] opens inputs through from now on, for
/// the whole process (the CLI installs weightport-remote's, which serves the names of remote
/// objects it registered and hands every other name to local files). `None` restores local
/// files, mapped.
pub fn set_default_storage(storage: Option<Arc<dyn Storage>>) {
    *DEFAULT_STORAGE.write().unwrap_or_else(|e| e.into_inner()) = storage;
}

/// The storage [`crate::ReadOptions::default`] uses (see [`set_default_storage`]).
pub fn default_storage() -> Arc<dyn Storage> {
    let set = DEFAULT_STORAGE.read().unwrap_or_else(|e| e.into_inner());
    set.clone()
        .unwrap_or_else(|| Arc::new(LocalFiles::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_not_an_input() {
        let d = tempfile::tempdir().unwrap();
        let e = open_input(d.path(), ", expected a file").unwrap_err();
        assert!(e.to_string().ends_with(": is a directory, expected a file"));
    }

    #[test]
    fn hints_never_change_the_bytes() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let data: Vec<u8> = (0..5 * page_size() + 17).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        // SAFETY: a private test file nobody else touches.
        let map = unsafe { Mmap::map(&f) }.unwrap();
        will_need(&map, 3, data.len() + 100);
        release(&map, 1, data.len() + 100);
        release(&map, 0, 0);
        assert_eq!(&map[..], &data[..]);
    }

    /// A mapped file and a pread-only one read the same bytes; the pread-only one refuses a
    /// read once the file changed (rewritten in place, or truncated), as a remote source
    /// refuses a changed ETag; an empty file maps as an empty slice.
    #[test]
    fn local_files_read_alike_and_pread_checks_identity() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let data: Vec<u8> = (0..10_000).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let mapped = LocalFile::open(&p, "").unwrap();
        let pread = LocalFiles { pread_only: true }.open(&p, "").unwrap();
        assert!(mapped.map().is_some() && pread.map().is_none());
        for src in [&mapped as &dyn ByteSource, &*pread] {
            let mut b = [0u8; 100];
            src.read_at(9_900, &mut b).unwrap();
            assert_eq!(&b[..], &data[9_900..]);
            let e = src.read_at(9_901, &mut b).unwrap_err();
            assert!(e.to_string().contains("past the end (10000 bytes)"), "{e}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(b"x", 5_000).unwrap();
        let mut b = [0u8; 10];
        let e = pread.read_at(0, &mut b).unwrap_err();
        assert!(e.to_string().contains("input changed while reading"), "{e}");
        let again = LocalFile::open_pread(&p, "").unwrap();
        again.read_at(0, &mut b).unwrap();
        f.set_len(100).unwrap();
        let e = again.read_at(0, &mut b).unwrap_err();
        assert!(e.to_string().contains("input changed while reading"), "{e}");

        let empty = d.path().join("e");
        std::fs::write(&empty, b"").unwrap();
        let e = LocalFile::open(&empty, "").unwrap();
        assert_eq!(e.map(), Some(&[][..]));
        e.read_at(0, &mut []).unwrap();
        let dir = LocalFile::open(d.path(), ", expected a file").unwrap_err();
        assert!(dir
            .to_string()
            .ends_with(": is a directory, expected a file"));
    }
}
