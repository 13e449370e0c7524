//! SentencePiece `tokenizer.model` → `tokenizer.ggml.{tokens,scores,token_type}`.
//!
//! `tokenizer.model` is a `sentencepiece.ModelProto` protobuf; only field 1 (`pieces`:
//! piece string, score, type) matters here. The structs below declare just those fields; prost
//! skips the rest (trainer and normalizer specs).
//!
//! Reference behaviour (`_create_vocab_sentencepiece`, docs/specs/gguf.md §5.6):
//! * `vocab_size` of config.json (else the model's piece count) slots, pre-filled with
//!   `[PAD{i}]`, score -10000, UNUSED;
//! * each piece: its text, score, and a type from IsUnknown / IsControl / IsUnused / IsByte
//!   (in that order), NORMAL otherwise — so USER_DEFINED pieces become NORMAL;
//! * `added_tokens.json` entries: text, score -1000, USER_DEFINED;
//! * tokenizer_config `added_tokens_decoder` entries: text, score -1000, CONTROL when `special`
//!   or the text looks special, else USER_DEFINED with `▁` replaced by a space.
//!
//! Phi-3's own export ([`Flavor::Phi3`], `Phi3MiniModel.set_vocab`) differs in the added
//! tokens: those of `added_tokens_decoder` and then of `tokenizer.json`'s `added_tokens` are
//! CONTROL when `special`, else USER_DEFINED, their text as given; an id past the vocabulary is
//! an error there (the reference fails with an IndexError).

use std::path::Path;

use prost::Message;
use serde_json::Value;
use weightport_core::Result;

use super::{looks_special, TokenType};
use crate::config::{bad, read_json};

/// `sentencepiece.ModelProto`, the fields used.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    /// The vocabulary, by id.
    #[prost(message, repeated, tag = "1")]
    pub pieces: Vec<SentencePiece>,
}

/// `ModelProto.SentencePiece`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SentencePiece {
    /// Piece text (`▁` for a space).
    #[prost(string, optional, tag = "1")]
    pub piece: Option<String>,
    /// Score (log probability for unigram, rank for BPE).
    #[prost(float, optional, tag = "2")]
    pub score: Option<f32>,
    /// Type: 1 NORMAL (default), 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE.
    #[prost(int32, optional, tag = "3")]
    pub r#type: Option<i32>,
}

/// The SentencePiece vocabulary as the reference exports it.
pub struct SpmVocab {
    /// Token texts.
    pub tokens: Vec<String>,
    /// Scores.
    pub scores: Vec<f32>,
    /// Token types.
    pub types: Vec<TokenType>,
}

/// Whose added-token rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `_create_vocab_sentencepiece` (Llama, Gemma, Qwen2 with a tokenizer.model, …).
    Common,
    /// `Phi3MiniModel.set_vocab`.
    Phi3,
}

