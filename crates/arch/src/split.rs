//! Fused HF tensors the reference writes as several GGUF tensors (DeepSeek-V2's MLA `kv_b_proj`,
//! GPT-OSS's fused and MXFP4 experts), and DeepSeek-V2's multi-head-latent-attention keys (named
//! hooks: the rules depend on hyper-parameters and shapes).
//!
//! A split yields, per part, the HF name the reference gives it (then mapped like any name) and
//! a [`View`] of the fused tensor: the pipeline computes any range of a part from the pieces of
//! the source under it, so nothing is buffered whole.

use std::path::Path;

use serde_json::Value;
use weightport_core::{Error, Format, Location, MetaValue, Result};

use crate::config::{bad, HParams};
use crate::origin::{BlockPart, Origin, SourceTensor, View};
use crate::table::{ArchSpec, ExtraKv, Split, SplitRule};
use weightport_core::DType;

/// The rewrite of an assembled MXFP4 block, defined beside [`Origin`] (which carries it).
pub use crate::origin::BlockMap;

/// The parts of `t` (HF name `hf`, after the architecture's renames) under `split`.
pub fn views(
    split: &Split,
    hf: &str,
    t: &SourceTensor,
    hp: &HParams,
    dir: &Path,
) -> Result<Vec<(String, View)>> {
    match split.rule {
        SplitRule::MlaKvB => mla_kv_b(hf, t, hp, dir),
        SplitRule::GateUpAlternating => {
            // [E, H, 2F] transposed to [E, 2F, H], rows alternating: (e, f, h) ← e·H·2F + h·2F + 2f.
            let [e, h, f2] = dims3(t, dir)?;
            odd(f2, t, dir)?;
            let stem = hf.trim_end_matches("gate_up_proj");
            Ok(["gate_proj", "up_proj"]
                .iter()
                .enumerate()
                .map(|(k, w)| {
                    let view = View {
                        offset: k as u64,
                        dims: vec![(e, h * f2), (f2 / 2, 2), (h, f2)],
                    };
                    (format!("{stem}{w}.weight"), view)
                })
                .collect())
        }
        SplitRule::GateUpBiasAlternating => {
            let [e, f2] = t.shape[..] else {
                return Err(refuse(
                    dir,
                    t,
                    format!("a 2-D tensor expected, not {:?}", t.shape),
                ));
            };
            odd(f2, t, dir)?;
            let stem = hf.trim_end_matches("gate_up_proj_bias");
            Ok(["gate_proj", "up_proj"]
                .iter()
                .enumerate()
                .map(|(k, w)| {
                    let view = View {
                        offset: k as u64,
                        dims: vec![(e, f2), (f2 / 2, 2)],
                    };
                    (format!("{stem}{w}.bias"), view)
                })
                .collect())
        }
        SplitRule::DownTransposed => {
            // [E, F, H] transposed to [E, H, F]: (e, h, f) ← e·F·H + f·H + h.
            let [e, f, h] = dims3(t, dir)?;
            let view = View {
                offset: 0,
                dims: vec![(e, f * h), (h, 1), (f, h)],
            };
            Ok(vec![(format!("{hf}.weight"), view)])
        }
        SplitRule::GateUpHalves => gate_up_halves(hf, t, dir),
        SplitRule::GateUpLastHalvesTransposed => {
            // [E, A, B]: part k = [..., k·B/2..(k+1)·B/2] transposed to [E, B/2, A]:
            // (e, j, a) ← e·A·B + a·B + k·B/2 + j.
            let [e, a, b] = dims3(t, dir)?;
            odd(b, t, dir)?;
            let stem = hf.trim_end_matches("gate_up_proj");
            Ok(["gate_proj", "up_proj"]
                .iter()
                .enumerate()
                .map(|(k, w)| {
                    let view = View {
                        offset: k as u64 * (b / 2),
                        dims: vec![(e, a * b), (b / 2, 1), (a, b)],
                    };
                    (format!("{stem}{w}.weight"), view)
                })
                .collect())
        }
        SplitRule::DownAsIs => {
            // [E, H, F] as is: (e, h, f) ← e·H·F + h·F + f.
            let [e, h, f] = dims3(t, dir)?;
            let view = View {
                offset: 0,
                dims: vec![(e, h * f), (h, f), (f, 1)],
            };
            let stem = hf.trim_end_matches(".weight");
            Ok(vec![(format!("{stem}.weight"), view)])
        }
        SplitRule::Mxfp4 { .. } => Err(refuse(dir, t, "MXFP4 scales without a repack".into())),
        SplitRule::Conv1dSqueeze => {
            // [C, 1, K] as [C, K]: (c, k) ← c·K + k.
            let [c, 1, k] = t.shape[..] else {
                return Err(refuse(
                    dir,
                    t,
                    format!(
                        "a conv1d weight [channels, 1, kernel] expected, not {:?}",
                        t.shape
                    ),
                ));
            };
            let view = View {
                offset: 0,
                dims: vec![(c, k), (k, 1)],
            };
            Ok(vec![(hf.to_owned(), view)])
        }
        SplitRule::SsmA | SplitRule::AppendUnitAxis => Ok(vec![(hf.to_owned(), unit_axis(t))]),
        SplitRule::SsmNormGroups => ssm_norm_groups(hf, t, hp, dir),
        SplitRule::RowHalves => row_halves(hf, t, hp, dir),
        SplitRule::ExpertRowHalves => expert_row_halves(hf, t, hp, dir),
        // Parts of several views each: the planner asks `crate::qwen_next::qkvz_parts`.
        SplitRule::QkvzHeads => Err(refuse(dir, t, "in_proj_qkvz outside Qwen3-Next".into())),
    }
}

