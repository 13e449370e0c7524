//! Every good fixture (written by real torch) reads back exactly as `torch.load` returns it:
//! same names, dtypes, shapes and sha256 of the little-endian row-major bytes, from a mapped
//! file and by ranged reads only (a storage that never maps, as a remote object is read).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use weightport_core::mapped::LocalFiles;
use weightport_core::{Access, DType, Error, MetaValue, ReadOptions, TensorSource};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn core_dtype(torch: &str) -> Option<DType> {
    Some(match torch {
        "float32" => DType::F32,
        "float64" => DType::F64,
        "float16" => DType::F16,
        "bfloat16" => DType::BF16,
        "int64" => DType::I64,
        "int32" => DType::I32,
        "int16" => DType::I16,
        "int8" => DType::I8,
        "uint8" => DType::U8,
        "bool" => DType::BOOL,
        "complex64" => DType::C64,
        "float8_e4m3fn" => DType::F8_E4M3,
        "float8_e5m2" => DType::F8_E5M2,
        "float8_e4m3fnuz" => DType::F8_E4M3FNUZ,
        "float8_e5m2fnuz" => DType::F8_E5M2FNUZ,
        "float8_e8m0fnu" => DType::F8_E8M0,
        "uint16" => DType::U16,
        "uint32" => DType::U32,
        "uint64" => DType::U64,
        _ => return None,
    })
}

struct Expected {
    name: String,
    file: PathBuf,
    select: Vec<String>,
    doc: serde_json::Value,
}

