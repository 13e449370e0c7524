//! Malformed GGUF built from bytes: every case of docs/specs/gguf.md §1.3 is refused with the right error,
//! naming the file, the key or tensor and the byte offset, and never panics.

use std::path::Path;

use weightport_core::bytes::InMemory;
use weightport_core::{Error, Limits, MetaValue, ReadOptions};
use weightport_gguf::header::{parse, parse_source, GgufHeader};

/// A GGUF file under construction.
#[derive(Clone)]
struct G {
    version: u32,
    kv: Vec<Vec<u8>>,
    tensors: Vec<Vec<u8>>,
    n_tensors: Option<u64>,
    n_kv: Option<u64>,
    data: Vec<u8>,
    pad: bool,
}

fn s(b: &mut Vec<u8>, x: &[u8]) {
    b.extend_from_slice(&(x.len() as u64).to_le_bytes());
    b.extend_from_slice(x);
}

fn kv(key: &str, ty: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    s(&mut b, key.as_bytes());
    b.extend_from_slice(&ty.to_le_bytes());
    b.extend_from_slice(payload);
    b
}

fn ti(name: &str, ne: &[u64], ty: u32, offset: u64) -> Vec<u8> {
    let mut b = Vec::new();
    s(&mut b, name.as_bytes());
    b.extend_from_slice(&(ne.len() as u32).to_le_bytes());
    for d in ne {
        b.extend_from_slice(&d.to_le_bytes());
    }
    b.extend_from_slice(&ty.to_le_bytes());
    b.extend_from_slice(&offset.to_le_bytes());
    b
}

impl G {
    fn new() -> Self {
        G {
            version: 3,
            kv: vec![kv("general.architecture", 8, &{
                let mut b = Vec::new();
                s(&mut b, b"llama");
                b
            })],
            tensors: Vec::new(),
            n_tensors: None,
            n_kv: None,
            data: Vec::new(),
            pad: true,
        }
    }

    /// Two F32 tensors `a` [4] and `b` [8], laid out correctly.
    fn two_tensors() -> Self {
        let mut g = G::new();
        g.tensors.push(ti("a", &[4], 0, 0));
        g.tensors.push(ti("b", &[8], 0, 32));
        g.data = vec![1u8; 64];
        g
    }

    fn bytes(&self) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(
            &self
                .n_tensors
                .unwrap_or(self.tensors.len() as u64)
                .to_le_bytes(),
        );
        b.extend_from_slice(&self.n_kv.unwrap_or(self.kv.len() as u64).to_le_bytes());
        for k in &self.kv {
            b.extend_from_slice(k);
        }
        for t in &self.tensors {
            b.extend_from_slice(t);
        }
        if self.pad && !self.tensors.is_empty() {
            while !b.len().is_multiple_of(32) {
                b.push(0);
            }
        }
        b.extend_from_slice(&self.data);
        b
    }
}

/// Parses `b`, mapped; the same bytes without a map (read by ranges, as a remote object is)
/// must give the same header or the same error.
fn read(b: &[u8]) -> Result<GgufHeader, Error> {
    let path = Path::new("hostile.gguf");
    let mapped = parse(path, b, &Limits::default());
    let ranged = parse_source(&InMemory::new(path, b).unmapped(), &Limits::default());
    assert_eq!(
        format!("{ranged:?}"),
        format!("{mapped:?}"),
        "read by ranges"
    );
    mapped
}

/// Asserts a malformed error naming the file, `tensor` (if given) and a byte offset, whose
/// reason contains `needle`.
fn assert_malformed(b: &[u8], tensor: Option<&str>, needle: &str) {
    match read(b) {
        Err(Error::Malformed { at, reason, .. }) => {
            assert!(reason.contains(needle), "{reason:?} lacks {needle:?}");
            assert_eq!(at.path, Path::new("hostile.gguf"));
            assert!(at.offset.is_some(), "{reason}: no offset");
            assert!(
                at.offset.unwrap() <= b.len() as u64,
                "{reason}: offset past file"
            );
            if let Some(t) = tensor {
                assert_eq!(at.tensor.as_deref(), Some(t), "{reason}");
            }
        }
        other => panic!("expected malformed ({needle}), got {other:?}"),
    }
}

