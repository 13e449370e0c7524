//! The architecture table: data, not code.
//!
//! One [`ArchSpec`] per GGUF architecture, listing the HF `architectures[0]` values it accepts,
//! the HF → GGUF tensor name map (`{bid}` stands for the block number), whether `q_proj` /
//! `k_proj` get the Llama row permutation, the config defaults transformers' config class would
//! fill, the architecture-specific keys written after the common ones, and how the vocabulary is
//! found. Adding an architecture is adding an entry to [`ARCHS`] (and a fixture that proves it
//! against the reference converter); a Mixture-of-Experts one also names its [`ExpertStack`]
//! (which per-expert tensors are stacked into which GGUF tensor, in which order).
//!
//! Derived from `conversion/{llama,qwen}.py` and `gguf-py/gguf/tensor_mapping.py` of the pinned
//! llama.cpp tree (docs/specs/gguf.md §5.2) and checked against its output
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
pub const NO_RULES: NameRules = NameRules {
    strip_prefix: &[],
    suffix_renames: &[],
    drop: &[],
    drop_prefixes: &[],
    text_of_multimodal: false,
};

/// The reference's test for a tensor of a multimodal release that its text converter skips
/// (`TextModel.filter_tensors`): name prefixes, then substrings.
pub const MULTIMODAL: (&[&str], &[&str]) = (
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
pub const MIXTRAL_EXPERTS: ExpertStack = ExpertStack {
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
pub const QWEN2MOE_EXPERTS: ExpertStack = ExpertStack {
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
pub const QWEN3MOE_EXPERTS: ExpertStack = QWEN2MOE_EXPERTS;

/// OLMoE's experts: Qwen2-MoE's layout (`conversion/olmo.py` `OlmoeModel.modify_tensors`, "Copied
/// from: Qwen2MoeModel").
pub const OLMOE_EXPERTS: ExpertStack = QWEN2MOE_EXPERTS;

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
    /// `token_embd.weight` keeps only the vocabulary's rows (Gemma 3's `data_torch[:n_vocab]`,
    /// `n_vocab` the SentencePiece export's length): an [`crate::Origin::Rows`] when the
    /// embedding has more rows.
    pub embd_rows_to_vocab: bool,
}

/// HF tensor names the reference drops whatever the architecture (`base.py:1058-1060`).
pub const SKIPPED_SUFFIXES: &[&str] = &[
    ".attention.masked_bias",
    ".attention.bias",
    ".rotary_emb.inv_freq",
];

/// GGUF base names (without `blk.N.`) that always stay F32 (`base.py:1087-1121`, the subset
/// that can occur in the table's architectures).
pub const FORCE_F32: &[&str] = &[
    "ffn_gate_inp",
    "ffn_gate_inp_shexp",
    "position_embd",
    "token_types",
];

/// One group of HF base name (no `.weight`/`.bias`) → GGUF base name rows; `{bid}` is the
/// block number. An architecture's name map is a list of groups (rows never overlap, so the
/// order of groups does not matter).
pub type NameGroup = &'static [(&'static str, &'static str)];

/// Token embedding and final norm of the Llama-style decoders.
const EMBED_NORM: NameGroup = &[
    ("model.embed_tokens", "token_embd"),
    ("model.norm", "output_norm"),
];

/// An untied output head (absent from Gemma and Gemma 2, which always tie it).
const LM_HEAD: NameGroup = &[("lm_head", "output")];

/// Llama-style attention with its input norm.
const ATTN: NameGroup = &[
    ("model.layers.{bid}.input_layernorm", "blk.{bid}.attn_norm"),
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

/// Gemma 2/3's four norms per block: after attention, before and after the feed-forward.
const SANDWICH_NORMS: NameGroup = &[
    (
        "model.layers.{bid}.post_attention_layernorm",
        "blk.{bid}.post_attention_norm",
    ),
    (
        "model.layers.{bid}.pre_feedforward_layernorm",
        "blk.{bid}.ffn_norm",
    ),
    (
        "model.layers.{bid}.post_feedforward_layernorm",
        "blk.{bid}.post_ffw_norm",
    ),
];

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

/// Llama, Mistral and Qwen2.
const LLAMA_TENSORS: &[NameGroup] = &[EMBED_NORM, LM_HEAD, ATTN, FFN_NORM, MLP];
/// Mixtral: Llama attention, a router and [`MIXTRAL_EXPERTS`].
const MIXTRAL_TENSORS: &[NameGroup] = &[EMBED_NORM, LM_HEAD, ATTN, FFN_NORM, MIXTRAL_ROUTER];
/// Qwen2-MoE: a router, the shared expert, [`QWEN2MOE_EXPERTS`], and dense MLP names for
/// `mlp_only_layers`.
const QWEN2MOE_TENSORS: &[NameGroup] = &[
    EMBED_NORM,
    LM_HEAD,
    ATTN,
    FFN_NORM,
    ROUTER,
    SHARED_EXPERT,
    MLP,
];
/// Qwen3-MoE: Qwen3 attention, a router, [`QWEN3MOE_EXPERTS`], dense MLP names.
const QWEN3MOE_TENSORS: &[NameGroup] =
    &[EMBED_NORM, LM_HEAD, ATTN, QK_NORMS, FFN_NORM, ROUTER, MLP];
/// OLMoE: every layer sparse (`MODEL_TENSORS[OLMOE]` has no dense FFN), [`OLMOE_EXPERTS`].
const OLMOE_TENSORS: &[NameGroup] = &[EMBED_NORM, LM_HEAD, ATTN, QK_NORMS, FFN_NORM, ROUTER];
/// Qwen3: Llama's names plus per-head q/k norms.
const QWEN3_TENSORS: &[NameGroup] = &[EMBED_NORM, LM_HEAD, ATTN, QK_NORMS, FFN_NORM, MLP];
/// Gemma 2 (`MODEL_TENSORS[GEMMA2]`): four norms per block, no `output`.
const GEMMA2_TENSORS: &[NameGroup] = &[EMBED_NORM, ATTN, SANDWICH_NORMS, MLP];
/// Gemma (v1): Llama's names without `output` (`lm_head` is dropped).
const GEMMA_TENSORS: &[NameGroup] = &[EMBED_NORM, ATTN, FFN_NORM, MLP];
/// Gemma 3 (text): Gemma 2's norms plus q/k norms; an untied `lm_head` is `output`.
const GEMMA3_TENSORS: &[NameGroup] = &[EMBED_NORM, LM_HEAD, ATTN, QK_NORMS, SANDWICH_NORMS, MLP];
/// Phi-3.
const PHI3_TENSORS: &[NameGroup] = &[EMBED_NORM, LM_HEAD, FFN_NORM, PHI3_FUSED];

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

/// Every supported architecture.
pub const ARCHS: &[ArchSpec] = &[
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
        names: NameRules {
            strip_prefix: &["bert."],
            suffix_renames: &[(".gamma", ".weight"), (".beta", ".bias")],
            drop: &[
                "embeddings.position_ids",
                "pooler.dense.weight",
                "pooler.dense.bias",
            ],
            drop_prefixes: &["cls.predictions", "cls.seq_relationship"],
            text_of_multimodal: false,
        },
        kv_layout: KvLayout::Common,
        norm_plus_one: false,
        embd_rows_to_vocab: false,
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
    },
];

/// The entry for an HF `architectures[0]` value.
pub fn lookup(hf_arch: &str) -> Option<&'static ArchSpec> {
    ARCHS.iter().find(|a| a.hf_archs.contains(&hf_arch))
}

/// Every supported HF architecture name, in table order.
pub fn supported() -> Vec<&'static str> {
    ARCHS
        .iter()
        .flat_map(|a| a.hf_archs.iter().copied())
        .collect()
}

/// The HF architectures converted as Mixture-of-Experts models, in table order.
pub fn supported_moe() -> Vec<&'static str> {
    ARCHS
        .iter()
        .filter(|a| a.experts.is_some())
        .flat_map(|a| a.hf_archs.iter().copied())
        .collect()
}
