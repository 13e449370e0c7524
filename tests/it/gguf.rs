//! GGUF through the pipeline against llama.cpp: every model × mix of fixtures/gguf-mix,
//! converted by `weightport convert IN.f16.gguf -o OUT.gguf --quant TYPE`, is byte-identical
//! to what the pinned `llama-quantize IN OUT TYPE` wrote (its sha256, recorded by
//! fixtures/gen/gen_mix.py). That covers the mix, the tensor order, the KV edits, the layout
//! and every quantization kernel on real data.

use crate::common;
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

/// sha256 of each tensor's bytes in a safetensors file, by name.
fn tensor_sha256(p: &std::path::Path) -> std::collections::HashMap<String, String> {
    use weightport_core::TensorSource;
    let f = weightport_safetensors::SafetensorsFile::open(p).unwrap();
    f.tensors()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let h = format!("{:x}", Sha256::digest(f.bytes(i).unwrap()));
            (t.name.clone(), h)
        })
        .collect()
}

/// The tensors `verify --against` reported as different.
fn differences(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.ends_with("` differs")).collect()
}

fn verify_against(file: &std::path::Path, reference: &std::path::Path) -> std::process::Output {
    wp(&[
        "verify",
        file.to_str().unwrap(),
        "--against",
        reference.to_str().unwrap(),
    ])
}

/// `verify X --against q.gguf` compares a quantized tensor dequantized to the other side's
/// dtype, as `convert` writes it: the conversions of llama-quantize's Q4_K_M file (whose values
/// equal gguf-py's dequantization, fixtures/expected/gguf-dequant) verify equal, both ways round
/// and from the llama-gguf-split parts; a changed byte is still found and named.
#[test]
fn verify_against_a_quantized_gguf_compares_dequantized_values() {
    let tmp = tempfile::tempdir().unwrap();
    let q = gguf_fixture("c_quant_q4_k_m.gguf");
    let want: Value = serde_json::from_slice(
        &std::fs::read(fixtures().join("expected/gguf-dequant/c_quant_q4_k_m.json")).unwrap(),
    )
    .unwrap();
    for (dtype, key) in [("keep", "f32_sha256"), ("f16", "f16_sha256")] {
        let out = tmp.path().join(format!("{dtype}.safetensors"));
        let o = wp(&[
            "convert",
            q.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--dtype",
            dtype,
        ]);
        assert!(o.status.success(), "{dtype}: {}", stderr(&o));
        let got = tensor_sha256(&out);
        for t in want["tensors"].as_array().unwrap() {
            let name = t["name"].as_str().unwrap();
            if t["type"] != "F32" || dtype == "keep" {
                assert_eq!(
                    got[name],
                    t[key].as_str().unwrap(),
                    "{dtype} {name}: not gguf-py's values"
                );
            }
        }
        // With --dtype f16 the F32 norm was narrowed: that one differs, as any lossy cast does.
        let lossy: &[&str] = if dtype == "f16" {
            &["  tensor `blk.0.attn_norm.weight` differs"]
        } else {
            &[]
        };
        for (a, b) in [(&out, &q), (&q, &out)] {
            let v = verify_against(a, b);
            let text = String::from_utf8_lossy(&v.stdout);
            assert_eq!(differences(&text), lossy, "{dtype}: {text}{}", stderr(&v));
        }
    }
    let parts = tmp.path().join("parts.safetensors");
    let mut args = vec!["convert".to_string()];
    args.extend((1..=3).map(|i| {
        let p = gguf_fixture(&format!("c_split-{i:05}-of-00003.gguf"));
        p.to_str().unwrap().to_string()
    }));
    args.extend(["-o".into(), parts.to_str().unwrap().into()]);
    assert!(wp(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .status
        .success());
    assert_eq!(verify_against(&parts, &q).status.code(), Some(0));
    // One changed byte in the data of a dequantized tensor (the last in the file) is a
    // difference, named.
    let mut bytes = std::fs::read(tmp.path().join("keep.safetensors")).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 0x40;
    let bad = tmp.path().join("bad.safetensors");
    std::fs::write(&bad, bytes).unwrap();
    let v = verify_against(&bad, &q);
    let text = String::from_utf8_lossy(&v.stdout);
    assert_eq!(v.status.code(), Some(1), "{text}");
    let diffs = differences(&text);
    assert_eq!(diffs, ["  tensor `token_embd.weight` differs"], "{text}");
}

/// The first file of the GGUF output `out` (`out.gguf`, or `out-00001-of-N.gguf` when split).
fn first_part(dir: &std::path::Path) -> std::path::PathBuf {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .collect();
    names.sort();
    names.remove(0)
}

/// GGUF → GGUF of gguf-py's file with tensors whose trailing `ne` is 1 (Qwen2-MoE's
/// `ffn_gate_inp_shexp` [2048, 1]): a copy, `--quant Q8_0` and a split set verify, hold what
/// gguf-py reads (Q8_0: gguf-py's quantize, which is ggml's), with `ne` as llama.cpp's writer
/// stores it (trailing 1s dropped).
#[test]
fn gguf_rewrites_of_a_trailing_ne_of_1_verify_and_equal_gguf_py() {
    use weightport_core::{ReadOptions, TensorSource};
    let src = fixtures().join("good/gguf-ne1/py_trailing_ne1.gguf");
    let want: Value = serde_json::from_slice(
        &std::fs::read(fixtures().join("expected/gguf-ne1/py_trailing_ne1.json")).unwrap(),
    )
    .unwrap();
    let runs: [(&str, &[&str]); 3] = [
        ("copy", &[]),
        ("q8_0", &["--quant", "Q8_0"]),
        ("split", &["--split-max-size", "3000"]),
    ];
    for (label, extra) in runs {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out.gguf");
        let mut args = vec![
            "convert",
            src.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend(extra);
        let o = wp(&args);
        assert!(o.status.success(), "{label}: {}", stderr(&o));
        let set =
            weightport_gguf::open_split(&first_part(tmp.path()), &ReadOptions::default()).unwrap();
        assert_eq!(set.splits().len() > 1, label == "split", "{label}");
        let mut seen = 0;
        for t in want["tensors"].as_array().unwrap() {
            let name = t["name"].as_str().unwrap();
            let w = if label == "q8_0" { &t["q8_0"] } else { t };
            let i = set.tensors().iter().position(|x| x.name == name).unwrap();
            let (g, bytes) = (set.gguf_tensor(i), set.bytes(i).unwrap());
            let ne: Vec<u64> = serde_json::from_value(t["ne_c"].clone()).unwrap();
            assert_eq!(g.ne, ne, "{label} {name}");
            assert_eq!(g.dtype.name(), w["type"], "{label} {name}");
            let sha = format!("{:x}", Sha256::digest(bytes));
            assert_eq!(sha, w["sha256"].as_str().unwrap(), "{label} {name}");
            seen += 1;
        }
        assert_eq!((seen, set.tensors().len()), (5, 5), "{label}");
    }
}
