//! The reader against what gguf-py's `GGUFReader` reads (fixtures/expected/gguf, written by
//! fixtures/gen/gen_gguf.py with pinned versions), the writer against the files themselves
//! (byte for byte), split sets against llama.cpp's `llama-gguf-split`, and the truncation
//! invariant over every fixture. Every read is made twice: from a mapped file, and by ranged
//! reads only (a storage that never maps), which must give the same bytes and the same errors.

use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};
use weightport_core::bytes::InMemory;
use weightport_core::mapped::LocalFiles;
use weightport_core::{MetaType, MetaValue, ReadOptions, TensorSink, TensorSource};
use weightport_gguf::header::{align_up, parse, parse_source};
use weightport_gguf::split::{self, SplitOptions};
use weightport_gguf::{
    layout_with, open, open_split, write_file, GgufFile, GgufSink, GgufTensorSpec, WriteOptions,
};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// The `models/` directory of the pinned llama.cpp tree (llama-cpp-python 0.3.36's sdist), whose
/// `ggml-vocab-*.gguf` files are real GGUF vocabularies: `WEIGHTPORT_LLAMA_VOCAB`, which
/// `.ci/run` sets after extracting them from the sdist on PyPI. Outside CI a missing directory
/// skips those files with a note; in CI it fails.
fn sdist_models() -> Option<PathBuf> {
    match std::env::var_os("WEIGHTPORT_LLAMA_VOCAB") {
        Some(d) => Some(PathBuf::from(d)),
        None => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must set WEIGHTPORT_LLAMA_VOCAB (.ci/run extracts it)"
            );
            None
        }
    }
}

fn hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// (GGUF file, gguf-py's description of it). Vocab files not committed are read from the
/// llama-cpp-python sdist when it is unpacked; otherwise they are skipped with a note.
fn pairs() -> Vec<(PathBuf, PathBuf)> {
    let f = fixtures();
    let mut out = Vec::new();
    for e in std::fs::read_dir(f.join("expected/gguf")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".json") {
            out.push((f.join("good/gguf").join(stem), p));
        }
    }
    let described = f.join("expected/gguf/sdist");
    if let Some(sdist) = sdist_models().filter(|d| d.is_dir()) {
        for e in std::fs::read_dir(&described).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            out.push((sdist.join(name.trim_end_matches(".json")), p));
        }
    } else {
        eprintln!("note: WEIGHTPORT_LLAMA_VOCAB not set: the sdist vocab files are not checked");
    }
    out.sort();
    out
}

