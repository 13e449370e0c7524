//! The architecture table: data, not code.
//!
//! One [`ArchSpec`] per GGUF architecture, listing the HF `architectures[0]` values it accepts,
//! the HF → GGUF tensor name map (`{bid}` stands for the block number), whether `q_proj` /
//! `k_proj` get the Llama row permutation, the config defaults transformers' config class would
//! fill, the architecture-specific keys written after the common ones, and how the vocabulary is
//! found. Adding an architecture is adding an entry to [`ARCHS`] (and a fixture that proves it
//! against the reference converter); a Mixture-of-Experts one also names its [`ExpertStack`]
//! (which per-expert tensors are stacked into which GGUF tensor, in which order).
//! Where a converter class truly differs in something that is not a key or a name, the entry
//! lists a named [`Hook`].
//!
//! Derived from `conversion/*.py` (llama, qwen, bert, …) and `gguf-py/gguf/tensor_mapping.py` of the
//! pinned llama.cpp tree (docs/specs/gguf.md §5.2) and checked against its output
//! (`fixtures/expected/arch/*.json`).

/// What the transformers config class fills in for a missing `num_key_value_heads`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvHeadsDefault {
    /// The class has no such attribute: the key stays absent.
    Absent,
    /// `num_attention_heads`.
    Heads,
    /// A constant.
    Const(u64),
}

/// What the transformers config class fills in for a missing `head_dim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadDimDefault {
    /// The class has no `head_dim` attribute: the key stays absent.
    Absent,
    /// `hidden_size / num_attention_heads`.
    Derived,
    /// A constant.
    Const(u64),
    /// The reference's class drops `head_dim` whatever config.json says (Granite's
    /// `hparams.pop("head_dim")`): no key/value length, rope dimensions from the hidden size.
    Ignored,
    /// The class fills `head_dim` (with this default) and the reference's class drops it before
    /// the common keys (Granite's pop) and writes it later itself (Nemotron-H's key/value
    /// length): kept under the key `.0`, so the common keys see no `head_dim`.
    PoppedTo(&'static str, u64),
    /// Always the value of this key (DeepseekV2Config sets `head_dim = qk_rope_head_dim`
    /// whatever config.json says).
    Key(&'static str),
}

/// The defaults of one transformers config class, for the keys the export reads.
#[derive(Debug, Clone, Copy)]
pub struct ConfigDefaults {
    /// `(key, JSON value)` filled when the key is absent or null.
    pub values: &'static [(&'static str, &'static str)],
    /// Missing `num_key_value_heads`.
    pub kv_heads: KvHeadsDefault,
    /// Missing `head_dim`.
    pub head_dim: HeadDimDefault,
    /// Missing `rope_theta` (JSON number); `None` for classes without rotary embeddings.
    pub rope_theta: Option<&'static str>,
    /// Missing `rope_local_base_freq` (JSON number) of a class with separate rope parameters for
    /// sliding and full attention layers (Gemma 3): `rope_parameters` becomes
    /// `{full_attention: rope_scaling + rope_theta, sliding_attention: {default, local theta}}`
    /// as transformers 5 builds it from a legacy config. `None`: one set of rope parameters.
    pub local_rope_theta: Option<&'static str>,
}

/// An architecture-specific key written after the common `{arch}.*` keys and
/// `general.file_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtraKv {
    /// `{arch}.vocab_size` u32 ← `vocab_size`.
    VocabSize,
    /// `{arch}.rope.dimension_count` u32 ← `head_dim`, else `hidden_size / num_attention_heads`.
    RopeDimensionCount,
    /// `{arch}.attention.causal` bool = false (encoders).
    NonCausal,
    /// `{arch}.pooling_type` u32 from a sentence-transformers Pooling module (`modules.json`,
    /// `1_Pooling/config.json`), then `{arch}.classifier.pooling_type` from `classifier_pooling`;
    /// each only when the release has it (the named hook [`crate::pooling`]).
    Pooling,
    /// `{arch}.expert_feed_forward_length` u32 ← `moe_intermediate_size`, when present.
    ExpertFeedForwardLength,
    /// `{arch}.expert_shared_feed_forward_length` u32 ← `shared_expert_intermediate_size`, when
    /// present.
    ExpertSharedFeedForwardLength,
    /// `{arch}.final_logit_softcapping` f32 ← `final_logit_softcapping`, when truthy (Gemma 3).
    FinalLogitSoftcapping,
    /// `{arch}.attention.sliding_window` u32 ← `sliding_window`, unless config.json says
    /// `sliding_window_pattern: 1` (Gemma 3).
    SlidingWindow,
    /// `{arch}.attention.layer_norm_rms_epsilon` f32 set to this constant (a Python float
    /// literal) whatever config.json says (OLMoE's `add_layer_norm_rms_eps(1e-5)` after the
    /// common keys). gguf-py's writer keeps a key written twice where it was first written, with
    /// the last value, so the key stays among the common ones when they wrote it.
    RmsEpsilon(&'static str),
    /// `{arch}.context_length` u32 ← the first of these hyper-parameters present (Command-R's
    /// `model_max_length` before `max_position_embeddings`). The common keys already wrote the
    /// key, so it keeps its place and takes this value (gguf-py's dict, as for
    /// [`ExtraKv::RmsEpsilon`]).
    ContextLength(&'static [&'static str]),
    /// `{arch}.logit_scale` f32 ← `logit_scale` (required; Command-R).
    LogitScale,
    /// `{arch}.rope.scaling.type` = `"none"` (Command-R's `add_rope_scaling_type(NONE)`;
    /// ModernBERT writes it whatever the rope parameters).
    RopeScalingNone,
    /// `{arch}.<key>` f32 ← hyper-parameter `.0`, when truthy (Granite's multipliers:
    /// `attention_multiplier` → `attention.scale`, …).
    Scale(&'static str, &'static str),
    /// When config.json has `sliding_window` (OLMo 3's shape in an OLMo 2 class):
    /// `{arch}.attention.sliding_window` u32, then `{arch}.attention.sliding_window_pattern`, one
    /// bool per layer: `layer_types[i] == "sliding_attention"`, else every 4th layer global.
    SlidingWindowPattern,
    /// Writes nothing: the architecture's llama.cpp graph skips rope on every n-th layer and has
    /// no key for another pattern, so a config whose `no_rope_layers` (1 = rope) says otherwise
    /// is refused (SmolLM3, n = 4).
    NoRopeEvery(u32),
    /// `{arch}.attention.head_count_kv` set to this constant (DeepSeek-V2 converts MLA into MQA
    /// with one KV head); the key keeps the common writer's position.
    HeadCountKv(u32),
    /// `{arch}.expert_feed_forward_length` u32 ← this key (GPT-OSS: `intermediate_size`).
    ExpertFeedForwardLengthOf(&'static str),
    /// `{arch}.leading_dense_block_count` ← `first_k_dense_replace`, else 0 for a config with
    /// `n_routed_experts`, else the block count.
    LeadingDenseBlockCount,
    /// `{arch}.attention.q_lora_rank` ← `q_lora_rank`, when not null.
    QLoraRank,
    /// Multi-head latent attention: `attention.kv_lora_rank` ← `kv_lora_rank` (default 512),
    /// `attention.key_length` = rank + `qk_rope_head_dim`, `attention.value_length` = rank,
    /// `attention.key_length_mla` = `qk_nope_head_dim + qk_rope_head_dim`,
    /// `attention.value_length_mla` = `v_head_dim`.
    MlaLengths,
    /// `{arch}.expert_shared_count` ← `n_shared_experts` (default 0).
    ExpertSharedCount,
    /// `{arch}.expert_weights_scale` f32 ← `routed_scaling_factor`, when not null.
    ExpertWeightsScale,
    /// `{arch}.expert_weights_norm` bool ← `norm_topk_prob`, when true.
    ExpertWeightsNorm,
    /// `{arch}.rope.scaling.yarn_log_multiplier` f32 = 0.1 × the rope parameters'
    /// `mscale_all_dim`, when present (DeepSeek-V2's legacy factor).
    YarnLogMultiplier,
    /// `{arch}.attention.sliding_window` u32 ← `local_attention` (required), then
    /// `{arch}.attention.sliding_window_pattern` u32 ← `global_attn_every_n_layers` when present
    /// (ModernBERT; transformers 5 keeps that key from a legacy config only).
    LocalAttention,
    /// `{arch}.hidden_activation` string ← `hidden_activation`, when truthy (ModernBERT's GeGLU
    /// or SwiGLU).
    HiddenActivation,
    /// Exaone 4's window (`Exaone4Model.set_gguf_parameters`): when `sliding_window` is not
    /// null, `{arch}.attention.sliding_window`, then the per-layer bool array
    /// `attention.sliding_window_pattern` from `layer_types`, else from `sliding_window_pattern`
    /// (a string like `LLLG`, `L` = sliding, repeated; or an int n: every n-th layer global),
    /// written only when it has one entry per layer.
    SlidingWindowLayers,
    /// Ministral 3 (`Mistral3Model.Ministral3Model.set_gguf_parameters`, when `model_type` is
    /// `ministral3`): `rope.scaling.yarn_log_multiplier` ← the rope parameters' `mscale_all_dim`
    /// and `attention.temperature_scale` ← `llama_4_scaling_beta`; `model_type` `mistral4` (a
    /// DeepSeek-V2 model behind the same class) is refused.
    Ministral3Yarn,
    /// `{arch}.n_deepstack_layers` u32 ← the length of `vision_config.deepstack_visual_indexes`
    /// (`thinker_config.vision_config`'s when there is a thinker), 0 when absent (Qwen3-VL).
    DeepstackLayers,
    /// HunYuan's NTK-alpha rope (`HunYuanModel.set_gguf_parameters`), for `rope_type` `dynamic`
    /// or `xdrope`: `rope.freq_base` = θ·alpha^(d/(d−2)) (alpha default 50, d = `head_dim`),
    /// `rope.scaling.type` "none", factor 1; for `dynamic` also an original and a model context
    /// of 256K, refused unless θ is 10000 and `max_position_embeddings` 32K or 256K (the
    /// reference asserts it).
    HunYuanNtkAlpha,
    /// `{arch}.rope.dimension_count` u32 = ⌊(`head_dim`, else hidden / heads) × the rope
    /// parameters' `partial_rotary_factor` (default 0.5)⌋ (GLM-4).
    RopeDimensionCountPartial,
    /// `{arch}.attention.head_count_kv` as one i32 per layer: `num_key_value_heads` for an
    /// attention layer, 0 for a `conv` one (`layer_types`, LFM2); the common key's place.
    HeadCountKvPerLayer,
    /// `{arch}.shortconv.l_cache` u32 ← `conv_L_cache` (LFM2).
    ShortconvLCache,
    /// `{arch}.feed_forward_length` ← `block_ff_dim` or `intermediate_size`, when
    /// `block_auto_adjust_ff_dim`: ⌊2·ff/3⌋, × `block_ffn_dim_multiplier` (when not null), rounded
    /// up to `block_multiple_of` (LFM2's `_add_feed_forward_length`); the common key's place.
    Lfm2FeedForwardLength,
    /// `{arch}.<key>` u32 ← hyper-parameter `.1` (required).
    U32(&'static str, &'static str),
    /// Ernie 4.5 MoE's shared experts: `expert_shared_count` ← `moe_num_shared_experts` when
    /// present, then, when it is positive, `expert_shared_feed_forward_length` =
    /// `intermediate_size` // `num_key_value_heads` (the reference's formula, whatever the
    /// shared experts' width).
    ErnieSharedExperts,
    /// `{arch}.<key>` u32 = this constant (LFM2-MoE's sigmoid gating function, 2).
    U32Value(&'static str, u32),
    /// `{arch}.<key>` u32 ← hyper-parameter `.1`, else the constant `.2` (`hparams.get(k, d)`).
    U32Or(&'static str, &'static str, u32),
    /// `{arch}.<key>` u32 ← hyper-parameter `.1`, when truthy.
    U32IfTruthy(&'static str, &'static str),
    /// Granite 4 hybrid's own keys after Granite MoE's (`GraniteHybridModel.set_gguf_parameters`):
    /// the SSM keys, `rope.dimension_count` ← `attn_rotary_emb` when set, `attention.head_count_kv`
    /// per layer (0 for SSM layers), `rope.scaling.finetuned` and, without rope, a 2^20 context
    /// ([`crate::ssm::granite_hybrid_kvs`]).
    GraniteHybrid,
    /// Nemotron-H's own keys after Granite MoE's (`NemotronHModel.set_gguf_parameters` through
    /// `GraniteHybridModel`'s): the SSM keys, per-layer KV heads, `rope.scaling.finetuned`, a
    /// 2^20 context, key/value lengths, per-layer feed-forward lengths (MoE layers only) and
    /// the expert keys ([`crate::nemotron_h::kvs`]).
    NemotronH,
    /// `{arch}.rope.freq_base` f32 ← the rope parameters' `rope_theta` (required; Falcon-H1 writes
    /// it after its own keys).
    RopeFreqBase,
    /// [`ExtraKv::HeadCountKvPerLayer`] with KV heads only on `full_attention` layers (LFM2-MoE).
    HeadCountKvFullAttention,
    /// `{arch}.attention.sliding_window` u32 = 0 when config.json has `layer_types` and every
    /// entry is `full_attention` (`Llama4Model.set_gguf_parameters`, MobileLLM's case).
    SlidingWindowZeroIfAllFull,
    /// `{arch}.<key>` u32 ← hyper-parameter `.1`, when present and not null, 0 included
    /// (`if (v := hparams.get(k)) is not None`).
    U32IfPresent(&'static str, &'static str),
    /// `{arch}.expert_weights_norm` bool ← `norm_topk_prob`, when not null: `false` is written
    /// too (`Glm4MoeModel.set_gguf_parameters`; DeepSeek's [`ExtraKv::ExpertWeightsNorm`]
    /// writes only `true`).
    ExpertWeightsNormAny,
    /// `{arch}.nextn_predict_layers` u32 = the blocks past `num_hidden_layers`, when there are
    /// some (`_QwenMtpMixin.set_gguf_parameters`).
    NextnFromBlocks,
    /// Qwen3-Next's gated delta-net keys, recurrent layers, attention interval and rope
    /// dimensions ([`crate::qwen_next::kvs`]).
    QwenLinearAttention,
    /// `{arch}.rope.dimension_sections` = `[11, 11, 10, 0]` when the rope parameters have no
    /// `mrope_section` (`_Qwen35MRopeMixin`).
    DefaultMropeSections,
    /// `{arch}.activation_sparsity_scale` f32 array: per layer, torch's float32
    /// `Normal(0, 1).icdf(p)` of `activation_sparsity_pattern` (required; Gemma 3n,
    /// [`crate::gemma3n::sparsity_scale`]).
    ActivationSparsityScale,
    /// `{arch}.attention.sliding_window_pattern`, one bool per `layer_types` entry:
    /// `sliding_attention` (required; Gemma 3n, whatever the window).
    SlidingWindowPatternOfLayerTypes,
}

/// How HF tensor names are rewritten or dropped before the name map (data of BERT-style
/// checkpoints, `conversion/bert.py` `filter_tensors`).
#[derive(Debug, Clone, Copy)]
pub struct NameRules {
    /// A leading prefix removed (`bert.` of `BertFor*` heads).
    pub strip_prefix: &'static [&'static str],
    /// Suffix renames (`.gamma` → `.weight`, `.beta` → `.bias`).
    pub suffix_renames: &'static [(&'static str, &'static str)],
    /// Names dropped (after the rewrites).
    pub drop: &'static [&'static str],
    /// Name prefixes dropped (after the rewrites).
    pub drop_prefixes: &'static [&'static str],
    /// The other parts of a multimodal release (vision tower, projector, audio, …) are dropped
    /// by the reference's text converter ([`MULTIMODAL`], tested on the HF name), and every
    /// `language_model.` is removed from the names it keeps (`TextModel.filter_tensors`).
    pub text_of_multimodal: bool,
}

/// No rewrites.
pub(crate) const NO_RULES: NameRules = NameRules {
    strip_prefix: &[],
    suffix_renames: &[],
    drop: &[],
    drop_prefixes: &[],
    text_of_multimodal: false,
};

/// The reference's test for a tensor of a multimodal release that its text converter skips
/// (`TextModel.filter_tensors`): name prefixes, then substrings.
pub(crate) const MULTIMODAL: (&[&str], &[&str]) = (
    &[
        "mlp",
        "vit.",
        "vpm.",
        "siglip2.",
        "conformer.",
        "merger.",
        "resampler.",
        "sound_encoder.",
        "sound_projection.",
        "speech_embeddings.",
    ],
    &[
        "visual.",
        "vision.",
        "audio.",
        "talker.",
        "vision_",
        "audio_",
        "token2wav.",
        "code2wav.",
        "projector.",
        "pre_mm_projector_norm",
        "image_newline",
        "view_seperator",
        "patch_embed",
        "patch_embedding",
        "patch_merger.",
        "patch_merge_mlp.",
        "model.connector.",
    ],
);

/// Which hyper-parameter keys are written, in which order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvLayout {
    /// `TextModel.set_gguf_parameters` (each key when its hparam exists), then the
    /// architecture's [`ExtraKv`]s.
    Common,
    /// Gemma's own list (`conversion/gemma.py` `GemmaModel.set_gguf_parameters`): context,
    /// embedding, blocks, feed-forward, heads, KV heads, RMS eps, key/value length, file type.
    Gemma,
    /// Gemma 2's: [`KvLayout::Gemma`]'s, then attention and final logit soft-capping, sliding
    /// window (`Gemma2Model.set_gguf_parameters`).
    Gemma2,
    /// Phi-3's own list (`conversion/phi.py` `Phi3MiniModel.set_gguf_parameters`): context,
    /// original context, embedding, feed-forward, blocks, heads, KV heads, RMS eps, rope
    /// dimensions, rope base, file type, sliding window (0 when absent); with longrope factors,
    /// the generated `rope_factors_long/short` tensors and `rope.scaling.attn_factor`, which the
    /// reference writes while preparing tensors, i.e. right after `general.architecture`
    /// (the named hook [`crate::phi3`]).
    Phi3,
    /// GPT-2's own list (`conversion/gpt2.py` `GPT2Model.set_gguf_parameters`), every key
    /// required: blocks, context (`n_ctx`), embedding (`n_embd`), feed-forward `4 × n_embd`
    /// (whatever `n_inner` says), heads (`n_head`), LayerNorm epsilon, file type.
    Gpt2,
    /// Mamba 2's own list (`conversion/mamba.py` `Mamba2Model.set_gguf_parameters`): context
    /// 2^20, embedding, feed-forward 0, heads 0, blocks, `ssm.conv_kernel`, `ssm.inner_size`,
    /// `ssm.state_size`, `ssm.time_step_rank` (inner / head dim), `ssm.group_count`, RMS eps,
    /// file type, each from config.json with the class's fallbacks ([`crate::ssm`]); then the
    /// architecture's [`ExtraKv`]s.
    Mamba2,
    /// [`KvLayout::Mamba2`] as `FalconH1Model` reads it: every key also under a `mamba_` prefix,
    /// `mamba_d_ssm` and `mamba_n_groups` required, no `expand` assertion, and `hidden_act` silu
    /// with `mamba_d_head` dividing the inner size instead; then the [`ExtraKv`]s.
    FalconH1,
    /// Jamba's own list (`conversion/jamba.py` `JambaModel.set_gguf_parameters`): blocks,
    /// context, embedding, feed-forward, heads, KV heads per layer (every `attn_layer_period`-th
    /// from `attn_layer_offset`, else 0), the Mamba 1 keys, RMS eps, expert counts, file type
    /// ([`crate::ssm::jamba_kvs`]).
    Jamba,
    /// Mamba 1's own list (`conversion/mamba.py` `MambaModel.set_gguf_parameters`): context
    /// 2^20, embedding, feed-forward 0, heads 0, blocks, the SSM keys, RMS eps,
    /// `ssm.dt_b_c_rms` (true for `model_type` `falcon_mamba`), file type
    /// ([`crate::ssm::mamba1_kvs`]).
    Mamba1,
    /// `ChatGLMModel.set_gguf_parameters` (`conversion/chatglm.py`, for `GlmForCausalLM`):
    /// context from `seq_length` else the embedding width, ε from `layernorm_epsilon` else 1e-5,
    /// rope base 10000 × `rope_ratio`, `add_bos_token` false among them ([`crate::chatglm`]).
    ChatGlm,
}

