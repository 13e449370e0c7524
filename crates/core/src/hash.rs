//! Container-independent content hashes.
//!
//! A tensor's content hash covers its dtype, shape and logical little-endian row-major bytes,
//! so `.bin → safetensors → resharded` can be proven identical. The bytes are cut into fixed
//! [`HASH_CHUNK`]-sized leaves, each hashed with xxh3-128; the root hashes the dtype, shape,
//! length and the leaf digests in order. Leaves can therefore be computed in parallel and in
//! any order, and the result does not depend on the thread count or the executor's chunking.

use std::fmt;

use xxhash_rust::xxh3::{xxh3_128, Xxh3};

use crate::dtype::DType;

/// Leaf size of the content hash, and the unit the executor schedules work in.
pub const HASH_CHUNK: u64 = 8 << 20;

/// A 128-bit content hash.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentHash(pub u128);

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({self})")
    }
}

/// Digest of one leaf.
pub fn leaf(bytes: &[u8]) -> u128 {
    xxh3_128(bytes)
}

/// Streaming digest of one leaf, equal to [`leaf`] of the concatenated input.
#[derive(Default)]
pub struct LeafHasher(Xxh3);

impl LeafHasher {
    /// A fresh leaf.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    /// The leaf digest.
    pub fn finish(&self) -> u128 {
        self.0.digest128()
    }
}

/// Leaf size for `dtype` given a target size `base` (normally [`HASH_CHUNK`]): the largest
/// multiple of the dtype's granule (a whole block, a whole group of sub-byte elements) not above
/// `base`, so leaves, and the executor's chunks, never split an indivisible unit. It depends on
/// the dtype only, so hashes stay independent of containers and scheduling.
pub fn leaf_bytes(dtype: DType, base: u64) -> u64 {
    let g = dtype.granule().max(1);
    // A quantized leaf is computed from 3.5-8× its size of float input (plus a chained
    // transform's intermediate copy): a quarter of the base keeps a worker's memory near it.
    let base = if dtype.is_block() { base / 4 } else { base };
    (base / g).max(1) * g
}

/// Number of leaves for `byte_len` bytes of `leaf`-sized leaves (at least one, so empty
/// tensors hash too).
pub fn leaf_count(byte_len: u64, leaf: u64) -> u64 {
    byte_len.div_ceil(leaf).max(1)
}

/// Combines leaf digests (in order) into a tensor's content hash.
pub fn root(dtype: DType, shape: &[u64], byte_len: u64, leaves: &[u128]) -> ContentHash {
    let mut h = Xxh3::new();
    h.update(b"weightport-content-v1\0");
    h.update(dtype.name().as_bytes());
    h.update(&[0]);
    h.update(&(shape.len() as u64).to_le_bytes());
    for d in shape {
        h.update(&d.to_le_bytes());
    }
    h.update(&byte_len.to_le_bytes());
    for l in leaves {
        h.update(&l.to_le_bytes());
    }
    ContentHash(h.digest128())
}

/// Hashes a whole in-memory tensor (convenience for tests and small tensors).
pub fn content_hash(dtype: DType, shape: &[u64], bytes: &[u8]) -> ContentHash {
    let size = leaf_bytes(dtype, HASH_CHUNK) as usize;
    let leaves: Vec<u128> = if bytes.is_empty() {
        vec![leaf(&[])]
    } else {
        bytes.chunks(size).map(leaf).collect()
    };
    root(dtype, shape, bytes.len() as u64, &leaves)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_leaf_equals_one_shot() {
        let data: Vec<u8> = (0..1_000_003u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut h = LeafHasher::new();
        for c in data.chunks(4099) {
            h.update(c);
        }
        assert_eq!(h.finish(), leaf(&data));
    }

    #[test]
    fn dtype_and_shape_are_part_of_the_hash() {
        let b = [0u8; 8];
        let a = content_hash(DType::F32, &[2], &b);
        assert_ne!(a, content_hash(DType::I32, &[2], &b));
        assert_ne!(a, content_hash(DType::F32, &[1, 2], &b));
        assert_eq!(a, content_hash(DType::F32, &[2], &b));
        assert_ne!(a, content_hash(DType::F32, &[2], &[0, 0, 0, 0, 0, 0, 0, 1]));
    }
}
