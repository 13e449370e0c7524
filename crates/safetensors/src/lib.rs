//! weightport-safetensors: a strict safetensors reader/validator and a parallel, byte-exact
//! writer.
//!
//! * [`SafetensorsFile`] opens a file, applies every rule of the reference in its order with
//!   checked arithmetic (plus duplicate-name rejection), and serves tensor bytes zero-copy from
//!   a read-only map.
//! * [`writer::layout`] plans a file exactly as `safetensors.torch.save_file` lays it out;
//!   [`SafetensorsSink`] writes planned files in parallel with positional writes into
//!   pre-sized temp files, handed to the pipeline's commit when finished.
//! * [`INPUT`] and [`OUTPUT`] are its format-registry entries.
#![deny(missing_docs)]

mod dtypes;
mod header;
mod reader;
pub mod registration;
mod writer;

pub use reader::SafetensorsFile;
pub use registration::{INPUT, OUTPUT};
pub use writer::{layout, write_file, FileLayout, SafetensorsSink};