/// How the vocabulary is exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VocabKind {
    /// Llama family: `add_prefix_space` of tokenizer_config → `tokenizer.ggml.add_space_prefix`;
    /// then SentencePiece `tokenizer.model`, else a byte-fallback BPE `tokenizer.json`
    /// (not supported yet), else GPT-2 style BPE.
    Llama,
    /// SentencePiece `tokenizer.model` if present, else GPT-2 style BPE (Qwen2).
    SpmElseGpt2,
    /// SentencePiece `tokenizer.model`, then `tokenizer.ggml.add_space_prefix` = false (Gemma 2
    /// and 3).
    SpmNoSpacePrefix,
    /// [`VocabKind::SpmNoSpacePrefix`] with CodeGemma's end-of-turn id 107 written after the
    /// other tokenizer keys (`GemmaModel.set_vocab`, whatever the vocabulary holds).
    SpmGemma,
    /// Phi-3's own SentencePiece export (`Phi3MiniModel.set_vocab`): added tokens of
    /// `added_tokens.json`, `added_tokens_decoder` and `tokenizer.json` are USER_DEFINED, or
    /// CONTROL when `special` (no look-special test, `▁` kept); a `GPT2Tokenizer` class
    /// (Phi-4) takes the GPT-2 BPE path.
    SpmPhi3,
    /// GPT-2 style BPE `tokenizer.json` only (`TextModel.set_vocab`: Qwen2-MoE).
    Gpt2,
    /// WordPiece `tokenizer.json` with "phantom space" tokens (`▁word`, `##xx` → `xx`), model
    /// `bert`, preceded by `tokenizer.ggml.token_type_count` ← `type_vocab_size`.
    Bert,
    /// XLM-RoBERTa's unigram SentencePiece `sentencepiece.bpe.model`, realigned to the HF ids
    /// (`<s> <pad> </s> <unk>` first, pieces shifted by one), model `t5`, with its normalizer
    /// flags and precompiled charsmap (the named hook [`crate::tokenizer::xlmr`]).
    XlmRoberta,
    /// `add_bos_token`, `add_eos_token` and `add_sep_token` = true, then GPT-2 style BPE
    /// (`ModernBertModel.set_vocab`; the special vocabulary may overwrite the flags' values, in
    /// place).
    Gpt2AddBosEosSep,
    /// SentencePiece `tokenizer.model` only, then `tokenizer.ggml.add_space_prefix` ←
    /// tokenizer_config's `add_prefix_space` when present (`Ernie4_5Model.set_vocab`).
    SpmThenSpacePrefix,
    /// GPT-2 style BPE, then EOS ← config.json's `eod_token_id` and EOT ← generation_config's
    /// first EOS id when it lists several (`HunYuanModel.set_vocab`).
    Gpt2HunYuan,
    /// GPT-2 style BPE, then EOS, EOT, UNK and BOS from the added tokens `<|endoftext|>` and
    /// `<|user|>` where the special tokens set none (`Glm4Model.set_vocab`).
    Gpt2Glm4,
    /// GPT-2 style BPE, then EOS, EOT and UNK from the added tokens `<|endoftext|>` and
    /// `<|user|>` where the special tokens set none (`ChatGLMModel.set_vocab`, no BOS).
    Gpt2ChatGlm,
    /// GPT-2 style BPE, then BOS, EOT, UNK and EOM from the added tokens `[gMASK]`,
    /// `<|user|>`, `<|endoftext|>` and `<|observation|>` where the special tokens set none
    /// (`TextModel._set_vocab_glm`: GLM-4.5).
    Gpt2Glm,
    /// `vocab_size` rounded up to a multiple of `pad_vocab_size_multiple` (default 16), then
    /// SentencePiece `tokenizer.model`, else GPT-2 style BPE (`Mamba2Model.set_vocab`; a
    /// release without tokenizer files, which the reference gives GPT-NeoX's, is refused).
    SpmElseGpt2PadTo16,
    /// [`VocabKind::SpmElseGpt2PadTo16`] padded to a multiple of 8 whatever config.json says
    /// (`GraniteHybridModel.set_vocab`).
    SpmElseGpt2PadTo8,
    /// `vocab_size` rounded up to a multiple of `pad_vocab_size_multiple` (default 8), then
    /// GPT-2 style BPE `tokenizer.json`, else SentencePiece `tokenizer.model`
    /// (`MambaModel.set_vocab`; the builtin GPT-NeoX vocabulary of a release without tokenizer
    /// files is refused).
    Gpt2ElseSpmPadTo8,
    /// GPT-2 style BPE `tokenizer.json` only, `vocab_size` rounded up to a multiple of 8 whatever
    /// config.json says (`NemotronHModel.set_vocab`).
    Gpt2PadTo8,
    /// SentencePiece `tokenizer.model` required (`JambaModel.set_vocab`; its other branch, a
    /// `tokenizer.json` read as a Llama HF vocabulary, is not done: refused).
    Spm,
}

/// A Mixture-of-Experts layer stored one tensor per expert and projection, which the reference
/// stacks into one tensor per projection (`torch.stack(dim=0)` in expert order: shape
/// `[n_expert, rows, cols]`, GGUF `ne` `{cols, rows, n_expert}`), written when the layer's last
/// expert tensor has been read (`conversion/llama.py`, `conversion/qwen.py` `modify_tensors`).
#[derive(Debug, Clone, Copy)]
pub struct ExpertStack {
    /// A tensor is an expert tensor when its HF name contains this (the reference's test).
    pub marker: &'static str,
    /// The HF name of one expert tensor: `{bid}` block, `{xid}` expert, `{w}` projection.
    pub pattern: &'static str,
    /// Projections (`{w}`) in the order the reference writes their stacks, each with the GGUF
    /// name of the stack (`{bid}` is the block number).
    pub members: &'static [(&'static str, &'static str)],
    /// Hyper-parameters giving the number of experts (first present).
    pub count: &'static [&'static str],
}

/// Mixtral's experts (`block_sparse_moe.experts.N.w1/w2/w3`: gate, down, up).
pub(crate) const MIXTRAL_EXPERTS: ExpertStack = ExpertStack {
    marker: "block_sparse_moe.experts",
    pattern: "model.layers.{bid}.block_sparse_moe.experts.{xid}.{w}.weight",
    members: &[
        ("w1", "blk.{bid}.ffn_gate_exps.weight"),
        ("w2", "blk.{bid}.ffn_down_exps.weight"),
        ("w3", "blk.{bid}.ffn_up_exps.weight"),
    ],
    count: &["num_local_experts"],
};

/// Qwen2-MoE's experts (`mlp.experts.N.{gate,up,down}_proj`), stacked down, gate, up.
pub(crate) const QWEN2MOE_EXPERTS: ExpertStack = ExpertStack {
    marker: "experts",
    pattern: "model.layers.{bid}.mlp.experts.{xid}.{w}.weight",
    members: &[
        ("down_proj", "blk.{bid}.ffn_down_exps.weight"),
        ("gate_proj", "blk.{bid}.ffn_gate_exps.weight"),
        ("up_proj", "blk.{bid}.ffn_up_exps.weight"),
    ],
    count: &["num_local_experts", "num_experts"],
};

/// Qwen3-MoE's experts: Qwen2-MoE's layout (`conversion/qwen.py` `Qwen3MoeModel` inherits its
/// `modify_tensors`).
pub(crate) const QWEN3MOE_EXPERTS: ExpertStack = QWEN2MOE_EXPERTS;

/// OLMoE's experts: Qwen2-MoE's layout (`conversion/olmo.py` `OlmoeModel.modify_tensors`, "Copied
/// from: Qwen2MoeModel").
pub(crate) const OLMOE_EXPERTS: ExpertStack = QWEN2MOE_EXPERTS;

/// Ernie 4.5 MoE's experts (`mlp.experts.N.{gate,up,down}_proj`), stacked gate, up, down
/// (`Ernie4_5MoeModel.modify_tensors`).
pub(crate) const ERNIE45_EXPERTS: ExpertStack = ExpertStack {
    marker: "mlp.experts",
    pattern: "model.layers.{bid}.mlp.experts.{xid}.{w}.weight",
    members: &[
        ("gate_proj", "blk.{bid}.ffn_gate_exps.weight"),
        ("up_proj", "blk.{bid}.ffn_up_exps.weight"),
        ("down_proj", "blk.{bid}.ffn_down_exps.weight"),
    ],
    count: &["moe_num_experts"],
};

/// LFM2-MoE's experts (`feed_forward.experts.N.w1/w2/w3`: gate, down, up), stacked in that
/// order (`LFM2MoeModel.modify_tensors`).
pub(crate) const LFM2MOE_EXPERTS: ExpertStack = ExpertStack {
    marker: "experts",
    pattern: "model.layers.{bid}.feed_forward.experts.{xid}.{w}.weight",
    members: MIXTRAL_EXPERTS.members,
    count: &["num_local_experts", "num_experts"],
};

/// How a fused HF tensor is split ([`crate::split`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitRule {
    /// Multi-head latent attention's `kv_b_proj` `[n_head_kv·(nope + v), rank]` (per head its
    /// `qk_nope_head_dim` key rows, then its `v_head_dim` value rows): `k_b_proj`
    /// `[n_head_kv, rank, nope]` (each head's key rows transposed) and `v_b_proj`
    /// `[n_head_kv, v, rank]` (`conversion/deepseek.py` `DeepseekV2Model.modify_tensors`).
    MlaKvB,
    /// GPT-OSS's fused experts `gate_up_proj` `[experts, hidden, 2·ff]` (gate and up columns
    /// alternating): transposed, then even rows `gate_proj.weight` and odd rows `up_proj.weight`,
    /// each `[experts, ff, hidden]` (`conversion/gpt_oss.py` `GptOssModel.modify_tensors`).
    GateUpAlternating,
    /// GPT-OSS's `gate_up_proj_bias` `[experts, 2·ff]`: even columns `gate_proj.bias`, odd
    /// columns `up_proj.bias`.
    GateUpBiasAlternating,
    /// GPT-OSS's fused experts `down_proj` `[experts, ff, hidden]`, transposed to
    /// `down_proj.weight` `[experts, hidden, ff]`.
    DownTransposed,
    /// transformers 5's fused experts `gate_up_proj` `[experts, 2·ff, hidden]` (Qwen2-MoE,
    /// Qwen3-MoE): the first `ff` rows of each expert `gate_proj.weight`, the last `ff`
    /// `up_proj.weight`, each `[experts, ff, hidden]` (`conversion/qwen.py`
    /// `Qwen2MoeModel.modify_tensors`: `data_torch[..., :n_ff, :]`).
    GateUpHalves,
    /// transformers 5's fused experts `down_proj` `[experts, hidden, ff]`, written as is as
    /// `down_proj.weight`.
    DownAsIs,
    /// GPT-OSS's MXFP4 experts (`quantization_config.quant_method` "mxfp4"): `*_scales`
    /// `[experts, rows, cols/32]` with its `*_blocks` `[experts, rows, cols/32, 16]` repacked into
    /// GGUF MXFP4 blocks (the scale byte, then the 16 bytes with their nibbles reordered),
    /// written before every other tensor (`generate_extra_tensors`); `alternating`: rows
    /// alternate gate/up (`gate_up_proj`), else one output (`down_proj`).
    Mxfp4 {
        /// Even rows `gate_proj.weight`, odd rows `up_proj.weight`.
        alternating: bool,
    },
    /// Qwen3-VL-MoE's fused experts as the reference reads them (`[E, A, B]`, the original
    /// checkpoint's `[E, H, 2F]`): the last axis halved, gate first, each half transposed to
    /// `[E, B/2, A]` (`Qwen3VLMoeTextModel.modify_tensors`), named `gate_proj.weight` /
    /// `up_proj.weight`.
    GateUpLastHalvesTransposed,
    /// A depthwise conv1d weight `[channels, 1, kernel]` squeezed to `[channels, kernel]`
    /// (`data_torch.squeeze(1)`: LFM2's short convolutions, the SSM families' `conv1d`): one part
    /// under the same name, a shape change only.
    Conv1dSqueeze,
    /// A fused `[2·n, cols]` gate/up weight split along its rows (`data_torch.split(n, dim=-2)`,
    /// Granite's `shared_mlp.input_linear`, n = `shared_intermediate_size`): the first half
    /// `gate_proj.weight`, the second `up_proj.weight` beside it.
    RowHalves,
    /// The SSM state matrix: `A = -exp(A_log)` (computed as torch does: the named transform
    /// [`crate::ValueOp::NegExp`]), `A_log` `[heads]` reshaped to `[heads, 1]` (Mamba 2's
    /// `reshape((*shape, 1))`); a tensor of more dimensions keeps its shape (Mamba 1's
    /// `[inner, state]`).
    SsmA,
    /// A tensor `[n]` reshaped to `[n, 1]` (Mamba 2's `D`); more dimensions keep their shape.
    AppendUnitAxis,
    /// Granite MoE's routed experts `block_sparse_moe.input_linear` `[experts, 2·ff, hidden]`
    /// (ff = `intermediate_size`, refused otherwise as the reference asserts): the first `ff`
    /// rows of each expert `gate_proj.weight`, the last `up_proj.weight`, beside it
    /// (`GraniteMoeModel.modify_tensors`: `data_torch.split(ffn_dim, dim=-2)`).
    ExpertRowHalves,
    /// Mamba 2's gated RMS norm `[inner]` reshaped to `[n_groups, inner / n_groups]`
    /// (`n_groups` from config.json, default 1; refused when it does not divide).
    SsmNormGroups,
    /// Qwen3-Next's `in_proj_qkvz` (per key head q, k, v, z rows) regrouped into `in_proj_qkv`
    /// and `in_proj_z` ([`crate::qwen_next::qkvz_parts`]: several views per part).
    QkvzHeads,
}

impl SplitRule {
    /// The parts are stacked experts (the architecture is a Mixture-of-Experts one).
    pub fn experts(self) -> bool {
        !matches!(
            self,
            SplitRule::MlaKvB
                | SplitRule::Conv1dSqueeze
                | SplitRule::RowHalves
                | SplitRule::SsmA
                | SplitRule::AppendUnitAxis
                | SplitRule::SsmNormGroups
                | SplitRule::QkvzHeads
        )
    }

    /// The value transform the part gets before the output cast.
    pub fn value_op(self) -> Option<crate::ValueOp> {
        (self == SplitRule::SsmA).then_some(crate::ValueOp::NegExp)
    }
}

/// A fused HF tensor the reference writes as several GGUF tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// HF names ending with this are split.
    pub suffix: &'static str,
    /// How.
    pub rule: SplitRule,
}

/// DeepSeek-V2's MLA split.
pub(crate) const MLA_SPLITS: &[Split] = &[Split {
    suffix: "kv_b_proj.weight",
    rule: SplitRule::MlaKvB,
}];

/// DeepSeek-V2's routed experts (`mlp.experts.N.{gate,up,down}_proj`, stacked down, gate, up);
/// the marker is `mlp.experts` so that `mlp.shared_experts.*` stays a named tensor.
pub(crate) const DEEPSEEK2_EXPERTS: ExpertStack = ExpertStack {
    marker: "mlp.experts",
    pattern: "model.layers.{bid}.mlp.experts.{xid}.{w}.weight",
    members: QWEN2MOE_EXPERTS.members,
    count: &["n_routed_experts"],
};

/// transformers 5's fused expert tensors (`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`,
/// with or without `.weight`), as Qwen2-MoE's converter splits them.
pub(crate) const FUSED_EXPERT_SPLITS: &[Split] = &[
    Split {
        suffix: "mlp.experts.gate_up_proj",
        rule: SplitRule::GateUpHalves,
    },
    Split {
        suffix: "mlp.experts.gate_up_proj.weight",
        rule: SplitRule::GateUpHalves,
    },
    Split {
        suffix: "mlp.experts.down_proj",
        rule: SplitRule::DownAsIs,
    },
    Split {
        suffix: "mlp.experts.down_proj.weight",
        rule: SplitRule::DownAsIs,
    },
];

/// Qwen3-VL-MoE's fused experts (`Qwen3VLMoeTextModel.modify_tensors`): gate/up halves of the
/// last axis and `down_proj`, each transposed.
pub(crate) const QWEN3VLMOE_SPLITS: &[Split] = &[
    Split {
        suffix: "mlp.experts.gate_up_proj",
        rule: SplitRule::GateUpLastHalvesTransposed,
    },
    Split {
        suffix: "mlp.experts.down_proj",
        rule: SplitRule::DownTransposed,
    },
];

/// Llama 4's fused experts in the original layout (`feed_forward.experts.gate_up_proj`
/// `[E, H, 2F]`, `down_proj` `[E, F, H]`, no `.weight`), split and transposed as
/// `Llama4Model.modify_tensors` does (Qwen3-VL-MoE's rules).
pub(crate) const LLAMA4_SPLITS: &[Split] = &[
    Split {
        suffix: "feed_forward.experts.gate_up_proj",
        rule: SplitRule::GateUpLastHalvesTransposed,
    },
    Split {
        suffix: "feed_forward.experts.down_proj",
        rule: SplitRule::DownTransposed,
    },
];

/// LFM2's short-convolution weight, squeezed.
pub(crate) const SHORTCONV_SPLITS: &[Split] = &[Split {
    suffix: "conv.conv.weight",
    rule: SplitRule::Conv1dSqueeze,
}];

/// Mamba 2's SSM tensors (`conversion/mamba.py` `Mamba2Model.modify_tensors`): the conv1d
/// squeezed, `A = -exp(A_log)` and `D` as `[heads, 1]`, the norm grouped.
pub(crate) const MAMBA2_SPLITS: &[Split] = &[
    Split {
        suffix: "mixer.conv1d.weight",
        rule: SplitRule::Conv1dSqueeze,
    },
    Split {
        suffix: "mixer.A_log",
        rule: SplitRule::SsmA,
    },
    Split {
        suffix: "mixer.D",
        rule: SplitRule::AppendUnitAxis,
    },
    Split {
        suffix: "mixer.norm.weight",
        rule: SplitRule::SsmNormGroups,
    },
];

/// Falcon-H1's SSM tensors: Mamba 2's rules under `mamba.` (`FalconH1Model` is a
/// `Mamba2Model`).
pub(crate) const FALCON_H1_SPLITS: &[Split] = &[
    Split {
        suffix: "mamba.conv1d.weight",
        rule: SplitRule::Conv1dSqueeze,
    },
    Split {
        suffix: "mamba.A_log",
        rule: SplitRule::SsmA,
    },
    Split {
        suffix: "mamba.D",
        rule: SplitRule::AppendUnitAxis,
    },
    Split {
        suffix: "mamba.norm.weight",
        rule: SplitRule::SsmNormGroups,
    },
];

/// Granite 4 hybrid's SSM tensors (Mamba 2's rules under `mamba.`) and its shared MLP.
pub(crate) const GRANITE_HYBRID_SPLITS: &[Split] = &[
    Split {
        suffix: "mamba.conv1d.weight",
        rule: SplitRule::Conv1dSqueeze,
    },
    Split {
        suffix: "mamba.A_log",
        rule: SplitRule::SsmA,
    },
    Split {
        suffix: "mamba.D",
        rule: SplitRule::AppendUnitAxis,
    },
    Split {
        suffix: "mamba.norm.weight",
        rule: SplitRule::SsmNormGroups,
    },
    Split {
        suffix: "shared_mlp.input_linear.weight",
        rule: SplitRule::RowHalves,
    },
    Split {
        suffix: "block_sparse_moe.input_linear.weight",
        rule: SplitRule::ExpertRowHalves,
    },
];

/// Jamba's Mamba 1 tensors: the conv1d squeezed, `A = -exp(A_log)` in its own shape
/// (`[inner, state]`).
pub(crate) const JAMBA_SPLITS: &[Split] = &[
    Split {
        suffix: "mamba.conv1d.weight",
        rule: SplitRule::Conv1dSqueeze,
    },
    Split {
        suffix: "mamba.A_log",
        rule: SplitRule::SsmA,
    },
];

/// Jamba's experts (`feed_forward.experts.N.{gate,up,down}_proj`, as the release stores them),
/// stacked down, gate, up under Qwen2-MoE's names (`JambaModel.modify_tensors`).
pub(crate) const JAMBA_EXPERTS: ExpertStack = ExpertStack {
    marker: "feed_forward.experts",
    pattern: "model.layers.{bid}.feed_forward.experts.{xid}.{w}.weight",
    members: QWEN2MOE_EXPERTS.members,
    count: &["num_local_experts", "num_experts"],
};

