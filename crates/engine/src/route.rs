//! What a conversion is asked to do ([`ConvertOptions`]) and the route decided for it once,
//! before any input is opened ([`route`]): how the inputs are opened, the output, and the
//! route's own value for planning the output tensors ([`crate::routes`]). Planning
//! ([`crate::planned`]) consumes the route, not the options; this module calls neither it nor
//! the conversion.

use std::path::PathBuf;
use std::sync::Arc;

use weightport_arch::lora::{self, AdapterConfig};
use weightport_core::hash;
use weightport_core::registry::{OpenRequest, OutputFormat};
use weightport_core::{shown, DType, Error, Result};

use crate::by_arch::AdapterRoute;
use crate::by_options::{DtypeChoice, TransformOptions};
use crate::merge::MergeAdapter;
use crate::registry::output_for;
use crate::routes::{is_release, ByAdapter, ByOptions, ByRelease, Merged, PlansTensors};
use crate::side::SideFile;
use crate::workers::Workers;

/// What to convert, and how.
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// Input files or repo directories.
    pub inputs: Vec<PathBuf>,
    /// Output path; its format is the one that claims it, or `to`.
    pub output: PathBuf,
    /// `--to`: the output format by name.
    pub to: Option<String>,
    /// Largest shard for repo output.
    pub shard_size: Option<u64>,
    /// Replace existing outputs.
    pub force: bool,
    /// Re-open and hash every emitted file before committing it (default on).
    pub verify: bool,
    /// Plan and check only: write nothing.
    pub dry_run: bool,
    /// How inputs are opened.
    pub open: OpenRequest,
    /// Casts and renames.
    pub transform: TransformOptions,
    /// Worker threads and the memory budget for buffers and mapped chunks.
    pub workers: Workers,
    /// Chunk (hash leaf) target size; [`hash::HASH_CHUNK`] except in tests.
    pub chunk: u64,
    /// Collect what the output was made of ([`ConvertReport::provenance`], for `--attest`).
    pub provenance: bool,
    /// Files the caller writes beside the output (`--attest`, `--report`): checked with the
    /// output, before anything is written ([`crate::side::check`]).
    pub side_files: Vec<SideFile>,
    /// The base model of a LoRA adapter input (its `config.json` is read); without it, the
    /// adapter's `base_model_name_or_path` when that is a local directory.
    pub lora_base: Option<PathBuf>,
    /// Write the multimodal projector of a vision-language release (its vision tower and
    /// projector as a `clip` GGUF) instead of its text model.
    pub mmproj: bool,
}

impl ConvertOptions {
    /// Options for converting `inputs` into `output` with every default.
    pub fn new(inputs: Vec<PathBuf>, output: PathBuf) -> Self {
        ConvertOptions {
            inputs,
            output,
            to: None,
            shard_size: None,
            force: false,
            verify: true,
            dry_run: false,
            open: OpenRequest::default(),
            transform: TransformOptions::default(),
            workers: Workers::default(),
            chunk: hash::HASH_CHUNK,
            provenance: false,
            side_files: Vec::new(),
            lora_base: None,
            mmproj: false,
        }
    }
}

/// The route of one conversion, decided once before any input is opened: how the inputs are
/// opened, the output, and the route's own value for planning the output tensors
/// ([`crate::routes`]: by the options, by an architecture, a LoRA adapter, with merges).
/// Planning consumes it, never the options.
#[derive(Clone)]
pub struct Route {
    /// How the inputs are opened. Outputs whose requests are equal can share one opened input
    /// ([`convert_input`], [`crate::convert_many`]).
    pub open: OpenRequest,
    /// The output, as its format is asked to plan it.
    pub(crate) output: Output,
    /// How the output tensors are planned.
    pub(crate) tensors: Arc<dyn PlansTensors>,
    /// How the conversion runs, checks and publishes the output.
    pub(crate) run: Run,
}