fn elem_bytes(v: &MetaValue, out: &mut Vec<u8>) {
    match v {
        MetaValue::Str(s) => {
            out.extend_from_slice(&(s.len() as u64).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        MetaValue::Bytes(s) => {
            out.extend_from_slice(&(s.len() as u64).to_le_bytes());
            out.extend_from_slice(s);
        }
        MetaValue::Bool(b) => out.push(u8::from(*b)),
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        other => panic!("not a GGUF scalar: {other:?}"),
    }
}

fn type_name(v: &MetaValue) -> &'static str {
    match v {
        MetaValue::Str(_) | MetaValue::Bytes(_) => "str",
        MetaValue::Bool(_) => "bool",
        MetaValue::U8(_) => "u8",
        MetaValue::I8(_) => "i8",
        MetaValue::U16(_) => "u16",
        MetaValue::I16(_) => "i16",
        MetaValue::U32(_) => "u32",
        MetaValue::I32(_) => "i32",
        MetaValue::U64(_) => "u64",
        MetaValue::I64(_) => "i64",
        MetaValue::F32(_) => "f32",
        MetaValue::F64(_) => "f64",
        MetaValue::TypedArray { .. } => "array",
        other => panic!("not a GGUF value: {other:?}"),
    }
}

fn same_scalar(ours: &MetaValue, want: &Value) -> bool {
    match ours {
        MetaValue::Str(s) => want.as_str() == Some(s),
        MetaValue::Bool(b) => want.as_bool() == Some(*b),
        MetaValue::U8(x) => want.as_u64() == Some(u64::from(*x)),
        MetaValue::U16(x) => want.as_u64() == Some(u64::from(*x)),
        MetaValue::U32(x) => want.as_u64() == Some(u64::from(*x)),
        MetaValue::U64(x) => want.as_u64() == Some(*x),
        MetaValue::I8(x) => want.as_i64() == Some(i64::from(*x)),
        MetaValue::I16(x) => want.as_i64() == Some(i64::from(*x)),
        MetaValue::I32(x) => want.as_i64() == Some(i64::from(*x)),
        MetaValue::I64(x) => want.as_i64() == Some(*x),
        MetaValue::F32(x) => want.as_f64() == Some(f64::from(*x)),
        MetaValue::F64(x) => want.as_f64() == Some(*x),
        _ => false,
    }
}

/// Read options whose storage never maps: every byte comes through checked `pread`s, as a
/// remote object's come through ranged requests.
fn pread() -> ReadOptions {
    let mut o = ReadOptions::default();
    o.storage = std::sync::Arc::new(LocalFiles { pread_only: true });
    o
}

/// Tensor `i`'s bytes through `read_into`, in two reads.
fn read_all(g: &dyn TensorSource, i: usize) -> Vec<u8> {
    let t = &g.tensors()[i];
    let mut out = vec![0u8; t.byte_len as usize];
    let half = (t.byte_len / 2 / t.dtype.granule() * t.dtype.granule()) as usize;
    let (a, b) = out.split_at_mut(half);
    g.read_into(i, half as u64, b).unwrap();
    g.read_into(i, 0, a).unwrap();
    out
}

fn check_against_reference(file: &Path, exp: &Path) -> GgufFile {
    check_with(file, exp, &ReadOptions::default());
    check_with(file, exp, &pread())
}

fn check_with(file: &Path, exp: &Path, opts: &ReadOptions) -> GgufFile {
    let want: Value = serde_json::from_slice(&std::fs::read(exp).unwrap()).unwrap();
    let g = open(file, opts).unwrap_or_else(|e| panic!("{e}"));
    let mapped = opts.storage.open(file, "").unwrap().map().is_some();
    let ctx = file.display().to_string();
    assert_eq!(g.version() as u64, want["version"], "{ctx}");
    assert_eq!(g.alignment() as u64, want["alignment"], "{ctx}");
    assert_eq!(g.file_len(), want["file_size"], "{ctx}");
    let kv = want["kv"].as_array().unwrap();
    let ours: Vec<(&str, &MetaValue)> = g.metadata().iter().collect();
    assert_eq!(ours.len(), kv.len(), "{ctx}: key count");
    for (i, ((k, v), w)) in ours.iter().zip(kv).enumerate() {
        let c = format!("{ctx}: key {k}");
        assert_eq!(*k, w["key"], "{ctx}: key order");
        assert_eq!(g.header().kv_offsets[i], w["offset"], "{c}");
        assert_eq!(type_name(v), w["type"], "{c}");
        if let MetaValue::TypedArray { elem, items } = v {
            assert_eq!(elem.name(), w["elem"], "{c}");
            assert_eq!(items.len() as u64, w["count"], "{c}");
            let mut enc = Vec::new();
            for it in items {
                elem_bytes(it, &mut enc);
            }
            assert_eq!(hex(&enc), w["sha256"], "{c}");
            if let Some(vals) = w.get("value") {
                let vals = vals.as_array().unwrap();
                assert_eq!(vals.len(), items.len(), "{c}");
                for (a, b) in items.iter().zip(vals) {
                    assert!(same_scalar(a, b), "{c}: {a:?} vs {b}");
                }
            }
        } else {
            assert!(same_scalar(v, &w["value"]), "{c}: {v:?} vs {}", w["value"]);
        }
    }
    let tensors = want["tensors"].as_array().unwrap();
    assert_eq!(g.tensors().len(), tensors.len(), "{ctx}");
    if !tensors.is_empty() {
        assert_eq!(g.data_start(), want["data_offset"], "{ctx}");
    }
    for (i, (t, w)) in g.tensors().iter().zip(tensors).enumerate() {
        let c = format!("{ctx}: tensor {}", t.name);
        let gt = &g.gguf_tensors()[i];
        assert_eq!(t.name, w["name"], "{c}");
        assert_eq!(t.dtype.name(), w["type"], "{c}");
        assert_eq!(u64::from(gt.ggml_type), w["type_id"], "{c}");
        let ne: Vec<u64> = serde_json::from_value(w["ne"].clone()).unwrap();
        let shape: Vec<u64> = serde_json::from_value(w["shape"].clone()).unwrap();
        assert_eq!(gt.ne, ne, "{c}");
        assert_eq!(t.shape, shape, "{c}: shape is ne reversed");
        assert_eq!(g.tensor_offset(i), w["data_offset"], "{c}");
        assert_eq!(t.byte_len, w["n_bytes"], "{c}");
        assert_eq!(
            g.bytes(i).is_some(),
            mapped,
            "{c}: zero-copy exactly when mapped"
        );
        assert_eq!(hex(&read_all(&g, i)), w["sha256"], "{c}: read_into");
        if let Some(b) = g.bytes(i) {
            assert_eq!(hex(b), w["sha256"], "{c}: bytes");
        }
    }
    g
}

#[test]
fn reader_agrees_with_gguf_py_on_every_fixture() {
    let pairs = pairs();
    assert!(pairs.len() >= 12, "fixtures missing: {pairs:?}");
    let mut arrays_seen = std::collections::HashSet::new();
    for (file, exp) in &pairs {
        let g = check_against_reference(file, exp);
        for (_, v) in g.metadata().iter() {
            match v {
                MetaValue::TypedArray { elem, items } => {
                    arrays_seen.insert((*elem, items.is_empty()));
                }
                other => {
                    arrays_seen.insert((type_of(other), false));
                }
            }
        }
    }
    // Every element type, as scalar or array, and every empty typed array is covered.
    for t in [
        MetaType::U8,
        MetaType::I8,
        MetaType::U16,
        MetaType::I16,
        MetaType::U32,
        MetaType::I32,
        MetaType::F32,
        MetaType::Bool,
        MetaType::Str,
        MetaType::U64,
        MetaType::I64,
        MetaType::F64,
    ] {
        assert!(arrays_seen.contains(&(t, true)), "no empty {t:?} array");
    }
}

fn type_of(v: &MetaValue) -> MetaType {
    match v {
        MetaValue::U8(_) => MetaType::U8,
        MetaValue::I8(_) => MetaType::I8,
        MetaValue::U16(_) => MetaType::U16,
        MetaValue::I16(_) => MetaType::I16,
        MetaValue::U32(_) => MetaType::U32,
        MetaValue::I32(_) => MetaType::I32,
        MetaValue::F32(_) => MetaType::F32,
        MetaValue::Bool(_) => MetaType::Bool,
        MetaValue::U64(_) => MetaType::U64,
        MetaValue::I64(_) => MetaType::I64,
        MetaValue::F64(_) => MetaType::F64,
        _ => MetaType::Str,
    }
}

/// Write options that reproduce `g`: its version, and header padding without tensors only if
/// the file has it (llama.cpp pads, gguf-py's vocab-only files do not).
fn options_of(g: &GgufFile) -> WriteOptions {
    let mut o = WriteOptions::default();
    o.alignment = None;
    o.version = g.version();
    o.pad_without_tensors =
        !g.tensors().is_empty() || align_up(g.infos_end(), g.alignment()) == Some(g.file_len());
    o
}

#[test]
fn writer_reproduces_every_fixture_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    for (file, _) in pairs() {
        let g = open(&file, &ReadOptions::default()).unwrap();
        let original = std::fs::read(&file).unwrap();
        let specs: Vec<GgufTensorSpec> = g
            .gguf_tensors()
            .iter()
            .map(GgufTensorSpec::from_gguf)
            .collect();
        let opts = options_of(&g);
        let lay = layout_with(&specs, g.metadata(), &opts).unwrap();
        assert_eq!(lay.total_len, g.file_len(), "{}", file.display());
        assert_eq!(
            &lay.header[..],
            &original[..lay.header.len()],
            "{}",
            file.display()
        );
        let out = dir.path().join(file.file_name().unwrap());
        let with_bytes: Vec<(GgufTensorSpec, &[u8])> = specs
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, s)| (s, g.bytes(i).unwrap()))
            .collect();
        write_file(&out, &with_bytes, g.metadata(), &opts).unwrap();
        let written = std::fs::read(&out).unwrap();
        assert!(written == original, "{}: differs", file.display());
        let again = open(&out, &ReadOptions::default()).unwrap();
        assert_eq!(again.tensors(), g.tensors());
        assert_eq!(again.metadata(), g.metadata());
    }
}