/// Mamba 1's tensors (`MambaModel.modify_tensors`): the conv1d squeezed, `A = -exp(A_log)`
/// `[inner, state]`.
pub(crate) const MAMBA1_SPLITS: &[Split] = &[
    Split {
        suffix: "mixer.conv1d.weight",
        rule: SplitRule::Conv1dSqueeze,
    },
    Split {
        suffix: "mixer.A_log",
        rule: SplitRule::SsmA,
    },
];

/// Qwen3-Next's gated delta-net tensors: `in_proj_qkvz` regrouped, the conv1d squeezed; and
/// transformers 5's fused experts as Qwen2-MoE's converter splits them.
pub(crate) const QWEN3NEXT_SPLITS: &[Split] = &[
    Split {
        suffix: "linear_attn.in_proj_qkvz.weight",
        rule: SplitRule::QkvzHeads,
    },
    Split {
        suffix: "linear_attn.conv1d.weight",
        rule: SplitRule::Conv1dSqueeze,
    },
    FUSED_EXPERT_SPLITS[0],
    FUSED_EXPERT_SPLITS[1],
    FUSED_EXPERT_SPLITS[2],
    FUSED_EXPERT_SPLITS[3],
];

/// GPT-OSS's fused expert tensors, unquantized and MXFP4.
pub(crate) const GPTOSS_SPLITS: &[Split] = &[
    Split {
        suffix: "mlp.experts.gate_up_proj",
        rule: SplitRule::GateUpAlternating,
    },
    Split {
        suffix: "mlp.experts.gate_up_proj_bias",
        rule: SplitRule::GateUpBiasAlternating,
    },
    Split {
        suffix: "mlp.experts.down_proj",
        rule: SplitRule::DownTransposed,
    },
    Split {
        suffix: "mlp.experts.gate_up_proj_scales",
        rule: SplitRule::Mxfp4 { alternating: true },
    },
    Split {
        suffix: "mlp.experts.down_proj_scales",
        rule: SplitRule::Mxfp4 { alternating: false },
    },
];

/// One GGUF architecture.
#[derive(Debug, Clone, Copy)]
pub struct ArchSpec {
    /// `general.architecture`.
    pub arch: &'static str,
    /// HF `architectures[0]` values converted as this architecture.
    pub hf_archs: &'static [&'static str],
    /// HF base name (no `.weight`/`.bias`) → GGUF base name, as groups ([`NameGroup`]).
    pub tensors: &'static [NameGroup],
    /// Per-expert tensors stacked into one GGUF tensor per projection (Mixture-of-Experts);
    /// `None` for dense architectures, whose configs with an expert count are refused.
    pub experts: Option<&'static ExpertStack>,
    /// Apply the Llama q/k row permutation to `*q_proj.{weight,bias}` / `*k_proj.{weight,bias}`.
    pub permute_qk: bool,
    /// transformers config defaults.
    pub config: ConfigDefaults,
    /// Keys after the common ones.
    pub extra_kv: &'static [ExtraKv],
    /// Vocabulary export.
    pub vocab: VocabKind,
    /// `rope_type: llama3` generates a `rope_freqs.weight` tensor (Llama 3.x).
    pub llama3_rope_freqs: bool,
    /// HF name rewrites and drops applied before the map.
    pub names: NameRules,
    /// Hyper-parameter keys written.
    pub kv_layout: KvLayout,
    /// `*norm.weight` tensors are stored as `w` and used as `1 + w` (Gemma's RMSNorm): the
    /// reference adds 1 while converting (in the tensor's own precision for F16, else F32).
    pub norm_plus_one: bool,
    /// HF tensors the reference splits into several GGUF tensors, each a strided view of it
    /// ([`crate::Origin::View`]; the rules are the named hook [`crate::split`]).
    pub splits: &'static [Split],
    /// `token_embd.weight` keeps only the vocabulary's rows (Gemma 3's `data_torch[:n_vocab]`,
    /// `n_vocab` the SentencePiece export's length): an [`crate::Origin::Rows`] when the
    /// embedding has more rows.
    pub embd_rows_to_vocab: bool,
    /// HF name suffixes of 2-D weights stored `[in, out]` (GPT-2's `Conv1D`), which the
    /// reference transposes to `[out, in]` before writing: an [`crate::Origin::View`] with swapped strides.
    pub transposed: &'static [&'static str],
    /// Where the reference's class truly differs from the common converter in something that is
    /// not a key or a name ([`Hook`]); empty for most architectures.
    pub hooks: &'static [Hook],
}

/// A named difference of one architecture's converter class, applied by the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// XLM-RoBERTa (`BertModel._xlmroberta_tokenizer_init` and `XLMRobertaModel.modify_tensors`):
    /// position ids start at `pad_token_id + 1`, so when config.json has a `pad_token_id` the
    /// first `pad_token_id + 1` rows of `position_embd` are dropped (an
    /// [`crate::Origin::Rows`]) and `context_length` is `max_position_embeddings` minus them
    /// ([`crate::xlmr`]).
    PositionOffsetFromPad,
    /// DeepSeek-V3's multi-token-prediction layers (`model.layers.N.*` with `N` ≥
    /// `num_hidden_layers`, as its release ships them) are skipped
    /// (`DeepseekV2Model.skip_mtp`).
    SkipMtpLayers,
    /// Falcon-H1's µP multipliers folded into the weights (`FalconH1Model.modify_tensors`): each
    /// tensor whose HF name holds `down_proj`, `gate_proj`, `k_proj`, … is multiplied by its
    /// factors from config.json, `in_proj` per band of rows ([`crate::ssm::falcon_h1_scale`]).
    FalconH1Multipliers,
    /// GLM-4.5's multi-token-prediction layers (`Glm4MoeModel.__init__`): the block count is
    /// `num_hidden_layers + num_nextn_predict_layers` (written so, and the layers past
    /// `num_hidden_layers` are converted with their `nextn.*` tensors), and the weights need not
    /// hold them (transformers' `save_pretrained` writes none; llama.cpp then loads the trunk
    /// only).
    NextnLayers,
    /// Granite 4 hybrid's layers (`GraniteHybridModel.get_attn_layers`): the q/k permutation only
    /// in attention layers (`layer_types` entries `attention`, else `attn_layer_indices`, else
    /// every `attn_layer_period`-th from `attn_layer_offset`); the others go through Mamba 2's
    /// converter, which does not permute. With routed experts (`num_local_experts` truthy) the
    /// shared MLP is written as the shared expert (`ffn_{gate,up,down}_shexp`,
    /// `GraniteMoeModel.modify_tensors`), without them as the block's MLP.
    GraniteHybridLayers,
    /// Qwen3-Next (`Qwen3NextModel`, `_QwenMtpMixin`; [`crate::qwen_next`]): `Qwen3NextConfig`'s
    /// `layer_types` and rope factor, the multi-token-prediction block (`mtp.*`) renamed into
    /// layers past `num_hidden_layers` and counted as blocks (required, as the reference asserts),
    /// `-exp(A_log)`, `1 + w` of every norm but the delta-net's, the gated delta-net tensors
    /// checked against config.json.
    QwenLinearAttention,
    /// Qwen3.5's V-head reorder (`_LinearAttentionVReorderBase`, with
    /// [`Hook::QwenLinearAttention`]): the value heads of the gated delta-net tensors go from
    /// grouped by key head to tiled ([`crate::qwen_next::v_reorder`]).
    LinearAttentionVReorder,
    /// Apertus' xIELU activation (`ApertusModel.modify_tensors`): each layer's one-element
    /// `mlp.act_fn.{alpha_n,alpha_p,beta,eps}` tensors are not written; their values become the
    /// F32 arrays `xielu.alpha_n`, … (one entry per layer, by block), written while the
    /// reference prepares tensors, right after `general.architecture` ([`crate::xielu`]). The
    /// caller reads the values the plan needs ([`crate::plan::value_tensors`],
    /// [`crate::PlanOptions::tensor_values`]).
    XieluValues,
    /// Nemotron-H ([`crate::nemotron_h`]): `NemotronHConfig`'s normalization (the layer pattern,
    /// `mamba_*` aliases), its Mamba 2 dimensions (`mamba_num_heads × mamba_head_dim`), every
    /// `backbone.layers.N.mixer.*` tensor checked against its layer's kind; dense MLP layers,
    /// the MTP head and latent MoE projections refused.
    NemotronH,
    /// Every projection, norm and MLP tensor checked against config.json's sizes, and sizes past
    /// 2^20 refused, before anything is computed from them ([`crate::shapes`]; the reference
    /// writes whatever it finds).
    CheckShapes,
    /// Gemma 3n (`Gemma3NModel`, [`crate::gemma3n`]): the three `altup_projections.N` and the
    /// three `altup_unembed_projections.N` stacked into one tensor each (written when the third
    /// is read), `embed_tokens` and `embed_tokens_per_layer` padded with zero rows up to
    /// `vocab_size` (an [`crate::Origin::PadRows`]), `altup_num_inputs` other than 4 refused
    /// (the reference asserts it).
    Gemma3n,
    /// MiniMax-M2 (`MiniMaxM2Model`, [`crate::minimax`]): the config variants whose file the
    /// pinned llama.cpp cannot run are refused from config.json before a weight is read (no
    /// `scoring_func` sigmoid, no q/k norms or per-head ones, lightning-attention layers, shared
    /// experts, a rotary size past the head), and the q/k norms (over all heads), router, score
    /// correction bias and experts are checked against config.json with [`Hook::CheckShapes`]'s
    /// other names.
    MiniMaxM2,
}

/// HF tensor names the reference drops whatever the architecture (`base.py:1058-1060`).
pub(crate) const SKIPPED_SUFFIXES: &[&str] = &[
    ".attention.masked_bias",
    ".attention.bias",
    ".rotary_emb.inv_freq",
];

/// GGUF base names (without `blk.N.`) that always stay F32 (`base.py:1087-1121`, the subset
/// that can occur in the table's architectures).
pub(crate) const FORCE_F32: &[&str] = &[
    "ffn_gate_inp",
    "ffn_gate_inp_shexp",
    "position_embd",
    "token_types",
    "shortconv.conv",
    "ssm_conv1d",
    "altup_correct_coef",
    "altup_predict_coef",
];

/// One group of HF base name (no `.weight`/`.bias`) → GGUF base name rows; `{bid}` is the
/// block number. An architecture's name map is a list of groups (rows never overlap, so the
/// order of groups does not matter).
pub(crate) type NameGroup = &'static [(&'static str, &'static str)];

/// Token embedding and final norm of the Llama-style decoders.
const EMBED_NORM: NameGroup = &[
    ("model.embed_tokens", "token_embd"),
    ("model.norm", "output_norm"),
];

/// An untied output head (absent from Gemma and Gemma 2, which always tie it).
const LM_HEAD: NameGroup = &[("lm_head", "output")];

/// Mamba 2 (`backbone.*`, `gguf-py/gguf/tensor_mapping.py`; `dt_bias` renamed `dt_proj.bias`
/// first, as `Mamba2Model.filter_tensors` does).
const MAMBA2_NAMES: NameGroup = &[
    ("backbone.embeddings", "token_embd"),
    ("backbone.norm_f", "output_norm"),
    ("lm_head", "output"),
    ("backbone.layers.{bid}.norm", "blk.{bid}.attn_norm"),
    ("backbone.layers.{bid}.mixer.in_proj", "blk.{bid}.ssm_in"),
    ("backbone.layers.{bid}.mixer.conv1d", "blk.{bid}.ssm_conv1d"),
    ("backbone.layers.{bid}.mixer.dt_proj", "blk.{bid}.ssm_dt"),
    ("backbone.layers.{bid}.mixer.A_log", "blk.{bid}.ssm_a"),
    ("backbone.layers.{bid}.mixer.D", "blk.{bid}.ssm_d"),
    ("backbone.layers.{bid}.mixer.norm", "blk.{bid}.ssm_norm"),
    ("backbone.layers.{bid}.mixer.out_proj", "blk.{bid}.ssm_out"),
];

/// Falcon-H1's blocks: attention, a Mamba 2 mixer and the MLP side by side. gguf-py's map
/// lists `pre_ff_layernorm` with its `.weight`, so the reference writes `blk.N.ffn_norm` without
/// a suffix (kept F32).
const FALCON_H1_NAMES: NameGroup = &[
    ("model.embed_tokens", "token_embd"),
    ("model.final_layernorm", "output_norm"),
    ("lm_head", "output"),
    ("model.layers.{bid}.input_layernorm", "blk.{bid}.attn_norm"),
    (
        "model.layers.{bid}.pre_ff_layernorm.weight",
        "blk.{bid}.ffn_norm",
    ),
    ("model.layers.{bid}.mamba.in_proj", "blk.{bid}.ssm_in"),
    ("model.layers.{bid}.mamba.conv1d", "blk.{bid}.ssm_conv1d"),
    ("model.layers.{bid}.mamba.dt_proj", "blk.{bid}.ssm_dt"),
    ("model.layers.{bid}.mamba.A_log", "blk.{bid}.ssm_a"),
    ("model.layers.{bid}.mamba.D", "blk.{bid}.ssm_d"),
    ("model.layers.{bid}.mamba.norm", "blk.{bid}.ssm_norm"),
    ("model.layers.{bid}.mamba.out_proj", "blk.{bid}.ssm_out"),
    (
        "model.layers.{bid}.feed_forward.gate_proj",
        "blk.{bid}.ffn_gate",
    ),
    (
        "model.layers.{bid}.feed_forward.up_proj",
        "blk.{bid}.ffn_up",
    ),
    (
        "model.layers.{bid}.feed_forward.down_proj",
        "blk.{bid}.ffn_down",
    ),
];

/// Granite 4 hybrid (`model.layers.N.mamba.*` in SSM layers, `self_attn.*` in attention
/// layers, the shared MLP split by [`SplitRule::RowHalves`] in every layer).
const GRANITE_HYBRID_NAMES: NameGroup = &[
    ("model.layers.{bid}.mamba.in_proj", "blk.{bid}.ssm_in"),
    ("model.layers.{bid}.mamba.conv1d", "blk.{bid}.ssm_conv1d"),
    ("model.layers.{bid}.mamba.dt_proj", "blk.{bid}.ssm_dt"),
    ("model.layers.{bid}.mamba.A_log", "blk.{bid}.ssm_a"),
    ("model.layers.{bid}.mamba.D", "blk.{bid}.ssm_d"),
    ("model.layers.{bid}.mamba.norm", "blk.{bid}.ssm_norm"),
    ("model.layers.{bid}.mamba.out_proj", "blk.{bid}.ssm_out"),
    (
        "model.layers.{bid}.shared_mlp.gate_proj",
        "blk.{bid}.ffn_gate",
    ),
    ("model.layers.{bid}.shared_mlp.up_proj", "blk.{bid}.ffn_up"),
    (
        "model.layers.{bid}.shared_mlp.output_linear",
        "blk.{bid}.ffn_down",
    ),
    (
        "model.layers.{bid}.block_sparse_moe.gate_proj",
        "blk.{bid}.ffn_gate_exps",
    ),
    (
        "model.layers.{bid}.block_sparse_moe.up_proj",
        "blk.{bid}.ffn_up_exps",
    ),
    (
        "model.layers.{bid}.block_sparse_moe.output_linear",
        "blk.{bid}.ffn_down_exps",
    ),
    (
        "model.layers.{bid}.block_sparse_moe.router.layer",
        "blk.{bid}.ffn_gate_inp",
    ),
];

/// Nemotron-H's attention and MoE mixers (`backbone.layers.N.mixer.*`; its Mamba 2 mixers take
/// [`MAMBA2_NAMES`]); the score correction bias after `e_score_correction_bias` →
/// `e_score_correction.bias`.
const NEMOTRON_H_NAMES: NameGroup = &[
    ("backbone.layers.{bid}.mixer.q_proj", "blk.{bid}.attn_q"),
    ("backbone.layers.{bid}.mixer.k_proj", "blk.{bid}.attn_k"),
    ("backbone.layers.{bid}.mixer.v_proj", "blk.{bid}.attn_v"),
    (
        "backbone.layers.{bid}.mixer.o_proj",
        "blk.{bid}.attn_output",
    ),
    ("backbone.layers.{bid}.mixer.gate", "blk.{bid}.ffn_gate_inp"),
    (
        "backbone.layers.{bid}.mixer.gate.e_score_correction",
        "blk.{bid}.exp_probs_b",
    ),
    (
        "backbone.layers.{bid}.mixer.shared_experts.up_proj",
        "blk.{bid}.ffn_up_shexp",
    ),
    (
        "backbone.layers.{bid}.mixer.shared_experts.down_proj",
        "blk.{bid}.ffn_down_shexp",
    ),
];

/// Nemotron-H's routed experts (`mixer.experts.N.{up,down}_proj`, relu² without a gate),
/// stacked down, up (`NemotronHModel.modify_tensors`).
pub(crate) const NEMOTRON_H_EXPERTS: ExpertStack = ExpertStack {
    marker: "mixer.experts",
    pattern: "backbone.layers.{bid}.mixer.experts.{xid}.{w}.weight",
    members: &[
        ("down_proj", "blk.{bid}.ffn_down_exps.weight"),
        ("up_proj", "blk.{bid}.ffn_up_exps.weight"),
    ],
    count: &["n_routed_experts"],
};

/// Jamba (`model.layers.N.mamba.*` Mamba 1 mixers with dt/B/C norms, `feed_forward.*` MLPs and
/// routers, `pre_ff_layernorm`).
const JAMBA_NAMES: NameGroup = &[
    ("model.embed_tokens", "token_embd"),
    ("model.final_layernorm", "output_norm"),
    ("lm_head", "output"),
    ("model.layers.{bid}.input_layernorm", "blk.{bid}.attn_norm"),
    ("model.layers.{bid}.pre_ff_layernorm", "blk.{bid}.ffn_norm"),
    ("model.layers.{bid}.mamba.in_proj", "blk.{bid}.ssm_in"),
    ("model.layers.{bid}.mamba.x_proj", "blk.{bid}.ssm_x"),
    ("model.layers.{bid}.mamba.dt_proj", "blk.{bid}.ssm_dt"),
    ("model.layers.{bid}.mamba.A_log", "blk.{bid}.ssm_a"),
    ("model.layers.{bid}.mamba.D", "blk.{bid}.ssm_d"),
    ("model.layers.{bid}.mamba.conv1d", "blk.{bid}.ssm_conv1d"),
    ("model.layers.{bid}.mamba.out_proj", "blk.{bid}.ssm_out"),
    (
        "model.layers.{bid}.mamba.dt_layernorm",
        "blk.{bid}.ssm_dt_norm",
    ),
    (
        "model.layers.{bid}.mamba.b_layernorm",
        "blk.{bid}.ssm_b_norm",
    ),
    (
        "model.layers.{bid}.mamba.c_layernorm",
        "blk.{bid}.ssm_c_norm",
    ),
    (
        "model.layers.{bid}.feed_forward.gate_proj",
        "blk.{bid}.ffn_gate",
    ),
    (
        "model.layers.{bid}.feed_forward.up_proj",
        "blk.{bid}.ffn_up",
    ),
    (
        "model.layers.{bid}.feed_forward.down_proj",
        "blk.{bid}.ffn_down",
    ),
    (
        "model.layers.{bid}.feed_forward.router",
        "blk.{bid}.ffn_gate_inp",
    ),
];

/// Mamba 1 (`backbone.*`): Mamba 2's names without the group norm, with `x_proj`.
const MAMBA1_NAMES: NameGroup = &[
    ("backbone.embeddings", "token_embd"),
    ("backbone.norm_f", "output_norm"),
    ("lm_head", "output"),
    ("backbone.layers.{bid}.norm", "blk.{bid}.attn_norm"),
    ("backbone.layers.{bid}.mixer.in_proj", "blk.{bid}.ssm_in"),
    ("backbone.layers.{bid}.mixer.conv1d", "blk.{bid}.ssm_conv1d"),
    ("backbone.layers.{bid}.mixer.x_proj", "blk.{bid}.ssm_x"),
    ("backbone.layers.{bid}.mixer.dt_proj", "blk.{bid}.ssm_dt"),
    ("backbone.layers.{bid}.mixer.A_log", "blk.{bid}.ssm_a"),
    ("backbone.layers.{bid}.mixer.D", "blk.{bid}.ssm_d"),
    ("backbone.layers.{bid}.mixer.out_proj", "blk.{bid}.ssm_out"),
];

/// The norm before attention (absent from OLMo 2, which norms after attention).
const ATTN_NORM: NameGroup = &[("model.layers.{bid}.input_layernorm", "blk.{bid}.attn_norm")];

