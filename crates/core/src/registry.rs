//! The shapes of format registrations (the lists live in weightport-engine).
//!
//! * An [`InputFormat`] is a content probe (first bytes, and for ZIP the central directory:
//!   never the extension) plus an `open` that validates headers and returns a
//!   [`TensorSource`]. Both are handed the input as a [`ByteSource`] (opened by the registry
//!   through [`ReadOptions::storage`]), so no reader knows where its bytes come from.
//! * A [`RepoFormat`] turns a directory or an index file into its weight files (HF repos, GGUF
//!   split sets); each weight file is opened through the input formats (the `open_file`
//!   callback), so a repo of `.bin` shards works like one of safetensors shards.
//! * An [`OutputFormat`] is a pure `plan` (every file, its exact size, and the extra files such
//!   as index.json and copied companions: what `--dry-run` and the free-space check use), and a
//!   `sink` that writes exactly that plan. It also says which dtypes it can store (`stores`):
//!   the output plan dequantizes what it cannot.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::bytes::ByteSource;
use crate::dtype::DType;
use crate::error::Result;
use crate::format::Format;
use crate::limits::ReadOptions;
use crate::source::{TensorSink, TensorSource};
use crate::tensor::{Metadata, TensorInfo};

/// Validates an input already opened as a source ([`InputFormat::open`]).
pub type OpenSource =
    fn(src: Arc<dyn ByteSource>, opts: &ReadOptions) -> Result<Box<dyn TensorSource>>;

/// Opens one weights file through the registry (handed to [`RepoFormat::open`]).
pub type OpenFile<'a> = &'a dyn Fn(&Path) -> Result<Box<dyn TensorSource>>;

/// An input format.
pub struct InputFormat {
    /// The name users give to `--from`.
    pub name: &'static str,
    /// The container format.
    pub format: Format,
    /// True when the source's content is this format (`head`: its first bytes, up to 4 KiB;
    /// `src` the whole input, for formats told apart by more than their first bytes).
    pub probe: fn(src: &dyn ByteSource, head: &[u8]) -> bool,
    /// Opens and validates the source.
    pub open: OpenSource,
}

/// What a repo resolves to.
pub struct RepoInput {
    /// The weights, as one source.
    pub source: Box<dyn TensorSource>,
    /// The directory whose companion files travel with the weights.
    pub dir: PathBuf,
    /// The file that decided what was read (index or single weights file).
    pub chosen: PathBuf,
    /// Things the user should know about the choice (shown by `inspect` and `convert`).
    pub notes: Vec<String>,
}

/// A multi-file layout: a directory, or an index naming shards.
pub struct RepoFormat {
    /// Name, for messages.
    pub name: &'static str,
    /// True when `path` (a directory or a file) is this kind of repo.
    pub claims: fn(path: &Path) -> bool,
    /// Opens it; every weight file goes through `open_file`.
    pub open: fn(path: &Path, opts: &OpenRequest, open_file: OpenFile) -> Result<RepoInput>,
}

/// Everything needed to open an input.
#[derive(Debug, Clone, Default)]
pub struct OpenRequest {
    /// Reader options (limits, per-format choices).
    pub read: ReadOptions,
    /// `--from`: the input format to use instead of sniffing (still validated by its probe).
    pub from: Option<String>,
    /// Read exactly the tensors an index names, without requiring every shard file of the repo
    /// and `total_size` to agree with it.
    pub index_only: bool,
}

/// What an output format is asked to lay out.
pub struct OutputRequest<'a> {
    /// The `-o` path.
    pub target: &'a Path,
    /// The output tensors, in plan order.
    pub tensors: &'a [TensorInfo],
    /// Metadata to carry.
    pub metadata: &'a Metadata,
    /// Largest shard (repo outputs).
    pub shard_size: Option<u64>,
    /// The input repo directory, whose companion files are copied into a repo output.
    pub companions_from: Option<&'a Path>,
    /// The input's container format (a GGUF rewrite keeps llama.cpp's dims convention).
    pub source_format: Format,
    /// Every floating-point tensor was cast to this dtype (`--dtype` without a filter): a repo
    /// output's copied `config.json` says so, as `save_pretrained` would write it.
    pub float_dtype: Option<DType>,
    /// Where the sink counts the writes, opens and syncs of its files.
    pub io: crate::IoCounter,
}

/// One weights file of an output plan.
#[derive(Debug, Clone)]
pub struct PlannedFile {
    /// Final path.
    pub path: PathBuf,
    /// Exact size in bytes.
    pub size: u64,
    /// Indices of the output tensors it holds.
    pub tensors: Vec<usize>,
}

/// Content of an extra (non-weights) file of an output.
#[derive(Debug, Clone)]
pub enum ExtraContent {
    /// Bytes rendered at plan time (index.json, manifests).
    Bytes(Vec<u8>),
    /// A copy of an input file (config.json, tokenizer files…), as a regular file.
    CopyOf(PathBuf),
}

/// A non-weights file of an output.
#[derive(Debug, Clone)]
pub struct ExtraFile {
    /// Final path.
    pub path: PathBuf,
    /// What goes in it.
    pub content: ExtraContent,
    /// True for an index (published after the weights it names, before companions).
    pub is_index: bool,
}

impl ExtraFile {
    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        match &self.content {
            ExtraContent::Bytes(b) => b.len() as u64,
            ExtraContent::CopyOf(p) => std::fs::metadata(p).map(|m| m.len()).unwrap_or(0),
        }
    }
}

/// What an output format will write.
#[derive(Debug, Clone)]
pub struct OutputPlan {
    /// The directory everything goes into.
    pub dir: PathBuf,
    /// True when the output is a repo directory (created if missing).
    pub is_repo: bool,
    /// Weights files.
    pub files: Vec<PlannedFile>,
    /// Index and companion files.
    pub extras: Vec<ExtraFile>,
    /// Names in `dir` that belong to an earlier output of this format and are not part of this
    /// one (stale shards, an index beside a single file): removed by `--force` after the new
    /// files are published. Decided by the format, which knows its naming scheme.
    pub is_own_file: fn(name: &str) -> bool,
    /// Output tensors the format stores under another shape of the same elements, as
    /// `(index, stored shape)`: a GGUF rewrite drops the trailing 1s of `ne` as llama.cpp's
    /// writer does. The pipeline plans, reports and verifies these tensors with these shapes.
    pub reshaped: Vec<(usize, Vec<u64>)>,
}

/// An output format.
pub struct OutputFormat {
    /// The name users give to `--to`.
    pub name: &'static str,
    /// The container format of its weights files.
    pub format: Format,
    /// True when `-o PATH` names this format (by its name; content does not exist yet).
    pub claims: fn(path: &Path) -> bool,
    /// Pure layout: files, sizes, extras.
    pub plan: fn(&OutputRequest) -> Result<OutputPlan>,
    /// A sink writing exactly `plan`.
    pub sink: fn(&OutputRequest, &OutputPlan) -> Result<Box<dyn TensorSink>>,
    /// True when the format can store tensors of this dtype as they are.
    pub stores: fn(crate::DType) -> bool,
    /// A model file for an inference engine (llama.cpp's GGUF): an HF release going to it is
    /// planned by its architecture (the arch crate's names, hyper-parameter KVs and
    /// tokenizer), and its metadata always names an architecture.
    pub by_architecture: bool,
    /// Whose float conversions the format's casts reproduce (the tool that writes such files
    /// in practice: torch for safetensors, llama-quantize for GGUF).
    pub cast_rule: crate::CastRule,
}
