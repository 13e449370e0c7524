//! Multimodal projectors (`convert_hf_to_gguf.py --mmproj`): the vision tower and projector of
//! a vision-language release written as a `clip` GGUF, the file llama.cpp's `mtmd` loads beside
//! the text model.
//!
//! One [`ProjectorSpec`] per HF architecture the reference's `MmprojModel` subclasses handle
//! (data, as the architecture table: which tensors are the projector's, the saved layouts read
//! under the releases' names, the name map, the type overrides, the family's `clip.*` keys).
//! The hyper-parameters come from `config.json`'s `vision_config` (with the defaults of the
//! transformers vision config class, as the reference reads `AutoConfig(...).to_dict()`) and
//! from `preprocessor_config.json` / `processor_config.json`, read and checked here
//! ([`Processor::read`], [`Vision::read`]) before any weight is opened: a missing or garbled
//! file, absurd sizes and a tower without layers are refused, naming the file and the field.

use std::path::Path;

use serde_json::{Map, Value};
use weightport_core::{Error, Format, Location, MetaValue, Result};

use crate::config::{bad, read_json};

/// The image processor's configuration a release ships.
pub const PREPROCESSOR: &str = "preprocessor_config.json";
/// The processor's configuration (merged over [`PREPROCESSOR`], as the reference does).
pub const PROCESSOR: &str = "processor_config.json";

/// The largest image side and patch side accepted (the largest real towers read 1–2K pixels).
pub const MAX_IMAGE_SIDE: u64 = 1 << 16;
/// The most vision layers accepted.
pub const MAX_VISION_LAYERS: u64 = 1 << 10;
/// The most channels an image mean or standard deviation may list.
pub const MAX_CHANNELS: usize = 16;

/// Which name a type override tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On {
    /// The HF name (after the layout and the renames).
    Hf,
    /// The GGUF name.
    Gguf,
}

/// The type a [`Force`] rule imposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forced {
    /// F16 whatever the output type.
    F16,
    /// F32 whatever the output type.
    F32,
    /// F16 for an F16 output, else F32 (`MmprojModel.tensor_force_quant`'s patch embedding).
    F16IfF16,
}

/// A `tensor_force_quant` rule: the first whose substring the name holds decides the type
/// (1-D tensors and `*_norm.weight` stay F32 whatever it says).
#[derive(Debug, Clone, Copy)]
pub struct Force {
    /// Which name is tested.
    pub on: On,
    /// The substring.
    pub contains: &'static str,
    /// The type.
    pub to: Forced,
}

/// Which configuration a key is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cfg {
    /// `config.json`'s `vision_config`.
    Vision,
    /// The text model's (config.json with `text_config` over it).
    Text,
}

/// A family's key written after the common `clip.vision.*` keys, in the listed order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ClipKv {
    /// `clip.projector_type` = the spec's [`ProjectorSpec::projector_type`].
    ProjectorType,
    /// `clip.vision.attention.layer_norm_epsilon` f32 ← the key of that configuration, else
    /// the default.
    LayerNormEps(Cfg, &'static str, f64),
    /// `clip.vision.spatial_merge_size` u32 ← the vision config's `spatial_merge_size`, when
    /// present (Qwen3-VL).
    SpatialMergeSize,
    /// `clip.vision.is_deepstack_layers`: one bool per vision layer, true at the indexes of
    /// the vision config's `deepstack_visual_indexes` (Qwen3-VL).
    DeepstackLayers,
    /// `clip.use_gelu` = true.
    UseGelu,
    /// `clip.use_silu` = true.
    UseSilu,
    /// Qwen2.5-VL's `clip.vision.n_wa_pattern` u32 = the vision config's
    /// `fullatt_block_indexes[0] + 1` (required; refused unless every full-attention block
    /// follows the last by that step, as the reference checks).
    WindowAttentionPattern,
    /// Gemma 3's `clip.vision.projector.scale_factor` u32 = (image side ÷ patch side) ÷
    /// ⌊√`image_seq_length`⌋ (processor config, default 256), written when positive and not 4.
    Gemma3ScaleFactor,
    /// `clip.use_silu` or `clip.use_gelu` = true as the vision config's `hidden_act` is `silu`
    /// or `gelu`; any other is refused (the reference's "Unsupported hidden_act").
    SiluOrGelu,
    /// `clip.vision.spatial_merge_size` u32 ← config.json's top-level `spatial_merge_size`, else
    /// the default (the config class's; `None`: not written).
    TopSpatialMergeSize(Option<u32>),
    /// `clip.vision.projector.scale_factor` u32 ← config.json's top-level `scale_factor`, else
    /// the default (Idefics3).
    TopScaleFactor(u32),
    /// `clip.vision.preproc_image_size` u32 ← the processor's `size.longest_edge`, else the
    /// vision image size (Idefics3).
    PreprocImageSize,
}

