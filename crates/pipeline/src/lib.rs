//! weightport-pipeline: everything between the command line and the format crates.
//!
//! ```text
//! inputs ─sniff→ reader (TensorSource) ─plan→ sink (TensorSink: every offset fixed)
//!        ─execute (rayon, chunked, zero-copy)→ positional writes into temp files
//!        ─verify→ reopen each file strictly, recompute content hashes
//!        ─commit→ fsync, rename, write index.json, copy companion files
//! ```
//! Only this crate schedules threads; it never prints (progress goes through [`Progress`]).
#![deny(missing_docs)]

pub mod cancel;
pub mod convert;
pub mod exec;
pub mod input;
pub mod multi;
pub mod verify;

pub use convert::{convert, convert_source, ConvertOptions, ConvertReport, FileReport};
pub use exec::{hash_source, NoProgress, Progress};
pub use input::{open_file, open_index, open_input, Input};
pub use multi::MultiSource;
