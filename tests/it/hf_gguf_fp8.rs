//! HF release → GGUF for FP8 releases and DeepSeek-V3 against the pinned reference. Each tiny
//! release of fixtures/good/arch (fixtures/gen/gen_arch_fp8.py) is converted by
//! `weightport convert DIR -o OUT.gguf --dtype T` and compared, as whole files, with the sha256 of
//! what `convert_hf_to_gguf.py --outtype T` wrote (fixtures/expected/arch/fp8.json) for f32, f16,
//! bf16 and q8_0; one-pass `--quant` (Q2_K, Q3_K_M, Q4_K_M) against the reference's f16 file
//! run through the pinned `llama-quantize`, and (with `WEIGHTPORT_LLAMA_BIN`) llama-simple's
//! continuation of our f16 file against the reference's.
//!
//! `qwen3_fp8`: a Qwen3 FP8 release: every decoder linear weight F8_E4M3 in 32×32 blocks with
//! BF16 `weight_scale_inv`, hidden 80 and intermediate 112 (ragged blocks on both axes).
//! `qwen3_fp8_ct`: the same model as an llm-compressor "FP8-Dynamic" release (compressed-tensors
//! `float-quantized`, strategy `channel`: a BF16 `weight_scale` `[rows, 1]` per weight).
//! `deepseek3`: DeepSeek-V3 (MLA with `kv_b_proj` split, a leading dense layer, routed experts
//! stacked, a shared expert, the router's `e_score_correction_bias`, sigmoid gating, expert
//! groups) with its MTP layer (`model.layers.3.*`), which the reference skips.
//! `deepseek3_fp8`: the same as DeepSeek-V3 ships it: FP8 weights with F32 block scales, experts
//! across shards; the dequantized `kv_b_proj` is split as a strided view, the experts stacked.

use crate::common;
use common::arch::{self, copy_release, edit_config, release, sha_file};

use std::path::Path;

use serde_json::Value;

const RELEASES: [&str; 4] = ["qwen3_fp8", "qwen3_fp8_ct", "deepseek3", "deepseek3_fp8"];

fn expected() -> Value {
    arch::expected("fp8.json")
}

fn against(section: &str, args: fn(&str) -> Vec<&str>, reference: &str) -> Vec<String> {
    let cases = arch::cases(&expected(), |_, _| Some("qwen2".to_owned()));
    arch::against(&cases, section, args, reference)
}

#[test]
fn fp8_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    let done = against(
        "outtypes",
        |t| vec!["--dtype", t],
        "convert_hf_to_gguf.py --outtype",
    );
    for name in RELEASES {
        for t in ["f16", "bf16", "f32", "q8_0"] {
            let want = format!("{name} {t}");
            assert!(done.contains(&want), "{want} not compared");
        }
    }
}

#[test]
fn fp8_one_pass_quant_equals_convert_then_llama_quantize() {
    let done = against(
        "quantized",
        |q| vec!["--outtype", "f16", "--quant", q],
        "convert_hf_to_gguf.py --outtype f16 + llama-quantize",
    );
    assert_eq!(done.len(), RELEASES.len() * 3, "{done:?}");
}

#[test]
#[ignore = "needs WEIGHTPORT_LLAMA_BIN: llama.cpp's tools, which CI does not build"]
fn fp8_llama_simple_continues_like_the_reference() {
    let cases = arch::cases(&expected(), |_, _| Some("qwen2".to_owned()));
    assert_eq!(arch::continuations(&cases).len(), RELEASES.len());
}

/// Small chunks under two workers: every dequantized range is computed from the weight bytes
/// and the run of scales under it, through the MLA views and the expert stacks.
#[test]
fn fp8_in_small_chunks_is_the_same_file() {
    use weightport_engine::{convert as run, ConvertOptions, DtypeChoice};
    let exp = expected();
    let tmp = tempfile::tempdir().unwrap();
    for name in ["qwen3_fp8", "qwen3_fp8_ct", "deepseek3_fp8"] {
        for (t, dtype) in [
            ("f32", weightport_core::DType::F32),
            ("bf16", weightport_core::DType::BF16),
        ] {
            let out = tmp.path().join(format!("{name}-{t}.gguf"));
            let mut o = ConvertOptions::new(vec![release(name)], out.clone());
            o.chunk = 1000;
            o.workers = weightport_engine::Workers::new(Some(2), None).unwrap();
            o.transform.dtype = DtypeChoice::To(dtype);
            o.transform.pre_tokenizer = Some("qwen2".into());
            run(&o, &weightport_engine::NoProgress).unwrap();
            assert_eq!(
                sha_file(&out),
                exp[name]["outtypes"][t]["sha256"].as_str().unwrap(),
                "{name} {t}"
            );
        }
    }
}

