//! Page hints for read-only file maps, shared by every reader that serves bytes zero-copy.
//!
//! The contract of every weightport map: memmap2 maps the file shared and read-only, weightport
//! never writes through it, and the file must not be modified or truncated while mapped (the
//! CLI turns the SIGBUS a truncation raises into "input changed while reading"). Under it,
//! dropping resident pages is harmless: they fault back in with the same bytes.

use memmap2::{Advice, Mmap, UncheckedAdvice};

use crate::error::{Location, Result};
use crate::format::Format;

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
