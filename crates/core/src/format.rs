//! Container formats and content sniffing.
//!
//! Formats are recognised by their bytes, never by extension: a `.bin` may be a torch ZIP, a
//! legacy torch pickle, a GGUF file or a Git LFS pointer. safetensors has no magic (an 8-byte
//! little-endian header length, then JSON), so it is recognised by a plausible length followed
//! by `{` after optional JSON whitespace.

use std::fmt;

/// A container format weightport knows about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// safetensors: `u64` LE header length, JSON header, raw data.
    Safetensors,
    /// A PyTorch ZIP checkpoint (`torch.save` since 1.6).
    PytorchZip,
    /// A legacy (pre-ZIP) PyTorch checkpoint.
    PytorchLegacy,
    /// A NumPy `.npz` archive.
    Npz,
    /// A NumPy `.npy` array.
    Npy,
    /// GGUF (llama.cpp).
    Gguf,
    /// The side files of a Hugging Face release (`config.json`, tokenizer files, sentence-
    /// transformers modules), for errors about them.
    HfRelease,
}

impl Format {
    /// Short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Safetensors => "safetensors",
            Format::PytorchZip => "pytorch-zip",
            Format::PytorchLegacy => "pytorch-legacy",
            Format::Npz => "npz",
            Format::Npy => "npy",
            Format::Gguf => "gguf",
            Format::HfRelease => "hf-release",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the first bytes of a file look like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniffed {
    /// A known weights container.
    Format(Format),
    /// A ZIP archive whose entries have not been examined (torch checkpoint or NPZ).
    Zip,
    /// A Git LFS pointer: the weights were never downloaded.
    LfsPointer,
    /// An HTML page (an error page or a login wall saved in place of the file).
    Html,
    /// Zero bytes.
    Empty,
    /// A model format weightport does not read, recognised so the message can name it.
    Lookalike(Lookalike),
    /// Nothing recognisable.
    Unknown,
}

/// Model formats weightport does not read, told by their first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookalike {
    /// HDF5 (Keras `.h5`, TensorFlow weights).
    Hdf5,
    /// Protocol buffers (an ONNX model, a TensorFlow `saved_model.pb`).
    Protobuf,
    /// llama.cpp's formats before GGUF (`ggml`, `ggmf`, `ggjt`, `ggla`).
    Ggml,
    /// TensorFlow Lite (`TFL3`).
    Tflite,
    /// A CTranslate2 `model.bin`.
    Ctranslate2,
}

impl Lookalike {
    fn describe(self) -> &'static str {
        match self {
            Lookalike::Hdf5 => "is an HDF5 file (Keras .h5 or TensorFlow weights), which weightport does not read; load the model in Python and save its state dict as safetensors",
            Lookalike::Protobuf => "is a protocol-buffers file (an ONNX model or a TensorFlow SavedModel .pb), which weightport does not read",
            Lookalike::Ggml => "is a pre-GGUF GGML file (llama.cpp before August 2023), which weightport does not read; convert it with llama.cpp's convert_llama_ggml_to_gguf.py",
            Lookalike::Tflite => "is a TensorFlow Lite model, which weightport does not read",
            Lookalike::Ctranslate2 => "is a CTranslate2 model (its model.bin), which weightport does not read; convert from the original Hugging Face release instead",
        }
    }

    /// Recognises `prefix`.
    fn sniff(prefix: &[u8]) -> Option<Lookalike> {
        let at = |i: usize| prefix.get(i).copied().unwrap_or(0);
        if prefix.starts_with(b"\x89HDF\r\n\x1a\n") {
            return Some(Lookalike::Hdf5);
        }
        if [b"lmgg", b"fmgg", b"tjgg", b"algg"]
            .iter()
            .any(|m| prefix.starts_with(*m))
        {
            return Some(Lookalike::Ggml);
        }
        if prefix.get(4..8) == Some(b"TFL3") {
            return Some(Lookalike::Tflite);
        }
        if ctranslate2(prefix) {
            return Some(Lookalike::Ctranslate2);
        }
        // A protobuf message opening with field 1 as a small varint, then a length-delimited
        // field (ONNX: ir_version, producer_name; SavedModel: schema version, meta graphs).
        if at(0) == 0x08 && at(1) < 0x20 && matches!(at(2), 0x12 | 0x1a | 0x22 | 0x2a | 0x3a | 0x42)
        {
            return Some(Lookalike::Protobuf);
        }
        None
    }
}

/// CTranslate2's `model.bin`: a u32 format version, then the spec name as a u16 length
/// (NUL included) and that many bytes of an identifier ending in NUL.
fn ctranslate2(prefix: &[u8]) -> bool {
    if prefix.len() < 8 {
        return false;
    }
    let version = u32::from_le_bytes(prefix[..4].try_into().expect("4"));
    let len = usize::from(u16::from_le_bytes(prefix[4..6].try_into().expect("2")));
    let Some(name) = prefix.get(6..6 + len) else {
        return false;
    };
    (1..=16).contains(&version)
        && len >= 2
        && name.last() == Some(&0)
        && name[..len - 1]
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"_/.".contains(b))
}

