//! Opening inputs: format sniffing (never by extension) and HF repo directories.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use weightport_core::{
    sanitize, sniff, Error, Format, Limits, Location, Result, Sniffed, TensorSource,
};
use weightport_hf::{find_weights, read_index, Weights};
use weightport_safetensors::SafetensorsFile;

use crate::multi::MultiSource;

/// An opened input.
pub struct Input {
    /// The tensors.
    pub source: Box<dyn TensorSource>,
    /// The repo directory, when the input was one (or an index inside one): its companion
    /// files are copied into an output repo.
    pub repo_dir: Option<PathBuf>,
}

fn sniff_file(path: &Path) -> Result<Sniffed> {
    let mut f = File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let mut buf = [0u8; 64];
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, "read", e)),
        }
    }
    Ok(sniff(&buf[..n]))
}

fn unsupported(path: &Path, format: Format, what: &str) -> Error {
    Error::Unsupported {
        at: Location::file(path),
        format,
        what: what.into(),
    }
}

/// Opens one weights file, choosing the reader from its content.
pub fn open_file(path: &Path, limits: &Limits) -> Result<Box<dyn TensorSource>> {
    match sniff_file(path)? {
        Sniffed::Format(Format::Safetensors) | Sniffed::Unknown => {
            Ok(Box::new(SafetensorsFile::open_with(path, limits)?))
        }
        Sniffed::Zip => Err(unsupported(
            path,
            Format::PytorchZip,
            "ZIP archives (PyTorch checkpoints, .npz) are not readable yet; only safetensors is",
        )),
        Sniffed::Format(f) => Err(unsupported(
            path,
            f,
            "this format is not readable yet; only safetensors is",
        )),
        other => Err(Error::NotFormat {
            path: path.to_path_buf(),
            expected: Format::Safetensors,
            what: other.describe(),
        }),
    }
}

/// Opens a sharded safetensors repo from its index: every shard must exist inside the repo, and
/// the index and the shards must agree tensor for tensor.
pub fn open_index(index_path: &Path, limits: &Limits) -> Result<MultiSource> {
    let dir = index_path.parent().unwrap_or(Path::new("."));
    let index = read_index(index_path, limits)?;
    let mut parts: Vec<Box<dyn TensorSource>> = Vec::new();
    for shard in index.shards() {
        let p = dir.join(&shard);
        if !p.exists() {
            return Err(Error::malformed(
                Location::file(index_path),
                Format::Safetensors,
                format!(
                    "index names shard `{}`, which is missing from {} (an incomplete download?)",
                    sanitize(&shard),
                    dir.display()
                ),
            ));
        }
        let src = SafetensorsFile::open_with(&p, limits)?;
        let names: BTreeSet<&str> = src.tensors().iter().map(|t| t.name.as_str()).collect();
        for (t, f) in index.weight_map.iter().filter(|(_, f)| **f == shard) {
            if !names.contains(t.as_str()) {
                return Err(Error::malformed(
                    Location::file(&p).tensor(t.clone()),
                    Format::Safetensors,
                    format!(
                        "the index puts this tensor in `{}` but the shard does not hold it",
                        sanitize(f)
                    ),
                ));
            }
        }
        for t in src.tensors() {
            if index.weight_map.get(&t.name) != Some(&shard) {
                return Err(Error::malformed(
                    Location::file(&p).tensor(t.name.clone()),
                    Format::Safetensors,
                    "the shard holds this tensor but the index does not map it to this shard",
                ));
            }
        }
        parts.push(Box::new(src));
    }
    MultiSource::new(parts)
}

/// Opens an input: a weights file, an `*.index.json`, or an HF repo directory.
pub fn open_input(path: &Path, limits: &Limits) -> Result<Input> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, "open", e))?;
    if meta.is_dir() {
        let source: Box<dyn TensorSource> = match find_weights(path)? {
            Weights::SafetensorsIndex(p) => Box::new(open_index(&p, limits)?),
            Weights::SafetensorsFile(p) => open_file(&p, limits)?,
            Weights::BinIndex(p) | Weights::BinFile(p) => {
                return Err(unsupported(
                    &p,
                    Format::PytorchZip,
                    "PyTorch .bin repos are not readable yet; only safetensors is",
                ))
            }
        };
        return Ok(Input {
            source,
            repo_dir: Some(path.to_path_buf()),
        });
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.ends_with(".index.json") {
        let dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        return Ok(Input {
            source: Box::new(open_index(path, limits)?),
            repo_dir: Some(dir),
        });
    }
    Ok(Input {
        source: open_file(path, limits)?,
        repo_dir: None,
    })
}
