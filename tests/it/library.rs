//! The command line as a library (what the Python wheel calls): `run_json` gives the document and
//! exit code the `weightport` binary prints with `--json` for the same arguments, reports progress
//! to the caller's sink, and `--version` names the build's formats.

use crate::common;

use std::ffi::OsString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use common::{fixtures, wp};
use weightport_engine::{NoProgress, Progress};

fn argv(args: &[&str]) -> Vec<OsString> {
    std::iter::once("weightport")
        .chain(args.iter().copied())
        .map(OsString::from)
        .collect()
}

/// The binary's `--json` stdout and exit code.
fn binary(args: &[&str]) -> (i32, serde_json::Value) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let o = wp(&all);
    let doc = serde_json::from_slice(&o.stdout).expect("one JSON document");
    (o.status.code().unwrap(), doc)
}

fn library(args: &[&str]) -> (i32, serde_json::Value) {
    let (code, text) = weightport::run_json(argv(args), &NoProgress);
    (
        code,
        serde_json::from_str(&text).expect("one JSON document"),
    )
}

#[test]
fn run_json_gives_the_binarys_document_and_exit_code() {
    let f = fixtures();
    let st = f.join("good/safetensors/llama_tiny.safetensors");
    let hostile = f.join("hostile/pickle/01_rce_global_os_system.pt");
    let cases: Vec<Vec<&str>> = vec![
        vec!["inspect", st.to_str().unwrap()],
        vec!["verify", st.to_str().unwrap()],
        vec!["scan", hostile.to_str().unwrap()],
        vec!["inspect", hostile.to_str().unwrap()],
        vec!["inspect", "/nonexistent/model.safetensors"],
        vec![
            "convert",
            st.to_str().unwrap(),
            "-o",
            "/tmp/x.safetensors",
            "--bogus",
        ],
        vec!["--threads", "0", "inspect", st.to_str().unwrap()],
    ];
    let mut codes = Vec::new();
    for args in cases {
        let lib = library(&args);
        assert_eq!(lib, binary(&args), "{args:?}");
        codes.push(lib.0);
    }
    assert_eq!(codes, [0, 0, 3, 3, 1, 2, 2]);
}

/// Records what the pipeline reports.
#[derive(Default)]
struct Recorder {
    phases: Mutex<Vec<(String, u64)>>,
    advanced: AtomicU64,
}

impl Progress for Recorder {
    fn start(&self, phase: &str, total: u64) {
        self.phases.lock().unwrap().push((phase.to_string(), total));
    }
    fn advance(&self, bytes: u64) {
        self.advanced.fetch_add(bytes, Ordering::Relaxed);
    }
}

#[test]
fn run_json_reports_progress_to_the_callers_sink() {
    let t = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/safetensors/llama_tiny.safetensors");
    let out = t.path().join("o.safetensors");
    let rec = Recorder::default();
    let args = [
        "--threads",
        "2",
        "convert",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    let (code, text) = weightport::run_json(argv(&args), &rec);
    assert_eq!(code, 0, "{text}");
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["threads"], 2);
    let phases = rec.phases.lock().unwrap().clone();
    let names: Vec<&str> = phases.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names, ["write", "verify"]);
    let total: u64 = phases.iter().map(|(_, t)| t).sum();
    assert_eq!(rec.advanced.load(Ordering::Relaxed), total);
    assert_eq!(phases[0].1, doc["data_bytes"].as_u64().unwrap());
}

#[test]
fn version_names_the_formats_of_the_build() {
    let o = wp(&["--version"]);
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    let first = format!("weightport {}\n", env!("CARGO_PKG_VERSION"));
    assert!(text.starts_with(&first), "{text}");
    for f in ["safetensors", "pytorch", "npz", "gguf", "hf-repo"] {
        assert!(text.contains(f), "{f} missing: {text}");
    }
    assert!(
        text.contains("build:  debug") || text.contains("build:  release"),
        "{text}"
    );
}
