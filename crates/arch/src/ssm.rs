//! The SSM families' named hooks: Mamba 2's hyper-parameter list
//! ([`crate::table::KvLayout::Mamba2`], `conversion/mamba.py` `Mamba2Model.set_gguf_parameters`;
//! Falcon-H1's reading of it), the group count its norm reshape needs, and Falcon-H1's µP
//! multipliers ([`falcon_h1_scale`]).
//!
//! The class reads config.json itself (not through a transformers config class) and falls back
//! with Python's `or`: a missing, null or zero value takes the default. The rest of Mamba 2 is
//! table data: the name map, `dt_bias` → `dt_proj.bias`, and the splits (conv1d squeeze,
//! `A = -exp(A_log)` and `D` as `[heads, 1]`, the grouped norm).

use weightport_core::{MetaValue, Result};

use serde_json::Value;
use weightport_core::MetaType;

use crate::config::{bad, HParams};
use crate::table::{Hook, KvLayout};
use crate::value_op::{RowScale, ValueOp};

/// Mamba 2's dimensions as the class reads them.
pub(crate) struct Mamba2Dims {
    /// `hidden_size`.
    pub(crate) d_model: u32,
    /// The SSM inner size (`expand × d_model` unless given).
    pub(crate) d_inner: u32,
    /// `n_groups`.
    pub(crate) n_group: u32,
    /// The head dimension.
    pub(crate) head_dim: u32,
}

/// Which class reads the SSM hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// `Mamba2Model`.
    Mamba2,
    /// `FalconH1Model` (keys also under `mamba_`).
    FalconH1,
    /// `GraniteHybridModel` (keys also under `mamba_`).
    GraniteHybrid,
    /// `NemotronHModel` ([`nemotron_h_dims`]).
    NemotronH,
}

impl Flavor {
    /// The flavor of the release's architecture.
    pub(crate) fn of(hp: &HParams) -> Flavor {
        match crate::table::lookup(&hp.hf_arch) {
            Some(s) if s.kv_layout == KvLayout::FalconH1 => Flavor::FalconH1,
            Some(s) if s.hooks.contains(&Hook::GraniteHybridLayers) => Flavor::GraniteHybrid,
            Some(s) if s.hooks.contains(&Hook::NemotronH) => Flavor::NemotronH,
            _ => Flavor::Mamba2,
        }
    }
}

/// A `find_hparam` of the class: `keys`, then (`prefixed`) each under the `mamba_` prefix.
fn find_u32(hp: &HParams, keys: &[&str], prefixed: bool) -> Result<Option<u32>> {
    let mut all: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    if prefixed {
        all.extend(keys.iter().map(|k| format!("mamba_{k}")));
    }
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    hp.u32(&all)
}

/// A required [`find_u32`].
fn need(hp: &HParams, keys: &[&str], prefixed: bool) -> Result<u32> {
    find_u32(hp, keys, prefixed)?
        .ok_or_else(|| bad(&hp.path, format!("config.json lacks `{}`", keys[0])))
}

/// The Mamba 2 dimensions `NemotronHModel.__init__` uses: `d_model` from `mamba_head_dim` (sic),
/// the inner size `mamba_num_heads × mamba_head_dim`, `n_groups`.
pub(crate) fn nemotron_h_dims(hp: &HParams) -> Result<Mamba2Dims> {
    let d_model = need(hp, &["mamba_head_dim", "hidden_size", "d_model"], true)?;
    let heads = need(hp, &["num_heads"], true)?;
    let d_inner = heads.checked_mul(d_model).ok_or_else(|| {
        bad(
            &hp.path,
            "mamba_num_heads × mamba_head_dim does not fit 32 bits",
        )
    })?;
    let n_group = need(hp, &["n_groups", "num_groups"], true)?;
    if n_group == 0 || d_model == 0 {
        return Err(bad(&hp.path, "a zero `n_groups` or `mamba_head_dim`"));
    }
    Ok(Mamba2Dims {
        d_model,
        d_inner,
        n_group,
        head_dim: d_model,
    })
}

