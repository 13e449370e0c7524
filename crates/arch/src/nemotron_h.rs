//! Nemotron-H (`conversion/nemotron.py` `NemotronHModel`, a `GraniteHybridModel`): the config
//! as transformers 5's `NemotronHConfig` reads it, the layer kinds, the dimensions of its Mamba 2
//! mixers and its keys after Granite's ([`crate::table::Hook::NemotronH`]).
//!
//! Under the pinned stack the reference reads `AutoConfig(...).to_dict()`, which always holds
//! `num_experts_per_tok` (the class default is 2): every release is converted as
//! `nemotron_h_moe`. Its per-layer feed-forward lengths count only `moe` layers, so a release
//! with dense MLP layers (`-` / `mlp`) gets a file llama.cpp cannot load (it takes a layer with
//! no KV heads and no feed-forward length for a Mamba layer): such a release is refused, as are
//! the multi-token-prediction head and latent MoE projections (not compared with the reference).

use serde_json::Value;
use std::path::Path;

use weightport_core::{Error, Format, Location, MetaType, MetaValue, Result};

use crate::origin::SourceTensor;

use crate::config::{bad, HParams};
use crate::ssm::{nemotron_h_dims as dims, Mamba2Dims};

/// `NemotronHConfig.__post_init__`'s aliases: each given `mamba_*` key replaces the class key.
const ALIASES: &[(&str, &str)] = &[
    ("mamba_n_groups", "n_groups"),
    ("mamba_d_conv", "conv_kernel"),
    ("mamba_expand", "expand"),
    ("mamba_conv_bias", "use_conv_bias"),
    ("mamba_chunk_size", "chunk_size"),
];

/// The most layers a config may list (per-layer arrays are built in memory).
const MAX_LAYERS: usize = 1 << 16;

/// The largest size read from config.json (widths, heads, experts): the products of two stay
/// far inside 64 bits and every key fits u32.
const MAX_SIZE: u64 = 1 << 20;

/// The kind of one layer, as `layers_block_type` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `linear_attention` (`M`): a Mamba 2 mixer.
    Mamba,
    /// `full_attention` (`*`).
    Attention,
    /// `moe` (`E`): routed and shared experts.
    Moe,
}

impl Kind {
    /// The `layers_block_type` name.
    fn name(self) -> &'static str {
        match self {
            Kind::Mamba => "linear_attention",
            Kind::Attention => "full_attention",
            Kind::Moe => "moe",
        }
    }
}

/// Normalizes config.json as `NemotronHConfig` does (the pattern string into
/// `layers_block_type`, legacy layer names, `mamba_*` aliases, KV heads), sets
/// `num_hidden_layers` to the layer count as the reference does, and refuses what is not
/// converted: dense MLP layers, an unknown layer kind, the MTP head, latent MoE projections,
/// sizes past 2^20.
pub(crate) fn normalize(hp: &mut HParams) -> Result<()> {
    for (alias, key) in ALIASES {
        if let Some(v) = hp.raw.remove(*alias) {
            hp.raw.insert((*key).into(), v);
        }
    }
    if let Some(v) = hp.raw.remove("num_local_experts") {
        hp.raw.insert("n_routed_experts".into(), v);
    }
    // The class default is 8; `None` means as many as the attention heads.
    let kv = match hp.raw.get("num_key_value_heads") {
        None => Value::from(8),
        Some(Value::Null) => hp
            .raw
            .get("num_attention_heads")
            .cloned()
            .unwrap_or(Value::Null),
        Some(v) => v.clone(),
    };
    hp.raw.insert("num_key_value_heads".into(), kv);
    let types = layer_types(hp)?;
    let n = types.len();
    hp.raw
        .insert("layers_block_type".into(), Value::Array(types));
    hp.raw.insert("num_hidden_layers".into(), n.into());
    if hp.uint(&["num_nextn_predict_layers"])?.unwrap_or(0) != 0 {
        return Err(unsupported(
            hp,
            "`num_nextn_predict_layers` (the MTP head)".into(),
        ));
    }
    if hp.raw.get("moe_latent_size").is_some_and(|v| !v.is_null()) {
        return Err(unsupported(
            hp,
            "`moe_latent_size` (latent MoE projections)".into(),
        ));
    }
    check_sizes(hp)?;
    kinds(hp).map(|_| ())
}

