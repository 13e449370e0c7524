//! `weightport scan`: the pickle audit over a file or every checkpoint in a directory tree.
//! A file is a checkpoint when the PyTorch probe (ZIP central directory, pickle magic, tar)
//! claims it, or its name says so (`.bin .pt .pth .ckpt .pkl .pickle`): a renamed pickle is
//! still scanned, a safetensors file is not.

use std::path::{Path, PathBuf};

use weightport_core::{Error, Result};
pub use weightport_pickle::scan::{ScanReport, Verdict};

use crate::registry::head_of;

const NAMES: &[&str] = &[".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle"];

fn is_checkpoint(path: &Path) -> bool {
    let named = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| NAMES.iter().any(|e| n.to_ascii_lowercase().ends_with(e)));
    named || head_of(path).is_ok_and(|h| weightport_pickle::probe(path, &h))
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) -> Result<()> {
    if depth > 32 {
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, "read directory", e))?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            walk(&p, out, depth + 1)?;
        } else if meta.is_file() && is_checkpoint(&p) {
            out.push(p);
        }
    }
    Ok(())
}

/// Scans `path` (a file, or every checkpoint under a directory; symlinks are not followed).
pub fn scan(path: &Path) -> Result<Vec<ScanReport>> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, "open", e))?;
    let files = if meta.is_dir() {
        let mut v = Vec::new();
        walk(path, &mut v, 0)?;
        v
    } else {
        vec![path.to_path_buf()]
    };
    files.iter().map(|f| weightport_pickle::scan(f)).collect()
}
