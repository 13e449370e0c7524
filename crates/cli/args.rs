//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use weightport_core::DType;
use weightport_engine::DtypeChoice;

/// Move model weights between formats safely and fast.
#[derive(Parser, Debug)]
#[command(name = "weightport", version, long_version = long_version(), about, long_about = None)]
pub(crate) struct Cli {
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
pub(crate) enum Command {
    /// Convert, reshard or merge weights (verified, atomic).
    Convert(Box<ConvertArgs>),
    /// Show format, tensors, dtypes, shapes, metadata and sizes (reads headers only).
    Inspect(InspectArgs),
    /// Strictly validate a file or repo and hash every tensor; compare with another source.
    Verify(VerifyArgs),
    /// Audit files that can carry code (pickles of any protocol, torch ZIP/legacy/TorchScript,
    /// NumPy) without running them: every global and call, opcode counts, records, non-tensor
    /// entries; verdict safe (exit 0) or unsafe (exit 3, also when a file could not be read).
    /// A directory scans every file under it.
    Scan(ScanArgs),
    /// Run a job file (TOML): many inputs, each converted into many outputs with their own
    /// options; a rerun skips the outputs that still verify against what it recorded.
    Run(RunArgs),
    /// Plan a conversion as N independent units for a batch engine (Slurm array, Kubernetes
    /// Indexed Job, CI matrix, xargs -P): writes the plan file `unit` and `finish` read.
    Plan(Box<PlanArgs>),
    /// Run one unit of a plan (index from --index, SLURM_ARRAY_TASK_ID or
    /// JOB_COMPLETION_INDEX); rerunning a finished unit does nothing.
    Unit(UnitArgs),
    /// Check every unit of a plan, assemble, verify and commit the output.
    Finish(FinishArgs),
    /// Change tensors of a safetensors file, HF repo or GGUF in place: only the changed bytes
    /// are written, behind an undo journal made durable first; a killed edit is rolled back by
    /// the next command that opens the file.
    Edit(Box<EditArgs>),
    /// Compare two checkpoints tensor by tensor, across formats and sharding: exit 0 when
    /// equal, 1 when not (as cmp).
    Diff(DiffArgs),
    /// Write the changed row blocks of NEW against OLD as a safetensors patch, which
    /// `edit OLD --apply PATCH` turns into a file byte-identical to NEW.
    Delta(DeltaArgs),
    /// Write a slice of one tensor as .npy or .safetensors, reading only its bytes.
    Slice(SliceArgs),
}

#[derive(Args, Debug)]
pub(crate) struct EditArgs {
    /// A safetensors file, an HF repo of safetensors shards (directory or index), or a GGUF.
    #[arg(value_name = "TARGET")]
    pub target: PathBuf,
    /// Set elements: numpy basic slicing on any axes (`a:b`, `:`, negative indices, an int,
    /// `...`), VALUE cast as torch casts a Python number into the tensor's dtype (`0`, `-inf`,
    /// `1e-3`). A quantized GGUF tensor: whole rows only. Repeatable.
    #[arg(long = "set", value_name = "NAME[SLICE]=VALUE")]
    pub set: Vec<String>,
    /// A safetensors file of masks named like the target's tensors (bool, ints or floats,
    /// broadcast to their shapes): elements whose mask is not > 0 become 0. Repeatable.
    #[arg(long, value_name = "FILE")]
    pub mask: Vec<PathBuf>,
    /// A safetensors file of tensors to add, named like the target's (computed in f32 and cast
    /// back as torch's .to() does; F64 in f64). Repeatable.
    #[arg(long, value_name = "FILE")]
    pub add: Vec<PathBuf>,
    /// Take tensors (`FILE`) or one tensor's selection (`FILE::NAME[SLICE]`) from another file
    /// of the same dtype and shape (for a quantized GGUF tensor: float rows, quantized as
    /// convert --quant does). Repeatable.
    #[arg(long, value_name = "FILE[::NAME[SLICE]]")]
    pub replace: Vec<String>,
    /// Apply a patch from `weightport delta`: the result is byte-identical to the file it was
    /// made from; a base whose sha256 differs is refused.
    #[arg(long, value_name = "PATCH", conflicts_with_all = ["set", "mask", "add", "replace"])]
    pub apply: Option<PathBuf>,
    /// Report what would change (tensors, byte ranges, elements); write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Keep the undo journal, so `--undo` can revert this edit.
    #[arg(long)]
    pub keep_undo: bool,
    /// After the edit, re-hash every byte outside the changed ranges and compare with before.
    #[arg(long)]
    pub verify_rest: bool,
    /// Roll back an edit that was killed (any command opening the file does it too).
    #[arg(long, conflicts_with_all = ["set", "mask", "add", "replace", "apply", "undo", "dry_run", "keep_undo", "verify_rest"])]
    pub recover: bool,
    /// Revert the last edit made with --keep-undo, if the bytes it wrote are still there.
    #[arg(long, conflicts_with_all = ["set", "mask", "add", "replace", "apply", "dry_run", "keep_undo", "verify_rest"])]
    pub undo: bool,
    /// The command line (kept after parsing: the order of the operations).
    #[arg(skip)]
    pub argv: Vec<std::ffi::OsString>,
}

#[derive(Args, Debug)]
pub(crate) struct DiffArgs {
    /// A weights file, an index or an HF repo directory.
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The other one (any format weightport reads).
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Absolute tolerance: elements with |a - b| <= atol + rtol*|b| count as the same.
    #[arg(long, value_name = "X")]
    pub atol: Option<f64>,
    /// Relative tolerance (see --atol).
    #[arg(long, value_name = "X")]
    pub rtol: Option<f64>,
    #[command(flatten)]
    pub read: ReadArgs,
}

#[derive(Args, Debug)]
pub(crate) struct DeltaArgs {
    /// The base file (safetensors or GGUF).
    #[arg(value_name = "OLD")]
    pub old: PathBuf,
    /// The changed file (same header and length).
    #[arg(value_name = "NEW")]
    pub new: PathBuf,
    /// The patch to write (`.safetensors`).
    #[arg(short = 'o', long = "output", value_name = "PATCH.safetensors")]
    pub output: PathBuf,
    /// Replace an existing patch file.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub(crate) struct SliceArgs {
    /// A weights file, an index or an HF repo directory (any format weightport reads).
    #[arg(value_name = "INPUT")]
    pub input: PathBuf,
    /// The tensor and the slice: `NAME[a:b, :, 3]` (numpy basic slicing).
    #[arg(value_name = "NAME[SLICE]")]
    pub selection: String,
    /// The output: `.npy` or `.safetensors`.
    #[arg(short = 'o', long = "output", value_name = "OUT.npy|OUT.safetensors")]
    pub output: PathBuf,
    /// Replace an existing output file.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub read: ReadArgs,
}

#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    /// The job file (TOML: `[defaults]`, `[[job]]` with `input` and `[[job.output]]`; see
    /// docs/jobs.md).
    #[arg(value_name = "JOB.toml")]
    pub job: PathBuf,
    /// Plan every output (files, types, disk needed, refusals) and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Replace outputs that exist without a record of this job having made them.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub(crate) struct PlanArgs {
    #[command(flatten)]
    pub convert: ConvertArgs,
    /// Split the conversion into exactly N units.
    #[arg(
        long,
        value_name = "N",
        required_unless_present = "unit_size",
        conflicts_with = "unit_size"
    )]
    pub units: Option<usize>,
    /// Split the conversion into units of about SIZE bytes read + written each.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub unit_size: Option<u64>,
    /// Units write straight into one staging file per output file, at their offsets, and
    /// finish publishes it: no part is copied or appended. Needs a filesystem where machines
    /// may write disjoint ranges of one file (local, NFS, Lustre, GPFS, CephFS); not an
    /// object-store mount, nor runners that share no filesystem (see docs/units.md).
    #[arg(long)]
    pub in_place: bool,
    /// The plan file to write (default: OUTPUT.plan.json beside the output).
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// The command line after the program name, kept in the plan file.
    #[arg(skip)]
    pub argv: Vec<String>,
}

