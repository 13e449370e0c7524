//! One array as both readers hold it: its parsed header, where its bytes lie (stored in the
//! file, or deflated in a ZIP member), and how to turn them into logical bytes.
//!
//! ```text
//! stored:    file ─ npy_start ─ [magic│version│HLEN│header text] data_start ─ [data] ─
//! deflated:  file ─ comp_start ─ [raw deflate … comp_len bytes] ─
//!            inflates to        [magic│version│HLEN│header text│data]   (exactly `size` bytes)
//! ```
//!
//! The bytes come from a [`ByteSource`]: headers by bounded ranged reads (a stored npy header
//! is at most 12 + 10,000 bytes), array bytes zero-copy from the map when the source has one.
//!
//! Reading paths, chosen per array:
//! * stored, little-endian, C order (or a shape where both orders coincide): zero-copy
//!   ([`Access::Mapped`]) from a mapped source, one ranged read per call otherwise
//!   ([`Access::Random`]);
//! * stored, big-endian or Fortran order: gathered and swapped from the mapping at any
//!   element-aligned range ([`Access::Random`]); without a map, big-endian C order is one
//!   ranged read, Fortran order one pass of reads over the array, scattering like the
//!   deflated Fortran pass below;
//! * deflated, C order: one inflate cursor per array, advanced by consecutive `read_into` calls
//!   ([`Access::Sequential`]). A call that does not continue where the previous one stopped is
//!   still answered correctly: a later offset inflates and discards the gap, an earlier one
//!   restarts from the member start (slow: O(offset) per such call);
//! * deflated, Fortran order: every call is one independent pass over the whole member,
//!   scattering the elements that fall in the requested row-major range into the caller's
//!   buffer ([`Access::Random`], O(member) per call; memory stays bounded by the scratch size).

use std::path::Path;

use weightport_core::bytes::Extent;
use weightport_core::source::check_read;
use weightport_core::{Access, ByteSource, Error, Format, Location, Result, TensorInfo};

use crate::header::{self, HeaderError, HeaderErrorKind, NpyHeader};
use crate::layout::{c_to_fortran, fortran_to_c, to_little};
use weightport_core::archive::{InflateError, Inflater, Member, SeqCursor, Span};

/// Default size of the buffer used to skip or scatter inflated bytes.
pub const DEFAULT_SCRATCH: usize = 256 << 10;

/// Parses the npy header stored at `start` of `src`, where `avail` bytes of the array lie,
/// reading at most its preamble and then the header it declares (capped by the format at
/// 12 + 10,000 bytes). The outer error is a read failure, the inner one the header's.
pub(crate) fn read_header(
    src: &dyn ByteSource,
    start: u64,
    avail: u64,
    opts: &weightport_core::ReadOptions,
) -> Result<std::result::Result<NpyHeader, HeaderError>> {
    let pre = src.range(start, avail.min(header::PREAMBLE_LEN as u64))?;
    let need = match header::preamble(&pre) {
        Ok(p) => p.data_offset(),
        Err(e) => return Ok(Err(e)),
    };
    Ok(header::parse(&src.range(start, avail.min(need))?, opts))
}

/// Where an array's bytes are.
pub(crate) enum Body {
    /// In the file as-is, from absolute offset `data` on.
    Stored { data: u64 },
    /// In a deflated ZIP member.
    Deflated(Box<Deflated>),
}

pub(crate) struct Deflated {
    pub(crate) comp_start: u64,
    pub(crate) comp_len: u64,
    /// The member's declared uncompressed size (npy header + data).
    pub(crate) size: u64,
    pub(crate) crc: u32,
    /// The sequential cursor.
    pub(crate) cursor: SeqCursor,
}

/// One array.
pub(crate) struct Array {
    pub(crate) info: TensorInfo,
    pub(crate) header: NpyHeader,
    /// Index of the file holding it (always 0 in an `.npz`).
    pub(crate) file: usize,
    pub(crate) body: Body,
}

/// Where a header error was found, for converting it into an [`Error`].
pub(crate) enum Origin {
    /// The `.npy` starts at this absolute file offset.
    File(u64),
    /// The `.npy` is a deflated member whose compressed bytes start at this file offset.
    Member(u64),
}

pub(crate) fn header_error(
    e: HeaderError,
    path: &Path,
    tensor: Option<&str>,
    format: Format,
    origin: Origin,
    available: u64,
) -> Error {
    let (abs, suffix) = match origin {
        Origin::File(base) => (base.saturating_add(e.offset), String::new()),
        Origin::Member(comp) => (
            comp,
            format!(" (at byte {} of the inflated member)", e.offset),
        ),
    };
    let mut at = Location::file(path).at(abs);
    if let Some(t) = tensor {
        at = at.tensor(t);
    }
    match e.kind {
        HeaderErrorKind::Malformed(r) => Error::malformed(at, format, r + &suffix),
        HeaderErrorKind::Unsupported(w) => Error::unsupported(at, format, w + &suffix),
        HeaderErrorKind::Refused(r) => Error::Refused { at, reason: r },
        HeaderErrorKind::Limit {
            what,
            needed,
            limit,
        } => Error::Limit {
            at,
            what,
            needed,
            limit,
        },
        HeaderErrorKind::Truncated { needed } => Error::malformed(
            at,
            format,
            format!(
                "truncated npy header: it needs {needed} bytes but the array has only \
                 {available}{suffix}"
            ),
        ),
    }
}

