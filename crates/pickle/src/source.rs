//! [`Checkpoint`]: the `TensorSource` both PyTorch containers produce.
//!
//! A tensor is a view (offset, sizes, strides in elements) of a storage record. Contiguous
//! little-endian views of stored (uncompressed) records are handed out zero-copy from the
//! map when the input's [`ByteSource`] has one; everything else (strided views, stride 0,
//! big-endian records, conj/neg views, deflated records, and every view of an unmapped
//! source) is gathered into row-major order by [`TensorSource::read_into`], in chunks bounded
//! by the caller's buffer: from the map, or by ranged reads (one per contiguous run of a view).
//! Deflated records are streamed front to back ([`Access::Sequential`]) when the view is
//! contiguous, and inflated once (bounded) otherwise.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use weightport_core::archive::{self, InflateError, Member, SeqCursor, Span};
use weightport_core::bytes::Extent;
use weightport_core::source::check_read;
use weightport_core::{
    Access, ByteSource, Error, Format, Location, MetaValue, Metadata, ReadOptions, Result,
    TensorInfo, TensorSource,
};

use crate::select::Selected;
use crate::torch::{StorageRef, TensorDesc};
use crate::vm::{VmError, VmErrorKind};

/// Where a storage's bytes are.
#[derive(Debug, Clone)]
pub(crate) enum RecordData {
    /// Uncompressed at this absolute file offset.
    Stored {
        /// Offset.
        start: u64,
    },
    /// Deflated at this offset, `csize` compressed bytes.
    Deflated {
        /// Offset.
        start: u64,
        /// Compressed size.
        csize: u64,
        /// The central directory's CRC-32 (`None`: 0, torch's "not computed").
        crc: Option<u32>,
    },
}

/// One storage record.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    /// Name for messages (`archive/data/3`).
    pub name: String,
    /// Where.
    pub data: RecordData,
    /// Uncompressed length.
    pub len: u64,
}

struct Entry {
    desc: TensorDesc,
    record: usize,
    itemsize: u64,
    contiguous: bool,
    /// Byteswap width (0 or 1: none).
    swap: usize,
    /// Byte positions within an element whose top bit is flipped (neg/conj).
    flips: Vec<usize>,
}

/// What the checkpoint held besides the converted tensors.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct CheckpointReport {
    /// Key path of the converted dict (empty: top level).
    pub selected: Vec<String>,
    /// Non-tensor entries, never converted (dotted path → inert value).
    pub entries: Vec<(String, MetaValue)>,
    /// Names dropped as exact aliases of another (dropped, kept).
    pub aliases: Vec<(String, String)>,
    /// Tensors and numpy arrays outside the converted dict (dotted path, what and why).
    pub dropped: Vec<(String, String)>,
    /// Pickle protocol.
    pub protocol: u8,
}

/// A validated PyTorch checkpoint (ZIP or legacy).
pub struct Checkpoint {
    path: PathBuf,
    format: Format,
    src: Arc<dyn ByteSource>,
    records: Vec<Record>,
    entries: Vec<Entry>,
    infos: Vec<TensorInfo>,
    metadata: Metadata,
    report: CheckpointReport,
    /// Per tensor, the inflate cursor of a sequential read.
    seq: Vec<SeqCursor>,
    inflated: Vec<OnceLock<std::result::Result<Vec<u8>, String>>>,
    /// [`weightport_core::Limits::max_inflate_bytes`].
    max_inflate: u64,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("path", &self.path)
            .field("format", &self.format)
            .field("tensors", &self.infos.len())
            .finish()
    }
}

/// Output heads transformers ties to an input embedding: the names its `_tied_weights_keys`
/// drop when saving (transformers 5.24: `lm_head.weight` in 266 models, then these), matched as
/// the whole name or its dotted suffix.
const TIED_HEADS: &[&str] = &[
    "lm_head.weight",
    "lm_head.decoder.weight",
    "cls.predictions.decoder.weight",
    "head.decoder.weight",
    "mlm_score.decoder.weight",
    "embed_out.weight",
    "proj_out.weight",
    "output_projection.weight",
    "generator_lm_head.weight",
    "lm_loss.weight",
    "vocab_projector.weight",
    "pred_layer.proj.weight",
    "decoder.embed_tokens.weight",
    "encoder.embed_tokens.weight",
];

