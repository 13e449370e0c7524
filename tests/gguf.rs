//! GGUF through the pipeline against llama.cpp: every model × mix of fixtures/gguf-mix,
//! converted by `weightport convert IN.f16.gguf -o OUT.gguf --quant TYPE`, is byte-identical
//! to what the pinned `llama-quantize IN OUT TYPE` wrote (its sha256, recorded by
//! fixtures/gen/gen_mix.py). That covers the mix, the tensor order, the KV edits, the layout
//! and every quantization kernel on real data.

mod common;
use common::{fixtures, wp};

use serde_json::Value;
use sha2::{Digest, Sha256};

#[test]
fn quantized_outputs_are_byte_identical_to_llama_quantize() {
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    for e in std::fs::read_dir(fixtures().join("expected/gguf-mix")).unwrap() {
        let p = e.unwrap().path();
        let file = p.file_name().unwrap().to_str().unwrap().to_string();
        let (model, ty) = file.trim_end_matches(".json").split_once('.').unwrap();
        let want: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        let src = fixtures().join(format!("good/gguf-mix/{model}.f16.gguf"));
        let out = tmp.path().join(format!("{model}.{ty}.gguf"));
        let o = wp(&[
            "convert",
            src.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--quant",
            ty,
        ]);
        assert!(
            o.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let got = format!("{:x}", Sha256::digest(std::fs::read(&out).unwrap()));
        assert_eq!(
            got,
            want["file_sha256"].as_str().unwrap(),
            "{model} {ty}: differs from llama-quantize"
        );
        n += 1;
    }
    assert_eq!(n, 42);
}

#[test]
fn quantized_inputs_need_allow_requantize_and_dry_run_lists_types() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/gguf-mix/llama10_256.f16.gguf");
    let q = tmp.path().join("q.gguf");
    assert!(wp(&[
        "convert",
        src.to_str().unwrap(),
        "-o",
        q.to_str().unwrap(),
        "--quant",
        "Q4_K_M"
    ])
    .status
    .success());
    let again = tmp.path().join("q2.gguf");
    let o = wp(&[
        "convert",
        q.to_str().unwrap(),
        "-o",
        again.to_str().unwrap(),
        "--quant",
        "Q4_0",
    ]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("--allow-requantize"));
    assert!(!again.exists());
    let o = wp(&[
        "convert",
        q.to_str().unwrap(),
        "-o",
        again.to_str().unwrap(),
        "--quant",
        "Q4_0",
        "--allow-requantize",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // GGUF → safetensors dequantizes (to F32 by default).
    let st = tmp.path().join("deq.safetensors");
    let o = wp(&[
        "--json",
        "convert",
        q.to_str().unwrap(),
        "-o",
        st.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["transforms"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["op"] == "Q4_K→F32"),
        "{v}"
    );
}

fn gguf_fixture(name: &str) -> std::path::PathBuf {
    fixtures().join("good/gguf").join(name)
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every part of a set written by llama-gguf-split, as a shell glob gives them (and shuffled),
/// is one input: merged back it is byte for byte the file llama-gguf-split was given.
#[test]
fn every_part_of_a_split_set_given_is_one_input() {
    let tmp = tempfile::tempdir().unwrap();
    let parts: Vec<String> = [1, 2, 3]
        .map(|i| {
            let p = gguf_fixture(&format!("c_split-{i:05}-of-00003.gguf"));
            p.to_str().unwrap().to_string()
        })
        .to_vec();
    let whole = std::fs::read(gguf_fixture("c_quant_q4_k_m.gguf")).unwrap();
    for (k, order) in [[0, 1, 2], [2, 0, 1]].iter().enumerate() {
        let out = tmp.path().join(format!("merged{k}.gguf"));
        let mut args = vec!["convert"];
        args.extend(order.iter().map(|&i| parts[i].as_str()));
        args.extend(["-o", out.to_str().unwrap()]);
        let o = wp(&args);
        assert!(o.status.success(), "{order:?}: {}", stderr(&o));
        assert!(std::fs::read(&out).unwrap() == whole, "{order:?}: differs");
    }
}

/// A file given twice, by the same path or by another path to it (`dir/../`, a symlink), is one
/// usage error that names it once.
#[test]
fn an_input_given_twice_is_named_once() {
    let tmp = tempfile::tempdir().unwrap();
    let part = gguf_fixture("c_split-00002-of-00003.gguf");
    let p = part.to_str().unwrap();
    let detour = fixtures().join("good/../good/gguf/c_split-00002-of-00003.gguf");
    let link = tmp.path().join("link.gguf");
    std::os::unix::fs::symlink(&part, &link).unwrap();
    let out = tmp.path().join("o.safetensors");
    for other in [p, detour.to_str().unwrap(), link.to_str().unwrap()] {
        let o = wp(&["convert", p, other, "-o", out.to_str().unwrap()]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{other}: {e}");
        assert!(e.contains("given more than once"), "{e}");
        assert_eq!(e.matches("c_split-00002-of-00003.gguf").count(), 1, "{e}");
        assert!(!out.exists());
    }
}
