//! The parallel executor: output tensors cut into chunks, computed on a rayon pool.
//!
//! A chunk is one leaf of the output tensor's content hash: [`hash::leaf_bytes`] of its dtype,
//! a multiple of the dtype's granule (a whole quant block, a whole group of sub-byte values), so
//! hashes do not depend on thread count or scheduling and output written at planned offsets is
//! byte-identical at 1 and N threads. Per chunk:
//! * identity from a mapped source: the mapped slice is hashed and copied into the output by
//!   the kernel (`copy_file_range` from the input file, [`ToSink`]), or where the kernel
//!   refuses, written with `pwrite`; then released (zero-copy);
//! * identity from any other source: `read_into` a per-thread buffer;
//! * a transform: the input ranges it needs (zero-copy when mapped, else read into a per-thread
//!   staging buffer), `apply` into a per-thread output buffer, hashed, written;
//! * a concatenating transform (a stack, a q/k row permutation) over mapped inputs: each input
//!   slice of 1 MiB or more hashed and written where it lands, like an identity; shorter ones
//!   (a permutation's rows) gathered into the output buffer and written together.
//!
//! Whatever the path, bytes are hashed and written in pieces of [`PIECE`] (2 MiB; less only at
//! the end of a chunk), and the page hints (`MADV_POPULATE_READ` before, `MADV_DONTNEED` after)
//! cover each input span of a chunk once, however many pieces it was read in: the I/O counts
//! `--json` reports (`io`) stay at about one write per 2 MiB on every path.
//!
//! Tensors whose source is only sequential (a deflated ZIP member) are read once, front to
//! back, by one worker; parallelism comes from other tensors. Memory is therefore about
//! `threads × (chunk + input staging)`, which [`worker_bytes`] computes for the budget.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;
use weightport_core::hash::{self, LeafHasher};
use weightport_core::kernel_copy::{self, Origin};
use weightport_core::{Access, ContentHash, Error, Result, TensorSink, TensorSource};

use crate::by_options::TensorRecipe;
use crate::transform::Transform;

/// Bytes hashed and then written per call: a piece is still in cache when the kernel copies it
/// into the page cache. Measured on the 2.4 GiB bench release (safetensors → GGUF, paired runs):
/// 1 and 2 MiB 0.90–0.95× the CPU time of 256 KiB pieces, 8 MiB 1.26× (hashed out of cache).
const PIECE: usize = 2 << 20;

/// Input pieces at least this long are written straight from the map; shorter ones are
/// gathered into one buffer and written together.
const DIRECT: usize = 1 << 20;

/// Progress events (the library never prints; the CLI draws them).
pub trait Progress: Send + Sync {
    /// A phase starts with this many bytes to process.
    fn start(&self, _phase: &str, _total: u64) {}
    /// `bytes` more were processed.
    fn advance(&self, _bytes: u64) {}
    /// The phase ended.
    fn finish(&self) {}
}

/// Where the executor puts a chunk's bytes. Every `Fn(tensor, offset, bytes)` closure is one
/// (it writes); [`ToSink`] also copies identity ranges of mapped inputs in the kernel.
pub(crate) trait Emit: Sync {
    /// Puts `bytes` at `offset` of output tensor `k`.
    fn bytes(&self, k: usize, offset: u64, bytes: &[u8]) -> Result<()>;
    /// Whether [`Emit::copy`] can copy at all (so no origin is looked up for nothing).
    fn copies(&self) -> bool {
        false
    }
    /// Copies `len` bytes of the input file `from` to `offset` of output tensor `k` in the
    /// kernel; returns the bytes copied (fewer: the rest is the caller's to write).
    fn copy(&self, _k: usize, _offset: u64, _from: &Origin, _len: u64) -> Result<u64> {
        Ok(0)
    }
}

impl<F: Fn(usize, u64, &[u8]) -> Result<()> + Sync> Emit for F {
    fn bytes(&self, k: usize, offset: u64, bytes: &[u8]) -> Result<()> {
        self(k, offset, bytes)
    }
}

/// Emits nothing: a run that only hashes (verification, lineage).
pub(crate) struct HashOnly;

impl Emit for HashOnly {
    fn bytes(&self, _: usize, _: u64, _: &[u8]) -> Result<()> {
        Ok(())
    }
}

/// Emits into a sink: [`TensorSink::write_at`], and [`TensorSink::copy_from`] for copies.
pub(crate) struct ToSink<'a>(pub &'a dyn TensorSink);