fn assert_unsupported(b: &[u8], needle: &str) {
    match read(b) {
        Err(e @ Error::Unsupported { .. }) => {
            let m = e.to_string();
            assert!(m.contains(needle), "{m:?} lacks {needle:?}");
            assert!(m.contains("hostile.gguf") && m.contains("(byte "), "{m}");
        }
        other => panic!("expected unsupported ({needle}), got {other:?}"),
    }
}

fn assert_limit(b: &[u8], what: &str) {
    match read(b) {
        Err(Error::Limit { what: w, at, .. }) => {
            assert_eq!(w, what);
            assert!(at.offset.is_some());
        }
        other => panic!("expected limit {what}, got {other:?}"),
    }
}

#[test]
fn the_builders_produce_valid_files() {
    let h = read(&G::new().bytes()).unwrap();
    assert_eq!(
        h.metadata.get("general.architecture").unwrap().as_str(),
        Some("llama")
    );
    let h = read(&G::two_tensors().bytes()).unwrap();
    assert_eq!(h.tensors.len(), 2);
    assert_eq!(h.tensors[1].shape(), vec![8]);
}

#[test]
fn magic_version_and_endianness() {
    let mut b = G::new().bytes();
    b[0] = b'X';
    assert!(matches!(read(&b), Err(Error::NotFormat { .. })));
    assert!(matches!(read(b"GG"), Err(Error::NotFormat { .. })));
    let mut g = G::new();
    g.version = 1;
    assert_unsupported(&g.bytes(), "v1");
    g.version = 0;
    assert_malformed(&g.bytes(), None, "version 0");
    g.version = 4;
    assert_unsupported(&g.bytes(), "version 4");
    // A big-endian v3 file: the version reads 0x03000000 little-endian.
    g.version = 3u32.swap_bytes();
    assert_unsupported(&g.bytes(), "big-endian");
    g.version = 2;
    assert!(read(&g.bytes()).is_ok());
    assert_malformed(&b"GGUF\x03\0\0\0\0\0"[..], None, "truncated");
}

#[test]
fn huge_counts_are_bounded_by_the_bytes_present() {
    let mut g = G::new();
    g.n_tensors = Some(1 << 40);
    assert_malformed(&g.bytes(), None, "tensor count");
    g.n_tensors = Some(u64::MAX);
    assert_malformed(&g.bytes(), None, "negative");
    let mut g = G::new();
    g.n_kv = Some(1 << 50);
    assert_malformed(&g.bytes(), None, "key/value count");
    let mut g = G::new();
    g.n_kv = Some(20_000);
    g.data = vec![0; 14 * 20_000];
    assert_limit(&g.bytes(), "number of gguf key/value pairs");
    let mut g = G::new();
    g.n_tensors = Some(5_000_000);
    g.data = vec![0; 24 * 5_000_000 + 100];
    let r = parse(
        Path::new("hostile.gguf"),
        &g.bytes(),
        &Limits {
            max_tensors: 1000,
            ..Limits::default()
        },
    );
    assert!(
        matches!(
            r,
            Err(Error::Limit {
                what: "number of tensors",
                ..
            })
        ),
        "{r:?}"
    );
}

