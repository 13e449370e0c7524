//! The LoRA adapter → GGUF adapter plan (`convert_lora_to_gguf.py`): the base architecture's
//! tensor rules applied to each module's factors, as the reference's `LoraTorchTensor` applies
//! them. The base weights are planned as if the release held a tensor of the product's shape
//! under the base weight's name; each planned tensor then becomes two, `NAME.lora_a` and
//! `NAME.lora_b`, whose origins are the factors:
//! - a q/k row permutation permutes the rows of `B` (`A` is unchanged);
//! - rows kept of the weight are rows of `B`;
//! - `token_embd.weight.lora_a` is `Aᵀ` (llama.cpp's `llm_build_inp_embd` reads it so).
//!
//! Keys: `general.architecture`, `general.type` = adapter, `adapter.type` = lora, the
//! authorship keys of the adapter directory's model card (gguf-py counts an adapter's size as
//! negative: no size label), `adapter.lora.alpha`, `adapter.alora.invocation_tokens`,
//! `general.quantization_version`. No `general.file_type`, no tokenizer, no generated tensors.

use super::tensors::plan_tensors;
use super::*;
use crate::lora::{check_base_shapes, factors, AdapterConfig, FactorPair, Factors};
use crate::origin::View;

/// Plans the GGUF adapter of the PEFT adapter in `adapter_dir` (its tensors `tensors`, in the
/// order its weights file holds them; `cfg` its configuration) for the base release whose
/// `config.json` is in `base_dir`. Reads the base's config.json and the adapter's model card;
/// never a tensor.
pub fn plan_adapter(
    base_dir: &Path,
    adapter_dir: &Path,
    cfg: &AdapterConfig,
    tensors: &[SourceTensor],
    opts: &PlanOptions,
) -> Result<ArchPlan> {
    crate::config::with_limits(&opts.limits, || {
        plan_adapter_within(base_dir, adapter_dir, cfg, tensors, opts)
    })
}

fn plan_adapter_within(
    base_dir: &Path,
    adapter_dir: &Path,
    cfg: &AdapterConfig,
    tensors: &[SourceTensor],
    opts: &PlanOptions,
) -> Result<ArchPlan> {
    let spec = check_supported(base_dir)?;
    // Not checked against convert_lora_to_gguf.py yet: refused rather than guessed.
    let untested = [
        Hook::QwenLinearAttention,
        Hook::XieluValues,
        Hook::CheckShapes,
        Hook::Gemma3n,
        Hook::MiniMaxM2,
        Hook::NemotronH,
    ];
    let untested_archs = ["phimoe"];
    if spec.hooks.iter().any(|h| untested.contains(h)) || untested_archs.contains(&spec.arch) {
        return Err(Error::Unsupported {
            at: Location::file(base_dir.join("config.json")),
            format: Some(Format::Gguf),
            what: format!("LoRA adapters of {} are not supported yet", spec.arch),
        });
    }
    let release = Release::read(base_dir, spec)?;
    let weights = adapter_dir.join("adapter_model.safetensors");
    let f = factors(tensors, cfg, &weights)?;
    check_base_shapes(&f, &release.hp, &weights)?;
    refuse_tied_head(&f, &release.hp, &weights)?;
    if let Some(why) = cfg.gguf_scale_problem() {
        return Err(Error::Unsupported {
            at: Location::file(&cfg.path),
            format: Some(Format::Gguf),
            what: format!("{why}: merge the adapter into the base model instead"),
        });
    }
    let (virtual_tensors, kinds) = base_view(&f, tensors);
    // The reference's order: each module where its first factor is met.
    let base_opts = PlanOptions {
        sort_names: false,
        vocab: false,
        ..opts.clone()
    };
    let planned = plan_tensors(
        &release,
        &virtual_tensors,
        &base_opts,
        Vec::new(),
        &crate::fp8::Fp8::default(),
        false,
    )?;
    let mut out = Vec::with_capacity(planned.out.len() * 2);
    for t in &planned.out {
        factor_tensors(t, &kinds, tensors, opts.outtype, &weights, &mut out)?;
    }
    let kv = adapter_kvs(spec.arch, adapter_dir, cfg, opts, &out)?;
    let mut dropped = planned.dropped;
    dropped.extend(f.skipped);
    Ok(ArchPlan {
        hf_arch: release.hp.hf_arch.clone(),
        arch: spec.arch.into(),
        kv,
        tensors: out,
        dropped,
        chkhsh: None,
        hparams: release.hp,
        dequant: Vec::new(),
    })
}