/// The class's dimensions (`falcon`: as `FalconH1Model` overrides them); refuses what its
/// assertions refuse: for Mamba 2 an inner size other than `expand × hidden_size` or not a
/// multiple of the head dimension, for Falcon-H1 an inner size not a multiple of `d_head` or an
/// activation other than silu.
pub(crate) fn mamba2_dims(hp: &HParams, flavor: Flavor) -> Result<Mamba2Dims> {
    if flavor == Flavor::GraniteHybrid {
        return granite_dims(hp);
    }
    if flavor == Flavor::NemotronH {
        return nemotron_h_dims(hp);
    }
    let falcon = flavor == Flavor::FalconH1;
    let d_model = need(hp, &["hidden_size", "d_model", "dim"], falcon)?;
    let expand = or(find_u32(hp, &["mamba_expand", "expand"], falcon)?, 2);
    let product = expand
        .checked_mul(d_model)
        .ok_or_else(|| bad(&hp.path, "expand × hidden_size does not fit 32 bits"))?;
    let head_dim = or(find_u32(hp, &["mamba_d_head", "head_dim"], falcon)?, 64);
    let dims = if falcon {
        let d_inner = need(hp, &["mamba_d_ssm"], true)?;
        let d_head = need(hp, &["d_head"], true)?;
        let act = hp.raw.get("hidden_act").filter(|v| !v.is_null());
        if act.is_some_and(|a| a.as_str() != Some("silu")) {
            return Err(bad(&hp.path, "`hidden_act` is not silu"));
        }
        multiple(hp, d_inner, d_head, "d_head")?;
        Mamba2Dims {
            d_model,
            d_inner,
            n_group: need(hp, &["n_groups"], true)?,
            head_dim,
        }
    } else {
        let d_inner = or(
            find_u32(hp, &["mamba_d_ssm", "intermediate_size", "d_inner"], false)?,
            product,
        );
        if d_inner != product {
            return Err(bad(
                &hp.path,
                format!(
                    "the SSM inner size {d_inner} is not expand {expand} × hidden_size {d_model}"
                ),
            ));
        }
        multiple(hp, d_inner, head_dim, "head_dim")?;
        Mamba2Dims {
            d_model,
            d_inner,
            n_group: or(find_u32(hp, &["n_groups"], false)?, 1),
            head_dim,
        }
    };
    if dims.head_dim == 0 || dims.n_group == 0 {
        return Err(bad(&hp.path, "a zero SSM head dimension or group count"));
    }
    Ok(dims)
}

/// Refuses an inner size that `what` does not divide.
fn multiple(hp: &HParams, d_inner: u32, by: u32, what: &str) -> Result<()> {
    if by != 0 && d_inner.is_multiple_of(by) {
        return Ok(());
    }
    Err(bad(
        &hp.path,
        format!("the SSM inner size {d_inner} is not a multiple of {what} {by}"),
    ))
}

/// Writes Mamba 2's keys (`Mamba2Model.set_gguf_parameters`) under `arch` through `put`, in the
/// reference's order.
pub(crate) fn mamba2_kvs(
    hp: &HParams,
    arch: &str,
    falcon: bool,
    block_count: u32,
    file_type: u32,
    put: &mut impl FnMut(String, MetaValue),
) -> Result<()> {
    let a = |k: &str| format!("{arch}.{k}");
    let flavor = if falcon {
        Flavor::FalconH1
    } else {
        Flavor::Mamba2
    };
    let d = mamba2_dims(hp, flavor)?;
    let d_conv = or(find_u32(hp, &["conv_kernel", "d_conv"], falcon)?, 4);
    let d_state = or(find_u32(hp, &["state_size", "d_state"], falcon)?, 128);
    let mut eps_keys = vec!["layer_norm_epsilon", "rms_norm_eps"];
    if falcon {
        eps_keys.extend(["mamba_layer_norm_epsilon", "mamba_rms_norm_eps"]);
    }
    let eps = match hp.float(&eps_keys)? {
        Some(e) if e != 0.0 => e,
        _ => 1e-5,
    };
    put(a("context_length"), MetaValue::U32(1 << 20));
    put(a("embedding_length"), MetaValue::U32(d.d_model));
    put(a("feed_forward_length"), MetaValue::U32(0));
    put(a("attention.head_count"), MetaValue::U32(0));
    put(a("block_count"), MetaValue::U32(block_count));
    put(a("ssm.conv_kernel"), MetaValue::U32(d_conv));
    put(a("ssm.inner_size"), MetaValue::U32(d.d_inner));
    put(a("ssm.state_size"), MetaValue::U32(d_state));
    put(
        a("ssm.time_step_rank"),
        MetaValue::U32(d.d_inner / d.head_dim),
    );
    put(a("ssm.group_count"), MetaValue::U32(d.n_group));
    put(
        a("attention.layer_norm_rms_epsilon"),
        MetaValue::F32(eps as f32),
    );
    put("general.file_type".into(), MetaValue::U32(file_type));
    Ok(())
}

