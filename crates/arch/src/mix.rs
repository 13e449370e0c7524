//! llama-quantize's type selection ("mixes"): which ggml type each tensor of a GGUF model gets
//! for a target file type such as Q4_K_M, so that our output equals `llama-quantize IN OUT TYPE`
//! tensor for tensor (docs/specs/gguf.md §4, llama.cpp `src/llama-quant.cpp` of the pinned sdist).
//!
//! The decision runs at plan time, over the tensors in llama-quantize's order (non-block tensors
//! first, then `blk.0.*`, `blk.1.*`…, names sorted inside each group: [`quantize_order`]),
//! because per-category counters (the i-th attn_v, the i-th ffn_down) take part in it:
//! 1. tensors that may not be quantized (1-D, not `*weight`, `*_norm.weight`, `output.weight`
//!    with `--leave-output-tensor`, BERT position/token-type embeddings, …) keep their type;
//! 2. `--token-embedding-type` / `--output-tensor-type`, then `--tensor-type REGEX=TYPE`;
//! 3. unless `--pure`, the per-category rules of the mix;
//! 4. always the fallback when the row length is not a multiple of the chosen block.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use regex::Regex;
use weightport_core::{CastRule, DType, Error, Format, MetaValue, Metadata, Result};

/// A target file type (`general.file_type`).
#[allow(non_camel_case_types, missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ftype {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q3_K_S,
    Q3_K_M,
    Q3_K_L,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
    Q2_K_S,
    IQ1_S,
    IQ1_M,
    IQ2_XXS,
    IQ2_XS,
    IQ2_S,
    IQ2_M,
    IQ3_XXS,
    IQ3_XS,
    IQ3_S,
    IQ3_M,
    IQ4_NL,
    IQ4_XS,
}

const NAMES: &[(&str, Ftype, u32)] = &[
    ("F32", Ftype::F32, 0),
    ("F16", Ftype::F16, 1),
    ("BF16", Ftype::BF16, 32),
    ("Q4_0", Ftype::Q4_0, 2),
    ("Q4_1", Ftype::Q4_1, 3),
    ("Q8_0", Ftype::Q8_0, 7),
    ("Q5_0", Ftype::Q5_0, 8),
    ("Q5_1", Ftype::Q5_1, 9),
    ("Q2_K", Ftype::Q2_K, 10),
    ("Q3_K_S", Ftype::Q3_K_S, 11),
    ("Q3_K_M", Ftype::Q3_K_M, 12),
    ("Q3_K", Ftype::Q3_K_M, 12),
    ("Q3_K_L", Ftype::Q3_K_L, 13),
    ("Q4_K_S", Ftype::Q4_K_S, 14),
    ("Q4_K_M", Ftype::Q4_K_M, 15),
    ("Q4_K", Ftype::Q4_K_M, 15),
    ("Q5_K_S", Ftype::Q5_K_S, 16),
    ("Q5_K_M", Ftype::Q5_K_M, 17),
    ("Q5_K", Ftype::Q5_K_M, 17),
    ("Q6_K", Ftype::Q6_K, 18),
    ("IQ2_XXS", Ftype::IQ2_XXS, 19),
    ("IQ2_XS", Ftype::IQ2_XS, 20),
    ("Q2_K_S", Ftype::Q2_K_S, 21),
    ("IQ3_XS", Ftype::IQ3_XS, 22),
    ("IQ3_XXS", Ftype::IQ3_XXS, 23),
    ("IQ1_S", Ftype::IQ1_S, 24),
    ("IQ4_NL", Ftype::IQ4_NL, 25),
    ("IQ3_S", Ftype::IQ3_S, 26),
    ("IQ3_M", Ftype::IQ3_M, 27),
    ("IQ2_S", Ftype::IQ2_S, 28),
    ("IQ2_M", Ftype::IQ2_M, 29),
    ("IQ4_XS", Ftype::IQ4_XS, 30),
    ("IQ1_M", Ftype::IQ1_M, 31),
];

impl Ftype {
    /// Parses a name as llama-quantize does (case-insensitive; `Q4_K` = `Q4_K_M`).
    pub fn parse(s: &str) -> Result<Ftype> {
        NAMES
            .iter()
            .find(|(n, _, _)| n.eq_ignore_ascii_case(s))
            .map(|(_, f, _)| *f)
            .ok_or_else(|| {
                let known: Vec<&str> = NAMES.iter().map(|(n, _, _)| *n).collect();
                Error::Usage(format!(
                    "{} {s}: unknown type (known: {})",
                    weightport_core::Knob::Quant,
                    known.join(", ")
                ))
            })
    }