/// The HF → GGUF rules of one projector family.
#[derive(Debug)]
pub struct ProjectorSpec {
    /// HF `architectures[0]` values.
    pub hf_archs: &'static [&'static str],
    /// `clip.projector_type`.
    pub projector_type: &'static str,
    /// The projector's tensors: names starting with one of these (after the layout); the
    /// others (the text model) are not written.
    pub keep: &'static [&'static str],
    /// Names holding one of these are dropped (redundant heads).
    pub skip: &'static [&'static str],
    /// Saved layouts read under the releases' names: a name starting with `.0` (and not with
    /// `.1`) has `.0` replaced by `.1` (transformers 5 saves Gemma 3's SigLIP tower as
    /// `vision_tower.embeddings…`, the releases and the reference's map have
    /// `vision_tower.vision_model.embeddings…`).
    pub layouts: &'static [(&'static str, &'static str)],
    /// Substring replacements before the map (`_weight` → `.weight`).
    pub replace: &'static [(&'static str, &'static str)],
    /// HF name (without `.weight`/`.bias`; `{bid}` a vision layer) → GGUF name.
    pub tensors: &'static [(&'static str, &'static str)],
    /// Type overrides, first match wins.
    pub force: &'static [Force],
    /// `1 + w` for tensors whose HF name holds one of these (Gemma 3's `soft_emb_norm`).
    pub plus_one: &'static [&'static str],
    /// Conv3D patch embeddings (HF name → GGUF name) written as two Conv2D ones, the second
    /// named with `.1` appended: `w[:, :, 0]` and `w[:, :, 1]` (a temporal patch of 2).
    pub temporal_split: &'static [(&'static str, &'static str)],
    /// Fused tensors written as equal row thirds: an HF name holding `.{from}.` becomes the three
    /// names with `from` replaced by each part, in order, each mapped (Qwen2.5-VL's `qkv`).
    pub row_split: &'static [(&'static str, [&'static str; 3])],
    /// `config.json`'s `model_type` the family requires (the reference's class writes another
    /// projector, or fails, for the others).
    pub model_type: Option<&'static str>,
    /// The vision config class's defaults (key, JSON value) for what config.json omits.
    pub vision_defaults: &'static [(&'static str, &'static str)],
    /// Keys the reference's class sets from others, whatever they held (`num_attention_heads`
    /// ← `num_heads`): `(key, from)`.
    pub vision_aliases: &'static [(&'static str, &'static str)],
    /// An absent `image_size` is ⌊√`num_position_embeddings` × `patch_size`⌋ (Qwen3-VL).
    pub image_size_from_positions: bool,
    /// The tower's `q_proj`/`k_proj` rows permuted as a Llama's, by the vision heads (the
    /// reference's `LlavaVisionModel`).
    pub permute_qk: bool,
    /// A token the reference looks up in the tokenizer's added tokens and stops without
    /// (Pixtral's `[IMG_BREAK]`, whose embedding row it then never writes: see [`PIXTRAL_TENSORS`]).
    pub break_token: Option<&'static str>,
    /// The family's keys.
    pub keys: &'static [ClipKv],
}

/// The projector families, by HF architecture.
pub static PROJECTORS: &[ProjectorSpec] = &[
    ProjectorSpec {
        // conversion/gemma.py `Gemma3VisionModel`.
        hf_archs: &["Gemma3ForConditionalGeneration"],
        projector_type: "gemma3",
        keep: &[
            "multi_modal_projector.",
            "vision_tower.",
            "multimodal_projector.",
            "vision_model.",
        ],
        skip: &["vision_model.head.", "language_model."],
        layouts: &[("vision_tower.", "vision_tower.vision_model.")],
        replace: &[("_weight", ".weight")],
        tensors: &[
            (
                "multi_modal_projector.mm_input_projection",
                "mm.input_projection",
            ),
            ("multi_modal_projector.mm_soft_emb_norm", "mm.soft_emb_norm"),
            (
                "vision_tower.vision_model.embeddings.patch_embedding",
                "v.patch_embd",
            ),
            (
                "vision_tower.vision_model.embeddings.position_embedding",
                "v.position_embd",
            ),
            (
                "vision_tower.vision_model.encoder.layers.{bid}.self_attn.q_proj",
                "v.blk.{bid}.attn_q",
            ),
            (
                "vision_tower.vision_model.encoder.layers.{bid}.self_attn.k_proj",
                "v.blk.{bid}.attn_k",
            ),
            (
                "vision_tower.vision_model.encoder.layers.{bid}.self_attn.v_proj",
                "v.blk.{bid}.attn_v",
            ),
            (
                "vision_tower.vision_model.encoder.layers.{bid}.self_attn.out_proj",
                "v.blk.{bid}.attn_out",
            ),
            (
                "vision_tower.vision_model.encoder.layers.{bid}.layer_norm1",
                "v.blk.{bid}.ln1",
            ),
            (
                "vision_tower.vision_model.encoder.layers.{bid}.layer_norm2",
                "v.blk.{bid}.ln2",
            ),
            (
                "vision_tower.vision_model.encoder.layers.{bid}.mlp.fc1",
                "v.blk.{bid}.ffn_up",
            ),
            (
                "vision_tower.vision_model.encoder.layers.{bid}.mlp.fc2",
                "v.blk.{bid}.ffn_down",
            ),
            ("vision_tower.vision_model.post_layernorm", "v.post_ln"),
        ],
        force: &[
            // llama.cpp issue 13025: the projection stays F16 whatever the output type (F32 too).
            Force {
                on: On::Hf,
                contains: "input_projection",
                to: Forced::F16,
            },
            Force {
                on: On::Hf,
                contains: ".embeddings.",
                to: Forced::F32,
            },
        ],
        plus_one: &["soft_emb_norm.weight"],
        temporal_split: &[],
        row_split: &[],
        model_type: None,
        vision_aliases: &[],
        image_size_from_positions: false,
        permute_qk: false,
        break_token: None,
        // transformers' SiglipVisionConfig.
        vision_defaults: &[
            ("hidden_size", "768"),
            ("intermediate_size", "3072"),
            ("num_hidden_layers", "12"),
            ("num_attention_heads", "12"),
            ("image_size", "224"),
            ("patch_size", "16"),
            ("layer_norm_eps", "1e-06"),
        ],
        keys: &[
            ClipKv::ProjectorType,
            ClipKv::LayerNormEps(Cfg::Vision, "layer_norm_eps", 1e-6),
            ClipKv::UseGelu,
            ClipKv::Gemma3ScaleFactor,
        ],
    },
    QWEN25VL,
    QWEN3VL,
    LLAVA_PIXTRAL,
    MISTRAL3,
    IDEFICS3,
];

