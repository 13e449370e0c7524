//! Tokenizer export into `tokenizer.ggml.*` / `tokenizer.chat_template` KVs.
//!
//! Key order (as the reference writes them, docs/specs/gguf.md §5.5-5.6):
//! `tokenizer.ggml.add_space_prefix` (Llama family, when tokenizer_config has
//! `add_prefix_space`), `tokenizer.ggml.model`, `.pre`, `.tokens`, `.scores` (SentencePiece
//! only), `.token_type`, then the special vocabulary ([`special::Special::to_kv`]): `.merges`
//! (BPE), special token ids, `add_*_token` flags, `tokenizer.chat_template`, normalizer flags.
//!
//! Array element types follow gguf-py: token strings → string[], scores → f32[], token types →
//! i32[], merges → string[]. Empty strings and empty arrays are not written.

pub mod bpe;
pub mod special;
pub mod spm;
pub mod xlmr;

use std::path::Path;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;
use weightport_core::{Error, Format, Location, MetaType, MetaValue, Result};

use crate::config::{bad, read_json, HParams};
use crate::table::VocabKind;

/// `tokenizer.ggml.token_type` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum TokenType {
    /// An ordinary token.
    Normal = 1,
    /// The unknown token.
    Unknown = 2,
    /// A control (special) token.
    Control = 3,
    /// A user-defined (added, non-special) token.
    UserDefined = 4,
    /// A padding slot.
    Unused = 5,
    /// A byte-fallback token `<0xXX>`.
    Byte = 6,
}

/// The result of a tokenizer export.
#[derive(Debug, Clone)]
pub struct VocabExport {
    /// The KVs, in order.
    pub kv: Vec<(String, MetaValue)>,
    /// The pre-tokenizer check hash (BPE vocabularies).
    pub chkhsh: Option<String>,
}

/// The reference's check string and hash → pre-tokenizer name table.
#[derive(Debug, Deserialize)]
pub struct PreTable {
    /// The string encoded to identify a pre-tokenizer.
    pub chktxt: String,
    /// `[hash, name]`, sorted by hash; for a hash listed twice the last entry wins.
    pub table: Vec<(String, String)>,
}

/// The embedded table (generated from the reference by `fixtures/gen/gen_arch.py`).
pub fn pre_table() -> &'static PreTable {
    static T: OnceLock<PreTable> = OnceLock::new();
    T.get_or_init(|| {
        serde_json::from_str(include_str!("pre_hashes.json")).expect("embedded table is valid")
    })
}

/// The pre-tokenizer name the reference gives to a check hash.
pub fn pre_name(chkhsh: &str) -> Option<&'static str> {
    pre_table()
        .table
        .iter()
        .rev()
        .find(|(h, _)| h == chkhsh)
        .map(|(_, n)| n.as_str())
}

/// The reference's heuristic for added tokens that ought to be CONTROL.
pub fn looks_special(t: &str) -> bool {
    matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<|") && t.ends_with("|>"))
        || (t.starts_with("<｜") && t.ends_with("｜>"))
        || (t.starts_with("<unused") && t.ends_with('>'))
}

pub(crate) fn str_array(items: impl IntoIterator<Item = String>) -> MetaValue {
    MetaValue::TypedArray {
        elem: MetaType::Str,
        items: items.into_iter().map(MetaValue::Str).collect(),
    }
}

fn types_array(types: &[TokenType]) -> MetaValue {
    MetaValue::TypedArray {
        elem: MetaType::I32,
        items: types.iter().map(|t| MetaValue::I32(*t as i32)).collect(),
    }
}

