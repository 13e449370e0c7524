//! HF release → GGUF for Qwen3-Next and Qwen3.5 dense and MoE (issue 30 item 4: gated delta-net
//! layers, gated full attention every 4th layer, experts with a shared expert in every layer or a
//! dense MLP, the MTP block), against the pinned `convert_hf_to_gguf.py`.
//! The tiny release (fixtures/gen/gen_arch_qwen3next.py: transformers 5.24 `save_pretrained`,
//! random weights, Qwen3-Next-80B-A3B's config shape scaled down, with the `mtp.*` block the real
//! releases ship added; `qwen2/`'s byte-level BPE files) is converted by
//! `weightport convert DIR -o OUT.gguf --dtype T` and compared, as a whole file, with the sha256
//! of what the reference wrote (fixtures/expected/arch/qwen_linear.json) for f32, f16, bf16 and
//! q8_0: `in_proj_qkvz` regrouped into `attn_qkv` + `attn_gate`, `-exp(A_log)`, `1 + w` of every
//! norm but the delta-net's, the conv1d squeezed, the MTP block as `blk.4`, the keys; for Qwen3.5
//! (`qwen35`, `qwen35_moe`: 2 key heads, 4 value heads) the value heads of every delta-net tensor
//! reordered from grouped to tiled, and the default M-RoPE sections; for the vision-language
//! releases (`qwen35_vl`, `qwen35_moe_vl`: Qwen3_5(Moe)ForConditionalGeneration, decoder under
//! `model.language_model.`, a vision tower, interleaved M-RoPE sections given) the text model
//! alone, the tower dropped as the reference's text converter drops it.

use std::path::Path;

use crate::common;
use common::arch::{self, copy_release, edit_config, edit_json, edit_tensor, expected, sha_file};

/// The pre-tokenizer name gen_arch_qwen3next.py gave the reference for the made-up vocabulary.
fn pre(name: &str) -> Option<&'static str> {
    match name {
        "qwen3next" | "qwen35" | "qwen35_moe" | "qwen35_vl" | "qwen35_moe_vl" => Some("qwen2"),
        other => panic!("no release {other}"),
    }
}

const TABLE: arch::Table = arch::Table {
    file: "qwen_linear.json",
    releases: &[
        "qwen35",
        "qwen35_moe",
        "qwen35_moe_vl",
        "qwen35_vl",
        "qwen3next",
    ],
    pre,
};

#[test]
fn qwen3next_and_qwen35_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    TABLE.outtypes_match_the_reference();
}

/// One-pass `--quant Q4_K_M` equals the reference's f16 file run through the pinned
/// `llama-quantize` (recorded by the generator; no llama.cpp needed here).
#[test]
fn qwen3next_and_qwen35_one_pass_quant_equals_convert_then_llama_quantize() {
    TABLE.one_pass_quant_matches_llama_quantize();
}

/// llama.cpp runs our f16 file of each release and continues the prompt as it continues the
/// reference's.
#[test]
#[ignore = "needs WEIGHTPORT_LLAMA_BIN: llama.cpp's tools, which CI does not build"]
fn qwen3next_and_qwen35_llama_simple_continue_like_the_reference() {
    TABLE.llama_simple_continues_like_the_reference();
}

/// config.json as the real release ships it (rope θ, `partial_rotary_factor` and
/// `full_attention_interval` at the top level, no `layer_types`): Qwen3NextConfig's reading of
/// it (layer types from the interval, the rope factor into the rope parameters) gives the
/// reference's bytes.
#[test]
fn qwen3next_with_the_real_releases_config_shape_is_identical() {
    let exp = expected("qwen_linear.json");
    let want = exp["qwen3next"]["legacy_config_f16"]["sha256"]
        .as_str()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // The directory name is `general.name`: keep the fixture's.
    let dir = copy_release("qwen3next", tmp.path(), "qwen3next");
    edit_config(&dir, |m| {
        let rope = m.remove("rope_parameters").unwrap();
        m.remove("layer_types");
        m.insert("rope_theta".into(), rope["rope_theta"].clone());
        m.insert("partial_rotary_factor".into(), 0.5.into());
        m.insert("full_attention_interval".into(), 4.into());
    });
    let out = tmp.path().join("legacy.gguf");
    arch::convert(&dir, &out, Some("qwen2"), &["--dtype", "f16"]);
    assert_eq!(arch::sha_file(&out), want);
}

/// [`arch::refused`] with this release's pre-tokenizer.
fn refused(dir: &Path, out: &Path, words: &[&str]) -> String {
    arch::refused(dir, out, Some("qwen2"), words)
}

