//! Architecture-planned conversions: when the output format plans by architecture (a
//! registration capability, today GGUF's) and the input is a release directory with a
//! `config.json`, the plan of `weightport-arch` (names, KVs, tokenizer, and per output tensor its
//! origin and operations) becomes the pipeline's output tensors. This module executes what the
//! plan names, without knowing why: `Origin::{Hf, Rows, View, Stack, Blocks, Generated}` become
//! `compose` transforms, chained with a row permutation, `1 + w`, the casts under the rule of
//! each stage and `--quant` with the types `arch::mix` chose. Which tensors, names, keys, types
//! and cast rules, and that the result equals `convert_hf_to_gguf.py` (and `llama-quantize`)
//! byte for byte, is the arch crate's knowledge, not this module's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use weightport_arch::lora::AdapterConfig;
use weightport_arch::split::BlockMap;
use weightport_arch::{
    ArchPlan, BlockPart, Origin, OutTensor as PlannedTensor, OutType, PlanOptions, SourceTensor,
    ValueOp,
};
use weightport_core::{
    sanitize, DType, Error, Knob, Limits, Metadata, Result, TensorInfo, TensorSource,
};

use crate::by_options::{op_for, DtypeChoice, Stage, TensorRecipe, Transform, TransformOptions};
use crate::dequantized::Dequantized;
use crate::transform::chain::Chain;
use crate::transform::concat::Concat;
use crate::transform::gather::Gather;
use crate::transform::interleave::Interleave;
use crate::transform::neg_exp::NegExp;
use crate::transform::permute::PermuteRows;
use crate::transform::plus_one::PlusOne;
use crate::transform::scale::Scale;
use crate::transform::slice::{PadRows, Slice};
use crate::transform::stack::Stack;
use weightport_arch::mix::{self, TypedTensor};
use weightport_arch::naming;

/// A LoRA adapter planned by its base model's architecture.
#[derive(Debug, Clone)]
pub(crate) struct AdapterRoute {
    /// The adapter directory.
    pub dir: PathBuf,
    /// Its configuration.
    pub config: AdapterConfig,
    /// The base model's directory (its config.json).
    pub base: PathBuf,
}

/// What the architecture plan adds to a job.
pub(crate) struct ArchJob {
    /// Tensors computed from the hyper-parameters (Llama 3's `rope_freqs.weight`), as F32 bytes;
    /// the output plan refers to them as source tensors after the release's own.
    pub generated: Vec<(TensorInfo, Vec<u8>)>,
    /// The output tensors, in the plan's order (the type mix's with `--quant`).
    pub outs: Vec<TensorRecipe>,
    /// The output's metadata, in the plan's order.
    pub metadata: Metadata,
    /// `general.architecture (HF architectures[0])`.
    pub architecture: String,
    /// HF tensors not written, with the reason.
    pub dropped: Vec<(String, String)>,
    /// Per output tensor: the HF tensor(s) it comes from (`None`: generated).
    pub from: Vec<Option<String>>,
    /// The format the output is written as a rewrite of, when not the source's: with `--quant`,
    /// what llama-quantize rewrites ([`mix::QUANTIZE_REWRITES`]), whose dims convention the
    /// output keeps.
    pub rewrites: Option<weightport_core::Format>,
    /// The weights of an FP8 release, read as F32 `weight · scale`.
    pub(crate) dequant: Dequantized,
}

fn source_tensors(source: &dyn TensorSource) -> Vec<SourceTensor> {
    source
        .tensors()
        .iter()
        .enumerate()
        .map(|(i, t)| SourceTensor {
            name: t.name.clone(),
            shape: t.shape.clone(),
            dtype: t.dtype,
            file: source
                .file_of(i)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        })
        .collect()
}

/// Plans the conversion of the release at `dir` (opened as `source`) by its architecture.
pub(crate) fn build(
    source: &dyn TensorSource,
    dir: &Path,
    opts: &TransformOptions,
    limits: &Limits,
) -> Result<ArchJob> {
    refuse_name_options(opts)?;
    let tensors = source_tensors(source);
    let plan = arch_plan(source, &tensors, dir, opts, limits)?;
    job_of(source, plan, &tensors, dir, opts)
}