    /// The canonical name.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(_, f, _)| *f == self)
            .map(|(n, _, _)| *n)
            .unwrap_or("?")
    }

    /// `general.file_type` (LlamaFileType).
    pub fn file_type(self) -> u32 {
        NAMES
            .iter()
            .find(|(_, f, _)| *f == self)
            .map(|(_, _, id)| *id)
            .unwrap_or(0)
    }

    /// The type most tensors get (`llama_ftype_get_default_type`).
    pub fn default_type(self) -> DType {
        match self {
            Ftype::F32 => DType::F32,
            Ftype::F16 => DType::F16,
            Ftype::BF16 => DType::BF16,
            Ftype::Q4_0 => DType::Q4_0,
            Ftype::Q4_1 => DType::Q4_1,
            Ftype::Q5_0 => DType::Q5_0,
            Ftype::Q5_1 => DType::Q5_1,
            Ftype::Q8_0 => DType::Q8_0,
            Ftype::Q2_K | Ftype::Q2_K_S => DType::Q2_K,
            Ftype::IQ3_XS | Ftype::IQ3_S | Ftype::IQ3_M => DType::IQ3_S,
            Ftype::IQ2_XXS => DType::IQ2_XXS,
            Ftype::IQ2_XS | Ftype::IQ2_S => DType::IQ2_XS,
            Ftype::IQ2_M => DType::IQ2_S,
            Ftype::IQ3_XXS => DType::IQ3_XXS,
            Ftype::IQ1_S => DType::IQ1_S,
            Ftype::IQ1_M => DType::IQ1_M,
            Ftype::IQ4_NL => DType::IQ4_NL,
            Ftype::IQ4_XS => DType::IQ4_XS,
            Ftype::Q3_K_S | Ftype::Q3_K_M | Ftype::Q3_K_L => DType::Q3_K,
            Ftype::Q4_K_S | Ftype::Q4_K_M => DType::Q4_K,
            Ftype::Q5_K_S | Ftype::Q5_K_M => DType::Q5_K,
            Ftype::Q6_K => DType::Q6_K,
        }
    }

    /// The file types of llama-quantize's own branch for the lowest bit rates (IQ1_S, IQ1_M,
    /// IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M).
    pub fn is_low_bit(self) -> bool {
        use Ftype as F;
        matches!(
            self,
            F::IQ2_XXS | F::IQ2_XS | F::IQ1_S | F::IQ2_S | F::IQ2_M | F::IQ1_M
        )
    }
}

/// `tensor_requires_imatrix`: llama-quantize refuses to write `name` as `to` in a `ftype`
/// file without importance data (the IQ1, IQ2 and IQ3_XXS types, and Q2_K in a Q2_K_S file;
/// never `token_embd.weight`, `per_layer_token_embd.weight` or `output.weight`).
pub fn requires_imatrix(name: &str, to: DType, ftype: Ftype) -> bool {
    if matches!(
        name,
        "token_embd.weight" | "per_layer_token_embd.weight" | "output.weight"
    ) {
        return false;
    }
    match to {
        DType::IQ3_XXS
        | DType::IQ2_XXS
        | DType::IQ2_XS
        | DType::IQ2_S
        | DType::IQ1_M
        | DType::IQ1_S => true,
        DType::Q2_K => ftype == Ftype::Q2_K_S,
        _ => false,
    }
}

/// One tensor as the mix sees it (GGUF name, row length `ne[0]`, dimensions, current type).
#[derive(Debug, Clone)]
pub struct MixTensor {
    /// GGUF name (`blk.3.attn_v.weight`).
    pub name: String,
    /// Row length (`ne[0]`, the innermost dimension).
    pub ne0: u64,
    /// `ggml_n_dims`: dimensions without trailing 1s (at least 1).
    pub n_dims: usize,
    /// The current type.
    pub dtype: DType,
}

/// `--quant` and llama-quantize's other options.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct QuantOptions {
    /// The target file type (`Q4_K_M`, …).
    pub ftype: Ftype,
    /// `--pure`.
    pub pure: bool,
    /// `--tensor-type REGEX=TYPE`.
    pub tensor_types: Vec<(Regex, DType)>,
    /// `--output-tensor-type`.
    pub output_type: Option<DType>,
    /// `--token-embedding-type`.
    pub token_embd_type: Option<DType>,
    /// `--leave-output-tensor`.
    pub leave_output: bool,
    /// `--allow-requantize`.
    pub allow_requantize: bool,
    /// `--imatrix` (after `--include-weights`/`--exclude-weights`).
    pub imatrix: Option<Arc<Importance>>,
    /// A dry run: a tensor that llama-quantize would refuse to write without importance data
    /// is planned anyway (and listed), as `llama-quantize --dry-run` does.
    pub dry_run: bool,
}

impl QuantOptions {
    /// The file type `ftype` with llama-quantize's defaults for everything else (no
    /// overrides, no importance matrix, no requantizing).
    pub fn new(ftype: Ftype) -> Self {
        QuantOptions {
            ftype,
            pure: false,
            tensor_types: Vec::new(),
            output_type: None,
            token_embd_type: None,
            leave_output: false,
            allow_requantize: false,
            imatrix: None,
            dry_run: false,
        }
    }
}

/// An importance matrix as llama-quantize uses it: the weights by tensor name (normalised by
/// the reader, filtered by `--include-weights`/`--exclude-weights`) and what it records in the
/// output's metadata.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Importance {
    /// Weights by GGUF tensor name: `ne[0] × n_expert` values.
    pub weights: BTreeMap<String, Arc<[f32]>>,
    /// The path as given on the command line (`quantize.imatrix.file`).
    pub file: String,
    /// The file it was read from (a material of the output's provenance).
    pub path: std::path::PathBuf,
    /// The first dataset it was computed on (`quantize.imatrix.dataset`).
    pub dataset: Option<String>,
    /// Chunks it was computed on (`quantize.imatrix.chunks_count`, when positive).
    pub chunks: i64,
}

/// One tensor as the type mix sees it: its output name, shape (outermost first) and the type
/// it would otherwise be written as.
#[derive(Debug, Clone, Copy)]
pub struct TypedTensor<'a> {
    /// Output name.
    pub name: &'a str,
    /// Shape, outermost first.
    pub shape: &'a [u64],
    /// Type before `--quant`.
    pub dtype: DType,
}

