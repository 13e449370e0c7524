//! HF release → GGUF for GLM-4 in transformers' layout (issue 30 item 4: `GlmForCausalLM`,
//! model_type `glm`, GLM-4-9B-chat-hf's shape), which the pinned `convert_hf_to_gguf.py` converts
//! with its `ChatGLMModel` as `chatglm`. The tiny release (fixtures/gen/gen_arch_glm.py:
//! transformers 5.24 `save_pretrained`, random weights; `qwen2/`'s BPE files with `<|user|>`
//! added) is converted by `weightport convert DIR -o OUT.gguf --dtype T` and compared, as a whole
//! file, with the sha256 of what the reference wrote (fixtures/expected/arch/chatglm.json) for
//! f32, f16, bf16 and q8_0: ChatGLMModel's keys (context length = the embedding width without
//! `seq_length`, ε 1e-5 without `layernorm_epsilon`, rope base 10000, `add_bos_token` false among
//! them), EOS/EOT/UNK from the added tokens, q/k/v biases, `gate_up_proj` fused as `ffn_up`.

use std::path::Path;

use crate::common;
use common::arch::{self, copy_release, edit_config};

fn pre(name: &str) -> Option<&'static str> {
    match name {
        "glm" => Some("glm4"),
        other => panic!("no release {other}"),
    }
}

const TABLE: arch::Table = arch::Table {
    file: "chatglm.json",
    releases: &["glm"],
    pre,
};

#[test]
fn glm_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    TABLE.outtypes_match_the_reference();
}

/// One-pass `--quant Q4_K_M` equals the reference's f16 file run through the pinned
/// `llama-quantize` (recorded by the generator; no llama.cpp needed here).
#[test]
fn glm_one_pass_quant_equals_convert_then_llama_quantize() {
    TABLE.one_pass_quant_matches_llama_quantize();
}

/// llama.cpp runs our f16 file and continues the prompt as it continues the reference's.
#[test]
#[ignore = "needs WEIGHTPORT_LLAMA_BIN: llama.cpp's tools, which CI does not build"]
fn glm_llama_simple_continues_like_the_reference() {
    TABLE.llama_simple_continues_like_the_reference();
}

/// [`arch::refused`] with this release's pre-tokenizer.
fn refused(dir: &Path, out: &Path, words: &[&str]) -> String {
    arch::refused(dir, out, Some("glm4"), words)
}

/// config.json edits the weights contradict (a narrower MLP, smaller heads) are refused naming
/// the first tensor they contradict; absurd sizes (4·10⁹ wide, 4·10⁹ or no heads, 4·10⁹ layers)
/// naming the key; ChatGLM3's own tokenizer, which the reference reads by `_name_or_path`, as
/// not supported. The reference writes the contradicting files, which llama.cpp cannot load.
#[test]
fn glm_wrong_shapes_absurd_sizes_and_chatglm3_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, serde_json::Value, &[&str]); 7] = [
        (
            "intermediate_size",
            64.into(),
            &["model.layers.0.mlp.gate_up_proj.weight", "[256, 64]"],
        ),
        (
            "head_dim",
            8.into(),
            &["model.layers.0.self_attn.k_proj.bias", "[32]"],
        ),
        (
            "hidden_size",
            4_000_000_000u64.into(),
            &["`hidden_size` 4000000000"],
        ),
        (
            "num_attention_heads",
            4_000_000_000u64.into(),
            &["4000000000"],
        ),
        (
            "num_attention_heads",
            0.into(),
            &["`num_attention_heads` 0"],
        ),
        (
            "num_hidden_layers",
            4_000_000_000u64.into(),
            &["4000000000 layers"],
        ),
        ("_name_or_path", "THUDM/chatglm3-6b".into(), &["ChatGLM3"]),
    ];
    for (i, (key, value, words)) in cases.into_iter().enumerate() {
        let parent = tmp.path().join(i.to_string());
        std::fs::create_dir(&parent).unwrap();
        let dir = copy_release("glm", &parent, "glm");
        edit_config(&dir, |m| {
            m.insert(key.into(), value);
        });
        refused(&dir, &parent.join("out.gguf"), words);
    }
}

/// A tokenizer without `<|user|>` (the reference's EOT) is refused, as the reference fails on it.
#[test]
fn glm_tokenizer_without_user_token_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("glm", tmp.path(), "glm");
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(arch::release("qwen2").join(f), dir.join(f)).unwrap();
    }
    refused(&dir, &tmp.path().join("out.gguf"), &["<|user|>"]);
}