/// Plans the multimodal projector of the release at `dir` (opened as `source`): its vision
/// tower and projector as a `clip` GGUF ([`weightport_arch::mmproj`]).
pub(crate) fn build_mmproj(
    source: &dyn TensorSource,
    dir: &Path,
    opts: &TransformOptions,
    limits: &Limits,
) -> Result<ArchJob> {
    refuse_name_options(opts)?;
    let tensors = source_tensors(source);
    let sort_names = naming::sorts_names(source.format());
    let asked = match opts.dtype {
        DtypeChoice::Keep => None,
        DtypeChoice::To(d) => Some(d),
    };
    let plan = weightport_arch::plan_mmproj(
        dir,
        &tensors,
        &plan_options(
            naming::outtype_for(asked, &tensors, sort_names)?,
            opts,
            dir,
            sort_names,
            limits,
        ),
    )?;
    job_of(source, plan, &tensors, dir, opts)
}

/// Plans the GGUF adapter of the PEFT LoRA adapter `adapter` (opened as `source`) by its base
/// model's architecture.
pub(crate) fn build_adapter(
    source: &dyn TensorSource,
    adapter: &AdapterRoute,
    opts: &TransformOptions,
    limits: &Limits,
) -> Result<ArchJob> {
    refuse_name_options(opts)?;
    if opts.quant.is_some() {
        return Err(Error::Usage(
            "a LoRA adapter is written as F32, F16, BF16 or Q8_0 factors, not quantized by a \
             type mix"
                .into(),
        ));
    }
    let tensors = source_tensors(source);
    let sort_names = false;
    let plan = weightport_arch::plan_adapter(
        &adapter.base,
        &adapter.dir,
        &adapter.config,
        &tensors,
        &plan_options(
            adapter_outtype(opts, &tensors, sort_names)?,
            opts,
            &adapter.dir,
            sort_names,
            limits,
        ),
    )?;
    job_of(source, plan, &tensors, &adapter.dir, opts)
}

/// The output type of an adapter: `--dtype`, else F32 as the reference's default.
fn adapter_outtype(
    opts: &TransformOptions,
    tensors: &[SourceTensor],
    sort_names: bool,
) -> Result<weightport_arch::OutType> {
    match opts.dtype {
        DtypeChoice::Keep => Ok(weightport_arch::OutType::F32),
        DtypeChoice::To(d) => naming::outtype_for(Some(d), tensors, sort_names),
    }
}

/// The job of an architecture plan over `source` (`dir`: where its files are).
fn job_of(
    source: &dyn TensorSource,
    plan: ArchPlan,
    tensors: &[SourceTensor],
    dir: &Path,
    opts: &TransformOptions,
) -> Result<ArchJob> {
    // The weights of an FP8 release are read as F32 (`weight · scale`).
    let dequant = Dequantized::new(&plan.dequant, source.tensors())?;
    let mut tensors = tensors.to_vec();
    for d in &plan.dequant {
        tensors[d.weight].dtype = DType::F32;
    }
    let tensors = &tensors[..];
    let mut metadata = plan_metadata(&plan);
    let (inputs, generated) = inputs_of(&plan, tensors.len());
    let (order, finals, mut notes) = quant_targets(&plan, &metadata, opts);
    check_types(&plan, dir, &order, &finals, opts, &mut metadata)?;
    let mut outs = Vec::with_capacity(order.len());
    let mut from = Vec::with_capacity(order.len());
    for i in order {
        let t = &plan.tensors[i];
        outs.push(out_tensor(
            t,
            &inputs[i],
            finals[i],
            notes[i].take(),
            source,
            tensors,
            opts,
        )?);
        from.push(origin_text(&t.origin));
    }
    Ok(ArchJob {
        generated,
        outs,
        metadata,
        architecture: format!("{} ({})", plan.arch, plan.hf_arch),
        dropped: plan
            .dropped
            .into_iter()
            .map(|(n, why)| (n, why.to_string()))
            .collect(),
        from,
        rewrites: opts.quant.as_ref().map(|_| mix::QUANTIZE_REWRITES),
        dequant,
    })
}