#[derive(Args, Debug)]
pub(crate) struct UnitArgs {
    /// The plan file `weightport plan` wrote.
    #[arg(value_name = "PLAN")]
    pub plan: PathBuf,
    /// The unit to run, from 0 (default: $SLURM_ARRAY_TASK_ID, else $JOB_COMPLETION_INDEX).
    #[arg(long, value_name = "I")]
    pub index: Option<usize>,
}

#[derive(Args, Debug)]
pub(crate) struct FinishArgs {
    /// The plan file `weightport plan` wrote.
    #[arg(value_name = "PLAN")]
    pub plan: PathBuf,
}

#[derive(Args, Debug)]
pub(crate) struct ScanArgs {
    /// A file, or a directory to scan recursively (every file is sniffed by content;
    /// symlinks are followed under convert's rule).
    #[arg(value_name = "INPUT")]
    pub input: PathBuf,
    /// Report format: a table, one JSON document (as --json), or SARIF 2.1.0 for code
    /// scanning services.
    #[arg(long, value_enum, default_value = "text")]
    pub format: ScanFormat,
}

/// How `scan` reports.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScanFormat {
    /// A table.
    Text,
    /// One JSON document.
    Json,
    /// SARIF 2.1.0.
    Sarif,
}

#[derive(Args, Debug)]
pub(crate) struct ConvertArgs {
    /// Input files, an `*.index.json`, or an HF repo directory.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
    /// Output: `*.safetensors` for one file, `*.gguf`, otherwise a repo directory
    /// (`model.safetensors`, or `model-0000i-of-0000n.safetensors` + index). Repeatable: every
    /// output is made from one read of the input, each with the options given here plus its
    /// own after a colon (`-o m-Q8_0.gguf:quant=Q8_0`, `-o repo:shard_size=2GB,force`; keys
    /// as in job files, see docs/jobs.md).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "OUTPUT[:KEY=VALUE,…]",
        required = true
    )]
    pub outputs: Vec<PathBuf>,
    /// The one output (set from `outputs` after parsing).
    #[arg(skip)]
    pub output: PathBuf,
    /// The command line (kept after parsing, for the outputs of a multi-output conversion).
    #[arg(skip)]
    pub argv: Vec<std::ffi::OsString>,
    /// Largest shard of a repo output, or split of a GGUF output: `500MB`, `5GB` (decimal),
    /// `5GiB` (binary) or bytes. Default 5GB for repos, unsplit for GGUF.
    #[arg(long, alias = "split-max-size", value_name = "SIZE", value_parser = parse_size)]
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
    /// Cast floating-point tensors: keep (default), f32, f16 or bf16. An HF release going to
    /// GGUF follows convert_hf_to_gguf.py's --outtype: auto (= keep: BF16 stays BF16, else
    /// F16), f32, f16, bf16 or q8_0; 1-D and norm tensors stay F32.
    #[arg(long, alias = "outtype", value_name = "DTYPE", default_value = "keep", value_parser = parse_dtype)]
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
    /// Write an in-toto Statement v1 of the conversion to FILE: every output file with its
    /// sha256 (the subjects), every input file with its sha256, the command and options, and
    /// per output tensor its source tensors with content hashes.
    #[arg(long, value_name = "FILE", conflicts_with = "dry_run")]
    pub attest: Option<PathBuf>,
    /// Write the quality report (per quantized or narrowed tensor: RMSE, max abs and relative
    /// error, share clipped; a per-layer chart) as a static HTML page to FILE.
    #[arg(long, value_name = "FILE.html", conflicts_with = "dry_run")]
    pub report: Option<PathBuf>,
    /// A PEFT LoRA adapter directory converted to a GGUF adapter: the base model's directory
    /// (only its config.json is read). Default: the adapter's `base_model_name_or_path`, when
    /// that is a local directory.
    #[arg(long, value_name = "BASE_DIR")]
    pub base: Option<PathBuf>,
    /// Merge a PEFT LoRA adapter directory into the weights as they stream (`W + scale·B·A`,
    /// PEFT's scale: alpha/r, rsLoRA, rank and alpha patterns); repeatable, merged in order.
    #[arg(long, value_name = "ADAPTER_DIR")]
    pub merge_lora: Vec<PathBuf>,
    /// A factor on every merged adapter's scale (default 1; negative subtracts an adapter).
    #[arg(
        long,
        value_name = "S",
        requires = "merge_lora",
        allow_negative_numbers = true,
        value_parser = parse_scale
    )]
    pub lora_scale: Option<f64>,
    /// An HF vision-language release converted to GGUF: write its multimodal projector (the
    /// vision tower and projector as a `clip` file for llama.cpp's mtmd, as
    /// `convert_hf_to_gguf.py --mmproj`) instead of its text model.
    #[arg(long, conflicts_with_all = ["merge_lora", "base"])]
    pub mmproj: bool,
    #[command(flatten)]
    pub read: ReadArgs,
    #[command(flatten)]
    pub quant: QuantArgs,
}