/// `layers_block_type` as transformers 5 builds it: the list (legacy `mamba` / `attention`
/// renamed), else `hybrid_override_pattern` (`M`, `*`, `E`, `-`), else the class default.
fn layer_types(hp: &mut HParams) -> Result<Vec<Value>> {
    let pattern = hp.raw.remove("hybrid_override_pattern");
    let given = hp.raw.get("layers_block_type").filter(|v| !v.is_null());
    let names: Vec<String> = match (given, pattern) {
        (Some(Value::Array(list)), _) => list
            .iter()
            .map(|v| match v.as_str() {
                Some("mamba") => Ok("linear_attention".to_owned()),
                Some("attention") => Ok("full_attention".to_owned()),
                Some(s) => Ok(s.to_owned()),
                None => Err(bad(&hp.path, format!("`layers_block_type` holds {v}"))),
            })
            .collect::<Result<_>>()?,
        (Some(v), _) => {
            return Err(bad(
                &hp.path,
                format!("`layers_block_type` is not a list: {v}"),
            ));
        }
        (None, Some(Value::String(p))) => p
            .chars()
            .map(|c| match c {
                'M' => Ok("linear_attention".to_owned()),
                '*' => Ok("full_attention".to_owned()),
                'E' => Ok("moe".to_owned()),
                '-' => Ok("mlp".to_owned()),
                c => Err(bad(
                    &hp.path,
                    format!("`hybrid_override_pattern` holds {c:?} (not M, *, E or -)"),
                )),
            })
            .collect::<Result<_>>()?,
        (None, Some(v)) if !v.is_null() => {
            return Err(bad(
                &hp.path,
                format!("`hybrid_override_pattern` is not a string: {v}"),
            ));
        }
        (None, _) => ["linear_attention", "moe", "full_attention", "mlp"]
            .map(String::from)
            .to_vec(),
    };
    if names.len() > MAX_LAYERS {
        return Err(bad(
            &hp.path,
            format!("{} layers (more than {MAX_LAYERS})", names.len()),
        ));
    }
    Ok(names.into_iter().map(Value::String).collect())
}

/// Each layer's kind; refuses dense MLP layers and unknown kinds naming the layer.
pub(crate) fn kinds(hp: &HParams) -> Result<Vec<Kind>> {
    let list = hp
        .raw
        .get("layers_block_type")
        .and_then(Value::as_array)
        .ok_or_else(|| bad(&hp.path, "`layers_block_type` is missing"))?;
    list.iter()
        .enumerate()
        .map(|(i, v)| match v.as_str() {
            Some("linear_attention") => Ok(Kind::Mamba),
            Some("full_attention") => Ok(Kind::Attention),
            Some("moe") => Ok(Kind::Moe),
            Some("mlp") => Err(unsupported(
                hp,
                format!(
                    "layer {i}'s dense MLP (`mlp`, `-`): the pinned reference writes it with a \
                     zero feed-forward length, a file llama.cpp cannot load"
                ),
            )),
            _ => Err(bad(
                &hp.path,
                format!("layer {i} of `layers_block_type` is {v} (not linear_attention, full_attention, moe or mlp)"),
            )),
        })
        .collect()
}

/// The keys read as sizes, each at most [`MAX_SIZE`] when present.
const SIZE_KEYS: &[&str] = &[
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "attention_head_dim",
    "mamba_num_heads",
    "num_heads",
    "mamba_head_dim",
    "n_groups",
    "ssm_state_size",
    "conv_kernel",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "moe_shared_expert_intermediate_size",
    "n_shared_experts",
    "vocab_size",
];