/// Refuses the options that choose names or types, which the architecture decides.
fn refuse_name_options(opts: &TransformOptions) -> Result<()> {
    if !opts.renames.is_empty() || opts.dtype_filter.is_some() {
        return Err(Error::Usage(format!(
            "{} and {} do not apply to an HF release converted to GGUF \
             (its architecture decides names and types; pass {} NAME to keep names)",
            Knob::Rename,
            Knob::DtypeFilter,
            Knob::Arch
        )));
    }
    Ok(())
}

/// The plan's KVs as the output's metadata, in the plan's order.
fn plan_metadata(plan: &ArchPlan) -> Metadata {
    let mut metadata = Metadata::new();
    for (k, v) in &plan.kv {
        metadata.insert(k.clone(), v.clone());
    }
    metadata
}

/// Checks the final types (a requantization of the release's own types, and with `--quant`
/// the importance data the mix needs) and, with `--quant`, adds its KVs to `metadata`.
fn check_types(
    plan: &ArchPlan,
    dir: &Path,
    order: &[usize],
    finals: &[DType],
    opts: &TransformOptions,
    metadata: &mut Metadata,
) -> Result<()> {
    let before: Vec<(&str, DType)> = plan
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t.dtype))
        .collect();
    mix::check_requantize(dir, &before, finals)?;
    if let Some(q) = &opts.quant {
        let planned = order.iter().map(|&i| {
            let t = &plan.tensors[i];
            (t.name.as_str(), t.shape.as_slice(), t.dtype, finals[i])
        });
        crate::importance::check_plan(q, planned).map_err(|e| in_release(e, dir))?;
        mix::quantized_metadata(metadata, q);
    }
    Ok(())
}

/// The output tensor for planned tensor `t` read from source tensors `inputs`, written as `to`.
fn out_tensor(
    t: &PlannedTensor,
    inputs: &[usize],
    to: DType,
    note: Option<String>,
    source: &dyn TensorSource,
    tensors: &[SourceTensor],
    opts: &TransformOptions,
) -> Result<TensorRecipe> {
    let input = inputs[0];
    let src = tensors.get(input).map_or(DType::F32, |s| s.dtype);
    let op =
        op_of(t, src, to, opts).map_err(|e| in_tensor(e, source, input, tensors.len(), &t.name))?;
    Ok(TensorRecipe {
        info: TensorInfo {
            name: t.name.clone(),
            dtype: to,
            byte_len: to
                .byte_len(&t.shape)
                .map_err(|e| Error::Usage(format!("tensor `{}`: {e}", sanitize(&t.name))))?,
            shape: t.shape.clone(),
        },
        inputs: inputs.to_vec(),
        op,
        note,
    })
}

/// The HF tensor(s) an origin names, as the job shows them (`None`: generated).
fn origin_text(origin: &Origin) -> Option<String> {
    match origin {
        Origin::Hf { name, .. } => Some(name.clone()),
        Origin::Generated(_) => None,
        Origin::Rows { name, rows, .. } => {
            Some(format!("{name} rows {}..{}", rows.start, rows.end))
        }
        Origin::PadRows { name, .. } => Some(format!("{name} padded with zero rows")),
        Origin::Blocks { parts, .. } => Some(format!(
            "blocks of {}",
            parts
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(" + ")
        )),
        Origin::View { name, view, .. } => Some(format!(
            "{name} view {:?} from element {}",
            view.dims, view.offset
        )),
        Origin::Views { name, views, .. } => Some(format!("{name} as {} views", views.len())),
        Origin::Stack { sources } => Some(format!(
            "{} stacked: {} … {}",
            sources.len(),
            sources[0].0,
            sources[sources.len() - 1].0
        )),
    }
}