impl Emit for ToSink<'_> {
    fn bytes(&self, k: usize, offset: u64, bytes: &[u8]) -> Result<()> {
        self.0.write_at(k, offset, bytes)
    }
    fn copies(&self) -> bool {
        kernel_copy::enabled()
    }
    fn copy(&self, k: usize, offset: u64, from: &Origin, len: u64) -> Result<u64> {
        self.0.copy_from(k, offset, from, len)
    }
}

/// A progress sink that ignores everything.
pub struct NoProgress;
impl Progress for NoProgress {}

/// The hashes a run produced.
#[derive(Debug, Clone)]
pub(crate) struct Hashes {
    /// Per output tensor: the content hash of the bytes written.
    pub out: Vec<ContentHash>,
    /// Per output tensor with a lossless transform: the hash of the input bytes, cut into
    /// leaves matching the output's (for verification through the inverse transform).
    pub src: Vec<Option<ContentHash>>,
}

/// Per-thread buffers.
#[derive(Default)]
pub(crate) struct Buffers {
    out: Vec<u8>,
    inputs: Vec<Vec<u8>>,
}

/// Bytes of input tensor data taken from a source (mapped slices handed to a chunk, or
/// `read_into` fills), per tensor of the opened input: what proves a shared read reads once.
/// Tensors generated in memory (index past the input's) are not counted.
pub(crate) struct Reads(Vec<AtomicU64>);

impl Reads {
    /// A counter for an input of `tensors` tensors.
    pub(crate) fn new(tensors: usize) -> Reads {
        Reads((0..tensors).map(|_| AtomicU64::new(0)).collect())
    }

    /// Counts `n` bytes of tensor `i`.
    pub(crate) fn add(&self, i: usize, n: u64) {
        if let Some(c) = self.0.get(i) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Bytes taken in all.
    pub(crate) fn total(&self) -> u64 {
        self.0.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Bytes taken per input file of `source` (the opened input), in the source's file order.
    pub(crate) fn by_file(&self, source: &dyn TensorSource) -> Vec<(PathBuf, u64)> {
        let mut v: Vec<(PathBuf, u64)> = source.files().into_iter().map(|f| (f, 0)).collect();
        for (i, c) in self.0.iter().enumerate() {
            let f = source.file_of(i);
            let n = c.load(Ordering::Relaxed);
            match v.iter_mut().find(|(p, _)| *p == f) {
                Some(e) => e.1 += n,
                None => v.push((f, n)),
            }
        }
        v
    }
}

/// What every chunk of one executor run shares.
pub(crate) struct Ctx<'a> {
    pub source: &'a dyn TensorSource,
    pub base: u64,
    pub progress: &'a dyn Progress,
    pub reads: &'a Reads,
    /// Every input range of the chunk in this input tensor lies in a window the scheduler
    /// made resident, counts and releases ([`crate::one_read`]): the chunk neither counts
    /// nor releases them.
    pub windowed: Option<usize>,
}

impl Ctx<'_> {
    /// Counts `n` bytes of input tensor `i` taken by a chunk.
    fn take(&self, i: usize, n: u64) {
        if self.windowed != Some(i) {
            self.reads.add(i, n);
        }
    }

    /// Releases a range of input tensor `i` once a chunk used it.
    fn release(&self, i: usize, start: u64, n: u64) {
        if self.windowed != Some(i) {
            self.source.release(i, start, n);
        }
    }
}

/// The leaf (chunk) size of an output tensor.
pub(crate) fn leaf_of(o: &TensorRecipe, base: u64) -> u64 {
    hash::leaf_bytes(o.info.dtype, base)
}

/// Bytes one worker holds at most for `outs` (output chunk + input staging or mapped chunk).
pub(crate) fn worker_bytes(source: &dyn TensorSource, outs: &[TensorRecipe], base: u64) -> u64 {
    outs.iter()
        .map(|o| {
            let leaf = leaf_of(o, base).min(o.info.byte_len.max(1));
            let input: u64 = match &o.op {
                None => leaf,
                Some(op) => input_bytes(source, o, &op.needs(0..leaf)),
            };
            let seq = o
                .inputs
                .iter()
                .any(|&i| source.access(i) == Access::Sequential);
            leaf + input + if seq { 1 << 20 } else { 0 }
        })
        .max()
        .unwrap_or(0)
}

