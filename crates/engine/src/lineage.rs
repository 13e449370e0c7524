//! What a conversion hands [`weightport_provenance`]: the content hashes of the source tensors
//! each output tensor was computed from, and per output tensor what it is and what it read
//! (collected from the executor's hashes), and the sha256 of files hashed on the engine's
//! worker threads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;
use weightport_core::{hash, ContentHash, Result, TensorSource};
use weightport_provenance::{sha256_file, sha256_file_until, TensorProvenance};

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
/// (one per CPU when it names none): each file is read front to back by one thread, the largest
/// first, each thread taking the next file when it is done (a release's one big weights file
/// no longer ends the pass alone on one thread while the others idle).
pub fn sha256_files(paths: &[PathBuf], workers: &Workers) -> Result<Vec<String>> {
    let mut order: Vec<(u64, usize)> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| (std::fs::metadata(p).map_or(0, |m| m.len()), i))
        .collect();
    order.sort_by(|a, b| b.cmp(a));
    let mut sums: Vec<(usize, String)> = pool_of(workers.wanted())?.install(|| {
        order
            .into_iter()
            .par_bridge()
            .map(|(_, i)| sha256_file(&paths[i]).map(|h| (i, h)))
            .collect::<Result<_>>()
    })?;
    sums.sort_unstable();
    Ok(sums.into_iter().map(|(_, h)| h).collect())
}

/// Runs `work` on the calling thread while one thread of its own hashes `paths` (sha256, hex;
/// `None` for a file it could not read): a job's records need the sha256 of its inputs, and
/// hashing them beside the conversion fills the cores' idle moments instead of adding a pass
/// after it. When `work` fails, or a termination signal arrives, hashing stops at the next MiB
/// and `work`'s result is returned as it is.
pub fn sha256_files_beside<R>(
    paths: &[PathBuf],
    work: impl FnOnce() -> Result<R>,
) -> Result<(R, Vec<Option<String>>)> {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let hasher = s.spawn(|| {
            paths
                .iter()
                .map(|p| {
                    let stopped = || stop.load(Ordering::Relaxed) || crate::cancel::requested();
                    sha256_file_until(p, stopped).ok().flatten()
                })
                .collect::<Vec<_>>()
        });
        let done = work();
        if done.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        let sums = hasher.join().unwrap_or_default();
        done.map(|r| (r, sums))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use weightport_core::Error;

    // sha256 of "abc" and of the empty string (FIPS 180-2's examples).
    const ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn files(dir: &std::path::Path) -> Vec<PathBuf> {
        // Sizes out of order: hashed largest first, the sums must still come back in this order.
        let contents: [&[u8]; 4] = [b"abc", &[7u8; 3 << 20], b"", &[9u8; 1 << 20]];
        contents
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let p = dir.join(format!("f{i}"));
                std::fs::write(&p, c).unwrap();
                p
            })
            .collect()
    }

    #[test]
    fn files_hashed_several_at_once_come_back_in_the_given_order() {
        let d = tempfile::tempdir().unwrap();
        let paths = files(d.path());
        let sums = sha256_files(&paths, &Workers::new(Some(2), None).unwrap()).unwrap();
        let one_by_one: Vec<String> = paths.iter().map(|p| sha256_file(p).unwrap()).collect();
        assert_eq!(sums, one_by_one);
        assert_eq!((sums[0].as_str(), sums[2].as_str()), (ABC, EMPTY));
        let missing = [paths[0].clone(), d.path().join("gone")];
        let err = sha256_files(&missing, &Workers::new(Some(2), None).unwrap()).unwrap_err();
        assert!(err.to_string().contains("gone"), "{err}");
    }

    #[test]
    fn files_hashed_beside_work_are_its_result_or_nothing_when_it_fails() {
        let d = tempfile::tempdir().unwrap();
        let mut paths = files(d.path());
        paths.push(d.path().join("gone"));
        let (r, sums) = sha256_files_beside(&paths, || Ok(5)).unwrap();
        assert_eq!(r, 5);
        assert_eq!(sums[0].as_deref(), Some(ABC));
        assert_eq!(sums[2].as_deref(), Some(EMPTY));
        assert_eq!(sums[3], Some(sha256_file(&paths[3]).unwrap()));
        assert_eq!(sums[4], None, "an unreadable file is not hashed");
        let failed = sha256_files_beside(&paths, || Err::<(), _>(Error::Interrupted));
        assert!(matches!(failed, Err(Error::Interrupted)));
    }
}