/// The architecture plan, with the reference's tensor order for the source's format (a
/// safetensors part's tensors by name, a `.bin` part's in the state dict's order).
fn arch_plan(
    source: &dyn TensorSource,
    tensors: &[SourceTensor],
    dir: &Path,
    opts: &TransformOptions,
    limits: &Limits,
) -> Result<ArchPlan> {
    let sort_names = naming::sorts_names(source.format());
    let asked = match opts.dtype {
        DtypeChoice::Keep => None,
        DtypeChoice::To(d) => Some(d),
    };
    let outtype = naming::outtype_for(asked, tensors, sort_names)?;
    let mut plan_opts = plan_options(outtype, opts, dir, sort_names, limits);
    plan_opts.pre_tokenizer = opts.pre_tokenizer.clone();
    plan_opts.no_mtp = opts.no_mtp;
    plan_opts.mtp_only = opts.mtp_only;
    plan_opts.vocab = true;
    plan_opts.tensor_values = tensor_values(source, tensors, dir, limits)?;
    weightport_arch::plan(dir, tensors, &plan_opts)
}

/// Reads the one-element tensors whose values the plan writes as keys (Apertus' xIELU
/// parameters, [`weightport_arch::xielu`]): a few bytes each, before the header is planned.
fn tensor_values(
    source: &dyn TensorSource,
    tensors: &[SourceTensor],
    dir: &Path,
    limits: &Limits,
) -> Result<std::collections::BTreeMap<usize, f32>> {
    let mut values = std::collections::BTreeMap::new();
    for i in weightport_arch::value_tensors(dir, tensors, limits)? {
        let t = &tensors[i];
        let mut buf = vec![0u8; t.dtype.elem_bytes().unwrap_or(0) as usize];
        source.read_into(i, 0, &mut buf)?;
        let v =
            weightport_arch::xielu::value_of(t.dtype, &buf).ok_or_else(|| Error::Unsupported {
                at: weightport_core::Location::file(source.file_of(i)).tensor(&t.name),
                format: Some(weightport_core::Format::Gguf),
                what: format!("a one-element {} tensor cannot be read as a value", t.dtype),
            })?;
        values.insert(i, v);
    }
    Ok(values)
}

/// The architecture plan's options for `dir` (tensors only: no vocabulary, no pre-tokenizer
/// override): the output type, the model card's `--name`/`--metadata` and the directory's name.
fn plan_options(
    outtype: OutType,
    opts: &TransformOptions,
    dir: &Path,
    sort_names: bool,
    limits: &Limits,
) -> PlanOptions {
    let mut card = weightport_arch::card::CardOptions::default();
    card.name = opts.name.clone();
    card.overrides = opts.metadata.clone();
    card.dir_id = naming::dir_id(dir);
    let mut p = PlanOptions::default();
    p.outtype = outtype;
    p.card = card;
    p.vocab = false;
    p.sort_names = sort_names;
    p.limits = limits.clone();
    p
}

/// Tensors computed in memory: their info and F32 bytes.
type Generated = Vec<(TensorInfo, Vec<u8>)>;

/// Each planned tensor's source indices (several for a stack); generated tensors become F32
/// sources numbered after the release's `n` tensors.
fn inputs_of(plan: &ArchPlan, n: usize) -> (Vec<Vec<usize>>, Generated) {
    let mut generated = Vec::new();
    let inputs = plan
        .tensors
        .iter()
        .map(|t| match &t.origin {
            Origin::Hf { index, .. }
            | Origin::Rows { index, .. }
            | Origin::PadRows { index, .. }
            | Origin::View { index, .. }
            | Origin::Views { index, .. } => {
                vec![*index]
            }
            Origin::Stack { sources } => sources.iter().map(|&(_, j)| j).collect(),
            Origin::Blocks { parts, .. } => parts.iter().map(|p| p.index).collect(),
            Origin::Generated(v) => {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                let info = TensorInfo {
                    name: t.name.clone(),
                    dtype: DType::F32,
                    shape: t.shape.clone(),
                    byte_len: bytes.len() as u64,
                };
                generated.push((info, bytes));
                vec![n + generated.len() - 1]
            }
        })
        .collect();
    (inputs, generated)
}

