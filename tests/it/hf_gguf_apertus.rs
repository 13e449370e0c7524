//! HF release → GGUF for Apertus (issue 30 item 4: `ApertusForCausalLM` → `apertus`), against the
//! pinned `convert_hf_to_gguf.py`. The tiny release (fixtures/gen/gen_arch_apertus.py:
//! transformers 5.24 `save_pretrained`, random weights, Apertus-8B's config shape scaled down,
//! `llama3/`'s BPE files) is converted by `weightport convert DIR -o OUT.gguf --dtype T` and
//! compared, as a whole file, with the sha256 of what the reference wrote
//! (fixtures/expected/arch/xielu.json) for f32, f16, bf16 and q8_0: the xIELU parameters of every
//! layer (one-element tensors) read and written as the `xielu.*` F32 arrays right after
//! `general.architecture`, no tensor for them, q/k unpermuted, q/k norms, `rope_freqs` from the
//! llama3 rope scaling.

use std::path::Path;

use crate::common;
use common::arch::{self, copy_release, edit_config, edit_tensor};

fn pre(name: &str) -> Option<&'static str> {
    match name {
        "apertus" => Some("llama-bpe"),
        other => panic!("no release {other}"),
    }
}

const TABLE: arch::Table = arch::Table {
    file: "xielu.json",
    releases: &["apertus"],
    pre,
};

#[test]
fn apertus_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    TABLE.outtypes_match_the_reference();
}

/// One-pass `--quant Q4_K_M` equals the reference's f16 file run through the pinned
/// `llama-quantize` (recorded by the generator; no llama.cpp needed here).
#[test]
fn apertus_one_pass_quant_equals_convert_then_llama_quantize() {
    TABLE.one_pass_quant_matches_llama_quantize();
}

/// llama.cpp runs our f16 file and continues the prompt as it continues the reference's.
#[test]
#[ignore = "needs WEIGHTPORT_LLAMA_BIN: llama.cpp's tools, which CI does not build"]
fn apertus_llama_simple_continues_like_the_reference() {
    TABLE.llama_simple_continues_like_the_reference();
}

/// [`arch::refused`] with this release's pre-tokenizer.
fn refused(dir: &Path, out: &Path, words: &[&str]) -> String {
    arch::refused(dir, out, Some("llama-bpe"), words)
}

/// An xIELU parameter that is not one float (two elements: the reference's `.item()` fails; an
/// I32 one) is refused naming the tensor, before an output exists.
#[test]
fn apertus_xielu_parameter_of_the_wrong_shape_or_type_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("apertus", tmp.path(), "apertus");
    let name = "model.layers.1.mlp.act_fn.alpha_p";
    edit_tensor(&dir, name, Some(("BF16", &[2], &[0x80, 0x3f, 0x80, 0x3f])));
    refused(&dir, &tmp.path().join("out.gguf"), &[name, "[2]"]);

    let parent = tmp.path().join("b");
    std::fs::create_dir(&parent).unwrap();
    let dir = copy_release("apertus", &parent, "apertus");
    let name = "model.layers.3.mlp.act_fn.eps";
    edit_tensor(&dir, name, Some(("I32", &[], &[1, 0, 0, 0])));
    refused(&dir, &tmp.path().join("out2.gguf"), &[name, "I32"]);
}

/// A layer without one of its xIELU parameters is refused naming the tensor (the reference
/// writes no `xielu.beta` then, and llama.cpp cannot load its file).
#[test]
fn apertus_missing_xielu_parameter_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("apertus", tmp.path(), "apertus");
    let name = "model.layers.2.mlp.act_fn.beta";
    edit_tensor(&dir, name, None);
    refused(&dir, &tmp.path().join("out.gguf"), &[name, "missing"]);
}

/// A projection whose shape disagrees with config.json is refused naming it (the reference
/// writes it, and llama.cpp cannot load the file); absurd sizes in config.json (4·10⁹ layers,
/// hidden size, heads; no heads) are refused naming the key, not multiplied out or allocated
/// (a hidden size of 4·10⁹ would otherwise make 5·10⁸ llama3 rope factors).
#[test]
fn apertus_wrong_shapes_and_absurd_sizes_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("apertus", tmp.path(), "apertus");
    let name = "model.layers.2.mlp.up_proj.weight";
    edit_tensor(&dir, name, Some(("BF16", &[64, 64], &[0; 64 * 64 * 2])));
    refused(
        &dir,
        &tmp.path().join("out.gguf"),
        &[name, "[64, 64]", "[128, 64]"],
    );
    for (i, (key, value, words)) in [
        (
            "num_hidden_layers",
            4_000_000_000u64,
            &["4000000000 layers"][..],
        ),
        (
            "hidden_size",
            4_000_000_000,
            &["`hidden_size` 4000000000"][..],
        ),
        (
            "num_attention_heads",
            4_000_000_000,
            &["`num_attention_heads` 4000000000"][..],
        ),
        ("num_attention_heads", 0, &["`num_attention_heads` 0"][..]),
        (
            "intermediate_size",
            4_000_000_000,
            &["`intermediate_size`"][..],
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let parent = tmp.path().join(i.to_string());
        std::fs::create_dir(&parent).unwrap();
        let dir = copy_release("apertus", &parent, "apertus");
        edit_config(&dir, |m| {
            m.insert(key.into(), value.into());
        });
        let mut words = words.to_vec();
        words.push("config.json");
        refused(&dir, &parent.join("out.gguf"), &words);
    }
}

/// A LoRA adapter on an Apertus, GLM (`chatglm`), Phi-3.5-MoE or MiniMax-M2 base is refused from
/// the base's config.json (not compared with `convert_lora_to_gguf.py` yet), nothing written.
#[test]
fn lora_adapters_on_apertus_glm_phimoe_and_minimax_bases_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let adapter = common::fixtures().join("good/lora/llama_qv");
    for base in ["apertus", "glm", "phimoe", "minimax_m2"] {
        let out = tmp.path().join(format!("{base}.gguf"));
        let base_dir = arch::release(base);
        let o = common::wp(&[
            "convert",
            adapter.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--base",
            base_dir.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{err}");
        let arch_name = match base {
            "glm" => "chatglm",
            "minimax_m2" => "minimax-m2",
            other => other,
        };
        assert!(
            err.contains(&format!(
                "LoRA adapters of {arch_name} are not supported yet"
            )),
            "{err}"
        );
        assert!(!out.exists());
    }
}