/// Llama-style attention projections.
const ATTN: NameGroup = &[
    ("model.layers.{bid}.self_attn.q_proj", "blk.{bid}.attn_q"),
    ("model.layers.{bid}.self_attn.k_proj", "blk.{bid}.attn_k"),
    ("model.layers.{bid}.self_attn.v_proj", "blk.{bid}.attn_v"),
    (
        "model.layers.{bid}.self_attn.o_proj",
        "blk.{bid}.attn_output",
    ),
];

/// Per-head (Qwen3, Gemma 3) or whole-projection (OLMoE) q/k RMS norms: the names agree.
const QK_NORMS: NameGroup = &[
    (
        "model.layers.{bid}.self_attn.q_norm",
        "blk.{bid}.attn_q_norm",
    ),
    (
        "model.layers.{bid}.self_attn.k_norm",
        "blk.{bid}.attn_k_norm",
    ),
];

/// The norm before the feed-forward block (named after attention by HF).
const FFN_NORM: NameGroup = &[(
    "model.layers.{bid}.post_attention_layernorm",
    "blk.{bid}.ffn_norm",
)];

/// Norms after attention and after the feed-forward (Gemma 2/3 with [`PRE_FFN_NORM`] and the
/// input norm: four per block; OLMo 2 alone: its only norms).
const POST_NORMS: NameGroup = &[
    (
        "model.layers.{bid}.post_attention_layernorm",
        "blk.{bid}.post_attention_norm",
    ),
    (
        "model.layers.{bid}.post_feedforward_layernorm",
        "blk.{bid}.post_ffw_norm",
    ),
];

/// Gemma 2/3's norm before the feed-forward.
const PRE_FFN_NORM: NameGroup = &[(
    "model.layers.{bid}.pre_feedforward_layernorm",
    "blk.{bid}.ffn_norm",
)];

/// The gated MLP (also the dense layers of the Qwen MoE models).
const MLP: NameGroup = &[
    ("model.layers.{bid}.mlp.gate_proj", "blk.{bid}.ffn_gate"),
    ("model.layers.{bid}.mlp.up_proj", "blk.{bid}.ffn_up"),
    ("model.layers.{bid}.mlp.down_proj", "blk.{bid}.ffn_down"),
];

/// The MoE router of the Qwen MoE models and OLMoE.
const ROUTER: NameGroup = &[("model.layers.{bid}.mlp.gate", "blk.{bid}.ffn_gate_inp")];

/// Mixtral's router.
const MIXTRAL_ROUTER: NameGroup = &[(
    "model.layers.{bid}.block_sparse_moe.gate",
    "blk.{bid}.ffn_gate_inp",
)];

/// Qwen2-MoE's shared expert and its sigmoid gate.
const SHARED_EXPERT: NameGroup = &[
    (
        "model.layers.{bid}.mlp.shared_expert_gate",
        "blk.{bid}.ffn_gate_inp_shexp",
    ),
    (
        "model.layers.{bid}.mlp.shared_expert.gate_proj",
        "blk.{bid}.ffn_gate_shexp",
    ),
    (
        "model.layers.{bid}.mlp.shared_expert.up_proj",
        "blk.{bid}.ffn_up_shexp",
    ),
    (
        "model.layers.{bid}.mlp.shared_expert.down_proj",
        "blk.{bid}.ffn_down_shexp",
    ),
];

/// DeepSeek-V2's multi-head latent attention: a query either direct (`q_proj`, V2-Lite) or
/// low-rank (`q_a_proj`, its norm, `q_b_proj`), the compressed KV projection with its norm, and
/// `kv_b_proj`'s two halves as the MLA split names them ([`MLA_SPLITS`]).
const MLA: NameGroup = &[
    ("model.layers.{bid}.self_attn.q_proj", "blk.{bid}.attn_q"),
    (
        "model.layers.{bid}.self_attn.q_a_proj",
        "blk.{bid}.attn_q_a",
    ),
    (
        "model.layers.{bid}.self_attn.q_a_layernorm",
        "blk.{bid}.attn_q_a_norm",
    ),
    (
        "model.layers.{bid}.self_attn.q_b_proj",
        "blk.{bid}.attn_q_b",
    ),
    (
        "model.layers.{bid}.self_attn.kv_a_proj_with_mqa",
        "blk.{bid}.attn_kv_a_mqa",
    ),
    (
        "model.layers.{bid}.self_attn.kv_a_layernorm",
        "blk.{bid}.attn_kv_a_norm",
    ),
    (
        "model.layers.{bid}.self_attn.k_b_proj",
        "blk.{bid}.attn_k_b",
    ),
    (
        "model.layers.{bid}.self_attn.v_b_proj",
        "blk.{bid}.attn_v_b",
    ),
    (
        "model.layers.{bid}.self_attn.o_proj",
        "blk.{bid}.attn_output",
    ),
];

/// DeepSeek's shared experts (no gate of their own).
const SHARED_EXPERTS: NameGroup = &[
    (
        "model.layers.{bid}.mlp.shared_experts.gate_proj",
        "blk.{bid}.ffn_gate_shexp",
    ),
    (
        "model.layers.{bid}.mlp.shared_experts.up_proj",
        "blk.{bid}.ffn_up_shexp",
    ),
    (
        "model.layers.{bid}.mlp.shared_experts.down_proj",
        "blk.{bid}.ffn_down_shexp",
    ),
];

/// The names fused expert tensors are split into (GPT-OSS's and transformers 5's).
const FUSED_EXPERTS: NameGroup = &[
    (
        "model.layers.{bid}.mlp.experts.gate_proj",
        "blk.{bid}.ffn_gate_exps",
    ),
    (
        "model.layers.{bid}.mlp.experts.up_proj",
        "blk.{bid}.ffn_up_exps",
    ),
    (
        "model.layers.{bid}.mlp.experts.down_proj",
        "blk.{bid}.ffn_down_exps",
    ),
];

/// GPT-OSS: norms, router (with a bias), attention sinks; its experts are [`FUSED_EXPERTS`].
const GPTOSS: NameGroup = &[
    (
        "model.layers.{bid}.post_attention_layernorm",
        "blk.{bid}.post_attention_norm",
    ),
    ("model.layers.{bid}.mlp.router", "blk.{bid}.ffn_gate_inp"),
    ("model.layers.{bid}.self_attn.sinks", "blk.{bid}.attn_sinks"),
];

/// Phi-3's fused `qkv_proj` (`attn_qkv`) and `gate_up_proj` (`ffn_up`, gate rows first), which
/// the pinned reference writes fused, as llama.cpp's phi3 graph reads them.
const PHI3_FUSED: NameGroup = &[
    ("model.layers.{bid}.input_layernorm", "blk.{bid}.attn_norm"),
    (
        "model.layers.{bid}.self_attn.qkv_proj",
        "blk.{bid}.attn_qkv",
    ),
    (
        "model.layers.{bid}.self_attn.o_proj",
        "blk.{bid}.attn_output",
    ),
    ("model.layers.{bid}.mlp.gate_up_proj", "blk.{bid}.ffn_up"),
    ("model.layers.{bid}.mlp.down_proj", "blk.{bid}.ffn_down"),
];

/// StarCoder2's plain (ungated) MLP.
const STARCODER2_MLP: NameGroup = &[
    ("model.layers.{bid}.mlp.c_fc", "blk.{bid}.ffn_up"),
    ("model.layers.{bid}.mlp.c_proj", "blk.{bid}.ffn_down"),
];

/// GPT-2 after its `transformer.` prefix is removed (`tensor_mapping.py` lists both spellings:
/// openai-community/gpt2's own weights have no prefix, `save_pretrained` writes it).
const GPT2_NAMES: NameGroup = &[
    ("wte", "token_embd"),
    ("wpe", "position_embd"),
    ("ln_f", "output_norm"),
    ("lm_head", "output"),
    ("h.{bid}.ln_1", "blk.{bid}.attn_norm"),
    ("h.{bid}.attn.c_attn", "blk.{bid}.attn_qkv"),
    ("h.{bid}.attn.c_proj", "blk.{bid}.attn_output"),
    ("h.{bid}.ln_2", "blk.{bid}.ffn_norm"),
    ("h.{bid}.mlp.c_fc", "blk.{bid}.ffn_up"),
    ("h.{bid}.mlp.c_proj", "blk.{bid}.ffn_down"),
];

/// The norm after attention alone (Seed-OSS: `MODEL_TENSORS[SEED_OSS]` has `ATTN_POST_NORM`
/// and no `FFN_NORM`, so HF's `post_attention_layernorm` is `post_attention_norm`).
const ATTN_POST_NORM: NameGroup = &[(
    "model.layers.{bid}.post_attention_layernorm",
    "blk.{bid}.post_attention_norm",
)];

/// An ungated MLP under the gated one's names (Arcee's ReLU²: `up_proj`, `down_proj`).
const UP_DOWN_MLP: NameGroup = &[
    ("model.layers.{bid}.mlp.up_proj", "blk.{bid}.ffn_up"),
    ("model.layers.{bid}.mlp.down_proj", "blk.{bid}.ffn_down"),
];

/// HunYuan's per-head q/k norms.
const HUNYUAN_QK_NORMS: NameGroup = &[
    (
        "model.layers.{bid}.self_attn.query_layernorm",
        "blk.{bid}.attn_q_norm",
    ),
    (
        "model.layers.{bid}.self_attn.key_layernorm",
        "blk.{bid}.attn_k_norm",
    ),
];

/// GLM-4-0414's block: fused `gate_up_proj` written as `ffn_up` (llama.cpp's glm4 graph reads it
/// fused, as Phi-3's), the norm before the MLP under HF's after-attention name, and the norms
/// after attention and after the MLP.
const GLM4_BLOCK: NameGroup = &[
    ("model.layers.{bid}.mlp.gate_up_proj", "blk.{bid}.ffn_up"),
    ("model.layers.{bid}.mlp.down_proj", "blk.{bid}.ffn_down"),
    (
        "model.layers.{bid}.post_self_attn_layernorm",
        "blk.{bid}.post_attention_norm",
    ),
    (
        "model.layers.{bid}.post_mlp_layernorm",
        "blk.{bid}.post_ffw_norm",
    ),
];

/// Llama 4 (`MODEL_TENSORS[LLAMA4]`): `feed_forward.*` dense MLPs, router, shared expert and
/// the experts as [`LLAMA4_SPLITS`] names them.
const LLAMA4_FFN: NameGroup = &[
    (
        "model.layers.{bid}.feed_forward.gate_proj",
        "blk.{bid}.ffn_gate",
    ),
    (
        "model.layers.{bid}.feed_forward.up_proj",
        "blk.{bid}.ffn_up",
    ),
    (
        "model.layers.{bid}.feed_forward.down_proj",
        "blk.{bid}.ffn_down",
    ),
    (
        "model.layers.{bid}.feed_forward.router",
        "blk.{bid}.ffn_gate_inp",
    ),
    (
        "model.layers.{bid}.feed_forward.shared_expert.gate_proj",
        "blk.{bid}.ffn_gate_shexp",
    ),
    (
        "model.layers.{bid}.feed_forward.shared_expert.up_proj",
        "blk.{bid}.ffn_up_shexp",
    ),
    (
        "model.layers.{bid}.feed_forward.shared_expert.down_proj",
        "blk.{bid}.ffn_down_shexp",
    ),
    (
        "model.layers.{bid}.feed_forward.experts.gate_proj",
        "blk.{bid}.ffn_gate_exps",
    ),
    (
        "model.layers.{bid}.feed_forward.experts.up_proj",
        "blk.{bid}.ffn_up_exps",
    ),
    (
        "model.layers.{bid}.feed_forward.experts.down_proj",
        "blk.{bid}.ffn_down_exps",
    ),
];

/// GLM-4.5's multi-token-prediction layer (`MODEL_TENSORS[GLM4_MOE]`'s `NEXTN_*`), besides
/// a whole decoder block of its own.
const NEXTN: NameGroup = &[
    ("model.layers.{bid}.eh_proj", "blk.{bid}.nextn.eh_proj"),
    (
        "model.layers.{bid}.embed_tokens",
        "blk.{bid}.nextn.embed_tokens",
    ),
    ("model.layers.{bid}.enorm", "blk.{bid}.nextn.enorm"),
    ("model.layers.{bid}.hnorm", "blk.{bid}.nextn.hnorm"),
    (
        "model.layers.{bid}.shared_head.head",
        "blk.{bid}.nextn.shared_head_head",
    ),
    (
        "model.layers.{bid}.shared_head.norm",
        "blk.{bid}.nextn.shared_head_norm",
    ),
];

/// GLM-4.5 (`MODEL_TENSORS[GLM4_MOE]`): attention with biases and optional q/k norms, the norm
/// after attention named `post_attention_norm` (the map's `ATTN_POST_NORM` comes before
/// `FFN_NORM`), a dense MLP in the leading blocks, routed experts
/// ([`DEEPSEEK2_EXPERTS`]) with DeepSeek's router, score correction bias and shared experts
/// elsewhere, and the [`NEXTN`] layers.
const GLM4MOE_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN_NORM,
    ATTN,
    QK_NORMS,
    &[(
        "model.layers.{bid}.post_attention_layernorm",
        "blk.{bid}.post_attention_norm",
    )],
    MLP,
    ROUTER,
    SHARED_EXPERTS,
    &[(
        "model.layers.{bid}.mlp.gate.e_score_correction",
        "blk.{bid}.exp_probs_b",
    )],
    NEXTN,
];

/// `Glm4MoeModel.set_gguf_parameters` after the common keys.
const GLM4MOE_KVS: &[ExtraKv] = &[
    ExtraKv::RopeDimensionCountPartial,
    ExtraKv::ExpertFeedForwardLength,
    ExtraKv::U32IfPresent("expert_shared_count", "n_shared_experts"),
    ExtraKv::U32IfPresent("leading_dense_block_count", "first_k_dense_replace"),
    ExtraKv::U32Value("expert_gating_func", 2),
    ExtraKv::ExpertWeightsScale,
    ExtraKv::ExpertWeightsNormAny,
    ExtraKv::U32IfPresent("nextn_predict_layers", "num_nextn_predict_layers"),
];

/// Qwen3-Next's gated delta-net layers (`tensor_mapping.py`; `in_proj_qkv`/`in_proj_z` are the
/// parts [`SplitRule::QkvzHeads`] makes of `in_proj_qkvz`).
const LINEAR_ATTN: NameGroup = &[
    (
        "model.layers.{bid}.linear_attn.in_proj_qkv",
        "blk.{bid}.attn_qkv",
    ),
    (
        "model.layers.{bid}.linear_attn.in_proj_z",
        "blk.{bid}.attn_gate",
    ),
    (
        "model.layers.{bid}.linear_attn.in_proj_ba",
        "blk.{bid}.ssm_ba",
    ),
    (
        "model.layers.{bid}.linear_attn.conv1d",
        "blk.{bid}.ssm_conv1d",
    ),
    ("model.layers.{bid}.linear_attn.dt_proj", "blk.{bid}.ssm_dt"),
    ("model.layers.{bid}.linear_attn.A_log", "blk.{bid}.ssm_a"),
    ("model.layers.{bid}.linear_attn.norm", "blk.{bid}.ssm_norm"),
    (
        "model.layers.{bid}.linear_attn.out_proj",
        "blk.{bid}.ssm_out",
    ),
];

/// Qwen3.5's gated delta-net layers: the projections unfused (`in_proj_qkv`, `in_proj_z`,
/// `in_proj_a` → `ssm_alpha`, `in_proj_b` → `ssm_beta`), the rest as Qwen3-Next's.
const LINEAR_ATTN_35: NameGroup = &[
    (
        "model.layers.{bid}.linear_attn.in_proj_qkv",
        "blk.{bid}.attn_qkv",
    ),
    (
        "model.layers.{bid}.linear_attn.in_proj_z",
        "blk.{bid}.attn_gate",
    ),
    (
        "model.layers.{bid}.linear_attn.in_proj_a",
        "blk.{bid}.ssm_alpha",
    ),
    (
        "model.layers.{bid}.linear_attn.in_proj_b",
        "blk.{bid}.ssm_beta",
    ),
    (
        "model.layers.{bid}.linear_attn.conv1d",
        "blk.{bid}.ssm_conv1d",
    ),
    ("model.layers.{bid}.linear_attn.dt_proj", "blk.{bid}.ssm_dt"),
    ("model.layers.{bid}.linear_attn.A_log", "blk.{bid}.ssm_a"),
    ("model.layers.{bid}.linear_attn.norm", "blk.{bid}.ssm_norm"),
    (
        "model.layers.{bid}.linear_attn.out_proj",
        "blk.{bid}.ssm_out",
    ),
];

/// Qwen3.5 dense (`MODEL_TENSORS[QWEN35]`): Qwen3-Next's attention and norms, a dense MLP,
/// [`LINEAR_ATTN_35`], the MTP block.
const QWEN35_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN_NORM,
    ATTN,
    QK_NORMS,
    &[(
        "model.layers.{bid}.post_attention_layernorm",
        "blk.{bid}.post_attention_norm",
    )],
    MLP,
    LINEAR_ATTN_35,
    NEXTN,
];

/// Qwen3.5 MoE (`MODEL_TENSORS[QWEN35MOE]`): [`QWEN35_TENSORS`] with Qwen2-MoE's router, shared
/// expert and experts in place of the MLP.
const QWEN35MOE_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN_NORM,
    ATTN,
    QK_NORMS,
    &[(
        "model.layers.{bid}.post_attention_layernorm",
        "blk.{bid}.post_attention_norm",
    )],
    ROUTER,
    SHARED_EXPERT,
    FUSED_EXPERTS,
    LINEAR_ATTN_35,
    NEXTN,
];

/// Qwen3.5's splits: the conv1d squeezed (when no V-head reorder applies), transformers 5's
/// fused experts.
pub(crate) const QWEN35_SPLITS: &[Split] = &[
    QWEN3NEXT_SPLITS[1],
    FUSED_EXPERT_SPLITS[0],
    FUSED_EXPERT_SPLITS[1],
    FUSED_EXPERT_SPLITS[2],
    FUSED_EXPERT_SPLITS[3],
];

/// Qwen3.5's keys: Qwen3-Next's, then the default M-RoPE sections.
const QWEN35_KVS: &[ExtraKv] = &[
    ExtraKv::ExpertFeedForwardLength,
    ExtraKv::ExpertSharedFeedForwardLength,
    ExtraKv::NextnFromBlocks,
    ExtraKv::QwenLinearAttention,
    ExtraKv::DefaultMropeSections,
];

/// Qwen3-Next (`MODEL_TENSORS[QWEN3NEXT]`): gated full attention with q/k norms every few
/// layers, [`LINEAR_ATTN`] in the others, the norm after attention named
/// `post_attention_norm`, Qwen2-MoE's router, shared expert and experts in every layer (dense
/// MLP names for `mlp_only_layers`), and the [`NEXTN`] tensors of the MTP block.
const QWEN3NEXT_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN_NORM,
    ATTN,
    QK_NORMS,
    &[(
        "model.layers.{bid}.post_attention_layernorm",
        "blk.{bid}.post_attention_norm",
    )],
    ROUTER,
    SHARED_EXPERT,
    MLP,
    FUSED_EXPERTS,
    LINEAR_ATTN,
    NEXTN,
];

/// LFM2 (`tensor_mapping.py`): short-convolution and attention blocks, one norm before each
/// operator, SwiGLU `feed_forward.w1/w3/w2`, `embedding_norm` (the last norm, which llama.cpp
/// reads as `token_embd_norm`).
const LFM2_NAMES: NameGroup = &[
    ("model.embed_tokens", "token_embd"),
    ("model.embedding_norm", "token_embd_norm"),
    ("model.layers.{bid}.operator_norm", "blk.{bid}.attn_norm"),
    ("model.layers.{bid}.ffn_norm", "blk.{bid}.ffn_norm"),
    ("model.layers.{bid}.conv.conv", "blk.{bid}.shortconv.conv"),
    (
        "model.layers.{bid}.conv.in_proj",
        "blk.{bid}.shortconv.in_proj",
    ),
    (
        "model.layers.{bid}.conv.out_proj",
        "blk.{bid}.shortconv.out_proj",
    ),
    ("model.layers.{bid}.self_attn.q_proj", "blk.{bid}.attn_q"),
    ("model.layers.{bid}.self_attn.k_proj", "blk.{bid}.attn_k"),
    ("model.layers.{bid}.self_attn.v_proj", "blk.{bid}.attn_v"),
    (
        "model.layers.{bid}.self_attn.out_proj",
        "blk.{bid}.attn_output",
    ),
    (
        "model.layers.{bid}.self_attn.q_layernorm",
        "blk.{bid}.attn_q_norm",
    ),
    (
        "model.layers.{bid}.self_attn.k_layernorm",
        "blk.{bid}.attn_k_norm",
    ),
    ("model.layers.{bid}.feed_forward.w1", "blk.{bid}.ffn_gate"),
    ("model.layers.{bid}.feed_forward.w3", "blk.{bid}.ffn_up"),
    ("model.layers.{bid}.feed_forward.w2", "blk.{bid}.ffn_down"),
];

