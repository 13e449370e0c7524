//! Every file of the hostile corpus (docs/specs/pickle.md §4, `fixtures/hostile/pickle`) is refused with an
//! exit-3-class error (`Refused` or `Limit`), quickly, without panicking, and nothing runs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weightport_core::ReadOptions;
use weightport_pickle::Verdict;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hostile/pickle")
}

fn corpus() -> Vec<(String, PathBuf)> {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir().join("MANIFEST.json")).unwrap()).unwrap();
    let v: Vec<(String, PathBuf)> = m
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                dir().join(e["file"].as_str().unwrap()),
            )
        })
        .collect();
    assert!(v.len() >= 60);
    v
}

fn markers() -> Vec<PathBuf> {
    std::fs::read_dir("/tmp")
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("weightport-pwned-") || n.starts_with("PWNED_")
        })
        .collect()
}

#[test]
fn every_hostile_file_is_refused() {
    let before = markers();
    let mut failures = Vec::new();
    for (name, path) in corpus() {
        let head = std::fs::read(&path).unwrap();
        let head = &head[..head.len().min(512)];
        if !weightport_pickle::probe(&path, head) {
            failures.push(format!("{name}: not probed as a PyTorch checkpoint"));
        }
        let t = Instant::now();
        let r = weightport_pickle::open_checkpoint(&path, &ReadOptions::default());
        // Read by ranges only (a storage that never maps): the same refusal.
        let mut pread = ReadOptions::default();
        pread.storage =
            std::sync::Arc::new(weightport_core::mapped::LocalFiles { pread_only: true });
        let by_ranges = weightport_pickle::open_checkpoint(&path, &pread);
        assert_eq!(
            by_ranges.as_ref().err().map(|e| e.to_string()),
            r.as_ref().err().map(|e| e.to_string()),
            "{name}: read by ranges"
        );
        match r {
            Ok(_) => failures.push(format!("{name}: opened")),
            Err(e) if e.exit_code() != 3 => {
                failures.push(format!("{name}: exit {} ({e})", e.exit_code()))
            }
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(path.file_name().unwrap().to_str().unwrap()),
                    "{msg}"
                );
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{name} took {:?}",
            t.elapsed()
        );
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(markers(), before, "a marker file appeared");
}

#[test]
fn scan_calls_every_hostile_file_unsafe() {
    let mut failures = Vec::new();
    for (name, path) in corpus() {
        let r = weightport_pickle::scan(&path).unwrap();
        if r.verdict != Verdict::Unsafe {
            failures.push(format!("{name}: {:?}", r.findings));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn refusals_name_the_symbol_and_offset() {
    let p = dir().join("01_rce_global_os_system.pt");
    let e = weightport_pickle::open_checkpoint(&p, &ReadOptions::default()).unwrap_err();
    let m = e.to_string();
    assert!(m.contains("os.system") && m.contains("(byte "), "{m}");
    let r = weightport_pickle::scan(&p).unwrap();
    let g = r.globals.iter().find(|g| g.module == "os").unwrap();
    assert!(!g.allowed);
    // The os.system global and the benign ones after it are all listed.
    assert!(r
        .globals
        .iter()
        .any(|g| g.allowed && g.name == "_rebuild_tensor_v2"));
}

/// Checks of the shared ZIP layer (`weightport_core::archive`) that this reader did not make
/// before it shared them with the npz reader: the CRC-32 of a deflated storage record (checked
/// when its stream is read to the end) and the declared deflate ratio.
#[test]
fn checks_shared_with_the_npz_reader_apply_to_torch_zips() {
    let good = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/good/pickle/rezipped_deflate.pt");
    let bytes = std::fs::read(&good).unwrap();
    let view = weightport_core::bytes::InMemory::new(&good, &bytes[..]);
    let table = weightport_core::archive::entries(&view, &Default::default()).unwrap();
    let rec = table
        .entries
        .iter()
        .find(|e| e.name.ends_with("/data/0"))
        .expect("a storage record");
    assert_eq!(rec.method, Some(weightport_core::archive::Method::Deflated));
    let tmp = tempfile::tempdir().unwrap();
    let patched = |name: &str, edit: &dyn Fn(&mut Vec<u8>)| {
        let mut b = bytes.clone();
        edit(&mut b);
        let p = tmp.path().join(name);
        std::fs::write(&p, b).unwrap();
        p
    };
    let (h, cd) = (rec.header_start as usize, rec.central_start as usize);
    // Both headers agree on a wrong CRC: the archive opens, reading the record fails.
    let p = patched("crc.pt", &|b| {
        b[h + 14] ^= 1;
        b[cd + 16] ^= 1;
    });
    let src = weightport_pickle::open(&p, &ReadOptions::default()).unwrap();
    let mut failed = None;
    for i in 0..src.tensors().len() {
        let mut buf = vec![0u8; src.tensors()[i].byte_len as usize];
        if let Err(e) = src.read_into(i, 0, &mut buf) {
            failed = Some(e);
        }
    }
    let e = failed.expect("a CRC mismatch");
    assert!(e.to_string().contains("CRC-32 mismatch"), "{e}");
    // Both headers declare 2000 times the compressed size: refused before anything is read.
    let huge = (rec.csize * 2000) as u32;
    let p = patched("bomb.pt", &|b| {
        b[h + 22..h + 26].copy_from_slice(&huge.to_le_bytes());
        b[cd + 24..cd + 28].copy_from_slice(&huge.to_le_bytes());
    });
    let Err(e) = weightport_pickle::open(&p, &ReadOptions::default()) else {
        panic!("a declared ratio of 2000:1 opened");
    };
    assert_eq!(e.exit_code(), 3, "{e}");
    assert!(e.to_string().contains("ratio"), "{e}");
}
