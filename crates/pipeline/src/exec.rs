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
struct Buffers {
    out: Vec<u8>,
    inputs: Vec<Vec<u8>>,
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
    // Work: (tensor, Some(chunk)) for random access, (tensor, None) for a whole sequential one.
    let mut work = Vec::new();
    for (k, o) in outs.iter().enumerate() {
        let seq = o
            .inputs
            .iter()
            .any(|&i| source.access(i) == Access::Sequential);
        if seq {
            work.push((k, None));
        } else {
            let n = hash::leaf_count(o.info.byte_len, leaf_of(o, base));
            work.extend((0..n).map(|c| (k, Some(c))));
        }
    }
    let done: Vec<Vec<(u128, Option<u128>)>> = work
        .par_iter()
        .map_init(Buffers::default, |buf, &(k, c)| -> Result<_> {
            let o = &outs[k];
            let n = hash::leaf_count(o.info.byte_len, leaf_of(o, base));
            let chunks: Vec<u64> = match c {
                Some(c) => vec![c],
                None => (0..n).collect(),
            };
            chunks
                .into_iter()
                .map(|c| chunk(source, o, k, c, base, buf, progress, &emit))
                .collect()
        })
        .collect::<Result<_>>()?;
    // Reassemble leaves per tensor in order.
    let mut leaves: Vec<Vec<(u128, Option<u128>)>> = vec![Vec::new(); outs.len()];
    for ((k, _), d) in work.iter().zip(done) {
        leaves[*k].extend(d);
    }
    let mut h = Hashes {
        out: Vec::with_capacity(outs.len()),
        src: Vec::with_capacity(outs.len()),
    };
    for (o, l) in outs.iter().zip(&leaves) {
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
    Ok(h)
}

/// Processes chunk `c` of output tensor `k`: returns its leaf digest and, for lossless
/// transforms, the digest of the input bytes it read.
#[allow(clippy::too_many_arguments)]
fn chunk<F>(
    source: &dyn TensorSource,
    o: &OutTensor,
    k: usize,
    c: u64,
    base: u64,
    buf: &mut Buffers,
    progress: &dyn Progress,
    emit: &F,
) -> Result<(u128, Option<u128>)>
where
    F: Fn(usize, u64, &[u8]) -> Result<()> + Sync,
{
    if crate::cancel::requested() {
        return Err(Error::Interrupted);
    }
    let leaf = leaf_of(o, base);
    let start = c * leaf;
    let n = (o.info.byte_len - start).min(leaf);
    let r = match &o.op {
        None => identity(source, o.inputs[0], k, start, n, buf, emit)?,
        Some(op)
            if op.concatenates()
                && op
                    .needs(start..start + n)
                    .iter()
                    .all(|(j, _)| source.bytes(o.inputs[*j]).is_some()) =>
        {
            concatenate(source, o, op.as_ref(), k, start, n, emit)?
        }
        Some(op) => {
            let needs = op.needs(start..start + n);
            buf.inputs.resize_with(needs.len(), Vec::new);
            for ((j, r), staged) in needs.iter().zip(buf.inputs.iter_mut()) {
                let i = o.inputs[*j];
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
                source.release(o.inputs[*j], r.start, r.end - r.start);
            }
            emit(k, start, &buf.out)?;
            (hash::leaf(&buf.out), op.lossless().then(|| src_h.finish()))
        }
    };
    progress.advance(n);
    Ok(r)
}

/// A concatenating transform ([`Transform::concatenates`]) over mapped inputs: each input slice
/// is hashed and written where it lands, in cache-sized pieces, as [`identity`] does, so the
/// bytes are not first copied into an output buffer.
fn concatenate<F>(
    source: &dyn TensorSource,
    o: &OutTensor,
    op: &dyn Transform,
    k: usize,
    start: u64,
    n: u64,
    emit: &F,
) -> Result<(u128, Option<u128>)>
where
    F: Fn(usize, u64, &[u8]) -> Result<()> + Sync,
{
    let mut h = LeafHasher::new();
    let mut off = start;
    for (j, r) in op.needs(start..start + n) {
        let i = o.inputs[j];
        let all = source
            .bytes(i)
            .ok_or_else(|| Error::Internal("a concatenated input is not mapped".into()))?;
        source.will_need(i, r.start, r.end - r.start);
        for piece in all[r.start as usize..r.end as usize].chunks(PIECE) {
            h.update(piece);
            emit(k, off, piece)?;
            off += piece.len() as u64;
        }
        source.release(i, r.start, r.end - r.start);
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
    source: &dyn TensorSource,
    i: usize,
    k: usize,
    start: u64,
    n: u64,
    buf: &mut Buffers,
    emit: &F,
) -> Result<(u128, Option<u128>)>
where
    F: Fn(usize, u64, &[u8]) -> Result<()> + Sync,
{
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
            source.release(i, start, n);
            Ok((h.finish(), None))
        }
        None => {
            buf.out.resize(n as usize, 0);
            source.read_into(i, start, &mut buf.out)?;
            source.release(i, start, n);
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
