//! MiniMax-M2 ([`crate::table::Hook::MiniMaxM2`]): what the pinned reference converts but the
//! pinned llama.cpp cannot run, refused from config.json; the tensors llama.cpp's `minimax-m2`
//! graph sizes from the keys, checked against config.json.
//!
//! The reference (`MiniMaxM2Model`) writes whatever a release holds. llama.cpp's graph reads
//! `expert_gating_func` (absent: "none", and `build_moe_ffn` aborts when a context is created),
//! requires `attn_q_norm` over all heads (`[n_head · head_dim]`) and `attn_k_norm` over the KV
//! heads, the router, its score correction bias and the three expert stacks, and ropes the first
//! `rope.dimension_count` values of each head.

use std::path::Path;

use serde_json::Value;
use weightport_core::{Error, Format, Location, Result};

use crate::config::{bad, HParams};
use crate::origin::SourceTensor;

/// The most experts a config may announce (MiniMax-M2 has 256; the shapes are checked against
/// the count and llama.cpp sizes its routing by it).
const MAX_EXPERTS: u32 = 1 << 16;

/// The most layers a config may announce (MiniMax-M2 has 62; llama.cpp sizes its layers by the
/// count).
const MAX_LAYERS: u32 = 1 << 16;

fn refuse(hp: &HParams, what: String) -> Error {
    Error::Unsupported {
        at: Location::file(&hp.path),
        format: Some(Format::Gguf),
        what,
    }
}

/// Refuses, from config.json, the MiniMax-M2 variants whose GGUF file the pinned llama.cpp
/// cannot run or that the class does not compute (naming the key).
pub(crate) fn check_config(hp: &HParams) -> Result<()> {
    // The common writer turns `scoring_func` into `expert_gating_func`; the model routes with a
    // sigmoid (MiniMaxM2TopKRouter) whatever the key says.
    match hp.raw.get("scoring_func") {
        Some(Value::String(s)) if s == "sigmoid" => {}
        None | Some(Value::Null) => {
            return Err(refuse(
                hp,
                "MiniMax-M2 without `scoring_func`: the reference then writes no \
                 `expert_gating_func`, and llama.cpp aborts on such a file (`sigmoid`, as the \
                 released config.json says, is converted)"
                    .into(),
            ))
        }
        Some(v) => {
            return Err(refuse(
                hp,
                format!(
                "MiniMax-M2 with `scoring_func` {v} (its router is a sigmoid: `sigmoid` expected)"
            ),
            ))
        }
    }
    for (key, want) in [("use_qk_norm", true), ("use_routing_bias", true)] {
        if let Some(v) = hp.raw.get(key).filter(|v| !v.is_null()) {
            if v.as_bool() != Some(want) {
                return Err(refuse(
                    hp,
                    format!("MiniMax-M2 with `{key}` {v} (llama.cpp's graph needs it {want})"),
                ));
            }
        }
    }
    if let Some(v) = hp.raw.get("qk_norm_type").filter(|v| !v.is_null()) {
        if v.as_str() != Some("per_layer") {
            return Err(refuse(
                hp,
                format!("MiniMax-M2 with `qk_norm_type` {v} (only `per_layer`, one norm over all heads, is converted)"),
            ));
        }
    }
    check_layers_and_experts(hp)?;
    check_rotary(hp)
}