/// Merges of `tokenizer.json` as the reference writes them: string merges as-is, pair merges
/// joined by a space with spaces inside a part written as `Ġ` (U+0120).
pub fn merges_from_tokenizer_json(path: &Path, tj: &Value) -> Result<Vec<String>> {
    let Some(list) = tj
        .get("model")
        .and_then(|m| m.get("merges"))
        .and_then(Value::as_array)
    else {
        return Ok(Vec::new());
    };
    let Some(first) = list.first() else {
        return Ok(Vec::new());
    };
    if first.is_string() {
        return list
            .iter()
            .map(|m| {
                m.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| bad(path, "mixed merge formats"))
            })
            .collect();
    }
    list.iter()
        .map(|m| {
            let pair = m
                .as_array()
                .filter(|p| p.len() == 2)
                .and_then(|p| Some((p[0].as_str()?, p[1].as_str()?)))
                .ok_or_else(|| bad(path, "unknown tokenizer merges format"))?;
            Ok(format!(
                "{} {}",
                pair.0.replace(' ', "\u{120}"),
                pair.1.replace(' ', "\u{120}")
            ))
        })
        .collect()
}

fn merges_txt(dir: &Path) -> Result<Vec<String>> {
    let path = dir.join("merges.txt");
    if !path.is_file() {
        return Ok(Vec::new());
    }
    let text = crate::config::read_text(&path)?;
    let mut lines = text.lines().peekable();
    if lines.peek().is_some_and(|l| l.trim().starts_with('#')) {
        lines.next();
    }
    Ok(lines
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            (parts.len() == 2).then(|| format!("{} {}", parts[0], parts[1]))
        })
        .collect())
}

/// CodeGemma's `<end_of_turn>` id, which the reference writes for every Gemma (v1) release.
const GEMMA_EOT: u32 = 107;

/// `tokenizer_class` of tokenizer_config.json, when present.
fn tokenizer_class(dir: &Path) -> Result<Option<String>> {
    let tc = dir.join("tokenizer_config.json");
    if !tc.is_file() {
        return Ok(None);
    }
    Ok(read_json(&tc)?
        .get("tokenizer_class")
        .and_then(Value::as_str)
        .map(str::to_owned))
}

/// The length of the SentencePiece export (`len(tokens)` of `_create_vocab_sentencepiece`):
/// config.json's `vocab_size`, else the model's piece count. Gemma 3 cuts its token embedding to
/// it.
pub fn spm_vocab_len(dir: &Path, hp: &HParams) -> Result<u64> {
    if let Some(n) = hp.uint(&["vocab_size_per_layer_input", "vocab_size"])? {
        return Ok(n);
    }
    let path = dir.join("tokenizer.model");
    if !path.is_file() {
        return Err(Error::Unsupported {
            at: Location::file(&path),
            format: Some(Format::Gguf),
            what: "this architecture needs a SentencePiece tokenizer.model".into(),
        });
    }
    Ok(spm::load(dir, None, spm::Flavor::Common)?.tokens.len() as u64)
}

/// Exports the vocabulary of the release in `dir` as the reference would for `kind`.
///
/// `pre_override` names the pre-tokenizer when the check hash is not in the table (the CLI's
/// `--pre-tokenizer NAME`); a known hash always wins.
pub fn export(
    dir: &Path,
    kind: VocabKind,
    hp: &HParams,
    pre_override: Option<&str>,
) -> Result<VocabExport> {
    let mut v = export_kind(dir, kind, hp, pre_override)?;
    if kind == VocabKind::Llama && hp.uint(&["vocab_size"])? == Some(SMALL_GRANITE_VOCAB) {
        // LlamaModel.set_vocab: `add_add_bos_token(False)` after the vocabulary.
        set_kv(
            &mut v.kv,
            "tokenizer.ggml.add_bos_token",
            MetaValue::Bool(false),
        );
    }
    if kind == VocabKind::Gpt2HunYuan {
        hunyuan_token_ids(dir, hp, &mut v.kv)?;
    }
    if kind == VocabKind::Gpt2Glm4 {
        glm_token_ids(dir, GLM4_SPECIALS, &mut v.kv)?;
    }
    if kind == VocabKind::Gpt2Glm {
        glm_token_ids(dir, GLM_SPECIALS, &mut v.kv)?;
    }
    if kind == VocabKind::Gpt2ChatGlm {
        glm_token_ids(dir, CHATGLM_SPECIALS, &mut v.kv)?;
    }
    Ok(v)
}

