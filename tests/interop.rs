//! Interop: output read back by safetensors-py (numpy only) equals the source.
//!
//! Needs a Python with `numpy` and `safetensors` (`WEIGHTPORT_PYTHON`, else `python3`). `.ci/run`
//! installs one; when it is missing this test fails under CI (`CI` set) and is skipped with a
//! message elsewhere.

use std::path::{Path, PathBuf};
use std::process::Command;

fn python() -> Option<String> {
    let py = std::env::var("WEIGHTPORT_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import numpy, safetensors"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        return Some(py);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must provide python with numpy and safetensors ({py})"
    );
    eprintln!("skipping interop test: {py} lacks numpy/safetensors (set WEIGHTPORT_PYTHON)");
    None
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn check(py: &str, out: &Path, src: &Path) {
    let o = Command::new(py)
        .arg(root().join("tests/interop_check.py"))
        .arg(out)
        .arg(src)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn safetensors_py_reads_our_output_back_equal_to_the_source() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let repo = root().join("fixtures/good/hf_repo_sharded");
    let cases: [(&str, PathBuf, &[&str]); 4] = [
        ("resharded", repo.clone(), &["--shard-size", "9000"]),
        ("merged.safetensors", repo.clone(), &[]),
        ("single", repo.clone(), &[]),
        (
            "tiny.safetensors",
            root().join("fixtures/good/safetensors/llama_tiny.safetensors"),
            &[],
        ),
    ];
    for (name, src, extra) in cases {
        let out = tmp.path().join(name);
        let status = Command::new(env!("CARGO_BIN_EXE_weightport"))
            .arg("convert")
            .arg(&src)
            .arg("-o")
            .arg(&out)
            .args(extra)
            .status()
            .unwrap();
        assert!(status.success(), "{name}");
        check(&py, &out, &src);
    }
}