impl Sniffed {
    /// A one-line description plus advice, for error messages ("is a Git LFS pointer; …").
    pub fn describe(&self) -> String {
        match self {
            Sniffed::Format(Format::Safetensors) => "is a safetensors file".into(),
            Sniffed::Format(Format::PytorchZip) | Sniffed::Zip => {
                "is a ZIP archive (a PyTorch checkpoint or a NumPy .npz), not safetensors; \
                 convert it with `weightport convert`"
                    .into()
            }
            Sniffed::Format(Format::PytorchLegacy) => {
                "is a legacy PyTorch pickle checkpoint, not safetensors".into()
            }
            Sniffed::Format(Format::Npz) => "is a NumPy .npz archive, not safetensors".into(),
            Sniffed::Format(Format::Npy) => "is a NumPy .npy array, not safetensors".into(),
            Sniffed::Format(Format::Gguf) => "is a GGUF file, not safetensors".into(),
            Sniffed::Format(Format::HfRelease) => "is a release side file, not weights".into(),
            Sniffed::LfsPointer => {
                "is a Git LFS pointer, not the weights; run `git lfs pull` (or download the file \
                 with `hf download`)"
                    .into()
            }
            Sniffed::Html => {
                "is an HTML page, not weights; the download saved an error or login page: \
                 download the file again"
                    .into()
            }
            Sniffed::Empty => "is empty (0 bytes); the download is incomplete".into(),
            Sniffed::Lookalike(l) => l.describe().into(),
            Sniffed::Unknown => "is not a recognised weights file".into(),
        }
    }
}

/// Classifies a file from its first bytes (pass at least 64 if the file has them).
pub fn sniff(prefix: &[u8]) -> Sniffed {
    if prefix.is_empty() {
        return Sniffed::Empty;
    }
    // safetensors first: its length prefix can begin with any byte (0x80 0x02 is N = 640).
    if prefix.len() >= 9 {
        let n = u64::from_le_bytes(prefix[..8].try_into().expect("8 bytes"));
        let json = trim_ascii_start(&prefix[8..]);
        if n <= 100_000_000 && (json.first() == Some(&b'{') || (json.is_empty() && n > 0)) {
            return Sniffed::Format(Format::Safetensors);
        }
    }
    if prefix.starts_with(b"GGUF") {
        return Sniffed::Format(Format::Gguf);
    }
    if prefix.starts_with(b"PK\x03\x04") || prefix.starts_with(b"PK\x05\x06") {
        return Sniffed::Zip;
    }
    if prefix.starts_with(b"\x93NUMPY") {
        return Sniffed::Format(Format::Npy);
    }
    if prefix.starts_with(b"version https://git-lfs") {
        return Sniffed::LfsPointer;
    }
    let text = trim_ascii_start(prefix);
    let lower: Vec<u8> = text
        .iter()
        .take(16)
        .map(|b| b.to_ascii_lowercase())
        .collect();
    if lower.starts_with(b"<!doctype html")
        || lower.starts_with(b"<html")
        || lower.starts_with(b"<?xml")
    {
        return Sniffed::Html;
    }
    // A legacy torch checkpoint begins with a pickle (PROTO 2) of the magic number.
    if prefix.len() >= 2 && prefix[0] == 0x80 && (2..=5).contains(&prefix[1]) {
        return Sniffed::Format(Format::PytorchLegacy);
    }
    match Lookalike::sniff(prefix) {
        Some(l) => Sniffed::Lookalike(l),
        None => Sniffed::Unknown,
    }
}

fn trim_ascii_start(b: &[u8]) -> &[u8] {
    let i = b
        .iter()
        .position(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        .unwrap_or(b.len());
    &b[i..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_common_impostors() {
        assert_eq!(
            sniff(b"version https://git-lfs.github.com/spec/v1\noid sha256:ab"),
            Sniffed::LfsPointer
        );
        assert_eq!(sniff(b"\n<!DOCTYPE html><html>"), Sniffed::Html);
        assert_eq!(sniff(b"PK\x03\x04\x00\x00"), Sniffed::Zip);
        assert_eq!(
            sniff(b"GGUF\x03\x00\x00\x00"),
            Sniffed::Format(Format::Gguf)
        );
        assert_eq!(sniff(b""), Sniffed::Empty);
        let mut st = 2u64.to_le_bytes().to_vec();
        st.extend_from_slice(b"{}");
        assert_eq!(sniff(&st), Sniffed::Format(Format::Safetensors));
    }
}
