//! Finding the weights and the companion files of an HF repo directory.

use std::path::{Path, PathBuf};

use weightport_core::{Error, Result};

use crate::shard::{INDEX, SINGLE};

/// Where a repo directory keeps its weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Weights {
    /// `model.safetensors.index.json` (or another `*.safetensors.index.json`) plus shards.
    SafetensorsIndex(PathBuf),
    /// One safetensors file.
    SafetensorsFile(PathBuf),
    /// `pytorch_model.bin.index.json` plus `.bin` shards.
    BinIndex(PathBuf),
    /// One `pytorch_model.bin`.
    BinFile(PathBuf),
}

/// True for files that hold weights (or index them) and are therefore not copied verbatim
/// into a converted repo.
pub fn is_weights_file(name: &str) -> bool {
    const EXT: &[&str] = &[
        ".safetensors",
        ".safetensors.index.json",
        ".bin",
        ".bin.index.json",
        ".pt",
        ".pth",
        ".ckpt",
        ".gguf",
        ".npz",
        ".npy",
        ".h5",
        ".msgpack",
        ".onnx",
        ".wp-tmp",
    ];
    EXT.iter().any(|e| name.ends_with(e))
}

fn list(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, "read directory", e))? {
        let e = e.map_err(|e| Error::io(dir, "read directory", e))?;
        if e.file_type().map(|t| t.is_file()).unwrap_or(false) {
            if let Some(n) = e.file_name().to_str() {
                names.push(n.to_string());
            }
        }
    }
    names.sort();
    Ok(names)
}

/// Locates the weights in `dir`, preferring safetensors over `.bin` as transformers does.
pub fn find_weights(dir: &Path) -> Result<Weights> {
    let names = list(dir)?;
    let has = |n: &str| names.iter().any(|x| x == n);
    if has(INDEX) {
        return Ok(Weights::SafetensorsIndex(dir.join(INDEX)));
    }
    if has(SINGLE) {
        return Ok(Weights::SafetensorsFile(dir.join(SINGLE)));
    }
    let idx: Vec<&String> = names
        .iter()
        .filter(|n| n.ends_with(".safetensors.index.json"))
        .collect();
    if idx.len() == 1 {
        return Ok(Weights::SafetensorsIndex(dir.join(idx[0])));
    }
    let st: Vec<&String> = names
        .iter()
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    if st.len() == 1 {
        return Ok(Weights::SafetensorsFile(dir.join(st[0])));
    }
    if has("pytorch_model.bin.index.json") {
        return Ok(Weights::BinIndex(dir.join("pytorch_model.bin.index.json")));
    }
    if has("pytorch_model.bin") {
        return Ok(Weights::BinFile(dir.join("pytorch_model.bin")));
    }
    let what = if st.len() > 1 || idx.len() > 1 {
        "several safetensors files and no single index: name the file or index to use"
    } else {
        "no weights found (expected model.safetensors, model.safetensors.index.json or pytorch_model.bin)"
    };
    Err(Error::Usage(format!("{}: {what}", dir.display())))
}

/// The files of `dir` to copy beside converted weights (config.json, tokenizer files, …):
/// regular top-level files that are neither weights nor hidden.
pub fn companion_files(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(list(dir)?
        .into_iter()
        .filter(|n| !n.starts_with('.') && !is_weights_file(n))
        .map(|n| dir.join(n))
        .collect())
}
