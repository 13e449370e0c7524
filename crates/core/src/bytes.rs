//! Inputs as byte-range sources: the one seam every reader reads through.
//!
//! # Call protocol
//!
//! A [`ByteSource`] is one named object (a local file today; an object behind HTTPS or S3
//! later) whose length is fixed when it is opened and whose version is pinned by an
//! [`Identity`]:
//!
//! * [`ByteSource::read_at`] fills a buffer the caller owns with `[offset, offset + len)`, from
//!   any thread. A range past [`ByteSource::len`] is an error, never a short read. A source
//!   checks its identity on every read it makes from storage (a file read by `pread`: its inode,
//!   ctime and size; a remote object: its ETag at the pinned revision), so bytes of another
//!   version never reach a reader: the read fails with "the input changed while reading".
//! * [`ByteSource::map`] is the whole object as one slice, only where zero-copy exists (a local
//!   file mapped read-only under the contract of [`crate::mapped`], or bytes already in memory);
//!   `None` everywhere else. A mapped source guards its bytes by the map's contract instead of
//!   a per-read check (a truncation raises SIGBUS, which the CLI reports as "input changed
//!   while reading"; its `read_at` copies from the map and makes no system call).
//! * [`ByteSource::will_need`] and [`ByteSource::release`] are page hints for mapped bytes;
//!   other sources ignore them. They never change what a read returns.
//!
//! Readers are written against this trait only: headers are parsed from bounded reads (a
//! [`ByteCursor`], or [`ByteSource::range`] of a length the format's caps allow), never from
//! an assumed map, and tensor bytes are served through [`Extent`]: zero-copy out of
//! [`ByteSource::map`] when there is one, by [`ByteSource::read_at`] otherwise
//! ([`StoredTensors`] does this for the readers whose tensors all lie as-is in one file).
//!
//! A [`Storage`] turns names into sources. The format registry opens every input through
//! [`crate::ReadOptions::storage`], and readers of multi-file sets (gguf-split parts, a
//! directory of `.npy` files) open the other files through it, so a new kind of storage is one
//! `Storage` and one `ByteSource` and touches no reader. Today's storage is
//! [`crate::mapped::LocalFiles`]: local files, mapped (or, on request, read by `pread` only).

use std::borrow::Cow;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Location, Result};
use crate::format::Format;

/// What pins the version of an object a [`ByteSource`] reads.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Identity {
    /// A local file: device and inode (which file), ctime in nanoseconds (any write sets it)
    /// and size, as `fstat` gave them when it was opened.
    File {
        /// Device.
        dev: u64,
        /// Inode.
        ino: u64,
        /// Status change time, nanoseconds since the epoch.
        ctime_ns: i128,
        /// Size in bytes.
        len: u64,
    },
    /// A remote object: its ETag, and the revision (commit) its name was resolved at.
    Object {
        /// The ETag every ranged read must match.
        etag: String,
        /// The pinned revision, if the store has one.
        revision: Option<String>,
    },
    /// Bytes this process alone holds (a buffer, an unlinked temp file): nobody else can
    /// change them.
    Private,
}

/// Ranges of one named object with a size and an identity (see the module docs for the
/// protocol).
pub trait ByteSource: Send + Sync {
    /// The object's name in messages (a path; a remote object's URL as a path).
    fn name(&self) -> &Path;
    /// Its length in bytes, fixed at open.
    fn len(&self) -> u64;
    /// True when it holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The version read.
    fn identity(&self) -> &Identity;
    /// Fills `buf` with the bytes at `[offset, offset + buf.len())`: all of them, or an error
    /// (past the end, an I/O error, or the object changed since it was opened).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// The whole object as one slice, where zero-copy exists.
    fn map(&self) -> Option<&[u8]> {
        None
    }
    /// Hints that `[start, end)` is about to be read through [`ByteSource::map`].
    fn will_need(&self, _start: u64, _end: u64) {}
    /// Hints that `[start, end)` will not be read again soon (resident pages may go).
    fn release(&self, _start: u64, _end: u64) {}
}