/// Refuses sizes past [`MAX_SIZE`] and zero widths, naming the key.
fn check_sizes(hp: &HParams) -> Result<()> {
    for key in SIZE_KEYS {
        let Some(n) = hp.uint(&[key])? else { continue };
        if n > MAX_SIZE {
            return Err(bad(&hp.path, format!("`{key}` {n} (more than {MAX_SIZE})")));
        }
    }
    for key in ["hidden_size", "num_attention_heads", "n_groups"] {
        if hp.uint(&[key])? == Some(0) {
            return Err(bad(&hp.path, format!("`{key}` 0")));
        }
    }
    Ok(())
}

/// A refusal of what the GGUF export does not convert.
fn unsupported(hp: &HParams, what: String) -> Error {
    Error::Unsupported {
        at: Location::file(&hp.path),
        format: Some(Format::Gguf),
        what: format!("a Nemotron-H release with {what}"),
    }
}

/// `find_hparam(keys)` with the `mamba_` prefix (`GraniteHybridModel.find_hparam`): the keys,
/// then each prefixed; required.
fn find(hp: &HParams, keys: &[&str]) -> Result<u32> {
    let mut all: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    all.extend(keys.iter().map(|k| format!("mamba_{k}")));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    hp.u32(&all)?
        .ok_or_else(|| bad(&hp.path, format!("config.json lacks `{}`", keys[0])))
}

/// `NemotronHModel.set_gguf_parameters` after Granite MoE's keys, through `put` (`{arch}.<key>`):
/// `GraniteHybridModel`'s SSM keys, per-layer KV heads, `rope.scaling.finetuned` false and a
/// 2^20 context; then key/value lengths, per-layer feed-forward lengths and the expert keys.
pub(crate) fn kvs(hp: &HParams, put: &mut impl FnMut(&str, MetaValue)) -> Result<()> {
    let d = dims(hp)?;
    let kinds = kinds(hp)?;
    let state = &["state_size", "d_state", "state_dim", "ssm_state_size"];
    put("ssm.conv_kernel", u(find(hp, &["conv_kernel", "d_conv"])?));
    put("ssm.state_size", u(find(hp, state)?));
    put("ssm.group_count", u(d.n_group));
    put("ssm.inner_size", u(d.d_inner));
    put(
        "ssm.time_step_rank",
        u(find(hp, &["n_heads", "num_heads"])?),
    );
    let kv = i32_of(hp, find(hp, &["num_key_value_heads", "n_head_kv"])?)?;
    if let Some(rope_dim) = hp.u32(&["attn_rotary_emb"])?.filter(|&r| r != 0) {
        put("rope.dimension_count", u(rope_dim));
    }
    put(
        "attention.head_count_kv",
        per_layer(&kinds, Kind::Attention, kv),
    );
    put("rope.scaling.finetuned", MetaValue::Bool(false));
    put("context_length", u(1 << 20));
    check_granite_assertions(hp, &d)?;
    let head_dim = need(hp, "attention_head_dim")?;
    put("attention.key_length", u(head_dim));
    put("attention.value_length", u(head_dim));
    let moe_ff = need(hp, "moe_intermediate_size")?;
    put(
        "feed_forward_length",
        per_layer(&kinds, Kind::Moe, i32_of(hp, moe_ff)?),
    );
    put("expert_used_count", u(need(hp, "num_experts_per_tok")?));
    put("expert_feed_forward_length", u(moe_ff));
    let shared = need(hp, "moe_shared_expert_intermediate_size")?;
    put("expert_shared_feed_forward_length", u(shared));
    put("expert_count", u(need(hp, "n_routed_experts")?));
    put("expert_shared_count", u(need(hp, "n_shared_experts")?));
    let norm = hp.raw.get("norm_topk_prob").and_then(Value::as_bool);
    let norm = norm.ok_or_else(|| bad(&hp.path, "`norm_topk_prob` is not a boolean"))?;
    put("expert_weights_norm", MetaValue::Bool(norm));
    let scale = hp
        .float(&["routed_scaling_factor"])?
        .ok_or_else(|| bad(&hp.path, "config.json lacks `routed_scaling_factor`"))?;
    put("expert_weights_scale", MetaValue::F32(scale as f32));
    put("expert_group_count", u(need(hp, "n_group")?));
    Ok(())
}

