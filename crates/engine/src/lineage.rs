//! What a conversion hands [`weightport_provenance`]: the content hashes of the source tensors
//! each output tensor was computed from, and per output tensor what it is and what it read
//! (collected from the executor's hashes), and the sha256 of files hashed on the engine's
//! worker threads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use rayon::prelude::*;
use weightport_core::{hash, ContentHash, Result, TensorSource};
use weightport_provenance::{sha256_file, TensorProvenance};

use crate::by_options::TensorRecipe;
use crate::exec::{identity_plan, run, HashOnly, Hashes, NoProgress};
use crate::workers::{pool_of, Workers};

/// Content hashes of the source tensors `outs` read: the output's own hash where the output
/// is an unchanged copy hashed with the same leaves, else one more pass over those tensors.
pub(crate) fn source_hashes(
    source: &dyn TensorSource,
    outs: &[TensorRecipe],
    hashes: &Hashes,
    chunk: u64,
) -> Result<BTreeMap<usize, ContentHash>> {
    let mut known = BTreeMap::new();
    let mut todo = BTreeSet::new();
    for (o, h) in outs.iter().zip(&hashes.out) {
        let Some(&first) = o.inputs.first() else {
            continue;
        };
        let s = &source.tensors()[first];
        let same = o.op.is_none()
            && chunk == hash::HASH_CHUNK
            && (s.dtype, &s.shape, s.byte_len) == (o.info.dtype, &o.info.shape, o.info.byte_len);
        if same {
            known.insert(first, *h);
        } else {
            todo.extend(o.inputs.iter().copied());
        }
    }
    todo.retain(|i| !known.contains_key(i));
    let all = identity_plan(source);
    let idx: Vec<usize> = todo.into_iter().collect();
    let plan: Vec<TensorRecipe> = idx.iter().map(|&i| all[i].clone()).collect();
    let h = run(source, &plan, hash::HASH_CHUNK, &NoProgress, HashOnly)?;
    known.extend(idx.into_iter().zip(h.out));
    Ok(known)
}

/// Per output tensor: what it is and what it was computed from.
pub(crate) fn tensors_of(
    source: &dyn TensorSource,
    outs: &[TensorRecipe],
    hashes: &Hashes,
    read: &BTreeMap<usize, ContentHash>,
) -> Vec<TensorProvenance> {
    outs.iter()
        .zip(&hashes.out)
        .map(|(o, h)| TensorProvenance {
            name: o.info.name.clone(),
            dtype: o.info.dtype.name().to_string(),
            shape: o.info.shape.clone(),
            hash: *h,
            op: o.op.as_ref().map(|op| op.describe()),
            sources: o
                .inputs
                .iter()
                .map(|&i| (source.tensors()[i].name.clone(), read[&i]))
                .collect(),
        })
        .collect()
}

/// The sha256 (hex) of each of `paths`, several files at once on the threads `workers` wants
/// (one per CPU when it names none): each file is read front to back by one thread.
pub fn sha256_files(paths: &[PathBuf], workers: &Workers) -> Result<Vec<String>> {
    pool_of(workers.wanted())?.install(|| paths.par_iter().map(|p| sha256_file(p)).collect())
}
