//! The parallel executor: output tensors cut into chunks, computed on a rayon pool.
//!
//! A chunk is one leaf of the output tensor's content hash: [`hash::leaf_bytes`] of its dtype,
//! a multiple of the dtype's granule (a whole quant block, a whole group of sub-byte values), so
//! hashes do not depend on thread count or scheduling and output written at planned offsets is
//! byte-identical at 1 and N threads. Per chunk:
//! * identity from a mapped source: the mapped slice is hashed, written with `pwrite` and
//!   released (zero-copy);
//! * identity from any other source: `read_into` a per-thread buffer;
//! * a transform: the input ranges it needs (zero-copy when mapped, else read into a per-thread
//!   staging buffer), `apply` into a per-thread output buffer, hashed, written;
//! * a concatenating transform (a stack) over mapped inputs: each input slice hashed and written
//!   where it lands, like an identity (no copy into a buffer first).
//!
//! Tensors whose source is only sequential (a deflated ZIP member) are read once, front to
//! back, by one worker; parallelism comes from other tensors. Memory is therefore about
//! `threads × (chunk + input staging)`, which [`worker_bytes`] computes for the budget.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;
use weightport_core::hash::{self, LeafHasher};
use weightport_core::{Access, ContentHash, Error, Result, TensorSource};

use crate::plan::OutTensor;
use crate::transform::Transform;

/// Bytes hashed and written per call: small enough to stay in L2 between the two.
const PIECE: usize = 256 << 10;

/// Progress events (the library never prints; the CLI draws them).
pub trait Progress: Send + Sync {
    /// A phase starts with this many bytes to process.
    fn start(&self, _phase: &str, _total: u64) {}
    /// `bytes` more were processed.
    fn advance(&self, _bytes: u64) {}
    /// The phase ended.
    fn finish(&self) {}
}

/// A progress sink that ignores everything.
pub struct NoProgress;
impl Progress for NoProgress {}

/// The hashes a run produced.
#[derive(Debug, Clone)]
pub struct Hashes {
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
pub struct Reads(Vec<AtomicU64>);

impl Reads {
    /// A counter for an input of `tensors` tensors.
    pub fn new(tensors: usize) -> Reads {
        Reads((0..tensors).map(|_| AtomicU64::new(0)).collect())
    }

