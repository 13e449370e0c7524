//! weightport-hf: the conventions of Hugging Face model repos.
//!
//! * [`shard`]: `model-00001-of-00004.safetensors` names and huggingface_hub's greedy split.
//! * [`index`]: reading `*.index.json` (with path-traversal refusal) and writing it exactly as
//!   transformers 5 does.
//! * [`size`]: `500MB` / `5GB` (decimal) / `5GiB` (binary) size strings.
//! * [`repo`]: where a repo directory keeps its weights and which companion files to copy.
//! * [`registration`]: the repo input ([`REPO`]) and repo output ([`OUTPUT`]) of the registry.
#![deny(missing_docs)]

mod config_dtype;
pub mod index;
mod registration;
mod repo;
pub mod shard;
mod size;

pub use index::{read_index, render_index, Index};
pub use registration::{open_index, OUTPUT, REPO};
pub use repo::{companion_files, find_weights, resolve_in_repo, Weights};

/// huggingface_hub's default `max_shard_size`.
pub const DEFAULT_SHARD_SIZE: u64 = 5_000_000_000;
pub use shard::{assign, shard_name};
pub use size::parse_size;
