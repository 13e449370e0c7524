//! What `convert` says about inputs it cannot take (issue 14, items 14 and 15): the format a
//! file really is (lookalike model formats by their signatures), never a parser error of a
//! format it is not; short, exit-1 messages for names GGUF cannot hold; outputs into a missing
//! directory; the `__main__` hint. Inputs from `fixtures/bad/misc` (numpy, torch.save,
//! safetensors, via `gen_scan.py`) and signature headers as the tools write them.

use crate::common;

use std::path::Path;

use common::{fixtures, wp};

fn convert(input: &Path, out: &Path) -> (i32, String) {
    let o = wp(&[
        "convert",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    (
        o.status.code().unwrap(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn lookalike_formats_are_named() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("o.safetensors");
    let mut ct2 = vec![6, 0, 0, 0, 16, 0];
    ct2.extend_from_slice(b"TransformerSpec\0");
    ct2.extend_from_slice(&[0; 64]);
    let cases: [(&str, Vec<u8>, &str); 5] = [
        ("model.bin", ct2, "CTranslate2"),
        (
            "model.h5",
            b"\x89HDF\r\n\x1a\n\0\0\0\0\0\0\0\0".to_vec(),
            "HDF5",
        ),
        (
            "model.onnx",
            b"\x08\x07\x12\x07pytorch\x1a\x032.1\0\0\0\0".to_vec(),
            "ONNX",
        ),
        (
            "ggml-model-q4_0.bin",
            b"tjgg\x03\0\0\0\0\0\0\0\0\0\0\0".to_vec(),
            "pre-GGUF GGML",
        ),
        (
            "model.tflite",
            b"\x1c\0\0\0TFL3\0\0\0\0\0\0\0\0".to_vec(),
            "TensorFlow Lite",
        ),
    ];
    for (name, bytes, want) in cases {
        let p = t.path().join(name);
        std::fs::write(&p, &bytes).unwrap();
        let (code, err) = convert(&p, &out);
        assert_eq!(code, 1, "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
        assert!(!err.contains("malformed safetensors"), "{name}: {err}");
    }
}

#[test]
fn text_pickles_are_told_from_safetensors() {
    // A protocol-0 pickle is refused by the pickle reader (exit 3), not called a broken
    // safetensors header.
    let p = fixtures().join("hostile/scan/protocol0_pickle_named_pth_tar.pth.tar");
    let t = tempfile::tempdir().unwrap();
    let (code, err) = convert(&p, &t.path().join("o.safetensors"));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("os.system"), "{err}");
}

#[test]
fn an_empty_npz_says_so() {
    let t = tempfile::tempdir().unwrap();
    let (code, err) = convert(
        &fixtures().join("bad/misc/empty.npz"),
        &t.path().join("o.safetensors"),
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("empty ZIP archive") && !err.contains("pytorch"),
        "{err}"
    );
}

#[test]
fn an_overlong_gguf_name_is_a_short_exit_1_error() {
    let t = tempfile::tempdir().unwrap();
    let (code, err) = convert(
        &fixtures().join("bad/misc/long_name.safetensors"),
        &t.path().join("o.gguf"),
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("133 bytes") && err.contains("--rename"),
        "{err}"
    );
    assert!(err.len() < 400, "{err}");
}

#[test]
fn a_main_module_class_gets_its_own_hint() {
    let t = tempfile::tempdir().unwrap();
    let (code, err) = convert(
        &fixtures().join("bad/misc/main_subclass.pt"),
        &t.path().join("o.safetensors"),
    );
    assert_eq!(code, 3);
    assert!(
        err.contains("__main__.MyTensor") && err.contains("tensor subclass"),
        "{err}"
    );
    assert!(!err.contains("whole nn.Module"), "{err}");
}

#[test]
fn a_file_output_in_a_missing_directory_is_created() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("a/b/o.safetensors");
    let (code, err) = convert(&fixtures().join("good/scan/numeric.npz"), &out);
    assert_eq!(code, 0, "{err}");
    assert!(out.exists());
}

#[test]
fn a_raw_pickle_is_called_one_and_its_globals_named() {
    let t = tempfile::tempdir().unwrap();
    let (code, err) = convert(
        &fixtures().join("bad/misc/raw_numpy.pkl"),
        &t.path().join("o.safetensors"),
    );
    assert_eq!(code, 3);
    assert!(
        err.contains("a raw pickle, not a PyTorch checkpoint"),
        "{err}"
    );
    assert!(
        err.contains("numpy.core.multiarray._reconstruct")
            || err.contains("numpy._core.multiarray._reconstruct"),
        "{err}"
    );
    assert!(!err.contains("magic-number pickle"), "{err}");
}

/// A pickle whose 9th byte is `{` looks like a safetensors header start to a naive sniff; it is
/// still told to be a pickle (refused as one), never "not available in this build".
#[test]
fn a_pickle_with_a_brace_at_byte_8_is_still_a_pickle() {
    let t = tempfile::tempdir().unwrap();
    let (code, err) = convert(
        &fixtures().join("bad/misc/brace_at_8.pkl"),
        &t.path().join("o.safetensors"),
    );
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("raw pickle") && !err.contains("not available"),
        "{err}"
    );
}

/// Errors about a release's side files name the release, not the GGUF being written.
#[test]
fn a_broken_config_json_is_not_called_a_malformed_gguf() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("rel");
    std::fs::create_dir(&dir).unwrap();
    for e in std::fs::read_dir(fixtures().join("good/arch/llama")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        dir.join("config.json"),
        b"{\"architectures\": [\"LlamaForCausalLM\"], ",
    )
    .unwrap();
    let (code, err) = convert(&dir, &t.path().join("o.gguf"));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("config.json") && err.contains("hf-release"),
        "{err}"
    );
    assert!(!err.contains("malformed gguf"), "{err}");
}

/// A tensor the output format cannot store is not an "unsupported safetensors" input: the
/// message names no format (the input is fine; the GGUF output has no BOOL type).
#[test]
fn a_dtype_the_output_cannot_store_names_no_input_format() {
    let t = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/safetensors/all_dtypes.safetensors");
    let (code, err) = convert(&src, &t.path().join("o.gguf"));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("unsupported: tensor") && err.contains("which the output format cannot store"),
        "{err}"
    );
    assert!(!err.contains("unsupported safetensors"), "{err}");
}
