//! HF release → GGUF for Nemotron-H (issue 30 item 4: `NemotronHForCausalLM` →
//! `nemotron_h_moe`, as the pinned reference writes every Nemotron-H), against the pinned
//! `convert_hf_to_gguf.py`. The tiny release (fixtures/gen/gen_arch_nemotronh.py: transformers
//! 5.24 `save_pretrained`, random weights, NVIDIA-Nemotron-3-Nano-30B-A3B's block kinds `M`, `E`
//! and `*` scaled down to 7 layers, `qwen2/`'s BPE files) is converted by `weightport convert DIR -o
//! OUT.gguf --dtype T` and compared, as a whole file, with the sha256 of what the reference
//! wrote (fixtures/expected/arch/nemotronh.json) for f32, f16, bf16 and q8_0: Mamba 2 mixers
//! (`-exp(A_log)`, conv1d squeezed, grouped norm), attention with a head size wider than hidden
//! / heads, routed experts stacked down/up with the router's score correction bias, a shared
//! expert, per-layer KV heads and feed-forward lengths.

use std::path::Path;

use serde_json::{json, Value};

use crate::common;
use common::arch::{self, copy_release, edit_config, edit_tensor, sha_file};

fn pre(name: &str) -> Option<&'static str> {
    match name {
        "nemotron_h_moe" => Some("qwen2"),
        other => panic!("no release {other}"),
    }
}

const TABLE: arch::Table = arch::Table {
    file: "nemotronh.json",
    releases: &["nemotron_h_moe"],
    pre,
};

#[test]
fn nemotronh_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    TABLE.outtypes_match_the_reference();
}

/// One-pass `--quant Q4_K_M` equals the reference's f16 file run through the pinned
/// `llama-quantize` (recorded by the generator; no llama.cpp needed here).
#[test]
fn nemotronh_one_pass_quant_equals_convert_then_llama_quantize() {
    TABLE.one_pass_quant_matches_llama_quantize();
}

/// llama.cpp runs our f16 file and continues the prompt as it continues the reference's.
#[test]
#[ignore = "needs WEIGHTPORT_LLAMA_BIN: llama.cpp's tools, which CI does not build"]
fn nemotronh_llama_simple_continues_like_the_reference() {
    TABLE.llama_simple_continues_like_the_reference();
}

/// config.json in the releases' own form (`hybrid_override_pattern` "MEMEM*E",
/// `num_hidden_layers`, the `mamba_n_groups` / `mamba_d_conv` aliases; the generator's
/// `legacy_config`) is read as transformers' NemotronHConfig reads it: the same file as the
/// reference's from that config (recorded as `legacy_config_f16`).
#[test]
fn nemotronh_releases_own_config_form_converts_like_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("nemotron_h_moe", tmp.path(), "nemotron_h_moe");
    edit_config(&dir, |m| {
        let kinds = m.remove("layers_block_type").unwrap();
        let pattern: String = kinds
            .as_array()
            .unwrap()
            .iter()
            .map(|k| match k.as_str().unwrap() {
                "linear_attention" => 'M',
                "full_attention" => '*',
                "moe" => 'E',
                other => panic!("{other}"),
            })
            .collect();
        m.insert("num_hidden_layers".into(), pattern.len().into());
        m.insert("hybrid_override_pattern".into(), pattern.into());
        let groups = m.remove("n_groups").unwrap();
        m.insert("mamba_n_groups".into(), groups);
        let conv = m.remove("conv_kernel").unwrap();
        m.insert("mamba_d_conv".into(), conv);
        for k in [
            "moe_shared_expert_overlap",
            "mtp_layers_block_type",
            "use_mamba_kernels",
            "num_logits_to_keep",
        ] {
            m.remove(k);
        }
    });
    let out = tmp.path().join("out.gguf");
    arch::convert(&dir, &out, Some("qwen2"), &["--dtype", "f16"]);
    let want = &arch::expected("nemotronh.json")["nemotron_h_moe"]["legacy_config_f16"];
    assert_eq!(sha_file(&out), want["sha256"].as_str().unwrap());
}

