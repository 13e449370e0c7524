//! weightport-gguf: a strict GGUF reader, a writer with llama.cpp's layout, and gguf-split
//! compatible split sets.
//!
//! # Byte layout (v3, little-endian; spec `gguf.md` §1.1, llama.cpp `ggml/src/gguf.cpp`)
//!
//! ```text
//! "GGUF"  u32 version  u64 n_tensors  u64 n_kv
//! n_kv      × { str key; u32 value_type; value }          str = u64 len + bytes
//! n_tensors × { str name; u32 n_dims; u64 ne[n_dims]; u32 ggml_type; u64 offset }
//! zero padding to ALIGNMENT (general.alignment, u32 power of two, default 32)
//! data: tensor i at data_start + offset_i, each zero-padded to ALIGNMENT
//! ```
//!
//! Values: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 str, 9 array
//! (`u32 elem_type; u64 count; elements`), 10 u64, 11 i64, 12 f64. `ne[0]` is the innermost
//! dimension, so a tensor's shape (outermost first, as [`TensorInfo::shape`] has it) is `ne`
//! reversed. Offsets must be exactly sequential: `offset_i = Σ_{k<i} align_up(nbytes_k)`.
//!
//! * [`open`] / [`GgufFile`]: reads v2 and v3 with every check of docs/specs/gguf.md §1.3 (the rules of
//!   llama.cpp's `gguf_init_from_file`, hardened: caps on counts, lengths and values; checked
//!   arithmetic; nested arrays, big-endian files, v1, removed and unknown type ids refused).
//!   Tensor bytes come zero-copy from a read-only map.
//! * [`layout`] / [`GgufSink`]: plan and write files byte-identical to llama.cpp's writer
//!   (and to gguf-py's, which shares the layout for the files it writes).
//! * [`split`]: gguf-split naming and keys; [`open_split`] reads a set as one source and
//!   [`GgufSink::split`] writes one.
//!
//! [`TensorInfo::shape`]: weightport_core::TensorInfo::shape
#![deny(missing_docs)]

pub mod header;
pub mod imatrix;
mod layout;
mod partition;
mod reader;
pub mod registration;
pub mod split;
mod types;
mod writer;

use std::path::Path;

use weightport_core::{ReadOptions, Result};

pub use header::{GgufHeader, GgufTensor, DEFAULT_ALIGNMENT};
pub use imatrix::{parse_imatrix, read_imatrix, read_imatrix_from, Imatrix, ImatrixEntry};
pub use layout::{encode_kv, layout, layout_with, GgufLayout, GgufTensorSpec, WriteOptions};
pub use reader::GgufFile;
pub use split::{GgufSplit, SplitOptions};
pub use writer::{write_file, GgufSink};

/// True when `head` (the first bytes of a file) starts with the GGUF magic. Big-endian files
/// and unsupported versions also answer true; [`open`] then says what is wrong with them.
pub fn probe(head: &[u8]) -> bool {
    head.starts_with(header::MAGIC)
}

/// Opens and validates one GGUF file.
pub fn open(path: &Path, opts: &ReadOptions) -> Result<GgufFile> {
    GgufFile::open(path, opts)
}

/// Opens a gguf-split set given any of its files (a plain file opens as a set of one).
pub fn open_split(path: &Path, opts: &ReadOptions) -> Result<GgufSplit> {
    split::open_split(path, opts)
}