/// Replaces `from` by `to` (same length) in every file of release `dir`: a tensor's name or
/// shape in the safetensors headers and the index, offsets unchanged.
fn rewrite(dir: &Path, from: &str, to: &str) {
    assert_eq!(from.len(), to.len());
    let mut hits = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let bytes = std::fs::read(&p).unwrap();
        let n = bytes.len();
        let (f, t) = (from.as_bytes(), to.as_bytes());
        let mut out = bytes.clone();
        let mut i = 0;
        while i + f.len() <= n {
            if &bytes[i..i + f.len()] == f {
                out[i..i + f.len()].copy_from_slice(t);
                hits += 1;
                i += f.len();
            } else {
                i += 1;
            }
        }
        std::fs::write(&p, out).unwrap();
    }
    assert!(hits > 0, "{from} not found");
}

/// Converts release `dir`, which must be refused with exit 1 and a message holding each of
/// `words`, leaving no output.
fn refused(dir: &Path, words: &[&str]) {
    let out = dir.with_extension("gguf");
    let o = arch::convert_output(dir, &out, Some("qwen2"), &["--dtype", "f16"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}: {err}", dir.display());
    for w in words {
        assert!(err.contains(w), "{}: `{w}` not in {err}", dir.display());
    }
    assert!(!out.exists(), "output left behind");
}

#[test]
fn fp8_hostile_releases_are_refused_naming_the_tensor() {
    let tmp = tempfile::tempdir().unwrap();
    let scale = "model.layers.0.mlp.down_proj.weight_scale_inv";
    // A scale whose weight is missing (the weight renamed away).
    let d = copy_release("qwen3_fp8", tmp.path(), "orphan");
    rewrite(
        &d,
        "model.layers.0.mlp.down_proj.weight\"",
        "model.layers.0.mlp.down_proj.weighx\"",
    );
    refused(&d, &[scale, "does not hold"]);
    // An FP8 weight without its scale (the scale renamed to a name that is not a scale).
    let d = copy_release("qwen3_fp8", tmp.path(), "noscale");
    rewrite(&d, scale, "model.layers.0.mlp.down_proj.weight_scale_inx");
    refused(
        &d,
        &["model.layers.0.mlp.down_proj.weight", "without a scale"],
    );
    // A scale of the wrong block grid (down_proj [80, 112] in 32-blocks is [3, 4]).
    let d = copy_release("qwen3_fp8", tmp.path(), "shape");
    rewrite(&d, "\"shape\":[3,4]", "\"shape\":[4,3]");
    refused(&d, &["weight_scale_inv", "does not match the blocks"]);
    // Block sizes 0, absurd, or not a list.
    for (i, bs) in [
        serde_json::json!([0, 32]),
        serde_json::json!([1u64 << 40, 32]),
        serde_json::json!("128"),
    ]
    .into_iter()
    .enumerate()
    {
        let d = copy_release("qwen3_fp8", tmp.path(), &format!("block{i}"));
        edit_config(&d, |c| {
            c["quantization_config"]["weight_block_size"] = bs;
        });
        refused(&d, &["config.json", "weight_block_size"]);
    }
}

/// An FP8 tensor in a release whose config says nothing of FP8 is refused, never written as its
/// raw bytes.
#[test]
fn fp8_without_quantization_config_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = copy_release("qwen3_fp8", tmp.path(), "noconfig");
    edit_config(&d, |c| {
        c.remove("quantization_config");
    });
    let out = d.with_extension("gguf");
    let o = arch::convert_output(&d, &out, Some("qwen2"), &["--dtype", "f16"]);
    assert!(!o.status.success(), "converted");
    assert!(!out.exists());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("model.layers.") && err.contains("F8_E4M3"),
        "{err}"
    );
}
