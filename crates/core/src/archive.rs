//! One ZIP layer for the readers of ZIP-based formats (npz, torch checkpoints): a checked entry
//! table and an inflater that enforces each entry's exact length and CRC-32.
//!
//! The `zip` crate finds and parses the end-of-central-directory records (ZIP64 included) and
//! the central directory, and `validate_header_consistency` rejects local headers that disagree
//! with their central entry (name, method, sizes, CRC, flags), overlapping entries and local
//! headers missing from the central directory. [`entries`] adds, for every reader alike: the
//! entry count cap, duplicate names, names that are not UTF-8 or that climb out (`..`, a leading
//! `/`, `\`, NUL), a local header missing at its offset, a local name or method that differs from
//! the central one, the encryption and "patched data" flags in either header, methods other than
//! stored and deflate, data past the end of the file, stored entries whose two sizes differ, and
//! a declared deflate ratio no stream reaches. Problems that leave the table readable are
//! [`Anomaly`]s, each of a [`Concern`]; a reader refuses on the first, mapping the concern to its
//! own error kind (torch refuses ambiguous archives, whose content depends on the tool reading
//! them, as it refuses code; npz calls them malformed).
//!
//! [`Inflater`] streams one deflated entry through caller-owned buffers (about 40 KiB of state,
//! never an allocation of the declared size), and [`Inflater::finish`] checks that the stream
//! ends at the declared size with the declared CRC-32; [`inflate_all`] inflates a whole entry
//! that way.
//!
//! The archive is a [`ByteSource`]: the central directory is parsed through its map when it has
//! one and through buffered `read_at` otherwise, local headers are read by ranges, and a
//! member's compressed bytes ([`Span`]) are fed to the inflater zero-copy from the map or in
//! [`ByteCursor::STEP`]-sized reads.
//!
//! See: APPNOTE.TXT <https://pkware.cachefly.net/webdocs/casestudies/APPNOTE.TXT> §4.3, §4.4, and
//! RFC 1951.

use std::io::{Cursor, Read, Seek};

use crate::bytes::{ByteCursor, ByteSource, SourceReader};
use crate::error::Error;
use crate::limits::Limits;

use flate2::{Decompress, FlushDecompress, Status};

/// Why a member could not be inflated as declared.
#[derive(Debug)]
pub enum InflateError {
    /// The compressed bytes could not be read from their source (an I/O error, or the input
    /// changed while reading): the source's own error, passed on as it is.
    Read(Box<Error>),
    /// The compressed bytes are not valid deflate.
    Corrupt(String),
    /// The stream ends (or its compressed bytes run out) before the declared size.
    Short {
        /// Uncompressed bytes produced.
        produced: u64,
    },
    /// The stream holds more than the declared size.
    Long {
        /// The declared size.
        declared: u64,
    },
    /// The CRC-32 of the inflated bytes is not the central directory's.
    Crc {
        /// The central directory's.
        expected: u32,
        /// The data's.
        found: u32,
    },
}

impl PartialEq for InflateError {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl InflateError {
    /// The error to return for a member of `at`: a read failure as the source reported it,
    /// anything else through `malformed` (which words it for its format).
    pub fn into_error(self, malformed: impl FnOnce(InflateError) -> Error) -> Error {
        match self {
            InflateError::Read(e) => *e,
            other => malformed(other),
        }
    }
}

impl std::fmt::Display for InflateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InflateError::Read(e) => write!(f, "{e}"),
            InflateError::Corrupt(e) => write!(f, "corrupt deflate data: {e}"),
            InflateError::Short { produced } => write!(
                f,
                "the compressed data ends after {produced} uncompressed bytes, before the \
                 member's declared size (truncated or size mismatch)"
            ),
            InflateError::Long { declared } => write!(
                f,
                "the compressed data inflates to more than the member's declared size of \
                 {declared} bytes"
            ),
            InflateError::Crc { expected, found } => write!(
                f,
                "CRC-32 mismatch: the central directory says {expected:08x}, the data gives \
                 {found:08x}"
            ),
        }
    }
}

/// `len` bytes at `start` of `src`: a member's compressed bytes where they lie.
#[derive(Clone, Copy)]
pub struct Span<'a> {
    /// The archive.
    pub src: &'a dyn ByteSource,
    /// Absolute offset of the first byte.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
}