/// Falcon-H1's multipliers of the tensor named `name` (the HF name) with `rows` rows, as
/// `FalconH1Model.modify_tensors` applies them: the first substring of its `elif` chain that
/// the name holds decides; `in_proj` is scaled by `ssm_in_multiplier`, then each band of rows
/// (z, x, B, C, dt: inner, inner, groups × state, groups × state, the rest) by its
/// `ssm_multipliers` entry. A multiplier the tensor needs and config.json lacks is refused (the
/// reference fails on it).
pub(crate) fn falcon_h1_scale(hp: &HParams, name: &str, rows: u64) -> Result<Option<ValueOp>> {
    let f = |k: &str| -> Result<f64> {
        hp.float(&[k])?
            .ok_or_else(|| bad(&hp.path, format!("config.json lacks `{k}`")))
    };
    let nth = |k: &str, i: usize| -> Result<f64> {
        hp.raw
            .get(k)
            .and_then(|v| v.get(i))
            .and_then(serde_json::Value::as_f64)
            .ok_or_else(|| bad(&hp.path, format!("config.json lacks `{k}[{i}]`")))
    };
    let whole = |factors: Vec<f64>| {
        Some(ValueOp::Scale(vec![RowScale {
            rows: 0..rows,
            factors,
        }]))
    };
    Ok(if name.contains("down_proj") {
        whole(vec![nth("mlp_multipliers", 1)?])
    } else if name.contains("gate_proj") {
        whole(vec![nth("mlp_multipliers", 0)?])
    } else if name.contains("k_proj") {
        whole(vec![f("key_multiplier")?, f("attention_in_multiplier")?])
    } else if name.contains("q_proj") || name.contains("v_proj") {
        whole(vec![f("attention_in_multiplier")?])
    } else if name.contains("o_proj") {
        whole(vec![f("attention_out_multiplier")?])
    } else if name.contains("out_proj") {
        whole(vec![f("ssm_out_multiplier")?])
    } else if name.contains("in_proj") {
        let ssm_in = f("ssm_in_multiplier")?;
        let d = u64::from(hp.need_u32(&["mamba_d_ssm"])?);
        let gs = u64::from(hp.need_u32(&["mamba_n_groups"])?)
            * u64::from(hp.need_u32(&["mamba_d_state"])?);
        // Python slices clamp to the tensor.
        let ends = [d, 2 * d, 2 * d + gs, 2 * d + 2 * gs, u64::MAX];
        let mut bands = Vec::new();
        let mut start = 0;
        for (k, end) in ends.into_iter().enumerate() {
            let (a, b) = (start.min(rows), end.min(rows));
            bands.push(RowScale {
                rows: a..b,
                factors: vec![ssm_in, nth("ssm_multipliers", k)?],
            });
            start = end;
        }
        Some(ValueOp::Scale(bands))
    } else if name.contains("lm_head") {
        whole(vec![f("lm_head_multiplier")?])
    } else if name.contains("embed_tokens") {
        whole(vec![f("embedding_multiplier")?])
    } else {
        None
    })
}

/// Granite 4 hybrid's dimensions (`GraniteHybridModel.__init__`): `d_model` from
/// `mamba_head_dim` before `hidden_size` (sic), the inner size `expand × d_model`, `n_groups`.
fn granite_dims(hp: &HParams) -> Result<Mamba2Dims> {
    let d_model = need(hp, &["mamba_head_dim", "hidden_size", "d_model"], true)?;
    let expand = need(hp, &["expand", "num_heads"], true)?;
    let d_inner = expand
        .checked_mul(d_model)
        .ok_or_else(|| bad(&hp.path, "expand × hidden_size does not fit 32 bits"))?;
    let n_group = need(hp, &["n_groups", "num_groups"], true)?;
    if n_group == 0 {
        return Err(bad(&hp.path, "`mamba_n_groups` is 0"));
    }
    Ok(Mamba2Dims {
        d_model,
        d_inner,
        n_group,
        head_dim: 1,
    })
}