/// `Glm4Model.set_vocab`'s special tokens: (type, added token).
const GLM4_SPECIALS: &[(&str, &str)] = &[
    ("eos", "<|endoftext|>"),
    ("eot", "<|user|>"),
    ("unk", "<|endoftext|>"),
    ("bos", "<|endoftext|>"),
];

/// `ChatGLMModel.set_vocab`'s (`GlmForCausalLM`).
const CHATGLM_SPECIALS: &[(&str, &str)] = &[
    ("eos", "<|endoftext|>"),
    ("eot", "<|user|>"),
    ("unk", "<|endoftext|>"),
];

/// `TextModel._set_vocab_glm`'s (GLM-4.5).
const GLM_SPECIALS: &[(&str, &str)] = &[
    ("bos", "[gMASK]"),
    ("eot", "<|user|>"),
    ("unk", "<|endoftext|>"),
    ("eom", "<|observation|>"),
];

/// `Glm4Model.set_vocab` and `TextModel._set_vocab_glm`: each special token type of `specials`
/// set to its added token, only when the special tokens have none (gguf-py's
/// `_set_special_token`), after the ids they wrote. The reference fails without those added
/// tokens: refused.
fn glm_token_ids(
    dir: &Path,
    specials: &[(&str, &str)],
    kv: &mut Vec<(String, MetaValue)>,
) -> Result<()> {
    let added = added_vocab(dir)?;
    let id_of = |content: &str| -> Result<MetaValue> {
        added
            .iter()
            .find(|(c, _)| c == content)
            .map(|(_, id)| MetaValue::U32(*id))
            .ok_or_else(|| Error::Unsupported {
                at: Location::file(dir.join("tokenizer.json")),
                format: Some(Format::Gguf),
                what: format!("a GLM tokenizer without the added token `{content}`"),
            })
    };
    let mut at = kv
        .iter()
        .rposition(|(k, _)| k.ends_with("_token_id"))
        .or_else(|| kv.iter().position(|(k, _)| k == "tokenizer.ggml.merges"))
        .map_or(kv.len(), |i| i + 1);
    for &(typ, content) in specials {
        let key = special::id_key(typ).expect("a type gguf-py writes");
        let id = id_of(content)?;
        if !kv.iter().any(|(k, _)| *k == key) {
            kv.insert(at, (key, id));
            at += 1;
        }
    }
    Ok(())
}

/// The added tokens (content, id) of tokenizer.json, then of tokenizer_config.json's
/// `added_tokens_decoder` (transformers' `get_added_vocab`).
fn added_vocab(dir: &Path) -> Result<Vec<(String, u32)>> {
    let mut out = Vec::new();
    let tj = dir.join("tokenizer.json");
    if tj.is_file() {
        for t in read_json(&tj)?
            .get("added_tokens")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(c), Some(id)) = (t.get("content").and_then(Value::as_str), t.get("id")) {
                if let Some(id) = id.as_u64().and_then(|i| u32::try_from(i).ok()) {
                    out.push((c.to_owned(), id));
                }
            }
        }
    }
    let tc = dir.join("tokenizer_config.json");
    if tc.is_file() {
        if let Some(Value::Object(dec)) = read_json(&tc)?.get("added_tokens_decoder") {
            for (id, t) in dec {
                let c = t.get("content").and_then(Value::as_str);
                if let (Some(c), Ok(id)) = (c, id.parse::<u32>()) {
                    out.push((c.to_owned(), id));
                }
            }
        }
    }
    Ok(out)
}