/// What `--quant` makes of a set of tensors: llama-quantize's output order (indices into the
/// input), each tensor's type (by input index) and the fallback note of each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypePlan {
    /// Indices of the input tensors in llama-quantize's order.
    pub order: Vec<usize>,
    /// The type each input tensor is written as.
    pub types: Vec<DType>,
    /// Why a tensor got another type than the file type's (llama-quantize's fallbacks).
    pub notes: Vec<Option<String>>,
}

/// llama-quantize's order and type mix for `tensors` of a model whose GGUF metadata is
/// `meta`: the whole of `--quant`'s per-tensor policy, in one call.
pub fn plan_types(tensors: &[TypedTensor], meta: &Metadata, q: &QuantOptions) -> TypePlan {
    let names: Vec<String> = tensors.iter().map(|t| t.name.to_owned()).collect();
    let refs: Vec<&str> = tensors.iter().map(|t| t.name).collect();
    let order = quantize_order(&refs);
    let input: Vec<MixTensor> = order
        .iter()
        .map(|&i| MixTensor {
            name: names[i].clone(),
            ne0: tensors[i].shape.last().copied().unwrap_or(1),
            n_dims: ggml_n_dims(tensors[i].shape),
            dtype: tensors[i].dtype,
        })
        .collect();
    let facts = ModelFacts::read(meta, &names);
    let params = MixParams {
        ftype: q.ftype,
        pure: q.pure,
        tensor_types: q.tensor_types.clone(),
        output_type: q.output_type,
        token_embd_type: q.token_embd_type,
        leave_output: q.leave_output,
        n_layer: facts.n_layer,
        n_gqa: facts.n_gqa,
        n_expert: facts.n_expert,
        arch: facts.arch,
        has_imatrix: q.imatrix.as_ref().is_some_and(|m| !m.weights.is_empty()),
    };
    let mut types: Vec<DType> = tensors.iter().map(|t| t.dtype).collect();
    let mut notes = vec![None; tensors.len()];
    for (&i, c) in order.iter().zip(choose(&input, &params)) {
        types[i] = c.dtype;
        notes[i] = c.note;
    }
    TypePlan {
        order,
        types,
        notes,
    }
}

/// The user's choices and the model facts the rules need.
#[derive(Debug, Clone)]
pub struct MixParams {
    /// Target file type.
    pub ftype: Ftype,
    /// `--pure`: every quantizable tensor gets the default type (fallbacks still apply).
    pub pure: bool,
    /// `--tensor-type REGEX=TYPE`, first match wins.
    pub tensor_types: Vec<(Regex, DType)>,
    /// `--output-tensor-type`.
    pub output_type: Option<DType>,
    /// `--token-embedding-type`.
    pub token_embd_type: Option<DType>,
    /// `--leave-output-tensor`.
    pub leave_output: bool,
    /// `general.architecture`.
    pub arch: String,
    /// `{arch}.block_count`.
    pub n_layer: usize,
    /// `head_count / head_count_kv`.
    pub n_gqa: u32,
    /// `{arch}.expert_count` (0 or 1 for dense models).
    pub n_expert: u32,
    /// An importance matrix with at least one entry was given (`qs.has_imatrix`).
    pub has_imatrix: bool,
}

/// The model facts llama-quantize's rules need, read from GGUF metadata as llama-quantize reads
/// them (`general.architecture`, `{arch}.block_count`, the head counts, `{arch}.expert_count`),
/// with the layer count from `blk.N.` names when the metadata has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFacts {
    /// `general.architecture` (`llama` when absent).
    pub arch: String,
    /// Number of blocks.
    pub n_layer: usize,
    /// `head_count / head_count_kv`.
    pub n_gqa: u32,
    /// Experts per MoE layer (0 for dense models).
    pub n_expert: u32,
}

fn meta_u64(m: &Metadata, key: &str) -> Option<u64> {
    match m.get(key)? {
        MetaValue::U32(v) => Some(u64::from(*v)),
        MetaValue::U64(v) => Some(*v),
        MetaValue::I32(v) => u64::try_from(*v).ok(),
        MetaValue::I64(v) => u64::try_from(*v).ok(),
        _ => None,
    }
}

impl ModelFacts {
    /// The facts of a model with metadata `meta` and tensor names `names`.
    pub fn read(meta: &Metadata, names: &[String]) -> ModelFacts {
        let arch = meta
            .get("general.architecture")
            .and_then(MetaValue::as_str)
            .unwrap_or("llama")
            .to_string();
        let key = |k: &str| meta_u64(meta, &format!("{arch}.{k}"));
        let layers_by_name = names
            .iter()
            .filter_map(|n| {
                n.strip_prefix("blk.")?
                    .split('.')
                    .next()?
                    .parse::<usize>()
                    .ok()
            })
            .max()
            .map_or(0, |m| m + 1);
        let heads = key("attention.head_count").unwrap_or(1).max(1);
        let kv_heads = key("attention.head_count_kv").unwrap_or(heads).max(1);
        ModelFacts {
            n_layer: key("block_count").map_or(layers_by_name, |v| v as usize),
            n_gqa: (heads / kv_heads) as u32,
            n_expert: key("expert_count").unwrap_or(0) as u32,
            arch,
        }
    }
}

/// What llama-quantize rewrites: a GGUF file. Its output follows the convention of a rewritten
/// GGUF source (llama.cpp's C writer drops the trailing 1s of `ne`: Qwen2-MoE's
/// `ffn_gate_inp_shexp`, `[64, 1]` in the converter's file, is `[64]` after llama-quantize), so a
/// one-pass `--quant` output is planned as a rewrite of this format.
pub const QUANTIZE_REWRITES: Format = Format::Gguf;

