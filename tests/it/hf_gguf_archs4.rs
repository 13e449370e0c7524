//! HF release → GGUF for the architectures of issue 30 item 4 (Seed-OSS, Arcee, Exaone 4, …),
//! against the pinned `convert_hf_to_gguf.py`.
//! Each tiny release (fixtures/gen/gen_arch_archs4.py: transformers 5.24 `save_pretrained`,
//! random weights, the family's real config shape scaled down, `qwen2/`'s byte-level BPE files
//! with the family's pre-tokenizer name given to both converters) is converted by
//! `weightport convert DIR -o OUT.gguf --dtype T` and compared, as a whole file, with the sha256
//! of what the reference wrote with `--outtype T` (fixtures/expected/arch/archs4.json) for f32,
//! f16, bf16 and q8_0: every KV (keys, types, values, order), the tokenizer, tensor order, names,
//! types and bytes, and the layout.
//!
//! One-pass `--quant Q4_K_M` is compared with the reference's f16 file run through the pinned
//! `llama-quantize` (recorded by the generator once llama.cpp's tools were built), and, with
//! `WEIGHTPORT_LLAMA_BIN`, llama-simple's continuation of our f16 file with the reference's
//! (ernie45_moe and qwen3vl_moe: llama.cpp refuses the reference's file, and ours).

use crate::common;
use common::arch::{self, copy_release, edit_config, expected};

/// The pre-tokenizer name gen_arch_archs4.py gave the reference for the made-up BPE vocabulary
/// (`None`: a SentencePiece vocabulary).
fn pre(name: &str) -> Option<&'static str> {
    match name {
        "seed_oss" => Some("seed-coder"),
        "arcee" => Some("llama-bpe"),
        "exaone4" => Some("exaone4"),
        "ministral3" | "mistral3" => Some("tekken"),
        "qwen25vl" | "qwen3vl" | "qwen3vl_moe" => Some("qwen2"),
        "hunyuan_dense" => Some("hunyuan-dense"),
        "glm4" => Some("glm4"),
        "lfm2" | "lfm2_moe" => Some("lfm2"),
        "ernie45" | "ernie45_moe" => None,
        other => panic!("no release {other}"),
    }
}

/// Every release of archs4.json, in its order.
const RELEASES: &[&str] = &[
    "arcee",
    "ernie45",
    "ernie45_moe",
    "exaone4",
    "glm4",
    "hunyuan_dense",
    "lfm2",
    "lfm2_moe",
    "ministral3",
    "mistral3",
    "qwen25vl",
    "qwen3vl",
    "qwen3vl_moe",
    "seed_oss",
];

const TABLE: arch::Table = arch::Table {
    file: "archs4.json",
    releases: RELEASES,
    pre,
};

#[test]
fn archs4_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    TABLE.outtypes_match_the_reference();
}

#[test]
fn archs4_one_pass_quant_equals_convert_then_llama_quantize() {
    TABLE.one_pass_quant_matches_llama_quantize();
}

#[test]
#[ignore = "needs WEIGHTPORT_LLAMA_BIN: llama.cpp's tools, which CI does not build"]
fn archs4_llama_simple_continues_like_the_reference() {
    TABLE.llama_simple_continues_like_the_reference();
}

