//! weightport-engine: plan → execute → verify → commit, between the command line and the
//! format crates. It is the only crate that schedules threads; it never prints (progress goes
//! through [`Progress`]).
//!
//! # The protocol
//!
//! A caller (the CLI, the Python wheel, a test) converts in four calls, in this order:
//!
//! 1. **[`route`]`(&opts)`** decides, once and before any input is opened, how the inputs are
//!    opened ([`Route::open`]), the output, and the route's own value for planning the output
//!    tensors (by the options, by an architecture, a LoRA adapter, with adapters merged): what
//!    that route needs of the options. Planning reads the route, never the options. It
//!    refuses what can be refused from names and config files alone (an unknown output
//!    format, an unsupported architecture). Nothing is read or written.
//! 2. **[`open_inputs`]`(&opts.inputs, &route.open)`** opens every input through the format
//!    registry (probed by content, repos first) and joins them into one [`Input`]. The bytes
//!    are not read yet, only the headers. Outputs whose routes have equal open requests may
//!    share one `Input`.
//! 3. **[`convert_input`]`(&input, &route, progress)`** (one output) or
//!    **[`convert_many`]`(&input, &[route…], progress)`** (several outputs, each input
//!    byte read once) runs the rest, which the caller does not sequence:
//!    - *plan*: output tensors (each an input range and an operation), metadata, and the
//!      output format's plan, every file, header and offset fixed;
//!    - *prepare*: lock the output, finish a killed commit, refuse an overwrite without
//!      `force`, check the disk space (with `dry_run`, the report stops here);
//!    - *execute*: worker threads as [`Workers`] allows, unit-aligned chunks, positional writes
//!      into temp files beside the output;
//!    - *verify*: every temp file reopened strictly and its content hashes recomputed (for a
//!      lossless operation, mapped back and compared with the source);
//!    - *commit*: fsync, journal, ordered renames (weights, index, companions), stale removal.
//!
//!    A conversion either returns its [`ConvertReport`] with every output file visible and
//!    verified, or an error with nothing of the output visible and the inputs untouched.
//!
//! [`convert`] is the three calls in one, for one output. [`hash_source`] content-hashes an
//! opened input (verify's comparison). Interruption is cooperative: [`cancel::request`] makes
//! the running steps return an interruption error at their next chunk.
//!
//! # The job protocol (for a caller that writes the output files itself)
//!
//! A caller that spreads one conversion over many processes (the `weightport-units` crate)
//! runs the same plan, execution, verification and commit in pieces, in this order:
//!
//! 1. **[`plan`]`(&input, &route)`** (after steps 1 and 2 above) plans the output
//!    exactly as `convert_input` does, into a [`Job`]: its output tensors
//!    ([`Job::tensor`], [`Job::inputs`], [`Job::operation`]), the output
//!    format's plan ([`Job::output_plan`]) and, from the format's own sink, every staged file's
//!    header and tensor offsets ([`Job::stage`]). Nothing is written.
//! 2. **[`Job::execute`]`(&tensors, …, emit)`** computes any subset of the output tensors on
//!    [`Job::threads`] workers, handing every chunk to the caller's [`Emit`] (positional
//!    writes into files of the caller's), and returns each tensor's content hash. A chunk's
//!    bytes do not depend on the process or thread that computes it.
//! 3. **[`Job::prepare`]** locks and checks the output (refusals as `convert`'s; with
//!    `dry_run`, nothing changes), **[`Job::verify`]** checks each staged file as `convert`
//!    does (reopened strictly, every tensor's content hash), and **[`Job::commit`]** publishes
//!    the files with `convert`'s transaction ([`Committed`]).
//!
//! Besides the protocols: [`registry`] (which formats exist; adding one), [`side`] (files
//! written beside an output: statements, reports, plan files), [`importance`] (importance
//! matrices for `--imatrix`), [`cancel`] (signals).
//!
//! # Inside
//!
//! `route` (the options and the route decided for them), `routes` (one value per route and
//! how it plans the output tensors: `by_options` for option-driven tensors, `by_arch` for an
//! architecture's, `merge` for merged adapters, `generated` for tensors computed in memory),
//! `convert` (one output's prepare, verify and commit around the executor), `planned` (the
//! plan: the route's tensors, then the output format's files),
//! `transform/` (one file per operation, the trait in its `mod.rs`), `exec` (the executor),
//! `fanout`/`one_read` (many outputs, one read), `verify`, `txn` (prepare and commit),
//! `lineage` (what provenance is handed), `workers` (threads, budget, pool). None of them is
//! public.
#![deny(missing_docs)]

mod by_arch;
mod by_options;
pub mod cancel;
mod convert;
mod dequantized;
mod exec;
mod fanout;
mod generated;
mod guarded;
pub mod importance;
mod input;
mod job;
mod lineage;
mod merge;
pub use weightport_arch::mix;
mod one_read;
mod planned;
pub mod registry;
mod route;
mod routes;
pub mod side;
mod transform;
mod txn;
mod verify;
mod workers;

pub use by_options::{DtypeChoice, QuantOptions, Rename, TransformOptions};
pub use convert::{
    convert, convert_input, convert_source, ConvertReport, FileReport, TensorReport,
    TransformReport,
};
pub use exec::{hash_source, NoProgress, Progress};
pub use fanout::{convert_many, ManyReport};
pub use input::{open_input, open_inputs, Input};
pub use job::{plan, Committed, Emit, Job, Prepared};
pub use lineage::{sha256_files, sha256_files_beside};
pub use route::{route, ConvertOptions, Route};
pub use transform::quality::Quality;
pub use transform::Transform;
pub use verify::{comparable_hashes, compare, NamedHashes};
/// The end of the usage error of a LoRA adapter whose base model is not found.
pub use weightport_arch::lora::NEEDS_BASE as ADAPTER_NEEDS_BASE;
pub use weightport_core::registry::OpenRequest;
pub use weightport_core::MultiSource;
pub use workers::{default_max_memory, ThreadsOutOfRange, Workers, MAX_THREADS};
