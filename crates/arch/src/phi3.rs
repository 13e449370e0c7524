//! Phi-3's named hook (`conversion/phi.py` `Phi3MiniModel`, and `PhiMoeModel` built on it): its
//! own hyper-parameter list and the longrope factors.
//!
//! * Keys ([`kvs`], [`crate::table::KvLayout::Phi3`]): context length, `rope.scaling.
//!   original_context_length`, embedding, feed-forward, blocks, heads, KV heads, RMS epsilon,
//!   `rope.dimension_count` = `int(partial_rotary_factor × hidden) // heads`, `rope.freq_base`,
//!   `general.file_type`, `attention.sliding_window` (0 when the config has none: how llama.cpp
//!   tells Phi-4 apart). No `rope.scaling.type`: the class does not call the common writer.
//! * Longrope ([`longrope`]): when `rope_parameters.long_factor` is non-empty, the F32 tensors
//!   `rope_factors_long.weight` / `rope_factors_short.weight` (the lists as given, each value
//!   rounded to f32) come first in the file, and `rope.scaling.attn_factor` =
//!   `sqrt(1 + ln(scale) / ln(original context))` for `scale = context / original > 1` (else 1)
//!   is written before every other key but `general.architecture` (the reference writes it while
//!   preparing tensors). transformers 5 reads a legacy `su` or `yarn` type as `longrope`.

use serde_json::Value;
use weightport_core::{Error, Format, Location, MetaValue, Result};

use crate::config::{bad, HParams};

/// The longrope tensors and key of a Phi-3 config.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LongRope {
    /// `rope_factors_long.weight`.
    pub long: Vec<f32>,
    /// `rope_factors_short.weight`.
    pub short: Vec<f32>,
    /// `phi3.rope.scaling.attn_factor`.
    pub attn_factor: f32,
}

/// `rope_parameters["original_max_position_embeddings"]` (the reference's KeyError when absent).
fn original_context(hp: &HParams) -> Result<u64> {
    hp.rope()
        .get("original_max_position_embeddings")
        .or_else(|| hp.raw.get("original_max_position_embeddings"))
        .and_then(Value::as_u64)
        .ok_or_else(|| {
            bad(
                &hp.path,
                "config.json lacks `original_max_position_embeddings`",
            )
        })
}

/// `int(partial_rotary_factor × hidden_size) // num_attention_heads`.
fn rope_dims(hp: &HParams) -> Result<u64> {
    let n_embd = hp.need_u32(&["hidden_size", "n_embd"])?;
    let n_head = hp.need_u32(&["num_attention_heads", "n_head"])?;
    if n_head == 0 {
        return Err(bad(&hp.path, "num_attention_heads is 0"));
    }
    let pct = hp
        .rope()
        .get("partial_rotary_factor")
        .and_then(Value::as_f64)
        .unwrap_or(1.0);
    Ok((pct * f64::from(n_embd)).floor() as u64 / u64::from(n_head))
}

/// The longrope factors and attention factor, when the config has `long_factor`.
pub(crate) fn longrope(hp: &HParams) -> Result<Option<LongRope>> {
    let rope = hp.rope();
    let list = |k: &str| -> Result<Option<Vec<f32>>> {
        match rope.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_f64().map(|x| x as f32))
                .collect::<Option<Vec<f32>>>()
                .map(Some)
                .ok_or_else(|| bad(&hp.path, format!("rope `{k}` is not a list of numbers"))),
            Some(_) => Err(bad(&hp.path, format!("rope `{k}` is not a list"))),
        }
    };
    let Some(long) = list("long_factor")?.filter(|l| !l.is_empty()) else {
        return Ok(None);
    };
    let max_pos = hp.need_u32(&["n_positions", "max_position_embeddings"])?;
    let orig = original_context(hp)?;
    let scale = f64::from(max_pos) / orig as f64;
    let kind = rope
        .get("rope_type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_lowercase();
    let attn = match kind.as_str() {
        // transformers 5 maps a legacy `su` or `yarn` type to `longrope` before the reference
        // sees it.
        "su" | "longrope" | "yarn" => {
            if scale > 1.0 {
                (1.0 + scale.ln() / (orig as f64).ln()).sqrt()
            } else {
                1.0
            }
        }
        other => {
            return Err(Error::Unsupported {
                at: Location::file(&hp.path),
                format: Some(Format::Gguf),
                what: format!("rope type `{other}` with long/short factors (Phi-3: longrope)"),
            })
        }
    };
    let short = list("short_factor")?
        .ok_or_else(|| bad(&hp.path, "rope `long_factor` without `short_factor`"))?;
    let dims = rope_dims(hp)?;
    if long.len() != short.len() || (long.len() as u64) * 2 != dims {
        return Err(bad(
            &hp.path,
            format!(
                "rope factors must be {} long (rope dimensions / 2): long {}, short {}",
                dims as f64 / 2.0,
                long.len(),
                short.len()
            ),
        ));
    }
    Ok(Some(LongRope {
        long,
        short,
        attn_factor: attn as f32,
    }))
}