/// The float conversions llama-quantize makes (F16 targets and fallbacks: ggml's
/// `ggml_fp32_to_fp16_row`, `sign | 0x7E00` for every NaN).
pub const QUANTIZE_CASTS: CastRule = CastRule::Ggml;

/// llama-quantize's edits of the metadata it copies: the split keys removed, then
/// `general.quantization_version` and `general.file_type` set last, then (with an importance
/// matrix that has entries) its `quantize.imatrix.*` keys, strings cut to 127 bytes as its
/// fixed-size override buffers cut them.
pub fn quantized_metadata(m: &mut Metadata, q: &QuantOptions) {
    for k in ["split.no", "split.count", "split.tensors.count"] {
        m.remove(k);
    }
    m.push_last("general.quantization_version", MetaValue::U32(2));
    m.push_last("general.file_type", MetaValue::U32(q.ftype.file_type()));
    let Some(im) = q.imatrix.as_ref().filter(|m| !m.weights.is_empty()) else {
        return;
    };
    let cut = |s: &str| -> MetaValue {
        let b = &s.as_bytes()[..s.len().min(127)];
        match std::str::from_utf8(b) {
            Ok(v) => MetaValue::Str(v.to_string()),
            Err(_) => MetaValue::Bytes(b.to_vec()),
        }
    };
    m.push_last("quantize.imatrix.file", cut(&im.file));
    if let Some(d) = &im.dataset {
        m.push_last("quantize.imatrix.dataset", cut(d));
    }
    m.push_last(
        "quantize.imatrix.entries_count",
        MetaValue::U32(im.weights.len() as u32),
    );
    if im.chunks > 0 {
        m.push_last(
            "quantize.imatrix.chunks_count",
            MetaValue::U32(im.chunks as u32),
        );
    }
}

/// llama-quantize refuses to requantize a tensor of the converter's file that is already of a
/// block type (GPT-OSS's MXFP4 experts) into another type ("requantizing from type … is
/// disabled" without `--allow-requantize`).
pub fn requantize_refused(from: DType, to: DType) -> bool {
    from != to && !matches!(from, DType::F32 | DType::F16 | DType::BF16)
}

/// Refuses, as llama-quantize does, a `--quant` plan that would requantize a tensor the converter
/// wrote in a block type: `tensors` are (name, type before `--quant`), `types` the plan's.
pub fn check_requantize(dir: &Path, tensors: &[(&str, DType)], types: &[DType]) -> Result<()> {
    let Some(((name, from), to)) = tensors
        .iter()
        .zip(types)
        .find(|((_, from), to)| requantize_refused(*from, **to))
    else {
        return Ok(());
    };
    Err(Error::Unsupported {
        at: weightport_core::Location::file(dir).tensor(*name),
        format: Some(Format::Gguf),
        what: format!(
            "{} would requantize this {from} tensor to {to}, which llama-quantize refuses \
             (requantizing is disabled without {}); convert with {}",
            weightport_core::Knob::Quant,
            weightport_core::Knob::AllowRequantize,
            weightport_core::Knob::Dtype
        ),
    })
}

/// ggml's `n_dims` of a tensor with numpy-order `shape`: dimensions without the trailing 1s of
/// `ne` (leading 1s of the shape), at least one.
pub fn ggml_n_dims(shape: &[u64]) -> usize {
    let leading_ones = shape.iter().take_while(|&&d| d == 1).count();
    (shape.len() - leading_ones).max(1)
}

/// The decision for one tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The type it is written as.
    pub dtype: DType,
    /// Why it is not the default, when a fallback changed it.
    pub note: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cat {
    Output,
    TokenEmbd,
    Qkv,
    KvB,
    V,
    K,
    Q,
    AttnOut,
    Up,
    Gate,
    Down,
    Other,
}

fn category(name: &str) -> Cat {
    if name == "output.weight" {
        return Cat::Output;
    }
    if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
        return Cat::TokenEmbd;
    }
    const SUBSTR: &[(&str, Cat)] = &[
        ("attn_qkv.weight", Cat::Qkv),
        ("attn_kv_b.weight", Cat::KvB),
        ("attn_v.weight", Cat::V),
        ("attn_k.weight", Cat::K),
        ("attn_q.weight", Cat::Q),
        ("attn_output.weight", Cat::AttnOut),
        ("ffn_up", Cat::Up),
        ("ffn_gate", Cat::Gate),
        ("ffn_down", Cat::Down),
    ];
    SUBSTR
        .iter()
        .find(|(s, _)| name.contains(s))
        .map_or(Cat::Other, |(_, c)| *c)
}

fn is_attn_v(c: Cat) -> bool {
    matches!(c, Cat::V | Cat::Qkv | Cat::KvB)
}

/// `tensor_allows_quantization` for the dense architectures weightport writes.
fn allows_quantization(t: &MixTensor, p: &MixParams) -> bool {
    const NEVER: &[&str] = &[
        "_norm.weight",
        "ffn_gate_inp.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "attn_rel_b.weight",
        ".position_embd",
        ".patch_embd",
    ];
    t.n_dims >= 2
        && t.name.ends_with("weight")
        && !NEVER.iter().any(|n| t.name.contains(n))
        && !(p.leave_output && t.name == "output.weight")
        && t.name != "position_embd.weight"
        && t.name != "token_types.weight"
}

fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i as i64 - (n / 8) as i64) % 3 == 2
}

struct Counters {
    n_attention_wv: usize,
    i_attention_wv: usize,
    i_ffn_down: usize,
    i_ffn_gate: usize,
    i_ffn_up: usize,
    tied: bool,
}

