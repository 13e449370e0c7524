//! HF release → GGUF for the SSM and hybrid attention/SSM families of issue 30 item 4 (Mamba 2,
//! …), against the pinned `convert_hf_to_gguf.py`.
//! Each tiny release (fixtures/gen/gen_arch_ssm.py: transformers 5.24 `save_pretrained`, random
//! weights, the family's real config shape scaled down, `qwen2/`'s byte-level BPE files with the
//! pre-tokenizer name given to both converters) is converted by
//! `weightport convert DIR -o OUT.gguf --dtype T` and compared, as a whole file, with the sha256
//! of what the reference wrote with `--outtype T` (fixtures/expected/arch/ssm.json) for f32,
//! f16, bf16 and q8_0: every KV, the tokenizer, tensor order, names, types and bytes, the
//! layout. Mamba 2's layer 0 `A_log` holds BF16 values whose torch float32 exp is not the
//! correctly rounded one (the table of `transform::neg_exp`), so `A = -exp(A_log)` is checked
//! where it is hardest.

use crate::common;
use common::arch::{self, copy_release, edit_config, expected};

/// The pre-tokenizer name gen_arch_ssm.py gave the reference for the made-up BPE vocabulary.
fn pre(name: &str) -> Option<&'static str> {
    match name {
        "mamba2" => Some("qwen2"),
        "falcon_h1" => Some("falcon-h1"),
        "granite_hybrid" => Some("granite-docling"),
        "jamba" => None,
        "mamba" => Some("qwen2"),
        other => panic!("no release {other}"),
    }
}

/// Every release of ssm.json, in its order.
const RELEASES: &[&str] = &["falcon_h1", "granite_hybrid", "jamba", "mamba", "mamba2"];

const TABLE: arch::Table = arch::Table {
    file: "ssm.json",
    releases: RELEASES,
    pre,
};

#[test]
fn ssm_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    TABLE.outtypes_match_the_reference();
}

/// One-pass `--quant Q4_K_M` equals the reference's f16 file run through the pinned
/// `llama-quantize` (recorded by the generator; no llama.cpp needed here).
#[test]
fn ssm_one_pass_quant_equals_convert_then_llama_quantize() {
    TABLE.one_pass_quant_matches_llama_quantize();
}

/// llama.cpp runs our f16 file of every release and continues the prompt as it continues the
/// reference's.
#[test]
#[ignore = "needs WEIGHTPORT_LLAMA_BIN: llama.cpp's tools, which CI does not build"]
fn ssm_llama_simple_continues_like_the_reference() {
    TABLE.llama_simple_continues_like_the_reference();
}

/// Granite 4 hybrid with `layer_types` as transformers 5.24 saves them (`linear_attention` /
/// `full_attention`): the reference counts no attention layer (every KV head count 0, q/k not
/// permuted: a file llama.cpp cannot run), and we write the same bytes.
#[test]
fn granite_hybrid_with_transformers_layer_types_is_written_as_the_reference_writes_it() {
    let exp = expected("ssm.json");
    let want = exp["granite_hybrid"]["transformers_layer_types_f16"]["sha256"]
        .as_str()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // The directory name is `general.name`: keep the fixture's.
    let dir = copy_release("granite_hybrid", tmp.path(), "granite_hybrid_t5");
    edit_config(&dir, |m| {
        let types: Vec<serde_json::Value> = m["layer_types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                if t == "mamba" {
                    "linear_attention"
                } else {
                    "full_attention"
                }
                .into()
            })
            .collect();
        m.insert("layer_types".into(), types.into());
    });
    let out = tmp.path().join("t5.gguf");
    arch::convert(&dir, &out, Some("granite-docling"), &["--dtype", "f16"]);
    assert_eq!(arch::sha_file(&out), want);
}

/// Mamba 2's assertions (`d_inner == expand × d_model`, `d_inner % head_dim == 0`) refuse a
/// config the reference refuses, from config.json, naming the key, before an output exists.
#[test]
fn mamba2_inner_size_outside_the_references_assertions_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, (key, value, word)) in [
        ("intermediate_size", serde_json::json!(96), "expand"),
        ("head_dim", serde_json::json!(48), "head_dim"),
    ]
    .into_iter()
    .enumerate()
    {
        let parent = tmp.path().join(i.to_string());
        std::fs::create_dir(&parent).unwrap();
        let dir = copy_release("mamba2", &parent, "mamba2");
        edit_config(&dir, |m| {
            m.insert(key.into(), value.clone());
        });
        let out = parent.join("out.gguf");
        let o = arch::convert_output(&dir, &out, Some("qwen2"), &["--dtype", "f16"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{key}");
        assert!(err.contains(word) && err.contains("config.json"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(!out.exists());
    }
}

/// Falcon-H1's converter multiplies `k_proj` by `key_multiplier`; without it the reference
/// fails (`tensor * None`): refused, naming the key, before an output exists.
#[test]
fn falcon_h1_without_a_multiplier_it_applies_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("falcon_h1", tmp.path(), "falcon_h1");
    edit_config(&dir, |m| {
        m.remove("key_multiplier");
    });
    let out = tmp.path().join("out.gguf");
    let o = arch::convert_output(&dir, &out, Some("falcon-h1"), &["--dtype", "f16"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("key_multiplier"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists());
}

/// A config announcing 4·10⁹ layers is refused cleanly: the expert bookkeeping allocated a map
/// per announced block (96 GB here, an abort, for every Mixture-of-Experts row) and the SSM
/// per-layer arrays have a cap.
#[test]
fn absurd_layer_counts_are_refused_not_allocated() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, pre) in [("jamba", None), ("granite_hybrid", Some("granite-docling"))] {
        let dir = copy_release(name, tmp.path(), name);
        edit_config(&dir, |m| {
            m.insert("num_hidden_layers".into(), 4_000_000_000u64.into());
        });
        let out = tmp.path().join(format!("{name}.gguf"));
        let o = arch::convert_output(&dir, &out, pre, &["--dtype", "f16"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains("4000000000"), "{name}: {err}");
        assert!(!out.exists());
    }
}