impl<'a> Span<'a> {
    /// `[start, start + len)` of `src`.
    pub fn new(src: &'a dyn ByteSource, start: u64, len: u64) -> Self {
        Span { src, start, len }
    }

    /// Its bytes, zero-copy, when the source is mapped (`None` also when they do not all lie
    /// in it).
    pub fn bytes(&self) -> Option<&'a [u8]> {
        let end = self.start.checked_add(self.len)?;
        self.src
            .map()?
            .get(usize::try_from(self.start).ok()?..usize::try_from(end).ok()?)
    }

    /// Its bytes from `from` on, zero-copy, when the source is mapped (empty when they lie
    /// past its end: the inflater then reports a short stream).
    fn mapped_from(&self, from: u64) -> Option<&'a [u8]> {
        let map = self.src.map()?;
        let end = self.start.saturating_add(self.len).min(map.len() as u64);
        let begin = self.start.saturating_add(from).min(end);
        Some(&map[begin as usize..end as usize])
    }
}

/// The state of one pass over a deflated member.
pub struct Inflater {
    z: Decompress,
    /// Compressed bytes consumed.
    in_pos: u64,
    /// Uncompressed bytes produced (from the member start).
    out: u64,
    ended: bool,
    crc: crc32fast::Hasher,
    /// Compressed bytes read ahead from an unmapped source; `window[used..]` are those from
    /// `in_pos` on.
    window: Vec<u8>,
    used: usize,
}

impl Default for Inflater {
    fn default() -> Self {
        Inflater::new()
    }
}

impl Inflater {
    /// A decoder at the start of a member.
    pub fn new() -> Self {
        Inflater {
            z: Decompress::new(false),
            in_pos: 0,
            out: 0,
            ended: false,
            crc: crc32fast::Hasher::new(),
            window: Vec::new(),
            used: 0,
        }
    }

    /// Uncompressed bytes produced so far.
    pub fn position(&self) -> u64 {
        self.out
    }

    /// Compressed bytes consumed so far.
    pub fn consumed(&self) -> u64 {
        self.in_pos
    }

    /// The compressed bytes of `comp` from the consumed position on: the rest of the member
    /// from the map, or the read-ahead window (refilled when used up).
    fn input<'a>(
        window: &'a mut Vec<u8>,
        used: &mut usize,
        in_pos: u64,
        comp: Span<'a>,
    ) -> Result<&'a [u8], InflateError> {
        if let Some(m) = comp.mapped_from(in_pos) {
            return Ok(m);
        }
        if *used == window.len() {
            let n = comp.len.saturating_sub(in_pos).min(ByteCursor::STEP as u64) as usize;
            window.resize(n, 0);
            *used = 0;
            comp.src
                .read_at(comp.start + in_pos, window)
                .map_err(|e| InflateError::Read(Box::new(e)))?;
        }
        Ok(&window[*used..])
    }

    /// Fills all of `dst` with the next uncompressed bytes of the member whose compressed bytes
    /// are `comp`.
    pub fn fill(&mut self, comp: Span<'_>, dst: &mut [u8]) -> Result<(), InflateError> {
        let mut filled = 0usize;
        while filled < dst.len() {
            if self.ended {
                return Err(InflateError::Short { produced: self.out });
            }
            let input = Self::input(&mut self.window, &mut self.used, self.in_pos, comp)?;
            let (in0, out0) = (self.z.total_in(), self.z.total_out());
            let status = self
                .z
                .decompress(input, &mut dst[filled..], FlushDecompress::None)
                .map_err(|e| InflateError::Corrupt(e.to_string()))?;
            let consumed = (self.z.total_in() - in0) as usize;
            let produced = (self.z.total_out() - out0) as usize;
            self.crc.update(&dst[filled..filled + produced]);
            self.in_pos += consumed as u64;
            if comp.src.map().is_none() {
                self.used += consumed;
            }
            self.out += produced as u64;
            filled += produced;
            match status {
                Status::StreamEnd => self.ended = true,
                Status::Ok | Status::BufError => {
                    if consumed == 0 && produced == 0 {
                        return Err(InflateError::Short { produced: self.out });
                    }
                }
            }
        }
        Ok(())
    }

    /// Discards the next `n` uncompressed bytes, inflating through `scratch`.
    pub fn skip(
        &mut self,
        comp: Span<'_>,
        mut n: u64,
        scratch: &mut [u8],
    ) -> Result<(), InflateError> {
        while n > 0 {
            let k = scratch.len().min(usize::try_from(n).unwrap_or(usize::MAX));
            self.fill(comp, &mut scratch[..k])?;
            n -= k as u64;
        }
        Ok(())
    }

    /// Called once `size` bytes were produced: the stream must end here and its CRC-32 match
    /// `crc` (`None`: not recorded).
    pub fn finish(
        &mut self,
        comp: Span<'_>,
        size: u64,
        crc: Option<u32>,
    ) -> Result<(), InflateError> {
        if !self.ended {
            let mut probe = [0u8; 1];
            let input = Self::input(&mut self.window, &mut self.used, self.in_pos, comp)?;
            let out0 = self.z.total_out();
            let status = self
                .z
                .decompress(input, &mut probe, FlushDecompress::None)
                .map_err(|e| InflateError::Corrupt(e.to_string()))?;
            if self.z.total_out() != out0 {
                return Err(InflateError::Long { declared: size });
            }
            if status != Status::StreamEnd {
                return Err(InflateError::Corrupt(
                    "the deflate stream does not end after the declared size".into(),
                ));
            }
            self.ended = true;
        }
        let found = self.crc.clone().finalize();
        if let Some(expected) = crc.filter(|&c| c != found) {
            return Err(InflateError::Crc { expected, found });
        }
        Ok(())
    }
}