/// Exaone 4 without `layer_types` takes its pattern from `sliding_window_pattern` (a string
/// `LLLG` or an int n, as the reference reads it): both spellings of the fixture's pattern give
/// the reference's file; a null window writes neither key, and 0 (the reference divides by it)
/// is refused naming the key.
#[test]
fn exaone4_sliding_window_pattern_spellings() {
    let exp = expected("archs4.json");
    let want = exp["exaone4"]["outtypes"]["f16"]["sha256"]
        .as_str()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for (i, pattern) in [serde_json::json!("LLLG"), serde_json::json!(4)]
        .into_iter()
        .enumerate()
    {
        // The directory name is `general.name`: keep the fixture's.
        let parent = tmp.path().join(i.to_string());
        std::fs::create_dir(&parent).unwrap();
        let dir = copy_release("exaone4", &parent, "exaone4");
        edit_config(&dir, |m| {
            m.remove("layer_types");
            m.insert("sliding_window_pattern".into(), pattern.clone());
        });
        let out = tmp.path().join(format!("{i}.gguf"));
        arch::convert(&dir, &out, Some("exaone4"), &["--dtype", "f16"]);
        assert_eq!(arch::sha_file(&out), want, "{pattern}");
    }
    let dir = copy_release("exaone4", tmp.path(), "zero");
    edit_config(&dir, |m| {
        m.remove("layer_types");
        m.insert("sliding_window_pattern".into(), 0.into());
    });
    let out = tmp.path().join("zero.gguf");
    let o = arch::convert_output(&dir, &out, Some("exaone4"), &["--dtype", "f16"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("sliding_window_pattern"), "{err}");
    assert!(!out.exists());
}

/// `Mistral3ForConditionalGeneration` with `model_type` `mistral4` is a DeepSeek-V2 model in the
/// reference (another class behind the same name): refused from config.json, naming it, before
/// an output exists.
#[test]
fn mistral4_behind_the_mistral3_class_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("mistral3", tmp.path(), "mistral3");
    edit_config(&dir, |m| {
        m["text_config"]["model_type"] = "mistral4".into();
    });
    let out = tmp.path().join("out.gguf");
    let o = arch::convert_output(&dir, &out, Some("tekken"), &["--dtype", "f16"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("mistral4"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists());
}

/// HunYuan's "dynamic" rope writes a 256K context that the reference asserts only for θ 10000
/// and 32K/256K positions: another θ is refused from config.json, before an output exists.
#[test]
fn hunyuan_dynamic_rope_outside_the_references_assumptions_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("hunyuan_dense", tmp.path(), "hunyuan_dense");
    edit_config(&dir, |m| {
        m["rope_parameters"]["rope_theta"] = 1000000.0.into();
    });
    let out = tmp.path().join("out.gguf");
    let o = arch::convert_output(&dir, &out, Some("hunyuan-dense"), &["--dtype", "f16"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("dynamic rope") && err.contains("config.json"),
        "{err}"
    );
    assert!(!out.exists());
}

/// GLM-4's converter looks `<|user|>` up in the tokenizer's added vocabulary and fails without
/// it: a tokenizer without that added token is refused, naming it, before an output exists.
#[test]
fn glm4_without_its_user_token_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("glm4", tmp.path(), "glm4");
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        let p = dir.join(file);
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, text.replace("<|user|>", "<|usr|>")).unwrap();
    }
    let out = tmp.path().join("out.gguf");
    let o = arch::convert_output(&dir, &out, Some("glm4"), &["--dtype", "f16"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("<|user|>"), "{err}");
    assert!(!out.exists());
}

/// A class the table does not have (GLM-4.7-Flash's) is refused from config.json before a
/// weight is read (every shard is replaced by garbage), naming the nearest supported class; a
/// non-zero exit, no output.
#[test]
fn an_unsupported_class_is_refused_naming_the_nearest_supported_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("glm4", tmp.path(), "glm4");
    edit_config(&dir, |m| {
        m["architectures"] = serde_json::json!(["Glm4MoeLiteForCausalLM"]);
    });
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "safetensors") {
            std::fs::write(&p, b"not a safetensors file").unwrap();
        }
    }
    let out = tmp.path().join("out.gguf");
    let o = arch::convert_output(&dir, &out, Some("qwen2"), &["--dtype", "f16"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        !err.contains("safetensors"),
        "read the weights first: {err}"
    );
    assert!(
        err.contains("Glm4MoeLiteForCausalLM")
            && err.contains("nearest supported: `Glm4MoeForCausalLM`")
            && err.contains("config.json"),
        "{err}"
    );
    assert!(!out.exists());
}

/// transformers 5.24 writes Phi-3.5-MoE as `PhimoeForCausalLM`, which the pinned reference does
/// not register ("Model PhimoeForCausalLM is not supported"): refused the same way, from
/// config.json, naming a supported class.
#[test]
fn phimoe_as_transformers_writes_it_is_refused_as_the_reference_refuses_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("qwen25vl", tmp.path(), "phimoe");
    edit_config(&dir, |m| {
        m["architectures"] = serde_json::json!(["PhimoeForCausalLM"]);
    });
    let out = tmp.path().join("out.gguf");
    let o = arch::convert_output(&dir, &out, Some("qwen2"), &["--dtype", "f16"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("`PhimoeForCausalLM` cannot be converted")
            && err.contains("nearest supported"),
        "{err}"
    );
    assert!(!out.exists());
}