/// `[n]` as `[n, 1]` (`reshape((*shape, 1))`); a tensor of more dimensions as it is.
fn unit_axis(t: &SourceTensor) -> View {
    let mut dims = contiguous(&t.shape);
    if t.shape.len() == 1 {
        dims.push((1, 1));
    }
    View { offset: 0, dims }
}

/// `[inner]` as `[n_groups, inner / n_groups]` (`Mamba2Model.modify_tensors`).
fn ssm_norm_groups(
    hf: &str,
    t: &SourceTensor,
    hp: &HParams,
    dir: &Path,
) -> Result<Vec<(String, View)>> {
    let dims = crate::ssm::mamba2_dims(hp, crate::ssm::Flavor::of(hp))?;
    let (d, g) = (u64::from(dims.d_inner), u64::from(dims.n_group));
    if t.shape.iter().product::<u64>() != d || !d.is_multiple_of(g) {
        return Err(refuse(
            dir,
            t,
            format!(
                "an SSM norm of {d} values in {g} groups expected, not {:?}",
                t.shape
            ),
        ));
    }
    let view = View {
        offset: 0,
        dims: vec![(g, d / g), (d / g, 1)],
    };
    Ok(vec![(hf.to_owned(), view)])
}

/// `[2·n, cols]` as its two halves of rows, n = `shared_intermediate_size` (the reference
/// asserts the rows are 2·n): `…gate_proj.weight` and `…up_proj.weight` in place of
/// `…input_linear.weight`.
fn row_halves(hf: &str, t: &SourceTensor, hp: &HParams, dir: &Path) -> Result<Vec<(String, View)>> {
    let n = u64::from(hp.need_u32(&["shared_intermediate_size"])?);
    let [rows, cols] = t.shape[..] else {
        return Err(refuse(
            dir,
            t,
            format!("a 2-D tensor expected, not {:?}", t.shape),
        ));
    };
    if rows != 2 * n {
        return Err(refuse(
            dir,
            t,
            format!("{rows} rows are not 2 × shared_intermediate_size {n}"),
        ));
    }
    let stem = hf.trim_end_matches("input_linear.weight");
    Ok(["gate_proj", "up_proj"]
        .iter()
        .enumerate()
        .map(|(k, w)| {
            let view = View {
                offset: k as u64 * n * cols,
                dims: vec![(n, cols), (cols, 1)],
            };
            (format!("{stem}{w}.weight"), view)
        })
        .collect())
}