impl dyn ByteSource + '_ {
    /// `len` bytes at `offset`: borrowed from the map when there is one, read otherwise (the
    /// caller bounds `len` by a cap or by what it already checked lies in the object).
    pub fn range(&self, offset: u64, len: u64) -> Result<Cow<'_, [u8]>> {
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.len())
            .ok_or_else(|| past_end(self.name(), offset, len, self.len()))?;
        if let Some(map) = self.map() {
            return Ok(Cow::Borrowed(&map[offset as usize..end as usize]));
        }
        let n = usize::try_from(len).map_err(|_| past_end(self.name(), offset, len, end))?;
        let mut buf = vec![0u8; n];
        self.read_at(offset, &mut buf)?;
        Ok(Cow::Owned(buf))
    }

    /// The first `n` bytes (all of them when the object is shorter).
    pub fn head(&self, n: usize) -> Result<Vec<u8>> {
        let n = self.len().min(n as u64);
        Ok(self.range(0, n)?.into_owned())
    }
}

/// Opens names as sources: where inputs come from.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// Opens `name`. When it is not an object that can be read (a directory), the error says so
    /// followed by `expected` (each caller says what it wanted: ", expected a file").
    fn open(&self, name: &Path, expected: &str) -> Result<Arc<dyn ByteSource>>;
    /// Whether `name` exists (a gguf-split set lists its missing parts before opening any).
    fn exists(&self, name: &Path) -> bool;
}

/// The error of a read past the end of a source (`len` bytes at `offset` of `total`).
pub fn past_end(name: &Path, offset: u64, len: u64, total: u64) -> Error {
    Error::io(
        name,
        "read",
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("read of {len} bytes at {offset} past the end ({total} bytes)"),
        ),
    )
}

/// The error of a read that found the object no longer the version it opened.
pub fn changed(name: &Path) -> Error {
    Error::io(
        name,
        "read",
        io::Error::other(
            "input changed while reading (a file was truncated or rewritten by another process)",
        ),
    )
}

static PRIVATE: Identity = Identity::Private;

/// Bytes in memory as a source (a buffer handed to a reader, a test's or fuzzer's input).
/// Zero-copy by default; [`InMemory::unmapped`] serves every read through `read_at` instead,
/// as a remote object would.
#[derive(Debug)]
pub struct InMemory<B> {
    name: PathBuf,
    bytes: B,
    mapped: bool,
}

impl<B: AsRef<[u8]> + Send + Sync> InMemory<B> {
    /// `bytes`, named `name` in messages.
    pub fn new(name: impl Into<PathBuf>, bytes: B) -> Self {
        InMemory {
            name: name.into(),
            bytes,
            mapped: true,
        }
    }

    /// The same bytes without [`ByteSource::map`]: every read goes through `read_at`.
    pub fn unmapped(mut self) -> Self {
        self.mapped = false;
        self
    }
}

impl<B: AsRef<[u8]> + Send + Sync> ByteSource for InMemory<B> {
    fn name(&self) -> &Path {
        &self.name
    }
    fn len(&self) -> u64 {
        self.bytes.as_ref().len() as u64
    }
    fn identity(&self) -> &Identity {
        &PRIVATE
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let b = self.bytes.as_ref();
        let len = buf.len() as u64;
        let end = offset.checked_add(len).filter(|&e| e <= b.len() as u64);
        let end = end.ok_or_else(|| past_end(&self.name, offset, len, b.len() as u64))?;
        buf.copy_from_slice(&b[offset as usize..end as usize]);
        Ok(())
    }
    fn map(&self) -> Option<&[u8]> {
        self.mapped.then(|| self.bytes.as_ref())
    }
}

/// A front-to-back cursor over a source, for header parsers: [`ByteCursor::take`] hands out
/// the next bytes, from the map when there is one, else from a read-ahead window refilled by
/// `read_at` in steps of [`ByteCursor::STEP`] (or the length asked, when larger: the parser
/// checks lengths against its caps and [`ByteCursor::remaining`] before asking).
pub struct ByteCursor<'a> {
    src: &'a dyn ByteSource,
    pos: u64,
    /// The window of an unmapped source: bytes `[at, at + buf.len())`.
    at: u64,
    buf: Vec<u8>,
}