/// GGUF outputs: llama-quantize's options.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct QuantArgs {
    /// Quantize to this llama-quantize file type: Q8_0, Q6_K, Q5_K_M, Q5_K_S, Q4_K_M, Q4_K_S,
    /// Q3_K_L, Q3_K_M, Q3_K_S, Q2_K, Q2_K_S, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_XS, IQ4_NL, IQ3_M,
    /// IQ3_S, IQ3_XS, IQ3_XXS, IQ2_M, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_M, IQ1_S (also F16, BF16, F32).
    #[arg(long, value_name = "TYPE")]
    pub quant: Option<String>,
    /// Every quantizable tensor gets the default type of --quant (no mix rules).
    #[arg(long, requires = "quant")]
    pub pure: bool,
    /// Override a tensor's type: `REGEX=TYPE` (repeatable; first match wins).
    #[arg(long, value_name = "REGEX=TYPE", requires = "quant")]
    pub tensor_type: Vec<String>,
    /// Type of output.weight.
    #[arg(long, value_name = "TYPE", requires = "quant")]
    pub output_tensor_type: Option<String>,
    /// Type of token_embd.weight.
    #[arg(long, value_name = "TYPE", requires = "quant")]
    pub token_embedding_type: Option<String>,
    /// Keep output.weight as it is.
    #[arg(long, requires = "quant")]
    pub leave_output_tensor: bool,
    /// Allow quantizing already-quantized tensors again.
    #[arg(long, requires = "quant")]
    pub allow_requantize: bool,
    /// Importance matrix from llama-imatrix (its GGUF file or the legacy .dat), as
    /// `llama-quantize --imatrix`; IQ1_*, IQ2_*, IQ3_XXS and Q2_K_S need one.
    #[arg(long, value_name = "FILE", requires = "quant")]
    pub imatrix: Option<PathBuf>,
    /// `--imatrix` as given, when it was a remote address its view's path replaced (without a
    /// URL's query): what `quantize.imatrix.file` records, as llama-quantize records the path.
    #[arg(skip)]
    pub imatrix_given: Option<String>,
    /// Use the importance matrix only for tensors whose name contains TEXT (repeatable; a
    /// plain substring, as llama-quantize).
    #[arg(
        long,
        value_name = "TEXT",
        requires = "imatrix",
        conflicts_with = "exclude_weights"
    )]
    pub include_weights: Vec<String>,
    /// Do not use the importance matrix for tensors whose name contains TEXT (repeatable; a
    /// plain substring, as llama-quantize).
    #[arg(long, value_name = "TEXT", requires = "imatrix")]
    pub exclude_weights: Vec<String>,
    /// `general.architecture` of a GGUF output (default: the source's, else `generic`). Given,
    /// an HF release keeps its tensor names instead of being converted by its architecture.
    #[arg(long, value_name = "NAME")]
    pub arch: Option<String>,
    /// HF release → GGUF: `general.name`, over the model card, `_name_or_path` and the
    /// directory name (the reference converter's `--model-name`).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// HF release → GGUF: a JSON object of `general.*` keys written over what the release's
    /// model card (README.md), config and directory name say (the reference's `--metadata`).
    #[arg(long, value_name = "FILE.json")]
    pub metadata: Option<PathBuf>,
    /// HF release → GGUF: the pre-tokenizer (`llama-bpe`, `qwen2`, …) for a BPE tokenizer whose
    /// check hash is not a known one.
    #[arg(long, value_name = "NAME")]
    pub pre_tokenizer: Option<String>,
    /// HF release → GGUF: leave the multi-token-prediction (NextN) layers out (GLM-4.5,
    /// Qwen3-Next, Qwen3.5), as the reference converter's `--no-mtp`.
    #[arg(long, alias = "no-nextn", conflicts_with = "mtp")]
    pub no_mtp: bool,
    /// HF release → GGUF: write only the multi-token-prediction layers with the embedding, the
    /// final norm and the head, a speculative draft (the reference converter's `--mtp`).
    #[arg(long)]
    pub mtp: bool,
}

