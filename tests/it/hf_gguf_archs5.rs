//! HF release → GGUF for this pass's rows of issue 30 item 4 (GLM-4.5, …), against the pinned
//! `convert_hf_to_gguf.py`.
//! Each tiny release (fixtures/gen/gen_arch_archs5.py: transformers 5.24 `save_pretrained`,
//! random weights, the family's real config shape scaled down, `qwen2/`'s byte-level BPE files
//! plus the family's special tokens, with the pre-tokenizer name given to both converters) is
//! converted by `weightport convert DIR -o OUT.gguf --dtype T` and compared, as a whole file,
//! with the sha256 of what the reference wrote with `--outtype T`
//! (fixtures/expected/arch/archs5.json) for f32, f16, bf16 and q8_0; one-pass `--quant Q4_K_M`
//! with the reference's f16 file run through the pinned `llama-quantize`; and, with
//! `WEIGHTPORT_LLAMA_BIN`, llama-simple's continuation of our f16 file with the reference's.

use crate::common;
use common::arch::{self, copy_release, edit_config};

/// The pre-tokenizer name gen_arch_archs5.py gave the reference for the made-up BPE vocabulary.
fn pre(name: &str) -> Option<&'static str> {
    match name {
        "glm45" | "glm45_mtp" | "glm45v" => Some("glm4"),
        "granite_hybrid_moe" => Some("granite-docling"),
        "llama4" => Some("llama4"),
        other => panic!("no release {other}"),
    }
}

/// Every release of archs5.json, in its order.
const RELEASES: &[&str] = &[
    "glm45",
    "glm45_mtp",
    "glm45v",
    "granite_hybrid_moe",
    "llama4",
];

const TABLE: arch::Table = arch::Table {
    file: "archs5.json",
    releases: RELEASES,
    pre,
};

#[test]
fn archs5_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    TABLE.outtypes_match_the_reference();
}

#[test]
fn archs5_one_pass_quant_equals_convert_then_llama_quantize() {
    TABLE.one_pass_quant_matches_llama_quantize();
}

#[test]
#[ignore = "needs WEIGHTPORT_LLAMA_BIN: llama.cpp's tools, which CI does not build"]
fn archs5_llama_simple_continues_like_the_reference() {
    TABLE.llama_simple_continues_like_the_reference();
}

/// Hostile GLM-4.5 configs are refused from config.json, naming the file and the key, before
/// an output exists.
#[test]
fn glm45_hostile_configs_are_refused_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: &[(&str, serde_json::Value, &str)] = &[
        (
            "num_hidden_layers",
            serde_json::json!(4_000_000_000u64),
            "4000000000",
        ),
        (
            "num_nextn_predict_layers",
            serde_json::json!(4_294_967_295u64),
            "num_nextn_predict_layers",
        ),
        (
            "num_nextn_predict_layers",
            serde_json::json!(65_537),
            "num_nextn_predict_layers",
        ),
        (
            "num_nextn_predict_layers",
            serde_json::json!(-1),
            "num_nextn_predict_layers",
        ),
        ("n_routed_experts", serde_json::json!(0), "n_routed_experts"),
        (
            "n_routed_experts",
            serde_json::json!(-3),
            "n_routed_experts",
        ),
        ("norm_topk_prob", serde_json::json!("yes"), "norm_topk_prob"),
        (
            "num_hidden_layers",
            serde_json::Value::Null,
            "announces 46 layers",
        ),
    ];
    for (i, (key, value, word)) in cases.iter().enumerate() {
        let parent = tmp.path().join(i.to_string());
        std::fs::create_dir(&parent).unwrap();
        let dir = copy_release("glm45", &parent, "glm45");
        edit_config(&dir, |m| {
            m.insert((*key).into(), value.clone());
        });
        let out = parent.join("out.gguf");
        let o = arch::convert_output(&dir, &out, Some("glm4"), &["--dtype", "f16"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{key}={value}");
        assert!(
            err.contains(word) && err.contains("config.json"),
            "{key}={value}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(!out.exists(), "{key}={value}");
    }
}

/// Hostile Granite 4 hybrid MoE configs: an expert width or count the routed experts do not
/// have (the reference asserts the width; llama.cpp cannot load a count that disagrees) and a
/// null count are refused naming the key, before an output exists.
#[test]
fn granite_hybrid_moe_hostile_configs_are_refused_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: &[(&str, serde_json::Value)] = &[
        ("intermediate_size", serde_json::json!(48)),
        ("intermediate_size", serde_json::json!(4_294_967_295u64)),
        ("num_local_experts", serde_json::json!(4_000_000_000u64)),
        ("num_local_experts", serde_json::Value::Null),
    ];
    for (i, (key, value)) in cases.iter().enumerate() {
        let parent = tmp.path().join(i.to_string());
        std::fs::create_dir(&parent).unwrap();
        let dir = copy_release("granite_hybrid_moe", &parent, "granite_hybrid_moe");
        edit_config(&dir, |m| {
            m.insert((*key).into(), value.clone());
        });
        let out = parent.join("out.gguf");
        let o = arch::convert_output(&dir, &out, Some("granite-docling"), &["--dtype", "f16"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{key}={value}");
        assert!(err.contains(key), "{key}={value}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(!out.exists(), "{key}={value}");
    }
}

/// Hostile Llama 4 configs are refused naming the key (an absurd layer count, a feed-forward
/// length or MoE step that is not a count, null `num_hidden_layers` filled with the class's 48
/// that the weights do not hold), before an output exists.
#[test]
fn llama4_hostile_configs_are_refused_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: &[(&str, serde_json::Value, &str)] = &[
        (
            "num_hidden_layers",
            serde_json::json!(4_000_000_000u64),
            "4000000000",
        ),
        (
            "num_hidden_layers",
            serde_json::Value::Null,
            "announces 48 layers",
        ),
        (
            "intermediate_size_mlp",
            serde_json::json!("wide"),
            "intermediate_size_mlp",
        ),
        (
            "interleave_moe_layer_step",
            serde_json::json!(-1),
            "interleave_moe_layer_step",
        ),
    ];
    for (i, (key, value, word)) in cases.iter().enumerate() {
        let parent = tmp.path().join(i.to_string());
        std::fs::create_dir(&parent).unwrap();
        let dir = copy_release("llama4", &parent, "llama4");
        edit_config(&dir, |m| {
            m["text_config"]
                .as_object_mut()
                .unwrap()
                .insert((*key).into(), value.clone());
        });
        let out = parent.join("out.gguf");
        let o = arch::convert_output(&dir, &out, Some("llama4"), &["--dtype", "f16"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{key}={value}");
        assert!(
            err.contains(word) && err.contains("config.json"),
            "{key}={value}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(!out.exists(), "{key}={value}");
    }
}