fn is_tied_head(name: &str) -> bool {
    TIED_HEADS.iter().any(|h| {
        name.strip_suffix(h)
            .is_some_and(|pre| pre.is_empty() || pre.ends_with('.'))
    })
}

/// The name kept of an exact alias group, as safetensors' convert.py does with the discard
/// names transformers gives it: `sorted(names - tied heads)[0]`, else `sorted(names)[0]`. So a
/// tied model keeps `model.embed_tokens.weight` and drops `lm_head.weight`, as transformers'
/// `save_pretrained` does.
fn keep_of(group: &[usize], tensors: &[(String, TensorDesc)]) -> usize {
    let name = |i: &usize| tensors[*i].0.as_str();
    let pick = |heads: bool| {
        group
            .iter()
            .filter(|i| heads || !is_tied_head(name(i)))
            .min_by_key(|i| name(i))
            .copied()
    };
    pick(false).or_else(|| pick(true)).expect("non-empty")
}

/// [`select`] on a parsed checkpoint of `path`, with `opts`' key, errors placed in the file,
/// and the foreign classes an inert parse kept listed among what is not converted.
pub(crate) fn select_for(
    path: &Path,
    format: Format,
    parsed: &crate::vm::Parsed,
    opts: &ReadOptions,
    limits: &crate::vm::VmLimits,
) -> Result<Selected> {
    let mut sel = crate::select::select(
        &parsed.arena,
        parsed.root,
        opts.key.as_deref(),
        crate::select::lone_name(path).as_deref(),
        limits,
    )
    .map_err(|k| kind_error(Location::file(path), format, k))?;
    sel.dropped.extend(inert_objects(&parsed.findings));
    Ok(sel)
}

/// What an inert-mode parse kept instead of refusing (`--allow-inert-objects`), as entries of
/// [`CheckpointReport::dropped`]: one per foreign class (`global`/`INST` findings; the calls
/// and instantiations that follow them are the same objects), with its first offset in the
/// pickle and how often it is named.
pub(crate) fn inert_objects(findings: &[crate::vm::Finding]) -> Vec<(String, String)> {
    let mut classes: Vec<(String, u64, usize)> = Vec::new();
    for f in findings {
        let named = ["global `", "INST `"]
            .iter()
            .find_map(|p| f.what.strip_prefix(p))
            .and_then(|rest| rest.split('`').next());
        let Some(class) = named else { continue };
        match classes.iter_mut().find(|c| c.0 == class) {
            Some(c) => c.2 += 1,
            None => classes.push((class.to_string(), f.offset, 1)),
        }
    }
    classes
        .into_iter()
        .map(|(class, offset, n)| {
            (
                format!("<pickle byte {offset}>"),
                format!(
                    "`{class}`{}, a class off the allowlist: its objects are kept as inert \
                     records, never called",
                    if n > 1 {
                        format!(" (named {n} times)")
                    } else {
                        String::new()
                    }
                ),
            )
        })
        .collect()
}

/// Converts a VM error to the public error, at `base + offset` in `path`.
pub(crate) fn vm_error(path: &Path, format: Format, base: u64, e: VmError) -> Error {
    let at = Location::file(path).at(base.saturating_add(e.offset));
    kind_error(at, format, e.kind)
}

pub(crate) fn kind_error(at: Location, format: Format, kind: VmErrorKind) -> Error {
    match kind {
        VmErrorKind::Refused(reason) => Error::Refused { at, reason },
        VmErrorKind::Limit {
            what,
            needed,
            limit,
        } => Error::Limit {
            at,
            what,
            needed,
            limit,
        },
        VmErrorKind::Malformed(reason) => Error::malformed(at, format, reason),
        VmErrorKind::Unsupported(what) => Error::unsupported(at, format, what),
    }
}

/// Inflates a whole deflated record of `src`: exactly `len` bytes, with its CRC-32 when
/// recorded; the inner error says why the record is malformed, the outer one is the source's
/// read error.
pub(crate) fn inflate(
    src: &dyn ByteSource,
    start: u64,
    csize: u64,
    len: u64,
    crc: Option<u32>,
) -> Result<std::result::Result<Vec<u8>, String>> {
    if start.checked_add(csize).is_none_or(|end| end > src.len()) {
        return Ok(Err("record lies past the end of the file".into()));
    }
    match archive::inflate_all(Span::new(src, start, csize), len, crc) {
        Ok(v) => Ok(Ok(v)),
        Err(InflateError::Read(e)) => Err(*e),
        Err(e) => Ok(Err(format!("deflated record: {e}"))),
    }
}