/// Parses the header of a deflated member by inflating at most its first 12 + 10,000 bytes.
pub(crate) fn inflate_header(
    comp: Span<'_>,
    size: u64,
    opts: &weightport_core::ReadOptions,
) -> std::result::Result<NpyHeader, std::result::Result<HeaderError, InflateError>> {
    let mut z = Inflater::new();
    let n = size.min(header::PREAMBLE_LEN as u64) as usize;
    let mut buf = vec![0u8; n];
    z.fill(comp, &mut buf).map_err(Err)?;
    let pre = header::preamble(&buf).map_err(Ok)?;
    let need = pre.data_offset();
    if need > size {
        return Err(Ok(HeaderError {
            kind: HeaderErrorKind::Truncated { needed: need },
            offset: size,
        }));
    }
    // A version-1 preamble is 10 bytes: a header text of 0 or 1 bytes ends inside the 12
    // bytes already inflated.
    if need <= n as u64 {
        buf.truncate(need as usize);
    } else {
        buf.resize(need as usize, 0);
        z.fill(comp, &mut buf[n..]).map_err(Err)?;
    }
    header::parse(&buf, opts).map_err(Ok)
}

impl Array {
    /// Where the stored bytes are, when they are the logical bytes.
    fn identity(&self) -> Option<Extent> {
        match self.body {
            Body::Stored { data } if self.header.is_identity() => {
                Some(Extent::new(data, self.header.byte_len))
            }
            _ => None,
        }
    }