#[test]
fn strings_keys_and_values() {
    // String length past EOF.
    let mut g = G::new();
    let mut k = Vec::new();
    k.extend_from_slice(&1000u64.to_le_bytes());
    k.extend_from_slice(&[b'a'; 20]);
    g.kv = vec![k];
    assert_malformed(&g.bytes(), None, "only 20 bytes follow");
    // Over the 1 GiB cap.
    let mut g = G::new();
    g.kv = vec![kv("k", 8, &(2u64 << 30).to_le_bytes())];
    assert_limit(&g.bytes(), "gguf string length");
    // Empty key, non-UTF-8 key, duplicate key.
    let mut g = G::new();
    g.kv.push(kv("", 4, &1u32.to_le_bytes()));
    assert_malformed(&g.bytes(), None, "key 1 is empty");
    let mut g = G::new();
    let mut k = Vec::new();
    s(&mut k, b"\xff\xfe");
    k.extend_from_slice(&4u32.to_le_bytes());
    k.extend_from_slice(&1u32.to_le_bytes());
    g.kv.push(k);
    assert_malformed(&g.bytes(), None, "not valid UTF-8");
    let mut g = G::new();
    g.kv.push(g.kv[0].clone());
    assert_malformed(&g.bytes(), None, "duplicate key `general.architecture`");
    // Unknown value type.
    let mut g = G::new();
    g.kv.push(kv("x", 13, &[0; 8]));
    assert_malformed(&g.bytes(), None, "unknown value type 13");
    // Value truncated.
    let mut g = G::new();
    g.kv.push(kv("x", 10, &[0; 3]));
    assert_malformed(&g.bytes(), None, "key `x`");
    // A string value that is not UTF-8 is kept as bytes (llama.cpp does not validate).
    let mut g = G::new();
    let mut p = Vec::new();
    s(&mut p, b"\xc3(");
    g.kv.push(kv("x", 8, &p));
    let h = read(&g.bytes()).unwrap();
    assert_eq!(
        h.metadata.get("x"),
        Some(&MetaValue::Bytes(b"\xc3(".to_vec()))
    );
    // Any non-zero bool byte is true, as in llama.cpp.
    let mut g = G::new();
    g.kv.push(kv("b", 7, &[2]));
    assert_eq!(
        read(&g.bytes()).unwrap().metadata.get("b"),
        Some(&MetaValue::Bool(true))
    );
}

fn array(elem: u32, n: u64, payload: &[u8]) -> Vec<u8> {
    let mut b = elem.to_le_bytes().to_vec();
    b.extend_from_slice(&n.to_le_bytes());
    b.extend_from_slice(payload);
    b
}

#[test]
fn arrays() {
    // Array of arrays: llama.cpp refuses it, so do we.
    let mut g = G::new();
    g.kv.push(kv(
        "nested",
        9,
        &array(9, 1, &array(4, 1, &7u32.to_le_bytes())),
    ));
    assert_unsupported(&g.bytes(), "array of arrays");
    // Count over 2^30.
    let mut g = G::new();
    g.kv.push(kv("big", 9, &array(0, (1 << 30) + 1, &[])));
    assert_limit(&g.bytes(), "gguf array length");
    // Count past EOF (numbers, and strings at 8 bytes each at least).
    let mut g = G::new();
    g.kv.push(kv("a", 9, &array(4, 100, &[0; 16])));
    assert_malformed(&g.bytes(), None, "array of 100 u32");
    let mut g = G::new();
    g.kv.push(kv("a", 9, &array(8, 100, &[0; 16])));
    assert_malformed(&g.bytes(), None, "array of 100 str");
    // Unknown element type.
    let mut g = G::new();
    g.kv.push(kv("a", 9, &array(99, 0, &[])));
    assert_malformed(&g.bytes(), None, "unknown element type 99");
    // Empty arrays keep their element type.
    let mut g = G::new();
    g.kv.push(kv("e", 9, &array(6, 0, &[])));
    let h = read(&g.bytes()).unwrap();
    assert_eq!(
        h.metadata.get("e"),
        Some(&MetaValue::TypedArray {
            elem: weightport_core::MetaType::F32,
            items: vec![]
        })
    );
}