/// [`arch::refused`] with this release's pre-tokenizer.
fn refused(dir: &Path, out: &Path, words: &[&str]) -> String {
    arch::refused(dir, out, Some("qwen2"), words)
}

/// The release with config.json edited by `edit` must be refused naming `words`.
fn refused_with(
    case: &str,
    edit: impl FnOnce(&mut serde_json::Map<String, Value>),
    words: &[&str],
) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("nemotron_h_moe", tmp.path(), "nemotron_h_moe");
    edit_config(&dir, edit);
    let out = tmp.path().join(format!("{case}.gguf"));
    refused(&dir, &out, words);
}

/// Dense MLP layers (`mlp` / `-`: Nemotron-H-8B's shape, the class default without a pattern)
/// are refused from config.json: the pinned reference writes them with a zero feed-forward
/// length and llama.cpp cannot load its file (`gen_arch_nemotronh.py --refused` shows it).
#[test]
fn nemotronh_dense_mlp_layers_are_refused_naming_the_layer() {
    refused_with(
        "list",
        |m| {
            m["layers_block_type"][3] = json!("mlp");
        },
        &["layer 3", "dense MLP", "llama.cpp cannot load"],
    );
    refused_with(
        "pattern",
        |m| {
            m.remove("layers_block_type");
            m.insert("hybrid_override_pattern".into(), json!("M-M*"));
        },
        &["layer 1", "dense MLP"],
    );
    refused_with(
        "default",
        |m| {
            m.remove("layers_block_type");
        },
        &["layer 3", "dense MLP"],
    );
}

/// What is not compared with the reference is refused from config.json naming the key: the MTP
/// head, latent MoE projections; an unknown layer kind or pattern letter is refused naming it.
#[test]
fn nemotronh_mtp_latent_moe_and_unknown_layer_kinds_are_refused() {
    refused_with(
        "mtp",
        |m| {
            m.insert("num_nextn_predict_layers".into(), 1.into());
        },
        &["num_nextn_predict_layers", "MTP"],
    );
    refused_with(
        "latent",
        |m| {
            m.insert("moe_latent_size".into(), 16.into());
        },
        &["moe_latent_size"],
    );
    refused_with(
        "kind",
        |m| {
            m["layers_block_type"][2] = json!("sliding_attention");
        },
        &["layer 2", "sliding_attention"],
    );
    refused_with(
        "letter",
        |m| {
            m.remove("layers_block_type");
            m.insert("hybrid_override_pattern".into(), json!("MEMEX*E"));
        },
        &["hybrid_override_pattern", "'X'"],
    );
}

/// A `layers_block_type` that disagrees with the weights (layer 5 holds attention, the config
/// says experts) is refused naming a tensor of the layer and its kind (the reference converts
/// each tensor by its layer's kind and writes a file llama.cpp cannot load).
#[test]
fn nemotronh_tensors_of_another_layer_kind_are_refused_naming_them() {
    refused_with(
        "swap",
        |m| {
            m["layers_block_type"][5] = json!("moe");
            m["layers_block_type"][6] = json!("full_attention");
        },
        &["backbone.layers.5.mixer.", "`moe` layer", "layer 5"],
    );
}

/// A tensor's new dtype, shape and element count (zero bytes), or `None` to drop it.
type Replacement = Option<(&'static str, &'static [u64], usize)>;

