//! HF release → GGUF for StarCoder2, Command-R (Cohere; `cohere_qk` with Command-R+'s per-head
//! q/k norms) and GPT-2, against llama.cpp's own tools.
//! Each tiny release (fixtures/gen/gen_arch_dense3.py: transformers 5.24 `save_pretrained`, random
//! weights, `qwen2/`'s byte-level BPE files with the family's pre-tokenizer name given to both
//! converters) is converted by `weightport convert DIR -o OUT.gguf` and compared, as whole
//! files, with the sha256 of what the pinned reference wrote (fixtures/expected/arch/dense3.json):
//! * `--dtype T` against `convert_hf_to_gguf.py --outtype T` for f32, f16, bf16 and q8_0;
//! * `--outtype f16 --quant Q4_K_M` (one pass) against `convert_hf_to_gguf.py --outtype f16`
//!   followed by `llama-quantize … Q4_K_M`.
//!
//! Whole-file equality covers every KV (keys, types, values, order: Command-R's context length
//! from `model_max_length`, its `logit_scale` and rope scaling "none"; GPT-2's own key list), the
//! tokenizer, the tensor order, names, types, GPT-2's transposed Conv1D weights, the quantized
//! bytes and the layout.

use crate::common;
use common::arch::{self, copy_release, edit_config, expected, release, sha_file};

use std::path::Path;

use serde_json::Value;

/// The pre-tokenizer name gen_arch_dense3.py gave the reference for the made-up vocabulary.
fn pre(name: &str) -> &'static str {
    match name {
        "starcoder2" => "starcoder",
        "cohere" | "cohere_qk" => "command-r",
        "gpt2" => "gpt-2",
        other => panic!("no release {other}"),
    }
}

fn convert(src: &Path, out: &Path, name: &str, extra: &[&str]) -> std::process::Output {
    arch::convert_output(src, out, Some(pre(name)), extra)
}

/// Converts every release once per entry of its `section` and compares the whole file with the
/// reference's sha256.
fn against(section: &str, args: fn(&str) -> Vec<&str>, reference: &str) -> usize {
    let cases = arch::cases(&expected("dense3.json"), |name, _| {
        Some(pre(name).to_owned())
    });
    arch::against(&cases, section, args, reference).len()
}

#[test]
fn dense3_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    let n = against(
        "outtypes",
        |t| vec!["--dtype", t],
        "convert_hf_to_gguf.py --outtype",
    );
    assert_eq!(
        n, 16,
        "starcoder2, cohere, cohere_qk, gpt2 × 4 output types"
    );
}

#[test]
fn dense3_one_pass_quant_equals_convert_then_llama_quantize() {
    let n = against(
        "quantized",
        |q| vec!["--outtype", "f16", "--quant", q],
        "convert_hf_to_gguf.py --outtype f16 + llama-quantize",
    );
    assert_eq!(n, 4, "starcoder2, cohere, cohere_qk, gpt2 × Q4_K_M");
}

/// GPT-2's transposed weights computed in 700-byte chunks on 2 threads (chunks end inside output
/// rows and need a piece of every input row), as they are (F32), cast to F16 and quantized to
/// Q8_0: the reference's files.
#[test]
fn gpt2_transposed_in_small_chunks_is_the_same_file() {
    use weightport_core::DType;
    use weightport_engine::DtypeChoice;
    use weightport_engine::{convert as run, ConvertOptions};
    let exp = expected("dense3.json");
    let tmp = tempfile::tempdir().unwrap();
    for (t, dtype) in [
        ("f32", DType::F32),
        ("f16", DType::F16),
        ("q8_0", DType::Q8_0),
    ] {
        let out = tmp.path().join(format!("gpt2-{t}.gguf"));
        let mut o = ConvertOptions::new(vec![release("gpt2")], out.clone());
        o.chunk = 700;
        o.workers = weightport_engine::Workers::new(Some(2), None).unwrap();
        o.transform.dtype = DtypeChoice::To(dtype);
        o.transform.pre_tokenizer = Some("gpt-2".into());
        run(&o, &weightport_engine::NoProgress).unwrap();
        assert_eq!(
            sha_file(&out),
            exp["gpt2"]["outtypes"][t]["sha256"].as_str().unwrap(),
            "{t}"
        );
    }
}

/// GPT2Model reads `n_ctx`, which GPT2Config does not fill (GPT-2 releases carry it): without it
/// the reference fails, and the release is refused naming the key, before any output is written;
/// exit status non-zero, no panic.
#[test]
fn gpt2_without_n_ctx_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("gpt2", tmp.path(), "gpt2");
    edit_config(&dir, |m| {
        m.remove("n_ctx");
    });
    let out = tmp.path().join("out.gguf");
    let o = convert(&dir, &out, "gpt2", &["--dtype", "f16"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("n_ctx") && err.contains("config.json"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists(), "an output was left");
}

/// Adds an F32 tensor of zeros named `name` to the release in `dir`, in a shard of its own listed
/// in the index (a safetensors file: u64 header length, JSON header, data).
fn add_tensor(dir: &Path, name: &str, shape: &[u64]) {
    let n: u64 = shape.iter().product();
    let mut header = serde_json::json!({
        "__metadata__": {"format": "pt"},
        name: {"dtype": "F32", "shape": shape, "data_offsets": [0, n * 4]},
    })
    .to_string();
    while !header.len().is_multiple_of(8) {
        header.push(' ');
    }
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.resize(file.len() + (n * 4) as usize, 0);
    std::fs::write(dir.join("extra.safetensors"), file).unwrap();
    let p = dir.join("model.safetensors.index.json");
    let mut index: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    index["weight_map"][name] = "extra.safetensors".into();
    let total = index["metadata"]["total_size"].as_u64().unwrap() + n * 4;
    index["metadata"]["total_size"] = total.into();
    std::fs::write(&p, serde_json::to_vec_pretty(&index).unwrap()).unwrap();
}

/// Tensors the reference cannot name make it fail ("Can not map tensor"): GPT-2's causal-mask
/// buffer `attn.bias` of older releases (GPT2Model's "we don't need these" branch still maps the
/// name) and an untied `lm_head` of Command-R (its GGUF architecture has no `output`). Both are
/// refused naming the tensor, before any output is written.
#[test]
fn tensors_the_reference_cannot_map_are_refused() {
    for (name, tensor, shape) in [
        ("gpt2", "transformer.h.0.attn.bias", &[1u64, 1, 8, 8][..]),
        ("cohere", "lm_head.weight", &[368, 64][..]),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = copy_release(name, tmp.path(), name);
        add_tensor(&dir, tensor, shape);
        let out = tmp.path().join("out.gguf");
        let o = convert(&dir, &out, name, &["--dtype", "f16"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{name} with {tensor}");
        assert!(
            err.contains(tensor) && err.contains("no GGUF name"),
            "{name}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(!out.exists(), "{name}: an output was left");
    }
}