impl<'a> ByteCursor<'a> {
    /// Bytes read ahead at a time from an unmapped source.
    pub const STEP: usize = 64 << 10;

    /// A cursor at `pos`.
    pub fn new(src: &'a dyn ByteSource, pos: u64) -> Self {
        ByteCursor {
            src,
            pos,
            at: 0,
            buf: Vec::new(),
        }
    }

    /// The source.
    pub fn source(&self) -> &'a dyn ByteSource {
        self.src
    }

    /// The position of the next byte.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// Moves to `pos`.
    pub fn seek(&mut self, pos: u64) {
        self.pos = pos;
    }

    /// Bytes from the position to the end of the source.
    pub fn remaining(&self) -> u64 {
        self.src.len().saturating_sub(self.pos)
    }

    /// The next `n` bytes, moving past them; an error when fewer remain.
    pub fn take(&mut self, n: u64) -> Result<&[u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.src.len())
            .ok_or_else(|| past_end(self.src.name(), self.pos, n, self.src.len()))?;
        let pos = std::mem::replace(&mut self.pos, end);
        if let Some(map) = self.src.map() {
            return Ok(&map[pos as usize..end as usize]);
        }
        let window_end = self.at + self.buf.len() as u64;
        if pos < self.at || end > window_end {
            self.refill(pos, end)?;
        }
        Ok(&self.buf[(pos - self.at) as usize..(end - self.at) as usize])
    }

    /// Makes the window start at `pos` and reach at least `end`, keeping the bytes already
    /// read that it still covers.
    fn refill(&mut self, pos: u64, end: u64) -> Result<()> {
        let want = (end - pos).max(Self::STEP as u64).min(self.src.len() - pos) as usize;
        let window_end = self.at + self.buf.len() as u64;
        let kept = if (self.at..window_end).contains(&pos) {
            let from = (pos - self.at) as usize;
            self.buf.copy_within(from.., 0);
            self.buf.len() - from
        } else {
            0
        };
        self.buf.resize(want.max(kept), 0);
        self.at = pos;
        if want > kept {
            self.src
                .read_at(pos + kept as u64, &mut self.buf[kept..want])?;
        }
        Ok(())
    }
}

/// A source as [`std::io::Read`] + [`std::io::Seek`] (for the `zip` crate's central directory
/// parser); wrap it in a `BufReader`, since every call is one `read_at`.
pub struct SourceReader<'a> {
    src: &'a dyn ByteSource,
    pos: u64,
}

impl<'a> SourceReader<'a> {
    /// A reader at byte 0.
    pub fn new(src: &'a dyn ByteSource) -> Self {
        SourceReader { src, pos: 0 }
    }
}