/// `GraniteHybridModel.set_gguf_parameters`' assertions: `hidden_act` silu (or none), the inner
/// size a multiple of `d_head` (default 64).
fn check_granite_assertions(hp: &HParams, d: &Mamba2Dims) -> Result<()> {
    let act = hp.raw.get("hidden_act").filter(|v| !v.is_null());
    if act.is_some_and(|a| a.as_str() != Some("silu")) {
        return Err(bad(&hp.path, "`hidden_act` is not silu"));
    }
    let d_head = hp
        .u32(&["d_head", "mamba_d_head"])?
        .filter(|&n| n != 0)
        .unwrap_or(64);
    if !d.d_inner.is_multiple_of(d_head) {
        return Err(bad(
            &hp.path,
            format!(
                "the SSM inner size {} is not a multiple of d_head {d_head}",
                d.d_inner
            ),
        ));
    }
    Ok(())
}

/// A required u32 hyper-parameter.
fn need(hp: &HParams, key: &str) -> Result<u32> {
    hp.need_u32(&[key])
}

/// `v` as a GGUF u32.
fn u(v: u32) -> MetaValue {
    MetaValue::U32(v)
}

/// `v` as an i32 array element, refused past i32.
fn i32_of(hp: &HParams, v: u32) -> Result<i32> {
    i32::try_from(v).map_err(|_| bad(&hp.path, format!("{v} exceeds i32")))
}

/// One i32 per layer: `v` for the layers of `kind`, 0 for the others.
fn per_layer(kinds: &[Kind], kind: Kind, v: i32) -> MetaValue {
    MetaValue::TypedArray {
        elem: MetaType::I32,
        items: kinds
            .iter()
            .map(|k| MetaValue::I32(if *k == kind { v } else { 0 }))
            .collect(),
    }
}

/// Refuses a `backbone.layers.N.mixer.*` tensor of another kind than layer N's, and a tensor
/// whose shape config.json contradicts, naming it (the reference writes either, and llama.cpp
/// cannot load its file).
pub(crate) fn check_tensors(hp: &HParams, tensors: &[SourceTensor], dir: &Path) -> Result<()> {
    let kinds = kinds(hp)?;
    let sizes = Sizes::of(hp)?;
    for t in tensors {
        if let Some(x) = sizes.expert_past_count(&t.name) {
            return Err(Error::Unsupported {
                at: Location::file(dir).tensor(&t.name),
                format: Some(Format::Gguf),
                what: format!("expert {x}, past `n_routed_experts` {}", sizes.experts),
            });
        }
        if let Some(want) = sizes.shape_of(&t.name) {
            if t.shape != want {
                return Err(Error::Unsupported {
                    at: Location::file(dir).tensor(&t.name),
                    format: Some(Format::Gguf),
                    what: format!("shape {:?}, where config.json makes it {want:?}", t.shape),
                });
            }
        }
        if let Some((bid, kind)) = misplaced(&kinds, &t.name) {
            return Err(Error::Unsupported {
                at: Location::file(dir).tensor(&t.name),
                format: Some(Format::Gguf),
                what: format!(
                    "not a tensor of a `{}` layer, which `layers_block_type` makes layer {bid}",
                    kind.name()
                ),
            });
        }
    }
    Ok(())
}