/// The input bytes one chunk holds for `needs`: a range read into a buffer counts each time it
/// is named ([`transformed`] stages each), a mapped or in-memory one once however many ranges
/// overlap it (a merge's `A`, named once per row when a permutation follows the merge).
fn input_bytes(source: &dyn TensorSource, o: &TensorRecipe, needs: &[(usize, Range<u64>)]) -> u64 {
    let len = |r: &Range<u64>| r.end - r.start;
    let in_place = |j: usize| source.bytes(o.inputs[j]).is_some();
    let staged: u64 = (needs.iter())
        .filter(|(j, _)| !in_place(*j))
        .map(|(_, r)| len(r))
        .sum();
    let held: u64 = (spans(needs).iter())
        .filter(|(j, _)| in_place(*j))
        .map(|(_, r)| len(r))
        .sum();
    staged + held
}

/// Runs `outs` over `source`, calling `emit(k, offset, bytes)` for every chunk of output tensor
/// `k`, with chunks of `base`-sized leaves. Runs on the current rayon pool.
pub(crate) fn run<F>(
    source: &dyn TensorSource,
    outs: &[TensorRecipe],
    base: u64,
    progress: &dyn Progress,
    emit: F,
) -> Result<Hashes>
where
    F: Emit,
{
    let reads = Reads::new(source.tensors().len());
    run_counted(source, outs, base, &reads, progress, emit)
}

/// [`run`], counting the input bytes taken in `reads`.
pub(crate) fn run_counted<F>(
    source: &dyn TensorSource,
    outs: &[TensorRecipe],
    base: u64,
    reads: &Reads,
    progress: &dyn Progress,
    emit: F,
) -> Result<Hashes>
where
    F: Emit,
{
    let cx = Ctx {
        source,
        base,
        progress,
        reads,
        windowed: None,
    };
    // Work: (tensor, Some(chunk)) for random access, (tensor, None) for a whole sequential one.
    let mut work = Vec::new();
    for (k, o) in outs.iter().enumerate() {
        if sequential(source, o) {
            work.push((k, None));
        } else {
            let n = hash::leaf_count(o.info.byte_len, leaf_of(o, base));
            work.extend((0..n).map(|c| (k, Some(c))));
        }
    }
    let done: Vec<Vec<Leaf>> = work
        .par_iter()
        .map_init(Buffers::default, |buf, &(k, c)| -> Result<_> {
            chunks(&cx, outs, k, c, buf, &emit)
        })
        .collect::<Result<_>>()?;
    // Reassemble leaves per tensor in order.
    let mut leaves: Vec<Vec<Leaf>> = vec![Vec::new(); outs.len()];
    for ((k, _), d) in work.iter().zip(done) {
        leaves[*k].extend(d);
    }
    Ok(hashes_of(source, outs, &leaves))
}

/// A leaf's digest and, for lossless transforms, the digest of the input bytes it read.
pub(crate) type Leaf = (u128, Option<u128>);

/// Whether output tensor `o` reads a source only front to back.
pub(crate) fn sequential(source: &dyn TensorSource, o: &TensorRecipe) -> bool {
    o.inputs
        .iter()
        .any(|&i| source.access(i) == Access::Sequential)
}

/// Chunk `c` of output tensor `k`, or (`None`) all its chunks in order.
pub(crate) fn chunks<F>(
    cx: &Ctx,
    outs: &[TensorRecipe],
    k: usize,
    c: Option<u64>,
    buf: &mut Buffers,
    emit: &F,
) -> Result<Vec<Leaf>>
where
    F: Emit,
{
    let o = &outs[k];
    let n = hash::leaf_count(o.info.byte_len, leaf_of(o, cx.base));
    let all: Vec<u64> = match c {
        Some(c) => vec![c],
        None => (0..n).collect(),
    };
    all.into_iter()
        .map(|c| chunk(cx, o, k, c, buf, emit))
        .collect()
}

/// The hashes of `outs` from their leaves, in order.
pub(crate) fn hashes_of(
    source: &dyn TensorSource,
    outs: &[TensorRecipe],
    leaves: &[Vec<Leaf>],
) -> Hashes {
    let mut h = Hashes {
        out: Vec::with_capacity(outs.len()),
        src: Vec::with_capacity(outs.len()),
    };
    for (o, l) in outs.iter().zip(leaves) {
        let t = &o.info;
        let out: Vec<u128> = l.iter().map(|x| x.0).collect();
        h.out.push(hash::root(t.dtype, &t.shape, t.byte_len, &out));
        let src = match (&o.op, o.inputs.as_slice()) {
            (Some(op), &[i]) if op.lossless() => {
                let s = &source.tensors()[i];
                let v: Vec<u128> = l.iter().map(|x| x.1.unwrap_or(0)).collect();
                Some(hash::root(s.dtype, &s.shape, s.byte_len, &v))
            }
            _ => None,
        };
        h.src.push(src);
    }
    h
}