impl io::Read for SourceReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (buf.len() as u64).min(self.src.len().saturating_sub(self.pos)) as usize;
        self.src
            .read_at(self.pos, &mut buf[..n])
            .map_err(io::Error::other)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl io::Seek for SourceReader<'_> {
    fn seek(&mut self, to: io::SeekFrom) -> io::Result<u64> {
        let pos = match to {
            io::SeekFrom::Start(p) => Some(p),
            io::SeekFrom::End(d) => self.src.len().checked_add_signed(d),
            io::SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}

/// Where a tensor's stored bytes lie in a source: `[start, start + len)`. The readers that
/// serve stored bytes answer [`crate::TensorSource::bytes`], `read_into`, `will_need` and
/// `release` through it, so the range arithmetic, the bounds check and the choice between the
/// map and `read_at` are the same for every format.
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

    /// Its bytes zero-copy, when `src` is mapped.
    pub fn bytes<'a>(&self, src: &'a dyn ByteSource) -> Option<&'a [u8]> {
        self.of(src.map()?)
    }

    /// The absolute range of `[offset, offset + len)` of the tensor, clipped to its end.
    fn clip(&self, offset: u64, len: u64) -> (u64, u64) {
        let begin = self.start.saturating_add(offset);
        let end = self
            .start
            .saturating_add(offset.saturating_add(len).min(self.len));
        (begin, end)
    }

    /// Copies `[offset, offset + dst.len())` of the tensor from `src` (out of its map, or by
    /// `read_at`), after the bounds check every reader applies ([`check_read`];
    /// `at` names the tensor).
    pub fn read_into(
        &self,
        src: &dyn ByteSource,
        at: impl FnOnce() -> Location,
        format: Format,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<()> {
        check_read(at, format, self.len, offset, dst.len(), 1)?;
        let (a, b) = self.clip(offset, dst.len() as u64);
        match src.map() {
            Some(map) => {
                let bytes = map.get(a as usize..b as usize);
                let bytes = bytes.ok_or_else(|| past_end(src.name(), a, b - a, src.len()))?;
                dst.copy_from_slice(bytes);
                Ok(())
            }
            None => src.read_at(a, dst),
        }
    }

    /// [`ByteSource::will_need`] for `[offset, offset + len)` of the tensor.
    pub fn will_need(&self, src: &dyn ByteSource, offset: u64, len: u64) {
        let (a, b) = self.clip(offset, len);
        src.will_need(a, b);
    }

    /// [`ByteSource::release`] for `[offset, offset + len)` of the tensor.
    pub fn release(&self, src: &dyn ByteSource, offset: u64, len: u64) {
        let (a, b) = self.clip(offset, len);
        src.release(a, b);
    }
}

/// The tensors of a reader that all lie as-is in one source, tensor `i` at extent `i`
/// (safetensors, GGUF): the data half of their [`crate::TensorSource`] answered in one place.
pub struct StoredTensors {
    src: Arc<dyn ByteSource>,
    format: Format,
    extents: Vec<Extent>,
}

impl StoredTensors {
    /// Tensor `i` of `format` at `extents[i]` of `src` (bounds checked by the reader).
    pub fn new(src: Arc<dyn ByteSource>, format: Format, extents: Vec<Extent>) -> Self {
        StoredTensors {
            src,
            format,
            extents,
        }
    }

    /// The source.
    pub fn source(&self) -> &dyn ByteSource {
        &*self.src
    }

    /// [`crate::TensorSource::bytes`]: zero-copy when the source is mapped.
    pub fn bytes(&self, index: usize) -> Option<&[u8]> {
        self.extents[index].bytes(&*self.src)
    }

    /// [`crate::TensorSource::read_into`]; errors name tensor `name` at its first byte.
    pub fn read_into(&self, index: usize, name: &str, offset: u64, dst: &mut [u8]) -> Result<()> {
        let x = self.extents[index];
        let at = || Location::file(self.src.name()).tensor(name).at(x.start);
        x.read_into(&*self.src, at, self.format, offset, dst)
    }

    /// [`crate::TensorSource::will_need`].
    pub fn will_need(&self, index: usize, offset: u64, len: u64) {
        self.extents[index].will_need(&*self.src, offset, len);
    }

    /// [`crate::TensorSource::release`].
    pub fn release(&self, index: usize, offset: u64, len: u64) {
        self.extents[index].release(&*self.src, offset, len);
    }
}

