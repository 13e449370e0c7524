//! HF release → GGUF for MiniMax-M2 (issue 30 item 4: `MiniMaxM2ForCausalLM` → `minimax-m2`),
//! against the pinned `convert_hf_to_gguf.py`. The tiny release (fixtures/gen/gen_arch_minimax_m2.py:
//! transformers 5.24 `save_pretrained`, random weights, MiniMax-M2's config shape scaled down with
//! the original config.json's own keys, experts in the original layout
//! `block_sparse_moe.experts.N.w1/w2/w3`, `qwen2/`'s BPE files) is converted by
//! `weightport convert DIR -o OUT.gguf --dtype T` and compared, as a whole file, with the sha256
//! of what the reference wrote (fixtures/expected/arch/minimax.json) for f32, f16, bf16 and q8_0:
//! q/k norms over all heads, partial rope (`rotary_dim`), the experts stacked gate/down/up, the
//! router's score correction bias as `exp_probs_b.bias`, `expert_gating_func` from
//! `scoring_func`.

use std::path::Path;

use crate::common;
use crate::common::arch::edit_tensor;
use common::arch::{self, copy_release, edit_config, expected};

const PRE: &str = "minimax-m2";

fn pre(name: &str) -> Option<&'static str> {
    match name {
        "minimax_m2" | "minimax_m2_fp8" => Some(PRE),
        other => panic!("no release {other}"),
    }
}

const TABLE: arch::Table = arch::Table {
    file: "minimax.json",
    releases: &["minimax_m2", "minimax_m2_fp8"],
    pre,
};

#[test]
fn minimax_m2_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    TABLE.outtypes_match_the_reference();
}

/// One-pass `--quant Q4_K_M` equals the reference's f16 file run through the pinned
/// `llama-quantize` (recorded by the generator; no llama.cpp needed here).
#[test]
fn minimax_m2_one_pass_quant_equals_convert_then_llama_quantize() {
    TABLE.one_pass_quant_matches_llama_quantize();
}

/// llama.cpp runs our f16 file and continues the prompt as it continues the reference's.
#[test]
#[ignore = "needs WEIGHTPORT_LLAMA_BIN: llama.cpp's tools, which CI does not build"]
fn minimax_m2_llama_simple_continues_like_the_reference() {
    TABLE.llama_simple_continues_like_the_reference();
}

/// config.json as MiniMaxAI/MiniMax-M2 ships it (transformers 4.46: `rope_theta` at the top
/// level, no `rope_parameters`, `auto_map`) gives the reference's bytes for that config.
#[test]
fn minimax_m2_with_the_real_releases_config_shape_is_identical() {
    let exp = expected("minimax.json");
    let want = exp["minimax_m2"]["legacy_config_f16"]["sha256"]
        .as_str()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // The directory name is `general.name`: keep the fixture's.
    let dir = copy_release("minimax_m2", tmp.path(), "minimax_m2");
    edit_config(&dir, |m| {
        let rope = m.remove("rope_parameters").unwrap();
        let theta = rope["rope_theta"].as_f64().unwrap() as u64;
        m.insert("rope_theta".into(), theta.into());
        m.insert("transformers_version".into(), "4.46.1".into());
        m.insert(
            "auto_map".into(),
            serde_json::json!({
                "AutoConfig": "configuration_minimax_m2.MiniMaxM2Config",
                "AutoModelForCausalLM": "modeling_minimax_m2.MiniMaxM2ForCausalLM"
            }),
        );
    });
    let out = tmp.path().join("legacy.gguf");
    arch::convert(&dir, &out, Some(PRE), &["--dtype", "f16"]);
    assert_eq!(arch::sha_file(&out), want);
}

/// [`arch::refused`] with this release's pre-tokenizer.
fn refused(dir: &Path, out: &Path, words: &[&str]) -> String {
    arch::refused(dir, out, Some(PRE), words)
}

/// Empties every shard of `dir`: a refusal that still names config.json read no weight.
fn empty_shards(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "safetensors") {
            std::fs::write(&p, b"").unwrap();
        }
    }
}

