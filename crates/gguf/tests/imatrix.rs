//! The importance-matrix reader against files the pinned `llama-imatrix` wrote (both formats,
//! fixtures/good/imatrix/, made by fixtures/gen/gen_imatrix.py), whose weights were computed
//! independently with numpy and gguf-py (fixtures/expected/imatrix/reference.json); and hostile
//! variants of them, each refused with an error naming the file and the byte offset. Every file
//! is read twice: mapped, and by ranged reads only (`read_imatrix_from` on a source without a
//! map), with the same result.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use weightport_core::bytes::InMemory;
use weightport_core::mapped::LocalFile;
use weightport_core::{Error, Limits};
use weightport_gguf::imatrix::{parse_imatrix, read_imatrix, read_imatrix_from, Imatrix};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn reference() -> serde_json::Value {
    let p = root().join("fixtures/expected/imatrix/reference.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn weights_sha(w: &[f32]) -> String {
    let mut h = Sha256::new();
    for v in w {
        h.update(v.to_le_bytes());
    }
    format!("{:x}", h.finalize())
}

fn check_against(kind: &str, file: &str) {
    let path = root().join(file);
    let m = read_imatrix(&path, &Limits::default()).unwrap();
    let pread = LocalFile::open_pread(&path, "").unwrap();
    assert_eq!(read_imatrix_from(&pread, &Limits::default()).unwrap(), m);
    check_matrix(kind, &m);
}

fn check_matrix(kind: &str, m: &Imatrix) {
    let r = reference();
    let want = &r["imatrix_weights"][kind]["entries"];
    assert_eq!(m.legacy, kind == "dat");
    let names: Vec<&str> = m.entries.iter().map(|e| e.name.as_str()).collect();
    let mut want_names: Vec<&str> = want
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    want_names.sort();
    assert_eq!(names, want_names);
    for e in &m.entries {
        let w = e.weights(m.legacy);
        assert_eq!(
            w.len() as u64,
            want[&e.name][0].as_u64().unwrap(),
            "{}",
            e.name
        );
        assert_eq!(
            weights_sha(&w),
            want[&e.name][1].as_str().unwrap(),
            "{} ({kind})",
            e.name
        );
    }
    assert_eq!(m.chunk_count, 28);
    assert_eq!(m.datasets, ["fixtures/good/imatrix/text.txt"]);
}

#[test]
fn gguf_imatrix_weights_equal_gguf_py_and_numpy() {
    check_against("gguf", "fixtures/good/imatrix/imatrix.gguf");
    let m = read_imatrix(
        &root().join("fixtures/good/imatrix/imatrix.gguf"),
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(m.chunk_size, 64);
}

#[test]
fn legacy_imatrix_weights_equal_numpy() {
    check_against("dat", "fixtures/good/imatrix/imatrix.dat");
}

fn dat() -> Vec<u8> {
    std::fs::read(root().join("fixtures/good/imatrix/imatrix.dat")).unwrap()
}

/// The error of `bytes`, which must be the same read by ranges.
fn refuse(bytes: &[u8], limits: &Limits) -> Error {
    let name = Path::new("x.imatrix");
    let e = parse_imatrix(name, bytes, limits).expect_err("must be refused");
    let by_ranges = read_imatrix_from(&InMemory::new(name, bytes).unmapped(), limits);
    assert_eq!(by_ranges.unwrap_err().to_string(), e.to_string());
    e
}

#[test]
fn hostile_legacy_files_are_refused_with_offsets() {
    let good = dat();
    // Every truncation is refused (never a panic), except those that cut only the trailer.
    let first_len = i32::from_le_bytes(good[4..8].try_into().unwrap()) as usize;
    let first_nval_at = 8 + first_len + 4;
    for cut in [
        0,
        3,
        4,
        7,
        8 + first_len - 1,
        first_nval_at + 2,
        first_nval_at + 5,
        good.len() / 2,
    ] {
        let e = refuse(&good[..cut], &Limits::default());
        assert!(e.to_string().starts_with("x.imatrix"), "{e}");
    }
    // Entry count 0 and negative.
    for n in [0i32, -5] {
        let mut b = good.clone();
        b[..4].copy_from_slice(&n.to_le_bytes());
        assert!(refuse(&b, &Limits::default())
            .to_string()
            .contains("entry count"));
    }
    // A value count larger than the file.
    let mut b = good.clone();
    b[first_nval_at..first_nval_at + 4].copy_from_slice(&i32::MAX.to_le_bytes());
    let e = refuse(&b, &Limits::default());
    assert!(matches!(e, Error::Limit { .. }), "{e}");
    let limits = Limits {
        max_imatrix_values: u64::MAX,
        ..Limits::default()
    };
    let e = refuse(&b, &limits).to_string();
    assert!(
        e.contains(&format!("(byte {first_nval_at})")) && e.contains("truncated"),
        "{e}"
    );
    // Caps: entries, name length.
    let limits = Limits {
        max_imatrix_entries: 3,
        ..Limits::default()
    };
    assert!(matches!(refuse(&good, &limits), Error::Limit { .. }));
    let limits = Limits {
        max_imatrix_name: 4,
        ..Limits::default()
    };
    let e = refuse(&good, &limits).to_string();
    assert!(e.contains("name length") && e.contains("(byte 4)"), "{e}");
    // A repeated entry name.
    let mut b = good[..4].to_vec();
    b[..4].copy_from_slice(&2i32.to_le_bytes());
    let entry = &good[4..first_nval_at + 4 + 4 * 256];
    b.extend_from_slice(entry);
    b.extend_from_slice(entry);
    assert!(refuse(&b, &Limits::default())
        .to_string()
        .contains("repeats the name"));
    // Bytes after the trailer.
    let mut b = good.clone();
    b.push(0);
    assert!(refuse(&b, &Limits::default())
        .to_string()
        .contains("after the dataset name"));
}

fn gguf() -> Vec<u8> {
    std::fs::read(root().join("fixtures/good/imatrix/imatrix.gguf")).unwrap()
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).position(|w| w == needle).unwrap()
}

#[test]
fn hostile_gguf_imatrices_are_refused() {
    let good = gguf();
    // A renamed metadata key: the three imatrix keys are required.
    let mut b = good.clone();
    let at = find(&b, b"imatrix.chunk_size");
    b[at] = b'J';
    let e = refuse(&b, &Limits::default()).to_string();
    assert!(
        e.contains("missing importance matrix metadata: imatrix.chunk_size"),
        "{e}"
    );
    // A `.counts` tensor renamed: its `.in_sum2` has no partner.
    let mut b = good.clone();
    let at = find(&b, b"blk.3.ffn_up.weight.counts");
    b[at + 20..at + 26].copy_from_slice(b"countz");
    let e = refuse(&b, &Limits::default()).to_string();
    assert!(
        e.contains("needs both") && e.contains("blk.3.ffn_up.weight"),
        "{e}"
    );
    // A negative count.
    let m = parse_imatrix(Path::new("x"), &good, &Limits::default()).unwrap();
    let e0 = m.get("blk.0.attn_k.weight").unwrap();
    let mut b = good.clone();
    let h = weightport_gguf::header::parse(Path::new("x"), &good, &Limits::default()).unwrap();
    let t = h
        .tensors
        .iter()
        .find(|t| t.name == "blk.0.attn_k.weight.counts")
        .unwrap();
    let off = (h.data_start + t.offset) as usize;
    b[off..off + 4].copy_from_slice(&(-3f32).to_le_bytes());
    let e = refuse(&b, &Limits::default()).to_string();
    assert!(
        e.contains("blk.0.attn_k.weight.counts") && e.contains("-3"),
        "{e}"
    );
    assert!(e0.at > 0);
    // Every truncation: refused, no panic.
    for cut in (0..good.len()).step_by(997) {
        let _ = refuse(&good[..cut], &Limits::default());
    }
}

/// Fuzzing finding (fuzz/gguf imatrix, corpus `regress-no-entries`): a GGUF file with the
/// imatrix keys but no `.in_sum2`/`.counts` tensor was read as an empty matrix, which would
/// quantize as if no importance matrix had been given; it is refused.
#[test]
fn a_gguf_imatrix_without_entries_is_refused() {
    let p = root().join("fuzz/gguf/corpus/imatrix/regress-no-entries");
    let e = read_imatrix(&p, &Limits::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("holds no importance entries"), "{e}");
}
