//! HF release → GGUF for Phi-3.5-MoE in the original release's layout (issue 30 item 4:
//! `PhiMoEForCausalLM` → `phimoe`), against the pinned `convert_hf_to_gguf.py`. The tiny release
//! (fixtures/gen/gen_arch_phimoe.py: transformers 5.24's `PhimoeForCausalLM` weights, random,
//! written under microsoft/Phi-3.5-MoE-instruct's names: `block_sparse_moe.gate`, one
//! `block_sparse_moe.experts.N.w1/w2/w3` per expert; q/k/v/o biases, LayerNorms with biases, a
//! biased head, longrope; `phi3/`'s SentencePiece tokenizer) is converted by `weightport convert
//! DIR -o OUT.gguf --dtype T` and compared, as a whole file, with the sha256 of what the reference
//! wrote (fixtures/expected/arch/phi.json) for f32, f16, bf16 and q8_0, and with config.json as
//! the real release writes it (legacy `rope_scaling`).

use std::path::Path;

use crate::common;
use common::arch::{self, copy_release, edit_config, edit_json, edit_tensor, expected, sha_file};

fn pre(name: &str) -> Option<&'static str> {
    match name {
        "phimoe" => None,
        other => panic!("no release {other}"),
    }
}

const TABLE: arch::Table = arch::Table {
    file: "phi.json",
    releases: &["phimoe"],
    pre,
};

#[test]
fn phimoe_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    TABLE.outtypes_match_the_reference();
}

/// One-pass `--quant Q4_K_M` equals the reference's f16 file run through the pinned
/// `llama-quantize` (recorded by the generator; no llama.cpp needed here).
#[test]
fn phimoe_one_pass_quant_equals_convert_then_llama_quantize() {
    TABLE.one_pass_quant_matches_llama_quantize();
}

/// llama.cpp runs our f16 file and continues the prompt as it continues the reference's.
#[test]
#[ignore = "needs WEIGHTPORT_LLAMA_BIN: llama.cpp's tools, which CI does not build"]
fn phimoe_llama_simple_continues_like_the_reference() {
    TABLE.llama_simple_continues_like_the_reference();
}

/// config.json as microsoft's release writes it (transformers 4.43: `rope_scaling` with `type:
/// longrope` and the mscales, `rope_theta` at the top level) gives the reference's file too.
#[test]
fn phimoe_with_the_release_s_legacy_config_equals_the_reference() {
    let legacy = &expected("phi.json")["phimoe"]["legacy_config"]["outtypes"];
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("phimoe", tmp.path(), "phimoe_legacy");
    edit_config(&dir, |m| {
        let mut rope = m.remove("rope_parameters").unwrap();
        let rope = rope.as_object_mut().unwrap();
        m.insert("rope_theta".into(), rope.remove("rope_theta").unwrap());
        let kind = rope.remove("rope_type").unwrap();
        rope.insert("type".into(), kind);
        m.insert("rope_scaling".into(), rope.clone().into());
        let dtype = m.remove("dtype").unwrap();
        m.insert("torch_dtype".into(), dtype);
        m.insert("transformers_version".into(), "4.43.3".into());
    });
    for t in ["f16", "q8_0"] {
        let out = tmp.path().join(format!("legacy-{t}.gguf"));
        arch::convert(&dir, &out, None, &["--dtype", t]);
        assert_eq!(sha_file(&out), legacy[t]["sha256"].as_str().unwrap(), "{t}");
    }
}

/// [`arch::refused`] with this release's pre-tokenizer.
fn refused(dir: &Path, out: &Path, words: &[&str]) -> String {
    arch::refused(dir, out, None, words)
}

/// A missing expert weight is refused naming it (the reference's "Unprocessed experts"); an
/// expert of the wrong shape naming it and both shapes; more experts used per token than there
/// are, or none, naming config.json (llama.cpp cannot load such a file).
#[test]
fn phimoe_missing_or_misshapen_experts_and_impossible_counts_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("phimoe", tmp.path(), "phimoe");
    let name = "model.layers.1.block_sparse_moe.experts.3.w2.weight";
    edit_tensor(&dir, name, None);
    refused(&dir, &tmp.path().join("out.gguf"), &[name]);

    let parent = tmp.path().join("b");
    std::fs::create_dir(&parent).unwrap();
    let dir = copy_release("phimoe", &parent, "phimoe");
    let name = "model.layers.0.block_sparse_moe.experts.2.w1.weight";
    edit_tensor(&dir, name, Some(("BF16", &[64, 64], &[0; 64 * 64 * 2])));
    refused(&dir, &parent.join("out.gguf"), &[name, "[64, 64]"]);

    for (i, used) in [5u64, 0].into_iter().enumerate() {
        let parent = tmp.path().join(format!("c{i}"));
        std::fs::create_dir(&parent).unwrap();
        let dir = copy_release("phimoe", &parent, "phimoe");
        edit_config(&dir, |m| {
            m.insert("num_experts_per_tok".into(), used.into());
        });
        let words = format!("{used} experts used per token of 4");
        refused(&dir, &parent.join("out.gguf"), &[&words, "config.json"]);
    }
}

/// Without `original_max_position_embeddings` (neither in the rope parameters nor at the top
/// level) the reference stops with a KeyError; weightport refuses naming the key.
#[test]
fn phimoe_without_an_original_context_is_refused_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("phimoe", tmp.path(), "phimoe");
    edit_json(&dir.join("config.json"), |m| {
        m.remove("original_max_position_embeddings");
        let rope = m["rope_parameters"].as_object_mut().unwrap();
        rope.remove("original_max_position_embeddings");
    });
    refused(
        &dir,
        &tmp.path().join("out.gguf"),
        &["original_max_position_embeddings", "config.json"],
    );
}
