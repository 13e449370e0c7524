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

/// What a reader is told when it opens a file: the caps, and the few per-format choices a user
/// can make on the command line. Readers ignore the fields that do not concern them.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ReadOptions {
    /// Caps on sizes read from the file.
    pub limits: Limits,
    /// NPY/NPZ: read the ambiguous 2-byte void dtype `<V2` (what ml_dtypes/JAX bfloat16 arrays
    /// save as) as BF16. Without it such arrays are refused with a message naming the option.
    pub void2_as_bf16: bool,
    /// PyTorch: the dotted path of the nested dict of tensors to convert (`--key a.b`);
    /// `None` picks the top-level dict or its single `state_dict`-like child.
    pub key: Option<String>,
    /// PyTorch: write every name of tensors that share storage (`--shared copy`), instead of
    /// keeping one name per exact alias.
    pub shared_copy: bool,
    /// PyTorch: keep objects of classes off the allowlist (a Lightning checkpoint's
    /// `hyper_parameters` DictConfig) as inert, listed records and convert the tensors, instead
    /// of refusing the file. Nothing is ever called either way.
    pub inert_objects: bool,
    /// Read this one file even if it is a part of a set (a GGUF split): verification reopens
    /// each staged file on its own, under its temp name.
    pub one_part: bool,
}

impl ReadOptions {
    /// Options with the given limits and every choice at its default.
    pub fn with_limits(limits: Limits) -> Self {
        ReadOptions {
            limits,
            ..Self::default()
        }
    }
}