/// A deflated member: its compressed bytes, declared uncompressed size and CRC-32 (`None`:
/// not recorded).
#[derive(Clone, Copy)]
pub struct Member<'a> {
    /// The compressed bytes.
    pub comp: Span<'a>,
    /// The declared uncompressed size.
    pub size: u64,
    /// The declared CRC-32.
    pub crc: Option<u32>,
}

/// The inflate cursor of one tensor read front to back ([`crate::Access::Sequential`]), shared
/// by the npz and torch readers: consecutive reads continue where the previous one stopped; a
/// read further on inflates and discards the gap, an earlier one restarts from the member's
/// start (correct, but O(offset)).
#[derive(Default)]
pub struct SeqCursor(std::sync::Mutex<Option<Inflater>>);

impl SeqCursor {
    /// Fills `dst` with the inflated bytes of `member` from `from` on, skipping through a
    /// buffer of at most `scratch` bytes. When the member is inflated to its declared size,
    /// checks that it ends there and its CRC-32; otherwise keeps the cursor for the next call
    /// while its position is before `keep_until` (the end of the tensor in the member). An
    /// error comes with the inflated position the failing step read from.
    pub fn read(
        &self,
        member: Member<'_>,
        from: u64,
        dst: &mut [u8],
        scratch: usize,
        keep_until: u64,
    ) -> Result<(), (InflateError, u64)> {
        let Member { comp, size, crc } = member;
        let mut guard = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut z = match guard.take() {
            Some(z) if z.position() <= from => z,
            _ => Inflater::new(),
        };
        let gap = from - z.position();
        if gap > 0 {
            let mut buf = vec![
                0u8;
                scratch
                    .max(1)
                    .min(usize::try_from(gap).unwrap_or(usize::MAX))
            ];
            z.skip(comp, gap, &mut buf).map_err(|e| (e, from))?;
        }
        z.fill(comp, dst).map_err(|e| (e, from))?;
        if z.position() == size {
            z.finish(comp, size, crc).map_err(|e| (e, size))?;
        } else if z.position() < keep_until {
            *guard = Some(z);
        }
        Ok(())
    }

    /// Compressed bytes the live cursor has consumed (`None`: no pass under way, either not
    /// started or finished).
    pub fn consumed(&self) -> Option<u64> {
        let guard = self.0.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().map(Inflater::consumed)
    }
}

/// How an entry's data is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Stored as is.
    Stored,
    /// Raw deflate.
    Deflated,
}

/// One entry as the central directory and its local header describe it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Name (from the central directory; lossy UTF-8 when it is not UTF-8, an anomaly).
    pub name: String,
    /// Stored or deflated (`None`: another method, an anomaly).
    pub method: Option<Method>,
    /// Absolute offset of the central directory record.
    pub central_start: u64,
    /// Absolute offset of the local header.
    pub header_start: u64,
    /// Absolute offset of the data (after the local header's own name and extra field).
    pub data_start: u64,
    /// Compressed size.
    pub csize: u64,
    /// Uncompressed size.
    pub size: u64,
    /// CRC-32 from the central directory.
    pub crc: u32,
}

