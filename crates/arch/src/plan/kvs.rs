//! The key phase of the plan: every KV but the tokenizer's, in the reference's order (the
//! module documentation of [`super`] lists it).

use super::tensors::Planned;
use super::*;
use crate::phi3::LongRope;
use weightport_core::MetaType;

/// The KVs written so far, in order.
struct Kvs {
    arch: &'static str,
    kv: Vec<(String, MetaValue)>,
}

impl Kvs {
    /// Writes key `k` as is.
    fn put(&mut self, k: impl Into<String>, v: MetaValue) {
        self.kv.push((k.into(), v));
    }

    /// Writes `{arch}.{k}`.
    fn arch(&mut self, k: &str, v: MetaValue) {
        self.kv.push((format!("{}.{k}", self.arch), v));
    }

    /// Writes `{arch}.{k}` as `u32` when one of `hkeys` is in config.json.
    fn arch_u32_if(&mut self, k: &str, hp: &HParams, hkeys: &[&str]) -> Result<()> {
        if let Some(v) = hp.u32(hkeys)? {
            self.arch(k, MetaValue::U32(v));
        }
        Ok(())
    }
}

/// The common `{arch}.*` hyper-parameters written as `u32` when present: GGUF key and the HF
/// keys tried, first found wins.
const COMMON_U32: &[(&str, &[&str])] = &[
    (
        "context_length",
        &[
            "max_position_embeddings",
            "n_ctx",
            "n_positions",
            "max_length",
            "max_sequence_length",
            "model_max_length",
        ],
    ),
    ("embedding_length", &["hidden_size", "n_embd", "dim"]),
    (
        "feed_forward_length",
        &[
            "prefix_dense_intermediate_size",
            "dense_intermediate_size",
            "intermediate_size",
            "n_inner",
            "hidden_dim",
        ],
    ),
    (
        "attention.head_count",
        &["num_attention_heads", "n_head", "n_heads"],
    ),
    (
        "attention.head_count_kv",
        &["num_key_value_heads", "n_kv_heads"],
    ),
];

/// Every key up to `general.quantization_version`, the last written value of a repeated key at
/// the position of its first.
pub(super) fn plan_kvs(
    release: &Release,
    opts: &PlanOptions,
    planned: &Planned,
    longrope: Option<&LongRope>,
) -> Result<Vec<(String, MetaValue)>> {
    let Release {
        spec,
        hp,
        block_count,
        ..
    } = release;
    let file_type = planned.file_type;
    let mut kvs = Kvs {
        arch: spec.arch,
        kv: Vec::new(),
    };
    general_kvs(&mut kvs, release, opts, &planned.out, longrope)?;
    let put = &mut |k: String, v: MetaValue| kvs.put(k, v);
    match spec.kv_layout {
        KvLayout::Phi3 => {
            crate::phi3::kvs(spec.arch, hp, *block_count, file_type, put)?;
            if spec.is_moe() {
                crate::phi3::expert_kvs(spec.arch, hp, put)?;
            }
        }
        KvLayout::Gpt2 => crate::gpt2::kvs(hp, *block_count, file_type, put)?,
        KvLayout::ChatGlm => crate::chatglm::kvs(hp, *block_count, file_type, put)?,
        KvLayout::Jamba => crate::ssm::jamba_kvs(hp, *block_count, file_type, put)?,
        KvLayout::Mamba1 => crate::ssm::mamba1_kvs(hp, *block_count, file_type, put)?,
        KvLayout::Mamba2 | KvLayout::FalconH1 => {
            let falcon = spec.kv_layout == KvLayout::FalconH1;
            crate::ssm::mamba2_kvs(hp, spec.arch, falcon, *block_count, file_type, put)?;
            for extra in spec.extra_kv {
                extra_kv(&mut kvs, release, *extra)?;
            }
        }
        KvLayout::Gemma | KvLayout::Gemma2 => gemma_kvs(&mut kvs, release, file_type)?,
        _ => table_kvs(&mut kvs, release, file_type)?,
    }
    kvs.put("general.quantization_version", MetaValue::U32(2));
    keep_first_position_last_value(&mut kvs.kv);
    Ok(kvs.kv)
}

/// `general.architecture`, the keys written while preparing tensors (Apertus' xIELU arrays,
/// Phi-3's attention factor), `general.type`, then the authorship keys
/// ([`crate::card`]: sampling, `general.name`, …, `general.size_label`, licence, base models,
/// datasets, tags, languages).
fn general_kvs(
    kvs: &mut Kvs,
    release: &Release,
    opts: &PlanOptions,
    out: &[OutTensor],
    longrope: Option<&LongRope>,
) -> Result<()> {
    kvs.put("general.architecture", MetaValue::Str(kvs.arch.into()));
    for (k, v) in &release.early_kv {
        kvs.put(k.clone(), v.clone());
    }
    if let Some(lr) = longrope {
        // Written while the reference prepares tensors, before every other key.
        kvs.arch("rope.scaling.attn_factor", MetaValue::F32(lr.attn_factor));
    }
    kvs.put("general.type", MetaValue::Str("model".into()));
    let total: u64 = out
        .iter()
        .map(|t| t.shape.iter().product::<u64>())
        .sum::<u64>();
    let card = crate::card::Authorship::load(release.dir, &opts.card, total as i64, || {
        size_label_of(out)
    })?;
    card.kvs(&mut |k, v| kvs.put(k, v))
}