/// The input ranges chunk `start..start + n` of `o` reads: `(input position, byte range)`.
pub(crate) fn needs_of(o: &TensorRecipe, start: u64, n: u64) -> Vec<(usize, std::ops::Range<u64>)> {
    match &o.op {
        None => vec![(0, start..start + n)],
        Some(op) => op.needs(start..start + n),
    }
}

/// Processes chunk `c` of output tensor `k`: returns its leaf digest and, for lossless
/// transforms, the digest of the input bytes it read.
fn chunk<F>(
    cx: &Ctx,
    o: &TensorRecipe,
    k: usize,
    c: u64,
    buf: &mut Buffers,
    emit: &F,
) -> Result<Leaf>
where
    F: Emit,
{
    if crate::cancel::requested() {
        return Err(Error::Interrupted);
    }
    let source = cx.source;
    let leaf = leaf_of(o, cx.base);
    let start = c * leaf;
    let n = (o.info.byte_len - start).min(leaf);
    let r = match &o.op {
        None => identity(cx, o.inputs[0], k, start, n, buf, emit)?,
        Some(op)
            if op.concatenates()
                && op
                    .needs(start..start + n)
                    .iter()
                    .all(|(j, _)| source.bytes(o.inputs[*j]).is_some()) =>
        {
            concatenate(cx, o, op.as_ref(), k, start, n, buf, emit)?
        }
        Some(op) => transformed(cx, o, op.as_ref(), k, start, n, buf, emit)?,
    };
    cx.progress.advance(n);
    Ok(r)
}

/// Output bytes a piecewise transform ([`Transform::piecewise`]) is applied to at a time when
/// the source computes its inputs (`read_into`: FP8 dequantized, a ZIP member inflated): small
/// enough that the staged inputs are still in the core's cache when the transform reads them,
/// where a whole chunk's (16 MiB of F32 for 8 MiB of BF16) went to memory and back.
const STAGED_PIECE: u64 = 256 << 10;

/// A chunk of a transform: its input ranges (zero-copy when mapped, else read into staging
/// buffers), applied into the output buffer, hashed and written. A piecewise transform over
/// computed inputs is staged and applied [`STAGED_PIECE`] bytes at a time: the same bytes by its contract.
#[allow(clippy::too_many_arguments)]
fn transformed<F>(
    cx: &Ctx,
    o: &TensorRecipe,
    op: &dyn Transform,
    k: usize,
    start: u64,
    n: u64,
    buf: &mut Buffers,
    emit: &F,
) -> Result<Leaf>
where
    F: Emit,
{
    let source = cx.source;
    let unit = op.unit().max(1);
    let computed =
        op.piecewise() && !op.lossless() && o.inputs.iter().any(|&i| source.bytes(i).is_none());
    let step = if computed {
        (STAGED_PIECE / unit).max(1) * unit
    } else {
        n
    };
    let mut src_h = LeafHasher::new();
    buf.out.resize(n as usize, 0);
    let mut at = start;
    while at < start + n {
        let end = (at + step).min(start + n);
        let out = &mut buf.out[(at - start) as usize..(end - start) as usize];
        apply_staged(cx, o, op, at..end, &mut buf.inputs, out, &mut src_h)?;
        at = end;
    }
    let mut h = LeafHasher::new();
    hash_and_write(&mut h, &buf.out, k, start, emit)?;
    Ok((h.finish(), op.lossless().then(|| src_h.finish())))
}

