//! The reader against files written by safetensors-py (fixtures/gen, pinned versions), and the
//! truncation invariant over every fixture. Every file is read twice: mapped, and by ranged
//! reads only (a source without a map, as a remote object is), with the same bytes and errors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use sha2::{Digest, Sha256};
use weightport_core::mapped::LocalFile;
use weightport_core::{Error, Limits, TensorSource};
use weightport_safetensors::SafetensorsFile;

/// `path` read by `pread` only.
fn open_pread(path: &Path) -> Result<SafetensorsFile, Error> {
    let src = Arc::new(LocalFile::open_pread(path, ", expected a file")?);
    SafetensorsFile::from_source(src, &Limits::default())
}

/// Tensor `i`'s bytes through `read_into`.
fn read_all(st: &SafetensorsFile, i: usize) -> Vec<u8> {
    let mut out = vec![0u8; st.tensors()[i].byte_len as usize];
    st.read_into(i, 0, &mut out).unwrap();
    out
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// (fixture file, reference description written by safetensors-py).
fn reference_pairs() -> Vec<(PathBuf, PathBuf)> {
    let f = fixtures();
    let mut pairs = Vec::new();
    let dirs = [
        ("expected/safetensors", "good/safetensors"),
        ("expected/hf_repo_sharded", "good/hf_repo_sharded"),
        ("expected/hf_repo_single", "good/hf_repo_single"),
    ];
    for (exp, good) in dirs {
        for e in std::fs::read_dir(f.join(exp)).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".skipped.json") || !name.ends_with(".json") {
                continue;
            }
            let stem = name.trim_end_matches(".json");
            let file = if stem.ends_with(".safetensors") {
                stem.to_string()
            } else {
                format!("{stem}.safetensors")
            };
            pairs.push((f.join(good).join(file), p));
        }
    }
    pairs.sort();
    pairs
}

#[test]
fn reader_agrees_with_safetensors_py_on_every_good_fixture() {
    let pairs = reference_pairs();
    assert!(pairs.len() >= 12, "fixtures missing: {pairs:?}");
    for ((file, exp), mapped) in pairs.iter().flat_map(|p| [(p, true), (p, false)]) {
        let want: Value = serde_json::from_slice(&std::fs::read(exp).unwrap()).unwrap();
        let st = match mapped {
            true => SafetensorsFile::open(file),
            false => open_pread(file),
        };
        let st = st.unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let meta: Option<BTreeMap<String, String>> =
            serde_json::from_value(want["metadata"].clone()).unwrap();
        assert_eq!(st.header().metadata, meta, "{}", file.display());
        let tensors = want["tensors"].as_object().unwrap();
        assert_eq!(st.tensors().len(), tensors.len(), "{}", file.display());
        for (i, t) in st.tensors().iter().enumerate() {
            let w = &tensors[&t.name];
            assert_eq!(t.dtype.name(), w["dtype"], "{} {}", file.display(), t.name);
            let shape: Vec<u64> = serde_json::from_value(w["shape"].clone()).unwrap();
            assert_eq!(t.shape, shape, "{} {}", file.display(), t.name);
            let off: Vec<u64> = serde_json::from_value(w["data_offsets"].clone()).unwrap();
            let begin = st.tensor_offset(i) - st.data_start();
            assert_eq!(
                vec![begin, begin + t.byte_len],
                off,
                "{} {}",
                file.display(),
                t.name
            );
            assert_eq!(
                st.bytes(i).is_some(),
                mapped,
                "zero-copy exactly when mapped"
            );
            assert_eq!(
                hex(&read_all(&st, i)),
                w["sha256"],
                "{} {}",
                file.display(),
                t.name
            );
        }
    }
}

fn all_fixture_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![fixtures().join("good"), fixtures().join("expected")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "safetensors") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn truncation_at_every_37th_byte_is_an_error_never_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let cut = tmp.path().join("cut.safetensors");
    let files = all_fixture_files();
    assert!(files.len() >= 15);
    let mut checked = 0;
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        // The whole file is written once and cut shorter and shorter in place: rewriting each
        // prefix wrote ~10 GB over the fixtures (most of this test's minute); the reader sees
        // exactly `bytes[..len]` either way.
        std::fs::write(&cut, &bytes).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&cut).unwrap();
        for len in (0..bytes.len()).step_by(37).rev() {
            file.set_len(len as u64).unwrap();
            let mapped = SafetensorsFile::open(&cut).map(|_| ());
            let by_ranges = open_pread(&cut).map(|_| ());
            assert_eq!(
                format!("{by_ranges:?}"),
                format!("{mapped:?}"),
                "read by ranges"
            );
            match SafetensorsFile::open(&cut) {
                Err(Error::Malformed { .. } | Error::NotFormat { .. }) => checked += 1,
                Err(other) => panic!(
                    "{} cut at {len}: unexpected error kind: {other}",
                    f.display()
                ),
                Ok(_) => panic!(
                    "{} cut at {len} bytes of {} was accepted",
                    f.display(),
                    bytes.len()
                ),
            }
        }
    }
    assert!(checked > 1000, "only {checked} truncations checked");
}