/// Writes `key` after the vocabulary: gguf-py's KV dict keeps the key's place when the special
/// tokens already wrote it, else appends it.
fn set_kv(kv: &mut Vec<(String, MetaValue)>, key: &str, value: MetaValue) {
    match kv.iter_mut().find(|(k, _)| k == key) {
        Some((_, val)) => *val = value,
        None => kv.push((key.to_owned(), value)),
    }
}

/// `HunYuanModel.set_vocab` after the special tokens: EOS ← config.json's `eod_token_id` when
/// not null, then EOT ← generation_config.json's first EOS id when it lists two or more.
fn hunyuan_token_ids(dir: &Path, hp: &HParams, kv: &mut Vec<(String, MetaValue)>) -> Result<()> {
    let id = |v: &Value, what: &str| -> Result<MetaValue> {
        v.as_u64()
            .and_then(|i| u32::try_from(i).ok())
            .map(MetaValue::U32)
            .ok_or_else(|| bad(&hp.path, format!("{what} is not a token id: {v}")))
    };
    if let Some(eod) = hp.raw.get("eod_token_id").filter(|v| !v.is_null()) {
        set_kv(
            kv,
            "tokenizer.ggml.eos_token_id",
            id(eod, "`eod_token_id`")?,
        );
    }
    let gen = dir.join("generation_config.json");
    if gen.is_file() {
        if let Some(Value::Array(eos)) = read_json(&gen)?.get("eos_token_id") {
            if eos.len() >= 2 {
                let eot = id(&eos[0], "generation_config.json's first `eos_token_id`")?;
                set_kv(kv, "tokenizer.ggml.eot_token_id", eot);
            }
        }
    }
    Ok(())
}

/// The vocabulary size for which the reference's Llama-family vocabulary export turns
/// `add_bos_token` off ("granite small models"; SmolLM/SmolLM2 have it too).
const SMALL_GRANITE_VOCAB: u64 = 49152;

/// [`export`] before the Llama family's vocabulary-size rule.
fn export_kind(
    dir: &Path,
    kind: VocabKind,
    hp: &HParams,
    pre_override: Option<&str>,
) -> Result<VocabExport> {
    let mut kv = Vec::new();
    if kind == VocabKind::Llama {
        let tc = dir.join("tokenizer_config.json");
        if tc.is_file() {
            if let Some(Value::Bool(b)) = read_json(&tc)?.get("add_prefix_space") {
                kv.push((
                    "tokenizer.ggml.add_space_prefix".to_owned(),
                    MetaValue::Bool(*b),
                ));
            }
        }
    }
    let vocab_size = if kind == VocabKind::SpmElseGpt2PadTo16 {
        Some(padded_vocab_size(hp, None, 16)?)
    } else if kind == VocabKind::SpmElseGpt2PadTo8 || kind == VocabKind::Gpt2PadTo8 {
        Some(padded_vocab_size(hp, Some(8), 8)?)
    } else if kind == VocabKind::Gpt2ElseSpmPadTo8 {
        Some(padded_vocab_size(hp, None, 8)?)
    } else {
        hp.uint(&["vocab_size"])?
    };
    match kind {
        VocabKind::Bert => return export_bert(dir, hp, vocab_size, pre_override),
        VocabKind::XlmRoberta => return xlmr::export(dir, hp),
        VocabKind::Gpt2AddBosEosSep => {
            // ModernBertModel.set_vocab: the three flags first, then the GPT-2 vocabulary (whose
            // special vocabulary may write them again: the plan keeps their first position).
            for flag in ["bos", "eos", "sep"] {
                kv.push((
                    format!("tokenizer.ggml.add_{flag}_token"),
                    MetaValue::Bool(true),
                ));
            }
        }
        _ => {}
    }
    if kind == VocabKind::Gpt2ElseSpmPadTo8 && !dir.join("tokenizer.json").is_file() {
        return export_spm(dir, VocabKind::SpmElseGpt2, vocab_size, kv);
    }
    let kind = file_kind(dir, kind)?;
    if kind != VocabKind::Gpt2 && dir.join("tokenizer.model").is_file() {
        return export_spm(dir, kind, vocab_size, kv);
    }
    refuse_bpe(dir, kind)?;
    export_gpt2(dir, vocab_size, pre_override, kv)
}

