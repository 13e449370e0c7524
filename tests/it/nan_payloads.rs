//! NaN payloads, NaN signs and infinities against the tools each output reproduces
//! (fixtures/gen/gen_nan_payloads.py → fixtures/expected/nan/llama_nan.json). The release is
//! fixtures/good/arch/llama with its last shard (and index) replaced by an F32 `lm_head.weight` holding
//! quiet and signalling NaNs of both signs, payloads that F16 or BF16 drop, ±inf and values past
//! F16's range.
//! * HF → GGUF `--dtype f32|f16|bf16`: the whole file equals `convert_hf_to_gguf.py --outtype`
//!   (numpy's F16 NaN rule, gguf-py's BF16 rule);
//! * `--quant F16` (one pass, and of the f32 GGUF): llama-quantize refuses the NaN tensor
//!   (`ggml_validate_row_data`), so weightport refuses it too, naming it;
//! * the shard → safetensors `--dtype f16|bf16`: the tensor's bytes equal torch's `.to()`.

use crate::common;
use common::{fixtures, wp};

use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};
use weightport_core::TensorSource;
use weightport_safetensors::SafetensorsFile;

const SHARD: &str = "model-00003-of-00003.safetensors";

fn expected() -> Value {
    let p = fixtures().join("expected/nan/llama_nan.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// fixtures/good/arch/llama with the NaN shard, in a directory named as the reference's was.
fn release(tmp: &Path) -> PathBuf {
    let dir = tmp.join("llama_nan");
    std::fs::create_dir(&dir).unwrap();
    for e in std::fs::read_dir(fixtures().join("good/arch/llama")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    for f in [SHARD, "model.safetensors.index.json"] {
        std::fs::copy(fixtures().join("good/nan/llama_nan").join(f), dir.join(f)).unwrap();
    }
    dir
}

fn sha(b: &[u8]) -> String {
    format!("{:x}", Sha256::digest(b))
}

fn run(args: &[&Path], extra: &[&str]) -> std::process::Output {
    let mut a = vec![
        "convert",
        args[0].to_str().unwrap(),
        "-o",
        args[1].to_str().unwrap(),
    ];
    a.extend(extra);
    wp(&a)
}

#[test]
fn hf_to_gguf_nan_bits_equal_convert_hf_to_gguf() {
    let tmp = tempfile::tempdir().unwrap();
    let src = release(tmp.path());
    let want = expected();
    for t in ["f32", "f16", "bf16"] {
        let out = tmp.path().join(format!("{t}.gguf"));
        let o = run(&[&src, &out], &["--dtype", t]);
        assert!(
            o.status.success(),
            "{t}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            sha(&std::fs::read(&out).unwrap()),
            want["outtypes"][t]["sha256"].as_str().unwrap(),
            "{t}: differs from convert_hf_to_gguf.py --outtype {t}"
        );
    }
}

#[test]
fn quant_f16_refuses_nan_as_llama_quantize_does() {
    let want = expected();
    let refused = &want["quantized"]["F16"];
    assert_eq!(refused["exit"], 1, "the reference refused: {refused}");
    assert!(refused["stderr"]
        .to_string()
        .contains("'output.weight' has invalid data"));
    let tmp = tempfile::tempdir().unwrap();
    let src = release(tmp.path());
    let f32 = tmp.path().join("f32.gguf");
    assert!(run(&[&src, &f32], &["--dtype", "f32"]).status.success());
    let q = tmp.path().join("q.gguf");
    let one_pass = run(&[&src, &q], &["--dtype", "f32", "--quant", "F16"]);
    let of_gguf = run(&[&f32, &q], &["--quant", "F16"]);
    for o in [one_pass, of_gguf] {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "refused: {err}");
        assert!(
            err.contains("output.weight") && err.contains("NaN or infinite"),
            "{err}"
        );
        assert!(!q.exists(), "nothing is written");
    }
}

#[test]
fn safetensors_nan_bits_equal_torch_to() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/nan/llama_nan").join(SHARD);
    let want = expected();
    for t in ["f16", "bf16"] {
        let out = tmp.path().join(format!("{t}.safetensors"));
        let o = run(&[&src, &out], &["--dtype", t]);
        assert!(
            o.status.success(),
            "{t}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let f = SafetensorsFile::open(&out).unwrap();
        assert_eq!(
            sha(f.bytes(0).unwrap()),
            want["torch"][t].as_str().unwrap(),
            "{t}: differs from torch's .to()"
        );
    }
}
