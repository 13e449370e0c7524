//! Caps on sizes read from files, and the executor's memory budget.

/// Caps every reader applies to sizes it reads from a file, so a crafted file cannot exhaust
/// memory. Each default names its reason.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest JSON header accepted (safetensors: the reference's 100,000,000 bytes, decimal).
    pub max_header_bytes: u64,
    /// Largest number of tensors in one source.
    pub max_tensors: u64,
    /// Largest rank of a tensor.
    pub max_rank: usize,
    /// Largest index.json accepted (the biggest public indexes are a few MB).
    pub max_index_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 100_000_000,
            max_tensors: 10_000_000,
            max_rank: 64,
            max_index_bytes: 256 << 20,
        }
    }
}

/// How much memory the executor may use for buffers: about `threads × chunk` bytes.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Worker threads.
    pub threads: usize,
    /// Bytes per unit of work (a multiple of [`crate::hash::HASH_CHUNK`]).
    pub chunk: u64,
}

impl Budget {
    /// Peak buffer memory this budget allows.
    pub fn peak_bytes(&self) -> u64 {
        self.threads as u64 * self.chunk
    }
}