/// Each layer kind's GGUF tensors (after `blk.N.`) with the HF tensor they come from (under
/// `backbone.layers.N.`), as the reference writes them for a real release.
const MAMBA_TENSORS: &[(&str, &str)] = &[
    ("attn_norm.weight", "norm.weight"),
    ("ssm_in.weight", "mixer.in_proj.weight"),
    ("ssm_conv1d.weight", "mixer.conv1d.weight"),
    ("ssm_dt.bias", "mixer.dt_bias"),
    ("ssm_a", "mixer.A_log"),
    ("ssm_d", "mixer.D"),
    ("ssm_norm.weight", "mixer.norm.weight"),
    ("ssm_out.weight", "mixer.out_proj.weight"),
];
/// See [`MAMBA_TENSORS`].
const ATTENTION_TENSORS: &[(&str, &str)] = &[
    ("attn_norm.weight", "norm.weight"),
    ("attn_q.weight", "mixer.q_proj.weight"),
    ("attn_k.weight", "mixer.k_proj.weight"),
    ("attn_v.weight", "mixer.v_proj.weight"),
    ("attn_output.weight", "mixer.o_proj.weight"),
];
/// See [`MAMBA_TENSORS`].
const MOE_TENSORS: &[(&str, &str)] = &[
    ("attn_norm.weight", "norm.weight"),
    ("ffn_gate_inp.weight", "mixer.gate.weight"),
    ("exp_probs_b.bias", "mixer.gate.e_score_correction_bias"),
    ("ffn_up_exps.weight", "mixer.experts.N.up_proj.weight"),
    ("ffn_down_exps.weight", "mixer.experts.N.down_proj.weight"),
];
/// A MoE layer's shared expert, when `n_shared_experts` is not 0.
const SHARED_TENSORS: &[(&str, &str)] = &[
    ("ffn_up_shexp.weight", "mixer.shared_experts.up_proj.weight"),
    (
        "ffn_down_shexp.weight",
        "mixer.shared_experts.down_proj.weight",
    ),
];

/// Refuses a layer without one of its kind's tensors (`out`: the planned GGUF names), naming
/// the HF tensor: the reference writes the file without it, and llama.cpp cannot load it.
pub(crate) fn check_complete(out: &[String], hp: &HParams, dir: &Path) -> Result<()> {
    let have: std::collections::HashSet<&str> = out.iter().map(String::as_str).collect();
    let shared = hp.uint(&["n_shared_experts"])?.unwrap_or(0) > 0;
    let conv_bias = hp.bool("use_conv_bias") != Some(false);
    for (i, kind) in kinds(hp)?.into_iter().enumerate() {
        let mut need: Vec<(&str, &str)> = match kind {
            Kind::Mamba => MAMBA_TENSORS.to_vec(),
            Kind::Attention => ATTENTION_TENSORS.to_vec(),
            Kind::Moe => MOE_TENSORS.to_vec(),
        };
        if kind == Kind::Moe && shared {
            need.extend_from_slice(SHARED_TENSORS);
        }
        if kind == Kind::Mamba && conv_bias {
            need.push(("ssm_conv1d.bias", "mixer.conv1d.bias"));
        }
        if let Some((_, hf)) = need
            .iter()
            .find(|(g, _)| !have.contains(format!("blk.{i}.{g}").as_str()))
        {
            return Err(Error::malformed(
                Location::file(dir).tensor(format!("backbone.layers.{i}.{hf}")),
                Format::HfRelease,
                format!("layer {i} (`{}`) lacks this tensor", kind.name()),
            ));
        }
    }
    Ok(())
}

/// The sizes config.json gives the tensors (each at most 2^20: [`check_sizes`]).
struct Sizes {
    hidden: u64,
    d_inner: u64,
    /// `n_groups × ssm_state_size`.
    group_state: u64,
    ssm_heads: u64,
    conv_kernel: u64,
    q_rows: u64,
    kv_rows: u64,
    experts: u64,
    moe_ff: u64,
    shared_ff: u64,
}