/// `Gemma2Model.set_gguf_parameters` (and Gemma's): its own keys, in its own order, all
/// required.
fn gemma_kvs(kvs: &mut Kvs, release: &Release, file_type: u32) -> Result<()> {
    let Release {
        spec,
        hp,
        block_count,
        ..
    } = release;
    let need_f32 = |k: &str| -> Result<MetaValue> {
        hp.float(&[k])?
            .map(f32v)
            .ok_or_else(|| bad(&hp.path, format!("{k} is missing")))
    };
    let u32_of = |k: &str| -> Result<MetaValue> { Ok(MetaValue::U32(hp.need_u32(&[k])?)) };
    let heads = hp.need_u32(&["num_attention_heads"])?;
    kvs.arch("context_length", u32_of("max_position_embeddings")?);
    kvs.arch("embedding_length", u32_of("hidden_size")?);
    kvs.arch("block_count", MetaValue::U32(*block_count));
    kvs.arch("feed_forward_length", u32_of("intermediate_size")?);
    kvs.arch("attention.head_count", MetaValue::U32(heads));
    let heads_kv = hp.u32(&["num_key_value_heads"])?.unwrap_or(heads);
    kvs.arch("attention.head_count_kv", MetaValue::U32(heads_kv));
    kvs.arch(
        "attention.layer_norm_rms_epsilon",
        need_f32("rms_norm_eps")?,
    );
    let head_dim = hp.need_u32(&["head_dim"])?;
    kvs.arch("attention.key_length", MetaValue::U32(head_dim));
    kvs.arch("attention.value_length", MetaValue::U32(head_dim));
    kvs.put("general.file_type", MetaValue::U32(file_type));
    if spec.kv_layout == KvLayout::Gemma2 {
        kvs.arch(
            "attn_logit_softcapping",
            need_f32("attn_logit_softcapping")?,
        );
        kvs.arch(
            "final_logit_softcapping",
            need_f32("final_logit_softcapping")?,
        );
        kvs.arch("attention.sliding_window", u32_of("sliding_window")?);
    }
    Ok(())
}

/// The keys of every other layout: the common hyper-parameters, then the architecture's extra
/// keys ([`ExtraKv`]) in its table's order.
fn table_kvs(kvs: &mut Kvs, release: &Release, file_type: u32) -> Result<()> {
    let Release {
        spec,
        hp,
        block_count,
        ..
    } = release;
    kvs.arch("block_count", MetaValue::U32(*block_count));
    for (key, hkeys) in COMMON_U32 {
        if *key == "feed_forward_length" && spec.hooks.contains(&Hook::Gemma3n) {
            let lengths = crate::gemma3n::feed_forward_lengths(hp, *block_count)?;
            kvs.arch(key, lengths);
            continue;
        }
        kvs.arch_u32_if(key, hp, hkeys)?;
    }
    if hp.bool("is_causal") == Some(false) {
        kvs.arch("attention.causal", MetaValue::Bool(false));
    }
    let rope = hp.rope();
    rope_scaling_kvs(kvs, spec, hp, &rope)?;
    mrope_sections(kvs, hp)?;
    refuse_stray_experts(spec, hp)?;
    if let Some(theta) = rope.get("rope_theta").and_then(Value::as_f64) {
        kvs.arch("rope.freq_base", f32v(theta));
    }
    if let Some(theta) = hp
        .raw
        .get("rope_parameters")
        .and_then(|r| r.get("sliding_attention"))
        .and_then(|r| r.get("rope_theta"))
        .and_then(Value::as_f64)
    {
        kvs.arch("rope.freq_base_swa", f32v(theta));
    }
    if let Some(v) = hp.float(&["rms_norm_eps", "norm_eps"])? {
        kvs.arch("attention.layer_norm_rms_epsilon", f32v(v));
    }
    if let Some(v) = hp.float(&["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"])? {
        kvs.arch("attention.layer_norm_epsilon", f32v(v));
    }
    if spec.is_moe() || zero_experts(hp) {
        expert_kvs(kvs, hp)?;
    }
    if let Some(hd) = hp.u32(&["head_dim"])? {
        kvs.arch("attention.key_length", MetaValue::U32(hd));
        kvs.arch("attention.value_length", MetaValue::U32(hd));
    }
    kvs.put("general.file_type", MetaValue::U32(file_type));
    for extra in spec.extra_kv {
        extra_kv(kvs, release, *extra)?;
    }
    Ok(())
}