/// conversion/qwenvl.py `Qwen2VLVisionModel` for Qwen2.5-VL.
const QWEN25VL: ProjectorSpec = ProjectorSpec {
    hf_archs: &["Qwen2_5_VLForConditionalGeneration"],
    projector_type: "qwen2.5vl_merger",
    keep: &["visual."],
    skip: &[],
    layouts: &[],
    replace: &[],
    tensors: &[
        ("visual.blocks.{bid}.attn.q", "v.blk.{bid}.attn_q"),
        ("visual.blocks.{bid}.attn.k", "v.blk.{bid}.attn_k"),
        ("visual.blocks.{bid}.attn.v", "v.blk.{bid}.attn_v"),
        ("visual.blocks.{bid}.attn.proj", "v.blk.{bid}.attn_out"),
        ("visual.blocks.{bid}.mlp.gate_proj", "v.blk.{bid}.ffn_gate"),
        ("visual.blocks.{bid}.mlp.up_proj", "v.blk.{bid}.ffn_up"),
        ("visual.blocks.{bid}.mlp.down_proj", "v.blk.{bid}.ffn_down"),
        ("visual.blocks.{bid}.norm1", "v.blk.{bid}.ln1"),
        ("visual.blocks.{bid}.norm2", "v.blk.{bid}.ln2"),
        ("visual.merger.ln_q", "v.post_ln"),
        // The reference maps `visual.merger.mlp.{bid}` as if the index were a vision block
        // (so it cannot convert a tower of fewer than three blocks); the names are these.
        ("visual.merger.mlp.0", "mm.0"),
        ("visual.merger.mlp.2", "mm.2"),
    ],
    force: &[Force {
        on: On::Gguf,
        contains: ".position_embd.",
        to: Forced::F32,
    }],
    plus_one: &[],
    temporal_split: &[("visual.patch_embed.proj.weight", "v.patch_embd.weight")],
    row_split: &[("qkv", ["q", "k", "v"])],
    model_type: Some("qwen2_5_vl"),
    // transformers' Qwen2_5_VLVisionConfig, and the class's image size.
    vision_defaults: &[
        ("depth", "32"),
        ("hidden_size", "3584"),
        ("intermediate_size", "3420"),
        ("num_heads", "16"),
        ("patch_size", "14"),
        ("image_size", "560"),
    ],
    vision_aliases: &[
        ("num_attention_heads", "num_heads"),
        ("num_hidden_layers", "depth"),
    ],
    image_size_from_positions: false,
    permute_qk: false,
    break_token: None,
    keys: &[
        ClipKv::ProjectorType,
        ClipKv::UseSilu,
        ClipKv::WindowAttentionPattern,
        ClipKv::LayerNormEps(Cfg::Text, "rms_norm_eps", 1e-6),
    ],
};

/// conversion/qwen3vl.py `Qwen3VLVisionModel`.
const QWEN3VL: ProjectorSpec = ProjectorSpec {
    hf_archs: &["Qwen3VLForConditionalGeneration"],
    projector_type: "qwen3vl_merger",
    keep: &["visual."],
    skip: &[],
    layouts: &[("model.visual.", "visual.")],
    replace: &[],
    tensors: &[
        ("visual.patch_embed.proj", "v.patch_embd"),
        ("visual.pos_embed", "v.position_embd"),
        ("visual.blocks.{bid}.attn.qkv", "v.blk.{bid}.attn_qkv"),
        ("visual.blocks.{bid}.attn.proj", "v.blk.{bid}.attn_out"),
        ("visual.blocks.{bid}.mlp.linear_fc1", "v.blk.{bid}.ffn_up"),
        ("visual.blocks.{bid}.mlp.linear_fc2", "v.blk.{bid}.ffn_down"),
        ("visual.blocks.{bid}.norm1", "v.blk.{bid}.ln1"),
        ("visual.blocks.{bid}.norm2", "v.blk.{bid}.ln2"),
        ("visual.merger.norm", "v.post_ln"),
        ("visual.merger.linear_fc1", "mm.0"),
        ("visual.merger.linear_fc2", "mm.2"),
        // `{ds}`: the i-th deepstack merger, written under the vision layer
        // `deepstack_visual_indexes[i]`.
        (
            "visual.deepstack_merger_list.{ds}.norm",
            "v.deepstack.{bid}.norm",
        ),
        (
            "visual.deepstack_merger_list.{ds}.linear_fc1",
            "v.deepstack.{bid}.fc1",
        ),
        (
            "visual.deepstack_merger_list.{ds}.linear_fc2",
            "v.deepstack.{bid}.fc2",
        ),
    ],
    force: &[],
    plus_one: &[],
    temporal_split: &[("visual.patch_embed.proj.weight", "v.patch_embd.weight")],
    row_split: &[],
    model_type: None,
    // transformers' Qwen3VLVisionConfig.
    vision_defaults: &[
        ("depth", "27"),
        ("hidden_size", "1152"),
        ("intermediate_size", "4304"),
        ("num_heads", "16"),
        ("patch_size", "16"),
        ("spatial_merge_size", "2"),
        ("num_position_embeddings", "2304"),
        ("deepstack_visual_indexes", "[8, 16, 24]"),
    ],
    vision_aliases: &[
        ("num_attention_heads", "num_heads"),
        ("num_hidden_layers", "depth"),
    ],
    image_size_from_positions: true,
    permute_qk: false,
    break_token: None,
    keys: &[
        ClipKv::ProjectorType,
        ClipKv::UseGelu,
        ClipKv::SpatialMergeSize,
        ClipKv::LayerNormEps(Cfg::Text, "rms_norm_eps", 1e-6),
        ClipKv::DeepstackLayers,
    ],
};

/// The names of a Pixtral tower and its LLaVA / Mistral 3 projector (gguf-py's map for the
/// `pixtral-hf` and Mistral Small 3.1 names). The reference's `LlavaVisionModel` would also write
/// the `[IMG_BREAK]` row of the text model's token embeddings (`v.token_embd.img_break`), but
/// its own `MmprojModel.filter_tensors` drops every `language_model.` tensor before, so its file
/// holds no such row; neither does weightport's (byte for byte, README "Multimodal projectors").
/// It maps the projector's `linear_{1,2}` as if the index were a vision layer (so it cannot
/// convert a tower of fewer than three layers); the names are these.
pub static PIXTRAL_TENSORS: &[(&str, &str)] = &[
    ("multi_modal_projector.linear_1", "mm.1"),
    ("multi_modal_projector.linear_2", "mm.2"),
    ("multi_modal_projector.norm", "mm.input_norm"),
    (
        "multi_modal_projector.patch_merger.merging_layer",
        "mm.patch_merger",
    ),
    ("vision_tower.patch_conv", "v.patch_embd"),
    ("vision_tower.ln_pre", "v.pre_ln"),
    (
        "vision_tower.transformer.layers.{bid}.attention.q_proj",
        "v.blk.{bid}.attn_q",
    ),
    (
        "vision_tower.transformer.layers.{bid}.attention.k_proj",
        "v.blk.{bid}.attn_k",
    ),
    (
        "vision_tower.transformer.layers.{bid}.attention.v_proj",
        "v.blk.{bid}.attn_v",
    ),
    (
        "vision_tower.transformer.layers.{bid}.attention.o_proj",
        "v.blk.{bid}.attn_out",
    ),
    (
        "vision_tower.transformer.layers.{bid}.attention_norm",
        "v.blk.{bid}.ln1",
    ),
    (
        "vision_tower.transformer.layers.{bid}.ffn_norm",
        "v.blk.{bid}.ln2",
    ),
    (
        "vision_tower.transformer.layers.{bid}.feed_forward.gate_proj",
        "v.blk.{bid}.ffn_gate",
    ),
    (
        "vision_tower.transformer.layers.{bid}.feed_forward.up_proj",
        "v.blk.{bid}.ffn_up",
    ),
    (
        "vision_tower.transformer.layers.{bid}.feed_forward.down_proj",
        "v.blk.{bid}.ffn_down",
    ),
];