/// How inputs are read (convert, inspect, verify).
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct ReadArgs {
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
    /// PyTorch: convert the tensors of a checkpoint whose other entries hold objects of classes
    /// off the allowlist (omegaconf configs, typing.Any), keeping each as an inert record that
    /// is listed, never called. By default such a file is refused (exit 3). `scan` still
    /// reports them.
    #[arg(long)]
    pub allow_inert_objects: bool,
}

#[derive(Args, Debug)]
pub(crate) struct InspectArgs {
    /// A weights file, an `*.index.json`, or an HF repo directory.
    #[arg(value_name = "INPUT")]
    pub input: PathBuf,
    #[command(flatten)]
    pub read: ReadArgs,
}

#[derive(Args, Debug)]
pub(crate) struct VerifyArgs {
    /// A weights file, an `*.index.json`, or an HF repo directory.
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// Also require every tensor to equal this source's (same names, dtypes, shapes, bytes).
    #[arg(long, value_name = "SOURCE")]
    pub against: Option<PathBuf>,
    /// Check the directory PATH against this in-toto statement (from `convert --attest`):
    /// every subject's sha256, and no file missing or extra. Exit 1 naming each difference.
    #[arg(long, value_name = "FILE", conflicts_with = "against")]
    pub attestation: Option<PathBuf>,
    #[command(flatten)]
    pub read: ReadArgs,
}