/// `rope.scaling.*` from the rope parameters' `rope_type`; refuses Llama 3's rope on an
/// architecture that does not generate its frequencies.
fn rope_scaling_kvs(
    kvs: &mut Kvs,
    spec: &ArchSpec,
    hp: &HParams,
    rope: &serde_json::Map<String, Value>,
) -> Result<()> {
    let rf = |k: &str| rope.get(k).and_then(Value::as_f64);
    let Some(rope_type) = rope.get("rope_type").and_then(Value::as_str) else {
        return Ok(());
    };
    match rope_type {
        "linear" if rf("factor").is_some() => {
            kvs.arch("rope.scaling.type", MetaValue::Str("linear".into()));
            kvs.arch("rope.scaling.factor", f32v(rf("factor").unwrap()));
        }
        "yarn" if rf("factor").is_some() => {
            kvs.arch("rope.scaling.type", MetaValue::Str("yarn".into()));
            kvs.arch("rope.scaling.factor", f32v(rf("factor").unwrap()));
            yarn_kvs(kvs, hp, rope)?;
        }
        "su" | "longrope" => {
            kvs.arch("rope.scaling.type", MetaValue::Str("longrope".into()));
        }
        t if t.eq_ignore_ascii_case("llama3") && !spec.llama3_rope_freqs => {
            return Err(Error::Unsupported {
                at: Location::file(&hp.path),
                format: Some(Format::Gguf),
                what: format!("rope_type `llama3` for a {} model", hp.hf_arch),
            });
        }
        _ => {}
    }
    Ok(())
}

/// `rope.dimension_sections` (M-RoPE, Qwen2-VL and later): the rope parameters'
/// `mrope_section` padded with zeros to 4 entries, then cut to 4, as i32 (`TextModel`'s common
/// keys, for any architecture).
fn mrope_sections(kvs: &mut Kvs, hp: &HParams) -> Result<()> {
    let raw = hp.raw.get("rope_parameters").and_then(Value::as_object);
    let Some(sections) = raw.and_then(|r| r.get("mrope_section")) else {
        return Ok(());
    };
    let bad_sections = || {
        bad(
            &hp.path,
            format!("`mrope_section` is not a list of i32: {sections}"),
        )
    };
    let mut items = sections
        .as_array()
        .ok_or_else(bad_sections)?
        .iter()
        .map(|v| {
            v.as_i64()
                .and_then(|i| i32::try_from(i).ok())
                .map(MetaValue::I32)
                .ok_or_else(bad_sections)
        })
        .collect::<Result<Vec<_>>>()?;
    items.resize(items.len().max(4), MetaValue::I32(0));
    items.truncate(4);
    kvs.arch(
        "rope.dimension_sections",
        MetaValue::TypedArray {
            elem: MetaType::I32,
            items,
        },
    );
    Ok(())
}

/// YaRN's keys after its type and factor.
fn yarn_kvs(kvs: &mut Kvs, hp: &HParams, rope: &serde_json::Map<String, Value>) -> Result<()> {
    let rf = |k: &str| rope.get(k).and_then(Value::as_f64);
    let orig = rope
        .get("original_max_position_embeddings")
        .and_then(Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| {
            bad(
                &hp.path,
                "yarn rope without original_max_position_embeddings",
            )
        })?;
    kvs.arch("rope.scaling.original_context_length", MetaValue::U32(orig));
    let optional = [
        ("rope.scaling.yarn_ext_factor", rf("extrapolation_factor")),
        (
            "rope.scaling.yarn_attn_factor",
            rf("attention_factor").or_else(|| rf("attn_factor")),
        ),
        ("rope.scaling.yarn_beta_fast", rf("beta_fast")),
        ("rope.scaling.yarn_beta_slow", rf("beta_slow")),
    ];
    for (key, v) in optional {
        if let Some(v) = v {
            kvs.arch(key, f32v(v));
        }
    }
    Ok(())
}

/// Refuses expert counts, expert groups and gating functions in a dense architecture's config.
fn refuse_stray_experts(spec: &ArchSpec, hp: &HParams) -> Result<()> {
    if spec.is_moe() || zero_experts(hp) {
        return Ok(());
    }
    if hp.raw.contains_key("num_local_experts") || hp.raw.contains_key("num_experts") {
        return Err(Error::Unsupported {
            at: Location::file(&hp.path),
            format: Some(Format::Gguf),
            what: format!(
                "a {} config with experts (mixture-of-experts architectures: {})",
                hp.hf_arch,
                table::supported_moe().join(", ")
            ),
        });
    }
    // Expert-group and gating-function keys: written for the Mixture-of-Experts entries
    // (after the expert counts), refused for a dense one.
    for k in EXPERT_GROUP_KEYS {
        if hp.raw.get(*k).is_some_and(|v| !v.is_null()) {
            return Err(Error::Unsupported {
                at: Location::file(&hp.path),
                format: Some(Format::Gguf),
                what: format!(
                    "`{k}` (expert groups / gating function) in a {} config",
                    hp.hf_arch
                ),
            });
        }
    }
    Ok(())
}

