//! NumPy formats in the registry: `.npz` archives (told from torch ZIP checkpoints by their
//! central directory), `.npy` arrays, and a directory of `.npy` files as one source.

use std::path::Path;

use weightport_core::registry::{InputFormat, OpenFile, OpenRequest, RepoFormat, RepoInput};
use weightport_core::{Format, ReadOptions, Result, TensorSource};

use crate::{open_npy_dir, probe_npy, probe_npz_source, NpySource, NpzSource};

/// `.npz` (stored or deflated members, ZIP64).
pub const NPZ: InputFormat = InputFormat {
    name: "npz",
    format: Format::Npz,
    probe: probe_npz_source,
    open: |src, opts: &ReadOptions| -> Result<Box<dyn TensorSource>> {
        Ok(Box::new(NpzSource::from_source(src, opts)?))
    },
};

/// One `.npy` array.
pub const NPY: InputFormat = InputFormat {
    name: "npy",
    format: Format::Npy,
    probe: |_, head| probe_npy(head),
    open: |src, opts: &ReadOptions| -> Result<Box<dyn TensorSource>> {
        Ok(Box::new(NpySource::from_source(src, opts)?))
    },
};

fn only_npy(dir: &Path) -> bool {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return false;
    };
    let names: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    names.iter().any(|n| n.ends_with(".npy"))
        && !names.iter().any(|n| {
            n.ends_with(".safetensors") || n.ends_with(".bin") || n.ends_with(".index.json")
        })
}

/// A directory of `.npy` files (and no other weights): one tensor per file.
pub const NPY_DIR: RepoFormat = RepoFormat {
    name: "npy-dir",
    claims: |p| p.is_dir() && only_npy(p),
    open: |path, req: &OpenRequest, _: OpenFile| -> Result<RepoInput> {
        Ok(RepoInput {
            source: Box::new(open_npy_dir(path, &req.read)?),
            dir: path.to_path_buf(),
            chosen: path.to_path_buf(),
            notes: Vec::new(),
        })
    },
};
