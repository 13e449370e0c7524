//! weightport-core: the tensor model every weightport crate shares.
//!
//! * [`DType`]: every element type of safetensors and ggml, with checked byte sizes
//!   (sub-byte types in bits, block-quantized types in bytes per block).
//! * [`TensorInfo`] and [`Metadata`]: what readers learn from headers alone.
//! * [`TensorSource`] and [`TensorSink`]: the traits each format implements; their docs state
//!   the call protocol.
//! * [`ByteSource`]: the one seam every reader reads its input through (ranges of a named
//!   object with a size and an identity); [`bytes`] states its protocol, [`mapped`] holds the
//!   local files (mapped: where zero-copy lives) and their page hints.
//! * [`Error`]: one error enum, with exit codes; [`Knob`]: the options its messages point to,
//!   spelled by the front end; [`Limits`]: caps on sizes read from files.
//! * [`hash`]: container-independent content hashes used to verify every emitted file.
//! * [`format`]: the format enum and content sniffing (never trust an extension).
//! * [`staging`]: temp files beside their target, no-replace renames, output locks;
//!   [`staged`]: the staged files every sink writes through; [`descriptors`]: their open
//!   descriptors, cached and bounded; [`io_counts`]: the writes, opens and syncs a job made; [`kernel_copy`]: identity ranges
//!   of mapped inputs copied into outputs by the kernel.
#![deny(missing_docs)]

pub mod archive;
pub mod bytes;
mod contain;
mod descriptors;
mod dtype;
mod error;
mod format;
pub mod hash;
pub mod io_counts;
pub mod kernel_copy;
mod knob;
mod limits;
pub mod mapped;
mod multi;
pub mod registry;
pub mod source;
pub mod staged;
pub mod staging;
mod tensor;

pub use bytes::{ByteSource, Identity, Storage};
pub use contain::{contain_panic, panic_is_contained};
pub use dtype::{CastRule, DType, Layout, SizeError};
pub use error::{sanitize, shown, Error, Location, Result};
pub use format::{sniff, Format, Lookalike, Sniffed};
pub use hash::ContentHash;
pub use io_counts::{IoCounter, IoCounts};
pub use knob::{spell_knobs_with, Knob};
pub use limits::{Limits, PickleLimits, ReadOptions};
pub use multi::MultiSource;
pub use source::{Access, FinishedFile, Plan, StagedFile, TensorSink, TensorSource, WrittenFile};
pub use tensor::{MetaType, MetaValue, Metadata, TensorInfo};
