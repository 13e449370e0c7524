//! The SSM families' named hooks: Mamba 2's hyper-parameter list
//! ([`crate::table::KvLayout::Mamba2`], `conversion/mamba.py` `Mamba2Model.set_gguf_parameters`)
//! and the group count its norm reshape needs.
//!
//! The class reads config.json itself (not through a transformers config class) and falls back
//! with Python's `or`: a missing, null or zero value takes the default. The rest of Mamba 2 is
//! table data: the name map, `dt_bias` → `dt_proj.bias`, and the splits (conv1d squeeze,
//! `A = -exp(A_log)` and `D` as `[heads, 1]`, the grouped norm).

use weightport_core::{MetaValue, Result};

use crate::config::{bad, HParams};

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

/// The class's dimensions; refuses what its assertions refuse (an inner size other than
/// `expand × hidden_size`, or not a multiple of the head dimension).
pub(crate) fn mamba2_dims(hp: &HParams) -> Result<Mamba2Dims> {
    let d_model = hp.need_u32(&["hidden_size", "d_model", "dim"])?;
    let expand = or(hp.u32(&["mamba_expand", "expand"])?, 2);
    let product = expand
        .checked_mul(d_model)
        .ok_or_else(|| bad(&hp.path, "expand × hidden_size does not fit 32 bits"))?;
    let d_inner = or(
        hp.u32(&["mamba_d_ssm", "intermediate_size", "d_inner"])?,
        product,
    );
    let head_dim = or(hp.u32(&["mamba_d_head", "head_dim"])?, 64);
    if d_inner != product {
        return Err(bad(
            &hp.path,
            format!("the SSM inner size {d_inner} is not expand {expand} × hidden_size {d_model}"),
        ));
    }
    if !d_inner.is_multiple_of(head_dim) {
        return Err(bad(
            &hp.path,
            format!("the SSM inner size {d_inner} is not a multiple of head_dim {head_dim}"),
        ));
    }
    Ok(Mamba2Dims {
        d_model,
        d_inner,
        n_group: or(hp.u32(&["n_groups"])?, 1),
        head_dim,
    })
}

/// Writes Mamba 2's keys through `put`, in the reference's order.
pub(crate) fn mamba2_kvs(
    hp: &HParams,
    block_count: u32,
    file_type: u32,
    put: &mut impl FnMut(String, MetaValue),
) -> Result<()> {
    let a = |k: &str| format!("mamba2.{k}");
    let d = mamba2_dims(hp)?;
    let d_conv = or(hp.u32(&["conv_kernel", "d_conv"])?, 4);
    let d_state = or(hp.u32(&["state_size", "d_state"])?, 128);
    let eps = match hp.float(&["layer_norm_epsilon", "rms_norm_eps"])? {
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

/// Python's `value or default` for an optional count.
fn or(v: Option<u32>, default: u32) -> u32 {
    v.filter(|&n| n != 0).unwrap_or(default)
}