/// A Mixture-of-Experts model's expert counts and expert-group keys.
fn expert_kvs(kvs: &mut Kvs, hp: &HParams) -> Result<()> {
    let count = ["num_local_experts", "num_experts", "n_routed_experts"];
    kvs.arch_u32_if("expert_count", hp, &count)?;
    let used = [
        "num_experts_per_tok",
        "num_experts_per_token",
        "top_k_experts",
    ];
    kvs.arch_u32_if("expert_used_count", hp, &used)?;
    expert_group_kvs(hp, &mut |k, v| kvs.arch(k, v))
}

/// A config that spells out an expert count of 0 (a dense Granite 4 hybrid's
/// `num_local_experts: 0`): the reference's common writer writes the counts as they are.
fn zero_experts(hp: &HParams) -> bool {
    ["num_local_experts", "num_experts"]
        .iter()
        .filter_map(|k| hp.raw.get(*k))
        .any(|v| v.as_u64() == Some(0))
        && !["num_local_experts", "num_experts"]
            .iter()
            .filter_map(|k| hp.raw.get(*k))
            .any(|v| v.as_u64().is_some_and(|n| n > 0))
}

/// One [`ExtraKv`] of the architecture's table.
fn extra_kv(kvs: &mut Kvs, release: &Release, extra: ExtraKv) -> Result<()> {
    let Release {
        hp,
        block_count,
        pooling,
        ..
    } = release;
    let need_u32 = |keys: &[&str]| -> Result<MetaValue> { Ok(MetaValue::U32(hp.need_u32(keys)?)) };
    match extra {
        ExtraKv::VocabSize => kvs.arch("vocab_size", need_u32(&["vocab_size"])?),
        ExtraKv::NonCausal => kvs.arch("attention.causal", MetaValue::Bool(false)),
        ExtraKv::Pooling => {
            for (k, v) in pooling {
                kvs.arch(k, v.clone());
            }
        }
        ExtraKv::ExpertFeedForwardLength => {
            kvs.arch_u32_if("expert_feed_forward_length", hp, &["moe_intermediate_size"])?
        }
        ExtraKv::ExpertFeedForwardLengthOf(k) => {
            kvs.arch("expert_feed_forward_length", need_u32(&[k])?);
        }
        ExtraKv::ExpertSharedFeedForwardLength => kvs.arch_u32_if(
            "expert_shared_feed_forward_length",
            hp,
            &["shared_expert_intermediate_size"],
        )?,
        ExtraKv::FinalLogitSoftcapping => final_logit_softcapping(kvs, hp)?,
        ExtraKv::SlidingWindow => {
            let pattern = hp.raw.get("sliding_window_pattern").and_then(Value::as_u64);
            if pattern != Some(1) {
                kvs.arch("attention.sliding_window", need_u32(&["sliding_window"])?);
            }
        }
        ExtraKv::ContextLength(keys) => kvs.arch("context_length", need_u32(keys)?),
        ExtraKv::LogitScale => {
            let v = hp
                .float(&["logit_scale"])?
                .ok_or_else(|| bad(&hp.path, "logit_scale is missing"))?;
            kvs.arch("logit_scale", f32v(v));
        }
        ExtraKv::RopeScalingNone => kvs.arch("rope.scaling.type", MetaValue::Str("none".into())),
        ExtraKv::RmsEpsilon(v) => {
            let v: f64 = v.parse().expect("table constant is a float");
            kvs.arch("attention.layer_norm_rms_epsilon", f32v(v));
        }
        ExtraKv::Scale(h, key) => {
            // `if (v := hparams.get(h))`: written when truthy.
            if let Some(v) = hp.float(&[h])?.filter(|v| *v != 0.0) {
                kvs.arch(key, f32v(v));
            }
        }
        ExtraKv::SlidingWindowPattern => sliding_window_kvs(kvs, hp, *block_count)?,
        ExtraKv::SlidingWindowLayers => sliding_window_layers(kvs, hp, *block_count)?,
        ExtraKv::Ministral3Yarn => ministral3_yarn(kvs, hp)?,
        ExtraKv::DeepstackLayers => kvs.arch("n_deepstack_layers", deepstack_layers(hp)?),
        ExtraKv::HunYuanNtkAlpha => hunyuan_ntk_alpha(kvs, hp)?,
        ExtraKv::HeadCountKvPerLayer => head_count_kv_per_layer(kvs, hp, |t| t != "conv")?,
        ExtraKv::HeadCountKvFullAttention => {
            head_count_kv_per_layer(kvs, hp, |t| t == "full_attention")?
        }
        ExtraKv::U32Value(key, v) => kvs.arch(key, MetaValue::U32(v)),
        ExtraKv::ShortconvLCache => kvs.arch("shortconv.l_cache", need_u32(&["conv_L_cache"])?),
        ExtraKv::Lfm2FeedForwardLength => lfm2_feed_forward_length(kvs, hp)?,
        ExtraKv::U32(key, h) => kvs.arch(key, need_u32(&[h])?),
        ExtraKv::U32IfPresent(key, h) => kvs.arch_u32_if(key, hp, &[h])?,
        ExtraKv::SlidingWindowZeroIfAllFull => {
            let types = hp.raw.get("layer_types").and_then(Value::as_array);
            if types.is_some_and(|t| t.iter().all(|t| t == "full_attention")) {
                kvs.arch("attention.sliding_window", MetaValue::U32(0));
            }
        }
        ExtraKv::ExpertWeightsNormAny => {
            if let Some(b) = hp.raw.get("norm_topk_prob").filter(|v| !v.is_null()) {
                let b = b
                    .as_bool()
                    .ok_or_else(|| bad(&hp.path, "`norm_topk_prob` is not a boolean"))?;
                kvs.arch("expert_weights_norm", MetaValue::Bool(b));
            }
        }
        ExtraKv::U32IfTruthy(key, h) => {
            if let Some(v) = hp.u32(&[h])?.filter(|&v| v != 0) {
                kvs.arch(key, MetaValue::U32(v));
            }
        }
        ExtraKv::GraniteHybrid => {
            crate::ssm::granite_hybrid_kvs(hp, *block_count, &mut |k, v| kvs.arch(k, v))?
        }
        ExtraKv::NemotronH => crate::nemotron_h::kvs(hp, &mut |k, v| kvs.arch(k, v))?,
        ExtraKv::U32Or(key, h, d) => kvs.arch(key, MetaValue::U32(hp.u32(&[h])?.unwrap_or(d))),
        ExtraKv::RopeFreqBase => {
            let theta = hp
                .rope()
                .get("rope_theta")
                .and_then(Value::as_f64)
                .ok_or_else(|| bad(&hp.path, "the rope parameters lack `rope_theta`"))?;
            kvs.arch("rope.freq_base", f32v(theta));
        }
        ExtraKv::ErnieSharedExperts => {
            if let Some(n) = hp.u32(&["moe_num_shared_experts"])? {
                kvs.arch("expert_shared_count", MetaValue::U32(n));
                let ff = hp.u32(&["intermediate_size"])?;
                let kv = hp.u32(&["num_key_value_heads"])?;
                if let (true, Some(ff), Some(kv)) = (n > 0, ff, kv) {
                    let per = ff
                        .checked_div(kv)
                        .ok_or_else(|| bad(&hp.path, "`num_key_value_heads` is 0"))?;
                    kvs.arch("expert_shared_feed_forward_length", MetaValue::U32(per));
                }
            }
        }
        ExtraKv::RopeDimensionCountPartial => {
            let d = head_dim_or_derived(hp)?;
            let factor = hp
                .rope()
                .get("partial_rotary_factor")
                .and_then(Value::as_f64)
                .unwrap_or(0.5);
            // Python's int() of a float: truncation.
            kvs.arch(
                "rope.dimension_count",
                MetaValue::U32((f64::from(d) * factor) as u32),
            );
        }
        ExtraKv::NoRopeEvery(step) => check_no_rope_layers(hp, *block_count, step)?,
        ExtraKv::HeadCountKv(n) => kvs.arch("attention.head_count_kv", MetaValue::U32(n)),
        ExtraKv::NextnFromBlocks => {
            if let Some(n) = block_count
                .checked_sub(release.main_layers)
                .filter(|&n| n > 0)
            {
                kvs.arch("nextn_predict_layers", MetaValue::U32(n));
            }
        }
        ExtraKv::ActivationSparsityScale => kvs.arch(
            "activation_sparsity_scale",
            crate::gemma3n::sparsity_scales(hp, *block_count)?,
        ),
        ExtraKv::SlidingWindowPatternOfLayerTypes => kvs.arch(
            "attention.sliding_window_pattern",
            crate::gemma3n::sliding_pattern(hp, *block_count)?,
        ),
        ExtraKv::DefaultMropeSections => {
            crate::qwen_next::default_mrope_sections(hp, &mut |k, v| kvs.arch(k, v))
        }
        ExtraKv::QwenLinearAttention => {
            crate::qwen_next::kvs(hp, *block_count, &mut |k, v| kvs.arch(k, v))?
        }
        ExtraKv::LeadingDenseBlockCount
        | ExtraKv::QLoraRank
        | ExtraKv::MlaLengths
        | ExtraKv::ExpertSharedCount
        | ExtraKv::ExpertWeightsScale
        | ExtraKv::ExpertWeightsNorm
        | ExtraKv::YarnLogMultiplier => {
            crate::split::mla_kvs(extra, hp, *block_count, &mut |k, v| kvs.arch(k, v))?
        }
        ExtraKv::LocalAttention => {
            kvs.arch("attention.sliding_window", need_u32(&["local_attention"])?);
            let every = ["global_attn_every_n_layers"];
            kvs.arch_u32_if("attention.sliding_window_pattern", hp, &every)?;
        }
        ExtraKv::HiddenActivation => hidden_activation(kvs, hp)?,
        ExtraKv::RopeDimensionCount => kvs.arch("rope.dimension_count", rope_dimensions(hp)?),
    }
    Ok(())
}