/// [`SplitRule::ExpertRowHalves`]: `[E, 2F, H]` → gate `[E, F, H]` and up `[E, F, H]`, F =
/// `intermediate_size`.
fn expert_row_halves(
    hf: &str,
    t: &SourceTensor,
    hp: &HParams,
    dir: &Path,
) -> Result<Vec<(String, View)>> {
    let f = u64::from(hp.need_u32(&["intermediate_size"])?);
    let [e, f2, h] = dims3(t, dir)?;
    if f.checked_mul(2) != Some(f2) {
        return Err(refuse(
            dir,
            t,
            format!("{f2} rows per expert are not 2 × intermediate_size {f}"),
        ));
    }
    // The reference writes what it reads; llama.cpp cannot load stacks that disagree with
    // `expert_count`.
    let n = hp.u32(&["num_local_experts"])?;
    if n.map(u64::from) != Some(e) {
        let said = n.map_or("nothing".to_owned(), |n| n.to_string());
        return Err(refuse(
            dir,
            t,
            format!("{e} experts, config.json's `num_local_experts` says {said}"),
        ));
    }
    let stem = hf.trim_end_matches("input_linear.weight");
    Ok(["gate_proj", "up_proj"]
        .iter()
        .enumerate()
        .map(|(k, w)| {
            let view = View {
                offset: k as u64 * f * h,
                dims: vec![(e, f2 * h), (f, h), (h, 1)],
            };
            (format!("{stem}{w}.weight"), view)
        })
        .collect())
}

/// The dims of a row-major tensor of `shape` read as it is.
fn contiguous(shape: &[u64]) -> Vec<(u64, u64)> {
    let mut stride = 1;
    let mut dims: Vec<(u64, u64)> = shape
        .iter()
        .rev()
        .map(|&n| {
            let d = (n, stride);
            stride *= n;
            d
        })
        .collect();
    dims.reverse();
    dims
}

/// Refuses an odd number of alternating gate/up columns (the reference's `::2` and `1::2` would
/// give parts of different sizes).
fn odd(f2: u64, t: &SourceTensor, dir: &Path) -> Result<()> {
    if f2.is_multiple_of(2) {
        return Ok(());
    }
    Err(refuse(
        dir,
        t,
        format!("{f2} gate/up columns do not alternate"),
    ))
}

/// transformers 5's `gate_up_proj` `[E, 2F, H]`: gate = rows `0..F` of each expert, up = rows
/// `F..2F`: (e, f, h) ← e·2F·H + (part·F + f)·H + h.
fn gate_up_halves(hf: &str, t: &SourceTensor, dir: &Path) -> Result<Vec<(String, View)>> {
    let [e, f2, h] = dims3(t, dir)?;
    if !f2.is_multiple_of(2) {
        return Err(refuse(
            dir,
            t,
            format!("{f2} gate/up rows cannot be halved"),
        ));
    }
    let f = f2 / 2;
    let stem = hf
        .trim_end_matches(".weight")
        .trim_end_matches("gate_up_proj");
    Ok(["gate_proj", "up_proj"]
        .iter()
        .enumerate()
        .map(|(k, w)| {
            let view = View {
                offset: k as u64 * f * h,
                dims: vec![(e, f2 * h), (f, h), (h, 1)],
            };
            (format!("{stem}{w}.weight"), view)
        })
        .collect())
}

/// The three dimensions of a fused expert tensor.
fn dims3(t: &SourceTensor, dir: &Path) -> Result<[u64; 3]> {
    match t.shape[..] {
        [e, a, b] => Ok([e, a, b]),
        _ => Err(refuse(
            dir,
            t,
            format!("a 3-D expert tensor expected, not {:?}", t.shape),
        )),
    }
}

