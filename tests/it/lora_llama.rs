//! llama.cpp loads the GGUF adapters weightport writes (issue 31 item 1): the pinned build's
//! `llama-embedding` (its `llama-simple` takes no `--lora`) on the tiny Llama with the `llama_qv`
//! adapter. Needs `WEIGHTPORT_LLAMA_BIN`, the directory of the pinned llama.cpp build's tools.

use crate::common;
use common::arch::release;
use common::{fixtures, wp};

use std::path::{Path, PathBuf};

use serde_json::Value;

/// `llama-embedding`'s vector for `prompt` on `model` with `extra` arguments (retried while its
/// stdout is not a complete JSON array: this build sometimes loses the end of it at exit).
fn embedding(bin: &Path, model: &Path, extra: &[&str]) -> Vec<f64> {
    for _ in 0..40 {
        let o = std::process::Command::new(bin.join("llama-embedding"))
            .env("LD_LIBRARY_PATH", bin)
            .args([
                "-m",
                model.to_str().unwrap(),
                "-p",
                "hello world",
                "-t",
                "1",
            ])
            .args(["--embd-output-format", "array", "--no-warmup"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "llama-embedding {extra:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        if let Ok(v) = serde_json::from_slice::<Value>(&o.stdout) {
            return v[0]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
        }
    }
    panic!("llama-embedding never printed a complete array");
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// Our adapter loads (a file llama.cpp cannot load fails the run: checked with a truncated copy),
/// changes the model's output, and at scale 0 changes nothing.
#[test]
#[ignore = "needs WEIGHTPORT_LLAMA_BIN: llama.cpp's tools, which CI does not build"]
fn llama_cpp_loads_our_lora_adapter() {
    let bin: PathBuf = std::env::var_os("WEIGHTPORT_LLAMA_BIN")
        .expect("WEIGHTPORT_LLAMA_BIN: the directory of the pinned llama.cpp build's tools")
        .into();
    let tmp = tempfile::tempdir().unwrap();
    let (base, adapter) = (tmp.path().join("base.gguf"), tmp.path().join("a.gguf"));
    let base_dir = release("llama");
    for args in [
        vec![
            "convert",
            base_dir.to_str().unwrap(),
            "-o",
            base.to_str().unwrap(),
        ],
        vec![
            "convert",
            fixtures().join("good/lora/llama_qv").to_str().unwrap(),
            "-o",
            adapter.to_str().unwrap(),
            "--base",
            base_dir.to_str().unwrap(),
            "--dtype",
            "f16",
        ],
    ] {
        let o = wp(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let a = adapter.to_str().unwrap();
    let plain = embedding(&bin, &base, &[]);
    let with = embedding(&bin, &base, &["--lora", a]);
    let zero = embedding(&bin, &base, &["--lora-scaled", &format!("{a}:0")]);
    assert!(
        max_diff(&plain, &with) > 1e-3,
        "the adapter changes the output"
    );
    assert!(
        max_diff(&plain, &zero) < 1e-5,
        "at scale 0 it changes nothing"
    );
    // A file llama.cpp cannot load as an adapter fails the run (so the runs above loaded ours).
    let bytes = std::fs::read(&adapter).unwrap();
    let cut = tmp.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let o = std::process::Command::new(bin.join("llama-embedding"))
        .env("LD_LIBRARY_PATH", &bin)
        .args(["-m", base.to_str().unwrap(), "-p", "hello", "--no-warmup"])
        .args(["--lora", cut.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!o.status.success(), "a truncated adapter loads");
}