fn expected() -> Vec<Expected> {
    let dir = fixtures().join("expected/pickle");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        out.push(Expected {
            name: p.file_stem().unwrap().to_string_lossy().into_owned(),
            file: fixtures().join(doc["file"].as_str().unwrap()),
            select: doc["select"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect(),
            doc,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(out.len() >= 25, "expected files missing");
    out
}

fn opts(key: Option<String>, shared_copy: bool) -> ReadOptions {
    let mut o = ReadOptions::default();
    o.key = key;
    o.shared_copy = shared_copy;
    o
}

/// `o` with a storage that never maps: every byte comes through checked `pread`s.
fn pread(mut o: ReadOptions) -> ReadOptions {
    o.storage = Arc::new(LocalFiles { pread_only: true });
    o
}

/// Reads a tensor through `read_into` in chunks of `chunk` elements (front to back, as the
/// executor does for sequential sources), returning the sha256 of the bytes.
fn read_hash(src: &dyn TensorSource, i: usize, chunk_elems: u64) -> String {
    let info = &src.tensors()[i];
    let g = info.dtype.granule();
    let step = (chunk_elems * g).max(g);
    let mut h = Sha256::new();
    let mut off = 0;
    while off < info.byte_len {
        let n = step.min(info.byte_len - off);
        let mut buf = vec![0u8; n as usize];
        src.read_into(i, off, &mut buf).unwrap();
        h.update(&buf);
        off += n;
    }
    format!("{:x}", h.finalize())
}

#[test]
fn every_fixture_matches_torch() {
    for ex in expected() {
        if ex.doc.get("weightport").is_some() {
            continue;
        }
        let key = if ex.name == "custom_key" {
            Some(ex.select.join("."))
        } else {
            None
        };
        for o in [opts(key.clone(), true), pread(opts(key, true))] {
            let mapped = o.storage.open(&ex.file, "").unwrap().map().is_some();
            let src = weightport_pickle::open(&ex.file, &o)
                .unwrap_or_else(|e| panic!("{}: {e}", ex.name));
            check_fixture(&ex, src.as_ref(), mapped);
        }
    }
}

fn check_fixture(ex: &Expected, src: &dyn TensorSource, mapped: bool) {
    let want = ex.doc["tensors"].as_array().unwrap();
    assert_eq!(src.tensors().len(), want.len(), "{}: tensor count", ex.name);
    for (i, w) in want.iter().enumerate() {
        let info = &src.tensors()[i];
        assert_eq!(info.name, w["name"].as_str().unwrap(), "{}: order", ex.name);
        let dt = core_dtype(w["dtype"].as_str().unwrap()).unwrap();
        assert_eq!(info.dtype, dt, "{} {}", ex.name, info.name);
        let shape: Vec<u64> = w["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(info.shape, shape, "{} {}", ex.name, info.name);
        let sha = w["sha256"].as_str().unwrap();
        for chunk in [u64::MAX / 64, 1, 3] {
            assert_eq!(
                read_hash(src, i, chunk),
                sha,
                "{} {} chunk {chunk}",
                ex.name,
                info.name
            );
        }
        if let Some(b) = src.bytes(i) {
            assert_eq!(
                format!("{:x}", Sha256::digest(b)),
                sha,
                "{} {} zero-copy",
                ex.name,
                info.name
            );
            assert_eq!(src.access(i), Access::Mapped);
        }
        assert!(
            mapped || src.bytes(i).is_none(),
            "zero-copy only when mapped"
        );
    }
}

#[test]
fn random_offsets_read_the_same_bytes() {
    let f = fixtures().join("good/pickle/views.pt");
    for o in [opts(None, true), pread(opts(None, true))] {
        random_offsets(weightport_pickle::open(&f, &o).unwrap().as_ref());
    }
}

fn random_offsets(src: &dyn TensorSource) {
    for (i, info) in src.tensors().iter().enumerate() {
        let mut whole = vec![0u8; info.byte_len as usize];
        src.read_into(i, 0, &mut whole).unwrap();
        let g = info.dtype.granule() as usize;
        // Every granule-aligned window, in reverse order.
        for start in (0..whole.len()).step_by(g).rev() {
            let mut part = vec![0u8; (whole.len() - start).min(2 * g)];
            src.read_into(i, start as u64, &mut part).unwrap();
            assert_eq!(
                part,
                whole[start..start + part.len()],
                "{} at {start}",
                info.name
            );
        }
        let mut odd = vec![0u8; 1];
        if g > 1 && !whole.is_empty() {
            assert!(src.read_into(i, 1, &mut odd).is_err());
        }
    }
}

#[test]
fn tied_weights_keep_one_name_per_exact_alias() {
    for ex in expected() {
        let aliases = ex.doc["aliases"].as_array().unwrap();
        if aliases.is_empty() || ex.doc.get("weightport").is_some() {
            continue;
        }
        let src = weightport_pickle::open(&ex.file, &opts(None, false)).unwrap();
        let names: Vec<&str> = src.tensors().iter().map(|t| t.name.as_str()).collect();
        for group in aliases {
            let mut g: Vec<&str> = group
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            g.sort();
            assert!(names.contains(&g[0]), "{}: kept {}", ex.name, g[0]);
            for dropped in &g[1..] {
                assert!(!names.contains(dropped), "{}: {dropped} dropped", ex.name);
                assert_eq!(
                    src.metadata().get(dropped),
                    Some(&MetaValue::Str(g[0].to_string()))
                );
            }
        }
    }
    // The partial view of a tied storage stays its own tensor.
    let src = weightport_pickle::open(&fixtures().join("good/pickle/tied.pt"), &opts(None, false))
        .unwrap();
    let names: Vec<&str> = src.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["embed.weight", "a.view", "part", "other"]);
}

#[test]
fn complex128_is_refused_clearly() {
    let f = fixtures().join("good/pickle/complex128.pt");
    let e = weightport_pickle::open_checkpoint(&f, &ReadOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("complex128"), "{e}");
}

#[test]
fn checkpoint_metadata_is_inert_and_reported() {
    let f = fixtures().join("good/pickle/checkpoint.pt");
    let c = weightport_pickle::open_checkpoint(&f, &ReadOptions::default()).unwrap();
    let r = c.report();
    assert_eq!(r.selected, ["model"]);
    let get = |k: &str| {
        r.entries
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(get("epoch"), Some(MetaValue::I64(7)));
    assert_eq!(
        get("big"),
        Some(MetaValue::BigInt((1u128 << 70).to_string()))
    );
    assert_eq!(get("neg"), Some(MetaValue::I64(-(1 << 40))));
    assert_eq!(get("raw"), Some(MetaValue::Bytes(b"\x00\xffab".to_vec())));
    assert_eq!(get("dtype"), Some(MetaValue::Str("torch.float16".into())));
    assert!(matches!(get("best"), Some(MetaValue::F64(f)) if f.is_nan()));
    assert!(get("optimizer").is_some());
    // Nothing but the converted tensors' aliases goes to metadata().
    assert!(weightport_core::TensorSource::metadata(&c).is_empty());
    let n = weightport_pickle::open_checkpoint(
        &fixtures().join("good/pickle/numpy_meta.pt"),
        &ReadOptions::default(),
    )
    .unwrap();
    let v = n
        .report()
        .entries
        .iter()
        .find(|(k, _)| k == "np_f64")
        .unwrap()
        .1
        .clone();
    assert_eq!(
        v,
        MetaValue::Object {
            class: "numpy.f8".into(),
            state: Box::new(MetaValue::F64(1.25))
        }
    );
    let arr = n
        .report()
        .entries
        .iter()
        .find(|(k, _)| k == "np_arr")
        .unwrap()
        .1
        .clone();
    let MetaValue::Object { class, state } = arr else {
        panic!("{arr:?}")
    };
    assert_eq!(class, "numpy.ndarray");
    let MetaValue::Map(m) = *state else { panic!() };
    assert_eq!(m[0], ("dtype".into(), MetaValue::Str("<f4".into())));
    assert_eq!(
        m[1],
        (
            "shape".into(),
            MetaValue::Array(vec![MetaValue::U64(2), MetaValue::U64(3)])
        )
    );
    let want: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    assert_eq!(m[3], ("data".into(), MetaValue::Bytes(want)));
}

#[test]
fn deflated_records_stream_sequentially() {
    let f = fixtures().join("good/pickle/rezipped_deflate.pt");
    let src = weightport_pickle::open(&f, &ReadOptions::default()).unwrap();
    let acc: Vec<Access> = (0..src.tensors().len()).map(|i| src.access(i)).collect();
    assert_eq!(
        acc,
        [Access::Sequential, Access::Sequential, Access::Random]
    );
}

#[test]
fn truncation_at_every_37th_byte_errors_without_panic() {
    let dir = std::env::temp_dir().join(format!("wp-pickle-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for ex in expected() {
        let bytes = std::fs::read(&ex.file).unwrap();
        let t = dir.join("t.pt");
        for cut in (0..bytes.len()).step_by(37) {
            std::fs::write(&t, &bytes[..cut]).unwrap();
            let r = weightport_pickle::open(&t, &ReadOptions::default());
            assert!(r.is_err(), "{} cut at {cut} opened", ex.name);
            let by_ranges = weightport_pickle::open(&t, &pread(ReadOptions::default()));
            assert_eq!(
                by_ranges.err().map(|e| e.to_string()),
                r.err().map(|e| e.to_string()),
                "{} cut at {cut}: read by ranges",
                ex.name
            );
            let _ = weightport_pickle::scan(&t);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn probe_recognises_both_formats() {
    for (f, want) in [
        ("good/pickle/dtypes.pt", true),
        ("good/pickle/legacy.pt", true),
        ("good/pickle/rezipped_deflate.pt", true),
        ("good/pickle/README.md", false),
    ] {
        let p = fixtures().join(f);
        let head = std::fs::read(&p).unwrap();
        assert_eq!(
            weightport_pickle::probe(&p, &head[..head.len().min(64)]),
            want,
            "{f}"
        );
    }
}

#[test]
fn scan_of_a_good_file_is_safe_and_lists_globals() {
    let r = weightport_pickle::scan(&fixtures().join("good/pickle/module_state_dict.pt")).unwrap();
    assert_eq!(
        r.verdict,
        weightport_pickle::Verdict::Safe,
        "{:?}",
        r.findings
    );
    assert!(r
        .globals
        .iter()
        .any(|g| g.module == "collections" && g.name == "OrderedDict"));
    assert!(r.opcodes.iter().any(|(n, _)| *n == "BINPERSID"));
    assert!(r.records.iter().all(|rec| rec.referenced != Some(false)));
}

#[test]
fn key_selection_errors_name_what_exists() {
    let f = fixtures().join("good/pickle/checkpoint.pt");
    let e = weightport_pickle::open_checkpoint(&f, &opts(Some("nope".into()), false)).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(
        e.to_string().contains("not found") && e.to_string().contains("optimizer"),
        "{e}"
    );
    // An explicit key reaching the same dict as the default.
    let c = weightport_pickle::open_checkpoint(&f, &opts(Some("model".into()), false)).unwrap();
    assert_eq!(c.report().selected, ["model"]);
    // custom_key.pt has no state-dict-like child: the error lists the candidate.
    let f = fixtures().join("good/pickle/custom_key.pt");
    let e = weightport_pickle::open_checkpoint(&f, &ReadOptions::default()).unwrap_err();
    assert!(e.to_string().contains("choose one with `key`"), "{e}");
}

#[test]
fn whole_module_pickle_says_to_save_a_state_dict() {
    let f = fixtures().join("hostile/pickle/62_whole_module_pickle.pt");
    let e = weightport_pickle::open_checkpoint(&f, &ReadOptions::default()).unwrap_err();
    assert_eq!(e.exit_code(), 3);
    assert!(e.to_string().contains("state_dict()"), "{e}");
}

#[test]
fn a_single_tensor_file_is_one_tensor_named_after_the_file() {
    let f = fixtures().join("good/ckpt/single_view.pt");
    let src = weightport_pickle::open(&f, &ReadOptions::default()).unwrap();
    let t = &src.tensors()[0];
    assert_eq!(
        (t.name.as_str(), &t.shape[..]),
        ("single_view", &[3u64, 4][..])
    );
    // A key into a lone tensor is an error naming the key, not a panic.
    let e = weightport_pickle::open_checkpoint(&f, &opts(Some("w".into()), false)).unwrap_err();
    assert!(e.to_string().contains("`key` `w`"), "{e}");
}

#[test]
fn stray_tensors_never_hide_the_state_dict() {
    let f = fixtures().join("good/ckpt/best_acc.pt");
    let c = weightport_pickle::open_checkpoint(&f, &ReadOptions::default()).unwrap();
    assert_eq!(c.report().selected, ["state_dict"]);
    assert_eq!(c.report().dropped.len(), 1);
    assert_eq!(c.report().dropped[0].0, "best_acc");
    assert_eq!(c.unconverted(), c.report().dropped);
    // A key that walks through a list and an int key.
    let f = fixtures().join("good/ckpt/lightning.ckpt");
    let key = Some("optimizer_states.0.state.1".to_string());
    let c = weightport_pickle::open_checkpoint(&f, &opts(key, false)).unwrap();
    assert_eq!(c.report().selected, ["optimizer_states", "0", "state", "1"]);
    assert_eq!(c.tensors().len(), 3);
}