/// Checks a [`TensorSource::read_into`] request against its tensor, the same way for every
/// reader: `[offset, offset + len)` must lie inside the tensor's `total` bytes and, when the
/// reader serves whole elements only (`element` > 1), start and end on an element. The error
/// names `at` (the file, the tensor, and where its bytes are) and the request.
pub fn check_read(
    at: impl FnOnce() -> Location,
    format: Format,
    total: u64,
    offset: u64,
    len: usize,
    element: u64,
) -> Result<()> {
    let len = len as u64;
    if offset.checked_add(len).is_none_or(|end| end > total) {
        return Err(Error::malformed(
            at(),
            format,
            format!("read of {len} bytes at {offset} past the end of the tensor ({total} bytes)"),
        ));
    }
    if element > 1 && (!offset.is_multiple_of(element) || !len.is_multiple_of(element)) {
        return Err(Error::malformed(
            at(),
            format,
            format!("read of {len} bytes at {offset} is not aligned to the {element}-byte element"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn extents_check_reads_and_clip_hints_mapped_or_not() {
        let file: Vec<u8> = (0..32).collect();
        for src in [
            InMemory::new("f", file.clone()),
            InMemory::new("f", file.clone()).unmapped(),
        ] {
            let src: &dyn ByteSource = &src;
            let x = Extent::new(8, 8);
            assert_eq!(x.bytes(src).is_some(), src.map().is_some());
            let mut dst = [0u8; 3];
            let at = || Location::file("f").tensor("t").at(8);
            x.read_into(src, at, Format::Gguf, 5, &mut dst).unwrap();
            assert_eq!(dst, [13, 14, 15]);
            let e = x.read_into(src, at, Format::Gguf, 6, &mut dst).unwrap_err();
            assert!(e
                .to_string()
                .contains("read of 3 bytes at 6 past the end of the tensor (8 bytes)"));
            assert!(x
                .read_into(src, at, Format::Gguf, u64::MAX, &mut dst)
                .is_err());
            // An extent the reader did not bound: an error either way, never a panic.
            let e = Extent::new(30, 8)
                .read_into(src, at, Format::Gguf, 0, &mut dst)
                .unwrap_err();
            assert!(e.to_string().contains("past the end (32 bytes)"), "{e}");
        }
        let x = Extent::new(8, 8);
        assert_eq!(x.of(&file), Some(&file[8..16]));
        assert_eq!(Extent::new(30, 8).of(&file), None);
        assert_eq!(Extent::new(u64::MAX, 2).of(&file), None);
        assert_eq!(x.clip(4, u64::MAX), (12, 16));
        let at = || Location::file("f").tensor("t").at(8);
        let e = check_read(at, Format::Npz, 8, 2, 4, 4).unwrap_err();
        assert!(e
            .to_string()
            .contains("is not aligned to the 4-byte element"));
    }

    /// The cursor hands out the same bytes in any pattern of lengths, with or without a map,
    /// across window boundaries and for lengths larger than a window.
    #[test]
    fn a_cursor_reads_the_same_bytes_mapped_or_not() {
        let bytes = data(3 * ByteCursor::STEP + 123);
        let mapped = InMemory::new("f", bytes.clone());
        let unmapped = InMemory::new("f", bytes.clone()).unmapped();
        let steps = [1u64, 7, 65_535, 2, 200_000, 3, 1, 8];
        for src in [&mapped as &dyn ByteSource, &unmapped] {
            let mut c = ByteCursor::new(src, 5);
            let mut pos = 5usize;
            for &n in steps.iter().cycle().take(40) {
                let n = n.min(c.remaining());
                assert_eq!(c.take(n).unwrap(), &bytes[pos..pos + n as usize]);
                pos += n as usize;
            }
            assert_eq!(c.remaining(), 0);
            let e = c.take(1).unwrap_err();
            assert!(e.to_string().contains("past the end"), "{e}");
            c.seek(3);
            assert_eq!(c.take(4).unwrap(), &bytes[3..7]);
        }
    }

    #[test]
    fn ranges_and_readers_agree_with_the_bytes() {
        use std::io::{Read, Seek, SeekFrom};
        let bytes = data(1000);
        let src = InMemory::new("f", bytes.clone()).unmapped();
        let src: &dyn ByteSource = &src;
        assert!(matches!(src.range(10, 20).unwrap(), Cow::Owned(_)));
        assert_eq!(&src.range(10, 20).unwrap()[..], &bytes[10..30]);
        assert!(src.range(990, 11).is_err());
        assert!(src.range(u64::MAX, 2).is_err());
        assert_eq!(src.head(4096).unwrap(), bytes);
        let mut r = SourceReader::new(src);
        r.seek(SeekFrom::End(-10)).unwrap();
        let mut tail = Vec::new();
        r.read_to_end(&mut tail).unwrap();
        assert_eq!(tail, &bytes[990..]);
        assert!(r.seek(SeekFrom::Current(-2000)).is_err());
    }
}