/// Why a gather stopped: the view reaches past its record, or the source could not be read.
enum Gather {
    Outside,
    Read(Error),
}

/// Fills a buffer with a record's bytes from a byte position in it.
type ReadRecord<'a> = dyn FnMut(u64, &mut [u8]) -> std::result::Result<(), Gather> + 'a;

impl Checkpoint {
    /// Builds the source. `records` maps storage keys to their records; every storage the
    /// pickle declares must have one of exactly its size.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn build(
        path: &Path,
        format: Format,
        src: Arc<dyn ByteSource>,
        keyed: HashMap<String, Record>,
        storages: &[StorageRef],
        sel: Selected,
        big_endian: bool,
        protocol: u8,
        opts: &ReadOptions,
    ) -> Result<Self> {
        let loc = || Location::file(path);
        let (records, index) = records_of(path, format, &keyed, storages)?;
        if sel.tensors.len() as u64 > opts.limits.max_tensors {
            return Err(Error::Limit {
                at: loc(),
                what: "tensor count",
                needed: sel.tensors.len() as u64,
                limit: opts.limits.max_tensors,
            });
        }
        let (drop, aliases) = aliases_of(&sel.tensors, opts.shared_copy);
        let mut entries = Vec::new();
        let mut infos = Vec::new();
        for (i, (name, d)) in sel.tensors.into_iter().enumerate() {
            if drop[i] {
                continue;
            }
            let record = index[&d.storage.key];
            let (info, entry) = entry_of(path, format, name, d, record, big_endian, opts)?;
            infos.push(info);
            entries.push(entry);
        }
        let mut metadata = Metadata::new();
        for (dropped, kept) in &aliases {
            metadata.insert(dropped.clone(), MetaValue::Str(kept.clone()));
        }
        let inflated = (0..records.len()).map(|_| OnceLock::new()).collect();
        let seq = infos.iter().map(|_| SeqCursor::default()).collect();
        Ok(Checkpoint {
            path: path.to_path_buf(),
            format,
            src,
            records,
            entries,
            infos,
            metadata,
            report: CheckpointReport {
                selected: sel.path,
                entries: sel.entries,
                aliases,
                dropped: sel.dropped,
                protocol,
            },
            seq,
            inflated,
            max_inflate: opts.limits.max_inflate_bytes,
        })
    }

    /// Non-tensor entries, aliases and the selected key path.
    pub fn report(&self) -> &CheckpointReport {
        &self.report
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where messages about tensor `index` point: its file, its name, `offset`.
    fn at(&self, index: usize, offset: u64) -> Location {
        Location::file(&self.path)
            .tensor(self.infos[index].name.clone())
            .at(offset)
    }

    fn err(&self, index: usize, offset: u64, reason: impl Into<String>) -> Error {
        Error::malformed(self.at(index, offset), self.format, reason)
    }

    fn plain(&self, e: &Entry) -> bool {
        e.contiguous && e.swap <= 1 && e.flips.is_empty()
    }

    fn fix(&self, e: &Entry, dst: &mut [u8]) {
        if e.swap > 1 {
            for c in dst.chunks_exact_mut(e.swap) {
                c.reverse();
            }
        }
        if !e.flips.is_empty() {
            for c in dst.chunks_exact_mut(e.itemsize as usize) {
                for &b in &e.flips {
                    c[b] ^= 0x80;
                }
            }
        }
    }

    fn read_sequential(&self, index: usize, e: &Entry, offset: u64, dst: &mut [u8]) -> Result<()> {
        let rec = &self.records[e.record];
        let RecordData::Deflated { start, csize, crc } = rec.data else {
            unreachable!("sequential reads are for deflated records")
        };
        let comp = Span::new(&*self.src, start, csize);
        let first = e.desc.offset * e.itemsize;
        let end = first + self.infos[index].byte_len;
        self.seq[index]
            .read(
                Member {
                    comp,
                    size: rec.len,
                    crc,
                },
                first + offset,
                dst,
                256 << 10,
                end,
            )
            .map_err(|(z, _)| {
                z.into_error(|z| self.err(index, start, format!("deflated record: {z}")))
            })?;
        self.fix(e, dst);
        Ok(())
    }

    /// Where tensor `index`'s bytes lie in the file when they are its logical bytes.
    fn extent(&self, index: usize) -> Option<Extent> {
        let e = &self.entries[index];
        if !self.plain(e) {
            return None;
        }
        let RecordData::Stored { start } = self.records[e.record].data else {
            return None;
        };
        Some(Extent::new(
            start + e.desc.offset * e.itemsize,
            self.infos[index].byte_len,
        ))
    }

    /// The record of tensor `index` in memory: its bytes in the map, or the record inflated
    /// once; `None` for a stored record of an unmapped source (read by ranges instead).
    fn record_bytes(&self, index: usize, e: &Entry) -> Result<Option<&[u8]>> {
        let rec = &self.records[e.record];
        match rec.data {
            RecordData::Stored { start } => {
                let Some(map) = self.src.map() else {
                    return Ok(None);
                };
                map.get(start as usize..(start + rec.len) as usize)
                    .map(Some)
                    .ok_or_else(|| self.err(index, start, "record lies past the end of the file"))
            }
            RecordData::Deflated { start, csize, crc } => {
                if rec.len > self.max_inflate {
                    return Err(Error::Unsupported {
                        at: Location::file(&self.path).tensor(self.infos[index].name.clone()),
                        format: Some(self.format),
                        what: format!(
                            "a strided view of a deflated record over {} bytes; re-save the checkpoint uncompressed",
                            self.max_inflate
                        ),
                    });
                }
                let slot = &self.inflated[e.record];
                if slot.get().is_none() {
                    // A read error is not kept: it is the source's, not the record's.
                    let r = inflate(&*self.src, start, csize, rec.len, crc)?;
                    let _ = slot.set(r);
                }
                let r = slot.get().expect("set above");
                r.as_deref()
                    .map(Some)
                    .map_err(|m| self.err(index, start, m.clone()))
            }
        }
    }

    /// Gathers elements `first..` of tensor `index`'s view into `dst`: from the record in
    /// memory, or by ranged reads of a stored record of an unmapped source.
    fn gather_into(&self, index: usize, e: &Entry, first: u64, dst: &mut [u8]) -> Result<()> {
        let stop = |g: Gather| match g {
            Gather::Outside => self.err(index, first * e.itemsize, "view reaches past its record"),
            Gather::Read(err) => err,
        };
        match self.record_bytes(index, e)? {
            Some(rec) => {
                let mut from_memory = |pos: u64, out: &mut [u8]| {
                    let at = usize::try_from(pos).map_err(|_| Gather::Outside)?;
                    let end = at.checked_add(out.len()).ok_or(Gather::Outside)?;
                    let chunk = rec.get(at..end).ok_or(Gather::Outside)?;
                    out.copy_from_slice(chunk);
                    Ok(())
                };
                gather(&mut from_memory, &e.desc, e.itemsize, first, dst).map_err(stop)
            }
            None => {
                let rec = &self.records[e.record];
                let RecordData::Stored { start } = rec.data else {
                    unreachable!("only stored records are read by ranges")
                };
                let mut by_ranges = |pos: u64, out: &mut [u8]| {
                    if pos
                        .checked_add(out.len() as u64)
                        .is_none_or(|end| end > rec.len)
                    {
                        return Err(Gather::Outside);
                    }
                    self.src.read_at(start + pos, out).map_err(Gather::Read)
                };
                gather(&mut by_ranges, &e.desc, e.itemsize, first, dst).map_err(stop)
            }
        }
    }
}

