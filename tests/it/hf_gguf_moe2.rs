//! HF release → GGUF for DeepSeek-V2 and GPT-OSS against llama.cpp's own tools. Each tiny release
//! of fixtures/good/arch (fixtures/gen/gen_arch_moe2.py) is converted by
//! `weightport convert DIR -o OUT.gguf` and compared, as whole files, with the sha256 of what the
//! pinned reference wrote (fixtures/expected/arch/moe2.json):
//! * `--dtype T` against `convert_hf_to_gguf.py --outtype T` for f32, f16, bf16 and q8_0;
//! * `--dtype f16 --quant Q` (one pass) against `convert_hf_to_gguf.py --outtype f16` followed by
//!   `llama-quantize … Q` for Q4_K_M, Q2_K and Q3_K_M (llama-quantize's MoE rules);
//! * with `WEIGHTPORT_LLAMA_BIN` naming a directory holding `llama-simple`, its greedy
//!   continuation of our file equals the one recorded for the reference's file.
//!
//! `deepseek2`: multi-head latent attention (`kv_b_proj` split into `attn_k_b`, each head's key
//! rows transposed, and `attn_v_b`), a leading dense block, routed experts stacked, shared
//! experts, expert groups, YaRN with `mscale_all_dim`.
//! `deepseek2_lite`: V2-Lite's shape (direct `q_proj`, `q_lora_rank` null) with the real
//! release's legacy config.json (`rope_scaling`, integer `rope_theta`, `scoring_func`); converter
//! outputs only (llama.cpp recognises V2-Lite by its layer count, so it cannot load a tiny one).
//! `gptoss`: GPT-OSS as transformers saves it unquantized (fused `gate_up_proj` transposed and
//! split by alternating rows, `down_proj` transposed, biases split, attention sinks).
//! `gptoss_mxfp4`: GPT-OSS as released, MXFP4 experts (`*_blocks` + `*_scales`) repacked into GGUF
//! MXFP4 blocks, not re-quantized; llama-quantize refuses to requantize them, and so does
//! `--quant` (the refusal llama-quantize printed is recorded).

use crate::common;
use common::arch::{self, copy_release, release, sha_file};
use common::wp;

use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

fn expected() -> Value {
    arch::expected("moe2.json")
}

/// The pre-tokenizer name gen_arch_moe2.py gave the reference for the made-up BPE vocabulary.
fn pre(name: &str) -> Option<&'static str> {
    match name {
        "deepseek2" | "deepseek2_lite" | "gptoss" | "gptoss_mxfp4" => Some("qwen2"),
        _ => None,
    }
}

/// `weightport convert` of release `name`, which must succeed.
fn convert(name: &str, out: &Path, extra: &[&str]) {
    arch::convert(&release(name), out, pre(name), extra);
}

/// Converts every release once per entry of its `section` and compares the whole file with the
/// reference's sha256; returns the names compared.
fn against(section: &str, args: fn(&str) -> Vec<&str>, reference: &str) -> Vec<String> {
    let cases = arch::cases(&expected(), |name, _| pre(name).map(str::to_owned));
    arch::against(&cases, section, args, reference)
}

#[test]
fn moe2_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    let done = against(
        "outtypes",
        |t| vec!["--dtype", t],
        "convert_hf_to_gguf.py --outtype",
    );
    for name in ["deepseek2", "deepseek2_lite", "gptoss", "gptoss_mxfp4"] {
        for t in ["f16", "bf16", "f32", "q8_0"] {
            let want = format!("{name} {t}");
            assert!(done.contains(&want), "{want} not compared");
        }
    }
}

#[test]
fn moe2_one_pass_quant_equals_convert_then_llama_quantize() {
    let done = against(
        "quantized",
        |q| vec!["--outtype", "f16", "--quant", q],
        "convert_hf_to_gguf.py --outtype f16 + llama-quantize",
    );
    for name in ["deepseek2", "gptoss"] {
        for q in ["Q4_K_M", "Q2_K", "Q3_K_M"] {
            let want = format!("{name} {q}");
            assert!(done.contains(&want), "{want} not compared");
        }
    }
}

/// llama-quantize refuses the reference's f16 file of an MXFP4 release ("requantizing from type
/// mxfp4 is disabled"); `--quant` refuses the release the same way, naming a repacked tensor,
/// and writes nothing.
#[test]
fn moe2_quant_refuses_what_llama_quantize_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    for (name, e) in expected().as_object().unwrap() {
        for (q, why) in e["quantize_refused"].as_object().into_iter().flatten() {
            assert!(why.as_str().unwrap().contains("requantizing"), "{why}");
            let out = tmp.path().join(format!("{name}-{q}.gguf"));
            let src = release(name);
            let mut args = vec![
                "convert",
                src.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
            ];
            args.extend(["--pre-tokenizer", pre(name).unwrap(), "--quant", q]);
            let o = wp(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success(), "{name} {q}: converted");
            assert!(
                err.contains("requantize") && err.contains("_exps.weight"),
                "{name} {q}: {err}"
            );
            assert!(!out.exists(), "{name} {q}: output left behind");
            n += 1;
        }
    }
    assert_eq!(n, 3, "gptoss_mxfp4 × Q4_K_M, Q2_K, Q3_K_M");
}

