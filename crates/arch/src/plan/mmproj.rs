//! The multimodal projector plan (`convert_hf_to_gguf.py --mmproj`, [`crate::mmproj`]): the
//! projector family's tensors of a vision-language release, in the reference's order, named by
//! the family's map, typed by its overrides and `prepare_tensors`' rules.
//!
//! Keys: `general.architecture` = clip, `general.type` = mmproj, the authorship keys of the
//! release (name, size label, …), `general.file_type`, the `clip.*` keys
//! ([`crate::mmproj`]), `general.quantization_version`. No tokenizer, no generated tensors.

use super::tensors::source_order;
use super::*;
use crate::mmproj::{self, Forced, On, ProjectorSpec};
use crate::origin::View;

/// Plans the projector GGUF of the release in `dir` whose tensors are `tensors`. Reads
/// config.json, the processor files and the model card; never a tensor.
pub fn plan_mmproj(dir: &Path, tensors: &[SourceTensor], opts: &PlanOptions) -> Result<ArchPlan> {
    crate::config::with_limits(&opts.limits, || plan_within(dir, tensors, opts))
}

fn plan_within(dir: &Path, tensors: &[SourceTensor], opts: &PlanOptions) -> Result<ArchPlan> {
    let spec = mmproj::spec_of(dir)?;
    let clip = mmproj::clip_kvs(dir, spec)?;
    let sources = mmproj::Sources::read(dir, spec)?;
    let blocks = sources.vision.blocks;
    let deepstack = sources.vision.deepstack()?;
    let mut out = Vec::new();
    let mut dropped = Vec::new();
    for i in source_order(tensors, opts.sort_names) {
        let t = &tensors[i];
        let Some(hf) = projector_name(spec, &t.name) else {
            dropped.push((t.name.clone(), "not the multimodal projector's"));
            continue;
        };
        if hf.ends_with(".attention.masked_bias")
            || hf.ends_with(".attention.bias")
            || hf.ends_with(".rotary_emb.inv_freq")
        {
            dropped.push((t.name.clone(), "not used by llama.cpp"));
            continue;
        }
        let refuse = |what: String| Error::Unsupported {
            at: Location::file(dir).tensor(&t.name),
            format: Some(Format::Gguf),
            what,
        };
        if let Some((_, g)) = spec.temporal_split.iter().find(|(h, _)| *h == hf) {
            let halves = temporal_halves(t, i, g).ok_or_else(|| {
                refuse(format!(
                    "a Conv3D patch embedding of shape {:?}: [out, in, 2, h, w] expected \
                     (a temporal patch of 2)",
                    t.shape
                ))
            })?;
            for (name, origin, shape) in halves {
                let dtype = projector_dtype(spec, &hf, &name, &shape, opts.outtype);
                out.push(OutTensor {
                    name,
                    origin,
                    shape,
                    permute: None,
                    force_f32: dtype == DType::F32,
                    plus_one: false,
                    dtype,
                });
            }
            continue;
        }
        let gguf = map_projector(spec, &hf, blocks, &deepstack)
            .ok_or_else(|| refuse("a vision tensor the projector family does not name".into()))?;
        let dtype = projector_dtype(spec, &hf, &gguf, &t.shape, opts.outtype);
        out.push(OutTensor {
            origin: Origin::Hf {
                name: t.name.clone(),
                index: i,
            },
            shape: t.shape.clone(),
            permute: None,
            force_f32: dtype == DType::F32,
            plus_one: spec.plus_one.iter().any(|p| hf.contains(p)),
            dtype,
            name: gguf,
        });
    }
    check_blocks(&out, blocks, &sources.hp.path)?;
    let mut kv: Vec<(String, MetaValue)> = vec![
        ("general.architecture".into(), MetaValue::Str("clip".into())),
        ("general.type".into(), MetaValue::Str("mmproj".into())),
    ];
    let total: u64 = out.iter().map(|t| t.shape.iter().product::<u64>()).sum();
    let card =
        crate::card::Authorship::load(dir, &opts.card, total as i64, || size_label_of(&out))?;
    card.kvs(&mut |k, v| kv.push((k, v)))?;
    kv.push((
        "general.file_type".into(),
        MetaValue::U32(opts.outtype.file_type()),
    ));
    kv.extend(clip);
    kv.push(("general.quantization_version".into(), MetaValue::U32(2)));
    kvs::keep_first_position_last_value(&mut kv);
    Ok(ArchPlan {
        hf_arch: sources.hp.hf_arch.clone(),
        arch: "clip".into(),
        kv,
        tensors: out,
        dropped,
        chkhsh: None,
        hparams: sources.hp,
        dequant: Vec::new(),
    })
}

