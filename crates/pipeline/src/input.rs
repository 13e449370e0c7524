//! Opening inputs through the registry: repos (directories, index files) first, then single
//! files by content. No format is named here.

use std::path::{Path, PathBuf};

use weightport_core::registry::OpenRequest;
use weightport_core::{Error, MultiSource, Result, TensorSource};

use crate::registry::{open_file, open_repo};

/// An opened input.
pub struct Input {
    /// The tensors.
    pub source: Box<dyn TensorSource>,
    /// The repo directory, when the input was one (or an index inside one): its companion
    /// files are copied into an output repo.
    pub repo_dir: Option<PathBuf>,
    /// The file that decided what was read (a repo's index or single weights file).
    pub chosen: Option<PathBuf>,
    /// What the user should know about how the input was read.
    pub notes: Vec<String>,
}

/// Opens an input: a weights file, an index, or a repo directory.
pub fn open_input(path: &Path, req: &OpenRequest) -> Result<Input> {
    if let Some(r) = open_repo(path, req) {
        let r = r?;
        return Ok(Input {
            source: r.source,
            repo_dir: Some(r.dir),
            chosen: Some(r.chosen),
            notes: r.notes,
        });
    }
    Ok(Input {
        source: open_file(path, req)?,
        repo_dir: None,
        chosen: None,
        notes: Vec::new(),
    })
}

/// Opens every input and joins them into one source.
pub fn open_inputs(inputs: &[PathBuf], req: &OpenRequest) -> Result<Input> {
    let mut opened = Vec::new();
    for p in inputs {
        opened.push(open_input(p, req)?);
    }
    if opened.len() <= 1 {
        return opened
            .pop()
            .ok_or_else(|| Error::Usage("no input given".into()));
    }
    let repo_dir = opened.iter().find_map(|i| i.repo_dir.clone());
    let notes = opened.iter().flat_map(|i| i.notes.clone()).collect();
    let parts = opened.into_iter().map(|i| i.source).collect();
    Ok(Input {
        source: Box::new(MultiSource::new(parts)?),
        repo_dir,
        chosen: None,
        notes,
    })
}