/// `op` over output range `out` into `dst`: its input ranges staged (zero-copy when mapped,
/// else read into `staging`), hashed into `src_h` when `op` is lossless, released after.
fn apply_staged(
    cx: &Ctx,
    o: &TensorRecipe,
    op: &dyn Transform,
    out: Range<u64>,
    staging: &mut Vec<Vec<u8>>,
    dst: &mut [u8],
    src_h: &mut LeafHasher,
) -> Result<()> {
    let source = cx.source;
    let needs = op.needs(out.clone());
    staging.resize_with(needs.len(), Vec::new);
    for ((j, r), staged) in needs.iter().zip(staging.iter_mut()) {
        let i = o.inputs[*j];
        cx.take(i, r.end - r.start);
        if source.bytes(i).is_none() {
            staged.resize((r.end - r.start) as usize, 0);
            source.read_into(i, r.start, staged)?;
        }
    }
    let ins: Vec<&[u8]> = needs
        .iter()
        .zip(staging.iter())
        .map(|((j, r), staged)| match source.bytes(o.inputs[*j]) {
            Some(all) => &all[r.start as usize..r.end as usize],
            None => staged.as_slice(),
        })
        .collect();
    if op.lossless() {
        ins.iter().for_each(|s| src_h.update(s));
    }
    op.apply(out, &ins, dst).map_err(|e| locate(e, source, o))?;
    for (j, r) in spans(&needs) {
        cx.release(o.inputs[j], r.start, r.end - r.start);
    }
    Ok(())
}

/// The input ranges of `needs` merged where they touch or overlap (per input position), so a
/// chunk gives the kernel one page hint per span instead of one per piece: a q/k permutation
/// reads its chunk's rows one by one, in another order.
pub(crate) fn spans(needs: &[(usize, Range<u64>)]) -> Vec<(usize, Range<u64>)> {
    let mut sorted = needs.to_vec();
    sorted.sort_by_key(|(j, r)| (*j, r.start));
    let mut out: Vec<(usize, Range<u64>)> = Vec::with_capacity(sorted.len());
    for (j, r) in sorted {
        match out.last_mut() {
            Some((lj, last)) if *lj == j && r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push((j, r)),
        }
    }
    out
}

/// A concatenating transform ([`Transform::concatenates`]) over mapped inputs: each input slice
/// is hashed where it lands; a slice of at least [`DIRECT`] bytes is written straight from the
/// map (as [`identity`] does), shorter ones (a permutation's rows) are gathered in the output
/// buffer and written together, so a chunk is a few large writes, never one per row.
#[allow(clippy::too_many_arguments)]
fn concatenate<F>(
    cx: &Ctx,
    o: &TensorRecipe,
    op: &dyn Transform,
    k: usize,
    start: u64,
    n: u64,
    buf: &mut Buffers,
    emit: &F,
) -> Result<Leaf>
where
    F: Emit,
{
    let source = cx.source;
    let needs = op.needs(start..start + n);
    let spans = spans(&needs);
    for (j, r) in &spans {
        source.will_need(o.inputs[*j], r.start, r.end - r.start);
    }
    let mut h = LeafHasher::new();
    let (mut off, mut gathered_at) = (start, start);
    buf.out.clear();
    for (j, r) in &needs {
        let i = o.inputs[*j];
        let all = source
            .bytes(i)
            .ok_or_else(|| Error::Internal("a concatenated input is not mapped".into()))?;
        cx.take(i, r.end - r.start);
        let slice = &all[r.start as usize..r.end as usize];
        if slice.len() < DIRECT {
            if buf.out.is_empty() {
                gathered_at = off;
            }
            h.update(slice);
            buf.out.extend_from_slice(slice);
            if buf.out.len() >= PIECE {
                emit.bytes(k, gathered_at, &buf.out)?;
                buf.out.clear();
            }
        } else {
            if !buf.out.is_empty() {
                emit.bytes(k, gathered_at, &buf.out)?;
                buf.out.clear();
            }
            hash_and_put(&mut h, slice, k, off, emit)?;
        }
        off += slice.len() as u64;
    }
    if !buf.out.is_empty() {
        emit.bytes(k, gathered_at, &buf.out)?;
    }
    for (j, r) in spans {
        cx.release(o.inputs[j], r.start, r.end - r.start);
    }
    if off != start + n {
        return Err(Error::Internal(format!(
            "a concatenation gave {} bytes for a {n}-byte chunk",
            off - start
        )));
    }
    Ok((h.finish(), None))
}