/// Small chunks: every strided view (transposed `attn_k_b`, per-head `attn_v_b`) and every stack
/// is computed from many ranges, each from the pieces of the source under it.
#[test]
fn moe2_views_in_small_chunks_are_the_same_file() {
    use weightport_engine::DtypeChoice;
    use weightport_engine::{convert as run, ConvertOptions};
    let exp = expected();
    let tmp = tempfile::tempdir().unwrap();
    for (name, e) in exp.as_object().unwrap() {
        for (t, dtype) in [
            ("f16", weightport_core::DType::F16),
            ("bf16", weightport_core::DType::BF16),
        ] {
            let out = tmp.path().join(format!("{name}-{t}.gguf"));
            let mut o = ConvertOptions::new(vec![release(name)], out.clone());
            o.chunk = 1000;
            o.workers = weightport_engine::Workers::new(Some(2), None).unwrap();
            o.transform.dtype = DtypeChoice::To(dtype);
            o.transform.pre_tokenizer = pre(name).map(str::to_owned);
            run(&o, &weightport_engine::NoProgress).unwrap();
            assert_eq!(
                sha_file(&out),
                e["outtypes"][t]["sha256"].as_str().unwrap(),
                "{name} {t}"
            );
        }
    }
}

/// llama-simple's greedy continuation of our file equals the reference file's (recorded by
/// gen_arch_moe2.py on the outtype it names). Needs `WEIGHTPORT_LLAMA_BIN`, so ignored unless asked.
#[test]
#[ignore = "needs WEIGHTPORT_LLAMA_BIN: llama.cpp's tools, which CI does not build"]
fn moe2_llama_simple_continues_like_the_reference() {
    let Some(bin) = std::env::var_os("WEIGHTPORT_LLAMA_BIN").map(PathBuf::from) else {
        panic!(
            "WEIGHTPORT_LLAMA_BIN is not set: the directory of the pinned llama.cpp build's tools"
        );
    };
    let tmp = tempfile::tempdir().unwrap();
    for (name, e) in expected().as_object().unwrap() {
        let Some(want) = e["continuation"].as_str() else {
            continue;
        };
        let on = e["continuation_outtype"].as_str().unwrap_or("f16");
        let out = tmp.path().join(format!("{name}-{on}.gguf"));
        convert(name, &out, &["--dtype", on]);
        let o = std::process::Command::new(bin.join("llama-simple"))
            .args([
                "-m",
                out.to_str().unwrap(),
                "-n",
                "8",
                "The quick brown fox",
            ])
            .env("LD_LIBRARY_PATH", &bin)
            .output()
            .unwrap();
        assert!(o.status.success(), "{name}: llama-simple failed");
        let got = format!("{:x}", Sha256::digest(&o.stdout));
        assert_eq!(want.split(' ').next().unwrap(), got, "{name}: continuation");
    }
}

/// A copy of release `name` with config.json's `key` set to `value`.
fn edited(name: &str, tmp: &Path, key: &str, value: Value) -> PathBuf {
    let dir = copy_release(name, tmp, &format!("{name}-{key}"));
    arch::edit_config(&dir, |c| {
        c.insert(key.to_owned(), value);
    });
    dir
}

#[test]
fn configs_the_weights_contradict_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, key, value, says) in [
        // kv_b_proj holds 4 × (32 + 32) rows: not 4 × (48 + 32).
        ("deepseek2", "v_head_dim", Value::from(48), "kv_b_proj"),
        (
            "deepseek2",
            "scoring_func",
            Value::from("relu"),
            "gating function",
        ),
        // MXFP4 blocks in a release that does not say it is MXFP4-quantized.
        (
            "gptoss_mxfp4",
            "quantization_config",
            Value::Null,
            "_blocks",
        ),
    ] {
        let dir = edited(name, tmp.path(), key, value);
        let out = tmp.path().join(format!("{key}.gguf"));
        let o = wp(&[
            "convert",
            dir.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--pre-tokenizer",
            "qwen2",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{key}: converted");
        assert!(err.contains(says), "{key}: {err}");
        assert!(!err.contains("panicked"), "{key}: {err}");
        assert!(!out.exists(), "{key}: output left behind");
    }
}