/// The attention layers of a Granite 4 hybrid (`GraniteHybridModel.get_attn_layers`):
/// `layer_types` entries `attention` (transformers 5 rewrites them `full_attention`, which the
/// reference does not count), else `attn_layer_indices`, else every `attn_layer_period`-th layer
/// from `attn_layer_offset` (both required then, as the reference asserts).
pub(crate) fn attention_layers(hp: &HParams, block_count: u32) -> Result<Vec<u32>> {
    check_layers(hp, block_count)?;
    if let Some(types) = hp
        .raw
        .get("layer_types")
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty())
    {
        return Ok((0u32..)
            .zip(types)
            .filter(|(_, t)| t.as_str() == Some("attention"))
            .map(|(i, _)| i)
            .collect());
    }
    if let Some(list) = hp
        .raw
        .get("attn_layer_indices")
        .and_then(Value::as_array)
        .filter(|l| !l.is_empty())
    {
        return list
            .iter()
            .map(|v| {
                v.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| bad(&hp.path, format!("`attn_layer_indices` holds {v}")))
            })
            .collect();
    }
    let period = hp
        .u32(&["attn_layer_period"])?
        .filter(|&p| p != 0)
        .ok_or_else(|| {
            bad(
                &hp.path,
                "neither `attn_layer_indices` nor `attn_layer_period`",
            )
        })?;
    let offset = hp
        .u32(&["attn_layer_offset"])?
        .ok_or_else(|| bad(&hp.path, "`attn_layer_period` without `attn_layer_offset`"))?;
    Ok((0..block_count).filter(|i| i % period == offset).collect())
}

/// Whether HF tensor `name` lies in an attention layer (its block id is the first all-digit
/// part of the name, as the reference takes it).
pub(crate) fn in_attention_layer(hp: &HParams, block_count: u32, name: &str) -> Result<bool> {
    let Some(bid) = name
        .split('.')
        .find(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|p| p.parse::<u32>().ok())
    else {
        return Ok(false);
    };
    Ok(attention_layers(hp, block_count)?.contains(&bid))
}

/// Granite 4 hybrid's keys after Granite MoE's (`GraniteHybridModel.set_gguf_parameters`), each
/// `{arch}.<key>` through `put`; refuses a config without SSM layers (the reference converts it
/// as another architecture) and what its assertions refuse.
pub(crate) fn granite_hybrid_kvs(
    hp: &HParams,
    block_count: u32,
    put: &mut impl FnMut(&str, MetaValue),
) -> Result<()> {
    let d = granite_dims(hp)?;
    let attn = attention_layers(hp, block_count)?;
    let mut is_attn = vec![false; block_count as usize];
    for &i in &attn {
        if let Some(a) = is_attn.get_mut(i as usize) {
            *a = true;
        }
    }
    if is_attn.iter().all(|&a| a) {
        return Err(bad(
            &hp.path,
            "a Granite hybrid config without SSM layers (the reference writes it as granite or granitemoe)",
        ));
    }
    let state = &["state_size", "d_state", "state_dim", "ssm_state_size"];
    put(
        "ssm.conv_kernel",
        MetaValue::U32(need(hp, &["conv_kernel", "d_conv"], true)?),
    );
    put("ssm.state_size", MetaValue::U32(need(hp, state, true)?));
    put("ssm.group_count", MetaValue::U32(d.n_group));
    put("ssm.inner_size", MetaValue::U32(d.d_inner));
    put(
        "ssm.time_step_rank",
        MetaValue::U32(need(hp, &["n_heads", "num_heads"], true)?),
    );
    let kv = need(hp, &["num_key_value_heads", "n_head_kv"], true)?;
    let kv = i32::try_from(kv).map_err(|_| bad(&hp.path, "`num_key_value_heads` exceeds i32"))?;
    if let Some(rope_dim) = hp.u32(&["attn_rotary_emb"])?.filter(|&r| r != 0) {
        put("rope.dimension_count", MetaValue::U32(rope_dim));
    }
    let items = (0..block_count)
        .map(|i| MetaValue::I32(if is_attn[i as usize] { kv } else { 0 }))
        .collect();
    put(
        "attention.head_count_kv",
        MetaValue::TypedArray {
            elem: MetaType::I32,
            items,
        },
    );
    let bamba = hp
        .raw
        .get("architectures")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v.as_str() == Some("BambaForCausalLM")));
    put("rope.scaling.finetuned", MetaValue::Bool(bamba));
    if !bamba {
        put("context_length", MetaValue::U32(1 << 20));
    }
    let d_head = or(find_u32(hp, &["d_head"], true)?, 64);
    let act = hp.raw.get("hidden_act").filter(|v| !v.is_null());
    if act.is_some_and(|a| a.as_str() != Some("silu")) {
        return Err(bad(&hp.path, "`hidden_act` is not silu"));
    }
    multiple(hp, d.d_inner, d_head, "d_head")
}