/// Copies elements `first..first + dst.len()/s` of the view, in row-major order; `read`
/// fills a buffer with the record's bytes at a byte position.
fn gather(
    read: &mut ReadRecord<'_>,
    d: &TensorDesc,
    s: u64,
    first: u64,
    dst: &mut [u8],
) -> std::result::Result<(), Gather> {
    let n = dst.len() as u64 / s;
    if n == 0 {
        return Ok(());
    }
    let mut copy =
        |pos: u64, count: u64, out: u64, dst: &mut [u8]| -> std::result::Result<(), Gather> {
            let a = pos.checked_mul(s).ok_or(Gather::Outside)?;
            let len = count.checked_mul(s).ok_or(Gather::Outside)?;
            let o = (out * s) as usize;
            let to = dst.get_mut(o..o + len as usize).ok_or(Gather::Outside)?;
            read(a, to)
        };
    let nd = d.shape.len();
    if nd == 0 {
        return copy(d.offset, 1, 0, dst);
    }
    let mut idx = vec![0u64; nd];
    let mut rem = first;
    for k in (0..nd).rev() {
        idx[k] = rem % d.shape[k];
        rem /= d.shape[k];
    }
    let mut pos = d.offset + idx.iter().zip(&d.stride).map(|(i, st)| i * st).sum::<u64>();
    let inner = nd - 1;
    let (dim, st) = (d.shape[inner], d.stride[inner]);
    let mut out = 0u64;
    while out < n {
        let run = (dim - idx[inner]).min(n - out);
        if st == 1 {
            copy(pos, run, out, dst)?;
        } else {
            for k in 0..run {
                copy(pos + k * st, 1, out + k, dst)?;
            }
        }
        out += run;
        idx[inner] += run;
        pos += run * st;
        let mut k = inner;
        while k > 0 && idx[k] == d.shape[k] {
            pos -= d.shape[k] * d.stride[k];
            idx[k] = 0;
            k -= 1;
            idx[k] += 1;
            pos += d.stride[k];
        }
    }
    Ok(())
}