/// The release as transformers' `save_pretrained` writes it, without the `mtp.*` block: the
/// reference asserts an MTP layer and fails; refused, before an output exists.
#[test]
fn qwen3next_without_its_mtp_block_is_refused_as_the_reference_refuses_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = without_mtp_block(tmp.path());
    refused(&dir, &tmp.path().join("out.gguf"), &["mtp", "multi-token"]);
}

/// qwen3next/ copied into `tmp` as transformers' `save_pretrained` writes it: without the
/// `mtp.*` block (its shards, which hold nothing else, removed with their index entries).
fn without_mtp_block(tmp: &Path) -> std::path::PathBuf {
    let dir = copy_release("qwen3next", tmp, "qwen3next");
    let index = dir.join("model.safetensors.index.json");
    let mut shards = std::collections::BTreeSet::new();
    edit_json(&index, |m| {
        let map = m["weight_map"].as_object_mut().unwrap();
        map.retain(|k, v| {
            if k.starts_with("mtp.") {
                shards.insert(v.as_str().unwrap().to_owned());
            }
            !k.starts_with("mtp.")
        });
    });
    for s in &shards {
        std::fs::remove_file(dir.join(s)).unwrap();
    }
    arch::fix_total_size(&dir);
    dir
}

/// A gated delta-net tensor whose shape disagrees with config.json (here the conv kernel) is
/// refused naming the tensor; the reference would write a file llama.cpp cannot load.
#[test]
fn qwen3next_delta_net_tensor_of_the_wrong_shape_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("qwen3next", tmp.path(), "qwen3next");
    edit_config(&dir, |m| {
        m.insert("linear_conv_kernel_dim".into(), 3.into());
    });
    refused(
        &dir,
        &tmp.path().join("out.gguf"),
        &["model.layers.0.linear_attn.conv1d.weight", "[128, 1, 3]"],
    );
    // Value heads that disagree with the weights (`A_log` is the first tensor they size).
    let parent = tmp.path().join("b");
    std::fs::create_dir(&parent).unwrap();
    let dir2 = copy_release("qwen3next", &parent, "qwen3next");
    edit_config(&dir2, |m| {
        m.insert("linear_value_head_dim".into(), 8.into());
        m.insert("linear_num_value_heads".into(), 8.into());
    });
    refused(
        &dir2,
        &tmp.path().join("out2.gguf"),
        &["model.layers.0.linear_attn.A_log", "shape [4]"],
    );
}

/// Absurd sizes in config.json (4·10⁹ value heads or layers, 10⁹ MTP layers) are refused
/// naming the key, not multiplied out or allocated.
#[test]
fn qwen3next_absurd_sizes_are_refused_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, (key, word)) in [
        ("linear_num_value_heads", "linear_num_value_heads"),
        ("num_hidden_layers", "4000000000 layers"),
        ("mtp_num_hidden_layers", "multi-token-prediction layers"),
    ]
    .into_iter()
    .enumerate()
    {
        let parent = tmp.path().join(i.to_string());
        std::fs::create_dir(&parent).unwrap();
        let dir = copy_release("qwen3next", &parent, "qwen3next");
        edit_config(&dir, |m| {
            m.insert(key.into(), 4_000_000_000u64.into());
        });
        refused(&dir, &parent.join("out.gguf"), &[word, "config.json"]);
    }
}

/// A linear-attention layer missing one of its tensors (`A_log` of layer 1, taken out of its
/// shard and the index) is refused naming it, before an output exists.
#[test]
fn qwen3next_missing_delta_net_tensor_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("qwen3next", tmp.path(), "qwen3next");
    let name = "model.layers.1.linear_attn.A_log";
    edit_tensor(&dir, name, None);
    refused(&dir, &tmp.path().join("out.gguf"), &[name, "layer 1"]);
}

/// Qwen3.5: a delta-net tensor of the wrong shape (`in_proj_z` sized by `linear_value_head_dim`)
/// and a missing one (`in_proj_a` of layer 2) are refused naming them.
#[test]
fn qwen35_delta_net_tensor_of_the_wrong_shape_or_missing_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("qwen35_moe", tmp.path(), "qwen35_moe");
    edit_config(&dir, |m| {
        m.insert("linear_key_head_dim".into(), 8.into());
    });
    refused(
        &dir,
        &tmp.path().join("out.gguf"),
        &["model.layers.0.linear_attn.conv1d.weight", "[96, 1, 4]"],
    );
    let parent = tmp.path().join("b");
    std::fs::create_dir(&parent).unwrap();
    let dir = copy_release("qwen35", &parent, "qwen35");
    let name = "model.layers.2.linear_attn.in_proj_a.weight";
    edit_tensor(&dir, name, None);
    refused(&dir, &tmp.path().join("out2.gguf"), &[name, "layer 2"]);
}