/// Parses `dir/tokenizer.model` and applies the reference's overrides.
pub fn load(dir: &Path, vocab_size: Option<u64>, flavor: Flavor) -> Result<SpmVocab> {
    let path = dir.join("tokenizer.model");
    let bytes = crate::config::read_capped(&path)?;
    let model = ModelProto::decode(bytes.as_slice())
        .map_err(|e| bad(&path, format!("not a SentencePiece model: {e}")))?;
    let n = match vocab_size {
        Some(n) => usize::try_from(n).map_err(|_| bad(&path, "vocab_size too large"))?,
        None => model.pieces.len(),
    };
    if n > 16 << 20 {
        return Err(bad(&path, format!("vocab_size {n} is implausibly large")));
    }
    let mut tokens: Vec<String> = (0..n).map(|i| format!("[PAD{i}]")).collect();
    let mut scores = vec![-10000.0f32; n];
    let mut types = vec![TokenType::Unused; n];
    for (id, p) in model.pieces.iter().enumerate().take(n) {
        tokens[id] = p.piece.clone().unwrap_or_default();
        scores[id] = p.score.unwrap_or(0.0);
        types[id] = piece_type(p.r#type);
    }
    let added = dir.join("added_tokens.json");
    if added.is_file() {
        if let Value::Object(m) = read_json(&added)? {
            for (text, id) in m {
                let Some(id) = id.as_u64().map(|v| v as usize).filter(|&i| i < n) else {
                    continue;
                };
                tokens[id] = text;
                scores[id] = -1000.0;
                types[id] = TokenType::UserDefined;
            }
        }
    }
    if flavor == Flavor::Phi3 {
        phi3_added(dir, &mut tokens, &mut scores, &mut types)?;
        return Ok(SpmVocab {
            tokens,
            scores,
            types,
        });
    }
    let tc = dir.join("tokenizer_config.json");
    if tc.is_file() {
        let cfg = read_json(&tc)?;
        if let Some(Value::Object(dec)) = cfg.get("added_tokens_decoder") {
            for (id, data) in dec {
                let Some(id) = id.parse::<usize>().ok().filter(|&i| i < n) else {
                    continue;
                };
                let Some(text) = data.get("content").and_then(Value::as_str) else {
                    return Err(bad(&tc, format!("added token {id} has no content")));
                };
                let special = data.get("special").and_then(Value::as_bool) == Some(true);
                if special || looks_special(text) {
                    types[id] = TokenType::Control;
                    tokens[id] = text.to_owned();
                } else {
                    types[id] = TokenType::UserDefined;
                    tokens[id] = text.replace('\u{2581}', " ");
                }
                scores[id] = -1000.0;
            }
        }
    }
    Ok(SpmVocab {
        tokens,
        scores,
        types,
    })
}

/// The reference's type of a piece (`IsUnknown` / `IsControl` / `IsUnused` / `IsByte`, in that
/// order, else NORMAL: a USER_DEFINED piece is NORMAL).
pub fn piece_type(t: Option<i32>) -> TokenType {
    match t.unwrap_or(1) {
        2 => TokenType::Unknown,
        3 => TokenType::Control,
        5 => TokenType::Unused,
        6 => TokenType::Byte,
        _ => TokenType::Normal,
    }
}

/// Phi-3's added tokens: `added_tokens_decoder` of tokenizer_config.json, then `added_tokens`
/// of tokenizer.json; CONTROL when `special`, else USER_DEFINED; score -1000.
fn phi3_added(
    dir: &Path,
    tokens: &mut [String],
    scores: &mut [f32],
    types: &mut [TokenType],
) -> Result<()> {
    let mut set = |path: &Path, id: usize, data: &Value| -> Result<()> {
        let text = data
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(path, format!("added token {id} has no content")))?;
        if id >= tokens.len() {
            return Err(bad(
                path,
                format!(
                    "added token {id} is past the vocabulary of {} (the reference fails here)",
                    tokens.len()
                ),
            ));
        }
        tokens[id] = text.to_owned();
        scores[id] = -1000.0;
        let special = data.get("special").and_then(Value::as_bool) == Some(true);
        types[id] = if special {
            TokenType::Control
        } else {
            TokenType::UserDefined
        };
        Ok(())
    };
    let tc = dir.join("tokenizer_config.json");
    if tc.is_file() {
        if let Some(Value::Object(dec)) = read_json(&tc)?.get("added_tokens_decoder") {
            for (id, data) in dec {
                let id = id
                    .parse::<usize>()
                    .map_err(|_| bad(&tc, format!("added token id `{id}` is not a number")))?;
                set(&tc, id, data)?;
            }
        }
    }
    let tj = dir.join("tokenizer.json");
    if tj.is_file() {
        if let Some(Value::Array(added)) = read_json(&tj)?.get("added_tokens") {
            for data in added {
                let id = data
                    .get("id")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| bad(&tj, "an added token has no id"))?;
                set(&tj, id as usize, data)?;
            }
        }
    }
    Ok(())
}
