//! `--dtype` casts against torch: fixtures/expected/casts/to_*.safetensors are
//! `save_file({k: t.to(dtype)})` of fixtures/good/casts/source.safetensors, written by torch
//! 2.15 (fixtures/gen/gen_cast_repo.py). Our output must be the same file, bit for bit, except
//! that a NaN only has to stay a NaN (torch's NaN payload depends on its code path).

use crate::common;
use common::{fixtures, wp};

use std::path::Path;

use weightport_core::{DType, TensorSource};
use weightport_safetensors::SafetensorsFile;

fn is_nan(d: DType, b: &[u8]) -> bool {
    match d {
        DType::F32 => f32::from_le_bytes(b.try_into().unwrap()).is_nan(),
        DType::F64 => f64::from_le_bytes(b.try_into().unwrap()).is_nan(),
        DType::F16 => half::f16::from_le_bytes([b[0], b[1]]).is_nan(),
        DType::BF16 => half::bf16::from_le_bytes([b[0], b[1]]).is_nan(),
        _ => false,
    }
}

/// Equal files, NaN for NaN.
fn assert_same_values(got: &Path, want: &Path) {
    let (g, w) = (
        SafetensorsFile::open(got).unwrap(),
        SafetensorsFile::open(want).unwrap(),
    );
    assert_eq!(g.tensors(), w.tensors(), "names, dtypes, shapes, order");
    for (i, t) in w.tensors().iter().enumerate() {
        let (gb, wb) = (g.bytes(i).unwrap(), w.bytes(i).unwrap());
        let size = t.dtype.elem_bytes().unwrap() as usize;
        let mut differ = 0;
        for (x, y) in gb.chunks(size).zip(wb.chunks(size)) {
            if x != y && !(is_nan(t.dtype, x) && is_nan(t.dtype, y)) {
                differ += 1;
            }
        }
        assert_eq!(differ, 0, "{}: {differ} elements differ from torch", t.name);
    }
    // The header (layout, order, offsets) is byte-identical too.
    let (gh, wh) = (std::fs::read(got).unwrap(), std::fs::read(want).unwrap());
    let n = 8 + u64::from_le_bytes(wh[..8].try_into().unwrap()) as usize;
    assert_eq!(gh[..n], wh[..n]);
}

#[test]
fn casts_equal_torch_to_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/casts/source.safetensors");
    for d in ["f32", "f16", "bf16"] {
        let out = tmp.path().join(format!("{d}.safetensors"));
        let o = wp(&[
            "convert",
            src.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--dtype",
            d,
            "--allow-lossy",
        ]);
        assert!(
            o.status.success(),
            "{d}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_same_values(
            &out,
            &fixtures().join(format!("expected/casts/to_{d}.safetensors")),
        );
    }
}

#[test]
fn lossy_casts_are_counted_and_bf16_to_f16_overflow_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/casts/source.safetensors");
    let out = tmp.path().join("o.safetensors");
    // bf16_all holds values past F16's range: refused without --allow-lossy, nothing written.
    let o = wp(&[
        "convert",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--dtype",
        "f16",
    ]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("bf16_all"));
    assert!(!out.exists());
    let o = wp(&[
        "--json",
        "convert",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--dtype",
        "f16",
        "--allow-lossy",
    ]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let t = v["transforms"].as_array().unwrap();
    let f32_edges = t.iter().find(|x| x["tensor"] == "f32_edges").unwrap();
    assert!(
        f32_edges["outcome"]
            .as_str()
            .unwrap()
            .contains("overflowed"),
        "{f32_edges}"
    );
    assert!(
        t.iter()
            .all(|x| x["tensor"] != "ids" && x["tensor"] != "mask"),
        "ints never cast"
    );
    // --dtype-filter: only matching tensors are cast.
    let out2 = tmp.path().join("p.safetensors");
    let o = wp(&[
        "convert",
        src.to_str().unwrap(),
        "-o",
        out2.to_str().unwrap(),
        "--dtype",
        "f32",
        "--dtype-filter",
        "^f16",
    ]);
    assert!(o.status.success());
    let f = SafetensorsFile::open(&out2).unwrap();
    let dt = |n: &str| f.tensors().iter().find(|t| t.name == n).unwrap().dtype;
    assert_eq!((dt("f16_all"), dt("bf16_all")), (DType::F32, DType::BF16));
}