/// `kv_b_proj` `[n_head_kv·(nope + v), rank]` viewed as `[n_head_kv, nope + v, rank]`:
/// `k_b_proj` = each head's first `nope` rows transposed (`[n_head_kv, rank, nope]`),
/// `v_b_proj` = its last `v` rows (`[n_head_kv, v, rank]`). `n_head_kv` is config.json's
/// `num_key_value_heads` (the reference splits before it sets the key to 1).
fn mla_kv_b(hf: &str, t: &SourceTensor, hp: &HParams, dir: &Path) -> Result<Vec<(String, View)>> {
    let n_kv = u64::from(hp.need_u32(&["num_key_value_heads"])?);
    let v = u64::from(hp.need_u32(&["v_head_dim"])?);
    let nope = u64::from(hp.need_u32(&["qk_nope_head_dim"])?);
    let [rows, rank] = t.shape[..] else {
        return Err(refuse(
            dir,
            t,
            format!("a 2-D tensor expected, not {:?}", t.shape),
        ));
    };
    if n_kv.checked_mul(v + nope) != Some(rows) {
        return Err(refuse(
            dir,
            t,
            format!("{rows} rows, not num_key_value_heads × (v_head_dim + qk_nope_head_dim) = {n_kv} × {}", v + nope),
        ));
    }
    let head = (v + nope) * rank;
    let k_b = View {
        offset: 0,
        dims: vec![(n_kv, head), (rank, 1), (nope, rank)],
    };
    let v_b = View {
        offset: nope * rank,
        dims: vec![(n_kv, head), (v, rank), (rank, 1)],
    };
    Ok(vec![
        (hf.replace("kv_b_proj", "k_b_proj"), k_b),
        (hf.replace("kv_b_proj", "v_b_proj"), v_b),
    ])
}

fn refuse(dir: &Path, t: &SourceTensor, what: String) -> Error {
    Error::Unsupported {
        at: Location::file(dir).tensor(&t.name),
        format: Some(Format::Gguf),
        what,
    }
}

/// DeepSeek-V2's keys after the common ones (`DeepseekV2Model.set_gguf_parameters`), one
/// [`ExtraKv`] at a time; `put` takes the key without the `{arch}.` prefix.
pub fn mla_kvs(
    extra: ExtraKv,
    hp: &HParams,
    block_count: u32,
    put: &mut dyn FnMut(&str, MetaValue),
) -> Result<()> {
    let present = |k: &str| hp.raw.get(k).is_some_and(|v| !v.is_null());
    match extra {
        ExtraKv::LeadingDenseBlockCount => {
            let n = match hp.u32(&["first_k_dense_replace"])? {
                Some(n) => n,
                None if present("n_routed_experts") => 0,
                None => block_count,
            };
            put("leading_dense_block_count", MetaValue::U32(n));
        }
        ExtraKv::QLoraRank if present("q_lora_rank") => {
            put(
                "attention.q_lora_rank",
                MetaValue::U32(hp.need_u32(&["q_lora_rank"])?),
            );
        }
        ExtraKv::MlaLengths => {
            let rank = hp.u32(&["kv_lora_rank"])?.unwrap_or(512);
            let rope = hp.need_u32(&["qk_rope_head_dim"])?;
            let nope = hp.need_u32(&["qk_nope_head_dim"])?;
            let v = hp.need_u32(&["v_head_dim"])?;
            let sum = |a: u32, b: u32| {
                a.checked_add(b)
                    .ok_or_else(|| bad(&hp.path, "MLA head sizes overflow"))
            };
            put("attention.kv_lora_rank", MetaValue::U32(rank));
            put("attention.key_length", MetaValue::U32(sum(rank, rope)?));
            put("attention.value_length", MetaValue::U32(rank));
            put("attention.key_length_mla", MetaValue::U32(sum(nope, rope)?));
            put("attention.value_length_mla", MetaValue::U32(v));
        }
        ExtraKv::ExpertSharedCount => {
            let n = hp.u32(&["n_shared_experts"])?.unwrap_or(0);
            put("expert_shared_count", MetaValue::U32(n));
        }
        ExtraKv::ExpertWeightsScale => {
            if let Some(f) = hp.float(&["routed_scaling_factor"])? {
                put("expert_weights_scale", MetaValue::F32(f as f32));
            }
        }
        ExtraKv::ExpertWeightsNorm if hp.bool("norm_topk_prob") == Some(true) => {
            put("expert_weights_norm", MetaValue::Bool(true));
        }
        ExtraKv::YarnLogMultiplier => {
            if let Some(m) = hp.rope().get("mscale_all_dim").and_then(Value::as_f64) {
                put(
                    "rope.scaling.yarn_log_multiplier",
                    MetaValue::F32((0.1 * m) as f32),
                );
            }
        }
        _ => {}
    }
    Ok(())
}

