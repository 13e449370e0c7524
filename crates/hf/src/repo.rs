//! Finding the weights and the companion files of an HF repo directory.
//!
//! The order is transformers' (`from_pretrained`): `model.safetensors`, then
//! `model.safetensors.index.json`, then `pytorch_model.bin`, then `pytorch_model.bin.index.json`,
//! so weightport reads exactly what transformers would load; when a repo holds both a single
//! file and an index, the choice is reported.
//!
//! Symlinks: the Hugging Face cache keeps `snapshots/<rev>/` as a directory of symlinks into
//! `../../blobs/`. A symlink in a repo is followed only when its target resolves inside the
//! repo directory, or inside the `blobs/` of the same cache entry; anything else (a cloned repo
//! whose shard points at `~/.ssh/id_rsa`) is refused before the target is opened.

use std::path::{Path, PathBuf};

use weightport_core::{shown, Error, Location, Result};

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

impl Weights {
    /// The file that decides what is read.
    pub fn path(&self) -> &Path {
        match self {
            Weights::SafetensorsIndex(p)
            | Weights::SafetensorsFile(p)
            | Weights::BinIndex(p)
            | Weights::BinFile(p) => p,
        }
    }
}

/// True for files that hold weights (or index them) and are therefore not copied verbatim
/// into a converted repo.
pub(crate) fn is_weights_file(name: &str) -> bool {
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
        weightport_core::staging::TEMP_SUFFIX,
    ];
    let lower = name.to_ascii_lowercase();
    EXT.iter().any(|e| lower.ends_with(e))
}

/// The `blobs/` directory of the HF cache entry `dir` is a snapshot of
/// (`models--org--name/snapshots/<rev>` → `models--org--name/blobs`).
fn cache_blobs(dir: &Path) -> Option<PathBuf> {
    let snapshots = dir.parent()?;
    (snapshots.file_name()? == "snapshots").then(|| snapshots.parent().map(|e| e.join("blobs")))?
}

/// `dir/name`, checked: a symlink must resolve inside `dir` or the cache entry's `blobs/`.
/// Returns the path to open (the link itself when allowed).
pub fn resolve_in_repo(dir: &Path, name: &str) -> Result<PathBuf> {
    let p = dir.join(name);
    let Ok(meta) = std::fs::symlink_metadata(&p) else {
        return Ok(p);
    };
    if !meta.file_type().is_symlink() {
        return Ok(p);
    }
    let target = p
        .canonicalize()
        .map_err(|e| Error::io(&p, "follow symlink", e))?;
    let root = dir
        .canonicalize()
        .map_err(|e| Error::io(dir, "resolve", e))?;
    let blobs = cache_blobs(&root).and_then(|b| b.canonicalize().ok());
    if target.starts_with(&root) || blobs.is_some_and(|b| target.starts_with(b)) {
        return Ok(p);
    }
    Err(Error::Refused {
        at: Location::file(&p),
        reason: "a symlink pointing outside the repo (and outside its Hugging Face cache \
                 entry's blobs/); not followed"
            .into(),
    })
}

/// Regular files of `dir` (symlinks allowed by [`resolve_in_repo`] count as their target),
/// sorted by name.
fn list(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, "read directory", e))? {
        let e = e.map_err(|e| Error::io(dir, "read directory", e))?;
        let Some(n) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let ft = e
            .file_type()
            .map_err(|err| Error::io(&e.path(), "stat", err))?;
        let is_file = if ft.is_symlink() {
            resolve_in_repo(dir, &n)?;
            std::fs::metadata(e.path()).is_ok_and(|m| m.is_file())
        } else {
            ft.is_file()
        };
        if is_file {
            names.push(n);
        }
    }
    names.sort();
    Ok(names)
}

/// Locates the weights in `dir` in transformers' order; the second value says what else was
/// there and not read (for `inspect` and `convert` to report).
pub fn find_weights(dir: &Path) -> Result<(Weights, Option<String>)> {
    let names = list(dir)?;
    let has = |n: &str| names.iter().any(|x| x == n);
    if has(SINGLE) {
        let note = has(INDEX).then(|| {
            format!(
                "{} holds both {SINGLE} and {INDEX}; read {SINGLE}, as transformers does",
                shown(dir)
            )
        });
        return Ok((Weights::SafetensorsFile(dir.join(SINGLE)), note));
    }
    if has(INDEX) {
        return Ok((Weights::SafetensorsIndex(dir.join(INDEX)), None));
    }
    let idx: Vec<&String> = names
        .iter()
        .filter(|n| n.ends_with(".safetensors.index.json"))
        .collect();
    if idx.len() == 1 {
        return Ok((Weights::SafetensorsIndex(dir.join(idx[0])), None));
    }
    let st: Vec<&String> = names
        .iter()
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    if st.len() == 1 && idx.is_empty() {
        return Ok((Weights::SafetensorsFile(dir.join(st[0])), None));
    }
    if st.is_empty() && idx.is_empty() {
        // A PEFT adapter saved without safetensors (PEFT's own order: safetensors first).
        if has("adapter_config.json") && has("adapter_model.bin") {
            return Ok((Weights::BinFile(dir.join("adapter_model.bin")), None));
        }
        if has("pytorch_model.bin") {
            return Ok((Weights::BinFile(dir.join("pytorch_model.bin")), None));
        }
        if has("pytorch_model.bin.index.json") {
            return Ok((
                Weights::BinIndex(dir.join("pytorch_model.bin.index.json")),
                None,
            ));
        }
    }
    let what = if st.len() > 1 || idx.len() > 1 {
        "several safetensors files and no single index: name the file or index to use"
    } else {
        "no weights found (expected model.safetensors, model.safetensors.index.json, \
         pytorch_model.bin or pytorch_model.bin.index.json)"
    };
    Err(Error::Usage(format!("{}: {what}", shown(dir))))
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