/// `LlavaVisionModel`'s `valid_prefixes`: the other tensors (the text model) are not written.
const PIXTRAL_KEEP: &[&str] = &[
    "multi_modal_projector.",
    "vision_tower.",
    "vision_encoder.",
    "vision_language_adapter.",
    "patch_merger.",
    "pre_mm_projector_norm",
];

/// transformers' PixtralVisionConfig.
const PIXTRAL_DEFAULTS: &[(&str, &str)] = &[
    ("hidden_size", "1024"),
    ("intermediate_size", "4096"),
    ("num_hidden_layers", "24"),
    ("num_attention_heads", "16"),
    ("image_size", "1024"),
    ("patch_size", "16"),
    ("hidden_act", "\"gelu\""),
];

/// conversion/llava.py `LlavaVisionModel` for a LLaVA release with a Pixtral tower (the HF
/// Pixtral releases, mistral-community/pixtral-12b).
const LLAVA_PIXTRAL: ProjectorSpec = ProjectorSpec {
    hf_archs: &["LlavaForConditionalGeneration"],
    projector_type: "pixtral",
    keep: PIXTRAL_KEEP,
    skip: &[],
    layouts: &[],
    replace: &[],
    tensors: PIXTRAL_TENSORS,
    force: &[],
    plus_one: &[],
    temporal_split: &[],
    row_split: &[],
    model_type: None,
    vision_defaults: PIXTRAL_DEFAULTS,
    vision_aliases: &[],
    image_size_from_positions: false,
    permute_qk: true,
    break_token: Some("[IMG_BREAK]"),
    keys: &[
        ClipKv::ProjectorType,
        // Hard-coded in modeling_pixtral.py; the reference reads it when config.json has one.
        ClipKv::LayerNormEps(Cfg::Vision, "layer_norm_eps", 1e-5),
        ClipKv::SiluOrGelu,
        // LlavaConfig has none: written only when config.json has one.
        ClipKv::TopSpatialMergeSize(None),
    ],
};

/// conversion/llava.py `LlavaVisionModel` for Mistral 3 (Mistral Small 3.1: the projector's
/// RMS norm and patch merger).
const MISTRAL3: ProjectorSpec = ProjectorSpec {
    hf_archs: &["Mistral3ForConditionalGeneration"],
    keys: &[
        ClipKv::ProjectorType,
        ClipKv::LayerNormEps(Cfg::Vision, "layer_norm_eps", 1e-5),
        ClipKv::SiluOrGelu,
        // Mistral3Config's default.
        ClipKv::TopSpatialMergeSize(Some(2)),
    ],
    ..LLAVA_PIXTRAL
};

/// conversion/smolvlm.py `SmolVLMModel`: Idefics3 (SmolVLM, Idefics3-8B) and SmolVLM2 (the same
/// layout under another class; SmolVLMVisionConfig's defaults are Idefics3VisionConfig's).
const IDEFICS3: ProjectorSpec = ProjectorSpec {
    hf_archs: &[
        "Idefics3ForConditionalGeneration",
        "SmolVLMForConditionalGeneration",
    ],
    projector_type: "idefics3",
    // The reference keeps names holding `vision_tower`, `vision_model` or `model.connector`;
    // the releases have these.
    keep: &["model.vision_model.", "model.connector."],
    skip: &[],
    layouts: &[],
    replace: &[],
    tensors: &[
        (
            "model.vision_model.embeddings.patch_embedding",
            "v.patch_embd",
        ),
        (
            "model.vision_model.embeddings.position_embedding",
            "v.position_embd",
        ),
        (
            "model.vision_model.encoder.layers.{bid}.self_attn.q_proj",
            "v.blk.{bid}.attn_q",
        ),
        (
            "model.vision_model.encoder.layers.{bid}.self_attn.k_proj",
            "v.blk.{bid}.attn_k",
        ),
        (
            "model.vision_model.encoder.layers.{bid}.self_attn.v_proj",
            "v.blk.{bid}.attn_v",
        ),
        (
            "model.vision_model.encoder.layers.{bid}.self_attn.out_proj",
            "v.blk.{bid}.attn_out",
        ),
        (
            "model.vision_model.encoder.layers.{bid}.layer_norm1",
            "v.blk.{bid}.ln1",
        ),
        (
            "model.vision_model.encoder.layers.{bid}.layer_norm2",
            "v.blk.{bid}.ln2",
        ),
        (
            "model.vision_model.encoder.layers.{bid}.mlp.fc1",
            "v.blk.{bid}.ffn_up",
        ),
        (
            "model.vision_model.encoder.layers.{bid}.mlp.fc2",
            "v.blk.{bid}.ffn_down",
        ),
        ("model.vision_model.post_layernorm", "v.post_ln"),
        ("model.connector.modality_projection.proj", "mm.model.fc"),
    ],
    force: &[Force {
        on: On::Hf,
        contains: ".embeddings.",
        to: Forced::F32,
    }],
    plus_one: &[],
    temporal_split: &[],
    row_split: &[],
    model_type: None,
    // transformers' Idefics3VisionConfig.
    vision_defaults: &[
        ("hidden_size", "1152"),
        ("intermediate_size", "3072"),
        ("num_hidden_layers", "12"),
        ("num_attention_heads", "16"),
        ("image_size", "224"),
        ("patch_size", "32"),
        ("layer_norm_eps", "1e-06"),
    ],
    vision_aliases: &[],
    image_size_from_positions: false,
    permute_qk: false,
    break_token: None,
    keys: &[
        ClipKv::ProjectorType,
        ClipKv::LayerNormEps(Cfg::Vision, "layer_norm_eps", 1e-5),
        // Idefics3Config's default.
        ClipKv::TopScaleFactor(2),
        ClipKv::UseGelu,
        ClipKv::PreprocImageSize,
    ],
};