/// The per-category rules (`llama_tensor_get_type_impl`): the branch of the first of its
/// conditions that holds, as in llama.cpp's chain of `else if`s.
fn mix_rule(t: &MixTensor, cat: Cat, p: &MixParams, c: &mut Counters, ty: DType) -> DType {
    if cat == Cat::Output || (c.tied && cat == Cat::TokenEmbd) {
        return output_rule(t, p, ty);
    }
    if cat == Cat::TokenEmbd {
        return token_embd_rule(p, ty);
    }
    if p.ftype.is_low_bit() {
        return low_bit_rule(cat, p, c, ty);
    }
    match cat {
        _ if is_attn_v(cat) => attn_v_rule(p, c, ty),
        Cat::K => attn_k_rule(p, ty),
        Cat::Q => match p.ftype {
            Ftype::IQ3_XS => DType::IQ3_XXS,
            Ftype::IQ3_XXS => DType::IQ2_S,
            _ => ty,
        },
        Cat::Down => ffn_down_rule(t, p, c, ty),
        Cat::AttnOut => attn_out_rule(p, ty),
        Cat::Gate | Cat::Up => {
            let counter = if cat == Cat::Gate {
                &mut c.i_ffn_gate
            } else {
                &mut c.i_ffn_up
            };
            let (i, n) = layer_info(t, p, *counter);
            *counter += 1;
            if p.ftype == Ftype::IQ3_XS && i >= n / 8 && i < 7 * n / 8 {
                DType::IQ3_XXS
            } else {
                ty
            }
        }
        _ => ty,
    }
}

/// `output.weight`, and `token_embd.weight` of a model that ties it to the output.
fn output_rule(t: &MixTensor, p: &MixParams, ty: DType) -> DType {
    if let Some(o) = p.output_type {
        return o;
    }
    let blk = u64::from(block_elems(ty));
    if p.arch == "falcon" || !t.ne0.is_multiple_of(blk) {
        DType::Q8_0
    } else if p.ftype.is_low_bit() || p.ftype == Ftype::IQ3_XXS {
        DType::Q5_K
    } else if ty != DType::Q8_0 {
        DType::Q6_K
    } else {
        ty
    }
}

fn token_embd_rule(p: &MixParams, ty: DType) -> DType {
    use Ftype as F;
    if let Some(e) = p.token_embd_type {
        return e;
    }
    match p.ftype {
        F::IQ2_XXS | F::IQ2_XS | F::IQ1_S | F::IQ1_M => DType::Q2_K,
        F::IQ2_S | F::IQ2_M | F::IQ3_XXS => DType::IQ3_S,
        _ => ty,
    }
}

/// IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M: their own branch.
fn low_bit_rule(cat: Cat, p: &MixParams, c: &mut Counters, ty: DType) -> DType {
    use Ftype as F;
    let s_or_m = matches!(p.ftype, F::IQ2_S | F::IQ2_M);
    if is_attn_v(cat) {
        c.i_attention_wv += 1;
        return if p.n_gqa >= 4 || p.n_expert >= 4 {
            DType::Q4_K
        } else if s_or_m {
            DType::IQ3_S
        } else {
            DType::Q2_K
        };
    }
    match cat {
        Cat::K if p.n_expert == 8 => DType::Q4_K,
        Cat::Down => {
            let first = c.i_ffn_down < p.n_layer / 8;
            c.i_ffn_down += 1;
            match (first, s_or_m) {
                (true, true) => DType::IQ3_S,
                (true, false) => DType::Q2_K,
                _ => ty,
            }
        }
        Cat::AttnOut if p.n_expert == 8 => DType::Q5_K,
        Cat::AttnOut if matches!(p.ftype, F::IQ1_S | F::IQ1_M) => DType::IQ2_XXS,
        Cat::AttnOut if s_or_m => DType::IQ3_S,
        _ => ty,
    }
}

fn attn_v_rule(p: &MixParams, c: &mut Counters, mut ty: DType) -> DType {
    use Ftype as F;
    let gqa4 = p.n_gqa >= 4;
    ty = match p.ftype {
        F::Q2_K if gqa4 => DType::Q4_K,
        F::Q2_K => DType::Q3_K,
        F::Q2_K_S if gqa4 => DType::Q4_K,
        F::Q2_K_S => ty,
        F::IQ3_XXS if gqa4 => DType::Q4_K,
        F::IQ3_XXS if !p.has_imatrix => DType::IQ3_S,
        F::IQ3_XXS => DType::IQ3_XXS,
        F::IQ3_XS | F::IQ3_S if gqa4 => DType::Q4_K,
        F::IQ3_M => DType::Q4_K,
        F::Q3_K_M if c.i_attention_wv < 2 => DType::Q5_K,
        F::Q3_K_M => DType::Q4_K,
        F::Q3_K_L => DType::Q5_K,
        F::IQ4_NL | F::IQ4_XS if gqa4 => DType::Q5_K,
        F::Q4_K_M | F::Q5_K_M if use_more_bits(c.i_attention_wv, c.n_attention_wv) => DType::Q6_K,
        F::Q4_K_S if c.i_attention_wv < 4 => DType::Q5_K,
        _ => ty,
    };
    if p.n_expert == 8 {
        ty = DType::Q8_0;
    }
    c.i_attention_wv += 1;
    ty
}

fn attn_k_rule(p: &MixParams, ty: DType) -> DType {
    match p.ftype {
        _ if p.n_expert == 8 => DType::Q8_0,
        Ftype::IQ3_XS => DType::IQ3_XXS,
        Ftype::IQ3_XXS => DType::IQ2_S,
        _ => ty,
    }
}