/// Refuses a LoRA on `lm_head` when the base ties it to the embedding: llama.cpp has no
/// `output.weight` to apply it to (the reference writes it anyway, for a tensor that is not
/// there).
fn refuse_tied_head(f: &Factors, hp: &HParams, file: &Path) -> Result<()> {
    match f.pairs.iter().find(|p| p.weight == "lm_head.weight") {
        Some(p) if hp.tied_embeddings() => Err(Error::Unsupported {
            at: Location::file(file).tensor(&p.weight),
            format: Some(Format::Gguf),
            what: "a LoRA on lm_head of a model whose head is its token embedding \
                   (tie_word_embeddings): the GGUF base has no output.weight for it"
                .into(),
        }),
        _ => Ok(()),
    }
}

/// What a virtual base tensor stands for.
#[derive(Debug, Clone)]
enum Kind<'f> {
    Pair(&'f FactorPair),
    Norm(usize),
}

/// The base tensors the factors stand for (the product's shape under the base weight's name;
/// the factors' type, F32 when they differ, as `LoraTorchTensor` makes it), and what each is.
fn base_view<'f>(f: &'f Factors, tensors: &[SourceTensor]) -> (Vec<SourceTensor>, Vec<Kind<'f>>) {
    let mut items: Vec<(usize, SourceTensor, Kind)> = Vec::new();
    for p in &f.pairs {
        let (a, b) = (&tensors[p.a], &tensors[p.b]);
        let dtype = if a.dtype == b.dtype {
            a.dtype
        } else {
            DType::F32
        };
        let shape = vec![b.shape[0], a.shape[1]];
        let t = SourceTensor {
            name: p.weight.clone(),
            shape,
            dtype,
            file: String::new(),
        };
        items.push((p.a.min(p.b), t, Kind::Pair(p)));
    }
    for (name, i) in &f.norms {
        let t = SourceTensor {
            name: name.clone(),
            file: String::new(),
            ..tensors[*i].clone()
        };
        items.push((*i, t, Kind::Norm(*i)));
    }
    items.sort_by_key(|x| x.0);
    items.into_iter().map(|(_, t, k)| (t, k)).unzip()
}

/// The output type of a factor (`prepare_tensors` for a `.lora_a`/`.lora_b` name: the output
/// type, F32 for a vector, F16 where a Q8_0 row does not fill its blocks).
fn factor_dtype(shape: &[u64], outtype: OutType) -> DType {
    if shape.len() <= 1 {
        return DType::F32;
    }
    match outtype {
        OutType::F32 => DType::F32,
        OutType::F16 => DType::F16,
        OutType::Bf16 => DType::BF16,
        OutType::Q8_0 if shape.last().is_some_and(|n| n % 32 == 0) => DType::Q8_0,
        OutType::Q8_0 => DType::F16,
    }
}