impl Entry {
    /// The entry's compressed bytes in `src`, the archive (bounds were checked by [`entries`]).
    pub fn data<'a>(&self, src: &'a dyn ByteSource) -> Span<'a> {
        Span::new(src, self.data_start, self.csize)
    }
}

/// What kind of problem an [`Anomaly`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concern {
    /// Tools may read different content from the archive (duplicate names, local and central
    /// headers that disagree, names climbing out of the archive).
    Ambiguous,
    /// Encrypted, patched-data or compressed with a method other than stored/deflate.
    Unsupported,
    /// The archive breaks ZIP's rules (a stored entry whose sizes differ).
    Malformed,
    /// A declared deflate ratio no stream reaches: a bomb or a lie.
    Bomb,
}

/// A problem found in the archive; the table is still readable.
#[derive(Debug, Clone)]
pub struct Anomaly {
    /// Absolute byte offset.
    pub offset: u64,
    /// What kind of problem.
    pub concern: Concern,
    /// Description (names sanitized).
    pub what: String,
}

/// The checked entries of an archive.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Entries in central-directory order.
    pub entries: Vec<Entry>,
    /// Problems, in the order found.
    pub anomalies: Vec<Anomaly>,
    /// Absolute offset of the central directory.
    pub central_start: u64,
}

/// How a loader finds an entry by name: the ZIP readers that load weights do not agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// torch's reader (miniz, `mz_zip_reader_locate_file` with no flags): ASCII letters are
    /// compared without case, over names of equal length, by a binary search of the central
    /// directory sorted that way; of names that differ only in case, which one is found depends
    /// on the sort, so more than one is [`Lookup::Ambiguous`].
    AsciiCaseless,
    /// Python's `zipfile` (numpy's `.npz`, pandas): exact names; of equal names the last entry
    /// in the central directory wins.
    ExactLastWins,
}

impl NameRule {
    /// Whether the loader takes an entry named `entry` for `wanted`.
    pub fn matches(self, entry: &str, wanted: &str) -> bool {
        match self {
            NameRule::AsciiCaseless => entry.as_bytes().eq_ignore_ascii_case(wanted.as_bytes()),
            NameRule::ExactLastWins => entry == wanted,
        }
    }

    /// The item of `items` (in central-directory order) the loader reads for `wanted`: under
    /// [`NameRule::AsciiCaseless`] the first match (names that differ only in case are an
    /// anomaly, [`Table::case_twins`], that a reader following this rule refuses), under
    /// [`NameRule::ExactLastWins`] the last.
    pub fn find<'a, T>(
        self,
        items: &'a [T],
        name_of: impl Fn(&T) -> &str,
        wanted: &str,
    ) -> Option<&'a T> {
        let hit = |e: &&T| self.matches(name_of(e), wanted);
        match self {
            NameRule::AsciiCaseless => items.iter().find(hit),
            NameRule::ExactLastWins => items.iter().rev().find(hit),
        }
    }
}

impl Table {
    /// The first pair of entries whose names differ only in ASCII letter case (exact
    /// duplicates are an anomaly of their own): under [`NameRule::AsciiCaseless`] a lookup of
    /// either name may return the other.
    pub fn case_twins(&self) -> Option<(&Entry, &Entry)> {
        let mut seen: std::collections::HashMap<Vec<u8>, &Entry> = std::collections::HashMap::new();
        for e in &self.entries {
            let folded = e.name.as_bytes().to_ascii_lowercase();
            match seen.get(&folded) {
                Some(first) if first.name != e.name => return Some((first, e)),
                Some(_) => {}
                None => {
                    seen.insert(folded, e);
                }
            }
        }
        None
    }
}

/// Why the archive could not be read at all.
#[derive(Debug)]
pub enum TableError {
    /// Not a ZIP, or its structure is broken (message, absolute offset).
    Malformed(String, u64),
    /// More entries than [`Limits::max_tensors`] (entries, cap).
    TooMany(u64, u64),
    /// The archive could not be read (its source's error).
    Read(Error),
}