/// What the executor, the verification and the transaction are told of the options: decided
/// with the route, so no step after it reads [`ConvertOptions`].
#[derive(Clone)]
pub(crate) struct Run {
    /// The inputs as given (never replaced by the output; materials of its provenance).
    pub(crate) given: Vec<PathBuf>,
    /// The importance matrix: the path as given, and the file it was read from.
    pub(crate) imatrix: Option<(PathBuf, PathBuf)>,
    /// The metadata override file of an HF release → GGUF.
    pub(crate) metadata_file: Option<PathBuf>,
    /// Files the caller writes beside the output, checked with it.
    pub(crate) side_files: Vec<SideFile>,
    pub(crate) force: bool,
    pub(crate) verify: bool,
    pub(crate) dry_run: bool,
    /// Chunk (hash leaf) target size.
    pub(crate) chunk: u64,
    pub(crate) workers: Workers,
    /// Collect what the output was made of.
    pub(crate) provenance: bool,
    /// How a staged file is reopened to verify it (the options' request, as given).
    pub(crate) reopen: OpenRequest,
}

impl Run {
    fn of(opts: &ConvertOptions) -> Run {
        let imatrix = opts
            .transform
            .quant
            .as_ref()
            .and_then(|q| q.imatrix.as_ref());
        Run {
            given: opts.inputs.clone(),
            imatrix: imatrix.map(|m| (PathBuf::from(&m.file), m.path.clone())),
            metadata_file: opts.transform.metadata.clone(),
            side_files: opts.side_files.clone(),
            force: opts.force,
            verify: opts.verify,
            dry_run: opts.dry_run,
            chunk: opts.chunk,
            workers: opts.workers,
            provenance: opts.provenance,
            reopen: opts.open.clone(),
        }
    }
}

/// The output of a route: its format (from `--to`, or the output's name) and what the format
/// plans its files from.
#[derive(Clone)]
pub(crate) struct Output {
    pub(crate) format: &'static OutputFormat,
    pub(crate) target: PathBuf,
    pub(crate) shard_size: Option<u64>,
    /// The dtype every floating tensor is cast to, when `--dtype` applies to all of them.
    pub(crate) float_dtype: Option<DType>,
}

/// Decides the route of `opts` (see [`Route`]), after the checks made before an input is
/// opened: an HF release going to a format that plans by architecture is refused from its
/// config.json alone when its architecture is not supported.
pub fn route(opts: &ConvertOptions) -> Result<Route> {
    let format = output_for(&opts.output, opts.to.as_deref())?;
    // The format plans by architecture and `--arch` (names kept) was not given: an input read
    // as a release directory (a repo with a `config.json`) is planned by its architecture.
    let by_architecture = format.by_architecture && opts.transform.arch.is_none();
    let mut open = opts.open.clone();
    let adapter = adapter_route(opts, by_architecture)?;
    if let [dir] = opts.inputs.as_slice() {
        if adapter.is_none() && by_architecture && is_release(dir) {
            if opts.mmproj {
                weightport_arch::mmproj::check_within(dir, &opts.open.read.limits)?;
            } else {
                weightport_arch::check_supported_within(dir, &opts.open.read.limits)?;
            }
            // The reference reads a release with torch.load/safe_open, which give every name
            // of tied weights; its architecture code decides what to write.
            open.read.shared_copy = true;
        }
    }
    let mtp = opts.transform.no_mtp || opts.transform.mtp_only;
    if mtp && !(by_architecture && adapter.is_none() && !opts.mmproj) {
        return Err(Error::Usage(
            "leaving out or writing alone the multi-token-prediction layers applies to an HF \
             release converted to GGUF"
                .into(),
        ));
    }
    let merges = crate::merge::read_configs(&opts.transform.merge_lora, &opts.open.read.limits)?;
    if adapter.is_some() && !merges.is_empty() {
        return Err(Error::Usage(
            "a LoRA adapter converted to a GGUF adapter cannot have adapters merged into it".into(),
        ));
    }
    if opts.mmproj {
        check_mmproj_route(opts, by_architecture, &adapter, &merges)?;
    }
    let output = Output {
        format,
        target: opts.output.clone(),
        shard_size: opts.shard_size,
        float_dtype: float_dtype(&opts.transform, format.by_architecture),
    };
    let tensors = tensors_route(opts, format, (by_architecture, adapter), merges);
    Ok(Route {
        open,
        output,
        tensors,
        run: Run::of(opts),
    })
}

