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

use crate::config::{bad, HParams};
use crate::plan::{RowScale, ValueOp};

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

/// A `find_hparam` of the class: `keys`, then (Falcon-H1) each under the `mamba_` prefix.
fn find_u32(hp: &HParams, keys: &[&str], falcon: bool) -> Result<Option<u32>> {
    let mut all: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    if falcon {
        all.extend(keys.iter().map(|k| format!("mamba_{k}")));
    }
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    hp.u32(&all)
}

/// A required [`find_u32`].
fn need(hp: &HParams, keys: &[&str], falcon: bool) -> Result<u32> {
    find_u32(hp, keys, falcon)?
        .ok_or_else(|| bad(&hp.path, format!("config.json lacks `{}`", keys[0])))
}

/// The class's dimensions (`falcon`: as `FalconH1Model` overrides them); refuses what its
/// assertions refuse: for Mamba 2 an inner size other than `expand × hidden_size` or not a
/// multiple of the head dimension, for Falcon-H1 an inner size not a multiple of `d_head` or an
/// activation other than silu.
pub(crate) fn mamba2_dims(hp: &HParams, falcon: bool) -> Result<Mamba2Dims> {
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
    let d = mamba2_dims(hp, falcon)?;
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

/// Python's `value or default` for an optional count.
fn or(v: Option<u32>, default: u32) -> u32 {
    v.filter(|&n| n != 0).unwrap_or(default)
}
