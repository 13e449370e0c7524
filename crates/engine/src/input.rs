//! Opening inputs through the registry: repos (directories, index files) first, then single
//! files by content. No format is named here.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use weightport_core::registry::OpenRequest;
use weightport_core::{shown, Error, MultiSource, Result, TensorSource};

use crate::registry::{open_file, open_repo};

/// An opened input.
#[non_exhaustive]
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

/// A file's identity (device, inode), symlinks followed; `None` if it cannot be stat'ed (the
/// open then says why).
fn identity(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// Refuses an input given twice (the same path, or two paths to the same file).
fn refuse_repeats(inputs: &[PathBuf]) -> Result<()> {
    let mut seen = HashSet::new();
    for (i, p) in inputs.iter().enumerate() {
        if identity(p).is_some_and(|id| !seen.insert(id)) {
            let first = inputs[..i].iter().find(|q| identity(q) == identity(p));
            return Err(Error::Usage(format!(
                "{}: given more than once as an input",
                shown(first.unwrap_or(p))
            )));
        }
    }
    Ok(())
}

/// Opens every input and joins them into one source. An input that is already part of an
/// earlier one (every part of a gguf-split set, as a shell glob gives them, or a shard of a
/// repo given too) is read once, as part of that one.
pub fn open_inputs(inputs: &[PathBuf], req: &OpenRequest) -> Result<Input> {
    refuse_repeats(inputs)?;
    let mut opened: Vec<Input> = Vec::new();
    let mut covered = HashSet::new();
    for p in inputs {
        if identity(p).is_some_and(|id| covered.contains(&id)) {
            continue;
        }
        let input = open_input(p, req)?;
        covered.extend(input.source.files().iter().filter_map(|f| identity(f)));
        opened.push(input);
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