/// The output order and each tensor's final type and fallback note: the plan's own without
/// `--quant`; with it, llama-quantize's order and mix over the types the reference writes.
fn quant_targets(
    plan: &ArchPlan,
    metadata: &Metadata,
    opts: &TransformOptions,
) -> (Vec<usize>, Vec<DType>, Vec<Option<String>>) {
    let Some(q) = &opts.quant else {
        let finals: Vec<DType> = plan.tensors.iter().map(|t| t.dtype).collect();
        let n = finals.len();
        return ((0..n).collect(), finals, vec![None; n]);
    };
    let typed: Vec<TypedTensor> = plan
        .tensors
        .iter()
        .map(|t| TypedTensor {
            name: &t.name,
            shape: &t.shape,
            dtype: t.dtype,
        })
        .collect();
    let p = mix::plan_types(&typed, metadata, q);
    (p.order, p.types, p.notes)
}

/// The one-pass operation for tensor `t` stored as `src`: the stack of its parts, the rows it
/// keeps of its source, or the q/k permutation, `1 + w`, the cast to the reference's output type, the quantization to `to`;
/// `None` when the bytes pass as is.
fn op_of(
    t: &PlannedTensor,
    src: DType,
    to: DType,
    opts: &TransformOptions,
) -> Result<Option<Arc<dyn Transform>>> {
    if let Origin::Blocks { parts, map } = &t.origin {
        return blocks_op(t, parts, *map, to, opts);
    }
    let layout = layout_op(t, src)?;
    let permute = permute_op(t, src)?;
    let (value, mid) = value_op(t, src)?;
    // The reference converter's cast, then llama-quantize's (each with its tool's NaN bits).
    let converter = Stage {
        rule: naming::CONVERT_CASTS,
        validates: false,
    };
    let cast = op_for(mid, t.dtype, &t.name, &t.shape, opts, converter)?;
    let quant = quantize_op(t, to, opts)?;
    Ok(Chain::of(
        Chain::of(Chain::of(Chain::of(layout, permute), value), cast),
        quant,
    ))
}

/// The stack of `t`'s parts, the rows it keeps of its source or the view it gathers of it;
/// `None` for a tensor read whole (an HF or generated one).
fn layout_op(t: &PlannedTensor, src: DType) -> Result<Option<Arc<dyn Transform>>> {
    Ok(match &t.origin {
        Origin::Stack { sources } => {
            let part = src
                .byte_len(&t.shape[1..])
                .map_err(|e| Error::Internal(e.to_string()))?;
            Some(Arc::new(Stack::new(sources.len(), part, src.granule())) as Arc<dyn Transform>)
        }
        Origin::Rows { rows, .. } => {
            let n = t.shape.first().copied().unwrap_or(1).max(1);
            let row = src
                .byte_len(&t.shape)
                .map_err(|e| Error::Internal(e.to_string()))?
                / n;
            Some(Arc::new(Slice::rows(rows.clone(), row, src.granule())) as Arc<dyn Transform>)
        }
        Origin::PadRows { source_rows, .. } => {
            let n = t.shape.first().copied().unwrap_or(1).max(1);
            let row = src
                .byte_len(&t.shape)
                .map_err(|e| Error::Internal(e.to_string()))?
                / n;
            Some(Arc::new(PadRows::new(source_rows * row, src.granule())) as Arc<dyn Transform>)
        }
        Origin::View { view, .. } => Some(Arc::new(Gather::new(
            view.offset,
            view.dims.clone(),
            src.granule(),
        )) as Arc<dyn Transform>),
        Origin::Views { views, .. } => {
            let views: Vec<(u64, Vec<(u64, u64)>)> =
                views.iter().map(|v| (v.offset, v.dims.clone())).collect();
            Some(Arc::new(Concat::new(&views, src.granule())) as Arc<dyn Transform>)
        }
        _ => None,
    })
}

