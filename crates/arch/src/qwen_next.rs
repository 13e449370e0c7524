//! Qwen3-Next's named hooks (`conversion/qwen.py` `Qwen3NextModel` and `_QwenMtpMixin`,
//! [`crate::table::Hook::QwenLinearAttention`]): what `Qwen3NextConfig` fills in, the
//! multi-token-prediction block counted as layers, the gated delta-net keys, the regrouped
//! `in_proj_qkvz` rows and the value transforms; plus the checks the reference does not make
//! (a linear-attention tensor of the wrong shape or missing is refused, naming it).
//!
//! The rest is table data: the names, `dt_bias` → `dt_proj.bias`, the conv1d squeeze.

use std::path::Path;

use serde_json::Value;
use weightport_core::{Error, Format, Location, MetaType, MetaValue, Result};

use crate::config::{bad, HParams};
use crate::origin::{SourceTensor, View};
use crate::value_op::ValueOp;

/// The most multi-token-prediction layers accepted (a hostile name can claim 10^9).
const MAX_MTP_LAYERS: u32 = 1 << 10;

/// The largest size or head count of the gated delta-net accepted (real releases: 2048 wide,
/// heads of 128): the products that size its tensors then fit 64 bits.
const MAX_DIM: u32 = 1 << 20;

/// The most layers a per-layer array is written for.
const MAX_LAYERS: u32 = 1 << 16;

/// What `Qwen3NextConfig.__post_init__` does to config.json: without `layer_types`, they are
/// computed from `full_attention_interval` (default 4), which is then dropped (so the reference
/// writes the interval 4 whatever config.json said); `partial_rotary_factor` (default 0.25)
/// goes into the rope parameters. An interval transformers cannot divide by is refused (its
/// config class fails and the reference falls back to config.json as it is).
pub(crate) fn normalize(hp: &mut HParams) -> Result<()> {
    let n = layer_cap(hp, hp.need_u32(&["num_hidden_layers"])?)?;
    if hp.raw.get("layer_types").is_none_or(Value::is_null) {
        let interval = match hp.raw.remove("full_attention_interval") {
            None => 4,
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .ok_or_else(|| bad(&hp.path, format!("`full_attention_interval` is {v}")))?,
        };
        let types: Vec<Value> = (0..u64::from(n))
            .map(|i| {
                let t = if (i + 1) % interval != 0 {
                    "linear_attention"
                } else {
                    "full_attention"
                };
                Value::String(t.into())
            })
            .collect();
        hp.raw.insert("layer_types".into(), Value::Array(types));
    }
    let top = hp.raw.remove("partial_rotary_factor");
    if let Some(Value::Object(rp)) = hp.raw.get_mut("rope_parameters") {
        if !rp.contains_key("partial_rotary_factor") {
            let f = top.filter(|v| !v.is_null()).unwrap_or_else(|| 0.25.into());
            rp.insert("partial_rotary_factor".into(), f);
        }
    }
    Ok(())
}

/// Refuses a layer count past [`MAX_LAYERS`].
fn layer_cap(hp: &HParams, n: u32) -> Result<u32> {
    if n > MAX_LAYERS {
        return Err(bad(
            &hp.path,
            format!("{n} layers (more than {MAX_LAYERS})"),
        ));
    }
    Ok(n)
}

/// `name` as `_QwenMtpMixin.filter_tensors` renames it: `model.mtp.` → `mtp.`, then
/// `mtp.layers.N.rest` → `model.layers.{main + N}.rest` and `mtp.fc`, `pre_fc_norm_embedding`,
/// `pre_fc_norm_hidden`, `norm` → `model.layers.{main}.eh_proj`, `enorm`, `hnorm`,
/// `shared_head.norm`; any other name as it is.
pub(crate) fn mtp_name(name: &str, main: u32) -> String {
    let name = match name.strip_prefix("model.mtp.") {
        Some(rest) => format!("mtp.{rest}"),
        None => name.to_owned(),
    };
    let Some(rest) = name.strip_prefix("mtp.") else {
        return name;
    };
    let parts: Vec<&str> = rest.splitn(3, '.').collect();
    match parts[..] {
        ["layers", idx, tail] => match mtp_index(idx) {
            Some(i) => format!("model.layers.{}.{tail}", u64::from(main) + u64::from(i)),
            None => name,
        },
        [part, suffix] => {
            let to = match part {
                "fc" => "eh_proj",
                "pre_fc_norm_embedding" => "enorm",
                "pre_fc_norm_hidden" => "hnorm",
                "norm" => "shared_head.norm",
                _ => return name,
            };
            format!("model.layers.{main}.{to}.{suffix}")
        }
        _ => name,
    }
}

