//! Interop: output read back by safetensors-py (numpy only) equals the source.
//!
//! Needs a Python with the packages of `.ci/requirements.txt` (numpy, safetensors, gguf):
//! `WEIGHTPORT_PYTHON` if set, else `python3` if it has them, else a venv this test makes under
//! the target directory (from PyPI, once). When none can be had the test fails saying why; it
//! is skipped only when asked explicitly with `WEIGHTPORT_SKIP_INTEROP=1`, never silently.

use std::path::{Path, PathBuf};
use std::process::Command;

fn has_packages(py: &str) -> bool {
    Command::new(py)
        .args(["-c", "import numpy, safetensors, gguf"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A venv with `.ci/requirements.txt`, made once under the target directory.
fn make_venv() -> Result<String, String> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("interop-venv");
    let py = venv.join("bin/python").to_string_lossy().into_owned();
    if has_packages(&py) {
        return Ok(py);
    }
    let staging = venv.with_extension(format!("{}", std::process::id()));
    let run = |c: &mut Command| match c.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr).into_owned()),
        Err(e) => Err(e.to_string()),
    };
    run(Command::new("python3").args(["-m", "venv"]).arg(&staging))?;
    run(Command::new(staging.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(root().join(".ci/requirements.txt")))?;
    // An older venv without every package is replaced; another test binary may have won the
    // race meanwhile: either complete venv will do.
    if !has_packages(&py) {
        let _ = std::fs::remove_dir_all(&venv);
    }
    if std::fs::rename(&staging, &venv).is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    // The venv's scripts name their own path: use the python of whichever venv is in place.
    has_packages(&py)
        .then_some(py)
        .ok_or_else(|| "the venv has no numpy/safetensors".into())
}

fn python() -> Option<String> {
    if let Ok(py) = std::env::var("WEIGHTPORT_PYTHON") {
        assert!(
            has_packages(&py),
            "WEIGHTPORT_PYTHON={py} lacks numpy/safetensors"
        );
        return Some(py);
    }
    if has_packages("python3") {
        return Some("python3".into());
    }
    if std::env::var_os("WEIGHTPORT_SKIP_INTEROP").is_some() {
        eprintln!("SKIPPED interop test (WEIGHTPORT_SKIP_INTEROP is set)");
        return None;
    }
    match make_venv() {
        Ok(py) => Some(py),
        Err(e) => panic!(
            "no python with numpy/safetensors and none could be installed ({e}); set \
             WEIGHTPORT_PYTHON, or WEIGHTPORT_SKIP_INTEROP=1 to skip this test"
        ),
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn check(py: &str, out: &Path, src: &Path) {
    check_with(py, &[], out, src)
}

fn check_with(py: &str, flags: &[&str], out: &Path, src: &Path) {
    let o = Command::new(py)
        .arg(root().join("tests/interop_check.py"))
        .args(flags)
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

/// `--dtype f16/f32` output read back by safetensors-py equals torch's `.to()` of the source
/// (fixtures/expected/casts, written by torch; BF16 is not readable by numpy, so the bf16 case
/// is checked by tests/it/casts.rs only).
#[test]
fn safetensors_py_reads_casts_equal_to_torch() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let src = root().join("fixtures/good/casts/source.safetensors");
    for d in ["f32", "f16"] {
        let out = tmp.path().join(format!("{d}.safetensors"));
        let status = Command::new(env!("CARGO_BIN_EXE_weightport"))
            .args([
                "convert",
                src.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
                "--dtype",
                d,
                "--allow-lossy",
            ])
            .status()
            .unwrap();
        assert!(status.success());
        let want = root().join(format!("fixtures/expected/casts/to_{d}.safetensors"));
        check_with(&py, &["--nan-equal"], &out, &want);
    }
}

/// Every NumPy fixture (written by numpy 2.4.6: stored and deflated members, Fortran order,
/// big-endian, scalars, empty, ZIP64, npy versions 1-3, a directory of .npy files) converted to
/// safetensors and read back by safetensors-py equals what `np.load` returns.
#[test]
fn numpy_files_convert_to_what_np_load_returns() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = root().join("fixtures/good/npz");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let src = e.unwrap().path();
        let name = src.file_name().unwrap().to_str().unwrap().to_string();
        if name.ends_with(".md") {
            continue;
        }
        let out = tmp.path().join(format!("{name}.safetensors"));
        let mut args = vec![
            "convert",
            src.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        if name.starts_with("bf16") {
            args.extend(["--void2-as", "bf16"]);
        }
        let o = Command::new(env!("CARGO_BIN_EXE_weightport"))
            .args(&args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let c = Command::new(&py)
            .arg(root().join("tests/interop_npz.py"))
            .arg(&out)
            .arg(&src)
            .output()
            .unwrap();
        assert!(
            c.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&c.stderr)
        );
        n += 1;
    }
    assert!(n >= 20, "{n} files");
}

/// A safetensors checkpoint converted to GGUF (no architecture knowledge: names kept) is read
/// back by gguf-py with the same tensors.
#[test]
fn gguf_py_reads_our_gguf_back() {
    let Some(py) = python() else { return };
    if !Command::new(&py)
        .args(["-c", "import gguf"])
        .status()
        .unwrap()
        .success()
    {
        panic!("{py} lacks gguf (pip install -r .ci/requirements.txt)");
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = root().join("fixtures/good/safetensors/llama_tiny.safetensors");
    let out = tmp.path().join("tiny.gguf");
    let o = Command::new(env!("CARGO_BIN_EXE_weightport"))
        .args([
            "convert",
            src.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--arch",
            "llama",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c = Command::new(&py)
        .arg(root().join("tests/interop_gguf.py"))
        .arg(&out)
        .arg(&src)
        .output()
        .unwrap();
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
}
