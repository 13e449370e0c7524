//! XLM-RoBERTa's vocabulary ([`crate::table::VocabKind::XlmRoberta`]), after the reference's
//! `BertModel._xlmroberta_set_vocab` (`conversion/bert.py`) reading `sentencepiece.bpe.model`:
//!
//! * the model must be a unigram one (`trainer_spec.model_type` 1: the reference asserts it);
//! * `vocab_size` = max(config.json's `vocab_size`, the piece count) slots, pre-filled with
//!   `[PAD{i}]`, score -10000, UNUSED; each piece gives its text, score and type (unknown,
//!   control, unused, byte, else normal: a user-defined piece is NORMAL);
//! * the slots are realigned to the HF ids, which put `<s> <pad> </s> <unk>` first and every
//!   other piece one id later: the output is those four (scores 0, CONTROL ×3 then UNKNOWN),
//!   then slots `3..vocab_size - 1` (the last slot falls off; `<mask>`, which the SentencePiece
//!   model lacks, stays a `[PAD…]` slot as in the reference's file);
//! * keys: `tokenizer.ggml.model` `t5`, `.pre` `default`, tokens, scores, token types,
//!   `add_space_prefix` (the normalizer's `add_dummy_prefix`), `token_type_count`
//!   (`type_vocab_size`), `remove_extra_whitespaces`, the normalizer's `precompiled_charsmap`
//!   (u8[], only when non-empty), then the special vocabulary.
//!
//! A release with `tokenizer.json` only (the reference's second path, through transformers'
//! `AutoTokenizer`) is refused.

use std::path::Path;

use prost::Message;
use weightport_core::{Error, Format, Location, MetaType, MetaValue, Result};

use super::{special, spm, str_array, types_array, TokenType, VocabExport};
use crate::config::{bad, HParams};

/// The SentencePiece file XLM-RoBERTa releases carry.
pub const MODEL_FILE: &str = "sentencepiece.bpe.model";

/// `sentencepiece.ModelProto`'s trainer and normalizer specs (the pieces are read by
/// [`spm::ModelProto`]).
#[derive(Clone, PartialEq, prost::Message)]
struct Specs {
    #[prost(message, optional, tag = "2")]
    trainer_spec: Option<TrainerSpec>,
    #[prost(message, optional, tag = "3")]
    normalizer_spec: Option<NormalizerSpec>,
}

/// `TrainerSpec`, the field used.
#[derive(Clone, PartialEq, prost::Message)]
struct TrainerSpec {
    /// 1 UNIGRAM (the proto's default), 2 BPE, 3 WORD, 4 CHAR.
    #[prost(int32, optional, tag = "3")]
    model_type: Option<i32>,
}

/// `NormalizerSpec`, the fields used (proto2 defaults: both flags true).
#[derive(Clone, PartialEq, prost::Message)]
struct NormalizerSpec {
    #[prost(bytes = "vec", optional, tag = "2")]
    precompiled_charsmap: Option<Vec<u8>>,
    #[prost(bool, optional, tag = "3")]
    add_dummy_prefix: Option<bool>,
    #[prost(bool, optional, tag = "4")]
    remove_extra_whitespaces: Option<bool>,
}

/// The four ids HF puts first, with the type the reference gives them.
const HEAD: [(&str, TokenType); 4] = [
    ("<s>", TokenType::Control),
    ("<pad>", TokenType::Control),
    ("</s>", TokenType::Control),
    ("<unk>", TokenType::Unknown),
];

