//! Every file of the hostile corpus (spec §4, `fixtures/hostile/pickle`) is refused with an
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
        match weightport_pickle::open_checkpoint(&path, &ReadOptions::default()) {
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