    /// The stored bytes, when they are the logical bytes and `src` is mapped.
    pub(crate) fn bytes<'a>(&self, src: &'a dyn ByteSource) -> Option<&'a [u8]> {
        // Bounds were checked at open.
        self.identity()?.bytes(src)
    }

    /// Asks the kernel to populate page tables for a range about to be read through `bytes`.
    pub(crate) fn will_need(&self, src: &dyn ByteSource, offset: u64, len: u64) {
        if let Some(x) = self.identity() {
            x.will_need(src, offset, len);
        }
    }

    /// Drops the resident pages of a consumed range, so resident memory stays bounded by the
    /// chunks in flight, not the file (as the safetensors reader does): for a stored array the
    /// range itself, for a deflated one the compressed bytes the inflater has consumed.
    pub(crate) fn release(&self, src: &dyn ByteSource, offset: u64, len: u64) {
        match &self.body {
            Body::Stored { .. } => {
                if let Some(x) = self.identity() {
                    x.release(src, offset, len);
                }
            }
            Body::Deflated(d) if !self.header.needs_transpose() => {
                // No cursor: not started or finished; either way the pages may go.
                let used = d.cursor.consumed().unwrap_or(d.comp_len);
                Extent::new(d.comp_start, used).release(src, 0, used);
            }
            _ => {}
        }
    }

    /// How the array is best read from a source that is `mapped` or not.
    pub(crate) fn access(&self, mapped: bool) -> Access {
        match &self.body {
            Body::Stored { .. } if self.header.is_identity() && mapped => Access::Mapped,
            Body::Stored { .. } => Access::Random,
            Body::Deflated(_) if self.header.needs_transpose() => Access::Random,
            Body::Deflated(_) => Access::Sequential,
        }
    }

    /// Fills `dst` with logical bytes from `offset` on.
    pub(crate) fn read_into(
        &self,
        src: &dyn ByteSource,
        path: &Path,
        format: Format,
        scratch: usize,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<()> {
        let h = &self.header;
        let start = match &self.body {
            Body::Stored { data, .. } => *data,
            Body::Deflated(d) => d.comp_start,
        };
        let loc = || {
            Location::file(path)
                .tensor(self.info.name.clone())
                .at(start)
        };
        let element = if h.is_identity() { 1 } else { h.item_size() };
        check_read(loc, format, h.byte_len, offset, dst.len(), element)?;
        match &self.body {
            Body::Stored { data: start } => self.read_stored(src, *start, scratch, offset, dst)?,
            Body::Deflated(d) => {
                let comp = Span::new(src, d.comp_start, d.comp_len);
                self.read_deflated(d, comp, scratch, offset, dst)
                    .map_err(|(e, at_out)| {
                        e.into_error(|e| {
                            Error::malformed(
                                loc(),
                                format,
                                format!(
                                    "deflated member: {e} (reading from byte {at_out} of the \
                                     inflated member)"
                                ),
                            )
                        })
                    })?;
            }
        }
        to_little(dst, h.order);
        Ok(())
    }

    /// Copies (or, for Fortran order, gathers) the stored array's bytes from `offset` on: out
    /// of the map, or by ranged reads.
    fn read_stored(
        &self,
        src: &dyn ByteSource,
        start: u64,
        scratch: usize,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<()> {
        let h = &self.header;
        let Some(map) = src.map() else {
            if !h.needs_transpose() {
                return src.read_at(start + offset, dst);
            }
            let mut pos = start;
            let mut next = |b: &mut [u8]| -> Result<()> {
                src.read_at(pos, b)?;
                pos += b.len() as u64;
                Ok(())
            };
            return scatter_fortran(h, scratch, offset, dst, &mut next).map(|_| ());
        };
        let data = &map[start as usize..(start + h.byte_len) as usize];
        if h.needs_transpose() {
            let isz = h.item_size() as usize;
            let mut w = c_to_fortran(&h.shape, offset / isz as u64);
            for out in dst.chunks_exact_mut(isz) {
                let s = w.off as usize * isz;
                out.copy_from_slice(&data[s..s + isz]);
                w.advance();
            }
        } else {
            dst.copy_from_slice(&data[offset as usize..offset as usize + dst.len()]);
        }
        Ok(())
    }

    /// Inflates the array's bytes from `offset` on: one pass scattering the requested range
    /// for Fortran order, the sequential cursor otherwise. An error comes with the inflated
    /// position it was found reading from.
    fn read_deflated(
        &self,
        d: &Deflated,
        comp: Span<'_>,
        scratch: usize,
        offset: u64,
        dst: &mut [u8],
    ) -> std::result::Result<(), (InflateError, u64)> {
        let h = &self.header;
        if h.needs_transpose() {
            return self
                .fortran_pass(d, comp, scratch, offset, dst)
                .map_err(|e| (e, h.data_offset));
        }
        let from = h.data_offset + offset;
        d.cursor.read(
            Member {
                comp,
                size: d.size,
                crc: Some(d.crc),
            },
            from,
            dst,
            scratch,
            d.size,
        )
    }

    /// One pass over a deflated Fortran-order member, keeping the elements whose row-major
    /// index falls in `[offset, offset + dst.len())` (in bytes).
    fn fortran_pass(
        &self,
        d: &Deflated,
        comp: Span<'_>,
        scratch: usize,
        offset: u64,
        dst: &mut [u8],
    ) -> std::result::Result<(), InflateError> {
        let h = &self.header;
        let mut z = Inflater::new();
        let mut skip = vec![0u8; scratch_len(h, scratch)];
        z.skip(comp, h.data_offset, &mut skip)?;
        drop(skip);
        let numel = h.byte_len / h.item_size();
        let f = scatter_fortran(h, scratch, offset, dst, &mut |b| z.fill(comp, b))?;
        if f == numel {
            z.finish(comp, d.size, Some(d.crc))?;
        }
        Ok(())
    }
}

/// The chunk buffer of a Fortran pass: whole elements, at most `scratch` bytes (at least one
/// element), at most the array.
fn scratch_len(h: &NpyHeader, scratch: usize) -> usize {
    let isz = h.item_size() as usize;
    let numel = h.byte_len / isz as u64;
    let chunk_elems = (scratch / isz).max(1) as u64;
    (chunk_elems.min(numel.max(1)) as usize) * isz
}

/// Reads the elements of a Fortran-order array front to back through `next` (in chunks of at
/// most `scratch` bytes), keeping those whose row-major index falls in
/// `[offset, offset + dst.len())` (in bytes); stops once they are all found and returns how
/// many elements it read.
fn scatter_fortran<E>(
    h: &NpyHeader,
    scratch: usize,
    offset: u64,
    dst: &mut [u8],
    next: &mut dyn FnMut(&mut [u8]) -> std::result::Result<(), E>,
) -> std::result::Result<u64, E> {
    let isz = h.item_size() as usize;
    let numel = h.byte_len / isz as u64;
    let e0 = offset / isz as u64;
    let e1 = e0 + (dst.len() / isz) as u64;
    let chunk_elems = (scratch / isz).max(1) as u64;
    let mut buf = vec![0u8; scratch_len(h, scratch)];
    let mut w = fortran_to_c(&h.shape);
    let mut missing = e1 - e0;
    let mut f = 0u64;
    while f < numel && missing > 0 {
        let k = chunk_elems.min(numel - f) as usize;
        next(&mut buf[..k * isz])?;
        for elem in buf[..k * isz].chunks_exact(isz) {
            let c = w.off;
            if (e0..e1).contains(&c) {
                let o = (c - e0) as usize * isz;
                dst[o..o + isz].copy_from_slice(elem);
                missing -= 1;
            }
            w.advance();
        }
        f += k as u64;
    }
    Ok(f)
}