/// The router's score correction bias of Ernie 4.5 MoE (`moe_statics`), after its
/// `e_score_correction_bias` → `e_score_correction.bias` rename.
const ERNIE45_EXP_PROBS: NameGroup = &[(
    "model.layers.{bid}.mlp.moe_statics.e_score_correction",
    "blk.{bid}.exp_probs_b",
)];

/// LFM2-MoE's router and its expert bias (after `.expert_bias` → `.expert_bias.bias`).
const LFM2MOE_ROUTER: NameGroup = &[
    (
        "model.layers.{bid}.feed_forward.gate",
        "blk.{bid}.ffn_gate_inp",
    ),
    (
        "model.layers.{bid}.feed_forward.expert_bias",
        "blk.{bid}.exp_probs_b",
    ),
];

/// MiniMax-M2 (`MODEL_TENSORS[MINIMAXM2]`): Llama attention with q/k norms over all heads,
/// Mixtral's router and experts ([`MIXTRAL_EXPERTS`]), the router's score correction bias
/// (after `e_score_correction_bias` → `e_score_correction.bias`).
const MINIMAXM2_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN_NORM,
    ATTN,
    QK_NORMS,
    FFN_NORM,
    MIXTRAL_ROUTER,
    &[(
        "model.layers.{bid}.block_sparse_moe.e_score_correction",
        "blk.{bid}.exp_probs_b",
    )],
];

/// `NemotronHConfig`'s defaults for the keys the reference reads (`num_key_value_heads` and
/// `head_dim` apart).
const NEMOTRON_H_DEFAULTS: &[(&str, &str)] = &[
    ("vocab_size", "131072"),
    ("hidden_size", "4096"),
    ("num_attention_heads", "32"),
    ("max_position_embeddings", "4096"),
    ("intermediate_size", "21504"),
    ("layer_norm_epsilon", "1e-5"),
    ("mamba_num_heads", "128"),
    ("mamba_head_dim", "64"),
    ("ssm_state_size", "128"),
    ("n_groups", "8"),
    ("conv_kernel", "4"),
    ("expand", "2"),
    ("n_routed_experts", "8"),
    ("n_shared_experts", "1"),
    ("moe_intermediate_size", "7688"),
    ("moe_shared_expert_intermediate_size", "7688"),
    ("num_experts_per_tok", "2"),
    ("routed_scaling_factor", "1.0"),
    ("n_group", "1"),
    ("topk_group", "1"),
    ("norm_topk_prob", "true"),
    ("tie_word_embeddings", "false"),
];

/// Llama, Mistral and Qwen2.
const LLAMA_TENSORS: &[NameGroup] = &[EMBED_NORM, LM_HEAD, ATTN_NORM, ATTN, FFN_NORM, MLP];
/// Mixtral: Llama attention, a router and [`MIXTRAL_EXPERTS`].
const MIXTRAL_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN_NORM,
    ATTN,
    FFN_NORM,
    MIXTRAL_ROUTER,
];
/// Qwen2-MoE: a router, the shared expert, [`QWEN2MOE_EXPERTS`], and dense MLP names for
/// `mlp_only_layers`.
const QWEN2MOE_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN_NORM,
    ATTN,
    FFN_NORM,
    ROUTER,
    SHARED_EXPERT,
    MLP,
    FUSED_EXPERTS,
];
/// Qwen3-MoE: Qwen3 attention, a router, [`QWEN3MOE_EXPERTS`], dense MLP names.
const QWEN3MOE_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN_NORM,
    ATTN,
    QK_NORMS,
    FFN_NORM,
    ROUTER,
    MLP,
    FUSED_EXPERTS,
];
/// OLMoE: every layer sparse (`MODEL_TENSORS[OLMOE]` has no dense FFN), [`OLMOE_EXPERTS`].
const OLMOE_TENSORS: &[NameGroup] = &[
    EMBED_NORM, LM_HEAD, ATTN_NORM, ATTN, QK_NORMS, FFN_NORM, ROUTER,
];
/// Qwen3: Llama's names plus per-head q/k norms.
const QWEN3_TENSORS: &[NameGroup] = &[
    EMBED_NORM, LM_HEAD, ATTN_NORM, ATTN, QK_NORMS, FFN_NORM, MLP,
];
/// Gemma 2 (`MODEL_TENSORS[GEMMA2]`): four norms per block, no `output`.
const GEMMA2_TENSORS: &[NameGroup] = &[EMBED_NORM, ATTN_NORM, ATTN, POST_NORMS, PRE_FFN_NORM, MLP];
/// Gemma (v1): Llama's names without `output` (`lm_head` is dropped).
const GEMMA_TENSORS: &[NameGroup] = &[EMBED_NORM, ATTN_NORM, ATTN, FFN_NORM, MLP];
/// Gemma 3 (text): Gemma 2's norms plus q/k norms; an untied `lm_head` is `output`.
const GEMMA3_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN_NORM,
    ATTN,
    QK_NORMS,
    POST_NORMS,
    PRE_FFN_NORM,
    MLP,
];
/// Gemma 3n's own tensors (`MODEL_TENSORS[GEMMA3N]`): per-layer inputs, altup and laurel; the
/// `_scale` tensor is renamed `_scale.weight` first (`Gemma3NModel.filter_tensors`). The two
/// altup stacks are named by [`crate::gemma3n`].
const GEMMA3N_OWN: NameGroup = &[
    ("model.embed_tokens_per_layer", "per_layer_token_embd"),
    ("model.per_layer_model_projection", "per_layer_model_proj"),
    ("model.per_layer_projection_norm", "per_layer_proj_norm"),
    (
        "model.layers.{bid}.per_layer_input_gate",
        "blk.{bid}.inp_gate",
    ),
    ("model.layers.{bid}.per_layer_projection", "blk.{bid}.proj"),
    (
        "model.layers.{bid}.post_per_layer_input_norm",
        "blk.{bid}.post_norm",
    ),
    (
        "model.layers.{bid}.altup.correct_output_scale",
        "blk.{bid}.altup_correct_scale",
    ),
    (
        "model.layers.{bid}.altup.correction_coefs",
        "blk.{bid}.altup_correct_coef",
    ),
    (
        "model.layers.{bid}.altup.prediction_coefs",
        "blk.{bid}.altup_predict_coef",
    ),
    (
        "model.layers.{bid}.altup.modality_router",
        "blk.{bid}.altup_router",
    ),
    (
        "model.layers.{bid}.altup.router_norm",
        "blk.{bid}.altup_router_norm",
    ),
    (
        "model.layers.{bid}.laurel.linear_left",
        "blk.{bid}.laurel_l",
    ),
    (
        "model.layers.{bid}.laurel.linear_right",
        "blk.{bid}.laurel_r",
    ),
    (
        "model.layers.{bid}.laurel.post_laurel_norm",
        "blk.{bid}.laurel_post_norm",
    ),
];
/// Gemma 3n (text): Gemma 3's names and its own.
const GEMMA3N_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN_NORM,
    ATTN,
    QK_NORMS,
    POST_NORMS,
    PRE_FFN_NORM,
    MLP,
    GEMMA3N_OWN,
];
/// DeepSeek-V2: MLA, dense MLP names for the leading dense blocks, a router, shared experts and
/// [`DEEPSEEK2_EXPERTS`].
const DEEPSEEK2_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN_NORM,
    MLA,
    FFN_NORM,
    MLP,
    ROUTER,
    SHARED_EXPERTS,
];
/// DeepSeek-V3: DeepSeek-V2's, with the router's score correction bias.
const DEEPSEEK3_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN_NORM,
    MLA,
    FFN_NORM,
    MLP,
    ROUTER,
    SHARED_EXPERTS,
    &[(
        "model.layers.{bid}.mlp.gate.e_score_correction",
        "blk.{bid}.exp_probs_b",
    )],
];
/// GPT-OSS: Llama attention with biases, [`GPTOSS`].
const GPTOSS_TENSORS: &[NameGroup] = &[EMBED_NORM, LM_HEAD, ATTN_NORM, ATTN, GPTOSS, FUSED_EXPERTS];
/// Phi-3.
const PHI3_TENSORS: &[NameGroup] = &[EMBED_NORM, LM_HEAD, FFN_NORM, PHI3_FUSED];
/// OLMo 2 (`MODEL_TENSORS[OLMO2]`): no norm before attention or the feed-forward, norms after
/// both, q/k norms over the whole projections.
const OLMO2_TENSORS: &[NameGroup] = &[EMBED_NORM, LM_HEAD, ATTN, QK_NORMS, POST_NORMS, MLP];

/// StarCoder2 (`MODEL_TENSORS[STARCODER2]`): Llama's attention and norms (LayerNorms with
/// biases; the `.bias` rows follow from the same base names), a plain MLP.
const STARCODER2_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN_NORM,
    ATTN,
    FFN_NORM,
    STARCODER2_MLP,
];
/// Command-R (`MODEL_TENSORS[COMMAND_R]`): one norm per block (attention and MLP in parallel),
/// optional per-head q/k norms, no `output` (the head is tied; an `lm_head` is refused, as the
/// reference cannot map it).
const COHERE_TENSORS: &[NameGroup] = &[EMBED_NORM, ATTN_NORM, ATTN, QK_NORMS, MLP];
/// GPT-2.
const GPT2_TENSORS: &[NameGroup] = &[GPT2_NAMES];

/// Seed-OSS (`MODEL_TENSORS[SEED_OSS]`): Llama's names, the norm before the MLP named after
/// attention.
const SEED_OSS_TENSORS: &[NameGroup] = &[EMBED_NORM, LM_HEAD, ATTN_NORM, ATTN, ATTN_POST_NORM, MLP];
/// Arcee (`MODEL_TENSORS[ARCEE]`): Llama's names with an ungated MLP.
/// Apertus' norms (`attention_layernorm`, `feedforward_layernorm`).
const APERTUS_NORMS: NameGroup = &[
    (
        "model.layers.{bid}.attention_layernorm",
        "blk.{bid}.attn_norm",
    ),
    (
        "model.layers.{bid}.feedforward_layernorm",
        "blk.{bid}.ffn_norm",
    ),
];

/// Apertus: q/k norms, an ungated xIELU MLP (its parameters become keys, [`Hook::XieluValues`]).
const APERTUS_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    APERTUS_NORMS,
    ATTN,
    QK_NORMS,
    UP_DOWN_MLP,
];

const ARCEE_TENSORS: &[NameGroup] = &[EMBED_NORM, LM_HEAD, ATTN_NORM, ATTN, FFN_NORM, UP_DOWN_MLP];
/// Exaone 4 (`MODEL_TENSORS[EXAONE4]`): OLMo 2's layout (norms after attention and the MLP
/// only), per-head q/k norms.
const EXAONE4_TENSORS: &[NameGroup] = OLMO2_TENSORS;

/// HunYuan dense (`MODEL_TENSORS[HUNYUAN_DENSE]`): Llama's names with per-head q/k norms.
const HUNYUAN_DENSE_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN_NORM,
    ATTN,
    HUNYUAN_QK_NORMS,
    FFN_NORM,
    MLP,
];

/// GLM-4 (`MODEL_TENSORS[GLM4]`).
/// GLM-4's fused MLP (`gate_up_proj` written fused as `ffn_up`), without Glm4's extra norms.
const GLM_MLP: NameGroup = &[
    ("model.layers.{bid}.mlp.gate_up_proj", "blk.{bid}.ffn_up"),
    ("model.layers.{bid}.mlp.down_proj", "blk.{bid}.ffn_down"),
];

/// GLM-4 in transformers' layout (`GlmForCausalLM`) as `MODEL_TENSORS[CHATGLM]` names it.
const CHATGLM_TENSORS: &[NameGroup] = &[EMBED_NORM, LM_HEAD, ATTN_NORM, ATTN, FFN_NORM, GLM_MLP];

const GLM4_TENSORS: &[NameGroup] = &[EMBED_NORM, LM_HEAD, ATTN_NORM, ATTN, FFN_NORM, GLM4_BLOCK];

/// Ernie 4.5 MoE: leading dense blocks, a router with its correction bias, shared experts and
/// [`ERNIE45_EXPERTS`].
const ERNIE45_MOE_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN_NORM,
    ATTN,
    FFN_NORM,
    MLP,
    ROUTER,
    ERNIE45_EXP_PROBS,
    SHARED_EXPERTS,
];

/// BERT encoders (`conversion/bert.py`, `tensor_mapping.py`).
const BERT_NAMES: NameGroup = &[
    ("embeddings.word_embeddings", "token_embd"),
    ("embeddings.position_embeddings", "position_embd"),
    ("embeddings.token_type_embeddings", "token_types"),
    ("embeddings.LayerNorm", "token_embd_norm"),
    (
        "encoder.layer.{bid}.attention.self.query",
        "blk.{bid}.attn_q",
    ),
    ("encoder.layer.{bid}.attention.self.key", "blk.{bid}.attn_k"),
    (
        "encoder.layer.{bid}.attention.self.value",
        "blk.{bid}.attn_v",
    ),
    (
        "encoder.layer.{bid}.attention.output.dense",
        "blk.{bid}.attn_output",
    ),
    (
        "encoder.layer.{bid}.attention.output.LayerNorm",
        "blk.{bid}.attn_output_norm",
    ),
    ("encoder.layer.{bid}.intermediate.dense", "blk.{bid}.ffn_up"),
    ("encoder.layer.{bid}.output.dense", "blk.{bid}.ffn_down"),
    (
        "encoder.layer.{bid}.output.LayerNorm",
        "blk.{bid}.layer_output_norm",
    ),
];
const BERT_TENSORS: &[NameGroup] = &[BERT_NAMES];

/// ModernBERT (`tensor_mapping.py`, after `model.` is removed): fused `Wqkv` (`attn_qkv`) and
/// `Wi` (`ffn_up`, the GLU's two halves), which llama.cpp's graph reads fused; layer 0 has no
/// `attn_norm` (an identity in the model).
const MODERNBERT_NAMES: NameGroup = &[
    ("embeddings.tok_embeddings", "token_embd"),
    ("embeddings.norm", "token_embd_norm"),
    ("layers.{bid}.attn_norm", "blk.{bid}.attn_norm"),
    ("layers.{bid}.attn.Wqkv", "blk.{bid}.attn_qkv"),
    ("layers.{bid}.attn.Wo", "blk.{bid}.attn_output"),
    ("layers.{bid}.mlp_norm", "blk.{bid}.ffn_norm"),
    ("layers.{bid}.mlp.Wi", "blk.{bid}.ffn_up"),
    ("layers.{bid}.mlp.Wo", "blk.{bid}.ffn_down"),
    ("final_norm", "output_norm"),
];
const MODERNBERT_TENSORS: &[NameGroup] = &[MODERNBERT_NAMES];

/// `BertModel.filter_tensors` (BERT, and what XLM-RoBERTa and ModernBERT call after their own
/// prefix removal): `bert.` removed, `.gamma`/`.beta` renamed, the pooler and the pre-training
/// heads dropped.
const BERT_RULES: NameRules = NameRules {
    strip_prefix: &["bert."],
    suffix_renames: &[(".gamma", ".weight"), (".beta", ".bias")],
    drop: &[
        "embeddings.position_ids",
        "pooler.dense.weight",
        "pooler.dense.bias",
    ],
    drop_prefixes: &["cls.predictions", "cls.seq_relationship"],
    text_of_multimodal: false,
};

