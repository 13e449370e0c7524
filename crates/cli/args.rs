//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use weightport_core::DType;
use weightport_pipeline::plan::DtypeChoice;

/// Move model weights between formats safely and fast.
#[derive(Parser, Debug)]
#[command(name = "weightport", version, about, long_about = None)]
pub struct Cli {
    /// Print one JSON document on stdout instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    /// Worker threads (default: one per core; at most 256).
    #[arg(long, global = true, value_name = "N")]
    pub threads: Option<usize>,
    /// Memory budget for buffers (default: 1 GiB or a quarter of RAM, whichever is less);
    /// threads are reduced rather than the budget exceeded.
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_size)]
    pub max_memory: Option<u64>,
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
    /// Output format instead of the guess from OUTPUT (`safetensors`, `hf-repo`).
    #[arg(long, value_name = "FORMAT")]
    pub to: Option<String>,
    /// Cast floating-point tensors: keep (default), f32, f16 or bf16.
    #[arg(long, value_name = "DTYPE", default_value = "keep", value_parser = parse_dtype)]
    pub dtype: DtypeChoice,
    /// Cast only tensors whose (output) name matches this regex.
    #[arg(long, value_name = "REGEX")]
    pub dtype_filter: Option<String>,
    /// Allow narrowing casts that turn finite values into ±inf (BF16→F16).
    #[arg(long)]
    pub allow_lossy: bool,
    /// Rename tensors, sed style (`s/^params\//model./`); repeatable, applied in order.
    #[arg(long, value_name = "s/PAT/REP/")]
    pub rename: Vec<String>,
    #[command(flatten)]
    pub read: ReadArgs,
}

/// How inputs are read (convert, inspect, verify).
#[derive(Args, Debug, Clone, Default)]
pub struct ReadArgs {
    /// Input format instead of sniffing (still validated against the content).
    #[arg(long, value_name = "FORMAT")]
    pub from: Option<String>,
    /// Read exactly the tensors an index names, even if the repo holds shards it does not name
    /// or its total_size disagrees.
    #[arg(long)]
    pub index_only: bool,
    /// NumPy: read the ambiguous 2-byte void dtype `<V2` (ml_dtypes/JAX bfloat16) as this.
    #[arg(long, value_name = "bf16", value_parser = ["bf16"])]
    pub void2_as: Option<String>,
    /// PyTorch: the dotted path of the nested dict of tensors to convert (`state_dict`,
    /// `model.ema`, …); by default the top-level dict or its single state_dict-like child.
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// PyTorch: tensors sharing storage: `auto` keeps one name per exact alias (as convert.py),
    /// `copy` writes every name.
    #[arg(long, value_name = "auto|copy", default_value = "auto", value_parser = ["auto", "copy"])]
    pub shared: String,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// A weights file, an `*.index.json`, or an HF repo directory.
    #[arg(value_name = "INPUT")]
    pub input: PathBuf,
    #[command(flatten)]
    pub read: ReadArgs,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// A weights file, an `*.index.json`, or an HF repo directory.
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// Also require every tensor to equal this source's (same names, dtypes, shapes, bytes).
    #[arg(long, value_name = "SOURCE")]
    pub against: Option<PathBuf>,
    #[command(flatten)]
    pub read: ReadArgs,
}

fn parse_size(s: &str) -> Result<u64, String> {
    weightport_hf::parse_size(s)
}

fn parse_dtype(s: &str) -> Result<DtypeChoice, String> {
    match s.to_ascii_lowercase().as_str() {
        "keep" => Ok(DtypeChoice::Keep),
        "f32" | "float32" => Ok(DtypeChoice::To(DType::F32)),
        "f16" | "float16" => Ok(DtypeChoice::To(DType::F16)),
        "bf16" | "bfloat16" => Ok(DtypeChoice::To(DType::BF16)),
        _ => Err(format!("`{s}`: expected keep, f32, f16 or bf16")),
    }
}