/// [`ExtraKv::SlidingWindowPattern`]: the window and its per-layer pattern, when there is a
/// window.
fn sliding_window_kvs(kvs: &mut Kvs, hp: &HParams, block_count: u32) -> Result<()> {
    if let Some((window, pattern)) = sliding_window_pattern(hp, block_count)? {
        kvs.arch("attention.sliding_window", MetaValue::U32(window));
        let pattern = pattern.into_iter().map(MetaValue::Bool).collect();
        kvs.arch(
            "attention.sliding_window_pattern",
            MetaValue::Array(pattern),
        );
    }
    Ok(())
}

/// [`ExtraKv::Ministral3Yarn`]: for `model_type` `ministral3`, the rope parameters'
/// `mscale_all_dim` as the YaRN log multiplier (as is, not DeepSeek's 0.1×) and
/// `llama_4_scaling_beta` as the attention temperature scale, both required with yarn rope (the
/// reference asserts it); Mistral 4 (a DeepSeek-V2 model in the same class) is refused.
fn ministral3_yarn(kvs: &mut Kvs, hp: &HParams) -> Result<()> {
    match hp.raw.get("model_type").and_then(Value::as_str) {
        Some("ministral3") => {}
        Some("mistral4") => {
            return Err(Error::Unsupported {
                at: Location::file(&hp.path),
                format: Some(Format::Gguf),
                what: format!(
                    "a {} release of model_type `mistral4` (its DeepSeek-V2 layout)",
                    hp.hf_arch
                ),
            })
        }
        _ => return Ok(()),
    }
    let rope = hp.rope();
    if rope.get("rope_type").and_then(Value::as_str) != Some("yarn") {
        return Err(bad(&hp.path, "ministral3's rope_type must be `yarn`"));
    }
    for (key, param) in [
        ("rope.scaling.yarn_log_multiplier", "mscale_all_dim"),
        ("attention.temperature_scale", "llama_4_scaling_beta"),
    ] {
        let v = rope
            .get(param)
            .and_then(Value::as_f64)
            .ok_or_else(|| bad(&hp.path, format!("rope parameters without `{param}`")))?;
        kvs.arch(key, f32v(v));
    }
    Ok(())
}