/// Exports the vocabulary of the XLM-RoBERTa release in `dir`.
pub fn export(dir: &Path, hp: &HParams) -> Result<VocabExport> {
    let path = dir.join(MODEL_FILE);
    let (model, norm) = read_unigram(&path)?;
    let (tokens, scores, types) = hf_slots(&model, hp, &path)?;
    let count = tokens.len();
    let mut kv = vec![
        (
            "tokenizer.ggml.model".to_owned(),
            MetaValue::Str("t5".into()),
        ),
        (
            "tokenizer.ggml.pre".into(),
            MetaValue::Str("default".into()),
        ),
        ("tokenizer.ggml.tokens".into(), str_array(tokens)),
        (
            "tokenizer.ggml.scores".into(),
            MetaValue::TypedArray {
                elem: MetaType::F32,
                items: scores.into_iter().map(MetaValue::F32).collect(),
            },
        ),
        ("tokenizer.ggml.token_type".into(), types_array(&types)),
        (
            "tokenizer.ggml.add_space_prefix".into(),
            MetaValue::Bool(norm.add_dummy_prefix.unwrap_or(true)),
        ),
        (
            "tokenizer.ggml.token_type_count".into(),
            MetaValue::U32(hp.u32(&["type_vocab_size"])?.unwrap_or(1)),
        ),
        (
            "tokenizer.ggml.remove_extra_whitespaces".into(),
            MetaValue::Bool(norm.remove_extra_whitespaces.unwrap_or(true)),
        ),
    ];
    if let Some(map) = norm.precompiled_charsmap.filter(|m| !m.is_empty()) {
        kv.push((
            "tokenizer.ggml.precompiled_charsmap".into(),
            MetaValue::TypedArray {
                elem: MetaType::U8,
                items: map.into_iter().map(MetaValue::U8).collect(),
            },
        ));
    }
    kv.extend(special::load(dir, false, Some(count))?.to_kv());
    Ok(VocabExport { kv, chkhsh: None })
}

/// The SentencePiece model at `path` and its normalizer spec; refused when missing (a
/// tokenizer.json-only release) or not a unigram model.
fn read_unigram(path: &Path) -> Result<(spm::ModelProto, NormalizerSpec)> {
    if !path.is_file() {
        return Err(Error::Unsupported {
            at: Location::file(path),
            format: Some(Format::HfRelease),
            what: format!(
                "an XLM-RoBERTa release without {MODEL_FILE} (tokenizer.json only) is not \
                 supported yet"
            ),
        });
    }
    let bytes = crate::config::read_capped(path)?;
    let not_spm = |e: prost::DecodeError| bad(path, format!("not a SentencePiece model: {e}"));
    let model = spm::ModelProto::decode(bytes.as_slice()).map_err(not_spm)?;
    let specs = Specs::decode(bytes.as_slice()).map_err(not_spm)?;
    let model_type = specs.trainer_spec.and_then(|t| t.model_type).unwrap_or(1);
    if model_type != 1 {
        return Err(Error::Unsupported {
            at: Location::file(path),
            format: Some(Format::HfRelease),
            what: format!(
                "SentencePiece model type {model_type}: XLM-RoBERTa's vocabulary is a unigram \
                 model (type 1), the only one the reference converts"
            ),
        });
    }
    Ok((model, specs.normalizer_spec.unwrap_or_default()))
}

/// Tokens, scores and types in HF's ids: [`HEAD`], then the pieces from id 3 (a slot past the
/// pieces is `[PAD{id}]`), the last of the `vocab_size` slots left out.
fn hf_slots(
    model: &spm::ModelProto,
    hp: &HParams,
    path: &Path,
) -> Result<(Vec<String>, Vec<f32>, Vec<TokenType>)> {
    let n_pieces = model.pieces.len() as u64;
    let n = hp.uint(&["vocab_size"])?.unwrap_or(0).max(n_pieces);
    if n > 16 << 20 {
        return Err(bad(
            &hp.path,
            format!("vocab_size {n} is implausibly large"),
        ));
    }
    if n < HEAD.len() as u64 {
        return Err(bad(
            path,
            format!("{n} pieces: fewer than <s> <pad> </s> <unk>"),
        ));
    }
    let (mut tokens, mut scores, mut types) = (Vec::new(), Vec::new(), Vec::new());
    for (text, ty) in HEAD {
        tokens.push(text.to_owned());
        scores.push(0.0f32);
        types.push(ty);
    }
    for id in 3..n as usize - 1 {
        match model.pieces.get(id) {
            Some(p) => {
                tokens.push(p.piece.clone().unwrap_or_default());
                scores.push(p.score.unwrap_or(0.0));
                types.push(spm::piece_type(p.r#type));
            }
            None => {
                tokens.push(format!("[PAD{id}]"));
                scores.push(-10000.0);
                types.push(TokenType::Unused);
            }
        }
    }
    Ok((tokens, scores, types))
}
