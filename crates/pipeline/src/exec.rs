//! The parallel executor: tensors cut into fixed-size chunks, processed on rayon's pool.
//!
//! Each chunk is one leaf of the content hash ([`weightport_core::hash::HASH_CHUNK`]), so the
//! hashes do not depend on thread count or scheduling, and output written at planned offsets
//! is byte-identical at 1 and N threads. Zero-copy sources hand out slices of their map, which
//! are hashed, written with `pwrite`, and released; other sources fill a per-thread buffer.
//! Resident memory is therefore about `threads × chunk`, whatever the model size.

use rayon::prelude::*;
use weightport_core::hash::{self, HASH_CHUNK};
use weightport_core::{ContentHash, Error, Result, TensorInfo, TensorSource};

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

/// Streams tensors `indices` of `source` chunk by chunk in parallel, calling
/// `emit(k, offset, bytes)` for each chunk of the `k`-th listed tensor, and returns each listed
/// tensor's content hash (described by `infos[k]`, which must have the source's byte length).
pub fn run_chunks<F>(
    source: &dyn TensorSource,
    indices: &[usize],
    infos: &[&TensorInfo],
    progress: &dyn Progress,
    emit: F,
) -> Result<Vec<ContentHash>>
where
    F: Fn(usize, u64, &[u8]) -> Result<()> + Sync,
{
    let mut items = Vec::new();
    for (k, &i) in indices.iter().enumerate() {
        let len = source.tensors()[i].byte_len;
        for c in 0..hash::leaf_count(len) {
            items.push((k, c));
        }
    }
    let leaves: Vec<u128> = items
        .par_iter()
        .map_init(Vec::new, |buf: &mut Vec<u8>, &(k, c)| -> Result<u128> {
            if crate::cancel::requested() {
                return Err(Error::Interrupted);
            }
            let i = indices[k];
            let len = source.tensors()[i].byte_len;
            let start = c * HASH_CHUNK;
            let n = (len - start).min(HASH_CHUNK);
            let digest = match source.bytes(i) {
                Some(all) => {
                    // Hash and write in cache-sized pieces so each byte is pulled from memory
                    // once for both.
                    source.will_need(i, start, n);
                    let slice = &all[start as usize..(start + n) as usize];
                    let mut h = hash::LeafHasher::new();
                    let mut off = start;
                    for piece in slice.chunks(PIECE) {
                        h.update(piece);
                        emit(k, off, piece)?;
                        off += piece.len() as u64;
                    }
                    source.release(i, start, n);
                    h.finish()
                }
                None => {
                    buf.resize(n as usize, 0);
                    source.read_into(i, start, buf)?;
                    let d = hash::leaf(buf);
                    emit(k, start, buf)?;
                    d
                }
            };
            progress.advance(n);
            Ok(digest)
        })
        .collect::<Result<_>>()?;
    let mut out = Vec::with_capacity(indices.len());
    let mut pos = 0usize;
    for (k, &i) in indices.iter().enumerate() {
        let n = hash::leaf_count(source.tensors()[i].byte_len) as usize;
        let t = infos[k];
        out.push(hash::root(
            t.dtype,
            &t.shape,
            t.byte_len,
            &leaves[pos..pos + n],
        ));
        pos += n;
    }
    Ok(out)
}

/// Content hashes of every tensor of `source`.
pub fn hash_source(source: &dyn TensorSource, progress: &dyn Progress) -> Result<Vec<ContentHash>> {
    let indices: Vec<usize> = (0..source.tensors().len()).collect();
    let infos: Vec<&TensorInfo> = source.tensors().iter().collect();
    let total = infos.iter().map(|t| t.byte_len).sum();
    progress.start("hash", total);
    let r = run_chunks(source, &indices, &infos, progress, |_, _, _| Ok(()));
    progress.finish();
    r
}