fn good(name: &str) -> PathBuf {
    fixtures().join("good/gguf").join(name)
}

#[test]
fn split_set_reads_as_the_file_gguf_split_was_given() {
    let whole = open(&good("c_quant_q4_k_m.gguf"), &ReadOptions::default()).unwrap();
    for (member, opts) in (1..=3).flat_map(|m| [(m, ReadOptions::default()), (m, pread())]) {
        let p = good(&format!("c_split-{member:05}-of-00003.gguf"));
        let set = open_split(&p, &opts).unwrap();
        assert_eq!(set.splits().len(), 3);
        assert_eq!(set.tensors(), whole.tensors());
        assert_eq!(set.metadata(), whole.metadata());
        let mapped = opts.storage.open(&p, "").unwrap().map().is_some();
        for i in 0..whole.tensors().len() {
            assert_eq!(read_all(&set, i), whole.bytes(i).unwrap());
            assert_eq!(set.bytes(i).is_some(), mapped);
            assert_eq!(set.gguf_tensor(i).ne, whole.gguf_tensors()[i].ne);
        }
    }
    // A plain file is a set of one.
    let one = open_split(&good("py_tensors.gguf"), &ReadOptions::default()).unwrap();
    assert_eq!(one.splits().len(), 1);
}

#[test]
fn split_writer_reproduces_llama_gguf_split_byte_for_byte() {
    let whole = open(&good("c_quant_q4_k_m.gguf"), &ReadOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("c_split.gguf");
    let specs: Vec<GgufTensorSpec> = whole
        .gguf_tensors()
        .iter()
        .map(GgufTensorSpec::from_gguf)
        .collect();
    let mut sink = GgufSink::new(target.clone())
        .specs(specs)
        .split(split_options(None, Some(2), false));
    let plan = sink.plan(whole.tensors(), whole.metadata()).unwrap();
    assert_eq!(plan.files.len(), 3);
    for i in 0..whole.tensors().len() {
        sink.write_at(i, 0, whole.bytes(i).unwrap()).unwrap();
    }
    for f in Box::new(sink).finish().unwrap() {
        f.temp.publish(false).unwrap();
    }
    for no in 0..3u16 {
        let ours = split::split_path(&target, no, 3);
        let theirs = good(ours.file_name().unwrap().to_str().unwrap());
        assert!(
            std::fs::read(&ours).unwrap() == std::fs::read(&theirs).unwrap(),
            "{} differs from llama-gguf-split's",
            ours.display()
        );
    }
}

/// Parses `bytes` cut at each of `cuts`: an error exactly when the cut removes header or tensor
/// bytes (cutting only the padding after the last tensor is accepted, as llama.cpp's model
/// loader does, docs/specs/gguf.md §1.1), and never a panic.
fn check_cuts(file: &Path, bytes: &[u8], cuts: impl Iterator<Item = usize>) {
    let g = parse(file, bytes, &Default::default()).unwrap();
    let needed = g
        .tensors
        .iter()
        .map(|t| g.data_start + t.offset + t.nbytes)
        .max()
        .unwrap_or(g.infos_end);
    // Every cut is parsed, one share per CPU (the cuts of a 0.7 MB vocabulary take tens of
    // seconds even optimised); cut i goes to thread i mod n.
    let cuts: Vec<usize> = cuts.collect();
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for t in 0..n {
            let cuts = &cuts;
            s.spawn(move || {
                for &cut in cuts.iter().skip(t).step_by(n) {
                    let r = parse(file, &bytes[..cut], &Default::default());
                    let ranged = InMemory::new(file, &bytes[..cut]).unmapped();
                    let by_ranges = parse_source(&ranged, &Default::default());
                    assert_eq!(
                        format!("{by_ranges:?}"),
                        format!("{r:?}"),
                        "{} cut at {cut}: read by ranges",
                        file.display()
                    );
                    assert_eq!(
                        r.is_ok(),
                        cut as u64 >= needed,
                        "{} cut at {cut}: {:?}",
                        file.display(),
                        r.err()
                    );
                }
            });
        }
    });
}