/// A tensor whose shape config.json contradicts (`in_proj` rows, a 2-D `A_log`, an expert's
/// width), a layer's missing expert and a layer without one of its kind's tensors are refused
/// naming the tensor, before an output exists (the reference writes the first ones and
/// llama.cpp cannot load its file).
#[test]
fn nemotronh_hostile_tensor_shapes_are_refused_naming_the_tensor() {
    let cases: [(&str, Replacement, &[&str]); 7] = [
        (
            "backbone.layers.2.mixer.in_proj.weight",
            Some(("BF16", &[320, 64], 320 * 64)),
            &["[320, 64]", "[328, 64]"],
        ),
        (
            "backbone.layers.0.mixer.A_log",
            Some(("BF16", &[8, 2], 16)),
            &["[8, 2]", "[8]"],
        ),
        (
            "backbone.layers.3.mixer.experts.1.up_proj.weight",
            Some(("BF16", &[48, 64], 48 * 64)),
            &["[48, 64]", "[32, 64]"],
        ),
        (
            "backbone.layers.6.mixer.shared_experts.down_proj.weight",
            Some(("BF16", &[64, 32], 64 * 32)),
            &["[64, 32]", "[64, 48]"],
        ),
        (
            "backbone.layers.1.mixer.experts.2.down_proj.weight",
            None,
            &["expert"],
        ),
        (
            "backbone.layers.2.mixer.in_proj.weight",
            None,
            &["backbone.layers.2.mixer.in_proj.weight", "layer 2", "lacks"],
        ),
        (
            "backbone.layers.6.mixer.gate.e_score_correction_bias",
            None,
            &[
                "backbone.layers.6.mixer.gate.e_score_correction_bias",
                "lacks",
            ],
        ),
    ];
    for (i, (name, new, words)) in cases.into_iter().enumerate() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = copy_release("nemotron_h_moe", tmp.path(), "nemotron_h_moe");
        let payload;
        let new = match new {
            Some((dtype, shape, n)) => {
                payload = vec![0u8; n * 2];
                Some((dtype, shape, &payload[..]))
            }
            None => None,
        };
        edit_tensor(&dir, name, new);
        let mut words = words.to_vec();
        if new.is_some() {
            words.push(name);
        }
        refused(&dir, &tmp.path().join(format!("{i}.gguf")), &words);
    }
}

/// A routed expert numbered past `n_routed_experts` is refused naming it.
#[test]
fn nemotronh_expert_past_the_count_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("nemotron_h_moe", tmp.path(), "nemotron_h_moe");
    edit_config(&dir, |m| {
        m.insert("n_routed_experts".into(), 3.into());
    });
    refused(
        &dir,
        &tmp.path().join("out.gguf"),
        &[
            "backbone.layers.1.mixer.experts.3.",
            "expert 3",
            "`n_routed_experts` 3",
        ],
    );
}

/// Absurd sizes (4·10⁹ hidden size, Mamba heads, experts; 70000 layers) are refused naming the
/// key before anything is multiplied or allocated; a zero group count is refused too.
#[test]
fn nemotronh_absurd_sizes_are_refused_naming_the_key() {
    for (key, value, word) in [
        (
            "hidden_size",
            json!(4_000_000_000u64),
            "`hidden_size` 4000000000",
        ),
        (
            "mamba_num_heads",
            json!(4_000_000_000u64),
            "`mamba_num_heads`",
        ),
        (
            "n_routed_experts",
            json!(4_000_000_000u64),
            "`n_routed_experts`",
        ),
        ("n_groups", json!(0), "`n_groups` 0"),
        (
            "layers_block_type",
            Value::Array(vec![json!("moe"); 70_000]),
            "70000 layers",
        ),
    ] {
        refused_with(
            key,
            |m| {
                m.insert(key.into(), value);
            },
            &[word, "config.json"],
        );
    }
}

/// A LoRA adapter on a Nemotron-H base is refused from the base's config.json (not compared
/// with `convert_lora_to_gguf.py`), nothing written.
#[test]
fn lora_adapters_on_a_nemotronh_base_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let adapter = common::fixtures().join("good/lora/llama_qv");
    let out = tmp.path().join("a.gguf");
    let base = arch::release("nemotron_h_moe");
    let o = common::wp(&[
        "convert",
        adapter.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--base",
        base.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("LoRA adapters of nemotron_h_moe are not supported yet"),
        "{err}"
    );
    assert!(!out.exists());
}