/// Refuses lightning-attention layers (`attn_type_list` entries other than 1: MiniMax-Text-01's
/// layout), shared experts, and layer or expert counts that are absurd or that llama.cpp cannot
/// route with.
fn check_layers_and_experts(hp: &HParams) -> Result<()> {
    if let Some(v) = hp.raw.get("attn_type_list").filter(|v| !v.is_null()) {
        let all_full = v
            .as_array()
            .is_some_and(|a| a.iter().all(|t| t.as_u64() == Some(1)));
        if !all_full {
            return Err(refuse(
                hp,
                "MiniMax-M2 with `attn_type_list` entries other than 1 (lightning-attention \
                 layers, which neither the class nor llama.cpp's graph has)"
                    .into(),
            ));
        }
    }
    if let Some(n) = hp.uint(&["shared_intermediate_size"])? {
        if n > 0 {
            return Err(refuse(
                hp,
                format!("MiniMax-M2 with `shared_intermediate_size` {n} (shared experts, which neither the class nor llama.cpp's graph has)"),
            ));
        }
    }
    let layers = hp.need_u32(&["num_hidden_layers"])?;
    if layers == 0 || layers > MAX_LAYERS {
        return Err(bad(
            &hp.path,
            format!("`num_hidden_layers` {layers} (1 to {MAX_LAYERS} expected)"),
        ));
    }
    let experts = hp.need_u32(&["num_local_experts"])?;
    if experts == 0 || experts > MAX_EXPERTS {
        return Err(bad(
            &hp.path,
            format!("`num_local_experts` {experts} (1 to {MAX_EXPERTS} expected)"),
        ));
    }
    let used = hp.need_u32(&["num_experts_per_tok"])?;
    if used == 0 || used > experts {
        return Err(bad(
            &hp.path,
            format!("`num_experts_per_tok` {used} (1 to `num_local_experts` {experts} expected)"),
        ));
    }
    Ok(())
}

/// Refuses a missing `rotary_dim` (the reference requires it), an odd one or one past the head
/// size (llama.cpp ropes pairs of a head's first `rotary_dim` values).
fn check_rotary(hp: &HParams) -> Result<()> {
    crate::shapes::check_sizes(hp)?;
    let head_dim = hp.need_u32(&["head_dim"])?;
    let rotary = hp
        .u32(&["rotary_dim"])?
        .ok_or_else(|| bad(&hp.path, "config.json lacks `rotary_dim`"))?;
    if rotary == 0 || rotary % 2 != 0 || rotary > head_dim {
        return Err(bad(
            &hp.path,
            format!(
                "`rotary_dim` {rotary} (an even size of at most `head_dim` {head_dim} expected)"
            ),
        ));
    }
    Ok(())
}

/// Refuses, naming it, a MiniMax-M2 tensor whose shape disagrees with config.json: the q/k
/// norms (over all heads), the router, its score correction bias and each expert projection;
/// the other names as [`crate::shapes::check_shape`] checks them. `hf` is the name after the
/// table's renames.
pub(crate) fn check_shape(hf: &str, t: &SourceTensor, hp: &HParams, dir: &Path) -> Result<()> {
    let part = hf
        .strip_prefix("model.layers.")
        .and_then(|r| r.split_once('.'))
        .map_or(hf, |(_, p)| p);
    let size = |k: &str| hp.need_u32(&[k]).map(u64::from);
    let want: Vec<u64> = match part {
        "self_attn.q_norm.weight" => vec![size("num_attention_heads")? * size("head_dim")?],
        "self_attn.k_norm.weight" => vec![size("num_key_value_heads")? * size("head_dim")?],
        "block_sparse_moe.gate.weight" => {
            vec![size("num_local_experts")?, size("hidden_size")?]
        }
        "block_sparse_moe.e_score_correction.bias" => vec![size("num_local_experts")?],
        _ => match expert_projection(part) {
            Some("w2") => vec![size("hidden_size")?, size("intermediate_size")?],
            Some(_) => vec![size("intermediate_size")?, size("hidden_size")?],
            None => return crate::shapes::check_shape(hf, t, hp, dir),
        },
    };
    crate::shapes::require_shape(t, &want, dir)
}

/// `w1`, `w2` or `w3` of `block_sparse_moe.experts.N.wK.weight`.
fn expert_projection(part: &str) -> Option<&str> {
    let rest = part.strip_prefix("block_sparse_moe.experts.")?;
    let (xid, w) = rest.split_once('.')?;
    let w = w.strip_suffix(".weight")?;
    (xid.bytes().all(|b| b.is_ascii_digit()) && matches!(w, "w1" | "w2" | "w3")).then_some(w)
}
