//! Fused HF tensors the reference writes as several GGUF tensors, and DeepSeek-V2's
//! multi-head-latent-attention keys (named hooks: the rules depend on hyper-parameters).
//!
//! A split yields, per part, the HF name the reference gives it (then mapped like any name) and
//! a [`View`] of the fused tensor: the pipeline computes any range of a part from the pieces of
//! the source under it, so nothing is buffered whole.

use std::path::Path;

use serde_json::Value;
use weightport_core::{Error, Format, Location, MetaValue, Result};

use crate::config::{bad, HParams};
use crate::plan::{SourceTensor, View};
use crate::table::{ExtraKv, Split, SplitRule};

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
        format: Format::Gguf,
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