/// The MXFP4 expert tensors of a release whose `quantization_config.quant_method` is "mxfp4":
/// each `*_scales` tensor with its `*_blocks`, repacked when the scales are reached.
pub struct Mxfp4<'a> {
    active: bool,
    tensors: &'a [SourceTensor],
    /// HF name → index, for the `*_blocks` of a `*_scales`.
    by_name: std::collections::HashMap<&'a str, usize>,
    /// Position of each tensor in the reference's order.
    position: Vec<usize>,
    dir: &'a Path,
}

impl<'a> Mxfp4<'a> {
    /// The release's MXFP4 tensors for `spec` (`order`: the reference's tensor order). A release
    /// holding `*_blocks` without the mxfp4 quantization method is refused.
    pub fn new(
        spec: &ArchSpec,
        hp: &HParams,
        tensors: &'a [SourceTensor],
        order: &[usize],
        dir: &'a Path,
    ) -> Result<Mxfp4<'a>> {
        let method = hp
            .raw
            .get("quantization_config")
            .and_then(|q| q.get("quant_method"))
            .and_then(Value::as_str);
        let has_rule = spec
            .splits
            .iter()
            .any(|s| matches!(s.rule, SplitRule::Mxfp4 { .. }));
        let active = has_rule && method == Some("mxfp4");
        if let Some(t) = tensors.iter().find(|t| t.name.ends_with("_blocks")) {
            if has_rule && !active {
                return Err(refuse(
                    dir,
                    t,
                    "MXFP4 blocks in a release whose quantization_config is not mxfp4".into(),
                ));
            }
        }
        let mut position = vec![0; tensors.len()];
        for (p, &i) in order.iter().enumerate() {
            position[i] = p;
        }
        Ok(Mxfp4 {
            active,
            tensors,
            by_name: tensors
                .iter()
                .enumerate()
                .map(|(i, t)| (t.name.as_str(), i))
                .collect(),
            position,
            dir,
        })
    }

    /// The release's expert weights are MXFP4 (`general.file_type` becomes MOSTLY_MXFP4_MOE).
    pub fn active(&self) -> bool {
        self.active
    }

    /// `hf` is a `*_blocks` tensor, written with its scales.
    pub fn consumed(&self, hf: &str) -> bool {
        self.active && hf.ends_with("_blocks")
    }

    /// The outputs of scales tensor `i` (named `hf`) with its blocks: `(HF name the reference
    /// gives the part, origin, shape)` per part.
    pub fn repack(
        &self,
        hf: &str,
        i: usize,
        alternating: bool,
    ) -> Result<Vec<(String, Origin, Vec<u64>)>> {
        let (j, [e, rows, nb]) = self.blocks_of(i, alternating)?;
        let (scales, blocks) = (&self.tensors[i], &self.tensors[j]);
        let stem = hf.trim_end_matches(if alternating {
            "gate_up_proj_scales"
        } else {
            "down_proj_scales"
        });
        let names: &[&str] = if alternating {
            &["gate_proj", "up_proj"]
        } else {
            &["down_proj"]
        };
        let step = if alternating { 2 } else { 1 };
        let part = |t: &SourceTensor, index: usize, k: u64, width: u64| BlockPart {
            name: t.name.clone(),
            index,
            view: View {
                offset: k * nb * width,
                dims: vec![
                    (e, rows * nb * width),
                    (rows / step, step * nb * width),
                    (nb * width, 1),
                ],
            },
            width,
        };
        Ok(names
            .iter()
            .enumerate()
            .map(|(k, w)| {
                let origin = Origin::Blocks {
                    parts: vec![part(scales, i, k as u64, 1), part(blocks, j, k as u64, 16)],
                    map: BlockMap::Mxfp4Nibbles,
                };
                (
                    format!("{stem}{w}.weight"),
                    origin,
                    vec![e, rows / step, nb * 32],
                )
            })
            .collect())
    }

    /// The index of the blocks of scales tensor `i` and the scales' `[experts, rows, blocks]`,
    /// refusing what the reference would mix up: scales without their blocks or stored before
    /// them, shapes or types that do not pair, rows that do not alternate gate/up.
    fn blocks_of(&self, i: usize, alternating: bool) -> Result<(usize, [u64; 3])> {
        let scales = &self.tensors[i];
        if !self.active {
            return Err(refuse(
                self.dir,
                scales,
                "MXFP4 scales in a release whose quantization_config is not mxfp4".into(),
            ));
        }
        let blocks_name = scales.name.replace("_scales", "_blocks");
        let j = *self.by_name.get(blocks_name.as_str()).ok_or_else(|| {
            refuse(
                self.dir,
                scales,
                format!("MXFP4 scales without `{blocks_name}`"),
            )
        })?;
        let blocks = &self.tensors[j];
        if self.position[j] > self.position[i] {
            // The reference pairs scales with the blocks read last: it would mix layers.
            return Err(refuse(
                self.dir,
                scales,
                "MXFP4 scales stored before their blocks".into(),
            ));
        }
        let [e, rows, nb] = scales.shape[..] else {
            return Err(refuse(
                self.dir,
                scales,
                format!("3-D scales expected, not {:?}", scales.shape),
            ));
        };
        let want = [e, rows, nb, 16];
        if blocks.shape != want || blocks.dtype != DType::U8 || scales.dtype != DType::U8 {
            return Err(refuse(
                self.dir,
                blocks,
                format!(
                    "MXFP4 blocks must be U8 {want:?} for scales U8 {:?} (found {} {:?}, scales {})",
                    scales.shape, blocks.dtype, blocks.shape, scales.dtype
                ),
            ));
        }
        if alternating && !rows.is_multiple_of(2) {
            return Err(refuse(
                self.dir,
                scales,
                format!("{rows} rows do not alternate gate/up"),
            ));
        }
        Ok((j, [e, rows, nb]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mxfp4_nibbles_go_from_pairs_to_halves() {
        // Release: element 2i in the low nibble of byte i, 2i + 1 in the high one. Element n is
        // n for n < 16 and 31 - n above, so every nibble of a byte is told apart.
        let val = |n: usize| if n < 16 { n as u8 } else { (31 - n) as u8 };
        let mut block = [0u8; 17];
        block[0] = 0x7F;
        for i in 0..16 {
            block[1 + i] = val(2 * i) | (val(2 * i + 1) << 4);
        }
        BlockMap::Mxfp4Nibbles.apply(&mut block);
        assert_eq!(block[0], 0x7F);
        for j in 0..16 {
            assert_eq!(block[1 + j] & 0x0F, val(j), "low nibble of {j}");
            assert_eq!(block[1 + j] >> 4, val(j + 16), "high nibble of {j}");
        }
    }
}
