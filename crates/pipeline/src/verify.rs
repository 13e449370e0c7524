//! Verification of emitted files: each is reopened with the same strict reader users get, its
//! tensor list compared with the plan, and every tensor's content hash recomputed and compared
//! with the hash of the bytes the executor meant to write.

use std::collections::HashMap;
use std::path::Path;

use weightport_core::{
    sanitize, ContentHash, Error, Limits, Location, Result, StagedFile, TensorInfo,
};

use crate::exec::{run_chunks, Progress};
use crate::input::open_file;

fn fail(path: &Path, tensor: Option<&str>, reason: String) -> Error {
    Error::Verify {
        at: Location {
            path: path.to_path_buf(),
            tensor: tensor.map(str::to_string),
            offset: None,
        },
        reason,
    }
}

/// Verifies one staged file against the planned tensors (`planned[i]` with hash `expected[i]`
/// for every index in `file.tensors`).
pub fn verify_staged(
    file: &StagedFile,
    planned: &[TensorInfo],
    expected: &[ContentHash],
    limits: &Limits,
    progress: &dyn Progress,
) -> Result<()> {
    let shown = &file.path;
    let reopened = open_file(&file.temp, limits).map_err(|e| {
        fail(
            shown,
            None,
            format!("the written file does not reopen: {e}"),
        )
    })?;
    let got: HashMap<&str, usize> = reopened
        .tensors()
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    if got.len() != file.tensors.len() {
        return Err(fail(
            shown,
            None,
            format!(
                "holds {} tensors, {} were planned",
                got.len(),
                file.tensors.len()
            ),
        ));
    }
    let mut indices = Vec::with_capacity(file.tensors.len());
    let mut infos = Vec::with_capacity(file.tensors.len());
    for &p in &file.tensors {
        let want = &planned[p];
        let &i = got.get(want.name.as_str()).ok_or_else(|| {
            fail(
                shown,
                Some(&want.name),
                "missing from the written file".into(),
            )
        })?;
        let have = &reopened.tensors()[i];
        if have.dtype != want.dtype || have.shape != want.shape || have.byte_len != want.byte_len {
            return Err(fail(
                shown,
                Some(&want.name),
                format!(
                    "written as {} {:?}, planned {} {:?}",
                    have.dtype, have.shape, want.dtype, want.shape
                ),
            ));
        }
        indices.push(i);
        infos.push(want);
    }
    let hashes = run_chunks(reopened.as_ref(), &indices, &infos, progress, |_, _, _| {
        Ok(())
    })?;
    for (k, &p) in file.tensors.iter().enumerate() {
        if hashes[k] != expected[p] {
            return Err(fail(
                shown,
                Some(&planned[p].name),
                format!(
                    "content hash {} differs from the source's {}",
                    hashes[k], expected[p]
                ),
            ));
        }
    }
    Ok(())
}

/// Compares two lists of `(name, hash)`: returns human-readable differences (empty when equal).
pub fn compare(a: &[(String, ContentHash)], b: &[(String, ContentHash)]) -> Vec<String> {
    let bm: HashMap<&str, ContentHash> = b.iter().map(|(n, h)| (n.as_str(), *h)).collect();
    let am: HashMap<&str, ContentHash> = a.iter().map(|(n, h)| (n.as_str(), *h)).collect();
    let mut out = Vec::new();
    for (n, h) in a {
        match bm.get(n.as_str()) {
            None => out.push(format!(
                "tensor `{}` is missing from the reference",
                sanitize(n)
            )),
            Some(g) if g != h => out.push(format!("tensor `{}` differs", sanitize(n))),
            _ => {}
        }
    }
    for (n, _) in b {
        if !am.contains_key(n.as_str()) {
            out.push(format!("tensor `{}` is only in the reference", sanitize(n)));
        }
    }
    out
}