#[test]
fn widening_is_proven_equal_to_the_source_and_verify_compares_across_dtypes() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/hf_repo_sharded");
    let out = tmp.path().join("f32");
    let o = wp(&[
        "convert",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--dtype",
        "f32",
        "--shard-size",
        "40KB",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = wp(&[
        "verify",
        out.to_str().unwrap(),
        "--against",
        src.to_str().unwrap(),
    ]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
    // A lossy cast is caught by the same comparison.
    let bf = tmp.path().join("bf16.safetensors");
    let casts = fixtures().join("good/casts/source.safetensors");
    assert!(wp(&[
        "convert",
        casts.to_str().unwrap(),
        "-o",
        bf.to_str().unwrap(),
        "--dtype",
        "bf16"
    ])
    .status
    .success());
    let v = wp(&[
        "verify",
        bf.to_str().unwrap(),
        "--against",
        casts.to_str().unwrap(),
    ]);
    assert_eq!(v.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&v.stdout).contains("f32_edges"));
}

/// Indices and bits of the elements of `got` that differ from `want` (exact bytes, NaN too).
fn differing(got: &[u8], want: &[u8], size: usize) -> Vec<(usize, String, String)> {
    got.chunks(size)
        .zip(want.chunks(size))
        .enumerate()
        .filter(|(_, (g, w))| g != w)
        .map(|(i, (g, w))| (i, format!("{g:02x?}"), format!("{w:02x?}")))
        .collect()
}

/// F64 → F32/F16/BF16 of every value class (ties, near-ties that round differently directly
/// than through f32, subnormals of f64 and of each target, overflow, ±inf, ±0, NaN payloads
/// and signs) equals torch's `.to()` bit for bit, NaN bits included: the expected files are
/// torch's output (fixtures/gen/gen_f64_casts.py), all of it from torch's vectorised kernels.
#[test]
fn f64_casts_equal_torch_bit_for_bit_for_every_value_class() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/casts/f64_classes.safetensors");
    for d in ["f32", "f16", "bf16"] {
        let out = tmp.path().join(format!("{d}.safetensors"));
        let o = wp(&[
            "convert",
            src.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--dtype",
            d,
        ]);
        assert!(
            o.status.success(),
            "{d}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let want = fixtures().join(format!("expected/casts/f64_classes_to_{d}.safetensors"));
        let (g, w) = (
            SafetensorsFile::open(&out).unwrap(),
            SafetensorsFile::open(&want).unwrap(),
        );
        assert_eq!(g.tensors(), w.tensors(), "{d}");
        let size = w.tensors()[0].dtype.elem_bytes().unwrap() as usize;
        let bad = differing(g.bytes(0).unwrap(), w.bytes(0).unwrap(), size);
        assert!(
            bad.is_empty(),
            "{d}: {} elements differ from torch: {:?}",
            bad.len(),
            &bad[..bad.len().min(8)]
        );
    }
}

/// Issue 14 item 16: after `--dtype`, a repo output's config.json says the new dtype exactly as
/// transformers' `save_pretrained` of the cast model writes it (every other byte of the release's
/// config kept; fixtures/gen/gen_config_dtype.py), and a `--dtype-filter` cast, which leaves
/// some floating tensors alone, copies the config unchanged.
#[test]
fn dtype_cast_repo_config_says_the_new_dtype_as_save_pretrained_does() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        ("hf_repo_single", "good/hf_repo_single", "f32"),
        ("hf_repo_single", "good/hf_repo_single", "bf16"),
        ("mistral", "good/arch/mistral", "f32"),
        ("mistral", "good/arch/mistral", "f16"),
    ];
    for (name, rel, d) in cases {
        let out = tmp.path().join(format!("{name}-{d}"));
        let src = fixtures().join(rel);
        let o = wp(&[
            "convert",
            src.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--dtype",
            d,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let want = fixtures().join(format!("expected/config_dtype/{name}.{d}.config.json"));
        assert_eq!(
            String::from_utf8(std::fs::read(out.join("config.json")).unwrap()).unwrap(),
            String::from_utf8(std::fs::read(want).unwrap()).unwrap(),
            "{name} --dtype {d}"
        );
    }
    let out = tmp.path().join("filtered");
    let src = fixtures().join("good/hf_repo_single");
    let o = wp(&[
        "convert",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--dtype",
        "f32",
        "--dtype-filter",
        "embed",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read(out.join("config.json")).unwrap(),
        std::fs::read(src.join("config.json")).unwrap()
    );
}