/// `weightport --version`: the version, then what this build has in it (this crate has no
/// optional cargo features: the formats it reads and writes are its features).
fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        use weightport_engine::registry::{INPUTS, OUTPUTS, REPOS};
        let reads: Vec<&str> = INPUTS.iter().map(|f| f.name).collect();
        let repos: Vec<&str> = REPOS.iter().map(|f| f.name).collect();
        let writes: Vec<&str> = OUTPUTS.iter().map(|f| f.name).collect();
        let build = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        format!(
            "{}\nreads:  {} (repos: {})\nwrites: {}\nbuild:  {build}, {}-{}",
            env!("CARGO_PKG_VERSION"),
            reads.join(", "),
            repos.join(", "),
            writes.join(", "),
            std::env::consts::ARCH,
            std::env::consts::OS,
        )
    })
}

fn parse_scale(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        Ok(_) => Err("expected a finite number".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    weightport_hf::parse_size(s)
}

fn parse_dtype(s: &str) -> Result<DtypeChoice, String> {
    match s.to_ascii_lowercase().as_str() {
        "keep" | "auto" => Ok(DtypeChoice::Keep),
        "q8_0" => Ok(DtypeChoice::To(DType::Q8_0)),
        "f32" | "float32" => Ok(DtypeChoice::To(DType::F32)),
        "f16" | "float16" => Ok(DtypeChoice::To(DType::F16)),
        "bf16" | "bfloat16" => Ok(DtypeChoice::To(DType::BF16)),
        _ => Err(format!(
            "`{s}`: expected keep, f32, f16 or bf16 (auto and q8_0 for HF → GGUF)"
        )),
    }
}