/// Every supported architecture.
pub(crate) const ARCHS: &[ArchSpec] = &[
    ArchSpec {
        arch: "llama",
        hf_archs: &["LlamaForCausalLM"],
        tensors: LLAMA_TENSORS,
        experts: None,
        permute_qk: true,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "32000"),
                ("max_position_embeddings", "2048"),
                ("hidden_size", "4096"),
                ("intermediate_size", "11008"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
                ("bos_token_id", "1"),
                ("eos_token_id", "2"),
            ],
            kv_heads: KvHeadsDefault::Heads,
            head_dim: HeadDimDefault::Derived,
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[ExtraKv::VocabSize, ExtraKv::RopeDimensionCount],
        vocab: VocabKind::Llama,
        llama3_rope_freqs: true,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "llama",
        hf_archs: &["MistralForCausalLM"],
        tensors: LLAMA_TENSORS,
        experts: None,
        permute_qk: true,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "32000"),
                ("max_position_embeddings", "131072"),
                ("hidden_size", "4096"),
                ("intermediate_size", "14336"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
                ("bos_token_id", "1"),
                ("eos_token_id", "2"),
            ],
            kv_heads: KvHeadsDefault::Const(8),
            head_dim: HeadDimDefault::Derived,
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[ExtraKv::VocabSize, ExtraKv::RopeDimensionCount],
        vocab: VocabKind::Llama,
        llama3_rope_freqs: true,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "llama",
        hf_archs: &["MixtralForCausalLM"],
        tensors: MIXTRAL_TENSORS,
        experts: Some(&MIXTRAL_EXPERTS),
        permute_qk: true,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "32000"),
                ("max_position_embeddings", "131072"),
                ("hidden_size", "4096"),
                ("intermediate_size", "14336"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
                ("bos_token_id", "1"),
                ("eos_token_id", "2"),
                ("num_local_experts", "8"),
                ("num_experts_per_tok", "2"),
            ],
            kv_heads: KvHeadsDefault::Const(8),
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("1000000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[ExtraKv::VocabSize, ExtraKv::RopeDimensionCount],
        vocab: VocabKind::Llama,
        llama3_rope_freqs: true,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "qwen2",
        hf_archs: &["Qwen2ForCausalLM"],
        tensors: LLAMA_TENSORS,
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "151936"),
                ("max_position_embeddings", "32768"),
                ("hidden_size", "4096"),
                ("intermediate_size", "22016"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
            ],
            kv_heads: KvHeadsDefault::Const(32),
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[ExtraKv::Pooling],
        vocab: VocabKind::SpmElseGpt2,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "qwen2moe",
        hf_archs: &["Qwen2MoeForCausalLM"],
        tensors: QWEN2MOE_TENSORS,
        experts: Some(&QWEN2MOE_EXPERTS),
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "151936"),
                ("max_position_embeddings", "32768"),
                ("hidden_size", "2048"),
                ("intermediate_size", "5632"),
                ("num_hidden_layers", "24"),
                ("num_attention_heads", "16"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
                ("num_experts", "60"),
                ("num_experts_per_tok", "4"),
                ("moe_intermediate_size", "1408"),
                ("shared_expert_intermediate_size", "5632"),
            ],
            kv_heads: KvHeadsDefault::Const(16),
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[
            ExtraKv::ExpertFeedForwardLength,
            ExtraKv::ExpertSharedFeedForwardLength,
        ],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: FUSED_EXPERT_SPLITS,
        hooks: &[],
    },
    ArchSpec {
        arch: "qwen3",
        hf_archs: &["Qwen3ForCausalLM"],
        tensors: QWEN3_TENSORS,
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "151936"),
                ("max_position_embeddings", "32768"),
                ("hidden_size", "4096"),
                ("intermediate_size", "22016"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
            ],
            kv_heads: KvHeadsDefault::Const(32),
            head_dim: HeadDimDefault::Const(128),
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[ExtraKv::Pooling],
        vocab: VocabKind::SpmElseGpt2,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "qwen3moe",
        hf_archs: &["Qwen3MoeForCausalLM"],
        tensors: QWEN3MOE_TENSORS,
        experts: Some(&QWEN3MOE_EXPERTS),
        permute_qk: false,
        config: ConfigDefaults {
            // Qwen3MoeConfig maps `num_experts` onto `num_local_experts` (attribute_map): the
            // default sits under the alias so that either spelling in config.json wins over it.
            values: &[
                ("vocab_size", "151936"),
                ("max_position_embeddings", "32768"),
                ("hidden_size", "2048"),
                ("intermediate_size", "6144"),
                ("num_hidden_layers", "24"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
                ("num_experts", "128"),
                ("num_experts_per_tok", "8"),
                ("moe_intermediate_size", "768"),
            ],
            kv_heads: KvHeadsDefault::Const(4),
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        // Qwen2MoeModel.set_gguf_parameters (Qwen3-MoE has no shared expert: the second key is
        // written only when config.json has one).
        extra_kv: &[
            ExtraKv::ExpertFeedForwardLength,
            ExtraKv::ExpertSharedFeedForwardLength,
        ],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: FUSED_EXPERT_SPLITS,
        hooks: &[],
    },
    // Qwen3-Next (`Qwen3NextModel`: a Qwen2-MoE with gated delta-net layers and an MTP block).
    ArchSpec {
        arch: "qwen3next",
        hf_archs: &["Qwen3NextForCausalLM"],
        tensors: QWEN3NEXT_TENSORS,
        experts: Some(&QWEN2MOE_EXPERTS),
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "151936"),
                ("max_position_embeddings", "32768"),
                ("hidden_size", "2048"),
                ("intermediate_size", "5632"),
                ("num_hidden_layers", "48"),
                ("num_attention_heads", "16"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
                ("linear_conv_kernel_dim", "4"),
                ("linear_key_head_dim", "128"),
                ("linear_value_head_dim", "128"),
                ("linear_num_key_heads", "16"),
                ("linear_num_value_heads", "32"),
                ("num_experts", "512"),
                ("num_experts_per_tok", "10"),
                ("moe_intermediate_size", "512"),
                ("shared_expert_intermediate_size", "512"),
            ],
            kv_heads: KvHeadsDefault::Const(2),
            head_dim: HeadDimDefault::Const(256),
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[
            ExtraKv::ExpertFeedForwardLength,
            ExtraKv::ExpertSharedFeedForwardLength,
            ExtraKv::NextnFromBlocks,
            ExtraKv::QwenLinearAttention,
        ],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        // `Qwen3NextModel.modify_tensors`: `dt_bias` → `dt_proj.bias`.
        names: NameRules {
            suffix_renames: &[("dt_bias", "dt_proj.bias")],
            ..NO_RULES
        },
        kv_layout: KvLayout::Common,
        // `1 + w` of every norm but the delta-net's: the hook's.
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: QWEN3NEXT_SPLITS,
        hooks: &[Hook::QwenLinearAttention],
    },
    // Qwen3.5 dense and MoE text (`Qwen3_5TextModel`, `Qwen3_5MoeTextModel`: Qwen3-Next's
    // converter with the V-head reorder and default M-RoPE sections), also the text of the
    // vision-language releases (vision tower dropped, `language_model.` removed).
    ArchSpec {
        arch: "qwen35",
        hf_archs: &["Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"],
        tensors: QWEN35_TENSORS,
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "248320"),
                ("max_position_embeddings", "32768"),
                ("hidden_size", "4096"),
                ("intermediate_size", "12288"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "16"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
                ("linear_conv_kernel_dim", "4"),
                ("linear_key_head_dim", "128"),
                ("linear_value_head_dim", "128"),
                ("linear_num_key_heads", "16"),
                ("linear_num_value_heads", "32"),
            ],
            kv_heads: KvHeadsDefault::Const(4),
            head_dim: HeadDimDefault::Const(256),
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: QWEN35_KVS,
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        names: NameRules {
            suffix_renames: &[("dt_bias", "dt_proj.bias")],
            text_of_multimodal: true,
            ..NO_RULES
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: QWEN35_SPLITS,
        hooks: &[Hook::QwenLinearAttention, Hook::LinearAttentionVReorder],
    },
    ArchSpec {
        arch: "qwen35moe",
        hf_archs: &[
            "Qwen3_5MoeForCausalLM",
            "Qwen3_5MoeForConditionalGeneration",
        ],
        tensors: QWEN35MOE_TENSORS,
        experts: Some(&QWEN2MOE_EXPERTS),
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "248320"),
                ("max_position_embeddings", "32768"),
                ("hidden_size", "2048"),
                ("num_hidden_layers", "40"),
                ("num_attention_heads", "16"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
                ("linear_conv_kernel_dim", "4"),
                ("linear_key_head_dim", "128"),
                ("linear_value_head_dim", "128"),
                ("linear_num_key_heads", "16"),
                ("linear_num_value_heads", "32"),
                ("num_experts", "256"),
                ("num_experts_per_tok", "8"),
                ("moe_intermediate_size", "512"),
                ("shared_expert_intermediate_size", "512"),
            ],
            kv_heads: KvHeadsDefault::Const(2),
            head_dim: HeadDimDefault::Const(256),
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: QWEN35_KVS,
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        names: NameRules {
            suffix_renames: &[("dt_bias", "dt_proj.bias")],
            text_of_multimodal: true,
            ..NO_RULES
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: QWEN35_SPLITS,
        hooks: &[Hook::QwenLinearAttention, Hook::LinearAttentionVReorder],
    },
    ArchSpec {
        arch: "olmoe",
        hf_archs: &["OlmoeForCausalLM"],
        tensors: OLMOE_TENSORS,
        experts: Some(&OLMOE_EXPERTS),
        // OlmoeModel uses TextModel.modify_tensors: no permutation (OlmoModel's is not inherited).
        permute_qk: false,
        config: ConfigDefaults {
            // OlmoeConfig maps `num_local_experts` onto `num_experts` (attribute_map).
            values: &[
                ("vocab_size", "50304"),
                ("max_position_embeddings", "4096"),
                ("hidden_size", "2048"),
                ("intermediate_size", "2048"),
                ("num_hidden_layers", "16"),
                ("num_attention_heads", "16"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
                ("eos_token_id", "50279"),
                ("pad_token_id", "1"),
                ("num_experts", "64"),
                ("num_experts_per_tok", "8"),
            ],
            kv_heads: KvHeadsDefault::Heads,
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[ExtraKv::RmsEpsilon("1e-5")],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "bert",
        hf_archs: &["BertModel"],
        tensors: BERT_TENSORS,
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "30522"),
                ("max_position_embeddings", "512"),
                ("hidden_size", "768"),
                ("intermediate_size", "3072"),
                ("num_hidden_layers", "12"),
                ("num_attention_heads", "12"),
                ("layer_norm_eps", "1e-12"),
                ("type_vocab_size", "2"),
                ("pad_token_id", "0"),
                ("tie_word_embeddings", "true"),
            ],
            kv_heads: KvHeadsDefault::Absent,
            head_dim: HeadDimDefault::Absent,
            rope_theta: None,
            local_rope_theta: None,
        },
        extra_kv: &[ExtraKv::NonCausal, ExtraKv::Pooling],
        vocab: VocabKind::Bert,
        llama3_rope_freqs: false,
        names: BERT_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "gemma2",
        hf_archs: &["Gemma2ForCausalLM"],
        tensors: GEMMA2_TENSORS,
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "256000"),
                ("max_position_embeddings", "8192"),
                ("hidden_size", "2304"),
                ("intermediate_size", "9216"),
                ("num_hidden_layers", "26"),
                ("num_attention_heads", "8"),
                ("rms_norm_eps", "1e-06"),
                ("attn_logit_softcapping", "50.0"),
                ("final_logit_softcapping", "30.0"),
                ("sliding_window", "4096"),
                ("tie_word_embeddings", "true"),
                ("bos_token_id", "2"),
                ("eos_token_id", "1"),
                ("pad_token_id", "0"),
            ],
            kv_heads: KvHeadsDefault::Const(4),
            head_dim: HeadDimDefault::Const(256),
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[],
        vocab: VocabKind::SpmNoSpacePrefix,
        llama3_rope_freqs: false,
        // `filter_tensors`: an lm_head (AutoAWQ adds one) is never used by llama.cpp.
        names: NameRules {
            strip_prefix: &[],
            suffix_renames: &[],
            drop: &["lm_head.weight"],
            drop_prefixes: &[],
            text_of_multimodal: false,
        },
        kv_layout: KvLayout::Gemma2,
        norm_plus_one: true,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "gemma3",
        hf_archs: &["Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"],
        tensors: GEMMA3_TENSORS,
        experts: None,
        permute_qk: false,
        // Gemma3TextConfig's defaults (a ForConditionalGeneration config's `text_config` is
        // merged over its top level first).
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "262208"),
                ("max_position_embeddings", "131072"),
                ("hidden_size", "2304"),
                ("intermediate_size", "9216"),
                ("num_hidden_layers", "26"),
                ("num_attention_heads", "8"),
                ("rms_norm_eps", "1e-06"),
                ("sliding_window", "4096"),
                ("tie_word_embeddings", "true"),
                ("bos_token_id", "2"),
                ("eos_token_id", "1"),
                ("pad_token_id", "0"),
            ],
            kv_heads: KvHeadsDefault::Const(4),
            head_dim: HeadDimDefault::Const(256),
            rope_theta: Some("1000000.0"),
            local_rope_theta: Some("10000.0"),
        },
        extra_kv: &[ExtraKv::FinalLogitSoftcapping, ExtraKv::SlidingWindow],
        vocab: VocabKind::SpmNoSpacePrefix,
        llama3_rope_freqs: false,
        names: NameRules {
            strip_prefix: &[],
            suffix_renames: &[],
            drop: &[],
            drop_prefixes: &[],
            text_of_multimodal: true,
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: true,
        embd_rows_to_vocab: true,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "gemma3n",
        hf_archs: &["Gemma3nForCausalLM", "Gemma3nForConditionalGeneration"],
        tensors: GEMMA3N_TENSORS,
        experts: None,
        permute_qk: false,
        // Gemma3nTextConfig's defaults (a ForConditionalGeneration config's `text_config` is
        // merged over its top level first); `layer_types`, `intermediate_size` per layer and
        // `activation_sparsity_pattern` are completed by crate::gemma3n.
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "262400"),
                ("vocab_size_per_layer_input", "262144"),
                ("max_position_embeddings", "32768"),
                ("hidden_size", "2048"),
                ("intermediate_size", "16384"),
                ("num_hidden_layers", "35"),
                ("num_attention_heads", "8"),
                ("rms_norm_eps", "1e-06"),
                ("sliding_window", "512"),
                ("final_logit_softcapping", "30.0"),
                ("hidden_size_per_layer_input", "256"),
                ("altup_active_idx", "0"),
                ("altup_num_inputs", "4"),
                ("num_kv_shared_layers", "15"),
                ("laurel_rank", "64"),
                ("tie_word_embeddings", "true"),
                ("bos_token_id", "2"),
                ("eos_token_id", "1"),
                ("pad_token_id", "0"),
            ],
            kv_heads: KvHeadsDefault::Const(2),
            head_dim: HeadDimDefault::Const(256),
            rope_theta: Some("1000000.0"),
            local_rope_theta: Some("10000.0"),
        },
        extra_kv: &[
            ExtraKv::FinalLogitSoftcapping,
            ExtraKv::SlidingWindow,
            ExtraKv::U32("altup.active_idx", "altup_active_idx"),
            ExtraKv::U32("altup.num_inputs", "altup_num_inputs"),
            ExtraKv::U32(
                "embedding_length_per_layer_input",
                "hidden_size_per_layer_input",
            ),
            ExtraKv::U32("attention.shared_kv_layers", "num_kv_shared_layers"),
            ExtraKv::ActivationSparsityScale,
            ExtraKv::SlidingWindowPatternOfLayerTypes,
        ],
        vocab: VocabKind::SpmNoSpacePrefix,
        llama3_rope_freqs: false,
        names: NameRules {
            strip_prefix: &[],
            suffix_renames: &[("_scale", "_scale.weight")],
            drop: &[],
            drop_prefixes: &[],
            text_of_multimodal: true,
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[Hook::Gemma3n],
    },
    ArchSpec {
        arch: "phi3",
        hf_archs: &["Phi3ForCausalLM"],
        tensors: PHI3_TENSORS,
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "32064"),
                ("max_position_embeddings", "4096"),
                ("original_max_position_embeddings", "4096"),
                ("hidden_size", "3072"),
                ("intermediate_size", "8192"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
                ("bos_token_id", "1"),
                ("eos_token_id", "32000"),
                ("pad_token_id", "32000"),
            ],
            kv_heads: KvHeadsDefault::Heads,
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[],
        vocab: VocabKind::SpmPhi3,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Phi3,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "phimoe",
        hf_archs: &["PhiMoEForCausalLM"],
        tensors: MIXTRAL_TENSORS,
        experts: Some(&MIXTRAL_EXPERTS),
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "32064"),
                ("max_position_embeddings", "131072"),
                ("hidden_size", "4096"),
                ("intermediate_size", "6400"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
                ("bos_token_id", "1"),
                ("eos_token_id", "2"),
                ("num_local_experts", "16"),
                ("num_experts_per_tok", "2"),
            ],
            kv_heads: KvHeadsDefault::Const(8),
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("1000000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[],
        vocab: VocabKind::SpmPhi3,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Phi3,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "gemma",
        hf_archs: &["GemmaForCausalLM"],
        tensors: GEMMA_TENSORS,
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "256000"),
                ("max_position_embeddings", "8192"),
                ("hidden_size", "3072"),
                ("intermediate_size", "24576"),
                ("num_hidden_layers", "28"),
                ("num_attention_heads", "16"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "true"),
                ("bos_token_id", "2"),
                ("eos_token_id", "1"),
                ("pad_token_id", "0"),
            ],
            kv_heads: KvHeadsDefault::Const(16),
            head_dim: HeadDimDefault::Const(256),
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[],
        vocab: VocabKind::SpmGemma,
        llama3_rope_freqs: false,
        names: NameRules {
            strip_prefix: &[],
            suffix_renames: &[],
            drop: &["lm_head.weight"],
            drop_prefixes: &[],
            text_of_multimodal: false,
        },
        kv_layout: KvLayout::Gemma,
        norm_plus_one: true,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "starcoder2",
        hf_archs: &["Starcoder2ForCausalLM"],
        tensors: STARCODER2_TENSORS,
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "49152"),
                ("max_position_embeddings", "4096"),
                ("hidden_size", "3072"),
                ("intermediate_size", "12288"),
                ("num_hidden_layers", "30"),
                ("num_attention_heads", "24"),
                ("norm_epsilon", "1e-05"),
                ("tie_word_embeddings", "true"),
                ("bos_token_id", "50256"),
                ("eos_token_id", "50256"),
            ],
            kv_heads: KvHeadsDefault::Const(2),
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "command-r",
        hf_archs: &["CohereForCausalLM"],
        tensors: COHERE_TENSORS,
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "256000"),
                ("max_position_embeddings", "8192"),
                ("hidden_size", "8192"),
                ("intermediate_size", "22528"),
                ("num_hidden_layers", "40"),
                ("num_attention_heads", "64"),
                ("layer_norm_eps", "1e-05"),
                ("logit_scale", "0.0625"),
                ("tie_word_embeddings", "true"),
                ("bos_token_id", "5"),
                ("eos_token_id", "255001"),
                ("pad_token_id", "0"),
            ],
            kv_heads: KvHeadsDefault::Heads,
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("500000.0"),
            local_rope_theta: None,
        },
        // CommandR2Model: context from `model_max_length` first; after the common keys,
        // `logit_scale` and rope scaling type "none".
        extra_kv: &[
            ExtraKv::ContextLength(&["model_max_length", "max_position_embeddings"]),
            ExtraKv::LogitScale,
            ExtraKv::RopeScalingNone,
        ],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "gpt2",
        hf_archs: &["GPT2LMHeadModel"],
        tensors: GPT2_TENSORS,
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "50257"),
                ("n_positions", "1024"),
                ("n_embd", "768"),
                ("n_layer", "12"),
                ("n_head", "12"),
                ("layer_norm_epsilon", "1e-05"),
                ("tie_word_embeddings", "true"),
                ("bos_token_id", "50256"),
                ("eos_token_id", "50256"),
            ],
            kv_heads: KvHeadsDefault::Absent,
            head_dim: HeadDimDefault::Absent,
            rope_theta: None,
            local_rope_theta: None,
        },
        extra_kv: &[],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        // `attn.bias` / `attn.masked_bias` (causal-mask buffers of older releases) have no GGUF
        // name: the reference fails on them ("Can not map tensor"), and so is the release refused.
        names: NameRules {
            strip_prefix: &["transformer."],
            suffix_renames: &[],
            drop: &[],
            drop_prefixes: &[],
            text_of_multimodal: false,
        },
        kv_layout: KvLayout::Gpt2,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        // GPT2Model.modify_tensors: Conv1D weights are `[in, out]`.
        transposed: &[".c_attn.weight", ".c_proj.weight", ".c_fc.weight"],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "granite",
        hf_archs: &["GraniteForCausalLM"],
        tensors: LLAMA_TENSORS,
        experts: None,
        // GraniteModel is a LlamaModel: q/k permuted.
        permute_qk: true,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "32000"),
                ("max_position_embeddings", "2048"),
                ("hidden_size", "4096"),
                ("intermediate_size", "11008"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
                ("bos_token_id", "1"),
                ("eos_token_id", "2"),
                ("attention_multiplier", "1.0"),
                ("embedding_multiplier", "1.0"),
                ("residual_multiplier", "1.0"),
                ("logits_scaling", "1.0"),
            ],
            kv_heads: KvHeadsDefault::Heads,
            head_dim: HeadDimDefault::Ignored,
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        // LlamaModel's keys, then GraniteModel's multipliers under their `_scale` names.
        extra_kv: &[
            ExtraKv::VocabSize,
            ExtraKv::RopeDimensionCount,
            ExtraKv::Scale("attention_multiplier", "attention.scale"),
            ExtraKv::Scale("embedding_multiplier", "embedding_scale"),
            ExtraKv::Scale("residual_multiplier", "residual_scale"),
            ExtraKv::Scale("logits_scaling", "logit_scale"),
        ],
        vocab: VocabKind::Llama,
        // `MODEL_TENSORS[GRANITE]` has no `rope_freqs`: the reference cannot write llama3 rope.
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "olmo2",
        hf_archs: &["Olmo2ForCausalLM"],
        tensors: OLMO2_TENSORS,
        experts: None,
        // Olmo2Model is a TextModel (OlmoModel's permutation is not inherited).
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "50304"),
                ("max_position_embeddings", "2048"),
                ("hidden_size", "4096"),
                ("intermediate_size", "11008"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
                ("eos_token_id", "50279"),
                ("pad_token_id", "1"),
            ],
            kv_heads: KvHeadsDefault::Heads,
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[ExtraKv::SlidingWindowPattern],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "smollm3",
        hf_archs: &["SmolLM3ForCausalLM"],
        tensors: LLAMA_TENSORS,
        experts: None,
        // SmolLM3Model is a LlamaModel under another arch name.
        permute_qk: true,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "128256"),
                ("max_position_embeddings", "32768"),
                ("hidden_size", "2048"),
                ("intermediate_size", "11008"),
                ("num_hidden_layers", "36"),
                ("num_attention_heads", "16"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "true"),
                ("bos_token_id", "128000"),
                ("eos_token_id", "128001"),
                ("pad_token_id", "128004"),
            ],
            kv_heads: KvHeadsDefault::Const(4),
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("2000000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[
            ExtraKv::VocabSize,
            ExtraKv::RopeDimensionCount,
            ExtraKv::NoRopeEvery(4),
        ],
        vocab: VocabKind::Llama,
        llama3_rope_freqs: true,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "deepseek2",
        hf_archs: &["DeepseekV2ForCausalLM"],
        tensors: DEEPSEEK2_TENSORS,
        experts: Some(&DEEPSEEK2_EXPERTS),
        permute_qk: false,
        // DeepseekV2Config's defaults (`q_lora_rank` is not filled: V2-Lite's config says null).
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "102400"),
                ("max_position_embeddings", "2048"),
                ("hidden_size", "4096"),
                ("intermediate_size", "11008"),
                ("moe_intermediate_size", "1407"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("n_shared_experts", "2"),
                ("n_routed_experts", "64"),
                ("routed_scaling_factor", "1.0"),
                ("kv_lora_rank", "512"),
                ("qk_rope_head_dim", "64"),
                ("v_head_dim", "128"),
                ("qk_nope_head_dim", "128"),
                ("norm_topk_prob", "false"),
                ("first_k_dense_replace", "0"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
                ("bos_token_id", "1"),
                ("eos_token_id", "2"),
            ],
            kv_heads: KvHeadsDefault::Heads,
            head_dim: HeadDimDefault::Key("qk_rope_head_dim"),
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        // DeepseekV2Model.set_gguf_parameters after the common keys.
        extra_kv: &[
            ExtraKv::HeadCountKv(1),
            ExtraKv::LeadingDenseBlockCount,
            ExtraKv::VocabSize,
            ExtraKv::QLoraRank,
            ExtraKv::MlaLengths,
            ExtraKv::ExpertFeedForwardLength,
            ExtraKv::ExpertSharedCount,
            ExtraKv::ExpertWeightsScale,
            ExtraKv::ExpertWeightsNorm,
            ExtraKv::RopeDimensionCount,
            ExtraKv::YarnLogMultiplier,
        ],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        splits: MLA_SPLITS,
        transposed: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "gpt-oss",
        hf_archs: &["GptOssForCausalLM"],
        tensors: GPTOSS_TENSORS,
        experts: None,
        permute_qk: false,
        // GptOssConfig's defaults.
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "201088"),
                ("max_position_embeddings", "131072"),
                ("hidden_size", "2880"),
                ("intermediate_size", "2880"),
                ("num_hidden_layers", "36"),
                ("num_attention_heads", "64"),
                ("num_local_experts", "128"),
                ("num_experts_per_tok", "4"),
                ("sliding_window", "128"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
            ],
            kv_heads: KvHeadsDefault::Const(8),
            head_dim: HeadDimDefault::Const(64),
            rope_theta: Some("150000.0"),
            local_rope_theta: None,
        },
        // GptOssModel.set_gguf_parameters after the common keys.
        extra_kv: &[
            ExtraKv::SlidingWindow,
            ExtraKv::ExpertFeedForwardLengthOf("intermediate_size"),
        ],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        // `filter_tensors` appends `.weight` to the sinks; `modify_tensors` renames the down bias.
        names: NameRules {
            strip_prefix: &[],
            suffix_renames: &[
                (".sinks", ".sinks.weight"),
                ("down_proj_bias", "down_proj.bias"),
            ],
            drop: &[],
            drop_prefixes: &[],
            text_of_multimodal: false,
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        splits: GPTOSS_SPLITS,
        transposed: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "bert",
        hf_archs: &["XLMRobertaModel"],
        tensors: BERT_TENSORS,
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "30522"),
                ("max_position_embeddings", "512"),
                ("hidden_size", "768"),
                ("intermediate_size", "3072"),
                ("num_hidden_layers", "12"),
                ("num_attention_heads", "12"),
                ("layer_norm_eps", "1e-12"),
                ("type_vocab_size", "2"),
                ("pad_token_id", "1"),
                ("bos_token_id", "0"),
                ("eos_token_id", "2"),
                ("tie_word_embeddings", "true"),
            ],
            kv_heads: KvHeadsDefault::Absent,
            head_dim: HeadDimDefault::Absent,
            rope_theta: None,
            local_rope_theta: None,
        },
        extra_kv: &[ExtraKv::NonCausal, ExtraKv::Pooling],
        vocab: VocabKind::XlmRoberta,
        llama3_rope_freqs: false,
        // `XLMRobertaModel.filter_tensors`: `roberta.` removed (rerankers), then BERT's rules.
        names: NameRules {
            strip_prefix: &["roberta.", "bert."],
            ..BERT_RULES
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        hooks: &[Hook::PositionOffsetFromPad],
        transposed: &[],
        splits: &[],
    },
    ArchSpec {
        arch: "modern-bert",
        hf_archs: &["ModernBertModel"],
        tensors: MODERNBERT_TENSORS,
        experts: None,
        permute_qk: false,
        // ModernBertConfig's (transformers 5 keeps rope parameters per layer type).
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "50368"),
                ("max_position_embeddings", "8192"),
                ("hidden_size", "768"),
                ("intermediate_size", "1152"),
                ("num_hidden_layers", "22"),
                ("num_attention_heads", "12"),
                ("norm_eps", "1e-05"),
                ("local_attention", "128"),
                ("hidden_activation", "\"gelu\""),
                ("classifier_pooling", "\"cls\""),
                ("pad_token_id", "50283"),
                ("eos_token_id", "50282"),
                ("bos_token_id", "50281"),
                ("tie_word_embeddings", "true"),
            ],
            kv_heads: KvHeadsDefault::Absent,
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("160000.0"),
            local_rope_theta: Some("10000.0"),
        },
        extra_kv: &[
            ExtraKv::NonCausal,
            ExtraKv::Pooling,
            ExtraKv::LocalAttention,
            ExtraKv::RopeScalingNone,
            ExtraKv::VocabSize,
            ExtraKv::HiddenActivation,
        ],
        vocab: VocabKind::Gpt2AddBosEosSep,
        llama3_rope_freqs: false,
        // `ModernBertModel.filter_tensors`: `model.` removed, then BERT's rules.
        names: NameRules {
            strip_prefix: &["model.", "bert."],
            ..BERT_RULES
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        hooks: &[],
        transposed: &[],
        splits: &[],
    },
    ArchSpec {
        arch: "seed_oss",
        hf_archs: &["SeedOssForCausalLM"],
        tensors: SEED_OSS_TENSORS,
        experts: None,
        // SeedOssModel is a TextModel: no permutation.
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "155136"),
                ("max_position_embeddings", "524288"),
                ("hidden_size", "4096"),
                ("intermediate_size", "27648"),
                ("num_hidden_layers", "64"),
                ("num_attention_heads", "80"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
                ("pad_token_id", "1"),
                ("bos_token_id", "0"),
                ("eos_token_id", "2"),
            ],
            kv_heads: KvHeadsDefault::Const(8),
            head_dim: HeadDimDefault::Const(128),
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "arcee",
        hf_archs: &["ArceeForCausalLM"],
        tensors: ARCEE_TENSORS,
        experts: None,
        // ArceeModel is a LlamaModel: q/k permuted.
        permute_qk: true,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "32000"),
                ("max_position_embeddings", "4096"),
                ("hidden_size", "2560"),
                ("intermediate_size", "18432"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
                ("bos_token_id", "128000"),
                ("eos_token_id", "128001"),
            ],
            kv_heads: KvHeadsDefault::Heads,
            head_dim: HeadDimDefault::Derived,
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        // LlamaModel's keys, then `_try_set_pooling_type`.
        extra_kv: &[
            ExtraKv::VocabSize,
            ExtraKv::RopeDimensionCount,
            ExtraKv::Pooling,
        ],
        vocab: VocabKind::Llama,
        // `MODEL_TENSORS[ARCEE]` has `rope_freqs`: LlamaModel generates it for llama3 rope.
        llama3_rope_freqs: true,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "apertus",
        hf_archs: &["ApertusForCausalLM"],
        tensors: APERTUS_TENSORS,
        experts: None,
        // ApertusModel is a LlamaModel with `undo_permute = False`.
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "131072"),
                ("max_position_embeddings", "65536"),
                ("hidden_size", "4096"),
                ("intermediate_size", "14336"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
                ("bos_token_id", "1"),
                ("eos_token_id", "2"),
                ("pad_token_id", "3"),
            ],
            kv_heads: KvHeadsDefault::Heads,
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("12000000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[ExtraKv::VocabSize, ExtraKv::RopeDimensionCount],
        vocab: VocabKind::Llama,
        llama3_rope_freqs: true,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[Hook::XieluValues, Hook::CheckShapes],
    },
    ArchSpec {
        arch: "exaone4",
        hf_archs: &["Exaone4ForCausalLM"],
        tensors: EXAONE4_TENSORS,
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "102400"),
                ("max_position_embeddings", "2048"),
                ("hidden_size", "4096"),
                ("intermediate_size", "16384"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
                ("bos_token_id", "0"),
                ("eos_token_id", "2"),
                ("sliding_window", "4096"),
                ("sliding_window_pattern", "4"),
            ],
            kv_heads: KvHeadsDefault::Const(32),
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[ExtraKv::VocabSize, ExtraKv::SlidingWindowLayers],
        vocab: VocabKind::Gpt2,
        // Exaone4Model generates `rope_freqs` with its own defaults (factor 16): not done here,
        // so llama3 rope is refused.
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "mistral3",
        hf_archs: &["Ministral3ForCausalLM"],
        tensors: LLAMA_TENSORS,
        experts: None,
        // Mistral3Model.Ministral3Model is a LlamaModel: q/k permuted.
        permute_qk: true,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "131072"),
                ("max_position_embeddings", "262144"),
                ("hidden_size", "4096"),
                ("intermediate_size", "14336"),
                ("num_hidden_layers", "34"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
                ("pad_token_id", "11"),
                ("bos_token_id", "1"),
                ("eos_token_id", "2"),
            ],
            kv_heads: KvHeadsDefault::Const(8),
            head_dim: HeadDimDefault::Const(128),
            rope_theta: Some("1000000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[
            ExtraKv::VocabSize,
            ExtraKv::RopeDimensionCount,
            ExtraKv::Ministral3Yarn,
        ],
        vocab: VocabKind::Llama,
        llama3_rope_freqs: true,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "mistral3",
        hf_archs: &["Mistral3ForConditionalGeneration"],
        tensors: LLAMA_TENSORS,
        experts: None,
        permute_qk: true,
        // Mistral3Config's text defaults (MistralConfig as Mistral3Config fills it).
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "131072"),
                ("max_position_embeddings", "131072"),
                ("hidden_size", "5120"),
                ("intermediate_size", "32768"),
                ("num_hidden_layers", "40"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
                ("bos_token_id", "1"),
                ("eos_token_id", "2"),
            ],
            kv_heads: KvHeadsDefault::Const(8),
            head_dim: HeadDimDefault::Const(128),
            rope_theta: Some("1000000000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[
            ExtraKv::VocabSize,
            ExtraKv::RopeDimensionCount,
            ExtraKv::Ministral3Yarn,
        ],
        vocab: VocabKind::Llama,
        llama3_rope_freqs: true,
        // The vision tower and projector are the mmproj's.
        names: NameRules {
            text_of_multimodal: true,
            ..NO_RULES
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "qwen2vl",
        hf_archs: &["Qwen2_5_VLForConditionalGeneration"],
        tensors: LLAMA_TENSORS,
        experts: None,
        // Qwen2VLModel is a TextModel.
        permute_qk: false,
        // Qwen2_5_VLTextConfig's defaults.
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "152064"),
                ("max_position_embeddings", "32768"),
                ("hidden_size", "8192"),
                ("intermediate_size", "29568"),
                ("num_hidden_layers", "80"),
                ("num_attention_heads", "64"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
                ("bos_token_id", "151643"),
                ("eos_token_id", "151645"),
            ],
            kv_heads: KvHeadsDefault::Const(8),
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("1000000.0"),
            local_rope_theta: None,
        },
        // `rope.dimension_sections` (M-RoPE) is a common key.
        extra_kv: &[],
        vocab: VocabKind::SpmElseGpt2,
        llama3_rope_freqs: false,
        names: NameRules {
            text_of_multimodal: true,
            ..NO_RULES
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "ernie4_5",
        hf_archs: &["Ernie4_5ForCausalLM", "Ernie4_5_ForCausalLM"],
        tensors: LLAMA_TENSORS,
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "103424"),
                ("max_position_embeddings", "131072"),
                ("hidden_size", "1024"),
                ("intermediate_size", "3072"),
                ("num_hidden_layers", "18"),
                ("num_attention_heads", "16"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "true"),
                ("pad_token_id", "0"),
                ("bos_token_id", "1"),
                ("eos_token_id", "2"),
            ],
            kv_heads: KvHeadsDefault::Const(2),
            head_dim: HeadDimDefault::Const(128),
            rope_theta: Some("500000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[],
        vocab: VocabKind::SpmThenSpacePrefix,
        llama3_rope_freqs: false,
        // transformers' names; a release with `ernie.` names or fused `qkv_proj` /
        // `up_gate_proj` (the reference renames and splits them) is refused by the name map.
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "qwen3vl",
        hf_archs: &["Qwen3VLForConditionalGeneration"],
        tensors: QWEN3_TENSORS,
        experts: None,
        // Qwen3VLTextModel is a Qwen3Model.
        permute_qk: false,
        // Qwen3VLTextConfig's defaults.
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "151936"),
                ("max_position_embeddings", "128000"),
                ("hidden_size", "4096"),
                ("intermediate_size", "22016"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
            ],
            kv_heads: KvHeadsDefault::Const(32),
            head_dim: HeadDimDefault::Const(128),
            rope_theta: Some("500000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[ExtraKv::Pooling, ExtraKv::DeepstackLayers],
        vocab: VocabKind::SpmElseGpt2,
        llama3_rope_freqs: false,
        names: NameRules {
            text_of_multimodal: true,
            ..NO_RULES
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "hunyuan-dense",
        hf_archs: &["HunYuanDenseV1ForCausalLM"],
        tensors: HUNYUAN_DENSE_TENSORS,
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "290943"),
                ("max_position_embeddings", "2048"),
                ("hidden_size", "4096"),
                ("intermediate_size", "11008"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
                ("pad_token_id", "0"),
                ("bos_token_id", "1"),
                ("eos_token_id", "2"),
                ("eod_token_id", "3"),
            ],
            kv_heads: KvHeadsDefault::Heads,
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[ExtraKv::HunYuanNtkAlpha],
        vocab: VocabKind::Gpt2HunYuan,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "chatglm",
        hf_archs: &["GlmForCausalLM"],
        tensors: CHATGLM_TENSORS,
        experts: None,
        // ChatGLMModel is a TextModel: no permutation.
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "151552"),
                ("max_position_embeddings", "131072"),
                ("hidden_size", "4096"),
                ("intermediate_size", "13696"),
                ("num_hidden_layers", "40"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1.5625e-07"),
                ("tie_word_embeddings", "false"),
                ("pad_token_id", "151329"),
                ("eos_token_id", "[151329, 151336, 151338]"),
            ],
            kv_heads: KvHeadsDefault::Const(2),
            head_dim: HeadDimDefault::Const(128),
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[],
        vocab: VocabKind::Gpt2ChatGlm,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::ChatGlm,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[Hook::CheckShapes],
    },
    ArchSpec {
        arch: "glm4",
        hf_archs: &["Glm4ForCausalLM"],
        tensors: GLM4_TENSORS,
        experts: None,
        // Glm4Model is a TextModel; its M-RoPE reordering is for Glm4v only.
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "151552"),
                ("max_position_embeddings", "131072"),
                ("hidden_size", "4096"),
                ("intermediate_size", "13696"),
                ("num_hidden_layers", "40"),
                ("num_attention_heads", "32"),
                ("rms_norm_eps", "1.5625e-07"),
                ("tie_word_embeddings", "false"),
                ("pad_token_id", "151329"),
                ("eos_token_id", "[151329, 151336, 151338]"),
            ],
            kv_heads: KvHeadsDefault::Const(2),
            head_dim: HeadDimDefault::Const(128),
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[ExtraKv::RopeDimensionCountPartial],
        vocab: VocabKind::Gpt2Glm4,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    ArchSpec {
        arch: "lfm2",
        hf_archs: &["Lfm2ForCausalLM", "LFM2ForCausalLM"],
        tensors: &[LFM2_NAMES],
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "65536"),
                ("max_position_embeddings", "128000"),
                ("hidden_size", "2560"),
                ("intermediate_size", "12288"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("norm_eps", "1e-05"),
                ("tie_word_embeddings", "true"),
                ("pad_token_id", "0"),
                ("bos_token_id", "1"),
                ("eos_token_id", "2"),
                ("conv_L_cache", "3"),
                ("block_multiple_of", "256"),
                ("block_ffn_dim_multiplier", "1.0"),
                ("block_auto_adjust_ff_dim", "true"),
            ],
            kv_heads: KvHeadsDefault::Const(8),
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("1000000.0"),
            local_rope_theta: None,
        },
        // LFM2Model.set_gguf_parameters: the per-layer KV heads replace the common key, then
        // vocabulary size, conv cache, RMS epsilon (already written), feed-forward length.
        extra_kv: &[
            ExtraKv::HeadCountKvPerLayer,
            ExtraKv::VocabSize,
            ExtraKv::ShortconvLCache,
            ExtraKv::Lfm2FeedForwardLength,
        ],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: SHORTCONV_SPLITS,
        hooks: &[],
    },
    // Llama 4 text (`Llama4Model`, a `LlamaModel` without the q/k permutation): the text model
    // of the multimodal release, `intermediate_size_mlp` as the feed-forward length (the class
    // swaps the two), `intermediate_size` as the experts', fused experts split as Qwen3-VL-MoE's.
    ArchSpec {
        arch: "llama4",
        hf_archs: &["Llama4ForConditionalGeneration", "Llama4ForCausalLM"],
        tensors: &[EMBED_NORM, LM_HEAD, ATTN_NORM, ATTN, FFN_NORM, LLAMA4_FFN],
        experts: None,
        permute_qk: false,
        // Llama4TextConfig's defaults.
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "202048"),
                ("max_position_embeddings", "131072"),
                ("hidden_size", "5120"),
                ("intermediate_size", "8192"),
                ("intermediate_size_mlp", "16384"),
                ("num_hidden_layers", "48"),
                ("num_attention_heads", "40"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
                ("num_local_experts", "16"),
                ("num_experts_per_tok", "1"),
                ("interleave_moe_layer_step", "1"),
                ("bos_token_id", "1"),
                ("eos_token_id", "2"),
            ],
            kv_heads: KvHeadsDefault::Const(8),
            head_dim: HeadDimDefault::Const(128),
            rope_theta: Some("500000.0"),
            local_rope_theta: None,
        },
        // LlamaModel's keys (the feed-forward length replaced in place), then Llama4Model's.
        extra_kv: &[
            ExtraKv::U32("feed_forward_length", "intermediate_size_mlp"),
            ExtraKv::VocabSize,
            ExtraKv::RopeDimensionCount,
            ExtraKv::U32("interleave_moe_layer_step", "interleave_moe_layer_step"),
            ExtraKv::ExpertFeedForwardLengthOf("intermediate_size"),
            ExtraKv::SlidingWindowZeroIfAllFull,
        ],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: true,
        names: NameRules {
            text_of_multimodal: true,
            ..NO_RULES
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: LLAMA4_SPLITS,
        hooks: &[],
    },
    // GLM-4.5 / 4.6 / 4.7 and GLM-4.5-Air (`Glm4MoeModel`): a TextModel with DeepSeek-V3's
    // expert layout, sigmoid gating and the NextN layers counted as blocks.
    ArchSpec {
        arch: "glm4moe",
        hf_archs: &["Glm4MoeForCausalLM"],
        tensors: GLM4MOE_TENSORS,
        experts: Some(&DEEPSEEK2_EXPERTS),
        // "GLM4V_MOE uses Neox ordering already": no permutation.
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "151552"),
                ("max_position_embeddings", "131072"),
                ("hidden_size", "4096"),
                ("intermediate_size", "10944"),
                ("num_hidden_layers", "46"),
                ("num_attention_heads", "96"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
                ("moe_intermediate_size", "1408"),
                ("num_experts_per_tok", "8"),
                ("n_shared_experts", "1"),
                ("n_routed_experts", "128"),
                ("routed_scaling_factor", "1.0"),
                ("n_group", "1"),
                ("topk_group", "1"),
                ("first_k_dense_replace", "1"),
                ("norm_topk_prob", "true"),
                ("num_nextn_predict_layers", "1"),
            ],
            kv_heads: KvHeadsDefault::Const(8),
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: GLM4MOE_KVS,
        vocab: VocabKind::Gpt2Glm,
        llama3_rope_freqs: false,
        // `ModelBase.filter_tensors`: `e_score_correction_bias` → `e_score_correction.bias`.
        names: NameRules {
            suffix_renames: &[("e_score_correction_bias", "e_score_correction.bias")],
            ..NO_RULES
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[Hook::NextnLayers],
    },
    // GLM-4.5V's text model: the same converter class (`Glm4MoeModel`) on the multimodal
    // release, with Glm4vMoeTextConfig's defaults (no NextN key) and M-RoPE sections (a common
    // key); the vision tower is the mmproj's.
    ArchSpec {
        arch: "glm4moe",
        hf_archs: &["Glm4vMoeForConditionalGeneration"],
        tensors: GLM4MOE_TENSORS,
        experts: Some(&DEEPSEEK2_EXPERTS),
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "151424"),
                ("max_position_embeddings", "65536"),
                ("hidden_size", "4096"),
                ("intermediate_size", "10944"),
                ("num_hidden_layers", "46"),
                ("num_attention_heads", "96"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "false"),
                ("moe_intermediate_size", "1408"),
                ("num_experts_per_tok", "8"),
                ("n_shared_experts", "1"),
                ("n_routed_experts", "128"),
                ("routed_scaling_factor", "1.0"),
                ("n_group", "1"),
                ("topk_group", "1"),
                ("first_k_dense_replace", "1"),
                ("norm_topk_prob", "true"),
            ],
            kv_heads: KvHeadsDefault::Const(8),
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: GLM4MOE_KVS,
        vocab: VocabKind::Gpt2Glm,
        llama3_rope_freqs: false,
        names: NameRules {
            suffix_renames: &[("e_score_correction_bias", "e_score_correction.bias")],
            text_of_multimodal: true,
            ..NO_RULES
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[Hook::NextnLayers],
    },
    // DeepSeek-V3 (and Kimi K2, which reuses it): the reference's DeepseekV2Model, with
    // DeepseekV3Config's defaults, the router's `e_score_correction_bias` and the MTP layers.
    ArchSpec {
        arch: "deepseek2",
        hf_archs: &["DeepseekV3ForCausalLM"],
        tensors: DEEPSEEK3_TENSORS,
        experts: Some(&DEEPSEEK2_EXPERTS),
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "129280"),
                ("max_position_embeddings", "4096"),
                ("hidden_size", "7168"),
                ("intermediate_size", "18432"),
                ("moe_intermediate_size", "2048"),
                ("num_hidden_layers", "61"),
                ("num_attention_heads", "128"),
                ("n_shared_experts", "1"),
                ("n_routed_experts", "256"),
                ("routed_scaling_factor", "2.5"),
                ("kv_lora_rank", "512"),
                ("q_lora_rank", "1536"),
                ("qk_rope_head_dim", "64"),
                ("v_head_dim", "128"),
                ("qk_nope_head_dim", "128"),
                ("n_group", "8"),
                ("topk_group", "4"),
                ("num_experts_per_tok", "8"),
                ("first_k_dense_replace", "3"),
                ("norm_topk_prob", "true"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
                ("bos_token_id", "0"),
                ("eos_token_id", "1"),
            ],
            kv_heads: KvHeadsDefault::Heads,
            head_dim: HeadDimDefault::Key("qk_rope_head_dim"),
            rope_theta: Some("10000.0"),
            local_rope_theta: None,
        },
        extra_kv: &[
            ExtraKv::HeadCountKv(1),
            ExtraKv::LeadingDenseBlockCount,
            ExtraKv::VocabSize,
            ExtraKv::QLoraRank,
            ExtraKv::MlaLengths,
            ExtraKv::ExpertFeedForwardLength,
            ExtraKv::ExpertSharedCount,
            ExtraKv::ExpertWeightsScale,
            ExtraKv::ExpertWeightsNorm,
            ExtraKv::RopeDimensionCount,
            ExtraKv::YarnLogMultiplier,
        ],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        // `ModelBase.filter_tensors`: `e_score_correction_bias` → `e_score_correction.bias`.
        names: NameRules {
            suffix_renames: &[("e_score_correction_bias", "e_score_correction.bias")],
            ..NO_RULES
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        splits: MLA_SPLITS,
        transposed: &[],
        hooks: &[Hook::SkipMtpLayers],
    },
    ArchSpec {
        arch: "ernie4_5-moe",
        hf_archs: &["Ernie4_5_MoeForCausalLM"],
        tensors: ERNIE45_MOE_TENSORS,
        experts: Some(&ERNIE45_EXPERTS),
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "103424"),
                ("max_position_embeddings", "131072"),
                ("hidden_size", "2560"),
                ("intermediate_size", "12288"),
                ("num_hidden_layers", "28"),
                ("num_attention_heads", "20"),
                ("rms_norm_eps", "1e-05"),
                ("tie_word_embeddings", "true"),
                ("pad_token_id", "0"),
                ("bos_token_id", "1"),
                ("eos_token_id", "2"),
                ("moe_intermediate_size", "1536"),
                ("moe_k", "6"),
                ("moe_num_experts", "64"),
                ("moe_num_shared_experts", "2"),
                ("moe_layer_start_index", "1"),
                ("moe_layer_interval", "1"),
            ],
            kv_heads: KvHeadsDefault::Const(4),
            head_dim: HeadDimDefault::Const(128),
            rope_theta: Some("500000.0"),
            local_rope_theta: None,
        },
        // Ernie4_5MoeModel.set_gguf_parameters after the common keys.
        extra_kv: &[
            ExtraKv::U32("expert_count", "moe_num_experts"),
            ExtraKv::U32("expert_used_count", "moe_k"),
            ExtraKv::U32("interleave_moe_layer_step", "moe_layer_interval"),
            ExtraKv::U32("leading_dense_block_count", "moe_layer_start_index"),
            ExtraKv::ExpertFeedForwardLength,
            ExtraKv::ErnieSharedExperts,
        ],
        vocab: VocabKind::SpmThenSpacePrefix,
        llama3_rope_freqs: false,
        // `filter_tensors`: the multi-token-prediction layers are skipped.
        names: NameRules {
            strip_prefix: &[],
            suffix_renames: &[("e_score_correction_bias", "e_score_correction.bias")],
            drop: &[],
            drop_prefixes: &[
                "model.mtp_block.",
                "model.mtp_emb_norm.",
                "model.mtp_hidden_norm.",
                "model.mtp_linear_proj.",
            ],
            text_of_multimodal: false,
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[],
    },
    // MiniMax-M2 (`MiniMaxM2Model`): a TextModel; the common keys (`scoring_func` gives the
    // gating function), then the experts' width and the rotary size. MiniMaxM2Config's defaults.
    ArchSpec {
        arch: "minimax-m2",
        hf_archs: &["MiniMaxM2ForCausalLM"],
        tensors: MINIMAXM2_TENSORS,
        experts: Some(&MIXTRAL_EXPERTS),
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "200064"),
                ("max_position_embeddings", "196608"),
                ("hidden_size", "3072"),
                ("intermediate_size", "1536"),
                ("num_hidden_layers", "62"),
                ("num_attention_heads", "48"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
                ("bos_token_id", "200034"),
                ("eos_token_id", "200020"),
                ("num_local_experts", "256"),
                ("num_experts_per_tok", "8"),
            ],
            kv_heads: KvHeadsDefault::Const(8),
            head_dim: HeadDimDefault::Const(128),
            rope_theta: Some("5000000.0"),
            local_rope_theta: None,
        },
        // MiniMaxM2Model.set_gguf_parameters.
        extra_kv: &[
            ExtraKv::ExpertFeedForwardLengthOf("intermediate_size"),
            ExtraKv::U32("rope.dimension_count", "rotary_dim"),
        ],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        names: NameRules {
            strip_prefix: &[],
            // `ModelBase.filter_tensors`: `e_score_correction_bias` → `e_score_correction.bias`.
            suffix_renames: &[("e_score_correction_bias", "e_score_correction.bias")],
            drop: &[],
            drop_prefixes: &[],
            text_of_multimodal: false,
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: &[],
        hooks: &[Hook::MiniMaxM2, Hook::CheckShapes],
    },
    ArchSpec {
        arch: "lfm2moe",
        hf_archs: &["Lfm2MoeForCausalLM"],
        tensors: &[LFM2_NAMES, LFM2MOE_ROUTER],
        experts: Some(&LFM2MOE_EXPERTS),
        permute_qk: false,
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "65536"),
                ("max_position_embeddings", "128000"),
                ("hidden_size", "2048"),
                ("intermediate_size", "7168"),
                ("moe_intermediate_size", "1792"),
                ("num_hidden_layers", "32"),
                ("num_attention_heads", "32"),
                ("norm_eps", "1e-05"),
                ("tie_word_embeddings", "true"),
                ("pad_token_id", "0"),
                ("bos_token_id", "1"),
                ("eos_token_id", "2"),
                ("conv_L_cache", "3"),
                ("num_dense_layers", "2"),
                ("num_experts", "32"),
                ("num_experts_per_tok", "4"),
            ],
            kv_heads: KvHeadsDefault::Const(8),
            head_dim: HeadDimDefault::Absent,
            rope_theta: Some("1000000.0"),
            local_rope_theta: None,
        },
        // LFM2MoeModel.set_gguf_parameters.
        extra_kv: &[
            ExtraKv::HeadCountKvFullAttention,
            ExtraKv::ExpertFeedForwardLengthOf("moe_intermediate_size"),
            ExtraKv::U32("leading_dense_block_count", "num_dense_layers"),
            ExtraKv::U32Value("expert_gating_func", 2),
            ExtraKv::VocabSize,
            ExtraKv::ShortconvLCache,
        ],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        names: NameRules {
            strip_prefix: &[],
            suffix_renames: &[(".expert_bias", ".expert_bias.bias")],
            drop: &[],
            drop_prefixes: &[],
            text_of_multimodal: false,
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: SHORTCONV_SPLITS,
        hooks: &[],
    },
    ArchSpec {
        arch: "qwen3vlmoe",
        hf_archs: &["Qwen3VLMoeForConditionalGeneration"],
        tensors: QWEN3MOE_TENSORS,
        experts: None,
        permute_qk: false,
        // Qwen3VLMoeTextConfig's defaults.
        config: ConfigDefaults {
            values: &[
                ("vocab_size", "151936"),
                ("max_position_embeddings", "128000"),
                ("hidden_size", "2048"),
                ("intermediate_size", "5632"),
                ("num_hidden_layers", "24"),
                ("num_attention_heads", "16"),
                ("rms_norm_eps", "1e-06"),
                ("tie_word_embeddings", "false"),
                ("num_experts", "60"),
                ("num_experts_per_tok", "4"),
                ("moe_intermediate_size", "1408"),
            ],
            kv_heads: KvHeadsDefault::Const(16),
            head_dim: HeadDimDefault::Const(128),
            rope_theta: Some("500000.0"),
            local_rope_theta: None,
        },
        // Qwen2MoeModel's keys, then the deepstack layer count.
        extra_kv: &[
            ExtraKv::ExpertFeedForwardLength,
            ExtraKv::ExpertSharedFeedForwardLength,
            ExtraKv::DeepstackLayers,
        ],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        names: NameRules {
            text_of_multimodal: true,
            ..NO_RULES
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: QWEN3VLMOE_SPLITS,
        hooks: &[],
    },
    // Mamba 2 (`conversion/mamba.py` `Mamba2Model`): reads config.json itself (no config class
    // defaults); its own keys, the SSM tensors' reshapes and `A = -exp(A_log)` as splits.
    ArchSpec {
        arch: "mamba2",
        hf_archs: &["Mamba2ForCausalLM"],
        tensors: &[MAMBA2_NAMES],
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[],
            kv_heads: KvHeadsDefault::Absent,
            head_dim: HeadDimDefault::Absent,
            rope_theta: None,
            local_rope_theta: None,
        },
        extra_kv: &[],
        vocab: VocabKind::SpmElseGpt2PadTo16,
        llama3_rope_freqs: false,
        names: NameRules {
            strip_prefix: &["model."],
            suffix_renames: &[(".dt_bias", ".dt_proj.bias")],
            drop: &[],
            drop_prefixes: &[],
            text_of_multimodal: false,
        },
        kv_layout: KvLayout::Mamba2,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: MAMBA2_SPLITS,
        hooks: &[],
    },
    // Falcon-H1 (`conversion/falcon_h1.py` `FalconH1Model`, a `Mamba2Model` with Llama
    // attention): Mamba 2's keys read with `mamba_` prefixes, then its own; the µP multipliers
    // folded into the weights (a named hook).
    ArchSpec {
        arch: "falcon-h1",
        hf_archs: &["FalconH1ForCausalLM"],
        tensors: &[FALCON_H1_NAMES, ATTN],
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[],
            kv_heads: KvHeadsDefault::Absent,
            head_dim: HeadDimDefault::Absent,
            rope_theta: None,
            local_rope_theta: None,
        },
        extra_kv: &[
            ExtraKv::VocabSize,
            ExtraKv::U32Or("context_length", "max_position_embeddings", 0),
            ExtraKv::U32("feed_forward_length", "intermediate_size"),
            ExtraKv::U32("attention.head_count", "num_attention_heads"),
            ExtraKv::U32("attention.head_count_kv", "num_key_value_heads"),
            ExtraKv::U32("attention.key_length", "head_dim"),
            ExtraKv::U32("attention.value_length", "head_dim"),
            ExtraKv::RopeFreqBase,
        ],
        vocab: VocabKind::Gpt2,
        llama3_rope_freqs: false,
        names: NameRules {
            strip_prefix: &[],
            suffix_renames: &[(".dt_bias", ".dt_proj.bias")],
            drop: &[],
            drop_prefixes: &[],
            text_of_multimodal: false,
        },
        kv_layout: KvLayout::FalconH1,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: FALCON_H1_SPLITS,
        hooks: &[Hook::FalconH1Multipliers],
    },
    // Granite 4 hybrid (`conversion/granite.py` `GraniteHybridModel`: Mamba 2 and Granite MoE):
    // Granite's keys (head_dim dropped, multipliers as scales), then its SSM and per-layer keys;
    // q/k permuted in attention layers only. Routed experts (`num_local_experts` > 0,
    // granite-4.0-h-tiny/small) stored fused `[E, 2F, H]` are split by rows, the shared MLP then
    // written as the shared expert (the hook).
    ArchSpec {
        arch: "granitehybrid",
        hf_archs: &["GraniteMoeHybridForCausalLM"],
        tensors: &[
            EMBED_NORM,
            LM_HEAD,
            ATTN_NORM,
            ATTN,
            FFN_NORM,
            GRANITE_HYBRID_NAMES,
        ],
        experts: None,
        permute_qk: true,
        config: ConfigDefaults {
            values: &[],
            kv_heads: KvHeadsDefault::Absent,
            head_dim: HeadDimDefault::Ignored,
            rope_theta: None,
            local_rope_theta: None,
        },
        extra_kv: &[
            ExtraKv::VocabSize,
            ExtraKv::RopeDimensionCount,
            ExtraKv::Scale("attention_multiplier", "attention.scale"),
            ExtraKv::Scale("embedding_multiplier", "embedding_scale"),
            ExtraKv::Scale("residual_multiplier", "residual_scale"),
            ExtraKv::Scale("logits_scaling", "logit_scale"),
            ExtraKv::U32IfTruthy(
                "expert_shared_feed_forward_length",
                "shared_intermediate_size",
            ),
            ExtraKv::GraniteHybrid,
        ],
        vocab: VocabKind::SpmElseGpt2PadTo8,
        llama3_rope_freqs: false,
        names: NameRules {
            strip_prefix: &[],
            suffix_renames: &[(".dt_bias", ".dt_proj.bias")],
            drop: &[],
            drop_prefixes: &[],
            text_of_multimodal: false,
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: GRANITE_HYBRID_SPLITS,
        hooks: &[Hook::GraniteHybridLayers],
    },
    // Nemotron-H (`conversion/nemotron.py` `NemotronHModel` on `GraniteHybridModel`): converted
    // as `nemotron_h_moe` whatever the release (NemotronHConfig always has `num_experts_per_tok`);
    // Granite's common keys (head_dim dropped and written later as key/value length), then the
    // hook's SSM, per-layer and expert keys; q/k permuted (they occur in attention layers only),
    // Mamba 2's tensor rules on the `mixer.*` of its Mamba layers, experts stacked down, up.
    ArchSpec {
        arch: "nemotron_h_moe",
        hf_archs: &["NemotronHForCausalLM"],
        tensors: &[MAMBA2_NAMES, NEMOTRON_H_NAMES],
        experts: Some(&NEMOTRON_H_EXPERTS),
        permute_qk: true,
        config: ConfigDefaults {
            values: NEMOTRON_H_DEFAULTS,
            kv_heads: KvHeadsDefault::Absent,
            head_dim: HeadDimDefault::PoppedTo("attention_head_dim", 128),
            rope_theta: None,
            local_rope_theta: None,
        },
        extra_kv: &[
            ExtraKv::VocabSize,
            ExtraKv::RopeDimensionCount,
            ExtraKv::Scale("attention_multiplier", "attention.scale"),
            ExtraKv::Scale("embedding_multiplier", "embedding_scale"),
            ExtraKv::Scale("residual_multiplier", "residual_scale"),
            ExtraKv::Scale("logits_scaling", "logit_scale"),
            ExtraKv::U32IfTruthy(
                "expert_shared_feed_forward_length",
                "shared_intermediate_size",
            ),
            ExtraKv::NemotronH,
        ],
        vocab: VocabKind::Gpt2PadTo8,
        llama3_rope_freqs: false,
        names: NameRules {
            strip_prefix: &[],
            suffix_renames: &[
                (".dt_bias", ".dt_proj.bias"),
                ("e_score_correction_bias", "e_score_correction.bias"),
            ],
            drop: &[],
            drop_prefixes: &[],
            text_of_multimodal: false,
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: MAMBA2_SPLITS,
        hooks: &[Hook::NemotronH],
    },
    // Jamba (`conversion/jamba.py` `JambaModel`): its own key list, Mamba 1 mixers (`A =
    // -exp(A_log)` in `[inner, state]`, conv1d squeezed), attention without permutation, per-expert
    // tensors stacked. Mini-Jamba's `.moe.` names and `experts.0` dense layers are not done.
    ArchSpec {
        arch: "jamba",
        hf_archs: &["JambaForCausalLM"],
        tensors: &[JAMBA_NAMES, ATTN],
        experts: Some(&JAMBA_EXPERTS),
        permute_qk: false,
        config: ConfigDefaults {
            values: &[],
            kv_heads: KvHeadsDefault::Absent,
            head_dim: HeadDimDefault::Absent,
            rope_theta: None,
            local_rope_theta: None,
        },
        extra_kv: &[],
        vocab: VocabKind::Spm,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Jamba,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: JAMBA_SPLITS,
        hooks: &[],
    },
    // Mamba 1 (`conversion/mamba.py` `MambaModel`): reads config.json itself; its own keys, the
    // conv1d squeeze and `A = -exp(A_log)`. The reference also drops an untied `lm_head` equal to
    // the embedding (`torch.equal`): the plan reads no tensor data, so such a release keeps it.
    ArchSpec {
        arch: "mamba",
        hf_archs: &["MambaForCausalLM"],
        tensors: &[MAMBA1_NAMES],
        experts: None,
        permute_qk: false,
        config: ConfigDefaults {
            values: &[],
            kv_heads: KvHeadsDefault::Absent,
            head_dim: HeadDimDefault::Absent,
            rope_theta: None,
            local_rope_theta: None,
        },
        extra_kv: &[],
        vocab: VocabKind::Gpt2ElseSpmPadTo8,
        llama3_rope_freqs: false,
        names: NO_RULES,
        kv_layout: KvLayout::Mamba1,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
        transposed: &[],
        splits: MAMBA1_SPLITS,
        hooks: &[],
    },
];

impl ArchSpec {
    /// A Mixture-of-Experts architecture: per-expert tensors stacked, or fused expert tensors
    /// split ([`SplitRule::experts`]).
    pub fn is_moe(&self) -> bool {
        self.experts.is_some() || self.splits.iter().any(|s| s.rule.experts())
    }
}

/// The entry for an HF `architectures[0]` value.
pub(crate) fn lookup(hf_arch: &str) -> Option<&'static ArchSpec> {
    ARCHS.iter().find(|a| a.hf_archs.contains(&hf_arch))
}