/// Mamba 2's vocabulary size: config.json's `vocab_size` rounded up to a multiple of
/// `pad_vocab_size_multiple` (default 16), as `Mamba2Model.set_vocab` pads it.
/// `forced`: the multiple whatever config.json says (Granite 4 hybrid's 8).
fn padded_vocab_size(hp: &HParams, forced: Option<u64>, default: u64) -> Result<u64> {
    let n = hp
        .uint(&["vocab_size"])?
        .ok_or_else(|| bad(&hp.path, "config.json lacks `vocab_size`"))?;
    let given = match forced {
        Some(f) => Some(f),
        None => hp.uint(&["pad_vocab_size_multiple"])?,
    };
    let pad = match given {
        None => default,
        Some(0) => return Err(bad(&hp.path, "`pad_vocab_size_multiple` is 0")),
        Some(p) => p,
    };
    n.div_ceil(pad)
        .checked_mul(pad)
        .ok_or_else(|| bad(&hp.path, "the padded `vocab_size` overflows"))
}

/// The kind whose files the release holds: ModernBERT's and Phi-4's (Phi-3's class with a
/// GPT-2 tokenizer) are GPT-2's.
fn file_kind(dir: &Path, kind: VocabKind) -> Result<VocabKind> {
    let kind = if matches!(
        kind,
        VocabKind::Gpt2AddBosEosSep
            | VocabKind::Gpt2HunYuan
            | VocabKind::Gpt2Glm4
            | VocabKind::Gpt2ChatGlm
            | VocabKind::Gpt2Glm
            | VocabKind::Gpt2ElseSpmPadTo8
            | VocabKind::Gpt2PadTo8
    ) {
        VocabKind::Gpt2
    } else if matches!(
        kind,
        VocabKind::SpmElseGpt2PadTo16 | VocabKind::SpmElseGpt2PadTo8
    ) {
        VocabKind::SpmElseGpt2
    } else {
        kind
    };
    // Phi-4 releases keep Phi-3's class with a GPT-2 tokenizer.
    Ok(
        if kind == VocabKind::SpmPhi3 && tokenizer_class(dir)?.as_deref() == Some("GPT2Tokenizer") {
            VocabKind::Gpt2
        } else {
            kind
        },
    )
}

/// A SentencePiece vocabulary (`tokenizer.model`) after the keys in `kv`.
fn export_spm(
    dir: &Path,
    kind: VocabKind,
    vocab_size: Option<u64>,
    mut kv: Vec<(String, MetaValue)>,
) -> Result<VocabExport> {
    let flavor = if kind == VocabKind::SpmPhi3 {
        spm::Flavor::Phi3
    } else {
        spm::Flavor::Common
    };
    let v = spm::load(dir, vocab_size, flavor)?;
    kv.push((
        "tokenizer.ggml.model".into(),
        MetaValue::Str("llama".into()),
    ));
    kv.push((
        "tokenizer.ggml.pre".into(),
        MetaValue::Str("default".into()),
    ));
    let n = v.tokens.len();
    if n > 0 {
        kv.push(("tokenizer.ggml.tokens".into(), str_array(v.tokens)));
        kv.push((
            "tokenizer.ggml.scores".into(),
            MetaValue::TypedArray {
                elem: MetaType::F32,
                items: v.scores.into_iter().map(MetaValue::F32).collect(),
            },
        ));
        kv.push(("tokenizer.ggml.token_type".into(), types_array(&v.types)));
    }
    let sp = special::load(dir, false, Some(n))?;
    kv.extend(sp.to_kv());
    if kind == VocabKind::SpmGemma {
        kv.push(gemma_eot(dir)?);
    }
    if matches!(kind, VocabKind::SpmNoSpacePrefix | VocabKind::SpmGemma) {
        kv.push((
            "tokenizer.ggml.add_space_prefix".into(),
            MetaValue::Bool(false),
        ));
    }
    if kind == VocabKind::SpmThenSpacePrefix {
        let tc = dir.join("tokenizer_config.json");
        if tc.is_file() {
            if let Some(Value::Bool(b)) = read_json(&tc)?.get("add_prefix_space") {
                kv.push((
                    "tokenizer.ggml.add_space_prefix".to_owned(),
                    MetaValue::Bool(*b),
                ));
            }
        }
    }
    Ok(VocabExport { kv, chkhsh: None })
}

