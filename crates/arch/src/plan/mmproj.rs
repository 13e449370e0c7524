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
    let sources = mmproj::Sources::read(dir, spec)?;
    let clip = mmproj::clip_kvs(spec, &sources)?;
    let blocks = sources.vision.blocks;
    let deepstack = sources.vision.deepstack()?;
    let tower = Tower {
        dir,
        spec,
        blocks,
        heads: sources.vision.heads,
        deepstack: &deepstack,
        outtype: opts.outtype,
    };
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
        tower.add(t, i, &hf, &mut out)?;
    }
    check_blocks(&out, blocks, &sources.hp.path)?;
    let mut kv: Vec<(String, MetaValue)> = vec![
        ("general.architecture".into(), MetaValue::Str("clip".into())),
        ("general.type".into(), MetaValue::Str("mmproj".into())),
    ];
    // Each shape's count fits u64 (checked above); their sum may not.
    let total = out
        .iter()
        .try_fold(0u64, |n, t| n.checked_add(t.shape.iter().product()))
        .ok_or_else(|| bad(dir, "the projector's tensors hold more than 2^64 elements"))?;
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

/// What the tensors of one release's projector are planned by.
struct Tower<'a> {
    dir: &'a Path,
    spec: &'static ProjectorSpec,
    blocks: u32,
    heads: u32,
    deepstack: &'a [u32],
    outtype: OutType,
}

impl Tower<'_> {
    fn refuse(&self, t: &SourceTensor, what: String) -> Error {
        Error::Unsupported {
            at: Location::file(self.dir).tensor(&t.name),
            format: Some(Format::Gguf),
            what,
        }
    }

    /// The q/k row permutation of HF tensor `hf` (`t`, of `shape`), when the family permutes
    /// the tower's q/k (`LlamaModel.permute(w, n_head, n_head)` by the vision heads).
    fn permute(&self, t: &SourceTensor, hf: &str, shape: &[u64]) -> Result<Option<QkPermute>> {
        const QK: [&str; 4] = [
            "q_proj.weight",
            "q_proj.bias",
            "k_proj.weight",
            "k_proj.bias",
        ];
        if !self.spec.permute_qk || !QK.iter().any(|s| hf.ends_with(s)) {
            return Ok(None);
        }
        let p = QkPermute {
            n_head: self.heads,
            n_head_kv: Some(self.heads),
        };
        let rows = shape.first().copied().unwrap_or(0);
        p.rows(rows as usize)
            .map_err(|e| self.refuse(t, format!("{e} (`vision_config.num_attention_heads`)")))?;
        Ok(Some(p))
    }

    /// The output tensor named `gguf` (from HF name `hf`) of `shape` read from `origin`.
    fn tensor(&self, hf: &str, gguf: String, shape: Vec<u64>, origin: Origin) -> OutTensor {
        let dtype = projector_dtype(self.spec, hf, &gguf, &shape, self.outtype);
        OutTensor {
            name: gguf,
            origin,
            shape,
            permute: None,
            force_f32: dtype == DType::F32,
            value: self
                .spec
                .plus_one
                .iter()
                .any(|p| hf.contains(p))
                .then_some(crate::plan::ValueOp::PlusOne),
            dtype,
        }
    }

    /// The GGUF name of `hf`, refused when the family does not name it.
    fn name(&self, t: &SourceTensor, hf: &str) -> Result<String> {
        map_projector(self.spec, hf, self.blocks, self.deepstack).ok_or_else(|| {
            self.refuse(
                t,
                "a vision tensor the projector family does not name".into(),
            )
        })
    }

    /// Plans projector tensor `t` (index `i`, named `hf` after the layout): one output tensor,
    /// two temporal halves, or three row thirds.
    fn add(&self, t: &SourceTensor, i: usize, hf: &str, out: &mut Vec<OutTensor>) -> Result<()> {
        if t.shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .is_none()
        {
            let what = format!("a shape of more than 2^64 elements: {:?}", t.shape);
            return Err(self.refuse(t, what));
        }
        if let Some((_, g)) = self.spec.temporal_split.iter().find(|(h, _)| *h == hf) {
            let halves = temporal_halves(t, i, g).ok_or_else(|| {
                let what = format!(
                    "a Conv3D patch embedding of shape {:?}: [out, in, 2, h, w] expected \
                     (a temporal patch of 2)",
                    t.shape
                );
                self.refuse(t, what)
            })?;
            for (name, origin, shape) in halves {
                out.push(self.tensor(hf, name, shape, origin));
            }
            return Ok(());
        }
        let split = self.spec.row_split.iter();
        if let Some((from, parts)) = split.clone().find(|(f, _)| hf.contains(&format!(".{f}."))) {
            return self.thirds(t, i, hf, (from, parts), out);
        }
        let origin = Origin::Hf {
            name: t.name.clone(),
            index: i,
        };
        let mut planned = self.tensor(hf, self.name(t, hf)?, t.shape.clone(), origin);
        planned.permute = self.permute(t, hf, &t.shape)?;
        out.push(planned);
        Ok(())
    }

    /// The three row thirds of fused tensor `t` (Qwen2.5-VL's `qkv`), named with `from`
    /// replaced by each part.
    fn thirds(
        &self,
        t: &SourceTensor,
        i: usize,
        hf: &str,
        (from, parts): (&str, &[&str; 3]),
        out: &mut Vec<OutTensor>,
    ) -> Result<()> {
        let rows = t.shape.first().copied().unwrap_or(0);
        if rows == 0 || rows % 3 != 0 {
            let what = format!(
                "a fused `{from}` tensor of shape {:?}: its rows do not split in three",
                t.shape
            );
            return Err(self.refuse(t, what));
        }
        let third = rows / 3;
        for (k, part) in (0u64..).zip(parts) {
            let name = hf.replace(from, part);
            let mut shape = t.shape.clone();
            shape[0] = third;
            let origin = Origin::Rows {
                name: t.name.clone(),
                index: i,
                rows: k * third..(k + 1) * third,
            };
            out.push(self.tensor(&name, self.name(t, &name)?, shape, origin));
        }
        Ok(())
    }
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
    let stride = c2.checked_mul(2)?.checked_mul(plane)?;
    c1.checked_mul(stride)?;
    let shape = vec![c1, c2, kh, kw];
    let halves = (0..2u64)
        .map(|k| {
            let view = View {
                offset: k * plane,
                dims: vec![(c1, stride), (c2, 2 * plane), (kh, kw), (kw, 1)],
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