/// The base class's rule, after the family's: the patch embedding (and merger) F16 for an F16
/// output, else F32.
pub static BASE_FORCE: &[Force] = &[
    Force {
        on: On::Gguf,
        contains: ".patch_embd.weight",
        to: Forced::F16IfF16,
    },
    Force {
        on: On::Gguf,
        contains: ".patch_merger.weight",
        to: Forced::F16IfF16,
    },
];

/// The GGUF names `prepare_tensors` keeps F32 when nothing forced a type (the position
/// embeddings of the `clip` architecture).
pub static F32_NAMES: &[&str] = &["v.position_embd.weight", "a.position_embd.weight"];

/// A projector the reference refuses: the HF architectures, the vision towers (`vision_config`'s
/// `model_type`, transformers' default when absent) it converts for them, and its reason.
#[derive(Debug)]
pub struct Refusal {
    /// HF `architectures[0]` values.
    pub hf_archs: &'static [&'static str],
    /// The vision towers converted; any other is refused.
    pub towers: &'static [&'static str],
    /// The tower the config class builds when `vision_config` names none.
    pub default_tower: &'static str,
    /// Why (the reference's words, with the tower's type after them).
    pub reason: &'static str,
}

/// The projectors refused as the reference refuses them, before any weight is read.
pub static REFUSALS: &[Refusal] = &[
    Refusal {
        // conversion/llava.py `LlavaVisionModel.__init__`: only Pixtral towers.
        hf_archs: &["LlavaForConditionalGeneration"],
        towers: &["pixtral"],
        default_tower: "clip_vision_model",
        reason: LLAVA_REASON,
    },
    Refusal {
        hf_archs: &["Mistral3ForConditionalGeneration"],
        towers: &["pixtral"],
        // Mistral3Config's.
        default_tower: "pixtral",
        reason: LLAVA_REASON,
    },
];

/// Why a LLaVA / Mistral 3 release without a Pixtral tower is refused.
const LLAVA_REASON: &str = "the reference converter writes a LLaVA projector only for a Pixtral \
                            vision tower (\"Unsupported model type\")";

/// Refuses the release at `dir` (config.json `raw`) when its projector is one the reference
/// refuses ([`REFUSALS`]): [`Error::Refused`], exit 3.
fn refuse_tower(dir: &Path, hf_arch: &str, raw: &Value) -> Result<()> {
    let Some(r) = REFUSALS.iter().find(|r| r.hf_archs.contains(&hf_arch)) else {
        return Ok(());
    };
    let tower = raw
        .get("vision_config")
        .and_then(|v| v.get("model_type"))
        .and_then(Value::as_str)
        .unwrap_or(r.default_tower);
    if r.towers.contains(&tower) {
        return Ok(());
    }
    Err(Error::Refused {
        at: Location::file(dir.join("config.json")),
        reason: format!(
            "{}: vision tower `{}`",
            r.reason,
            weightport_core::sanitize(tower)
        ),
    })
}

/// The projector family of HF architecture `hf_arch`.
pub fn lookup(hf_arch: &str) -> Option<&'static ProjectorSpec> {
    PROJECTORS.iter().find(|s| s.hf_archs.contains(&hf_arch))
}

/// The HF architectures whose projector converts.
pub fn supported() -> Vec<&'static str> {
    PROJECTORS
        .iter()
        .flat_map(|s| s.hf_archs.iter().copied())
        .collect()
}

/// The merged processor configuration (`preprocessor_config.json`, its `media_proc_cfg` over
/// it, then `processor_config.json` and its `image_processor` over that, as the reference
/// merges them).
#[derive(Debug, Clone)]
pub struct Processor {
    /// The merged keys.
    pub cfg: Map<String, Value>,
    /// The file that gave the image mean and standard deviation (for messages).
    pub path: std::path::PathBuf,
}

impl Processor {
    /// Reads and merges the processor files of `dir`; refuses a release without them (the
    /// image mean and standard deviation are read there) and a garbled one.
    pub fn read(dir: &Path) -> Result<Processor> {
        let mut cfg = Map::new();
        let mut path = dir.join(PREPROCESSOR);
        let mut found = false;
        for (file, nested) in [
            (PREPROCESSOR, "media_proc_cfg"),
            (PROCESSOR, "image_processor"),
        ] {
            let p = dir.join(file);
            if !p.is_file() {
                continue;
            }
            let Value::Object(mut m) = read_json(&p)? else {
                return Err(bad(&p, "not a JSON object"));
            };
            if let Some(inner) = m.get(nested).cloned() {
                let Value::Object(inner) = inner else {
                    return Err(bad(&p, format!("`{nested}` is not a JSON object")));
                };
                m.extend(inner);
            }
            if m.contains_key("image_mean") {
                path = p.clone();
            }
            cfg.extend(m);
            found = true;
        }
        if !found {
            return Err(bad(
                &dir.join(PREPROCESSOR),
                "missing: a projector's image mean and standard deviation are read from it",
            ));
        }
        Ok(Processor { cfg, path })
    }