/// [`ExtraKv::HunYuanNtkAlpha`]: the scaled base replaces the common `rope.freq_base` in place
/// (and the 256K context the common one), gguf-py's KV dict.
fn hunyuan_ntk_alpha(kvs: &mut Kvs, hp: &HParams) -> Result<()> {
    let rope = hp.rope();
    let rope_type = rope.get("rope_type").and_then(Value::as_str);
    if !matches!(rope_type, Some("dynamic" | "xdrope")) {
        return Ok(());
    }
    let alpha = rope.get("alpha").and_then(Value::as_f64).unwrap_or(50.0);
    let base = rope
        .get("rope_theta")
        .and_then(Value::as_f64)
        .unwrap_or(10000.0);
    let dim = f64::from(
        hp.u32(&["head_dim"])?
            .ok_or_else(|| bad(&hp.path, "NTK-alpha rope without `head_dim`"))?,
    );
    kvs.arch("rope.freq_base", f32v(base * alpha.powf(dim / (dim - 2.0))));
    kvs.arch("rope.scaling.type", MetaValue::Str("none".into()));
    kvs.arch("rope.scaling.factor", MetaValue::F32(1.0));
    if rope_type == Some("dynamic") {
        let ctx = hp.u32(&["max_position_embeddings"])?;
        if base != 10000.0 || !matches!(ctx, Some(32768 | 262144)) {
            return Err(Error::Unsupported {
                at: Location::file(&hp.path),
                format: Some(Format::Gguf),
                what: "HunYuan dynamic rope other than θ 10000 with 32K or 256K positions (the \
                       reference's context length assumes them)"
                    .into(),
            });
        }
        kvs.arch(
            "rope.scaling.original_context_length",
            MetaValue::U32(256 * 1024),
        );
        kvs.arch("context_length", MetaValue::U32(256 * 1024));
    }
    Ok(())
}

/// [`ExtraKv::HeadCountKvPerLayer`]: LFM2's KV heads per layer, 0 for the layers whose type
/// `attends` says no to (short-convolution layers).
fn head_count_kv_per_layer(
    kvs: &mut Kvs,
    hp: &HParams,
    attends: impl Fn(&str) -> bool,
) -> Result<()> {
    let n = hp.need_u32(&["num_key_value_heads"])?;
    let n = i32::try_from(n).map_err(|_| bad(&hp.path, "`num_key_value_heads` exceeds i32"))?;
    let types = hp
        .raw
        .get("layer_types")
        .and_then(Value::as_array)
        .ok_or_else(|| bad(&hp.path, "`layer_types` is missing or not a list"))?;
    let items = types
        .iter()
        .map(|t| {
            MetaValue::I32(if attends(t.as_str().unwrap_or("")) {
                n
            } else {
                0
            })
        })
        .collect();
    kvs.arch(
        "attention.head_count_kv",
        MetaValue::TypedArray {
            elem: MetaType::I32,
            items,
        },
    );
    Ok(())
}

