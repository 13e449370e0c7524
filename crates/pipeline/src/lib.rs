//! weightport-pipeline: everything between the command line and the format crates.
//!
//! ```text
//! inputs ─registry (probe by content)→ TensorSource
//!        ─plan→ output tensors, each an input + an operation (identity, cast, …); a release
//!               going to a format that plans by architecture is planned by the arch crate's
//!               table (by_arch)
//!        ─registry (output format)→ every file, header and offset fixed
//!        ─prepare→ lock the output, finish killed commits, refuse overwrites, check space
//!        ─execute (rayon, unit-aligned chunks, zero-copy)→ positional writes into temp files
//!        ─verify→ reopen each file strictly, recompute content hashes (and for lossless
//!                  operations, map back and compare with the source)
//!        ─commit→ fsync, journal, ordered renames (weights, index, companions), stale removal
//! ```
//! Many outputs of one input ([`convert_many`]) are planned and prepared each, executed in one
//! pass that reads each input range once ([`shared_read`]), then verified and committed each.
//! Only this crate schedules threads; it never prints (progress goes through [`Progress`]).
#![deny(missing_docs)]

pub mod by_arch;
pub mod cancel;
pub mod convert;
pub mod exec;
pub mod importance;
pub mod input;
pub mod lineage;
pub mod many;
pub use weightport_arch::mix;
pub mod plan;
pub mod planned;
pub mod registry;
pub mod shared_read;
pub mod side;
pub mod transform;
pub mod txn;
pub mod units;
pub mod verify;
pub mod workers;

pub use convert::{
    convert, convert_input, convert_source, route, ConvertOptions, ConvertReport, FileReport, Route,
};
pub use exec::{hash_source, NoProgress, Progress};
pub use input::{open_input, open_inputs, Input};
pub use many::{convert_many, ManyReport};
pub use weightport_core::registry::OpenRequest;
pub use weightport_core::MultiSource;
