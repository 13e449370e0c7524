//! weightport-npz against numpy's own reading of real numpy output.
//!
//! Fixtures come from `fixtures/gen/gen_npz.py` (numpy 2.4.6, ml_dtypes 0.6.0); for every good
//! array, `fixtures/expected/npz/*.json` holds numpy's dtype, shape and the sha256 of the
//! logical little-endian row-major bytes. Every read path (zero-copy `bytes`, `read_into` in
//! several chunk sizes, tiny scratch buffers so chunk boundaries are crossed everywhere, reads
//! out of order) must give exactly those bytes. Every bad fixture must fail with the listed error
//! kind; every fixture cut at every 37th byte must fail without panicking. Every file is read
//! twice: mapped, and by ranged reads only (a storage that never maps, as a remote object is
//! read), with the same bytes and the same errors.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use sha2::{Digest, Sha256};
use weightport_core::bytes::InMemory;
use weightport_core::mapped::LocalFiles;
use weightport_core::{Access, DType, Error, ReadOptions, TensorSource};
use weightport_npz::{
    open_npy, open_npy_dir, open_npz, probe_npy, probe_npz, NpySource, NpzSource,
};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn good(name: &str) -> PathBuf {
    fixtures().join("good/npz").join(name)
}

fn expected(name: &str) -> Value {
    let p = fixtures().join("expected/npz").join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn opts(bf16: bool) -> ReadOptions {
    let mut o = ReadOptions::default();
    o.void2_as_bf16 = bf16;
    o
}

/// `o` with a storage that never maps: every byte comes through checked `pread`s.
fn pread(mut o: ReadOptions) -> ReadOptions {
    o.storage = Arc::new(LocalFiles { pread_only: true });
    o
}

/// numpy's dtype string → the DType weightport must report.
fn dtype_of(numpy: &str) -> DType {
    match &numpy[1..] {
        "b1" => DType::BOOL,
        "i1" => DType::I8,
        "u1" => DType::U8,
        "i2" => DType::I16,
        "u2" => DType::U16,
        "i4" => DType::I32,
        "u4" => DType::U32,
        "i8" => DType::I64,
        "u8" => DType::U64,
        "f2" => DType::F16,
        "f4" => DType::F32,
        "f8" => DType::F64,
        "c8" => DType::C64,
        "V2" => DType::BF16,
        other => panic!("no mapping for {other}"),
    }
}

fn sha(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// Reads tensor `i` front to back in chunks of `chunk` elements.
fn read_all(src: &dyn TensorSource, i: usize, chunk: u64) -> Result<Vec<u8>, Error> {
    let t = &src.tensors()[i];
    let g = t.dtype.granule();
    let step = (chunk * g) as usize;
    let mut out = vec![0u8; t.byte_len as usize];
    let mut off = 0usize;
    while off < out.len() {
        let end = (off + step).min(out.len());
        src.read_into(i, off as u64, &mut out[off..end])?;
        off = end;
    }
    if out.is_empty() {
        src.read_into(i, 0, &mut [])?;
    }
    Ok(out)
}

/// Every check for one source (`mapped`: read from a map) against numpy's description of it.
fn check_source(src: &dyn TensorSource, want: &[Value], label: &str, mapped: bool) {
    let got: Vec<&str> = src.tensors().iter().map(|t| t.name.as_str()).collect();
    let names: Vec<&str> = want.iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!(got, names, "{label}: tensor names and order");
    for (i, w) in want.iter().enumerate() {
        let t = &src.tensors()[i];
        let ctx = format!("{label}: {}", t.name);
        let shape: Vec<u64> = w["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(t.shape, shape, "{ctx}: shape");
        assert_eq!(
            t.dtype,
            dtype_of(w["numpy_dtype"].as_str().unwrap()),
            "{ctx}"
        );
        assert_eq!(t.byte_len, t.dtype.byte_len(&shape).unwrap(), "{ctx}");
        let want_sha = w["sha256"].as_str().unwrap();

        // Which path the reader must offer.
        let descr = w["descr"].as_str().unwrap();
        let little = !descr.starts_with('>') || t.dtype.granule() == 1;
        let non_unit = shape.iter().filter(|&&d| d > 1).count();
        let transposed = w["fortran_order"].as_bool().unwrap() && non_unit > 1 && t.byte_len > 0;
        let stored = w["stored"].as_bool().unwrap();
        let access = match (stored, little && !transposed, transposed) {
            (true, true, _) if mapped => Access::Mapped,
            (true, true, _) => Access::Random,
            (true, false, _) => Access::Random,
            (false, _, true) => Access::Random,
            (false, _, false) => Access::Sequential,
        };
        assert_eq!(src.access(i), access, "{ctx}: access");
        if access == Access::Mapped {
            let b = src.bytes(i).expect("mapped tensors answer bytes()");
            assert_eq!(sha(b), want_sha, "{ctx}: bytes()");
        } else {
            assert!(src.bytes(i).is_none(), "{ctx}: bytes() must not answer");
        }

        // A deflated Fortran member costs one whole inflate pass per call: fewer, larger chunks.
        let chunks: &[u64] = if !stored && transposed {
            &[97, u64::MAX / 64]
        } else {
            &[1, 3, 7, 64, u64::MAX / 64]
        };
        for &chunk in chunks {
            let got = read_all(src, i, chunk).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(sha(&got), want_sha, "{ctx}: read_into in chunks of {chunk}");
        }
        // Out of order: the second half, then the first (a sequential tensor restarts).
        let n = t.byte_len / t.dtype.granule();
        if n >= 2 {
            let half = (n / 2 * t.dtype.granule()) as usize;
            let mut buf = vec![0u8; t.byte_len as usize];
            let (a, b) = buf.split_at_mut(half);
            src.read_into(i, half as u64, b).unwrap();
            src.read_into(i, 0, a).unwrap();
            assert_eq!(sha(&buf), want_sha, "{ctx}: out-of-order reads");
        }
    }
}

fn npz_fixtures() -> Vec<(String, bool)> {
    let mut v = Vec::new();
    for entry in std::fs::read_dir(fixtures().join("expected/npz")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if let Some(f) = name.strip_suffix(".npz.json") {
            let e = expected(&name);
            v.push((format!("{f}.npz"), e["void2_as_bf16"].as_bool().unwrap()));
        }
    }
    v.sort();
    assert!(v.len() >= 10, "npz fixtures missing: {v:?}");
    v
}

#[test]
fn every_npz_matches_numpy() {
    for (file, bf16) in npz_fixtures() {
        let e = expected(&format!("{file}.json"));
        let want = e["tensors"].as_array().unwrap();
        for (scratch, mapped) in [3usize, 40, 1 << 20]
            .iter()
            .flat_map(|&s| [(s, true), (s, false)])
        {
            let o = if mapped {
                opts(bf16)
            } else {
                pread(opts(bf16))
            };
            let src = open_npz(&good(&file), &o)
                .unwrap_or_else(|e| panic!("{file}: {e}"))
                .with_scratch(scratch);
            let label = format!("{file} (scratch {scratch}, mapped {mapped})");
            check_source(&src, want, &label, mapped);
        }
        // The same bytes through the in-memory constructor, and in memory without a map.
        let bytes = std::fs::read(good(&file)).unwrap();
        let src = NpzSource::from_bytes(&good(&file), bytes.clone(), &opts(bf16)).unwrap();
        check_source(&src, want, &format!("{file} (from bytes)"), true);
        let ranged = Arc::new(InMemory::new(good(&file), bytes).unmapped());
        let src = NpzSource::from_source(ranged, &opts(bf16))
            .unwrap()
            .with_scratch(40);
        check_source(&src, want, &format!("{file} (in memory, by ranges)"), false);
    }
}

#[test]
fn npy_files_and_directories_match_numpy() {
    for mapped in [true, false] {
        let o = |bf16| {
            if mapped {
                opts(bf16)
            } else {
                pread(opts(bf16))
            }
        };
        let e = expected("singles.json");
        for w in e["tensors"].as_array().unwrap() {
            let name = w["name"].as_str().unwrap();
            let src = open_npy(&good(&format!("{name}.npy")), &o(false)).unwrap();
            check_source(&src, std::slice::from_ref(w), name, mapped);
            assert_eq!(src.format(), weightport_core::Format::Npy);
        }
        let e = expected("bf16.npy.json");
        let src = open_npy(&good("bf16.npy"), &o(true)).unwrap();
        check_source(&src, e["tensors"].as_array().unwrap(), "bf16.npy", mapped);

        let e = expected("npy_dir.json");
        let src = open_npy_dir(&good("npy_dir"), &o(false)).unwrap();
        check_source(&src, e["tensors"].as_array().unwrap(), "npy_dir", mapped);
        assert_eq!(src.files().len(), 3);
        assert!(src.file_of(2).ends_with("npy_dir/c.npy"));
    }
}

#[test]
fn versions_fortran_and_names() {
    for (f, v) in [("v1.npy", 1u8), ("v2.npy", 2), ("v3.npy", 3)] {
        let b = std::fs::read(good(f)).unwrap();
        assert_eq!(b[6], v, "{f} is npy version {v}.0");
        assert!(probe_npy(&b));
    }
    let src = open_npz(&good("dtypes.npz"), &opts(false)).unwrap();
    let names: Vec<_> = src.tensors().iter().map(|t| t.name.clone()).collect();
    assert!(
        names.contains(&"params/dense/kernel".to_string()),
        "{names:?}"
    );
    let i = names
        .iter()
        .position(|n| n == "params/dense/kernel")
        .unwrap();
    assert_eq!(src.member_name(i), "params/dense/kernel.npy");
    let src = open_npz(&good("positional.npz"), &opts(false)).unwrap();
    let names: Vec<_> = src.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["arr_0", "arr_1"]);
}

#[test]
fn probes_decide_by_content() {
    for f in ["dtypes.npz", "dtypes_compressed.npz", "zip64.npz"] {
        let p = good(f);
        let head = std::fs::read(&p).unwrap();
        assert!(probe_npz(&p, &head[..64]), "{f}");
        assert!(!probe_npy(&head[..64]));
    }
    // A ZIP with data.pkl is a torch checkpoint, whatever its name says.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("model.npz");
    let mut w = zip::ZipWriter::new(std::fs::File::create(&p).unwrap());
    let o =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    w.start_file("archive/data.pkl", o).unwrap();
    std::io::Write::write_all(&mut w, b"\x80\x02}q\x00.").unwrap();
    w.start_file("archive/x.npy", o).unwrap();
    w.finish().unwrap();
    let head = std::fs::read(&p).unwrap();
    assert!(!probe_npz(&p, &head));
    assert!(!probe_npz(&good("v1.npy"), b"\x93NUMPY"));
}

#[test]
fn bf16_needs_the_option() {
    for f in ["bf16.npz", "bf16_compressed.npz"] {
        let e = open_npz(&good(f), &opts(false)).unwrap_err();
        assert_eq!(e.kind(), "unsupported", "{f}: {e}");
        let msg = e.to_string();
        assert!(
            msg.contains("`void2_as` bf16") && msg.contains("bf16"),
            "{msg}"
        );
    }
}

fn open_any(path: &Path, bytes: Option<Vec<u8>>) -> Result<Box<dyn TensorSource>, Error> {
    open_with(path, bytes, &opts(false))
}

fn open_with(
    path: &Path,
    bytes: Option<Vec<u8>>,
    o: &ReadOptions,
) -> Result<Box<dyn TensorSource>, Error> {
    let npz = path.extension().is_some_and(|e| e == "npz");
    Ok(match (npz, bytes) {
        (true, None) => Box::new(open_npz(path, o)?.with_scratch(13)),
        (true, Some(b)) => Box::new(NpzSource::from_bytes(path, b, o)?.with_scratch(13)),
        (false, None) => Box::new(open_npy(path, o)?),
        (false, Some(b)) => Box::new(NpySource::from_bytes(path, b, o)?),
    })
}

/// `bytes` named `path`, in memory without a map: read by ranges only.
fn open_ranged(path: &Path, bytes: &[u8]) -> Result<Box<dyn TensorSource>, Error> {
    let src = Arc::new(InMemory::new(path, bytes.to_vec()).unmapped());
    Ok(match path.extension().is_some_and(|e| e == "npz") {
        true => Box::new(NpzSource::from_source(src, &opts(false))?.with_scratch(13)),
        false => Box::new(NpySource::from_source(src, &opts(false))?),
    })
}

/// What opening and reading everything gives: the error message, or nothing.
fn outcome(r: Result<Box<dyn TensorSource>, Error>) -> Option<String> {
    r.and_then(|src| read_everything(src.as_ref()))
        .err()
        .map(|e| e.to_string())
}

fn read_everything(src: &dyn TensorSource) -> Result<(), Error> {
    for i in 0..src.tensors().len() {
        read_all(src, i, 5)?;
    }
    Ok(())
}

#[test]
fn every_bad_fixture_is_rejected_with_its_kind() {
    let bad = expected("bad.json");
    let dir = fixtures().join("bad/npz");
    let listed = bad.as_object().unwrap();
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        listed.len(),
        "every bad fixture is listed in bad.json"
    );
    for (file, want) in listed {
        let path = dir.join(file);
        let kind = want["kind"].as_str().unwrap();
        let by_ranges = outcome(open_with(&path, None, &pread(opts(false))));
        assert_eq!(
            by_ranges,
            outcome(open_any(&path, None)),
            "{file}: read by ranges"
        );
        let err = match (open_any(&path, None), want["stage"].as_str().unwrap()) {
            (Err(e), "open") => e,
            (Ok(src), "read") => {
                read_everything(src.as_ref()).expect_err(&format!("{file}: reading must fail"))
            }
            (Ok(_), _) => panic!("{file}: opened, expected a {kind} error"),
            (Err(e), stage) => panic!("{file}: failed at open, expected at {stage}: {e}"),
        };
        assert_eq!(err.kind(), kind, "{file}: {err}");
        let msg = err.to_string();
        eprintln!("{msg}");
        if let Some(c) = want.get("contains").and_then(|c| c.as_str()) {
            assert!(msg.contains(c), "{file}: message lacks {c:?}: {msg}");
        }
        assert!(
            msg.contains(file.as_str()),
            "{file}: message names the file: {msg}"
        );
        if kind == "refused" {
            assert_eq!(err.exit_code(), 3);
        }
    }
}

fn all_fixture_files() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for sub in ["good/npz", "good/npz/npy_dir", "bad/npz"] {
        for e in std::fs::read_dir(fixtures().join(sub)).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() && p.extension().is_some_and(|e| e == "npy" || e == "npz") {
                v.push(p);
            }
        }
    }
    v.sort();
    v
}

#[test]
fn truncation_at_every_37th_byte_is_an_error() {
    for p in all_fixture_files() {
        let bytes = std::fs::read(&p).unwrap();
        for cut in (0..bytes.len()).step_by(37) {
            let r = outcome(open_any(&p, Some(bytes[..cut].to_vec())));
            assert!(r.is_some(), "{} cut at {cut} was accepted", p.display());
            let by_ranges = outcome(open_ranged(&p, &bytes[..cut]));
            assert_eq!(by_ranges, r, "{} cut at {cut}: read by ranges", p.display());
        }
    }
}

#[test]
fn truncated_files_on_disk_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    for p in all_fixture_files()
        .into_iter()
        .filter(|p| p.starts_with(fixtures().join("good")))
    {
        let bytes = std::fs::read(&p).unwrap();
        let cut = dir.path().join(p.file_name().unwrap());
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        let r = open_any(&cut, None).and_then(|src| read_everything(src.as_ref()));
        assert!(r.is_err(), "{}", p.display());
    }
}
