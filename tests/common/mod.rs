//! What every integration test needs: the fixtures directory and the built CLI.
#![allow(dead_code)] // each test binary uses its own subset

pub mod arch;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `fixtures/` of the repository.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Runs the weightport binary built for these tests.
pub fn wp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weightport"))
        .args(args)
        .output()
        .expect("run weightport")
}

/// A Python with `jsonschema` (`WEIGHTPORT_PYTHON`, else `python3`); `None` with a printed
/// note outside CI (in CI it must be there: `.ci/requirements.txt`).
pub fn python_with_jsonschema() -> Option<String> {
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
pub fn validate_json(py: &str, schema: &Path, doc: &[u8], what: &str) {
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