/// Hashes `slice` (bytes of a mapped input) into `h` and puts it at `off` of tensor `k`: copied
/// in the kernel from the input file where the slice has an origin
/// ([`kernel_copy::origin_of`]) and `emit` can copy, so the bytes reach the output without
/// passing through user space and are read once, by the hash; else (or for whatever the kernel
/// refused) written as [`hash_and_write`] does. Pieces of [`PIECE`] either way, each hashed
/// just before it is copied, while it is in the CPU's cache.
fn hash_and_put<F: Emit>(
    h: &mut LeafHasher,
    slice: &[u8],
    k: usize,
    off: u64,
    emit: &F,
) -> Result<()> {
    let origin = match emit.copies() {
        true => kernel_copy::origin_of(slice),
        false => None,
    };
    let Some(origin) = origin else {
        return hash_and_write(h, slice, k, off, emit);
    };
    let mut at = 0usize;
    for piece in slice.chunks(PIECE) {
        h.update(piece);
        let from = Origin {
            file: origin.file.clone(),
            offset: origin.offset + at as u64,
        };
        let n = emit.copy(k, off + at as u64, &from, piece.len() as u64)? as usize;
        if n < piece.len() {
            // Refused (another filesystem, a file the kernel cannot copy): the rest is written.
            emit.bytes(k, off + (at + n) as u64, &piece[n..])?;
            let rest = &slice[at + piece.len()..];
            return hash_and_write(h, rest, k, off + (at + piece.len()) as u64, emit);
        }
        at += piece.len();
    }
    Ok(())
}

/// Hashes `slice` into `h` and writes it at `off` of tensor `k`, in pieces each hashed just
/// before it is written, so each byte is pulled from memory once.
fn hash_and_write<F>(
    h: &mut LeafHasher,
    slice: &[u8],
    k: usize,
    mut off: u64,
    emit: &F,
) -> Result<()>
where
    F: Emit,
{
    for piece in slice.chunks(PIECE) {
        h.update(piece);
        emit.bytes(k, off, piece)?;
        off += piece.len() as u64;
    }
    Ok(())
}

fn identity<F>(
    cx: &Ctx,
    i: usize,
    k: usize,
    start: u64,
    n: u64,
    buf: &mut Buffers,
    emit: &F,
) -> Result<Leaf>
where
    F: Emit,
{
    let source = cx.source;
    cx.take(i, n);
    match source.bytes(i) {
        Some(all) => {
            source.will_need(i, start, n);
            let slice = &all[start as usize..(start + n) as usize];
            let mut h = LeafHasher::new();
            hash_and_put(&mut h, slice, k, start, emit)?;
            cx.release(i, start, n);
            Ok((h.finish(), None))
        }
        None => {
            buf.out.resize(n as usize, 0);
            source.read_into(i, start, &mut buf.out)?;
            cx.release(i, start, n);
            let mut h = LeafHasher::new();
            hash_and_write(&mut h, &buf.out, k, start, emit)?;
            Ok((h.finish(), None))
        }
    }
}

/// Fills in the input file and tensor of a transform's error.
fn locate(e: Error, source: &dyn TensorSource, o: &TensorRecipe) -> Error {
    let fill = |mut at: weightport_core::Location| {
        if at.path.as_os_str().is_empty() {
            at.path = source.file_of(o.inputs[0]);
        }
        at.tensor
            .get_or_insert_with(|| source.tensors()[o.inputs[0]].name.clone());
        at
    };
    match e {
        Error::Refused { at, reason } => Error::Refused {
            at: fill(at),
            reason,
        },
        Error::Malformed { at, format, reason } => Error::Malformed {
            at: fill(at),
            format,
            reason,
        },
        other => other,
    }
}

/// Content hashes of every tensor of `source` (identity plan).
pub fn hash_source(source: &dyn TensorSource, progress: &dyn Progress) -> Result<Vec<ContentHash>> {
    let outs = identity_plan(source);
    let total = outs.iter().map(|o| o.info.byte_len).sum();
    progress.start("hash", total);
    let r = run(source, &outs, hash::HASH_CHUNK, progress, HashOnly);
    progress.finish();
    Ok(r?.out)
}