    /// `image_mean` or `image_std` as the reference writes it: an array of F32 (I32 when the
    /// first value is an integer).
    pub fn channels(&self, key: &str) -> Result<MetaValue> {
        let items = match self.cfg.get(key) {
            Some(Value::Array(a)) => a,
            Some(v) => return Err(bad(&self.path, format!("`{key}` is not a list: {v}"))),
            None => return Err(bad(&self.path, format!("lacks `{key}`"))),
        };
        if items.is_empty() || items.len() > MAX_CHANNELS {
            return Err(bad(
                &self.path,
                format!(
                    "`{key}` lists {} values (1 to {MAX_CHANNELS} expected)",
                    items.len()
                ),
            ));
        }
        let ints = items[0].is_i64() || items[0].is_u64();
        let values = items
            .iter()
            .map(|v| match v.as_f64() {
                Some(x) if !ints && x.is_finite() => Some(MetaValue::F32(x as f32)),
                Some(_) if ints => v
                    .as_i64()
                    .and_then(|i| i32::try_from(i).ok())
                    .map(MetaValue::I32),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                bad(
                    &self.path,
                    format!(
                        "`{key}` holds a value that is not a finite number of its first's type"
                    ),
                )
            })?;
        Ok(MetaValue::Array(values))
    }

    /// `size.longest_edge` of the processor configuration, `default` when absent.
    pub fn longest_edge(&self, default: u32) -> Result<u32> {
        let size = match self.cfg.get("size") {
            None => return Ok(default),
            Some(Value::Object(m)) => m,
            Some(v) => return Err(bad(&self.path, format!("`size` is not an object: {v}"))),
        };
        match size.get("longest_edge") {
            None => Ok(default),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| bad(&self.path, format!("`size.longest_edge` is not a u32: {v}"))),
        }
    }

    /// A positive integer of the processor configuration, `default` when absent.
    pub fn positive(&self, key: &str, default: u64) -> Result<u64> {
        match self.cfg.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v.as_u64().filter(|&n| n > 0).ok_or_else(|| {
                bad(
                    &self.path,
                    format!("`{key}` is not a positive integer: {v}"),
                )
            }),
        }
    }
}

/// The vision tower's hyper-parameters (`config.json`'s `vision_config`, the class defaults
/// filled), checked.
#[derive(Debug, Clone)]
pub struct Vision {
    /// The vision config.
    pub cfg: Map<String, Value>,
    /// `image_size`.
    pub image_size: u32,
    /// `patch_size`.
    pub patch_size: u32,
    /// `hidden_size`.
    pub hidden: u32,
    /// `intermediate_size`.
    pub feed_forward: u32,
    /// `num_hidden_layers`.
    pub blocks: u32,
    /// `num_attention_heads`.
    pub heads: u32,
    /// Where it was read (config.json).
    pub path: std::path::PathBuf,
}

impl Vision {
    /// Reads `vision_config` of the config.json at `path` (`raw`), fills the spec's defaults and
    /// aliases and checks every size against the caps.
    pub fn read(spec: &ProjectorSpec, raw: &Map<String, Value>, path: &Path) -> Result<Vision> {
        let mut cfg = match raw.get("vision_config") {
            Some(Value::Object(m)) => m.clone(),
            None | Some(Value::Null) => Map::new(),
            Some(v) => return Err(bad(path, format!("`vision_config` is not an object: {v}"))),
        };
        // Only absent keys: transformers keeps an explicit null (and the reference then fails).
        for (k, v) in spec.vision_defaults {
            if !cfg.contains_key(*k) {
                let v = serde_json::from_str(v).expect("a vision default is JSON");
                cfg.insert((*k).into(), v);
            }
        }
        for (k, from) in spec.vision_aliases {
            let v = cfg.get(*from).cloned().unwrap_or(Value::Null);
            cfg.insert((*k).into(), v);
        }
        // The key config.json names (an alias's source).
        let shown = |k: &str| -> String {
            let k = spec
                .vision_aliases
                .iter()
                .find(|(a, _)| *a == k)
                .map_or(k, |(_, from)| from);
            format!("vision_config.{k}")
        };
        let field = |cfg: &Map<String, Value>, k: &str, min: u64, max: u64| -> Result<u32> {
            let v = cfg.get(k).unwrap_or(&Value::Null);
            v.as_u64()
                .filter(|n| (min..=max).contains(n))
                .map(|n| n as u32)
                .ok_or_else(|| {
                    bad(
                        path,
                        format!(
                            "`{}` = {v}: an integer from {min} to {max} expected",
                            shown(k)
                        ),
                    )
                })
        };
        if spec.image_size_from_positions && !cfg.contains_key("image_size") {
            let positions = field(&cfg, "num_position_embeddings", 1, u32::MAX.into())?;
            let patch = field(&cfg, "patch_size", 1, MAX_IMAGE_SIDE)?;
            // Python's `int(num_pos ** 0.5 * patch_size)`.
            let side = (f64::from(positions).powf(0.5) * f64::from(patch)) as u64;
            cfg.insert("image_size".into(), Value::from(side));
        }
        let image_size = field(&cfg, "image_size", 1, MAX_IMAGE_SIDE)?;
        let v = Vision {
            image_size,
            patch_size: field(&cfg, "patch_size", 1, u64::from(image_size))?,
            hidden: field(&cfg, "hidden_size", 1, u32::MAX.into())?,
            feed_forward: field(&cfg, "intermediate_size", 1, u32::MAX.into())?,
            blocks: field(&cfg, "num_hidden_layers", 1, MAX_VISION_LAYERS)?,
            heads: field(&cfg, "num_attention_heads", 1, u32::MAX.into())?,
            cfg,
            path: path.to_path_buf(),
        };
        v.deepstack()?;
        Ok(v)
    }

    /// `deepstack_visual_indexes`: the vision layers whose features the deepstack mergers take
    /// (empty when absent), each below the layer count.
    pub fn deepstack(&self) -> Result<Vec<u32>> {
        let v = match self.cfg.get("deepstack_visual_indexes") {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(v) => v,
        };
        v.as_array()
            .filter(|a| a.len() <= self.blocks as usize)
            .and_then(|a| {
                a.iter()
                    .map(|i| i.as_u64().filter(|&i| i < u64::from(self.blocks)))
                    .map(|i| i.map(|i| i as u32))
                    .collect::<Option<Vec<u32>>>()
            })
            .ok_or_else(|| {
                bad(
                    &self.path,
                    format!(
                        "`vision_config.deepstack_visual_indexes` = {v}: vision layer indexes below {} expected",
                        self.blocks
                    ),
                )
            })
    }