/// Phi-3's keys from `{arch}.context_length` to `{arch}.attention.sliding_window`.
pub(crate) fn kvs(
    arch: &str,
    hp: &HParams,
    block_count: u32,
    file_type: u32,
    put: &mut impl FnMut(String, MetaValue),
) -> Result<()> {
    let a = |k: &str| format!("{arch}.{k}");
    let u = |v: u32| MetaValue::U32(v);
    put(
        a("context_length"),
        u(hp.need_u32(&["n_positions", "max_position_embeddings"])?),
    );
    let orig = u32::try_from(original_context(hp)?).map_err(|_| {
        bad(
            &hp.path,
            "original_max_position_embeddings does not fit u32",
        )
    })?;
    put(a("rope.scaling.original_context_length"), u(orig));
    put(
        a("embedding_length"),
        u(hp.need_u32(&["hidden_size", "n_embd"])?),
    );
    put(
        a("feed_forward_length"),
        u(hp.need_u32(&["intermediate_size"])?),
    );
    put(a("block_count"), u(block_count));
    put(
        a("attention.head_count"),
        u(hp.need_u32(&["num_attention_heads", "n_head"])?),
    );
    put(
        a("attention.head_count_kv"),
        u(hp.need_u32(&["num_key_value_heads", "n_head_kv"])?),
    );
    let eps = hp
        .float(&["rms_norm_eps"])?
        .ok_or_else(|| bad(&hp.path, "config.json lacks `rms_norm_eps`"))?;
    put(
        a("attention.layer_norm_rms_epsilon"),
        MetaValue::F32(eps as f32),
    );
    let dims = u32::try_from(rope_dims(hp)?).map_err(|_| bad(&hp.path, "rope dimensions"))?;
    put(a("rope.dimension_count"), u(dims));
    let theta = hp
        .rope()
        .get("rope_theta")
        .and_then(Value::as_f64)
        .ok_or_else(|| bad(&hp.path, "config.json lacks `rope_theta`"))?;
    put(a("rope.freq_base"), MetaValue::F32(theta as f32));
    put("general.file_type".into(), u(file_type));
    let window = hp.u32(&["sliding_window"])?.unwrap_or(0);
    put(a("attention.sliding_window"), u(window));
    Ok(())
}

/// Phi-3.5-MoE's two keys after Phi-3's (`PhiMoeModel.set_gguf_parameters`): the experts used
/// per token, then the expert count, both required (the reference's `find_hparam` raises).
pub(crate) fn expert_kvs(
    arch: &str,
    hp: &HParams,
    put: &mut impl FnMut(String, MetaValue),
) -> Result<()> {
    let used = hp
        .u32(&["num_experts_per_tok", "num_experts_per_token"])?
        .ok_or_else(|| bad(&hp.path, "config.json lacks `num_experts_per_tok`"))?;
    let count = hp
        .u32(&["num_local_experts", "num_experts"])?
        .ok_or_else(|| bad(&hp.path, "config.json lacks `num_local_experts`"))?;
    if used == 0 || used > count {
        return Err(bad(
            &hp.path,
            format!("{used} experts used per token of {count}"),
        ));
    }
    put(format!("{arch}.expert_used_count"), MetaValue::U32(used));
    put(format!("{arch}.expert_count"), MetaValue::U32(count));
    Ok(())
}