/// The name of a projector tensor under the releases' layout and the family's renames, `None`
/// for a tensor that is not the projector's (`filter_tensors`).
fn projector_name(spec: &ProjectorSpec, name: &str) -> Option<String> {
    let mut n = name.to_owned();
    if let Some((from, to)) = spec
        .layouts
        .iter()
        .find(|(from, to)| n.starts_with(from) && !n.starts_with(to))
    {
        n = format!("{to}{}", &n[from.len()..]);
    }
    if spec.skip.iter().any(|s| n.contains(s)) || !spec.keep.iter().any(|k| n.starts_with(k)) {
        return None;
    }
    for (from, to) in spec.replace {
        n = n.replace(from, to);
    }
    Some(n)
}

/// The GGUF name of projector tensor `hf` (the family's map, with `.weight`/`.bias` tried as
/// suffixes, `{bid}` below `blocks`, `{ds}` the index of a deepstack merger, written under its
/// vision layer `deepstack[ds]`).
fn map_projector(spec: &ProjectorSpec, hf: &str, blocks: u32, deepstack: &[u32]) -> Option<String> {
    let (base, suffix) = hf.rsplit_once('.')?;
    if suffix != "weight" && suffix != "bias" {
        return None;
    }
    spec.tensors.iter().find_map(|(h, g)| {
        let bid = match h.contains("{ds}") {
            true => {
                let pattern = h.replace("{ds}", "{bid}");
                let ds = match_pattern(&pattern, base, deepstack.len() as u32)??;
                Some(deepstack[ds as usize])
            }
            false => match_pattern(h, base, blocks)?,
        };
        Some(format!("{}.{suffix}", fill(g, bid)))
    })
}

/// The two Conv2D halves of Conv3D patch embedding `t` (index `i`) along its temporal
/// dimension: `gguf` of `w[:, :, 0]` and `gguf.1` of `w[:, :, 1]`; `None` unless `t` is
/// `[out, in, 2, h, w]`.
fn temporal_halves(
    t: &SourceTensor,
    i: usize,
    gguf: &str,
) -> Option<Vec<(String, Origin, Vec<u64>)>> {
    let &[c1, c2, 2, kh, kw] = t.shape.as_slice() else {
        return None;
    };
    let plane = kh.checked_mul(kw)?;
    let shape = vec![c1, c2, kh, kw];
    let halves = (0..2u64)
        .map(|k| {
            let view = View {
                offset: k * plane,
                dims: vec![(c1, c2 * 2 * plane), (c2, 2 * plane), (kh, kw), (kw, 1)],
            };
            let name = if k == 0 {
                gguf.to_owned()
            } else {
                format!("{gguf}.1")
            };
            let origin = Origin::View {
                name: t.name.clone(),
                index: i,
                view,
            };
            (name, origin, shape.clone())
        })
        .collect();
    Some(halves)
}

/// The output type of projector tensor `hf` → `gguf` of `shape` (the family's
/// `tensor_force_quant`, the base class's, then `prepare_tensors`' rules).
fn projector_dtype(
    spec: &ProjectorSpec,
    hf: &str,
    gguf: &str,
    shape: &[u64],
    outtype: OutType,
) -> DType {
    let forced = spec
        .force
        .iter()
        .chain(mmproj::BASE_FORCE)
        .find(|r| match r.on {
            On::Hf => hf.contains(r.contains),
            On::Gguf => gguf.contains(r.contains),
        })
        .map(|r| match (r.to, outtype) {
            (Forced::F16, _) | (Forced::F16IfF16, OutType::F16) => DType::F16,
            (Forced::F32, _) | (Forced::F16IfF16, _) => DType::F32,
        });
    if shape.len() <= 1 || gguf.ends_with("_norm.weight") {
        return DType::F32;
    }
    if let Some(d) = forced {
        return d;
    }
    if mmproj::F32_NAMES.contains(&gguf) || !gguf.ends_with(".weight") {
        return DType::F32;
    }
    out_dtype(gguf, shape, outtype).1
}

/// Refuses weights that do not hold every vision layer the config announces (llama.cpp's
/// `clip` loader would fail on the file).
fn check_blocks(out: &[OutTensor], blocks: u32, config: &Path) -> Result<()> {
    let mut seen = vec![false; blocks as usize];
    for t in out {
        let bid = t
            .name
            .strip_prefix("v.blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|b| b.parse::<usize>().ok());
        if let Some(slot) = bid.and_then(|b| seen.get_mut(b)) {
            *slot = true;
        }
    }
    let held = seen.iter().filter(|s| **s).count();
    if held != blocks as usize {
        return Err(bad(
            config,
            format!("`vision_config` announces {blocks} vision layers, the weights hold {held}"),
        ));
    }
    Ok(())
}