const BIG: usize = 200_000;

fn committed_fixtures() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = pairs().into_iter().map(|(f, _)| f).collect();
    files.retain(|f| f.starts_with(fixtures()));
    files
}

/// Every 37th byte of every fixture below 200 KB; for the two committed vocab files (0.6-0.7 MB
/// of header each, where a full pass takes minutes) every 37th byte of the first and last
/// 64 KiB and every 997th byte between. The full pass is `truncation_full_vocab` (ignored).
#[test]
fn truncation_at_every_37th_byte_errors_without_panic() {
    for file in committed_fixtures() {
        let bytes = std::fs::read(&file).unwrap();
        let n = bytes.len();
        if n < BIG {
            check_cuts(&file, &bytes, (0..n).step_by(37));
        } else {
            let w = 64 << 10;
            let cuts = (0..w)
                .step_by(37)
                .chain((w..n - w).step_by(997))
                .chain((n - w..n).step_by(37));
            check_cuts(&file, &bytes, cuts);
        }
    }
}

/// The full every-37th-byte pass over the vocab files (about 7 minutes on a shared machine):
/// `cargo test -- --ignored truncation_full_vocab`.
#[test]
#[ignore = "a minute of two cores: .ci/run runs it with --ignored"]
fn truncation_full_vocab() {
    for file in committed_fixtures() {
        let bytes = std::fs::read(&file).unwrap();
        if bytes.len() >= BIG {
            check_cuts(&file, &bytes, (0..bytes.len()).step_by(37));
        }
    }
}

