//! The root integration tests: one binary (each former tests/*.rs is a module here), so the
//! CLI and its dependencies link once instead of once per file.

mod common;

mod casts;
mod cli;
mod commit_safety;
mod edit;
mod edit_kill;
mod edit_protocol;
mod fanout;
mod gguf;
mod hf_gguf;
mod hf_gguf_archs4;
mod hf_gguf_dense2;
mod hf_gguf_dense3;
mod hf_gguf_enc;
mod hf_gguf_fp8;
mod hf_gguf_moe2;
mod hf_gguf_ssm;
mod imatrix;
mod interop;
mod io_guard;
mod jobs;
mod json_schema;
mod kernel_copy;
mod late_duplicate;
mod library;
mod lora;
mod lora_llama;
mod messages;
mod mmproj;
mod nan_payloads;
mod pickle;
mod plan_hostile;
mod provenance;
mod quality;
mod recipes;
mod remote_ahead;
mod remote_hub;
mod scan;
mod side_files;
mod slurm;
mod units;