    /// Qwen2.5-VL's window attention pattern: `fullatt_block_indexes[0] + 1`, every full
    /// attention block that step after the last.
    pub fn window_pattern(&self) -> Result<u32> {
        let v = self
            .cfg
            .get("fullatt_block_indexes")
            .unwrap_or(&Value::Null);
        let refuse = || {
            bad(
                &self.path,
                format!(
                    "`vision_config.fullatt_block_indexes` = {v}: vision layer indexes at a \
                     constant step from the first block expected"
                ),
            )
        };
        let idx = v
            .as_array()
            .filter(|a| !a.is_empty() && a.len() <= self.blocks as usize)
            .and_then(|a| {
                a.iter()
                    .map(|i| i.as_u64().filter(|&i| i < u64::from(self.blocks)))
                    .collect::<Option<Vec<u64>>>()
            })
            .ok_or_else(refuse)?;
        let step = idx[0] + 1;
        if idx.windows(2).any(|w| w[1].checked_sub(w[0]) != Some(step)) {
            return Err(refuse());
        }
        Ok(step as u32)
    }

    /// A float of the vision config, `default` when absent.
    pub fn float(&self, key: &str, default: f64) -> Result<f64> {
        match self.cfg.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| {
                bad(
                    &self.path,
                    format!("`vision_config.{key}` is not a number: {v}"),
                )
            }),
        }
    }
}

/// Refuses a release whose projector cannot be converted, reading only `config.json` and the
/// processor files: an architecture without a projector family, a missing or garbled
/// processor configuration, absurd sizes, a tower without layers.
pub fn check(dir: &Path) -> Result<&'static ProjectorSpec> {
    let spec = spec_of(dir)?;
    clip_kvs(spec, &Sources::read(dir, spec)?)?;
    Ok(spec)
}

/// [`check`] with `limits` applied to every file it reads.
pub fn check_within(
    dir: &Path,
    limits: &weightport_core::Limits,
) -> Result<&'static ProjectorSpec> {
    crate::config::with_limits(limits, || check(dir))
}

/// The projector family of the release in `dir` (its config.json's architecture).
pub(crate) fn spec_of(dir: &Path) -> Result<&'static ProjectorSpec> {
    let path = dir.join("config.json");
    let raw = read_json(&path)?;
    let hf_arch = crate::config::arch_of(&path, &raw)?;
    refuse_tower(dir, &hf_arch, &raw)?;
    lookup(&hf_arch).ok_or_else(|| Error::Unsupported {
        at: Location::file(dir.join("config.json")),
        format: Some(Format::Gguf),
        what: format!(
            "architecture `{}` has no multimodal projector weightport converts (supported: {})",
            weightport_core::sanitize(&hf_arch),
            supported().join(", ")
        ),
    })
}

/// What the keys are read from.
pub(crate) struct Sources {
    /// The text model's hyper-parameters (config.json with its text config class's defaults).
    pub(crate) hp: crate::HParams,
    /// The vision tower's.
    pub(crate) vision: Vision,
    /// The processor configuration.
    pub(crate) processor: Processor,
    /// config.json as saved (the reference's `global_config`: top-level keys the text config
    /// does not shadow).
    pub(crate) top: Map<String, Value>,
}

/// The text config defaults when the text model's architecture is not one weightport converts
/// (LLaVA, Idefics3): the projector reads only the text width, which the releases' `text_config`
/// holds.
const NO_TEXT_DEFAULTS: crate::table::ConfigDefaults = crate::table::ConfigDefaults {
    values: &[],
    kv_heads: crate::table::KvHeadsDefault::Absent,
    head_dim: crate::table::HeadDimDefault::Absent,
    rope_theta: None,
    local_rope_theta: None,
};

impl Sources {
    /// Reads config.json and the processor files of `dir`.
    pub(crate) fn read(dir: &Path, spec: &ProjectorSpec) -> Result<Sources> {
        let hf_arch = crate::hf_architecture(dir)?;
        let defaults = crate::table::lookup(&hf_arch).map_or(&NO_TEXT_DEFAULTS, |t| &t.config);
        let hp = crate::HParams::load(dir, defaults)?;
        // The release's own keys (the text config's are merged over them in `hp`).
        let Value::Object(top) = read_json(&hp.path)? else {
            return Err(bad(&hp.path, "config.json is not a JSON object"));
        };
        if let Some(want) = spec.model_type {
            let got = top.get("model_type").and_then(Value::as_str);
            if got != Some(want) {
                return Err(Error::Unsupported {
                    at: Location::file(&hp.path),
                    format: Some(Format::Gguf),
                    what: format!(
                        "`model_type` {}: the `{}` projector is written for `{want}` releases",
                        got.map_or("absent".into(), |g| format!(
                            "`{}`",
                            weightport_core::sanitize(g)
                        )),
                        spec.projector_type
                    ),
                });
            }
        }
        let vision = Vision::read(spec, &hp.raw, &hp.path)?;
        if let Some(token) = spec.break_token {
            find_added_token(dir, token)?;
        }
        let processor = Processor::read(dir)?;
        Ok(Sources {
            hp,
            vision,
            processor,
            top,
        })
    }

    /// A u32 of config.json's top level, `default` when absent (`None`: absent).
    fn top_u32(&self, key: &str, default: Option<u32>) -> Result<Option<u32>> {
        match self.top.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| bad(&self.hp.path, format!("`{key}` is not a u32: {v}"))),
        }
    }
}