/// Writes Jamba's keys (`JambaModel.set_gguf_parameters`) through `put`, in the reference's
/// order, every key it reads without a fallback required.
pub(crate) fn jamba_kvs(
    hp: &HParams,
    block_count: u32,
    file_type: u32,
    put: &mut impl FnMut(String, MetaValue),
) -> Result<()> {
    let a = |k: &str| format!("jamba.{k}");
    let req = |keys: &[&str]| need(hp, keys, false);
    let d_model = req(&["hidden_size", "mamba_d_model"])?;
    let d_inner = req(&["mamba_expand"])?
        .checked_mul(d_model)
        .ok_or_else(|| bad(&hp.path, "mamba_expand × hidden_size does not fit 32 bits"))?;
    let dt_rank = or(
        find_u32(hp, &["mamba_dt_rank"], false)?,
        d_model.div_ceil(16),
    );
    let eps = match hp.float(&["layer_norm_epsilon", "rms_norm_eps"])? {
        Some(e) if e != 0.0 => e,
        _ => 1e-6,
    };
    let kv = i32::try_from(req(&["num_key_value_heads"])?)
        .map_err(|_| bad(&hp.path, "`num_key_value_heads` exceeds i32"))?;
    check_layers(hp, block_count)?;
    let offset = req(&["attn_layer_offset"])?;
    let period = req(&["attn_layer_period"])?;
    if period == 0 {
        return Err(bad(&hp.path, "`attn_layer_period` is 0"));
    }
    let items = (0..block_count)
        .map(|i| {
            let attn = i >= offset && (i - offset).is_multiple_of(period);
            MetaValue::I32(if attn { kv } else { 0 })
        })
        .collect();
    put(a("block_count"), MetaValue::U32(block_count));
    put(
        a("context_length"),
        MetaValue::U32(req(&["max_position_embeddings", "n_ctx"])?),
    );
    put(a("embedding_length"), MetaValue::U32(d_model));
    put(
        a("feed_forward_length"),
        MetaValue::U32(req(&["intermediate_size"])?),
    );
    put(
        a("attention.head_count"),
        MetaValue::U32(req(&["num_attention_heads"])?),
    );
    put(
        a("attention.head_count_kv"),
        MetaValue::TypedArray {
            elem: MetaType::I32,
            items,
        },
    );
    put(
        a("ssm.conv_kernel"),
        MetaValue::U32(or(find_u32(hp, &["mamba_d_conv"], false)?, 4)),
    );
    put(a("ssm.inner_size"), MetaValue::U32(d_inner));
    put(
        a("ssm.state_size"),
        MetaValue::U32(or(find_u32(hp, &["mamba_d_state"], false)?, 16)),
    );
    put(a("ssm.time_step_rank"), MetaValue::U32(dt_rank));
    put(
        a("attention.layer_norm_rms_epsilon"),
        MetaValue::F32(eps as f32),
    );
    put(
        a("expert_count"),
        MetaValue::U32(req(&["num_local_experts", "num_experts"])?),
    );
    put(
        a("expert_used_count"),
        MetaValue::U32(req(&["num_experts_per_tok", "num_experts_per_token"])?),
    );
    put("general.file_type".into(), MetaValue::U32(file_type));
    Ok(())
}