/// [`ExtraKv::Lfm2FeedForwardLength`].
fn lfm2_feed_forward_length(kvs: &mut Kvs, hp: &HParams) -> Result<()> {
    let mut ff = u64::from(hp.need_u32(&["block_ff_dim", "intermediate_size"])?);
    if hp.bool("block_auto_adjust_ff_dim") == Some(true) {
        ff = 2 * ff / 3;
        if let Some(m) = hp.float(&["block_ffn_dim_multiplier"])? {
            // Python's int() of a float: truncation.
            ff = (m * ff as f64) as u64;
        }
        let multiple = u64::from(hp.need_u32(&["block_multiple_of"])?).max(1);
        ff = ff.div_ceil(multiple) * multiple;
    }
    let ff = u32::try_from(ff).map_err(|_| bad(&hp.path, "feed-forward length exceeds u32"))?;
    kvs.arch("feed_forward_length", MetaValue::U32(ff));
    Ok(())
}

/// [`ExtraKv::DeepstackLayers`]: how many vision layers feed the text model (Qwen3-VL).
fn deepstack_layers(hp: &HParams) -> Result<MetaValue> {
    let vision = match hp.raw.get("thinker_config") {
        Some(thinker) => thinker.get("vision_config"),
        None => hp.raw.get("vision_config"),
    };
    let n = match vision.and_then(|v| v.get("deepstack_visual_indexes")) {
        None => 0,
        Some(v) => v.as_array().map(Vec::len).ok_or_else(|| {
            bad(
                &hp.path,
                "`vision_config.deepstack_visual_indexes` is not a list",
            )
        })?,
    };
    let n = u32::try_from(n).map_err(|_| bad(&hp.path, "too many deepstack layers"))?;
    Ok(MetaValue::U32(n))
}

/// [`ExtraKv::SlidingWindowLayers`]: Exaone 4's window and per-layer pattern.
fn sliding_window_layers(kvs: &mut Kvs, hp: &HParams, block_count: u32) -> Result<()> {
    if hp.raw.get("sliding_window").is_none_or(Value::is_null) {
        return Ok(());
    }
    kvs.arch(
        "attention.sliding_window",
        MetaValue::U32(hp.need_u32(&["sliding_window"])?),
    );
    let n = block_count as usize;
    let pattern: Vec<bool> = if let Some(types) = hp.raw.get("layer_types") {
        let types = types
            .as_array()
            .ok_or_else(|| bad(&hp.path, "`layer_types` is not a list"))?;
        types
            .iter()
            .map(|t| t.as_str() == Some("sliding_attention"))
            .collect()
    } else {
        match hp.raw.get("sliding_window_pattern") {
            Some(Value::String(s)) if !s.is_empty() => {
                let s = s.as_bytes();
                (0..n).map(|i| s[i % s.len()] == b'L').collect()
            }
            // The reference divides by it.
            Some(v) if v.as_u64() == Some(0) => {
                return Err(bad(&hp.path, "`sliding_window_pattern` is 0"))
            }
            Some(v) => match v.as_u64() {
                Some(k) => (0..n as u64).map(|i| (i + 1) % k != 0).collect(),
                None => Vec::new(),
            },
            None => Vec::new(),
        }
    };
    if pattern.len() == n || hp.raw.contains_key("layer_types") {
        let pattern = pattern.into_iter().map(MetaValue::Bool).collect();
        kvs.arch(
            "attention.sliding_window_pattern",
            MetaValue::Array(pattern),
        );
    }
    Ok(())
}

/// [`ExtraKv::RopeDimensionCount`]: `head_dim`, else the embedding length over the heads.
fn rope_dimensions(hp: &HParams) -> Result<MetaValue> {
    Ok(MetaValue::U32(head_dim_or_derived(hp)?))
}

/// `head_dim`, else the embedding length over the heads.
fn head_dim_or_derived(hp: &HParams) -> Result<u32> {
    Ok(match hp.u32(&["head_dim"])? {
        Some(d) => d,
        None => hp.need_u32(&["hidden_size"])? / hp.need_u32(&["num_attention_heads"])?,
    })
}

/// [`ExtraKv::FinalLogitSoftcapping`]: written when truthy (`if (v := hparams.get(...))`);
/// an attention softcapping is refused (the reference asserts it away: removed in Gemma 3).
fn final_logit_softcapping(kvs: &mut Kvs, hp: &HParams) -> Result<()> {
    if hp
        .raw
        .get("attn_logit_softcapping")
        .is_some_and(|v| !v.is_null())
    {
        return Err(Error::Unsupported {
            at: Location::file(&hp.path),
            format: Some(Format::Gguf),
            what: format!("attn_logit_softcapping in a {} config", hp.hf_arch),
        });
    }
    if let Some(v) = hp
        .float(&["final_logit_softcapping"])?
        .filter(|v| *v != 0.0)
    {
        kvs.arch("final_logit_softcapping", f32v(v));
    }
    Ok(())
}