/// `layer_info`: with experts the layer is read from the name (`blk.N.`), since a layer may
/// hold several ffn tensors (a shared expert's and the experts'); the layer count is the
/// model's.
fn layer_info(t: &MixTensor, p: &MixParams, counter: usize) -> (usize, usize) {
    match (p.n_expert > 1, layer_of(&t.name)) {
        (true, Some(l)) => (l, p.n_layer),
        _ => (counter, p.n_layer),
    }
}

fn ffn_down_rule(t: &MixTensor, p: &MixParams, c: &mut Counters, ty: DType) -> DType {
    use Ftype as F;
    let (i, n) = layer_info(t, p, c.i_ffn_down);
    c.i_ffn_down += 1;
    let falcon = p.arch == "falcon";
    let im = p.has_imatrix;
    match p.ftype {
        F::Q2_K => DType::Q3_K,
        F::Q2_K_S if i < n / 8 => DType::Q4_K,
        F::Q2_K_S => ty,
        F::IQ3_XXS if !im && i < n / 8 => DType::Q4_K,
        F::IQ3_XXS if !im => DType::Q3_K,
        F::Q3_K_M if i < n / 16 => DType::Q5_K,
        F::Q3_K_M if !falcon || use_more_bits(i, n) => DType::Q4_K,
        F::Q3_K_M => DType::Q3_K,
        F::IQ3_M if i < n / 8 || (p.n_expert == 8 && use_more_bits(i, n)) => DType::Q4_K,
        F::Q3_K_L if falcon => DType::Q4_K,
        F::Q3_K_L => DType::Q5_K,
        F::Q4_K_M if falcon && i < n / 16 => DType::Q6_K,
        F::Q4_K_M if falcon && use_more_bits(i, n) => DType::Q5_K,
        F::Q4_K_M if falcon => DType::Q4_K,
        F::Q4_K_M if use_more_bits(i, n) => DType::Q6_K,
        F::Q4_K_M => ty,
        F::IQ4_NL | F::IQ4_XS if i < n / 8 && !im => DType::Q5_K,
        F::Q5_K_M if use_more_bits(i, n) => DType::Q6_K,
        F::Q4_K_S if !falcon && i < n / 8 => DType::Q5_K,
        F::Q4_0 if im && i < n / 8 => DType::Q4_1,
        F::Q5_0 if im && i < n / 8 => DType::Q5_1,
        _ => ty,
    }
}

fn attn_out_rule(p: &MixParams, ty: DType) -> DType {
    use Ftype as F;
    if p.arch == "falcon" {
        return if p.ftype == F::Q3_K_L {
            DType::Q4_K
        } else {
            ty
        };
    }
    if p.n_expert == 8 {
        return match p.ftype {
            F::Q2_K
            | F::IQ3_XS
            | F::IQ3_XXS
            | F::Q3_K_S
            | F::Q3_K_M
            | F::IQ4_NL
            | F::Q4_K_S
            | F::Q4_K_M
            | F::IQ3_S
            | F::IQ3_M
            | F::IQ4_XS => DType::Q5_K,
            _ => ty,
        };
    }
    match p.ftype {
        F::Q2_K => DType::Q3_K,
        F::IQ3_XXS => DType::IQ3_S,
        F::Q3_K_M | F::IQ3_M => DType::Q4_K,
        F::Q3_K_L => DType::Q5_K,
        _ => ty,
    }
}

/// `N` of a `blk.N.` name.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

fn block_elems(d: DType) -> u32 {
    match d.layout() {
        weightport_core::Layout::Block { elems, .. } => elems,
        _ => 1,
    }
}

/// `tensor_type_fallback`: a type whose block divides the row, or F16.
fn fallback(t: &MixTensor, ty: DType) -> (DType, Option<String>) {
    let blk = u64::from(block_elems(ty));
    if t.ne0.is_multiple_of(blk) {
        return (ty, None);
    }
    let to = match ty {
        DType::IQ1_S
        | DType::IQ1_M
        | DType::IQ2_XXS
        | DType::IQ2_XS
        | DType::IQ2_S
        | DType::IQ3_XXS
        | DType::IQ3_S
        | DType::IQ4_XS => DType::IQ4_NL,
        DType::Q2_0 | DType::Q2_K | DType::Q3_K | DType::TQ1_0 | DType::TQ2_0 => DType::Q4_0,
        DType::Q4_K => DType::Q5_0,
        DType::Q5_K => DType::Q5_1,
        DType::Q6_K => DType::Q8_0,
        other => other,
    };
    let to = if !t.ne0.is_multiple_of(u64::from(block_elems(to))) {
        DType::F16
    } else {
        to
    };
    let note = format!(
        "row length {} is not a multiple of {}'s {blk}-element blocks: {} instead",
        t.ne0, ty, to
    );
    (to, Some(note))
}

/// The order llama-quantize processes (and writes) tensors in: non-block tensors first, then by
/// layer (`blk.N.`), names sorted within each group. Returns indices into `names`.
pub fn quantize_order(names: &[&str]) -> Vec<usize> {
    let layer = |n: &str| -> i64 {
        n.strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|d| d.parse().ok())
            .unwrap_or(-1)
    };
    let mut idx: Vec<usize> = (0..names.len()).collect();
    idx.sort_by(|&a, &b| {
        (layer(names[a]), names[a].as_bytes()).cmp(&(layer(names[b]), names[b].as_bytes()))
    });
    idx
}