#[test]
fn alignment_key() {
    for (ty, payload, needle) in [
        (
            5u32,
            32i32.to_le_bytes().to_vec(),
            "must have type u32 but has type i32",
        ),
        (10, 32u64.to_le_bytes().to_vec(), "has type u64"),
        (
            4,
            0u32.to_le_bytes().to_vec(),
            "is 0, not a non-zero power of two",
        ),
        (4, 48u32.to_le_bytes().to_vec(), "is 48"),
    ] {
        let mut g = G::new();
        g.kv.push(kv("general.alignment", ty, &payload));
        assert_malformed(&g.bytes(), None, needle);
    }
    let mut g = G::new();
    g.kv.push(kv("general.alignment", 4, &64u32.to_le_bytes()));
    assert_eq!(read(&g.bytes()).unwrap().alignment, 64);
}

#[test]
fn offsets() {
    let mut g = G::two_tensors();
    g.tensors[1] = ti("b", &[8], 0, 16);
    assert_malformed(&g.bytes(), Some("b"), "not a multiple of the alignment 32");
    g.tensors[1] = ti("b", &[8], 0, 0);
    assert_malformed(&g.bytes(), Some("b"), "overlaps the data of tensor `a`");
    g.tensors[1] = ti("b", &[8], 0, 64);
    assert_malformed(&g.bytes(), Some("b"), "leaves a gap");
    // Out of order: b first at 32, a at 0.
    let mut g = G::two_tensors();
    g.tensors = vec![ti("b", &[8], 0, 32), ti("a", &[4], 0, 0)];
    assert_malformed(&g.bytes(), Some("b"), "leaves a gap");
    // Data past EOF.
    let mut g = G::two_tensors();
    g.data.truncate(40);
    assert_malformed(&g.bytes(), Some("b"), "runs past the end of the file");
    // Data section start past EOF.
    let mut g = G::two_tensors();
    g.data.clear();
    g.pad = false;
    assert_malformed(&g.bytes(), None, "data section would begin past the end");
    // A huge offset does not overflow.
    let mut g = G::two_tensors();
    g.tensors[0] = ti("a", &[4], 0, u64::MAX - 31);
    assert_malformed(&g.bytes(), Some("a"), "gap");
    // Trailing padding of the last tensor may be missing (llama.cpp's loader accepts it).
    let mut g = G::two_tensors();
    g.data.truncate(64);
    assert!(read(&g.bytes()).is_ok());
}

#[test]
fn tensor_infos() {
    let with = |t: Vec<u8>| {
        let mut g = G::new();
        g.tensors.push(t);
        g.data = vec![0; 4096];
        g.bytes()
    };
    assert_malformed(
        &with(ti("t", &[1, 1, 1, 1, 1], 0, 0)),
        Some("t"),
        "5 dimensions",
    );
    assert_malformed(
        &with(ti("t", &[1 << 63], 0, 0)),
        Some("t"),
        "negative as i64",
    );
    assert_malformed(
        &with(ti("t", &[1 << 32, 1 << 32], 0, 0)),
        Some("t"),
        "more elements than fit in i64",
    );
    assert_malformed(
        &with(ti("t", &[1 << 40, 1 << 20, 1 << 3], 0, 0)),
        Some("t"),
        "i64",
    );
    // Zero-element tensors are legal (llama.cpp treats them as representable)...
    let h = read(&with(ti("t", &[0, 4], 0, 0))).unwrap();
    assert_eq!(h.tensors[0].nbytes, 0);
    assert_eq!(h.tensors[0].shape(), vec![4, 0]);
    // ...but not when the other dimensions overflow outermost first (a deliberate deviation:
    // every shape weightport hands on has a computable size).
    assert_malformed(
        &with(ti("t", &[0, 1 << 62, 1 << 62], 0, 0)),
        Some("t"),
        "weightport does not",
    );
    let h = read(&with(ti("t", &[], 0, 0))).unwrap();
    assert_eq!(h.tensors[0].nbytes, 4);
    assert_malformed(
        &with(ti("t", &[33, 2], 8, 0)),
        Some("t"),
        "not a multiple of the Q8_0 block size 32",
    );
    assert_malformed(
        &with(ti("t", &[4], 43, 0)),
        Some("t"),
        "unknown ggml type id 43",
    );
    assert_malformed(
        &with(ti("t", &[4], u32::MAX, 0)),
        Some("t"),
        "unknown ggml type id",
    );
    assert_unsupported(&with(ti("t", &[32], 4, 0)), "Q4_2");
    assert_unsupported(&with(ti("t", &[32], 36, 0)), "IQ4_NL_4_4");
    let long = "x".repeat(64);
    assert_malformed(&with(ti(&long, &[4], 0, 0)), None, "at most 63");
    assert!(read(&with(ti(&"x".repeat(63), &[4], 0, 0))).is_ok());
    // Duplicate tensor name.
    let mut g = G::two_tensors();
    g.tensors[1] = ti("a", &[8], 0, 32);
    assert_malformed(&g.bytes(), Some("a"), "duplicate tensor name");
}