/// The `n` bytes at `o` of `src`, `None` when they do not all lie in it.
fn bytes_at(src: &dyn ByteSource, o: u64, n: u64) -> Result<Option<Vec<u8>>, TableError> {
    if o.checked_add(n).is_none_or(|end| end > src.len()) {
        return Ok(None);
    }
    let b = src.range(o, n).map_err(TableError::Read)?;
    Ok(Some(b.into_owned()))
}

fn u16_of(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

fn climbs_out(n: &str) -> bool {
    n.starts_with('/') || n.contains('\\') || n.contains('\0') || n.split('/').any(|c| c == "..")
}

/// Reads and checks the entry table of the ZIP archive `src` (which starts at byte 0).
pub fn entries(src: &dyn ByteSource, limits: &Limits) -> Result<Table, TableError> {
    match src.map() {
        Some(map) => entries_from(src, Cursor::new(map), limits),
        None => entries_from(src, std::io::BufReader::new(SourceReader::new(src)), limits),
    }
}

fn entries_from<R: Read + Seek>(
    src: &dyn ByteSource,
    reader: R,
    limits: &Limits,
) -> Result<Table, TableError> {
    let bad = |m: String, o: u64| TableError::Malformed(m, o);
    // The archive starts at 0; the crate's offset detection mis-parses some real torch files
    // (a ZIP64 EOCD before the EOCD, depending on name lengths).
    let config = zip::read::Config {
        archive_offset: zip::read::ArchiveOffset::Known(0),
    };
    let mut ar = zip::ZipArchive::with_config(config, reader)
        .map_err(|e| bad(format!("not a valid ZIP archive: {e}"), 0))?;
    if ar.len() as u64 > limits.max_tensors {
        return Err(TableError::TooMany(ar.len() as u64, limits.max_tensors));
    }
    let mut t = Table {
        central_start: ar.central_directory_start(),
        ..Table::default()
    };
    if ar.has_duplicate_names() {
        t.anomalies.push(Anomaly {
            offset: t.central_start,
            concern: Concern::Ambiguous,
            what: "the central directory lists the same entry name twice (torch reads the \
                   first, other tools the last)"
                .into(),
        });
    }
    for i in 0..ar.len() {
        let f = ar
            .by_index_raw(i)
            .map_err(|e| bad(format!("ZIP entry {i}: {e}"), t.central_start))?;
        let e = entry(src, &f, i, limits, &mut t.anomalies)?;
        t.entries.push(e);
    }
    if t.anomalies.is_empty() {
        if let Err(e) = ar.validate_header_consistency() {
            t.anomalies.push(Anomaly {
                offset: 0,
                concern: Concern::Ambiguous,
                what: format!("the local headers disagree with the central directory: {e}"),
            });
        }
    }
    Ok(t)
}

/// The fields of a local header this layer reads.
struct Local {
    flags: u16,
    method: u16,
    data_start: u64,
}

/// One entry's checks.
fn entry<R: Read>(
    src: &dyn ByteSource,
    f: &zip::read::ZipFile<'_, R>,
    i: usize,
    limits: &Limits,
    out: &mut Vec<Anomaly>,
) -> Result<Entry, TableError> {
    let mut flag = |offset: u64, concern: Concern, what: String| {
        out.push(Anomaly {
            offset,
            concern,
            what,
        })
    };
    let (cd, h) = (f.central_header_start(), f.header_start());
    let raw = f.name_raw();
    let name = std::str::from_utf8(raw).map_or_else(
        |_| {
            flag(
                cd,
                Concern::Ambiguous,
                format!("entry {i}: name is not UTF-8"),
            );
            String::from_utf8_lossy(raw).into_owned()
        },
        str::to_string,
    );
    let shown = crate::sanitize(&name);
    if climbs_out(&name) {
        flag(
            cd,
            Concern::Ambiguous,
            format!("entry `{shown}`: path traversal or absolute name"),
        );
    }
    let local = local_header(src, h, raw, &shown, &mut flag)?;
    if f.data_start().is_some_and(|ds| ds != local.data_start) {
        return Err(TableError::Malformed(
            format!("entry `{shown}`: data offset disagrees with the zip reader"),
            h,
        ));
    }
    let cd_flags = bytes_at(src, cd.saturating_add(8), 2)?.map_or(0, |b| u16_of(&b, 0));
    for (which, fl, at) in [("central", cd_flags, cd), ("local", local.flags, h)] {
        if fl & 0x41 != 0 || f.encrypted() {
            let what = format!("entry `{shown}`: encrypted (flag set in the {which} header)");
            flag(at, Concern::Unsupported, what);
        }
        if fl & 0x20 != 0 {
            let what = format!(
                "entry `{shown}`: 'compressed patched data' flag (0x20) set in the {which} header"
            );
            flag(at, Concern::Unsupported, what);
        }
    }
    let method = method_of(f.compression(), local.method, h, &shown, &mut flag);
    let e = Entry {
        name,
        method,
        central_start: cd,
        header_start: h,
        data_start: local.data_start,
        csize: f.compressed_size(),
        size: f.size(),
        crc: f.crc32(),
    };
    sizes(&e, src.len(), limits.max_deflate_ratio, &shown, &mut flag)?;
    Ok(e)
}

/// The local header at `h`: present, with the central name.
fn local_header(
    src: &dyn ByteSource,
    h: u64,
    raw: &[u8],
    shown: &str,
    flag: &mut impl FnMut(u64, Concern, String),
) -> Result<Local, TableError> {
    let (flags, method, nlen, xlen) = match bytes_at(src, h, 30)? {
        Some(b) if b.starts_with(b"PK\x03\x04") => {
            (u16_of(&b, 6), u16_of(&b, 8), u16_of(&b, 26), u16_of(&b, 28))
        }
        _ => {
            return Err(TableError::Malformed(
                format!("entry `{shown}`: no local header at its offset"),
                h,
            ))
        }
    };
    let lname = bytes_at(src, h + 30, u64::from(nlen))?.unwrap_or_default();
    if lname != raw {
        let what = format!(
            "entry `{shown}`: the local headers disagree with the central directory (local \
             name `{}`)",
            crate::sanitize(&String::from_utf8_lossy(&lname))
        );
        flag(h, Concern::Ambiguous, what);
    }
    Ok(Local {
        flags,
        method,
        data_start: h + 30 + u64::from(nlen) + u64::from(xlen),
    })
}

/// Stored or deflated, the same in both headers.
fn method_of(
    central: zip::CompressionMethod,
    local: u16,
    h: u64,
    shown: &str,
    flag: &mut impl FnMut(u64, Concern, String),
) -> Option<Method> {
    let (method, code) = match central {
        zip::CompressionMethod::Stored => (Method::Stored, 0),
        zip::CompressionMethod::Deflated => (Method::Deflated, 8),
        m => {
            let what =
                format!("entry `{shown}`: compression method {m} (only stored and deflated)");
            flag(h, Concern::Unsupported, what);
            return None;
        }
    };
    if code != local {
        let what = format!(
            "entry `{shown}`: the local headers disagree with the central directory \
             (compression method)"
        );
        flag(h, Concern::Ambiguous, what);
    }
    Some(method)
}

/// The data within the file, a stored entry's two sizes equal, a deflated one's ratio possible.
fn sizes(
    e: &Entry,
    file_len: u64,
    ratio: u64,
    shown: &str,
    flag: &mut impl FnMut(u64, Concern, String),
) -> Result<(), TableError> {
    let (h, csize, size, start) = (e.header_start, e.csize, e.size, e.data_start);
    if start.checked_add(csize).is_none_or(|end| end > file_len) {
        return Err(TableError::Malformed(
            format!(
                "entry `{shown}`: its data ({csize} bytes at byte {start}) runs past the end of \
                 the file ({file_len} bytes): truncated?"
            ),
            h,
        ));
    }
    if e.method == Some(Method::Stored) && csize != size {
        let what = format!(
            "entry `{shown}`: stored with compressed size {csize} but uncompressed size {size}"
        );
        flag(h, Concern::Malformed, what);
    }
    if e.method == Some(Method::Deflated) && size > csize.saturating_mul(ratio) {
        let what = format!(
            "entry `{shown}` declares {size} bytes from {csize} compressed bytes, a ratio over \
             {ratio}:1 that no deflate stream reaches (a ZIP bomb or a corrupt size)"
        );
        flag(h, Concern::Bomb, what);
    }
    Ok(())
}

/// Inflates all of a deflated entry's `comp` bytes: exactly `size` bytes whose CRC-32 is `crc`
/// (`None`: not recorded, as torch writes with CRCs turned off).
pub fn inflate_all(comp: Span<'_>, size: u64, crc: Option<u32>) -> Result<Vec<u8>, InflateError> {
    let len = usize::try_from(size).map_err(|_| InflateError::Long { declared: size })?;
    let mut out = vec![0u8; len];
    let mut z = Inflater::new();
    z.fill(comp, &mut out)?;
    z.finish(comp, size, crc)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::InMemory;
    use flate2::{Compress, Compression, FlushCompress};

    /// `data` deflated, after 3 bytes of something else, mapped and not.
    fn deflated(data: &[u8]) -> [InMemory<Vec<u8>>; 2] {
        let mut c = Compress::new(Compression::default(), false);
        let mut out = b"xyz".to_vec();
        out.reserve(data.len() + 64);
        c.compress_vec(data, &mut out, FlushCompress::Finish)
            .unwrap();
        [
            InMemory::new("a.zip", out.clone()),
            InMemory::new("a.zip", out).unmapped(),
        ]
    }

    fn span(src: &dyn ByteSource) -> Span<'_> {
        Span::new(src, 3, src.len() - 3)
    }

    /// A cursor continues, skips ahead, restarts behind, and checks the CRC at the end.
    #[test]
    fn a_sequential_cursor_reads_in_any_order_and_checks_the_end() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        for src in deflated(&data) {
            let crc = crc32fast::hash(&data);
            let m = Member {
                comp: span(&src),
                size: data.len() as u64,
                crc: Some(crc),
            };
            let c = SeqCursor::default();
            let mut buf = vec![0u8; 1000];
            for from in [0u64, 1000, 3000, 500, 4000] {
                c.read(m, from, &mut buf, 7, 5000).unwrap();
                assert_eq!(buf, data[from as usize..from as usize + 1000]);
            }
            assert_eq!(c.consumed(), None, "finished at the member's end");
            let bad = Member {
                crc: Some(!crc),
                ..m
            };
            let (e, at) = c.read(bad, 4000, &mut buf, 7, 5000).unwrap_err();
            assert!(matches!(e, InflateError::Crc { .. }));
            assert_eq!(at, 5000);
        }
    }

    /// Inflating a member bigger than the read-ahead window of an unmapped source.
    #[test]
    fn streams_skips_and_checks_the_end() {
        let n = 3 * ByteCursor::STEP as u32 + 10_000;
        let data: Vec<u8> = (0..n)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let size = data.len() as u64;
        let crc = crc32fast::hash(&data);
        for src in deflated(&data) {
            let comp = span(&src);
            let mut z = Inflater::new();
            let mut scratch = [0u8; 7];
            z.skip(comp, 1234, &mut scratch).unwrap();
            let mut buf = vec![0u8; data.len() - 1234];
            z.fill(comp, &mut buf).unwrap();
            assert_eq!(buf, data[1234..]);
            z.finish(comp, size, Some(crc)).unwrap();
            assert_eq!(inflate_all(comp, size, Some(crc)).unwrap(), data);

            let mut z = Inflater::new();
            let mut buf = vec![0u8; data.len() - 1];
            z.fill(comp, &mut buf).unwrap();
            assert_eq!(
                z.finish(comp, size - 1, Some(crc)),
                Err(InflateError::Long { declared: size - 1 })
            );

            let mut z = Inflater::new();
            let mut buf = vec![0u8; data.len() + 1];
            assert!(matches!(
                z.fill(comp, &mut buf),
                Err(InflateError::Short { .. })
            ));
            let half = Span::new(comp.src, 3, comp.len / 2);
            let mut z = Inflater::new();
            let mut buf = vec![0u8; data.len()];
            assert!(z.fill(half, &mut buf).is_err());
            let mut z = Inflater::new();
            z.fill(comp, &mut buf).unwrap();
            assert!(matches!(
                z.finish(comp, size, Some(crc ^ 1)),
                Err(InflateError::Crc { .. })
            ));
        }
    }

    /// A member whose bytes cannot be read fails with the source's own error.
    #[test]
    fn a_read_failure_is_the_sources_error() {
        let [_, src] = deflated(b"hello");
        let past = Span::new(&src, 3, src.len());
        let mut buf = [0u8; 5];
        let e = Inflater::new().fill(past, &mut buf).unwrap_err();
        let e = e.into_error(|_| unreachable!("not a format error"));
        assert_eq!(e.kind(), "io");
        assert!(e.to_string().contains("past the end"), "{e}");
    }
}