#[test]
fn incomplete_or_misnumbered_split_sets_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let copy = |from: u32, to: u32| {
        std::fs::copy(
            good(&format!("c_split-{from:05}-of-00003.gguf")),
            dir.path().join(format!("m-{to:05}-of-00003.gguf")),
        )
        .unwrap();
    };
    // The same refusal, mapped or read by ranges.
    let refused = |p: &Path| {
        let e = open_split(p, &ReadOptions::default())
            .unwrap_err()
            .to_string();
        assert_eq!(open_split(p, &pread()).unwrap_err().to_string(), e);
        e
    };
    copy(1, 1);
    copy(3, 3);
    let e = refused(&dir.path().join("m-00001-of-00003.gguf"));
    assert!(
        e.contains("incomplete") && e.contains("m-00002-of-00003.gguf"),
        "{e}"
    );
    copy(3, 2);
    let e = refused(&dir.path().join("m-00003-of-00003.gguf"));
    assert!(
        e.contains("m-00002-of-00003.gguf") && e.contains("`split.no` is Some(2), expected 1"),
        "{e}"
    );
    // A split renamed out of its set cannot find its siblings.
    let lone = dir.path().join("lone.gguf");
    std::fs::copy(good("c_split-00001-of-00003.gguf"), &lone).unwrap();
    let e = refused(&lone);
    assert!(e.contains("one of 3 splits"), "{e}");
}