/// Every tensor of `source` unchanged.
pub(crate) fn identity_plan(source: &dyn TensorSource) -> Vec<TensorRecipe> {
    source
        .tensors()
        .iter()
        .enumerate()
        .map(|(i, t)| TensorRecipe {
            info: t.clone(),
            inputs: vec![i],
            op: None,
            note: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Mutex};

    use weightport_core::{DType, Format, Metadata, TensorInfo};

    use super::*;
    use crate::transform::permute::PermuteRows;

    /// Issue 35: a q/k permutation (Llama-2-7B's rows: 4096 F16 values, 128 a head) was written
    /// one 8 KiB row at a time, with two page hints per row. Now a chunk's rows are gathered
    /// and written in PIECE-sized writes, with one pair of hints per chunk.
    #[test]
    fn a_row_permutation_is_written_in_pieces_not_rows() {
        let (rows, row_bytes, head) = (1024usize, 8192usize, 128usize);
        let bytes: Vec<u8> = (0..rows * row_bytes).map(|i| (i * 7 % 251) as u8).collect();
        // Within each head, the first half's rows and the second half's interleaved.
        let order: Vec<u32> = (0..rows)
            .map(|r| {
                let (h, i) = (r / head, r % head);
                (h * head + (i % 2) * (head / 2) + i / 2) as u32
            })
            .collect();
        let info = TensorInfo {
            name: "q".into(),
            dtype: DType::F16,
            shape: vec![rows as u64, (row_bytes / 2) as u64],
            byte_len: (rows * row_bytes) as u64,
        };
        let mut src = Parts::new(bytes.clone(), 1, DType::F16, true);
        src.tensors[0] = info.clone();
        let op = PermuteRows::new(order.clone(), row_bytes as u64, 2);
        let outs = [TensorRecipe {
            info,
            inputs: vec![0],
            op: Some(Arc::new(op)),
            note: None,
        }];
        let written = Mutex::new(vec![0u8; bytes.len()]);
        let writes = AtomicUsize::new(0);
        let base = 4 << 20;
        run(&src, &outs, base, &NoProgress, |_, off, b: &[u8]| {
            writes.fetch_add(1, Ordering::Relaxed);
            written.lock().unwrap()[off as usize..off as usize + b.len()].copy_from_slice(b);
            Ok(())
        })
        .unwrap();
        let want: Vec<u8> = order
            .iter()
            .flat_map(|&r| &bytes[r as usize * row_bytes..(r as usize + 1) * row_bytes])
            .copied()
            .collect();
        assert!(written.into_inner().unwrap() == want, "the permuted bytes");
        let chunks = bytes.len() / base as usize;
        assert_eq!(writes.into_inner(), bytes.len() / PIECE, "{rows} rows");
        assert_eq!(
            src.hints.into_inner(),
            2 * chunks,
            "one pair of hints per chunk"
        );
    }

    /// Same-sized tensors one after another in memory: mapped (`bytes` answers) or computed
    /// (only `read_into`, as an FP8 source's dequantized weights are); reads and page hints
    /// counted.
    struct Parts {
        tensors: Vec<TensorInfo>,
        all: Vec<u8>,
        mapped: bool,
        meta: Metadata,
        reads: AtomicUsize,
        hints: AtomicUsize,
    }

    impl Parts {
        fn new(all: Vec<u8>, n: usize, dtype: DType, mapped: bool) -> Parts {
            let part = (all.len() / n) as u64;
            let tensors = (0..n)
                .map(|k| TensorInfo {
                    name: format!("e{k}"),
                    dtype,
                    shape: vec![part / dtype.granule()],
                    byte_len: part,
                })
                .collect();
            Parts {
                tensors,
                all,
                mapped,
                meta: Metadata::new(),
                reads: AtomicUsize::new(0),
                hints: AtomicUsize::new(0),
            }
        }

        fn part(&self, i: usize) -> &[u8] {
            let n = self.tensors[i].byte_len as usize;
            &self.all[i * n..(i + 1) * n]
        }
    }

    impl TensorSource for Parts {
        fn format(&self) -> Format {
            Format::Safetensors
        }
        fn metadata(&self) -> &Metadata {
            &self.meta
        }
        fn tensors(&self) -> &[TensorInfo] {
            &self.tensors
        }
        fn files(&self) -> Vec<PathBuf> {
            vec![]
        }
        fn file_of(&self, _: usize) -> PathBuf {
            PathBuf::from("mem")
        }
        fn bytes(&self, i: usize) -> Option<&[u8]> {
            self.mapped.then(|| self.part(i))
        }
        fn read_into(&self, i: usize, off: u64, dst: &mut [u8]) -> Result<()> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            dst.copy_from_slice(&self.part(i)[off as usize..off as usize + dst.len()]);
            Ok(())
        }
        fn release(&self, _: usize, _: u64, _: u64) {
            self.hints.fetch_add(1, Ordering::Relaxed);
        }
        fn will_need(&self, _: usize, _: u64, _: u64) {
            self.hints.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Experts the source computes (`read_into` only, as FP8 weights are dequantized), stacked
    /// and cast to BF16: each chunk is staged and cast in pieces of [`STAGED_PIECE`] output
    /// bytes, and every value is `half`'s BF16 of its F32 (round to nearest even).
    #[test]
    fn computed_experts_are_staged_and_cast_in_pieces() {
        let part_vals = 300usize << 10; // 1.2 MiB of F32 a part, 600 KiB cast: pieces end inside parts
        let vals: Vec<f32> = (0..4 * part_vals)
            .map(|i| (i as f32 * 0.37).sin() * 1000.0 + 1e-3 * i as f32)
            .collect();
        let part = (part_vals * 4) as u64;
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let src = Parts::new(bytes, 4, DType::F32, false);
        let stack: Arc<dyn Transform> = Arc::new(crate::transform::stack::Stack::new(4, part, 4));
        let cast: Arc<dyn Transform> = Arc::new(
            crate::transform::cast::Cast::new(DType::F32, DType::BF16, "stacked", false).unwrap(),
        );
        let out_len = vals.len() * 2;
        let outs = [TensorRecipe {
            info: TensorInfo {
                name: "stacked".into(),
                dtype: DType::BF16,
                shape: vec![4, part_vals as u64],
                byte_len: out_len as u64,
            },
            inputs: vec![0, 1, 2, 3],
            op: crate::transform::chain::Chain::of(Some(stack), Some(cast)),
            note: None,
        }];
        let written = Mutex::new(vec![0u8; out_len]);
        run(&src, &outs, 1 << 20, &NoProgress, |_, off, b: &[u8]| {
            written.lock().unwrap()[off as usize..off as usize + b.len()].copy_from_slice(b);
            Ok(())
        })
        .unwrap();
        let want: Vec<u8> = vals
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect();
        assert!(written.into_inner().unwrap() == want, "the cast bytes");
        // 2.4 MiB of output: at least one read per 256 KiB piece (10), more where a piece
        // straddles two parts; chunks read whole would be 6 reads (3 chunks, 2 parts each).
        let pieces = out_len.div_ceil(STAGED_PIECE as usize);
        let reads = src.reads.into_inner();
        assert!(reads >= pieces && pieces == 10, "read in pieces: {reads}");
    }

    /// A stack whose chunks mix slices written straight from the map (1 MiB or more) with
    /// short ones gathered before and after them: every byte lands where it belongs, and the
    /// leaf hashes are those of the bytes written.
    #[test]
    fn a_stack_mixes_direct_and_gathered_writes() {
        let part = 5usize << 18; // 1.25 MiB
        let parts: Vec<Vec<u8>> = (0..4)
            .map(|k| (0..part).map(|i| (i * 13 + k * 101) as u8).collect())
            .collect();
        let all: Vec<u8> = parts.concat();
        let src = Parts::new(all.clone(), 4, DType::F16, true);
        let info = TensorInfo {
            name: "stacked".into(),
            dtype: DType::F16,
            shape: vec![4, (part / 2) as u64],
            byte_len: all.len() as u64,
        };
        let outs = [TensorRecipe {
            info: info.clone(),
            inputs: vec![0, 1, 2, 3],
            op: Some(Arc::new(crate::transform::stack::Stack::new(
                4,
                part as u64,
                2,
            ))),
            note: None,
        }];
        let written = Mutex::new(vec![0u8; all.len()]);
        let sizes = Mutex::new(Vec::new());
        let base = 2 << 20;
        let h = run(&src, &outs, base, &NoProgress, |_, off, b: &[u8]| {
            sizes.lock().unwrap().push(b.len());
            written.lock().unwrap()[off as usize..off as usize + b.len()].copy_from_slice(b);
            Ok(())
        })
        .unwrap();
        assert!(written.into_inner().unwrap() == all);
        let mut sizes = sizes.into_inner().unwrap();
        sizes.sort_unstable();
        // Chunk 0: part 0 direct, 0.75 MiB of part 1 gathered; chunk 1: 0.5 MiB of part 1
        // gathered (written before) part 2 direct, then 0.25 MiB of part 3 gathered; chunk 2:
        // the last 1 MiB of part 3 direct.
        assert_eq!(
            sizes,
            [1 << 18, 1 << 19, 3 << 18, 1 << 20, 5 << 18, 5 << 18]
        );
        let leaves: Vec<u128> = all.chunks(base as usize).map(hash::leaf).collect();
        let want = hash::root(info.dtype, &info.shape, info.byte_len, &leaves);
        assert_eq!(h.out[0], want);
    }

    #[test]
    fn spans_merge_touching_ranges_of_one_input() {
        let needs = vec![(0, 8..12), (0, 0..4), (0, 4..8), (1, 4..8), (0, 14..16)];
        assert_eq!(spans(&needs), vec![(0, 0..12), (0, 14..16), (1, 4..8)]);
    }
}