/// The route's value for planning the output tensors: what that route needs of the options.
fn tensors_route(
    opts: &ConvertOptions,
    format: &OutputFormat,
    (by_architecture, adapter): (bool, Option<AdapterRoute>),
    merges: Vec<MergeAdapter>,
) -> Arc<dyn PlansTensors> {
    let (transform, limits) = (&opts.transform, &opts.open.read.limits);
    let options = ByOptions {
        transform: transform.clone(),
        stores: format.stores,
        cast_rule: format.cast_rule,
        names_architecture: format.by_architecture,
    };
    let planned: Arc<dyn PlansTensors> = match adapter {
        Some(adapter) => Arc::new(ByAdapter {
            adapter,
            transform: transform.clone(),
            limits: limits.clone(),
        }),
        None if by_architecture => Arc::new(ByRelease {
            options,
            limits: limits.clone(),
            mmproj: opts.mmproj,
        }),
        None => Arc::new(options),
    };
    if merges.is_empty() {
        return planned;
    }
    Arc::new(Merged {
        inner: planned,
        adapters: merges,
        scale: transform.lora_scale.unwrap_or(1.0),
    })
}

/// The dtype every floating tensor was cast to, when `--dtype` applied to all of them (not
/// to a format that plans by architecture, whose plan decides the types).
fn float_dtype(t: &TransformOptions, by_arch: bool) -> Option<DType> {
    match t.dtype {
        DtypeChoice::To(d) if !by_arch && t.dtype_filter.is_none() && t.quant.is_none() => Some(d),
        _ => None,
    }
}

/// Refuses a projector asked of anything but one HF release directory converted to GGUF by its
/// architecture, with nothing merged into it.
fn check_mmproj_route(
    opts: &ConvertOptions,
    by_architecture: bool,
    adapter: &Option<AdapterRoute>,
    merges: &[MergeAdapter],
) -> Result<()> {
    let release = matches!(opts.inputs.as_slice(), [dir] if is_release(dir));
    if !release || !by_architecture || adapter.is_some() {
        return Err(Error::Usage(
            "a multimodal projector is written from one HF release directory (with config.json) \
             converted to GGUF by its architecture"
                .into(),
        ));
    }
    if !merges.is_empty() || opts.transform.quant.is_some() {
        return Err(Error::Usage(
            "a multimodal projector is written as F32, F16, BF16 or Q8_0 by the reference's \
             rules: nothing is merged into it and no type mix applies"
                .into(),
        ));
    }
    Ok(())
}

/// The adapter route of a single PEFT LoRA adapter directory going to a format that plans by
/// architecture: its configuration read and checked, its base model's architecture supported.
fn adapter_route(opts: &ConvertOptions, by_architecture: bool) -> Result<Option<AdapterRoute>> {
    let limits = &opts.open.read.limits;
    let dir = match opts.inputs.as_slice() {
        [dir] if by_architecture && lora::is_adapter(dir) => dir,
        _ => {
            if let Some(base) = &opts.lora_base {
                return Err(Error::Usage(format!(
                    "{}: a base model is read only for a LoRA adapter directory (with {}) \
                     converted to GGUF",
                    shown(base),
                    lora::CONFIG
                )));
            }
            return Ok(None);
        }
    };
    let config = AdapterConfig::read(dir, limits)?;
    let base = config.base_dir(opts.lora_base.as_deref())?;
    weightport_arch::check_supported_within(&base, limits)?;
    Ok(Some(AdapterRoute {
        dir: dir.clone(),
        config,
        base,
    }))
}