/// [`ExtraKv::HiddenActivation`]: a non-empty string, when given.
fn hidden_activation(kvs: &mut Kvs, hp: &HParams) -> Result<()> {
    match hp.raw.get("hidden_activation") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => kvs.arch("hidden_activation", MetaValue::Str(s.clone())),
        Some(v) => {
            return Err(bad(
                &hp.path,
                format!("`hidden_activation` is not a string: {v}"),
            ))
        }
    }
    Ok(())
}

/// [`ExtraKv::SlidingWindowPattern`]: when config.json has `sliding_window`, the window and one
/// bool per layer (true = sliding): from `layer_types`, else every 4th layer global (OLMo 3's
/// default, `Olmo2Model.set_gguf_parameters`).
fn sliding_window_pattern(hp: &HParams, block_count: u32) -> Result<Option<(u32, Vec<bool>)>> {
    match hp.raw.get("sliding_window") {
        None => return Ok(None),
        // The reference fails writing a null window.
        Some(Value::Null) => return Err(bad(&hp.path, "`sliding_window` is null")),
        Some(_) => {}
    }
    let window = hp.need_u32(&["sliding_window"])?;
    let pattern: Vec<bool> = match hp.raw.get("layer_types") {
        Some(types) => types
            .as_array()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| bad(&hp.path, "`layer_types` is not a non-empty list"))?
            .iter()
            .map(|t| t.as_str() == Some("sliding_attention"))
            .collect(),
        None => (0..block_count)
            .map(|i| !(i + 1).is_multiple_of(4))
            .collect(),
    };
    Ok(Some((window, pattern)))
}

/// [`ExtraKv::NoRopeEvery`]: the GGUF cannot say which layers skip rope; llama.cpp's graph
/// skips it on layers `i` with `(i + 1) % step == 0`. `no_rope_layers` (1 = rope, transformers
/// fills it from `no_rope_layer_interval`) must say the same.
fn check_no_rope_layers(hp: &HParams, block_count: u32, step: u32) -> Result<()> {
    let want = |i: u32| u64::from(!(i + 1).is_multiple_of(step));
    let ok = match hp.raw.get("no_rope_layers").filter(|v| !v.is_null()) {
        Some(v) => v.as_array().is_some_and(|l| {
            l.len() == block_count as usize
                && (0..block_count).all(|i| l[i as usize].as_u64() == Some(want(i)))
        }),
        None => hp.u32(&["no_rope_layer_interval"])?.unwrap_or(step) == step,
    };
    if ok {
        return Ok(());
    }
    Err(Error::Unsupported {
        at: Location::file(&hp.path),
        format: Some(Format::Gguf),
        what: format!(
            "`no_rope_layers` other than every {step}th layer without rope: llama.cpp's {} \
             graph assumes that pattern and the GGUF has no key for another",
            hp.hf_arch
        ),
    })
}

/// gguf-py's writer holds the KVs in a dict: a key written again keeps the position of its first
/// write and takes the value of its last one ([`ExtraKv::RmsEpsilon`]).
pub(super) fn keep_first_position_last_value(kv: &mut Vec<(String, MetaValue)>) {
    let mut i = 0;
    while i < kv.len() {
        if let Some(first) = kv[..i].iter().position(|(k, _)| *k == kv[i].0) {
            let (_, v) = kv.remove(i);
            kv[first].1 = v;
        } else {
            i += 1;
        }
    }
}

/// `expert_group_count` ← `n_group`, `expert_group_used_count` ← `topk_group`,
/// `expert_gating_func` from the first score-function key (`TextModel.set_gguf_parameters`).
fn expert_group_kvs(hp: &HParams, put: &mut dyn FnMut(&str, MetaValue)) -> Result<()> {
    let present = |k: &str| hp.raw.get(k).is_some_and(|v| !v.is_null());
    if present("n_group") {
        put(
            "expert_group_count",
            MetaValue::U32(hp.need_u32(&["n_group"])?),
        );
    }
    if present("topk_group") {
        put(
            "expert_group_used_count",
            MetaValue::U32(hp.need_u32(&["topk_group"])?),
        );
    }
    if let Some(k) = EXPERT_GROUP_KEYS[2..].iter().find(|k| present(k)) {
        // gguf-py's ExpertGatingFuncType.
        let f = match hp.raw[*k].as_str() {
            Some("softmax") => 1,
            Some("sigmoid") => 2,
            Some("sqrtsoftplus") => 4,
            _ => {
                return Err(bad(
                    &hp.path,
                    format!("unsupported expert gating function `{k}`: {}", hp.raw[*k]),
                ))
            }
        };
        put("expert_gating_func", MetaValue::U32(f));
    }
    Ok(())
}

/// Hyper-parameters the reference writes as expert-group / gating-function keys.
const EXPERT_GROUP_KEYS: &[&str] = &[
    "n_group",
    "topk_group",
    "score_function",
    "scoring_func",
    "score_func",
    "moe_router_activation",
    "moe_router_activation_func",
    "expert_selection_fn",
];