impl Sizes {
    fn of(hp: &HParams) -> Result<Sizes> {
        let d = dims(hp)?;
        let g = |keys: &[&str]| -> Result<u64> { find(hp, keys).map(u64::from) };
        let state = g(&["state_size", "d_state", "state_dim", "ssm_state_size"])?;
        let head_dim = u64::from(need(hp, "attention_head_dim")?);
        Ok(Sizes {
            hidden: u64::from(need(hp, "hidden_size")?),
            d_inner: u64::from(d.d_inner),
            group_state: u64::from(d.n_group) * state,
            ssm_heads: g(&["n_heads", "num_heads"])?,
            conv_kernel: g(&["conv_kernel", "d_conv"])?,
            q_rows: u64::from(need(hp, "num_attention_heads")?) * head_dim,
            kv_rows: u64::from(need(hp, "num_key_value_heads")?) * head_dim,
            experts: u64::from(need(hp, "n_routed_experts")?),
            moe_ff: u64::from(need(hp, "moe_intermediate_size")?),
            shared_ff: u64::from(need(hp, "moe_shared_expert_intermediate_size")?),
        })
    }

    /// The expert number of a routed-expert tensor numbered past the expert count.
    fn expert_past_count(&self, name: &str) -> Option<u64> {
        let (_, rest) = name.split_once(".mixer.experts.")?;
        let x: u64 = rest.split('.').next()?.parse().ok()?;
        (x >= self.experts).then_some(x)
    }

    /// The shape transformers' NemotronH modules give the block tensor `name`, `None` for the
    /// others.
    fn shape_of(&self, name: &str) -> Option<Vec<u64>> {
        let rest = name.strip_prefix("backbone.layers.")?.split_once('.')?.1;
        let (h, i) = (self.hidden, self.d_inner);
        let conv = i + 2 * self.group_state;
        if rest == "norm.weight" {
            return Some(vec![h]);
        }
        let mixer = rest.strip_prefix("mixer.")?;
        if let Some(expert) = mixer.strip_prefix("experts.") {
            let (_, w) = expert.split_once('.')?;
            return match w {
                "up_proj.weight" => Some(vec![self.moe_ff, h]),
                "down_proj.weight" => Some(vec![h, self.moe_ff]),
                _ => None,
            };
        }
        Some(match mixer {
            "in_proj.weight" => vec![2 * i + 2 * self.group_state + self.ssm_heads, h],
            "conv1d.weight" => vec![conv, 1, self.conv_kernel],
            "conv1d.bias" => vec![conv],
            "dt_bias" | "A_log" | "D" => vec![self.ssm_heads],
            "norm.weight" => vec![i],
            "out_proj.weight" => vec![h, i],
            "q_proj.weight" => vec![self.q_rows, h],
            "k_proj.weight" | "v_proj.weight" => vec![self.kv_rows, h],
            "o_proj.weight" => vec![h, self.q_rows],
            "gate.weight" => vec![self.experts, h],
            "gate.e_score_correction_bias" => vec![self.experts],
            "shared_experts.up_proj.weight" => vec![self.shared_ff, h],
            "shared_experts.down_proj.weight" => vec![h, self.shared_ff],
            _ => return None,
        })
    }
}

/// The layer of a `backbone.layers.N.mixer.*` tensor and whether the tensor belongs to that
/// layer's kind (the reference converts a tensor by its layer's kind; one of another kind makes
/// a file llama.cpp cannot load): `None` for the other tensors.
pub(crate) fn misplaced(kinds: &[Kind], name: &str) -> Option<(usize, Kind)> {
    let rest = name.strip_prefix("backbone.layers.")?;
    let (bid, rest) = rest.split_once('.')?;
    let bid: usize = bid.parse().ok()?;
    let mixer = rest.strip_prefix("mixer.")?;
    let part = mixer.split('.').next()?;
    let kind = match part {
        "in_proj" | "conv1d" | "dt_bias" | "dt_proj" | "A_log" | "D" | "norm" | "out_proj" => {
            Kind::Mamba
        }
        "q_proj" | "k_proj" | "v_proj" | "o_proj" => Kind::Attention,
        "gate" | "experts" | "shared_experts" => Kind::Moe,
        _ => return None,
    };
    match kinds.get(bid) {
        Some(k) if *k == kind => None,
        Some(k) => Some((bid, *k)),
        None => None,
    }
}