    /// Counts `n` bytes of tensor `i`.
    pub fn add(&self, i: usize, n: u64) {
        if let Some(c) = self.0.get(i) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Bytes taken in all.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Bytes taken per input file of `source` (the opened input), in the source's file order.
    pub fn by_file(&self, source: &dyn TensorSource) -> Vec<(PathBuf, u64)> {
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
    /// made resident, counts and releases ([`crate::shared_read`]): the chunk neither counts
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
pub fn leaf_of(o: &OutTensor, base: u64) -> u64 {
    hash::leaf_bytes(o.info.dtype, base)
}

/// Bytes one worker holds at most for `outs` (output chunk + input staging or mapped chunk).
pub fn worker_bytes(source: &dyn TensorSource, outs: &[OutTensor], base: u64) -> u64 {
    outs.iter()
        .map(|o| {
            let leaf = leaf_of(o, base).min(o.info.byte_len.max(1));
            let input: u64 = match &o.op {
                None => leaf,
                Some(op) => op.needs(0..leaf).iter().map(|(_, r)| r.end - r.start).sum(),
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

/// Runs `outs` over `source`, calling `emit(k, offset, bytes)` for every chunk of output tensor
/// `k`, with chunks of `base`-sized leaves. Runs on the current rayon pool.
pub fn run<F>(
    source: &dyn TensorSource,
    outs: &[OutTensor],
    base: u64,
    progress: &dyn Progress,
    emit: F,
) -> Result<Hashes>
where
    F: Fn(usize, u64, &[u8]) -> Result<()> + Sync,
{
    let reads = Reads::new(source.tensors().len());
    run_counted(source, outs, base, &reads, progress, emit)
}

/// [`run`], counting the input bytes taken in `reads`.
pub fn run_counted<F>(
    source: &dyn TensorSource,
    outs: &[OutTensor],
    base: u64,
    reads: &Reads,
    progress: &dyn Progress,
    emit: F,
) -> Result<Hashes>
where
    F: Fn(usize, u64, &[u8]) -> Result<()> + Sync,
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
pub(crate) fn sequential(source: &dyn TensorSource, o: &OutTensor) -> bool {
    o.inputs
        .iter()
        .any(|&i| source.access(i) == Access::Sequential)
}

/// Chunk `c` of output tensor `k`, or (`None`) all its chunks in order.
pub(crate) fn chunks<F>(
    cx: &Ctx,
    outs: &[OutTensor],
    k: usize,
    c: Option<u64>,
    buf: &mut Buffers,
    emit: &F,
) -> Result<Vec<Leaf>>
where
    F: Fn(usize, u64, &[u8]) -> Result<()> + Sync,
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
    outs: &[OutTensor],
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
pub(crate) fn needs_of(o: &OutTensor, start: u64, n: u64) -> Vec<(usize, std::ops::Range<u64>)> {
    match &o.op {
        None => vec![(0, start..start + n)],
        Some(op) => op.needs(start..start + n),
    }
}

/// Processes chunk `c` of output tensor `k`: returns its leaf digest and, for lossless
/// transforms, the digest of the input bytes it read.
fn chunk<F>(cx: &Ctx, o: &OutTensor, k: usize, c: u64, buf: &mut Buffers, emit: &F) -> Result<Leaf>
where
    F: Fn(usize, u64, &[u8]) -> Result<()> + Sync,
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
            concatenate(cx, o, op.as_ref(), k, start, n, emit)?
        }
        Some(op) => transformed(cx, o, op.as_ref(), k, start, n, buf, emit)?,
    };
    cx.progress.advance(n);
    Ok(r)
}

/// A chunk of a transform: its input ranges (zero-copy when mapped, else read into staging
/// buffers), applied into the output buffer, hashed and written.
#[allow(clippy::too_many_arguments)]
fn transformed<F>(
    cx: &Ctx,
    o: &OutTensor,
    op: &dyn Transform,
    k: usize,
    start: u64,
    n: u64,
    buf: &mut Buffers,
    emit: &F,
) -> Result<Leaf>
where
    F: Fn(usize, u64, &[u8]) -> Result<()> + Sync,
{
    let source = cx.source;
    let needs = op.needs(start..start + n);
    buf.inputs.resize_with(needs.len(), Vec::new);
    for ((j, r), staged) in needs.iter().zip(buf.inputs.iter_mut()) {
        let i = o.inputs[*j];
        cx.take(i, r.end - r.start);
        if source.bytes(i).is_none() {
            staged.resize((r.end - r.start) as usize, 0);
            source.read_into(i, r.start, staged)?;
        }
    }
    let ins: Vec<&[u8]> = needs
        .iter()
        .zip(&buf.inputs)
        .map(|((j, r), staged)| match source.bytes(o.inputs[*j]) {
            Some(all) => &all[r.start as usize..r.end as usize],
            None => staged.as_slice(),
        })
        .collect();
    let mut src_h = LeafHasher::new();
    if op.lossless() {
        ins.iter().for_each(|s| src_h.update(s));
    }
    buf.out.resize(n as usize, 0);
    op.apply(start..start + n, &ins, &mut buf.out)
        .map_err(|e| locate(e, source, o))?;
    for (j, r) in &needs {
        cx.release(o.inputs[*j], r.start, r.end - r.start);
    }
    emit(k, start, &buf.out)?;
    Ok((hash::leaf(&buf.out), op.lossless().then(|| src_h.finish())))
}

/// A concatenating transform ([`Transform::concatenates`]) over mapped inputs: each input slice
/// is hashed and written where it lands, in cache-sized pieces, as [`identity`] does, so the
/// bytes are not first copied into an output buffer.
fn concatenate<F>(
    cx: &Ctx,
    o: &OutTensor,
    op: &dyn Transform,
    k: usize,
    start: u64,
    n: u64,
    emit: &F,
) -> Result<Leaf>
where
    F: Fn(usize, u64, &[u8]) -> Result<()> + Sync,
{
    let source = cx.source;
    let mut h = LeafHasher::new();
    let mut off = start;
    for (j, r) in op.needs(start..start + n) {
        let i = o.inputs[j];
        let all = source
            .bytes(i)
            .ok_or_else(|| Error::Internal("a concatenated input is not mapped".into()))?;
        cx.take(i, r.end - r.start);
        source.will_need(i, r.start, r.end - r.start);
        for piece in all[r.start as usize..r.end as usize].chunks(PIECE) {
            h.update(piece);
            emit(k, off, piece)?;
            off += piece.len() as u64;
        }
        cx.release(i, r.start, r.end - r.start);
    }
    if off != start + n {
        return Err(Error::Internal(format!(
            "a concatenation gave {} bytes for a {n}-byte chunk",
            off - start
        )));
    }
    Ok((h.finish(), None))
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
    F: Fn(usize, u64, &[u8]) -> Result<()> + Sync,
{
    let source = cx.source;
    cx.take(i, n);
    match source.bytes(i) {
        Some(all) => {
            // Hash and write in cache-sized pieces so each byte is pulled from memory once.
            source.will_need(i, start, n);
            let slice = &all[start as usize..(start + n) as usize];
            let mut h = LeafHasher::new();
            let mut off = start;
            for piece in slice.chunks(PIECE) {
                h.update(piece);
                emit(k, off, piece)?;
                off += piece.len() as u64;
            }
            cx.release(i, start, n);
            Ok((h.finish(), None))
        }
        None => {
            buf.out.resize(n as usize, 0);
            source.read_into(i, start, &mut buf.out)?;
            cx.release(i, start, n);
            emit(k, start, &buf.out)?;
            Ok((hash::leaf(&buf.out), None))
        }
    }
}

/// Fills in the input file and tensor of a transform's error.
fn locate(e: Error, source: &dyn TensorSource, o: &OutTensor) -> Error {
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
    let r = run(source, &outs, hash::HASH_CHUNK, progress, |_, _, _| Ok(()));
    progress.finish();
    Ok(r?.out)
}

/// Every tensor of `source` unchanged.
pub fn identity_plan(source: &dyn TensorSource) -> Vec<OutTensor> {
    source
        .tensors()
        .iter()
        .enumerate()
        .map(|(i, t)| OutTensor {
            info: t.clone(),
            inputs: vec![i],
            op: None,
            note: None,
        })
        .collect()
}