/// Every supported HF architecture name, in table order.
pub(crate) fn supported() -> Vec<&'static str> {
    ARCHS
        .iter()
        .flat_map(|a| a.hf_archs.iter().copied())
        .collect()
}

/// The supported HF architecture whose name is nearest `hf_arch` (Jaro-Winkler similarity of the
/// lowercased names; the first in table order on a tie).
pub(crate) fn nearest(hf_arch: &str) -> &'static str {
    let want = hf_arch.to_ascii_lowercase();
    let mut best = ("", f64::MIN);
    for name in supported() {
        let score = strsim::jaro_winkler(&want, &name.to_ascii_lowercase());
        if score > best.1 {
            best = (name, score);
        }
    }
    best.0
}

/// The HF architectures converted as Mixture-of-Experts models, in table order.
pub(crate) fn supported_moe() -> Vec<&'static str> {
    ARCHS
        .iter()
        .filter(|a| a.is_moe())
        .flat_map(|a| a.hf_archs.iter().copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The refusal's suggestion: the supported class an unsupported one is closest to.
    #[test]
    fn nearest_supported_class() {
        for (asked, want) in [
            ("Qwen3_6ForCausalLM", "Qwen3ForCausalLM"),
            ("Qwen3NewForCausalLM", "Qwen3NextForCausalLM"),
            ("Glm4MoeLiteForCausalLM", "Glm4MoeForCausalLM"),
            ("llamaforcausallm", "LlamaForCausalLM"),
        ] {
            assert_eq!(nearest(asked), want, "{asked}");
        }
    }
}