/// The variants the pinned llama.cpp cannot run, or that the class does not compute, and
/// hostile sizes, are refused from config.json naming the key, before a weight is read (every
/// shard is emptied first), with nothing written. Without `scoring_func` (transformers' own
/// MiniMaxM2Config has no such key) the reference writes no `expert_gating_func` and the pinned
/// llama-simple aborts on its file (`gen_arch_minimax_m2.py --without-scoring-func`).
#[test]
fn minimax_m2_unrunnable_variants_and_hostile_sizes_are_refused_from_config_json() {
    use serde_json::{json, Value};
    let tmp = tempfile::tempdir().unwrap();
    let cases: &[(&str, Option<Value>, &[&str])] = &[
        (
            "scoring_func",
            None,
            &["`scoring_func`", "expert_gating_func"],
        ),
        (
            "scoring_func",
            Some(json!("softmax")),
            &["`scoring_func`", "softmax"],
        ),
        ("use_qk_norm", Some(json!(false)), &["`use_qk_norm` false"]),
        (
            "use_routing_bias",
            Some(json!(false)),
            &["`use_routing_bias` false"],
        ),
        (
            "qk_norm_type",
            Some(json!("per_head")),
            &["`qk_norm_type`", "per_head"],
        ),
        ("attn_type_list", Some(json!([0, 1])), &["`attn_type_list`"]),
        (
            "shared_intermediate_size",
            Some(json!(32)),
            &["`shared_intermediate_size` 32"],
        ),
        ("rotary_dim", None, &["`rotary_dim`"]),
        (
            "rotary_dim",
            Some(json!(64)),
            &["`rotary_dim` 64", "`head_dim` 32"],
        ),
        ("rotary_dim", Some(json!(7)), &["`rotary_dim` 7"]),
        ("rotary_dim", Some(json!(-8)), &["rotary_dim"]),
        (
            "num_local_experts",
            Some(json!(0)),
            &["`num_local_experts` 0"],
        ),
        (
            "num_local_experts",
            Some(json!(4_000_000_000u64)),
            &["`num_local_experts` 4000000000"],
        ),
        (
            "num_experts_per_tok",
            Some(json!(7)),
            &["`num_experts_per_tok` 7"],
        ),
        (
            "num_experts_per_tok",
            Some(json!(0)),
            &["`num_experts_per_tok` 0"],
        ),
        (
            "hidden_size",
            Some(json!(4_000_000_000u64)),
            &["`hidden_size` 4000000000"],
        ),
        ("head_dim", Some(json!(0)), &["`head_dim` 0"]),
        ("num_hidden_layers", Some(json!(-1)), &["num_hidden_layers"]),
        (
            "num_hidden_layers",
            Some(json!(4_000_000_000u64)),
            &["`num_hidden_layers` 4000000000"],
        ),
        (
            "num_hidden_layers",
            Some(json!(0)),
            &["`num_hidden_layers` 0"],
        ),
    ];
    for (i, (key, value, words)) in cases.iter().enumerate() {
        let parent = tmp.path().join(i.to_string());
        std::fs::create_dir(&parent).unwrap();
        let dir = copy_release("minimax_m2", &parent, "minimax_m2");
        edit_config(&dir, |m| match value {
            Some(v) => {
                m.insert((*key).into(), v.clone());
            }
            None => {
                m.remove(*key);
            }
        });
        empty_shards(&dir);
        let mut words = words.to_vec();
        words.push("config.json");
        let err = refused(&dir, &parent.join("out.gguf"), &words);
        assert!(
            !err.contains("safetensors"),
            "read the weights first: {err}"
        );
    }
}

/// A tensor whose shape disagrees with config.json is refused naming it and both shapes (the
/// reference writes it, and llama.cpp cannot load the file): per-head q norms (`[head_dim]`, the
/// layout `qk_norm_type` per_head would have), a router, a score correction bias and an expert
/// projection of the wrong size.
#[test]
fn minimax_m2_tensors_of_the_wrong_shape_are_refused_naming_them() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: &[(&str, &[u64], &str, &str)] = &[
        (
            "model.layers.0.self_attn.q_norm.weight",
            &[32],
            "BF16",
            "[128]",
        ),
        (
            "model.layers.1.self_attn.k_norm.weight",
            &[128],
            "BF16",
            "[64]",
        ),
        (
            "model.layers.1.block_sparse_moe.gate.weight",
            &[4, 64],
            "BF16",
            "[6, 64]",
        ),
        (
            "model.layers.0.block_sparse_moe.e_score_correction_bias",
            &[5],
            "F32",
            "[6]",
        ),
        (
            "model.layers.1.block_sparse_moe.experts.5.w2.weight",
            &[32, 64],
            "BF16",
            "[64, 32]",
        ),
    ];
    for (i, (name, shape, dtype, want)) in cases.iter().enumerate() {
        let parent = tmp.path().join(i.to_string());
        std::fs::create_dir(&parent).unwrap();
        let dir = copy_release("minimax_m2", &parent, "minimax_m2");
        let n: u64 = shape.iter().product();
        let width = if *dtype == "F32" { 4 } else { 2 };
        let payload = vec![0u8; (n * width) as usize];
        edit_tensor(&dir, name, Some((dtype, shape, &payload)));
        let got = format!("{shape:?}");
        refused(&dir, &parent.join("out.gguf"), &[name, &got, want]);
    }
}

/// A layer missing one expert's projection is refused naming the block (the reference fails on
/// its unmerged experts); nothing is written.
#[test]
fn minimax_m2_incomplete_experts_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("minimax_m2", tmp.path(), "minimax_m2");
    edit_tensor(
        &dir,
        "model.layers.1.block_sparse_moe.experts.3.w3.weight",
        None,
    );
    refused(
        &dir,
        &tmp.path().join("out.gguf"),
        &["block 1", "expert tensors"],
    );
}