impl TensorSource for Checkpoint {
    fn format(&self) -> Format {
        self.format
    }

    fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn tensors(&self) -> &[TensorInfo] {
        &self.infos
    }

    fn files(&self) -> Vec<PathBuf> {
        vec![self.path.clone()]
    }

    fn file_of(&self, _index: usize) -> PathBuf {
        self.path.clone()
    }

    fn unconverted(&self) -> Vec<(String, String)> {
        self.report.dropped.clone()
    }

    fn bytes(&self, index: usize) -> Option<&[u8]> {
        self.extent(index)?.bytes(&*self.src)
    }

    fn access(&self, index: usize) -> Access {
        let e = &self.entries[index];
        match self.records[e.record].data {
            RecordData::Stored { .. } if self.plain(e) && self.src.map().is_some() => {
                Access::Mapped
            }
            RecordData::Deflated { .. } if e.contiguous => Access::Sequential,
            _ => Access::Random,
        }
    }

    fn read_into(&self, index: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        let e = &self.entries[index];
        let at = || self.at(index, offset);
        let total = self.infos[index].byte_len;
        check_read(at, self.format, total, offset, dst.len(), e.itemsize)?;
        if dst.is_empty() {
            return Ok(());
        }
        if let (RecordData::Deflated { .. }, true) = (&self.records[e.record].data, e.contiguous) {
            return self.read_sequential(index, e, offset, dst);
        }
        self.gather_into(index, e, offset / e.itemsize, dst)?;
        self.fix(e, dst);
        Ok(())
    }

    fn release(&self, index: usize, offset: u64, len: u64) {
        if let Some(x) = self.extent(index) {
            x.release(&*self.src, offset, len);
        }
    }

    fn will_need(&self, index: usize, offset: u64, len: u64) {
        if let Some(x) = self.extent(index) {
            x.will_need(&*self.src, offset, len);
        }
    }
}

/// One selected tensor's description and how to read it: its dtype must have a weightport
/// equivalent, its rank stay within the limit and its byte size be representable.
fn entry_of(
    path: &Path,
    format: Format,
    name: String,
    d: TensorDesc,
    record: usize,
    big_endian: bool,
    opts: &ReadOptions,
) -> Result<(TensorInfo, Entry)> {
    let tl = || Location::file(path).tensor(name.clone());
    let Some(dtype) = d.dtype.core else {
        return Err(Error::Unsupported {
            at: tl(),
            format: Some(format),
            what: format!(
                "dtype {} has no weightport equivalent (weightport has no {} type)",
                d.dtype.name, d.dtype.name
            ),
        });
    };
    if d.shape.len() > opts.limits.max_rank {
        return Err(Error::Limit {
            at: tl(),
            what: "tensor rank",
            needed: d.shape.len() as u64,
            limit: opts.limits.max_rank as u64,
        });
    }
    let flips = flips_of(&d, format, tl())?;
    let byte_len = dtype.byte_len(&d.shape).map_err(|e| Error::Refused {
        at: tl(),
        reason: e.to_string(),
    })?;
    let info = TensorInfo {
        name,
        dtype,
        shape: d.shape.clone(),
        byte_len,
    };
    let entry = Entry {
        itemsize: u64::from(d.dtype.itemsize),
        contiguous: d.is_contiguous(),
        swap: if big_endian { d.dtype.swap as usize } else { 0 },
        flips,
        record,
        desc: d,
    };
    Ok((info, entry))
}

