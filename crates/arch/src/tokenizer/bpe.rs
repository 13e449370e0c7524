//! GPT-2 style BPE `tokenizer.json` → `tokenizer.ggml.{tokens,token_type}` and the
//! pre-tokenizer check hash (docs/specs/gguf.md §5.6, `get_vocab_base` / `get_vocab_base_pre`).
//!
//! The vocabulary and the check hash both come from HF's `tokenizers` crate loading
//! `tokenizer.json` (no hand-written BPE): ids `0..vocab_size`, missing ids `[PAD{i}]` UNUSED,
//! added tokens CONTROL when `special` or looking special, else USER_DEFINED (`▁` → space), the
//! rest NORMAL; token strings are the byte-level vocabulary strings as stored.
//!
//! The check hash: `sha256(str(ids))` where `ids = encode(CHKTXT, add_special_tokens=True)`
//! (no truncation, no padding) and `str(list)` is Python's `[1, 2, 3]`.

use std::path::Path;

#[cfg(feature = "hf-tokenizer")]
use sha2::{Digest, Sha256};
#[cfg(feature = "hf-tokenizer")]
use tokenizers::Tokenizer;
use weightport_core::Result;

use super::TokenType;
#[cfg(feature = "hf-tokenizer")]
use super::{looks_special, pre_table};
#[cfg(feature = "hf-tokenizer")]
use crate::config::bad;

/// The BPE vocabulary as the reference exports it.
pub struct BpeVocab {
    /// Token texts.
    pub tokens: Vec<String>,
    /// Token types.
    pub types: Vec<TokenType>,
    /// The check hash of the pre-tokenizer.
    pub chkhsh: String,
}

/// Loads `dir/tokenizer.json` with the `tokenizers` crate.
#[cfg(feature = "hf-tokenizer")]
pub fn load_tokenizer(dir: &Path) -> Result<Tokenizer> {
    let path = dir.join("tokenizer.json");
    if !path.is_file() {
        return Err(weightport_core::Error::io(
            &path,
            "open",
            std::io::Error::new(std::io::ErrorKind::NotFound, "no tokenizer.json"),
        ));
    }
    let bytes = crate::config::read_capped(&path)?;
    // tokenizers 0.22 panics on some malformed decoders (`expect("Helper")`): contained.
    weightport_core::contain_panic(|| Tokenizer::from_bytes(&bytes))
        .map_err(|p| {
            bad(
                &path,
                format!("tokenizers cannot load it (it panicked: {p})"),
            )
        })?
        .map_err(|e| bad(&path, format!("tokenizers cannot load it: {e}")))
}

/// The reference's pre-tokenizer check hash for `tok`.
///
/// transformers' `encode` neither truncates nor pads unless asked (it turns off what
/// `tokenizer.json` configures: all-MiniLM-L6-v2's truncates at 128 and pads to 128), so
/// neither does this.
#[cfg(feature = "hf-tokenizer")]
pub fn check_hash(tok: &Tokenizer) -> Result<String> {
    let mut tok = tok.clone();
    tok.with_truncation(None)
        .map_err(|e| weightport_core::Error::Usage(format!("tokenizer: {e}")))?;
    tok.with_padding(None);
    let enc = tok
        .encode(pre_table().chktxt.as_str(), true)
        .map_err(|e| weightport_core::Error::Usage(format!("tokenizer cannot encode: {e}")))?;
    let ids: Vec<String> = enc.get_ids().iter().map(u32::to_string).collect();
    let text = format!("[{}]", ids.join(", "));
    Ok(hex(&Sha256::digest(text.as_bytes())))
}

#[cfg(any(feature = "hf-tokenizer", test))]
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Without the `hf-tokenizer` feature (and so without the `tokenizers` crate) a `tokenizer.json`
/// vocabulary cannot be exported: refused, naming the feature.
#[cfg(not(feature = "hf-tokenizer"))]
pub fn load(dir: &Path, _vocab_size: Option<u64>) -> Result<BpeVocab> {
    Err(weightport_core::Error::unsupported(
        weightport_core::Location::file(dir.join("tokenizer.json")),
        weightport_core::Format::HfRelease,
        "a BPE/WordPiece tokenizer.json needs the `hf-tokenizer` feature, which this weightport \
         was built without (rebuild with default features)",
    ))
}

/// Tokens and types of a BPE (or WordPiece) `tokenizer.json`, ids `0..vocab_size`.
#[cfg(feature = "hf-tokenizer")]
pub fn load(dir: &Path, vocab_size: Option<u64>) -> Result<BpeVocab> {
    let tok = load_tokenizer(dir)?;
    let path = dir.join("tokenizer.json");
    let vocab = tok.get_vocab(true);
    let max_id = vocab.values().copied().max().unwrap_or(0) as u64;
    let n = vocab_size.unwrap_or(vocab.len() as u64);
    if max_id >= n {
        return Err(bad(
            &path,
            format!("token id {max_id} is not below vocab_size {n}"),
        ));
    }
    if n > 16 << 20 {
        return Err(bad(&path, format!("vocab_size {n} is implausibly large")));
    }
    let chkhsh = check_hash(&tok)?;
    let mut by_id: Vec<Option<String>> = vec![None; n as usize];
    for (text, id) in vocab {
        by_id[id as usize] = Some(text);
    }
    let added = tok.get_added_tokens_decoder();
    let mut tokens = Vec::with_capacity(n as usize);
    let mut types = Vec::with_capacity(n as usize);
    for (i, t) in by_id.into_iter().enumerate() {
        match t {
            None => {
                tokens.push(format!("[PAD{i}]"));
                types.push(TokenType::Unused);
            }
            Some(text) => match added.get(&(i as u32)).filter(|a| a.content == text) {
                Some(a) => {
                    // Not reproduced: the reference round-trips non-normalized added tokens
                    // through encode/decode, which is the identity for ordinary special tokens.
                    if a.special || looks_special(&text) {
                        tokens.push(text);
                        types.push(TokenType::Control);
                    } else {
                        tokens.push(text.replace('\u{2581}', " "));
                        types.push(TokenType::UserDefined);
                    }
                }
                None => {
                    tokens.push(text);
                    types.push(TokenType::Normal);
                }
            },
        }
    }
    Ok(BpeVocab {
        tokens,
        types,
        chkhsh,
    })
}
