//! Page hints for read-only file maps, shared by every reader that serves bytes zero-copy.
//!
//! The contract of every weightport map: memmap2 maps the file shared and read-only, weightport
//! never writes through it, and the file must not be modified or truncated while mapped (the
//! CLI turns the SIGBUS a truncation raises into "input changed while reading"). Under it,
//! dropping resident pages is harmless: they fault back in with the same bytes.

use memmap2::{Advice, Mmap, UncheckedAdvice};

use crate::error::{Error, Location, Result};
use crate::format::Format;

/// Opens the input `path` for reading and returns it with its length. A directory is a usage
/// error, "`path`: is a directory" followed by `expected` (each reader says what it wants).
pub fn open_input(path: &std::path::Path, expected: &str) -> Result<(std::fs::File, u64)> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
    if meta.is_dir() {
        return Err(Error::Usage(format!(
            "{}: is a directory{expected}",
            path.display()
        )));
    }
    Ok((file, meta.len()))
}

/// Maps `file` read-only and shared, under the contract in the module docs.
pub fn map(file: &std::fs::File, path: &std::path::Path) -> Result<Mmap> {
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

/// Where a tensor's stored bytes lie in a file: `[start, start + len)`. The readers that serve
/// bytes zero-copy keep one per tensor and answer [`crate::TensorSource::bytes`],
/// `read_into`, `will_need` and `release` through it, so the range arithmetic and the bounds
/// check are the same for every format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Absolute offset of the first byte.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
}

impl Extent {
    /// `[start, start + len)`.
    pub fn new(start: u64, len: u64) -> Self {
        Extent { start, len }
    }

    /// Its bytes in `file` (a map or an in-memory copy); `None` when they do not all lie in it.
    pub fn of<'a>(&self, file: &'a [u8]) -> Option<&'a [u8]> {
        let end = self.start.checked_add(self.len)?;
        file.get(usize::try_from(self.start).ok()?..usize::try_from(end).ok()?)
    }

    /// The absolute range of `[offset, offset + len)` of the tensor, clipped to its end.
    fn clip(&self, offset: u64, len: u64) -> (usize, usize) {
        let begin = self.start.saturating_add(offset);
        let end = self
            .start
            .saturating_add(offset.saturating_add(len).min(self.len));
        (begin as usize, end as usize)
    }

    /// Copies `[offset, offset + dst.len())` of the tensor from `file`, after the bounds check
    /// every reader applies ([`crate::source::check_read`]; `at` names the tensor).
    pub fn read_into(
        &self,
        file: &[u8],
        at: impl FnOnce() -> Location,
        format: Format,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<()> {
        crate::source::check_read(at, format, self.len, offset, dst.len(), 1)?;
        let (a, b) = self.clip(offset, dst.len() as u64);
        dst.copy_from_slice(&file[a..b]);
        Ok(())
    }

    /// [`will_need`] for `[offset, offset + len)` of the tensor.
    pub fn will_need(&self, map: &Mmap, offset: u64, len: u64) {
        let (a, b) = self.clip(offset, len);
        will_need(map, a, b);
    }

    /// [`release`] for `[offset, offset + len)` of the tensor.
    pub fn release(&self, map: &Mmap, offset: u64, len: u64) {
        let (a, b) = self.clip(offset, len);
        release(map, a, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_check_reads_and_clip_hints() {
        let file: Vec<u8> = (0..32).collect();
        let x = Extent::new(8, 8);
        assert_eq!(x.of(&file), Some(&file[8..16]));
        assert_eq!(Extent::new(30, 8).of(&file), None);
        assert_eq!(Extent::new(u64::MAX, 2).of(&file), None);
        let mut dst = [0u8; 3];
        let at = || Location::file("f").tensor("t").at(8);
        x.read_into(&file, at, Format::Gguf, 5, &mut dst).unwrap();
        assert_eq!(dst, [13, 14, 15]);
        let e = x
            .read_into(&file, at, Format::Gguf, 6, &mut dst)
            .unwrap_err();
        assert!(e
            .to_string()
            .contains("read of 3 bytes at 6 past the end of the tensor (8 bytes)"));
        assert!(x
            .read_into(&file, at, Format::Gguf, u64::MAX, &mut dst)
            .is_err());
        assert_eq!(x.clip(4, u64::MAX), (12, 16));
        let e = crate::source::check_read(at, Format::Npz, 8, 2, 4, 4).unwrap_err();
        assert!(e
            .to_string()
            .contains("is not aligned to the 4-byte element"));
    }

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
}