/// Chooses every tensor's type. `tensors` must be in [`quantize_order`].
pub fn choose(tensors: &[MixTensor], p: &MixParams) -> Vec<Choice> {
    let cats: Vec<Cat> = tensors.iter().map(|t| category(&t.name)).collect();
    let mut c = Counters {
        n_attention_wv: cats.iter().filter(|&&k| is_attn_v(k)).count(),
        i_attention_wv: 0,
        i_ffn_down: 0,
        i_ffn_gate: 0,
        i_ffn_up: 0,
        tied: !cats.contains(&Cat::Output),
    };
    let default = p.ftype.default_type();
    tensors
        .iter()
        .zip(&cats)
        .map(|(t, &cat)| {
            if !allows_quantization(t, p) {
                return Choice {
                    dtype: t.dtype,
                    note: None,
                };
            }
            if let (Some(e), Cat::TokenEmbd) = (p.token_embd_type, cat) {
                return Choice {
                    dtype: e,
                    note: None,
                };
            }
            if let (Some(o), Cat::Output) = (p.output_type, cat) {
                return Choice {
                    dtype: o,
                    note: None,
                };
            }
            if !default.is_block() {
                return Choice {
                    dtype: default,
                    note: None,
                };
            }
            let manual = p.tensor_types.iter().find(|(re, _)| re.is_match(&t.name));
            let ty = match manual {
                Some((_, d)) => *d,
                None if p.pure => default,
                None => mix_rule(t, cat, p, &mut c, default),
            };
            let (dtype, note) = fallback(t, ty);
            Choice { dtype, note }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama(n_layer: usize, ne0: u64) -> Vec<MixTensor> {
        let mut v = vec![
            MixTensor {
                name: "token_embd.weight".into(),
                ne0,
                n_dims: 2,
                dtype: DType::F16,
            },
            MixTensor {
                name: "output_norm.weight".into(),
                ne0,
                n_dims: 1,
                dtype: DType::F32,
            },
            MixTensor {
                name: "output.weight".into(),
                ne0,
                n_dims: 2,
                dtype: DType::F16,
            },
        ];
        for i in 0..n_layer {
            for (n, d) in [
                ("attn_norm.weight", 1),
                ("attn_q.weight", 2),
                ("attn_k.weight", 2),
                ("attn_v.weight", 2),
                ("attn_output.weight", 2),
                ("ffn_norm.weight", 1),
                ("ffn_gate.weight", 2),
                ("ffn_up.weight", 2),
                ("ffn_down.weight", 2),
            ] {
                v.push(MixTensor {
                    name: format!("blk.{i}.{n}"),
                    ne0,
                    n_dims: d,
                    dtype: if d == 1 { DType::F32 } else { DType::F16 },
                });
            }
        }
        let names: Vec<&str> = v.iter().map(|t| t.name.as_str()).collect();
        let order = quantize_order(&names);
        order.into_iter().map(|i| v[i].clone()).collect()
    }

    fn params(ftype: Ftype, n_layer: usize) -> MixParams {
        MixParams {
            ftype,
            pure: false,
            tensor_types: vec![],
            output_type: None,
            token_embd_type: None,
            leave_output: false,
            arch: "llama".into(),
            n_layer,
            n_gqa: 4,
            n_expert: 0,
            has_imatrix: false,
        }
    }

    fn q6_layers(n: usize, which: &str) -> Vec<usize> {
        let t = llama(n, 4096);
        let c = choose(&t, &params(Ftype::Q4_K_M, n));
        t.iter()
            .zip(&c)
            .filter(|(t, c)| t.name.ends_with(which) && c.dtype == DType::Q6_K)
            .map(|(t, _)| t.name.split('.').nth(1).unwrap().parse().unwrap())
            .collect()
    }

    #[test]
    fn q4_k_m_gives_the_spec_examples() {
        // gguf.md §4.3: 32 layers (Llama-3-8B) and 24 layers.
        let want32 = [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31];
        assert_eq!(q6_layers(32, "attn_v.weight"), want32);
        assert_eq!(q6_layers(32, "ffn_down.weight"), want32);
        assert_eq!(
            q6_layers(24, "ffn_down.weight"),
            [0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]
        );
        let t = llama(4, 4096);
        let c = choose(&t, &params(Ftype::Q4_K_M, 4));
        let of = |n: &str| c[t.iter().position(|x| x.name == n).unwrap()].dtype;
        assert_eq!(of("output.weight"), DType::Q6_K);
        assert_eq!(of("token_embd.weight"), DType::Q4_K);
        assert_eq!(of("output_norm.weight"), DType::F32);
        assert_eq!(of("blk.1.attn_q.weight"), DType::Q4_K);
    }

    #[test]
    fn rows_not_a_multiple_of_256_fall_back() {
        // Qwen2-0.5B's hidden size 896 = 3.5 × 256.
        let t = llama(2, 896);
        let c = choose(&t, &params(Ftype::Q4_K_M, 2));
        let of = |n: &str| c[t.iter().position(|x| x.name == n).unwrap()].clone();
        assert_eq!(of("blk.0.attn_q.weight").dtype, DType::Q5_0);
        assert_eq!(of("blk.0.attn_v.weight").dtype, DType::Q5_0);
        assert_eq!(
            of("blk.1.attn_v.weight").dtype,
            DType::Q8_0,
            "Q6_K falls back to Q8_0"
        );
        assert_eq!(of("output.weight").dtype, DType::Q8_0);
        assert!(of("blk.0.attn_q.weight").note.unwrap().contains("896"));
        let t = llama(1, 100);
        let c = choose(&t, &params(Ftype::Q4_K_M, 1));
        assert!(c
            .iter()
            .zip(&t)
            .all(|(c, t)| t.n_dims == 1 || c.dtype == DType::F16));
    }

    #[test]
    fn overrides_pure_and_tied_embeddings() {
        let mut t = llama(2, 4096);
        t.retain(|x| x.name != "output.weight");
        let mut p = params(Ftype::Q4_K_M, 2);
        let c = choose(&t, &p);
        assert_eq!(
            c[t.iter()
                .position(|x| x.name == "token_embd.weight")
                .unwrap()]
            .dtype,
            DType::Q6_K
        );
        p.pure = true;
        p.tensor_types = vec![(Regex::new("ffn_up").unwrap(), DType::Q8_0)];
        let c = choose(&t, &p);
        for (x, c) in t.iter().zip(&c) {
            let want = if x.n_dims == 1 {
                DType::F32
            } else if x.name.contains("ffn_up") {
                DType::Q8_0
            } else {
                DType::Q4_K
            };
            assert_eq!(c.dtype, want, "{}", x.name);
        }
        assert_eq!(Ftype::parse("q4_k").unwrap(), Ftype::Q4_K_M);
        assert_eq!(Ftype::Q4_K_M.file_type(), 15);
        assert!(Ftype::parse("Q9").is_err());
    }

    fn type_of(t: &[MixTensor], c: &[Choice], n: &str) -> DType {
        c[t.iter().position(|x| x.name == n).unwrap()].dtype
    }

    #[test]
    fn low_bit_rules_follow_gqa_experts_and_imatrix() {
        // 16 layers, GQA 4: the low-bit attn_v is Q4_K, the first 2 ffn_down Q2_K (IQ2_XXS).
        let t = llama(16, 4096);
        let mut p = params(Ftype::IQ2_XXS, 16);
        p.has_imatrix = true;
        let c = choose(&t, &p);
        assert_eq!(type_of(&t, &c, "blk.0.attn_v.weight"), DType::Q4_K);
        assert_eq!(type_of(&t, &c, "blk.1.ffn_down.weight"), DType::Q2_K);
        assert_eq!(type_of(&t, &c, "blk.2.ffn_down.weight"), DType::IQ2_XXS);
        assert_eq!(type_of(&t, &c, "output.weight"), DType::Q5_K);
        assert_eq!(type_of(&t, &c, "token_embd.weight"), DType::Q2_K);
        // IQ3_XXS: attn_v Q4_K with GQA 4; ffn_down depends on the imatrix.
        let mut p = params(Ftype::IQ3_XXS, 16);
        let c = choose(&t, &p);
        assert_eq!(type_of(&t, &c, "blk.0.ffn_down.weight"), DType::Q4_K);
        assert_eq!(type_of(&t, &c, "blk.5.ffn_down.weight"), DType::Q3_K);
        assert_eq!(type_of(&t, &c, "blk.5.attn_k.weight"), DType::IQ2_S);
        p.has_imatrix = true;
        let c = choose(&t, &p);
        assert_eq!(type_of(&t, &c, "blk.5.ffn_down.weight"), DType::IQ3_XXS);
        // Eight experts: attn_output Q5_K, attn_k Q4_K in the low-bit branch.
        let mut p = params(Ftype::IQ1_S, 16);
        p.n_expert = 8;
        let c = choose(&t, &p);
        assert_eq!(type_of(&t, &c, "blk.3.attn_output.weight"), DType::Q5_K);
        assert_eq!(type_of(&t, &c, "blk.3.attn_k.weight"), DType::Q4_K);
        // Q4_0 with an imatrix: the first eighth of ffn_down is Q4_1.
        let mut p = params(Ftype::Q4_0, 16);
        p.has_imatrix = true;
        let c = choose(&t, &p);
        assert_eq!(type_of(&t, &c, "blk.1.ffn_down.weight"), DType::Q4_1);
        assert_eq!(type_of(&t, &c, "blk.2.ffn_down.weight"), DType::Q4_0);
    }

    #[test]
    fn which_tensors_need_an_imatrix() {
        for d in [
            DType::IQ1_S,
            DType::IQ1_M,
            DType::IQ2_XXS,
            DType::IQ2_XS,
            DType::IQ2_S,
            DType::IQ3_XXS,
        ] {
            assert!(
                requires_imatrix("blk.0.attn_q.weight", d, Ftype::IQ2_M),
                "{d}"
            );
            assert!(!requires_imatrix("token_embd.weight", d, Ftype::IQ2_M));
            assert!(!requires_imatrix("output.weight", d, Ftype::IQ2_M));
        }
        assert!(requires_imatrix(
            "blk.0.ffn_up.weight",
            DType::Q2_K,
            Ftype::Q2_K_S
        ));
        assert!(!requires_imatrix(
            "blk.0.ffn_up.weight",
            DType::Q2_K,
            Ftype::Q2_K
        ));
        assert!(!requires_imatrix(
            "blk.0.ffn_up.weight",
            DType::IQ3_S,
            Ftype::IQ3_S
        ));
        assert!(!requires_imatrix(
            "blk.0.ffn_up.weight",
            DType::IQ4_XS,
            Ftype::IQ4_XS
        ));
        assert_eq!(Ftype::parse("iq2_m").unwrap().file_type(), 29);
        assert_eq!(Ftype::IQ2_S.default_type(), DType::IQ2_XS);
        assert_eq!(Ftype::IQ3_M.default_type(), DType::IQ3_S);
        assert_eq!(Ftype::Q2_K_S.file_type(), 21);
    }
}