/// GemmaModel.set_vocab: CodeGemma's end-of-turn id, whatever the vocabulary (the special-token
/// ids it also sets have no GGUF key in the pinned gguf-py); a config's own `eot_token` is
/// refused.
fn gemma_eot(dir: &Path) -> Result<(String, MetaValue)> {
    let tc = dir.join("tokenizer_config.json");
    if tc.is_file()
        && read_json(&tc)?
            .get("eot_token")
            .is_some_and(|v| !v.is_null())
    {
        return Err(Error::Unsupported {
            at: Location::file(dir.join("tokenizer_config.json")),
            format: Some(Format::Gguf),
            what: "an `eot_token` in a Gemma tokenizer_config.json is not supported yet".into(),
        });
    }
    Ok((
        "tokenizer.ggml.eot_token_id".into(),
        MetaValue::U32(GEMMA_EOT),
    ))
}

/// Refuses a release without `tokenizer.model` whose kind needs one, and a Llama byte-fallback
/// BPE tokenizer.json.
fn refuse_bpe(dir: &Path, kind: VocabKind) -> Result<()> {
    if matches!(
        kind,
        VocabKind::SpmNoSpacePrefix
            | VocabKind::SpmGemma
            | VocabKind::SpmPhi3
            | VocabKind::SpmThenSpacePrefix
            | VocabKind::Spm
    ) {
        return Err(Error::Unsupported {
            at: Location::file(dir.join("tokenizer.model")),
            format: Some(Format::HfRelease),
            what: "this architecture needs a SentencePiece tokenizer.model".into(),
        });
    }
    if kind == VocabKind::Llama && is_llama_hf_bpe(dir)? {
        return Err(Error::Unsupported {
            at: Location::file(dir.join("tokenizer.json")),
            format: Some(Format::HfRelease),
            what: "byte-fallback BPE tokenizer.json without tokenizer.model (LlamaHfVocab) \
                   is not supported yet"
                .into(),
        });
    }
    Ok(())
}

/// A GPT-2 BPE vocabulary (`tokenizer.json`) after the keys in `kv`, with its pre-tokenizer.
fn export_gpt2(
    dir: &Path,
    vocab_size: Option<u64>,
    pre_override: Option<&str>,
    mut kv: Vec<(String, MetaValue)>,
) -> Result<VocabExport> {
    let v = bpe::load(dir, vocab_size)?;
    let pre = resolve_pre(dir, &v.chkhsh, pre_override)?;
    kv.push(("tokenizer.ggml.model".into(), MetaValue::Str("gpt2".into())));
    kv.push(("tokenizer.ggml.pre".into(), MetaValue::Str(pre)));
    if !v.tokens.is_empty() {
        kv.push(("tokenizer.ggml.tokens".into(), str_array(v.tokens)));
        kv.push(("tokenizer.ggml.token_type".into(), types_array(&v.types)));
    }
    let mut sp = special::load(dir, true, None)?;
    if sp.merges.is_empty() {
        sp.merges = merges_txt(dir)?;
    }
    kv.extend(sp.to_kv());
    Ok(VocabExport {
        kv,
        chkhsh: Some(v.chkhsh),
    })
}