/// `--no-mtp` (alias `--no-nextn`) leaves the multi-token-prediction layers out as the
/// reference's `--no-mtp` does (fixtures/gen/gen_arch_no_mtp.py → no_mtp.json): GLM-4.5 with
/// and without its NextN layer's weights, GLM-4.5V, Qwen3-Next, Qwen3.5 dense and MoE and the
/// Qwen3.5 vision-language release, f16 and q8_0 whole files; a Qwen3-Next release without its
/// `mtp.*` block (as `save_pretrained` writes it, refused by default) converts then; DeepSeek-V3,
/// whose reference converter has no MTP export, is refused, and so is the flag on a conversion
/// that is not HF release → GGUF. Nothing is written for a refusal.
#[test]
fn no_mtp_leaves_the_mtp_layers_out_as_the_reference() {
    let doc = expected("no_mtp.json");
    let tmp = tempfile::tempdir().unwrap();
    let mut done = 0;
    for (name, entry) in doc["converted"].as_object().unwrap() {
        let pre = entry["pre"].as_str();
        for (t, want) in entry["outtypes"].as_object().unwrap() {
            let out = tmp.path().join(format!("{name}-{t}.gguf"));
            arch::convert(&arch::release(name), &out, pre, &["--dtype", t, "--no-mtp"]);
            assert_eq!(
                sha_file(&out),
                want["sha256"].as_str().unwrap(),
                "{name} {t} --no-mtp"
            );
            done += 1;
        }
    }
    assert_eq!(done, 14);
    // The release as save_pretrained writes it (no mtp.*): the default refuses it (the
    // reference asserts an MTP layer); without the layers it is qwen3next's --no-mtp file.
    let dir = without_mtp_block(tmp.path());
    let out = tmp.path().join("nomtp.gguf");
    arch::convert(&dir, &out, Some("qwen2"), &["--dtype", "f16", "--no-nextn"]);
    assert_eq!(
        sha_file(&out),
        doc["converted"]["qwen3next"]["outtypes"]["f16"]["sha256"]
            .as_str()
            .unwrap()
    );
    let out = tmp.path().join("ds.gguf");
    let o = arch::convert_output(
        &arch::release("deepseek3"),
        &out,
        Some("qwen2"),
        &["--dtype", "f16", "--no-mtp"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && !out.exists(), "{err}");
    assert!(
        err.contains("multi-token-prediction layers of DeepseekV3ForCausalLM"),
        "{err}"
    );
    let o = arch::convert_output(
        &arch::release("deepseek3"),
        &out,
        Some("qwen2"),
        &["--dtype", "f16", "--mtp"],
    );
    assert!(!o.status.success() && !out.exists());
    let st = common::fixtures().join("good/safetensors/llama_tiny.safetensors");
    let out = tmp.path().join("st.safetensors");
    let o = arch::convert_output(&st, &out, None, &["--no-mtp"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && !out.exists(), "{err}");
    assert!(
        err.contains("applies to an HF release converted to GGUF"),
        "{err}"
    );
}

/// `--mtp` writes the multi-token-prediction layers alone with the embedding, the final norm
/// and the head, the keys the whole model's (a speculative draft), as the reference's `--mtp`
/// (no_mtp.json's `mtp_only`, f16 and q8_0 whole files); `--mtp` with `--no-mtp` is a usage
/// error.
#[test]
fn mtp_writes_the_draft_as_the_reference() {
    let doc = expected("no_mtp.json");
    let tmp = tempfile::tempdir().unwrap();
    let mut done = 0;
    for (name, entry) in doc["mtp_only"].as_object().unwrap() {
        let pre = entry["pre"].as_str();
        for (t, want) in entry["outtypes"].as_object().unwrap() {
            let out = tmp.path().join(format!("{name}-mtp-{t}.gguf"));
            arch::convert(&arch::release(name), &out, pre, &["--dtype", t, "--mtp"]);
            assert_eq!(
                sha_file(&out),
                want["sha256"].as_str().unwrap(),
                "{name} {t} --mtp"
            );
            done += 1;
        }
    }
    assert_eq!(done, 14);
    let out = tmp.path().join("both.gguf");
    let o = arch::convert_output(
        &arch::release("qwen35"),
        &out,
        Some("qwen2"),
        &["--mtp", "--no-mtp"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(!out.exists());
}