/// An all-digit MTP layer index (Python's `isdecimal`, ASCII).
fn mtp_index(s: &str) -> Option<u32> {
    (!s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// The multi-token-prediction layers counted as blocks (`_QwenMtpMixin.__init__`):
/// `mtp_num_hidden_layers` when truthy, else one more than the highest `mtp.layers.N` of the
/// weights; none at all is refused, as the reference's assertion refuses it (transformers'
/// `save_pretrained` drops the block the real releases ship).
pub(crate) fn mtp_layers(hp: &HParams, tensors: &[SourceTensor], dir: &Path) -> Result<u32> {
    if let Some(n) = hp.u32(&["mtp_num_hidden_layers"])?.filter(|&n| n > 0) {
        return mtp_cap(hp, n);
    }
    let mut n = 0u32;
    for t in tensors {
        let name = mtp_name(&t.name, 0);
        let idx = name
            .strip_prefix("model.layers.")
            .filter(|_| t.name.contains("mtp.layers."))
            .and_then(|r| r.split('.').next())
            .and_then(mtp_index);
        if let Some(i) = idx {
            n = n.max(i.saturating_add(1));
        }
    }
    if n == 0 {
        return Err(Error::Unsupported {
            at: Location::file(dir),
            format: Some(Format::Gguf),
            what: format!(
                "a {} release without its multi-token-prediction block (`mtp.*`, as the real \
                 releases ship it; transformers' save_pretrained drops it): the reference \
                 converter refuses it too (it asserts an MTP layer)",
                hp.hf_arch
            ),
        });
    }
    mtp_cap(hp, n)
}

/// Refuses more MTP layers than [`MAX_MTP_LAYERS`].
fn mtp_cap(hp: &HParams, n: u32) -> Result<u32> {
    if n > MAX_MTP_LAYERS {
        return Err(bad(
            &hp.path,
            format!("{n} multi-token-prediction layers (more than {MAX_MTP_LAYERS})"),
        ));
    }
    Ok(n)
}

/// The gated delta-net's sizes.
struct Dims {
    hidden: u64,
    /// Key heads, value heads, key head size, value head size.
    nk: u64,
    nv: u64,
    hk: u64,
    hv: u64,
}

impl Dims {
    fn of(hp: &HParams) -> Result<Dims> {
        let need = |k: &str| -> Result<u64> {
            let n = hp.need_u32(&[k])?;
            if n > MAX_DIM {
                return Err(bad(&hp.path, format!("`{k}` {n} (more than {MAX_DIM})")));
            }
            Ok(u64::from(n))
        };
        let d = Dims {
            hidden: need("hidden_size")?,
            nk: need("linear_num_key_heads")?,
            nv: need("linear_num_value_heads")?,
            hk: need("linear_key_head_dim")?,
            hv: need("linear_value_head_dim")?,
        };
        if d.nk == 0 || !d.nv.is_multiple_of(d.nk) {
            return Err(bad(
                &hp.path,
                format!(
                    "`linear_num_value_heads` {} is not a multiple of `linear_num_key_heads` {}",
                    d.nv, d.nk
                ),
            ));
        }
        Ok(d)
    }

    /// Value heads per key head.
    fn r(&self) -> u64 {
        self.nv / self.nk
    }
}

/// Writes `Qwen3NextModel.set_gguf_parameters`'s own keys (after the common and Qwen2-MoE
/// ones) through `put` (keys without the `{arch}.` prefix): the SSM sizes, the recurrent layers
/// (from `layer_types`, the MTP layers not recurrent), `full_attention_interval`, the rope
/// dimensions (`head_dim` × `partial_rotary_factor`, truncated).
pub(crate) fn kvs(
    hp: &HParams,
    block_count: u32,
    put: &mut impl FnMut(&str, MetaValue),
) -> Result<()> {
    let need = |k: &str| hp.need_u32(&[k]);
    put(
        "ssm.conv_kernel",
        MetaValue::U32(need("linear_conv_kernel_dim")?),
    );
    put(
        "ssm.state_size",
        MetaValue::U32(need("linear_key_head_dim")?),
    );
    put(
        "ssm.group_count",
        MetaValue::U32(need("linear_num_key_heads")?),
    );
    let nv = need("linear_num_value_heads")?;
    put("ssm.time_step_rank", MetaValue::U32(nv));
    let inner = need("linear_value_head_dim")?
        .checked_mul(nv)
        .ok_or_else(|| bad(&hp.path, "the SSM inner size does not fit 32 bits"))?;
    put("ssm.inner_size", MetaValue::U32(inner));
    if let Some(types) = hp.raw.get("layer_types").filter(|v| !v.is_null()) {
        let items = recurrent_layers(hp, types, block_count)?;
        put(
            "attention.recurrent_layers",
            MetaValue::TypedArray {
                elem: MetaType::Bool,
                items,
            },
        );
    }
    let interval = hp.u32(&["full_attention_interval"])?.unwrap_or(4);
    put("full_attention_interval", MetaValue::U32(interval));
    let rope_dim = match hp.u32(&["head_dim"])? {
        Some(d) => d,
        None => need("hidden_size")? / need("num_attention_heads")?.max(1),
    };
    let factor = hp
        .rope()
        .get("partial_rotary_factor")
        .and_then(Value::as_f64)
        .unwrap_or(0.25);
    put(
        "rope.dimension_count",
        MetaValue::U32((f64::from(rope_dim) * factor) as u32),
    );
    Ok(())
}

/// One bool per block: `layer_types[i] == "linear_attention"`, then false for the MTP layers;
/// refuses a list whose length is not `num_hidden_layers` (the reference raises).
fn recurrent_layers(hp: &HParams, types: &Value, block_count: u32) -> Result<Vec<MetaValue>> {
    let n = hp.need_u32(&["num_hidden_layers"])?;
    let types = types
        .as_array()
        .ok_or_else(|| bad(&hp.path, "`layer_types` is not a list"))?;
    if types.len() as u64 != u64::from(n) {
        return Err(bad(
            &hp.path,
            format!(
                "`layer_types` has {} entries, `num_hidden_layers` is {n}",
                types.len()
            ),
        ));
    }
    let mut items: Vec<MetaValue> = types
        .iter()
        .map(|t| MetaValue::Bool(t.as_str() == Some("linear_attention")))
        .collect();
    items.resize(layer_cap(hp, block_count)? as usize, MetaValue::Bool(false));
    Ok(items)
}

/// The reference's value transform of HF tensor `hf` (after the MTP renames): `-exp` of
/// `A_log`, `1 + w` of every `norm.weight` but the gated delta-net's own norm.
pub(crate) fn value_op(hf: &str) -> Option<ValueOp> {
    if hf.ends_with(".A_log") {
        Some(ValueOp::NegExp)
    } else if hf.ends_with("norm.weight") && !hf.ends_with("linear_attn.norm.weight") {
        Some(ValueOp::PlusOne)
    } else {
        None
    }
}

/// A part of a regrouped tensor: its HF name, views and shape.
pub(crate) type Part = (String, Vec<View>, Vec<u64>);

/// `in_proj_qkvz` `[nk·(2·hk + 2·r·hv), hidden]` (per key head its q, k, v and z rows) as the
/// reference regroups it: `in_proj_qkv` = every head's q rows, then every head's k rows, then
/// every head's v rows; `in_proj_z` = every head's z rows (named as Qwen3.5 names them, which
/// the table maps to `attn_qkv` and `attn_gate`).
pub(crate) fn qkvz_parts(
    hf: &str,
    t: &SourceTensor,
    hp: &HParams,
    dir: &Path,
) -> Result<Vec<Part>> {
    let d = Dims::of(hp)?;
    let (hk, rv, h) = (d.hk, d.r() * d.hv, d.hidden);
    let group = 2 * hk + 2 * rv;
    let want = [d.nk * group, h];
    if t.shape[..] != want {
        return Err(wrong(dir, t, &want));
    }
    let band = |start: u64, rows: u64| View {
        offset: start * h,
        dims: vec![(d.nk, group * h), (rows * h, 1)],
    };
    let stem = hf.trim_end_matches("in_proj_qkvz.weight");
    Ok(vec![
        (
            format!("{stem}in_proj_qkv.weight"),
            vec![band(0, hk), band(hk, hk), band(2 * hk, rv)],
            vec![d.nk * (2 * hk + rv), h],
        ),
        (
            format!("{stem}in_proj_z.weight"),
            vec![band(2 * hk + rv, rv)],
            vec![d.nk * rv, h],
        ),
    ])
}

/// Qwen3.5's V-head reorder (`_LinearAttentionVReorderBase.modify_tensors`): with fewer key
/// heads than value heads, the value heads of a gated delta-net tensor (HF name `hf`, after
/// the renames) go from grouped by key head (`[nk, r, …]`) to tiled (`[r, nk, …]`), along the
/// rows of `in_proj_qkv` (its v rows only), `in_proj_z`, `in_proj_a/b`, `A_log`, `dt_bias` and
/// the conv1d (its v channels only, squeezed), along the columns of `out_proj`. `None`: the
/// tensor is written as without the reorder.
pub(crate) fn v_reorder(
    hf: &str,
    t: &SourceTensor,
    hp: &HParams,
    dir: &Path,
) -> Result<Option<(Vec<View>, Vec<u64>)>> {
    let Some((_, part)) = hf.split_once(".linear_attn.") else {
        return Ok(None);
    };
    let d = Dims::of(hp)?;
    if d.nk == d.nv {
        return Ok(None);
    }
    check_shape(hf, t, hp, dir)?;
    let (nk, r) = (d.nk, d.r());
    // `[nk, r, unit]` blocks of `unit` elements from `offset`, tiled.
    let tiled = |offset: u64, unit: u64| View {
        offset,
        dims: vec![(r, unit), (nk, r * unit), (unit, 1)],
    };
    let whole = |n: u64| View {
        offset: 0,
        dims: vec![(n, 1)],
    };
    let h = d.hidden;
    let qk = 2 * nk * d.hk;
    let views = match part {
        "in_proj_qkv.weight" => vec![whole(qk * h), tiled(qk * h, d.hv * h)],
        "in_proj_z.weight" => vec![tiled(0, d.hv * h)],
        "in_proj_a.weight" | "in_proj_b.weight" => vec![tiled(0, h)],
        "A_log" | "dt_proj.bias" => vec![tiled(0, 1)],
        "conv1d.weight" => {
            let k = t.shape[2];
            let shape = vec![t.shape[0], k];
            let views = vec![whole(qk * k), tiled(qk * k, d.hv * k)];
            return Ok(Some((views, shape)));
        }
        "out_proj.weight" => vec![View {
            offset: 0,
            dims: vec![(h, d.nv * d.hv), (r, d.hv), (nk, r * d.hv), (d.hv, 1)],
        }],
        _ => return Ok(None),
    };
    Ok(Some((views, t.shape.clone())))
}

/// `rope.dimension_sections` = `[11, 11, 10, 0]` when the rope parameters have no
/// `mrope_section` (`_Qwen35MRopeMixin`; the common keys write the given one).
pub(crate) fn default_mrope_sections(hp: &HParams, put: &mut impl FnMut(&str, MetaValue)) {
    if hp.rope().contains_key("mrope_section") {
        return;
    }
    let items = [11, 11, 10, 0].into_iter().map(MetaValue::I32).collect();
    put(
        "rope.dimension_sections",
        MetaValue::TypedArray {
            elem: MetaType::I32,
            items,
        },
    );
}

/// Refuses a gated delta-net tensor (`linear_attn.*`, HF name `hf`) whose shape is not the one
/// config.json gives it (the reference writes it, and llama.cpp cannot load the file).
pub(crate) fn check_shape(hf: &str, t: &SourceTensor, hp: &HParams, dir: &Path) -> Result<()> {
    let Some((_, part)) = hf.split_once(".linear_attn.") else {
        return Ok(());
    };
    let d = Dims::of(hp)?;
    let k = hp.need_u32(&["linear_conv_kernel_dim"]).map(u64::from)?;
    let conv = 2 * d.nk * d.hk + d.nv * d.hv;
    let want: Vec<u64> = match part {
        "A_log" | "dt_proj.bias" => vec![d.nv],
        "conv1d.weight" => vec![conv, 1, k],
        "in_proj_ba.weight" => vec![2 * d.nv, d.hidden],
        "in_proj_qkv.weight" => vec![2 * d.nk * d.hk + d.nv * d.hv, d.hidden],
        "in_proj_z.weight" => vec![d.nv * d.hv, d.hidden],
        "in_proj_a.weight" | "in_proj_b.weight" => vec![d.nv, d.hidden],
        "norm.weight" => vec![d.hv],
        "out_proj.weight" => vec![d.hidden, d.nv * d.hv],
        // in_proj_qkvz: checked where it is split; anything else has no GGUF name.
        _ => return Ok(()),
    };
    if t.shape != want {
        return Err(wrong(dir, t, &want));
    }
    Ok(())
}

fn wrong(dir: &Path, t: &SourceTensor, want: &[u64]) -> Error {
    Error::malformed(
        Location::file(dir).tensor(&t.name),
        Format::HfRelease,
        format!(
            "shape {:?}, config.json's gated delta-net sizes give {want:?}",
            t.shape
        ),
    )
}

/// The GGUF tensors every layer of its kind needs (base names after `blk.N.`), with the HF
/// name that makes each.
const LINEAR: &[(&str, &str)] = &[
    ("attn_qkv.weight", "linear_attn.in_proj_qkvz.weight"),
    ("attn_gate.weight", "linear_attn.in_proj_qkvz.weight"),
    ("ssm_ba.weight", "linear_attn.in_proj_ba.weight"),
    ("ssm_conv1d.weight", "linear_attn.conv1d.weight"),
    ("ssm_dt.bias", "linear_attn.dt_bias"),
    ("ssm_a", "linear_attn.A_log"),
    ("ssm_norm.weight", "linear_attn.norm.weight"),
    ("ssm_out.weight", "linear_attn.out_proj.weight"),
];
/// [`LINEAR`] as Qwen3.5 stores it (unfused projections).
const LINEAR_35: &[(&str, &str)] = &[
    ("attn_qkv.weight", "linear_attn.in_proj_qkv.weight"),
    ("attn_gate.weight", "linear_attn.in_proj_z.weight"),
    ("ssm_alpha.weight", "linear_attn.in_proj_a.weight"),
    ("ssm_beta.weight", "linear_attn.in_proj_b.weight"),
    ("ssm_conv1d.weight", "linear_attn.conv1d.weight"),
    ("ssm_dt.bias", "linear_attn.dt_bias"),
    ("ssm_a", "linear_attn.A_log"),
    ("ssm_norm.weight", "linear_attn.norm.weight"),
    ("ssm_out.weight", "linear_attn.out_proj.weight"),
];
const FULL: &[(&str, &str)] = &[
    ("attn_q.weight", "self_attn.q_proj.weight"),
    ("attn_k.weight", "self_attn.k_proj.weight"),
    ("attn_v.weight", "self_attn.v_proj.weight"),
    ("attn_output.weight", "self_attn.o_proj.weight"),
];

/// Refuses a release in which a layer lacks a tensor its `layer_types` entry needs (the
/// reference writes the file; llama.cpp refuses to load it), naming the HF tensor.
pub(crate) fn check_complete(out: &[String], hp: &HParams, dir: &Path, qwen35: bool) -> Result<()> {
    let Some(types) = hp.raw.get("layer_types").and_then(Value::as_array) else {
        return Ok(());
    };
    let have: std::collections::HashSet<&str> = out.iter().map(String::as_str).collect();
    for (i, t) in types.iter().enumerate() {
        let need = if t.as_str() != Some("linear_attention") {
            FULL
        } else if qwen35 {
            LINEAR_35
        } else {
            LINEAR
        };
        if let Some((_, hf)) = need
            .iter()
            .find(|(g, _)| !have.contains(format!("blk.{i}.{g}").as_str()))
        {
            return Err(Error::malformed(
                Location::file(dir).tensor(format!("model.layers.{i}.{hf}")),
                Format::HfRelease,
                format!(
                    "layer {i} ({}) lacks this tensor",
                    t.as_str().unwrap_or("?")
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtp_names_as_the_mixin_renames_them() {
        assert_eq!(
            mtp_name("mtp.layers.0.self_attn.q_proj.weight", 48),
            "model.layers.48.self_attn.q_proj.weight"
        );
        assert_eq!(
            mtp_name("model.mtp.layers.1.mlp.gate.weight", 4),
            "model.layers.5.mlp.gate.weight"
        );
        assert_eq!(
            mtp_name("mtp.fc.weight", 4),
            "model.layers.4.eh_proj.weight"
        );
        assert_eq!(
            mtp_name("mtp.norm.weight", 4),
            "model.layers.4.shared_head.norm.weight"
        );
        assert_eq!(
            mtp_name("mtp.pre_fc_norm_hidden.weight", 4),
            "model.layers.4.hnorm.weight"
        );
        // Not renamed: left for the map to refuse, as the reference's map does.
        assert_eq!(mtp_name("mtp.embed.weight", 4), "mtp.embed.weight");
        assert_eq!(mtp_name("mtp.layers.x.a", 4), "mtp.layers.x.a");
        assert_eq!(mtp_name("model.norm.weight", 4), "model.norm.weight");
    }

    #[test]
    fn only_the_delta_net_norm_keeps_its_values() {
        assert_eq!(value_op("model.layers.0.linear_attn.norm.weight"), None);
        assert_eq!(
            value_op("model.layers.4.enorm.weight"),
            Some(ValueOp::PlusOne)
        );
        assert_eq!(
            value_op("model.layers.3.self_attn.q_norm.weight"),
            Some(ValueOp::PlusOne)
        );
        assert_eq!(
            value_op("model.layers.0.linear_attn.A_log"),
            Some(ValueOp::NegExp)
        );
        assert_eq!(value_op("model.layers.0.linear_attn.dt_proj.bias"), None);
    }
}
