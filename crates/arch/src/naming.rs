//! The reference converter's choices that are not in the architecture table: the model's
//! `general.name` from its directory (gguf-py's `Metadata.id_to_title`), `--outtype auto`, and
//! the order it reads a release's tensors in.

use std::path::Path;

use weightport_core::{CastRule, DType, Format};

use crate::origin::SourceTensor;

/// The float conversions of the reference converter's `--outtype`: torch's `.to(float32)`
/// of BF16 sources, then numpy's `astype(float16)` for F16 and gguf-py's numpy port of ggml's
/// BF16 rounding (`gguf.quants.quantize`); an F16 source reaches numpy as F16 and widens with
/// numpy's rule.
pub const CONVERT_CASTS: CastRule = CastRule::Numpy;

/// gguf-py's `Metadata.id_to_title`: `-` to spaces, all-lowercase words title-cased unless they
/// are versions (`v0.2`) or start with a digit (`7b`).
pub fn id_to_title(id: &str) -> String {
    id.trim()
        .replace('-', " ")
        .split_whitespace()
        .map(|w| {
            let cased = w.chars().any(char::is_alphabetic);
            let lower = cased && !w.chars().any(char::is_uppercase);
            let version = w.starts_with(|c: char| c.is_ascii_digit())
                || (w.starts_with('v')
                    && w.len() > 1
                    && w[1..]
                        .split('.')
                        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())));
            if lower && !version {
                title(w)
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Python's `str.title()`: the first letter of every run of letters upper-cased.
fn title(w: &str) -> String {
    let mut out = String::with_capacity(w.len());
    let mut prev_alpha = false;
    for c in w.chars() {
        if c.is_alphabetic() && !prev_alpha {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        prev_alpha = c.is_alphabetic();
    }
    out
}

/// The id the reference's directory heuristics read ([`crate::card`]): the directory's name;
/// for an HF cache snapshot (`models--org--name/snapshots/<commit>`) the repo name instead of
/// the commit hash.
pub fn dir_id(dir: &Path) -> Option<String> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let base = dir.file_name()?.to_string_lossy().into_owned();
    let parent = dir.parent();
    let in_cache = parent
        .and_then(Path::file_name)
        .is_some_and(|n| n == "snapshots");
    let id = match parent.and_then(Path::parent).and_then(Path::file_name) {
        Some(repo) if in_cache => {
            let repo = repo.to_string_lossy();
            repo.rsplit("--").next().unwrap_or(&repo).to_string()
        }
        _ => base,
    };
    Some(id)
}

/// Whether the reference reads a release's tensors sorted by name within each part (it does
/// for safetensors parts; a `.bin` part, read with torch.load, keeps the state dict's order).
pub fn sorts_names(source: Format) -> bool {
    !matches!(source, Format::PytorchZip | Format::PytorchLegacy)
}

/// `--outtype` of the reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutType {
    /// Everything F32 (`general.file_type` 0).
    F32,
    /// ≥2-D weights F16 (1).
    F16,
    /// ≥2-D weights BF16 (32).
    Bf16,
    /// ≥2-D weights Q8_0 (7); rows not a multiple of 32 fall back to F16.
    Q8_0,
}

impl OutType {
    /// `general.file_type`.
    pub fn file_type(self) -> u32 {
        match self {
            OutType::F32 => 0,
            OutType::F16 => 1,
            OutType::Bf16 => 32,
            OutType::Q8_0 => 7,
        }
    }
}

/// The reference's `--outtype` for a requested output type (`None`: its `auto`); a type the
/// reference cannot write is a usage error.
pub fn outtype_for(
    asked: Option<DType>,
    tensors: &[SourceTensor],
    sort_names: bool,
) -> weightport_core::Result<OutType> {
    Ok(match asked {
        None => auto_outtype(tensors, sort_names),
        Some(DType::F32) => OutType::F32,
        Some(DType::F16) => OutType::F16,
        Some(DType::BF16) => OutType::Bf16,
        Some(DType::Q8_0) => OutType::Q8_0,
        Some(d) => {
            return Err(weightport_core::Error::Usage(format!(
                "{} {d}: an HF release converts to GGUF as auto, f32, f16, bf16 or q8_0",
                weightport_core::Knob::Dtype
            )))
        }
    })
}

/// `--outtype auto`: the first ≥2-D tensor (in the reference's reading order) decides: BF16
/// stays BF16, anything else becomes F16.
pub fn auto_outtype(tensors: &[SourceTensor], sort_names: bool) -> OutType {
    let mut order: Vec<&SourceTensor> = tensors.iter().collect();
    if sort_names {
        order.sort_by(|a, b| (&a.file, &a.name).cmp(&(&b.file, &b.name)));
    } else {
        order.sort_by(|a, b| a.file.cmp(&b.file));
    }
    match order.iter().find(|t| t.shape.len() >= 2).map(|t| t.dtype) {
        Some(DType::BF16) => OutType::Bf16,
        _ => OutType::F16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_like_gguf_py() {
        // Expected values: gguf-py 0.19 `Metadata.load(None, Path(dir), None, 1000).name`.
        assert_eq!(id_to_title("llama"), "Llama");
        assert_eq!(
            id_to_title("Mistral-7B-Instruct-v0.2"),
            "Mistral 7B Instruct v0.2"
        );
        assert_eq!(id_to_title("Llama-2-7b-hf"), "Llama 2 7b Hf");
        assert_eq!(
            id_to_title("qwen2.5-0.5b-instruct"),
            "Qwen2.5 0.5b Instruct"
        );
        assert_eq!(id_to_title("my_model"), "My_Model");
        assert_eq!(
            id_to_title("TinyLlama-1.1B-Chat-v1.0"),
            "TinyLlama 1.1B Chat v1.0"
        );
    }
}
