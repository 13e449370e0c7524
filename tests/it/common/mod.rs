//! What every integration test needs: the fixtures directory and the built CLI.
#![allow(dead_code)] // each test binary uses its own subset

pub(crate) mod arch;
pub(crate) mod fault_proxy;
pub(crate) mod hub;
pub(crate) mod tmpfs;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `fixtures/` of the repository.
pub(crate) fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Runs the weightport binary built for these tests.
pub(crate) fn wp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weightport"))
        .args(args)
        .output()
        .expect("run weightport")
}

/// A Python with `jsonschema` (`WEIGHTPORT_PYTHON`, else `python3`); `None` with a printed
/// note outside CI (in CI it must be there: `.ci/requirements.txt`).
pub(crate) fn python_with_jsonschema() -> Option<String> {
    let cands = [
        std::env::var("WEIGHTPORT_PYTHON").ok(),
        Some("python3".into()),
    ];
    let found = cands.into_iter().flatten().find(|py| {
        Command::new(py)
            .args(["-c", "import jsonschema"])
            .status()
            .is_ok_and(|s| s.success())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI's python must have jsonschema"
        );
        eprintln!("SKIPPED JSON schema validation: no python with jsonschema");
    }
    found
}

/// Validates the JSON document `doc` against the JSON schema file `schema` with `py`'s
/// `jsonschema` (the validator the schema's `$schema` names); panics with the error.
pub(crate) fn validate_json(py: &str, schema: &Path, doc: &[u8], what: &str) {
    let t = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(t.path(), doc).unwrap();
    let o = Command::new(py)
        .args([
            "-c",
            "import json,sys,jsonschema; s=json.load(open(sys.argv[1])); d=json.load(open(sys.argv[2])); \
             jsonschema.validators.validator_for(s)(s).validate(d)",
            schema.to_str().unwrap(),
            t.path().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(doc)
    );
}

/// An importance matrix in llama.cpp's legacy `.dat` layout for the tiny Llama release, every
/// value `scale` times its position.
pub(crate) fn write_dat_imatrix(path: &Path, scale: f32) {
    let mut entries: Vec<(String, usize)> = Vec::new();
    for b in 0..2 {
        for t in [
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_gate",
            "ffn_up",
        ] {
            entries.push((format!("blk.{b}.{t}.weight"), 64));
        }
        entries.push((format!("blk.{b}.ffn_down.weight"), 128));
    }
    entries.push(("output.weight".into(), 64));
    let mut out = Vec::new();
    out.extend((entries.len() as i32).to_le_bytes());
    for (name, n) in &entries {
        out.extend((name.len() as i32).to_le_bytes());
        out.extend(name.as_bytes());
        out.extend(1i32.to_le_bytes());
        out.extend((*n as i32).to_le_bytes());
        for i in 0..*n {
            out.extend((scale * (i + 1) as f32).to_le_bytes());
        }
    }
    std::fs::write(path, out).unwrap();
}