/// BERT: `token_type_count`, then the WordPiece vocabulary in "phantom space" form.
fn export_bert(
    dir: &Path,
    hp: &HParams,
    vocab_size: Option<u64>,
    pre_override: Option<&str>,
) -> Result<VocabExport> {
    let mut kv = Vec::new();
    let v = bpe::load(dir, vocab_size)?;
    let pre = resolve_pre(dir, &v.chkhsh, pre_override)?;
    let ttc = hp.u32(&["type_vocab_size"])?.unwrap_or(1);
    kv.push((
        "tokenizer.ggml.token_type_count".into(),
        MetaValue::U32(ttc),
    ));
    kv.push(("tokenizer.ggml.model".into(), MetaValue::Str("bert".into())));
    kv.push(("tokenizer.ggml.pre".into(), MetaValue::Str(pre)));
    let n = v.tokens.len();
    let tokens: Vec<String> = v
        .tokens
        .into_iter()
        .zip(&v.types)
        .map(|(t, ty)| {
            if *ty == TokenType::Control {
                t
            } else if let Some(rest) = t.strip_prefix("##") {
                rest.to_owned()
            } else {
                format!("\u{2581}{t}")
            }
        })
        .collect();
    if n > 0 {
        kv.push(("tokenizer.ggml.tokens".into(), str_array(tokens)));
        kv.push(("tokenizer.ggml.token_type".into(), types_array(&v.types)));
    }
    let sp = special::load(dir, false, Some(n))?;
    kv.extend(sp.to_kv());
    Ok(VocabExport {
        kv,
        chkhsh: Some(v.chkhsh),
    })
}

fn resolve_pre(dir: &Path, chkhsh: &str, pre_override: Option<&str>) -> Result<String> {
    Ok(match (pre_name(chkhsh), pre_override) {
        (Some(name), _) => name.to_owned(),
        (None, Some(name)) => name.to_owned(),
        (None, None) => {
            return Err(Error::Unsupported {
                at: Location::file(dir.join("tokenizer.json")),
                format: Some(Format::HfRelease),
                what: format!(
                    "BPE pre-tokenizer not recognized (check hash {}); name it with \
                     {} NAME (one of llama.cpp's pre-tokenizers, e.g. llama-bpe, \
                     qwen2, gpt-2)",
                    chkhsh,
                    weightport_core::Knob::PreTokenizer
                ),
            })
        }
    })
}

/// The reference's `LlamaHfVocab` applies to a `tokenizer.json` whose BPE model has
/// `byte_fallback` and whose decoder is a `Sequence` (its second attempt for the Llama family).
fn is_llama_hf_bpe(dir: &Path) -> Result<bool> {
    let p = dir.join("tokenizer.json");
    if !p.is_file() {
        return Ok(false);
    }
    let tj = read_json(&p)?;
    let m = tj.get("model");
    Ok(
        m.and_then(|m| m.get("type")).and_then(Value::as_str) == Some("BPE")
            && m.and_then(|m| m.get("byte_fallback"))
                .and_then(Value::as_bool)
                == Some(true),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    #[test]
    fn check_string_is_the_references() {
        let t = pre_table();
        assert_eq!(t.chktxt.chars().count(), 350);
        assert_eq!(
            bpe::hex(&Sha256::digest(t.chktxt.as_bytes())),
            "a36179c1e2b1cfcfbfad1dc779addad2ffc778201e4cf0d538bddeafa2c526da"
        );
        assert!(t.table.len() > 90);
    }

    #[test]
    fn looks_special_matches_reference_cases() {
        assert!(looks_special("<|im_start|>"));
        assert!(looks_special("<pad>"));
        assert!(looks_special("<unused12>"));
        assert!(!looks_special("<s>"));
        assert!(!looks_special("hello"));
    }
}