/// The adapter tensors of planned base tensor `t`.
fn factor_tensors(
    t: &OutTensor,
    kinds: &[Kind],
    tensors: &[SourceTensor],
    outtype: OutType,
    file: &Path,
    out: &mut Vec<OutTensor>,
) -> Result<()> {
    let refuse = |what: &str| Error::Unsupported {
        at: Location::file(file).tensor(&t.name),
        format: Some(Format::Gguf),
        what: format!("the base architecture {what} this tensor; its LoRA factors cannot follow"),
    };
    let (index, rows) = match &t.origin {
        Origin::Hf { index, .. } => (*index, None),
        Origin::Rows { index, rows, .. } => (*index, Some(rows.clone())),
        Origin::Generated(_) => return Ok(()),
        Origin::View { .. } | Origin::Views { .. } => {
            return Err(refuse("transposes or interleaves"))
        }
        Origin::Stack { .. } | Origin::Blocks { .. } => return Err(refuse("stacks")),
        Origin::PadRows { .. } => return Err(refuse("pads")),
    };
    if t.value.is_some() {
        return Err(refuse("adds one to"));
    }
    let p = match kinds[index] {
        Kind::Norm(i) => {
            out.push(OutTensor {
                origin: Origin::Hf {
                    name: tensors[i].name.clone(),
                    index: i,
                },
                ..t.clone()
            });
            return Ok(());
        }
        Kind::Pair(p) => p,
    };
    let (a, b) = (&tensors[p.a], &tensors[p.b]);
    let (a_shape, a_origin) = if t.name == "token_embd.weight" {
        // llama.cpp reads the embedding's A transposed (`lora_a = lora_a.T`).
        let (r, cols) = (a.shape[0], a.shape[1]);
        let view = View {
            offset: 0,
            dims: vec![(cols, 1), (r, cols)],
        };
        let origin = Origin::View {
            name: a.name.clone(),
            index: p.a,
            view,
        };
        (vec![cols, r], origin)
    } else {
        let origin = Origin::Hf {
            name: a.name.clone(),
            index: p.a,
        };
        (a.shape.clone(), origin)
    };
    let (b_shape, b_origin) = match rows {
        Some(rows) => {
            let origin = Origin::Rows {
                name: b.name.clone(),
                index: p.b,
                rows: rows.clone(),
            };
            (vec![rows.end - rows.start, b.shape[1]], origin)
        }
        None => {
            let origin = Origin::Hf {
                name: b.name.clone(),
                index: p.b,
            };
            (b.shape.clone(), origin)
        }
    };
    for (suffix, shape, origin, permute) in [
        ("lora_a", a_shape, a_origin, None),
        ("lora_b", b_shape, b_origin, t.permute),
    ] {
        let dtype = factor_dtype(&shape, outtype);
        out.push(OutTensor {
            name: format!("{}.{suffix}", t.name),
            origin,
            shape,
            permute,
            force_f32: dtype == DType::F32 && outtype != OutType::F32,
            value: None,
            dtype,
        });
    }
    Ok(())
}

/// gguf-py's parameter count of an adapter (`get_total_parameter_count`): each `lora_b` counts
/// its shape with the last dimension of the `lora_a` before it, other tensors their size.
fn adapter_size(out: &[OutTensor]) -> u64 {
    let mut total = 0u64;
    let mut last_a: Option<&OutTensor> = None;
    for t in out {
        if t.name.ends_with(".lora_a") {
            last_a = Some(t);
            continue;
        }
        let mut shape = t.shape.clone();
        if t.name.ends_with(".lora_b") {
            if let (Some(a), Some(last)) = (last_a, shape.last_mut()) {
                *last = a.shape.last().copied().unwrap_or(0);
            }
        }
        total = total.saturating_add(shape.iter().product());
    }
    total
}

/// The adapter's keys, in the reference's order.
fn adapter_kvs(
    arch: &str,
    adapter_dir: &Path,
    cfg: &AdapterConfig,
    opts: &PlanOptions,
    out: &[OutTensor],
) -> Result<Vec<(String, MetaValue)>> {
    let mut kv: Vec<(String, MetaValue)> = vec![
        ("general.architecture".into(), MetaValue::Str(arch.into())),
        ("general.type".into(), MetaValue::Str("adapter".into())),
        ("adapter.type".into(), MetaValue::Str("lora".into())),
    ];
    let total = -(adapter_size(out).min(i64::MAX as u64) as i64);
    let card = crate::card::Authorship::load(adapter_dir, &opts.card, total, String::new)?;
    card.kvs(&mut |k, v| kv.push((k, v)))?;
    kv.push((
        "adapter.lora.alpha".into(),
        MetaValue::F32(cfg.alpha as f32),
    ));
    if let Some(tokens) = cfg.alora_tokens.as_ref().filter(|t| !t.is_empty()) {
        kv.push((
            "adapter.alora.invocation_tokens".into(),
            MetaValue::Array(tokens.iter().map(|&t| MetaValue::U32(t)).collect()),
        ));
    }
    kv.push(("general.quantization_version".into(), MetaValue::U32(2)));
    kvs::keep_first_position_last_value(&mut kv);
    Ok(kv)
}