/// The interleave of `t`'s block parts, then the quantization to `to`.
fn blocks_op(
    t: &PlannedTensor,
    parts: &[BlockPart],
    map: BlockMap,
    to: DType,
    opts: &TransformOptions,
) -> Result<Option<Arc<dyn Transform>>> {
    let gathers = parts
        .iter()
        .map(|p| Gather::new(p.view.offset, p.view.dims.clone(), 1))
        .collect();
    let widths = parts.iter().map(|p| p.width).collect();
    let op = Interleave::new(gathers, widths, Arc::new(move |b: &mut [u8]| map.apply(b)));
    // The parts already hold the output type's bytes: nothing is cast.
    let quant = quantize_op(t, to, opts)?;
    Ok(Chain::of(Some(Arc::new(op) as Arc<dyn Transform>), quant))
}

/// The q/k row permutation of `t` stored as `src`, when the plan asks for one.
fn permute_op(t: &PlannedTensor, src: DType) -> Result<Option<Arc<dyn Transform>>> {
    let Some(p) = &t.permute else {
        return Ok(None);
    };
    let rows = t.shape.first().copied().unwrap_or(1).max(1);
    let bytes = src
        .byte_len(&t.shape)
        .map_err(|e| Error::Internal(e.to_string()))?;
    let order = p
        .rows(rows as usize)
        .map_err(|e| Error::Internal(format!("`{}`: {e}", sanitize(&t.name))))?;
    Ok(Some(
        Arc::new(PermuteRows::new(order, bytes / rows, src.granule())) as Arc<dyn Transform>,
    ))
}

/// The plan's value transform of `t` (`1 + w`, `-exp(w)`), and the type its result is stored
/// as (`src` without).
fn value_op(t: &PlannedTensor, src: DType) -> Result<(Option<Arc<dyn Transform>>, DType)> {
    let (op, mid): (Arc<dyn Transform>, DType) = match &t.value {
        None => return Ok((None, src)),
        Some(ValueOp::PlusOne) => {
            let p = PlusOne::new(src)?;
            let mid = p.out;
            (Arc::new(p), mid)
        }
        Some(ValueOp::NegExp) => {
            let n = NegExp::new(src)?;
            let mid = n.out;
            (Arc::new(n), mid)
        }
        Some(ValueOp::Scale(bands)) => {
            let row = t.shape.iter().skip(1).product::<u64>();
            let s = Scale::new(src, row, bands)?;
            let mid = s.out;
            (Arc::new(s), mid)
        }
    };
    Ok((Some(op), mid))
}

/// llama-quantize's conversion of `t` from its planned type to `to` (with its NaN bits).
fn quantize_op(
    t: &PlannedTensor,
    to: DType,
    opts: &TransformOptions,
) -> Result<Option<Arc<dyn Transform>>> {
    let quantizer = Stage {
        rule: mix::QUANTIZE_CASTS,
        validates: true,
    };
    op_for(t.dtype, to, &t.name, &t.shape, opts, quantizer)
}

/// A refusal of the plan, located in the release directory.
fn in_release(e: Error, dir: &Path) -> Error {
    match e {
        Error::Refused { mut at, reason } => {
            at.path = dir.to_path_buf();
            Error::Refused { at, reason }
        }
        other => other,
    }
}

fn in_tensor(e: Error, source: &dyn TensorSource, i: usize, n: usize, name: &str) -> Error {
    match e {
        Error::Refused { mut at, reason } => {
            if i < n {
                at.path = source.file_of(i);
                at.tensor = Some(source.tensors()[i].name.clone());
            } else {
                at.tensor = Some(name.to_string());
            }
            Error::Refused { at, reason }
        }
        other => other,
    }
}
