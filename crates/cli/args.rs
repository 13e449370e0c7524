//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Move model weights between formats safely and fast.
#[derive(Parser, Debug)]
#[command(name = "weightport", version, about, long_about = None)]
pub struct Cli {
    /// Print one JSON document on stdout instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    /// Worker threads (default: one per core).
    #[arg(long, global = true, value_name = "N")]
    pub threads: Option<usize>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Convert, reshard or merge weights (verified, atomic).
    Convert(ConvertArgs),
    /// Show format, tensors, dtypes, shapes, metadata and sizes (reads headers only).
    Inspect(InspectArgs),
    /// Strictly validate a file or repo and hash every tensor; compare with another source.
    Verify(VerifyArgs),
}

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// Input files, an `*.index.json`, or an HF repo directory.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
    /// Output: `*.safetensors` for one file, otherwise a repo directory
    /// (`model.safetensors`, or `model-0000i-of-0000n.safetensors` + index).
    #[arg(short, long, value_name = "OUTPUT")]
    pub output: PathBuf,
    /// Largest shard of a repo output: `500MB`, `5GB` (decimal), `5GiB` (binary) or bytes.
    /// Default 5GB, as huggingface_hub.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub shard_size: Option<u64>,
    /// Print the plan (files, sizes, disk needed) and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Replace existing outputs (and remove stale shards of an output repo).
    #[arg(long)]
    pub force: bool,
    /// Skip re-reading and hashing the written files (not recommended).
    #[arg(long)]
    pub no_verify: bool,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// A weights file, an `*.index.json`, or an HF repo directory.
    #[arg(value_name = "INPUT")]
    pub input: PathBuf,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// A weights file, an `*.index.json`, or an HF repo directory.
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// Also require every tensor to equal this source's (same names, dtypes, shapes, bytes).
    #[arg(long, value_name = "SOURCE")]
    pub against: Option<PathBuf>,
}

fn parse_size(s: &str) -> Result<u64, String> {
    weightport_hf::parse_size(s)
}