/// Writes Mamba 1's keys (`MambaModel.set_gguf_parameters`) through `put`, in the reference's
/// order; refuses an inner size other than 2 × hidden (the class asserts it).
pub(crate) fn mamba1_kvs(
    hp: &HParams,
    block_count: u32,
    file_type: u32,
    put: &mut impl FnMut(String, MetaValue),
) -> Result<()> {
    let a = |k: &str| format!("mamba.{k}");
    let d_model = need(hp, &["hidden_size", "d_model"], false)?;
    let twice = d_model
        .checked_mul(2)
        .ok_or_else(|| bad(&hp.path, "2 × hidden_size does not fit 32 bits"))?;
    let d_inner = or(
        find_u32(hp, &["intermediate_size", "d_inner"], false)?,
        twice,
    );
    if d_inner != twice {
        return Err(bad(
            &hp.path,
            format!("the SSM inner size {d_inner} is not 2 × hidden_size {d_model}"),
        ));
    }
    let dt_rank = or(
        find_u32(hp, &["time_step_rank", "dt_rank"], false)?,
        d_model.div_ceil(16),
    );
    let eps = match hp.float(&["layer_norm_epsilon", "rms_norm_eps"])? {
        Some(e) if e != 0.0 => e,
        _ => 1e-5,
    };
    let falcon = hp.raw.get("model_type").and_then(Value::as_str) == Some("falcon_mamba");
    put(a("context_length"), MetaValue::U32(1 << 20));
    put(a("embedding_length"), MetaValue::U32(d_model));
    put(a("feed_forward_length"), MetaValue::U32(0));
    put(a("attention.head_count"), MetaValue::U32(0));
    put(a("block_count"), MetaValue::U32(block_count));
    put(
        a("ssm.conv_kernel"),
        MetaValue::U32(or(find_u32(hp, &["conv_kernel", "d_conv"], false)?, 4)),
    );
    put(a("ssm.inner_size"), MetaValue::U32(d_inner));
    put(
        a("ssm.state_size"),
        MetaValue::U32(or(find_u32(hp, &["state_size", "d_state"], false)?, 16)),
    );
    put(a("ssm.time_step_rank"), MetaValue::U32(dt_rank));
    put(
        a("attention.layer_norm_rms_epsilon"),
        MetaValue::F32(eps as f32),
    );
    put(a("ssm.dt_b_c_rms"), MetaValue::Bool(falcon));
    put("general.file_type".into(), MetaValue::U32(file_type));
    Ok(())
}

/// The most layers a per-layer array is written for: more is refused (a config can claim 2^32
/// layers; the arrays and layer sets are built in memory).
const MAX_LAYERS: u32 = 1 << 16;

/// Granite MoE's shared MLP with routed experts (`num_local_experts` truthy): `blk.N.ffn_gate`,
/// `ffn_up`, `ffn_down` of a `shared_mlp.` tensor become the shared expert's `ffn_*_shexp`
/// ([`crate::table::Hook::GraniteHybridLayers`]); any other name is returned as it is.
pub(crate) fn granite_shared_expert_name(hp: &HParams, hf: &str, name: String) -> Result<String> {
    if !hf.contains(".shared_mlp.") || hp.u32(&["num_local_experts"])?.unwrap_or(0) == 0 {
        return Ok(name);
    }
    for part in ["ffn_gate", "ffn_up", "ffn_down"] {
        if let Some((stem, suffix)) = name.split_once(&format!(".{part}.")) {
            return Ok(format!("{stem}.{part}_shexp.{suffix}"));
        }
    }
    Ok(name)
}

/// Refuses a block count past [`MAX_LAYERS`].
fn check_layers(hp: &HParams, block_count: u32) -> Result<()> {
    if block_count > MAX_LAYERS {
        return Err(bad(
            &hp.path,
            format!("{block_count} layers (more than {MAX_LAYERS})"),
        ));
    }
    Ok(())
}

/// Python's `value or default` for an optional count.
fn or(v: Option<u32>, default: u32) -> u32 {
    v.filter(|&n| n != 0).unwrap_or(default)
}