#[test]
fn split_by_size_follows_gguf_split() {
    // gguf-split counts each tensor padded to 32 and starts a new split when adding the next
    // tensor would go over the limit; decimal sizes.
    let spec = |name: &str, n: u64| GgufTensorSpec {
        name: name.into(),
        dtype: weightport_core::DType::F32,
        ne: vec![n],
    };
    let specs = vec![
        spec("a", 250),
        spec("b", 250),
        spec("c", 10),
        spec("d", 600),
    ];
    // a = 1000 B (1024 padded), b = 1024, c = 40 (64), d = 2400 (2400).
    let by = |max: u64| split::assign(&specs, &split_options(Some(max), None, false)).unwrap();
    assert_eq!(by(2048), vec![vec![0, 1], vec![2], vec![3]]);
    assert_eq!(by(2112), vec![vec![0, 1, 2], vec![3]]);
    assert_eq!(by(100), vec![vec![0], vec![1], vec![2], vec![3]]);
    let no_first = split::assign(&specs, &split_options(None, Some(3), true)).unwrap();
    assert_eq!(no_first, vec![vec![], vec![0, 1, 2], vec![3]]);
    assert_eq!(split::parse_size("4G"), Some(4_000_000_000));
}

#[test]
fn sink_takes_parallel_chunked_writes_and_cleans_up_when_dropped() {
    let src = open(&good("py_tensors.gguf"), &ReadOptions::default()).unwrap();
    for i in 0..src.tensors().len() {
        assert_eq!(src.access(i), weightport_core::Access::Mapped);
    }
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("out.gguf");
    let specs: Vec<GgufTensorSpec> = src
        .gguf_tensors()
        .iter()
        .map(GgufTensorSpec::from_gguf)
        .collect();
    let mut sink = GgufSink::new(target.clone()).specs(specs.clone());
    let plan = sink.plan(src.tensors(), src.metadata()).unwrap();
    assert_eq!(plan.files.len(), 1);
    let staged = sink.staged();
    let name = staged[0]
        .temp
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        name.starts_with(".out.gguf.") && name.ends_with(".wp-tmp"),
        "{name}"
    );
    assert_eq!(staged[0].size, src.file_len());
    // Every tensor in 7-byte pieces, from several threads, in reverse order.
    std::thread::scope(|s| {
        for i in (0..src.tensors().len()).rev() {
            let sink = &sink;
            let src = &src;
            s.spawn(move || {
                let b = src.bytes(i).unwrap();
                for (k, piece) in b.chunks(7).enumerate().rev() {
                    sink.write_at(i, 7 * k as u64, piece).unwrap();
                }
            });
        }
    });
    assert!(sink.write_at(0, src.tensors()[0].byte_len, &[1]).is_err());
    let temp = staged[0].temp.clone();
    assert!(std::fs::read(&temp).unwrap() == std::fs::read(good("py_tensors.gguf")).unwrap());
    drop(sink);
    assert!(!temp.exists(), "temp file left behind");
    assert!(!target.exists());
}

fn split_options(
    max_bytes: Option<u64>,
    max_tensors: Option<usize>,
    empty_first: bool,
) -> SplitOptions {
    let mut o = SplitOptions::default();
    o.max_bytes = max_bytes;
    o.max_tensors = max_tensors;
    o.no_tensor_first_split = empty_first;
    o
}