/// The added token `token` of the tokenizer in `dir`, looked up as the reference's
/// `LlavaVisionModel.get_token_id` does (tokenizer_config.json's `added_tokens_decoder`, then
/// tokenizer.json's `added_tokens`); refused when neither holds it, as the reference stops.
fn find_added_token(dir: &Path, token: &str) -> Result<()> {
    let config = dir.join("tokenizer_config.json");
    if !config.is_file() {
        return Err(bad(
            &config,
            format!("missing: the reference converter looks `{token}` up in its added tokens"),
        ));
    }
    let decoder = match read_json(&config)?.get("added_tokens_decoder") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(v) => {
            return Err(bad(
                &config,
                format!("`added_tokens_decoder` is not an object: {v}"),
            ))
        }
    };
    let holds = |v: &Value| v.get("content").and_then(Value::as_str) == Some(token);
    if decoder.values().any(holds) {
        return Ok(());
    }
    let json = dir.join("tokenizer.json");
    let found = match read_json(&json)?.get("added_tokens") {
        Some(Value::Array(a)) => a.iter().any(holds),
        _ => return Err(bad(&json, "`added_tokens` is not a list")),
    };
    if found {
        return Ok(());
    }
    Err(bad(
        &json,
        format!(
            "the added tokens (here and in tokenizer_config.json) hold no `{token}`: the \
             reference converter looks it up for this projector and stops without it"
        ),
    ))
}

/// The keys from `clip.has_vision_encoder` to the family's last (`MmprojModel` and the
/// family's `set_gguf_parameters`, after `general.file_type`).
pub(crate) fn clip_kvs(spec: &ProjectorSpec, s: &Sources) -> Result<Vec<(String, MetaValue)>> {
    let (v, p) = (&s.vision, &s.processor);
    let text_hidden = s.hp.need_u32(&["hidden_size", "n_embd"])?;
    let mut kv: Vec<(String, MetaValue)> = Vec::new();
    let mut put = |k: &str, v: MetaValue| kv.push((k.to_owned(), v));
    put("clip.has_vision_encoder", MetaValue::Bool(true));
    put("clip.vision.projection_dim", MetaValue::U32(text_hidden));
    put("clip.vision.image_size", MetaValue::U32(v.image_size));
    put("clip.vision.patch_size", MetaValue::U32(v.patch_size));
    put("clip.vision.embedding_length", MetaValue::U32(v.hidden));
    put(
        "clip.vision.feed_forward_length",
        MetaValue::U32(v.feed_forward),
    );
    put("clip.vision.block_count", MetaValue::U32(v.blocks));
    put("clip.vision.attention.head_count", MetaValue::U32(v.heads));
    put("clip.vision.image_mean", p.channels("image_mean")?);
    put("clip.vision.image_std", p.channels("image_std")?);
    for key in spec.keys {
        if let Some((k, value)) = family_kv(spec, s, *key)? {
            put(k, value);
        }
    }
    Ok(kv)
}

/// One of the family's keys (`None`: not written for this release).
fn family_kv(
    spec: &ProjectorSpec,
    s: &Sources,
    key: ClipKv,
) -> Result<Option<(&'static str, MetaValue)>> {
    let (v, p) = (&s.vision, &s.processor);
    Ok(match key {
        ClipKv::ProjectorType => Some((
            "clip.projector_type",
            MetaValue::Str(spec.projector_type.into()),
        )),
        ClipKv::LayerNormEps(cfg, k, default) => {
            let eps = match cfg {
                Cfg::Vision => v.float(k, default)?,
                Cfg::Text => s.hp.float(&[k])?.unwrap_or(default),
            };
            Some((
                "clip.vision.attention.layer_norm_epsilon",
                MetaValue::F32(eps as f32),
            ))
        }
        ClipKv::SpatialMergeSize => match v.cfg.get("spatial_merge_size") {
            None | Some(Value::Null) => None,
            Some(n) => {
                let n = n
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| {
                        bad(
                            &v.path,
                            format!("`vision_config.spatial_merge_size` is not a u32: {n}"),
                        )
                    })?;
                Some(("clip.vision.spatial_merge_size", MetaValue::U32(n)))
            }
        },
        ClipKv::DeepstackLayers => {
            let ds = v.deepstack()?;
            let flags = (0..v.blocks).map(|b| MetaValue::Bool(ds.contains(&b)));
            Some((
                "clip.vision.is_deepstack_layers",
                MetaValue::Array(flags.collect()),
            ))
        }
        ClipKv::UseGelu => Some(("clip.use_gelu", MetaValue::Bool(true))),
        ClipKv::UseSilu => Some(("clip.use_silu", MetaValue::Bool(true))),
        ClipKv::WindowAttentionPattern => Some((
            "clip.vision.n_wa_pattern",
            MetaValue::U32(v.window_pattern()?),
        )),
        ClipKv::SiluOrGelu => match v.cfg.get("hidden_act").and_then(Value::as_str) {
            Some("silu") => Some(("clip.use_silu", MetaValue::Bool(true))),
            Some("gelu") => Some(("clip.use_gelu", MetaValue::Bool(true))),
            _ => {
                let act = v.cfg.get("hidden_act").unwrap_or(&Value::Null);
                return Err(Error::Unsupported {
                    at: Location::file(&v.path),
                    format: Some(Format::Gguf),
                    what: format!(
                        "`vision_config.hidden_act` = {}: the reference converter writes a \
                         `silu` or `gelu` tower (\"Unsupported hidden_act\")",
                        weightport_core::sanitize(&act.to_string())
                    ),
                });
            }
        },
        ClipKv::TopSpatialMergeSize(default) => s
            .top_u32("spatial_merge_size", default)?
            .map(|n| ("clip.vision.spatial_merge_size", MetaValue::U32(n))),
        ClipKv::TopScaleFactor(default) => s
            .top_u32("scale_factor", Some(default))?
            .map(|n| ("clip.vision.projector.scale_factor", MetaValue::U32(n))),
        ClipKv::PreprocImageSize => Some((
            "clip.vision.preproc_image_size",
            MetaValue::U32(p.longest_edge(v.image_size)?),
        )),
        ClipKv::Gemma3ScaleFactor => {
            let seq = p.positive("image_seq_length", 256)?;
            // Python's `int(image_seq_length ** 0.5)`.
            let per_side = (seq as f64).powf(0.5) as u64;
            let factor = (u64::from(v.image_size) / u64::from(v.patch_size))
                .checked_div(per_side)
                .unwrap_or(0);
            (factor > 0 && factor != 4).then_some((
                "clip.vision.projector.scale_factor",
                MetaValue::U32(factor as u32),
            ))
        }
    })
}
