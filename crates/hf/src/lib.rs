//! weightport-hf: the conventions of Hugging Face model repos.
//!
//! * [`shard`]: `model-00001-of-00004.safetensors` names and huggingface_hub's greedy split.
//! * [`index`]: reading `*.index.json` (with path-traversal refusal) and writing it exactly as
//!   transformers 5 does.
//! * [`size`]: `500MB` / `5GB` (decimal) / `5GiB` (binary) size strings.
//! * [`repo`]: where a repo directory keeps its weights and which companion files to copy.
#![deny(missing_docs)]

pub mod index;
pub mod repo;
pub mod shard;
pub mod size;

pub use index::{read_index, render_index, Index};
pub use repo::{companion_files, find_weights, Weights};
pub use shard::{assign, shard_name};
pub use size::parse_size;
