//! HF release → GGUF for Granite, OLMo 2 and SmolLM3 against llama.cpp's own tools. Each tiny
//! release (fixtures/good/arch/{granite,olmo2,smollm3}, written by transformers 5.24 with random
//! weights; made-up BPE vocabularies given their family's pre-tokenizer name) is converted by
//! `weightport convert DIR -o OUT.gguf` and compared, as a whole file, with the sha256 of what the
//! pinned reference wrote (fixtures/gen/gen_arch_dense2.py → fixtures/expected/arch/dense2.json):
//! * `--dtype T` against `convert_hf_to_gguf.py --outtype T` for f32, f16, bf16 and q8_0;
//! * `--dtype f16 --quant Q4_K_M` (one pass) against `convert_hf_to_gguf.py --outtype f16`
//!   followed by `llama-quantize … Q4_K_M`;
//! * OLMo 2 with config.json's `sliding_window` (with and without `layer_types`), SmolLM3 with
//!   `vocab_size` 49152, and a transformers-4 style config of each, against the reference's f16
//!   and q8_0 files of the same edited release.
//!
//! Whole-file equality covers every KV (Granite's multipliers as `_scale` keys, its ignored
//! `head_dim`; OLMo 2's window pattern), the tokenizer, the tensor order, names, types, the q/k
//! permutation (Granite, SmolLM3; none for OLMo 2), the quantized bytes and the layout.

use crate::common;
use common::arch::{self, copy_release, expected, sha_file};
use common::wp;

use std::path::Path;

use serde_json::Value;

/// Sets config.json's keys to `edits`' values.
fn edit_config(dir: &Path, edits: &Value) {
    edit_config_dropping(dir, &[], edits);
}

/// Removes config.json's keys `drop`, then sets its keys to `edits`' values.
fn edit_config_dropping(dir: &Path, drop: &[Value], edits: &Value) {
    arch::edit_config(dir, |cfg| {
        for k in drop {
            cfg.remove(k.as_str().unwrap()).unwrap();
        }
        for (k, v) in edits.as_object().unwrap() {
            cfg.insert(k.clone(), v.clone());
        }
    });
}

/// `weightport convert SRC -o OUT --pre-tokenizer PRE EXTRA…`, which must succeed.
fn convert(src: &Path, out: &Path, pre: &str, extra: &[&str]) {
    arch::convert(src, out, Some(pre), extra);
}

/// Converts every release of dense2.json once per entry of its `section` (each with the
/// pre-tokenizer name its entry records) and compares the whole file with the reference's sha256.
fn against(section: &str, args: fn(&str) -> Vec<&str>, reference: &str) -> Vec<String> {
    let cases = arch::cases(&expected("dense2.json"), |_, e| {
        Some(e["pre"].as_str().unwrap().to_owned())
    });
    arch::against(&cases, section, args, reference)
}

#[test]
fn dense2_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    let done = against(
        "outtypes",
        |t| vec!["--dtype", t],
        "convert_hf_to_gguf.py --outtype",
    );
    assert_eq!(
        done.len(),
        12,
        "granite, olmo2, smollm3 × f32/f16/bf16/q8_0: {done:?}"
    );
}

#[test]
fn dense2_one_pass_quant_equals_convert_then_llama_quantize() {
    let done = against(
        "quantized",
        |q| vec!["--outtype", "f16", "--quant", q],
        "convert_hf_to_gguf.py --outtype f16 + llama-quantize",
    );
    assert_eq!(done.len(), 3, "granite, olmo2, smollm3 × Q4_K_M: {done:?}");
}

