//! Caps on sizes read from files.

/// Caps every reader applies to sizes it reads from a file, so a crafted file cannot exhaust
/// memory or time. All of them live here, each default with its reason, and every one can be
/// set through [`ReadOptions::limits`]. (Limits a *format* imposes, such as GGUF's 63-byte
/// tensor names or numpy's 10,000-byte header, are rules of that format, not caps, and stay
/// with it.)
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
    /// GGUF: longest string (llama.cpp's `GGUF_MAX_STRING_LENGTH`, 1 GiB).
    pub max_gguf_string: u64,
    /// GGUF: longest array (llama.cpp's `GGUF_MAX_ARRAY_ELEMENTS`, 2^30).
    pub max_gguf_array: u64,
    /// GGUF: metadata values (array elements included) kept in memory for one file. Each takes
    /// about 40 bytes in memory but may take 1 byte on disk, so without a cap a 1 GB file of u8
    /// arrays would need 40 GB. The largest real vocabularies hold about 1.5 M values (262k
    /// tokens with scores and types, plus merges); 16 M leaves ten times that room.
    pub max_meta_values: u64,
    /// GGUF: key/value pairs in one file. Real files have under 100 (45 in the largest
    /// llama.cpp vocab file); the cap keeps millions of tiny keys from making the metadata's
    /// per-key search quadratic.
    pub max_meta_keys: u64,
    /// ZIP members (npz): the largest ratio of declared to compressed size. Real
    /// `savez_compressed` of zeros reaches 1027:1; a larger claim is a bomb or a lie.
    pub max_deflate_ratio: u64,
    /// torch ZIP: the largest deflated storage record inflated whole (needed only for a strided
    /// view of a compressed record; contiguous reads stream).
    pub max_inflate_bytes: u64,
    /// HF release side files (`config.json`, tokenizer files, chat templates, model cards):
    /// the largest read. The largest real `tokenizer.json` files are tens of MB. The pipeline
    /// hands the job's limits to the architecture plan (`weightport_arch::PlanOptions::limits`).
    pub max_side_file: u64,
    /// Importance matrices (`--imatrix`): most entries. One per weight matrix: real files have
    /// a few hundred (7 per layer); the cap leaves room for the largest MoE models.
    pub max_imatrix_entries: u64,
    /// Importance matrices: longest entry or dataset name (tensor names are under 64 bytes).
    pub max_imatrix_name: u64,
    /// Importance matrices: most values of one entry (`n_per_row × n_expert`: 7168 × 256 for
    /// the largest MoE models, 1.8 M; the cap is 2^28, 1 GiB of f32).
    pub max_imatrix_values: u64,
    /// `scan`: bytes unpacked from compressed streams and archive members inside one scanned
    /// file, all layers together (each layer is spooled to an unlinked temp file, not held in
    /// memory). A `.tar.gz` of a release is several GB; 16 GiB bounds what a bomb costs.
    pub max_unpacked_bytes: u64,
    /// `scan`: the largest ratio of unpacked to packed bytes of one stream, checked past its
    /// first 64 MiB. gzip cannot pass 1032:1; xz of zeros reaches about 7000:1; 10,000:1
    /// leaves only bombs (bzip2 and zstd reach millions to one on runs).
    pub max_unpack_ratio: u64,
    /// `scan`: streams and archives nested inside one another (a `.tar.gz` holding a
    /// `.pkl.gz` is three layers).
    pub max_unpack_depth: usize,
    /// The pickle interpreter's caps.
    pub pickle: PickleLimits,
}

impl Limits {
    /// Default of [`Limits::max_side_file`]: 256 MiB.
    pub const DEFAULT_MAX_SIDE_FILE: u64 = 256 << 20;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 100_000_000,
            max_tensors: 10_000_000,
            max_rank: 64,
            max_index_bytes: 256 << 20,
            max_gguf_string: 1 << 30,
            max_gguf_array: 1 << 30,
            max_meta_values: 1 << 24,
            max_meta_keys: 10_000,
            max_deflate_ratio: 1050,
            max_inflate_bytes: 1 << 30,
            max_side_file: Limits::DEFAULT_MAX_SIDE_FILE,
            max_imatrix_entries: 1 << 20,
            max_imatrix_name: 4096,
            max_imatrix_values: 1 << 28,
            max_unpacked_bytes: 16 << 30,
            max_unpack_ratio: 10_000,
            max_unpack_depth: 8,
            pickle: PickleLimits::default(),
        }
    }
}

/// Caps the pickle interpreter applies (docs/specs/pickle.md §0.4 defaults). Real state-dict
/// pickles are kilobytes to a few megabytes.
#[derive(Debug, Clone)]
pub struct PickleLimits {
    /// Largest pickle accepted.
    pub max_pickle_bytes: u64,
    /// Largest number of opcodes executed.
    pub max_opcodes: u64,
    /// Deepest value stack.
    pub max_stack: usize,
    /// Most memo entries.
    pub max_memo: usize,
    /// Deepest container nesting (and metastack of marks).
    pub max_depth: u32,
    /// Largest tensor rank.
    pub max_rank: usize,
    /// Longest `LONG1`/`LONG4` integer, in bytes.
    pub max_long_bytes: usize,
    /// Most values expanded when describing metadata (memo references shared in the VM are
    /// expanded there, so this caps a "billion laughs").
    pub max_expanded: u64,
}

impl Default for PickleLimits {
    fn default() -> Self {
        PickleLimits {
            max_pickle_bytes: 1 << 30,
            max_opcodes: 1 << 28,
            max_stack: 1 << 20,
            max_memo: 1 << 24,
            max_depth: 256,
            max_rank: 64,
            max_long_bytes: 1024,
            max_expanded: 1 << 20,
        }
    }
}

/// What a reader is told when it opens a file: the caps, and the few per-format choices a user
/// can make on the command line. Readers ignore the fields that do not concern them.
#[derive(Debug, Clone)]
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
    /// Where inputs come from: the registry opens every input through it, and readers of
    /// multi-file sets open the other files of the set through it. Default: the process's
    /// storage ([`crate::mapped::set_default_storage`]), else local files, mapped
    /// ([`crate::mapped::LocalFiles`]).
    pub storage: std::sync::Arc<dyn crate::bytes::Storage>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            limits: Limits::default(),
            void2_as_bf16: false,
            key: None,
            shared_copy: false,
            inert_objects: false,
            one_part: false,
            storage: crate::mapped::default_storage(),
        }
    }
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