/// Each storage's record, which must hold exactly the storage's bytes, and the index of each
/// storage key's record.
fn records_of(
    path: &Path,
    format: Format,
    keyed: &HashMap<String, Record>,
    storages: &[StorageRef],
) -> Result<(Vec<Record>, HashMap<String, usize>)> {
    let loc = || Location::file(path);
    let mut records = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for s in storages {
        let rec = keyed.get(&s.key).ok_or_else(|| {
            Error::malformed(
                loc(),
                format,
                format!("storage `{}` has no data record", s.key),
            )
        })?;
        let want = s.root_bytes().ok_or_else(|| Error::Refused {
            at: loc(),
            reason: format!("storage `{}` byte size overflows", s.key),
        })?;
        if rec.len != want {
            return Err(Error::Refused {
                at: loc(),
                reason: format!(
                    "storage `{}` declares {} bytes ({} elements) but its record `{}` holds {}",
                    s.key,
                    want,
                    s.numel,
                    weightport_core::sanitize(&rec.name),
                    rec.len
                ),
            });
        }
        index.insert(s.key.clone(), records.len());
        records.push(rec.clone());
    }
    Ok((records, index))
}

/// Exact aliases (same storage, offset, shape, stride, dtype and conj/neg bits): which tensors
/// are dropped, and (dropped, kept) pairs. With `shared_copy` every name is kept.
fn aliases_of(
    tensors: &[(String, TensorDesc)],
    shared_copy: bool,
) -> (Vec<bool>, Vec<(String, String)>) {
    // Exact aliases: same storage, offset, shape, stride, dtype and conj/neg bits.
    let mut groups: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, (_, d)) in tensors.iter().enumerate() {
        let k = format!(
            "{}|{}|{:?}|{:?}|{}|{}|{}",
            d.storage.key, d.offset, d.shape, d.stride, d.dtype.name, d.conj, d.neg
        );
        groups.entry(k).or_default().push(i);
    }
    let mut drop = vec![false; tensors.len()];
    let mut aliases = Vec::new();
    if !shared_copy {
        let mut gs: Vec<&Vec<usize>> = groups.values().filter(|g| g.len() > 1).collect();
        gs.sort();
        for g in gs {
            let keep = keep_of(g, tensors);
            for &i in g {
                if i != keep {
                    drop[i] = true;
                    aliases.push((tensors[i].0.clone(), tensors[keep].0.clone()));
                }
            }
        }
    }
    (drop, aliases)
}

/// The sign bytes a negated or conjugated view flips on read (per element).
fn flips_of(d: &TensorDesc, format: Format, at: Location) -> Result<Vec<usize>> {
    let tl = || at.clone();
    let mut flips = Vec::new();
    let is_complex = d.dtype.itemsize == 2 * d.dtype.swap;
    if d.neg || (d.conj && is_complex) {
        let sign_byte = |w: usize| w - 1;
        match d.dtype.name {
            "float16" | "bfloat16" | "float32" | "float64" => {
                if d.neg {
                    flips.push(sign_byte(d.dtype.itemsize as usize));
                }
            }
            "complex64" => {
                if d.neg {
                    flips.push(3);
                }
                if d.neg != d.conj {
                    flips.push(7);
                }
            }
            other => {
                return Err(Error::Unsupported {
                    at: tl(),
                    format: Some(format),
                    what: format!("a negated/conjugated view of {other}; call resolve_neg()/resolve_conj() before saving"),
                })
            }
        }
    }
    Ok(flips)
}

#[cfg(test)]
mod tests {
    use super::is_tied_head;

    #[test]
    fn tied_heads_match_whole_dotted_suffixes() {
        assert!(is_tied_head("lm_head.weight"));
        assert!(is_tied_head("model.lm_head.weight"));
        assert!(is_tied_head("cls.predictions.decoder.weight"));
        assert!(!is_tied_head("xlm_head.weight"));
        assert!(!is_tied_head("model.embed_tokens.weight"));
    }
}