/// Releases with config.json edited, against the reference's files of the same edit: OLMo 2
/// with `sliding_window` (the window and its per-layer pattern, from `layer_types`, else every
/// 4th layer global), SmolLM3 with `vocab_size` 49152 (the Llama family's vocabulary export
/// then writes `add_bos_token` false, and the BPE vocabulary is padded to 49152 entries), and
/// each release's `legacy` config (transformers-4 style: top-level `rope_theta`, keys left for
/// the config class to fill: Granite's multipliers and KV heads, OLMo 2's epsilon, SmolLM3's
/// rope θ, KV heads and no-rope list).
#[test]
fn config_variants_equal_the_reference() {
    let exp = expected("dense2.json");
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    for (name, e) in exp.as_object().unwrap() {
        let Some(variants) = e["variants"].as_object() else {
            continue;
        };
        for (v, var) in variants {
            let dir = copy_release(name, tmp.path(), &format!("{name}_{v}"));
            let drop = var["drop"].as_array().cloned().unwrap_or_default();
            edit_config_dropping(&dir, &drop, &var["config"]);
            for (t, want) in var["outtypes"].as_object().unwrap() {
                let out = tmp.path().join(format!("{name}_{v}-{t}.gguf"));
                convert(&dir, &out, e["pre"].as_str().unwrap(), &["--dtype", t]);
                assert_eq!(
                    sha_file(&out),
                    want["sha256"].as_str().unwrap(),
                    "{name} {v} {t}: differs from the reference"
                );
                n += 1;
            }
        }
    }
    assert_eq!(
        n, 12,
        "granite × 1 variant, olmo2 × 3, smollm3 × 2, × f16/q8_0"
    );
}

/// SmolLM3's llama.cpp graph skips rope on every 4th layer and the GGUF cannot say otherwise: a
/// config with another `no_rope_layers` (or interval) is refused before any weight is read;
/// the default pattern written out explicitly is accepted.
#[test]
fn smollm3_rope_pattern_the_gguf_cannot_hold_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        (
            "explicit_default",
            serde_json::json!({"no_rope_layers": [1, 1, 1, 0]}),
            true,
        ),
        (
            "all_rope",
            serde_json::json!({"no_rope_layers": [1, 1, 1, 1]}),
            false,
        ),
        (
            "short",
            serde_json::json!({"no_rope_layers": [1, 1, 1]}),
            false,
        ),
        (
            "interval",
            serde_json::json!({"no_rope_layers": null, "no_rope_layer_interval": 2}),
            false,
        ),
    ];
    for (case, edits, ok) in cases {
        let dir = copy_release("smollm3", tmp.path(), &format!("smollm3_{case}"));
        edit_config(&dir, &edits);
        let out = tmp.path().join(format!("{case}.gguf"));
        let o = wp(&[
            "convert",
            dir.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--pre-tokenizer",
            "llama-bpe",
            "--dtype",
            "f16",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.success(), ok, "{case}: {err}");
        if !ok {
            assert!(err.contains("no_rope_layers"), "{case}: {err}");
            assert!(err.contains("config.json"), "{case}: {err}");
            assert!(!out.exists(), "{case}");
        }
    }
}

/// Configs the reference cannot convert are refused, naming config.json and the key: Granite
/// with llama3 rope (`MODEL_TENSORS[GRANITE]` has no `rope_freqs`), OLMo 2 with a null
/// `sliding_window` (the reference fails writing it).
#[test]
fn configs_the_reference_cannot_convert_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let llama3 = serde_json::json!({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5,
        "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 256}});
    let cases = [
        ("granite", llama3, "llama3"),
        (
            "olmo2",
            serde_json::json!({"sliding_window": null}),
            "sliding_window",
        ),
    ];
    for (name, edits, needle) in cases {
        let dir = copy_release(name, tmp.path(), name);
        edit_config(&dir, &edits);
        let out = tmp.path().join(format!("{name}.gguf"));
        let o = wp(&[
            "convert",
            dir.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--pre-tokenizer",
            "dbrx",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{name}");
        assert!(err.contains(needle), "{name}: {err}");
        assert!(err.contains("config.json"), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert!(!out.exists(), "{name}");
    }
}

/// The refusal of an unsupported class names the new architectures among the supported ones.
#[test]
fn unsupported_class_lists_granite_olmo2_smollm3() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("olmo3");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3"}"#,
    )
    .unwrap();
    let out = tmp.path().join("x.gguf");
    let o = wp(&[
        "convert",
        dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    for name in [
        "Olmo3ForCausalLM",
        "GraniteForCausalLM",
        "Olmo2ForCausalLM",
        "SmolLM3ForCausalLM",
    ] {
        assert!(err.contains(name), "{name}: {err}");
    }
    assert!(!out.exists());
}