#[test]
fn open_names_the_file_and_sniffs_impostors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("lfs.gguf");
    std::fs::write(
        &p,
        b"version https://git-lfs.github.com/spec/v1\noid sha256:0",
    )
    .unwrap();
    let e = weightport_gguf::open(&p, &ReadOptions::default()).unwrap_err();
    assert!(e.to_string().contains("Git LFS pointer"), "{e}");
    let p = dir.path().join("empty.gguf");
    std::fs::write(&p, b"").unwrap();
    assert!(weightport_gguf::open(&p, &ReadOptions::default()).is_err());
    let p = dir.path().join("bad.gguf");
    let mut g = G::two_tensors();
    g.tensors[1] = ti("b", &[8], 0, 0);
    std::fs::write(&p, g.bytes()).unwrap();
    let e = weightport_gguf::open(&p, &ReadOptions::default()).unwrap_err();
    let m = e.to_string();
    assert!(
        m.starts_with(&format!("{}: tensor `b` (byte ", p.display())),
        "{m}"
    );
    assert!(m.contains("malformed gguf"), "{m}");
    assert!(weightport_gguf::probe(&G::new().bytes()));
    assert!(!weightport_gguf::probe(b"PK\x03\x04"));
}

/// Deterministic mutations of valid headers: never a panic, and whatever is accepted keeps the
/// invariants the rest of weightport relies on.
#[test]
fn mutated_headers_never_panic() {
    let seeds = [G::new().bytes(), G::two_tensors().bytes()];
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for seed in &seeds {
        for _ in 0..20_000 {
            let mut b = seed.clone();
            for _ in 0..1 + next() % 4 {
                let i = (next() % b.len() as u64) as usize;
                b[i] = match next() % 4 {
                    0 => 0xff,
                    1 => 0,
                    2 => b[i].wrapping_add(1),
                    _ => next() as u8,
                };
            }
            if let Ok(h) = read(&b) {
                for t in &h.tensors {
                    assert!(h.data_start + t.offset + t.nbytes <= b.len() as u64);
                    assert_eq!(t.dtype.byte_len(&t.shape()), Ok(t.nbytes));
                }
            }
        }
    }
}

/// Every cap is a field of `Limits`, settable through the library API: the real llama.cpp
/// vocabulary opens with the defaults and is refused, naming the cap, with each one lowered.
#[test]
fn caps_are_settable_from_the_library_api() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/good/gguf/ggml-vocab-bert-bge.gguf");
    assert!(weightport_gguf::open(&p, &ReadOptions::default()).is_ok());
    type Lower = fn(&mut Limits);
    let lowered: [(&str, Lower); 4] = [
        ("key/value pairs", |l| l.max_meta_keys = 3),
        ("metadata values", |l| l.max_meta_values = 1000),
        ("array length", |l| l.max_gguf_array = 100),
        ("string length", |l| l.max_gguf_string = 4),
    ];
    for (what, lower) in lowered {
        let mut opts = ReadOptions::default();
        lower(&mut opts.limits);
        match weightport_gguf::open(&p, &opts) {
            Err(e @ Error::Limit { .. }) => assert!(e.to_string().contains(what), "{what}: {e}"),
            other => panic!("{what}: {other:?}"),
        }
    }
}
