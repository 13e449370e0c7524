//! HF release → GGUF for embedding encoders (issue 15), against llama.cpp's own tools. The tiny
//! releases of fixtures/good/arch (fixtures/gen/gen_arch_enc.py → fixtures/expected/arch/enc.json)
//! are converted by `weightport convert DIR -o OUT.gguf` and compared, as whole files, with the
//! sha256 of what the pinned reference wrote:
//! * `xlmr_st`: an `XLMRobertaModel` sentence-transformers release (bge-m3's shape: CLS pooling,
//!   Normalize) with a unigram `sentencepiece.bpe.model` trained by the `sentencepiece` package
//!   (a custom normalization table, so a precompiled charsmap): the reference's realigned `t5`
//!   vocabulary, `position_embd` without its first `pad_token_id + 1` rows, `context_length` 64
//!   of 66 positions, `pooling_type` CLS; `xlmr_st_nopad`, the same with `"pad_token_id": null`
//!   (every position row kept);
//! * `modernbert`: a `ModernBertModel` (fused `Wqkv`/`Wi`, no `attn_norm` in layer 0, sliding and
//!   global layers, GPT-2 BPE with the add-bos/eos/sep flags); `modernbert_eps`, the same
//!   release with `layer_norm_eps` in config.json, and `modernbert_legacy`, its config.json as
//!   transformers 4 wrote ModernBERT configs (`global_rope_theta`/`local_rope_theta` 80000/20000,
//!   `global_attn_every_n_layers`, no `layer_types`/`rope_parameters`), each made in a temporary
//!   directory of that name (`general.name` comes from it) as the generator made it.
//!
//! For each: `--dtype` f32/f16/bf16/q8_0 against `convert_hf_to_gguf.py --outtype`, and the
//! one-pass `--outtype f16 --quant Q4_K_M` against `convert_hf_to_gguf.py --outtype f16` +
//! `llama-quantize … Q4_K_M`. The reference's ModernBERT file without `layer_norm_eps` is refused
//! by llama-quantize and llama-embedding (its `norm_eps` is written only as
//! `layer_norm_rms_epsilon`, and llama.cpp's modern-bert loader requires `layer_norm_epsilon`):
//! that is recorded in enc.json and asserted here, so a change of the pinned tree shows.
//!
//! `llama-embedding` on our f16 files is compared with its output on the reference's when
//! `WEIGHTPORT_LLAMA_BIN` names a directory holding it (CI has no llama.cpp build).

use crate::common;
use common::arch::{self, copy_release, edit_json, expected, Case};
use common::wp;
use sha2::{Digest, Sha256};

use std::path::{Path, PathBuf};

use serde_json::Value;

fn enc() -> Value {
    expected("enc.json")
}

/// The pre-tokenizer name the generator gave the reference for the made-up BPE vocabulary.
fn pre(name: &str) -> Option<&'static str> {
    name.starts_with("modernbert").then_some("modern-bert")
}

fn convert(src: &Path, out: &Path, name: &str, extra: &[&str]) -> std::process::Output {
    arch::convert_output(src, out, pre(name), extra)
}

/// Every release of enc.json: the releases as committed, and each recorded variant re-made in
/// `tmp` (config.json with the recorded keys set and removed), named after its directory.
fn releases(tmp: &Path) -> Vec<Case> {
    let mut out = Vec::new();
    for (name, e) in enc().as_object().unwrap() {
        out.push(Case {
            dir: arch::release(name),
            name: name.clone(),
            pre: pre(name).map(str::to_owned),
            entry: e.clone(),
        });
        for v in e["variants"].as_array().into_iter().flatten() {
            let dir_name = v["dir_name"].as_str().unwrap();
            let dir = copy_release(name, tmp, dir_name);
            arch::edit_config(&dir, |c| {
                c.extend(v["config_set"].as_object().unwrap().clone());
                for k in v["config_removed"].as_array().unwrap() {
                    c.remove(k.as_str().unwrap());
                }
            });
            out.push(Case {
                dir,
                name: dir_name.to_owned(),
                pre: pre(dir_name).map(str::to_owned),
                entry: v.clone(),
            });
        }
    }
    out
}

/// Converts each release once per entry of its `section` (`args` makes the flags from the
/// entry's key) and compares the whole file with the reference's sha256.
fn against(section: &str, args: fn(&str) -> Vec<&str>) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    arch::against(&releases(tmp.path()), section, args, "the reference")
}

#[test]
fn encoder_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    let done = against("outtypes", |t| vec!["--dtype", t]);
    assert_eq!(
        done.len(),
        20,
        "xlmr_st, xlmr_st_nopad, modernbert, modernbert_eps, modernbert_legacy × 4 outtypes: {done:?}"
    );
}

#[test]
fn encoder_one_pass_quant_equals_convert_then_llama_quantize() {
    let done = against("quantized", |q| vec!["--outtype", "f16", "--quant", q]);
    assert_eq!(
        done,
        [
            "modernbert_eps Q4_K_M",
            "modernbert_legacy Q4_K_M",
            "xlmr_st Q4_K_M",
            "xlmr_st_nopad Q4_K_M"
        ],
        "the releases whose reference f16 file llama-quantize accepts"
    );
    // The pinned chain refuses the ModernBERT file without `layer_norm_eps`: no reference.
    let refused = &enc()["modernbert"]["quantize_refused"]["Q4_K_M"][0];
    assert!(
        refused
            .as_str()
            .unwrap()
            .contains("modern-bert.attention.layer_norm_epsilon"),
        "{refused}"
    );
}

/// llama.cpp's own embedding tool gives the same vectors for our f16 file as for the
/// reference's (a byte-identical file: this runs llama.cpp's loader, tokenizer and graph on it).
#[test]
#[ignore = "needs WEIGHTPORT_LLAMA_BIN: llama.cpp's tools, which CI does not build"]
fn llama_embedding_on_our_f16_equals_the_reference() {
    let Some(bin) = std::env::var_os("WEIGHTPORT_LLAMA_BIN").map(PathBuf::from) else {
        panic!(
            "WEIGHTPORT_LLAMA_BIN is not set: the directory of the pinned llama.cpp build's tools"
        );
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    for Case {
        dir, name, entry, ..
    } in releases(tmp.path())
    {
        let want = &entry["embedding"];
        let out = tmp.path().join(format!("{name}-f16.gguf"));
        assert!(convert(&dir, &out, &name, &["--dtype", "f16"])
            .status
            .success());
        let prompt = want["prompt"].as_str().unwrap();
        match want.get("sha256").and_then(Value::as_str) {
            Some(sha) => assert_eq!(embedding(&bin, &out, prompt).as_deref(), Ok(sha), "{name}"),
            None => assert!(embedding(&bin, &out, prompt).is_err(), "{name} loads now"),
        }
        n += 1;
    }
    assert_eq!(n, 5);
}

/// sha256 of `llama-embedding`'s stdout (retried while it is not a complete JSON array: this
/// build sometimes loses the end of its stdout at exit), or its stderr when it fails.
fn embedding(bin: &Path, model: &Path, prompt: &str) -> Result<String, String> {
    for _ in 0..40 {
        let o = std::process::Command::new(bin.join("llama-embedding"))
            .env("LD_LIBRARY_PATH", bin)
            .args(["-m", model.to_str().unwrap(), "-p", prompt, "-t", "1"])
            .args(["--embd-output-format", "array", "--no-warmup"])
            .output()
            .unwrap();
        if !o.status.success() {
            return Err(String::from_utf8_lossy(&o.stderr).into_owned());
        }
        if serde_json::from_slice::<Value>(&o.stdout).is_ok() {
            return Ok(format!("{:x}", Sha256::digest(&o.stdout)));
        }
    }
    panic!(
        "llama-embedding never printed a complete array for {}",
        model.display()
    );
}

/// What the reference cannot convert, or converts into something else, is refused naming the
/// file, before a weight is read.
#[test]
fn encoder_releases_the_gguf_cannot_hold_are_refused() {
    type Edit = fn(&Path);
    let cases: [(&str, &str, Edit, &str); 6] = [
        (
            "xlmr_st",
            "no sentencepiece.bpe.model",
            |d| std::fs::remove_file(d.join("sentencepiece.bpe.model")).unwrap(),
            "sentencepiece.bpe.model",
        ),
        (
            "xlmr_st",
            "a SentencePiece file that is not one",
            |d| std::fs::write(d.join("sentencepiece.bpe.model"), [0xffu8; 64]).unwrap(),
            "sentencepiece.bpe.model",
        ),
        (
            "xlmr_st",
            "jina-embeddings-v3's LoRA adaptations",
            |d| {
                edit_json(&d.join("config.json"), |c| {
                    c.insert("lora_adaptations".into(), serde_json::json!(["retrieval"]));
                })
            },
            "LoRA",
        ),
        (
            "xlmr_st",
            "fewer positions than pad_token_id + 1",
            |d| {
                edit_json(&d.join("config.json"), |c| {
                    c.insert("max_position_embeddings".into(), 1.into());
                })
            },
            "max_position_embeddings",
        ),
        (
            "xlmr_st",
            "a classifier's labels",
            |d| {
                edit_json(&d.join("config.json"), |c| {
                    let labels = serde_json::json!({"0": "neg", "1": "neutral", "2": "pos"});
                    c.insert("id2label".into(), labels);
                })
            },
            "id2label",
        ),
        (
            "modernbert",
            "a local_attention that is not a number",
            |d| {
                edit_json(&d.join("config.json"), |c| {
                    c.insert("local_attention".into(), "wide".into());
                })
            },
            "local_attention",
        ),
    ];
    for (name, what, edit, says) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = copy_release(name, tmp.path(), name);
        edit(&dir);
        let out = tmp.path().join("out.gguf");
        let o = convert(&dir, &out, name, &["--dtype", "f16"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains(says), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        assert!(!out.exists(), "{what}: wrote {}", out.display());
    }
}

/// XLM-RoBERTa's positions start after the padding id, whatever it is: `position_embd` keeps
/// rows `pad_token_id + 1..` and `context_length` shrinks by as many (the fixture's pad id 1 is
/// covered by the whole-file tests; here 9).
#[test]
fn xlm_roberta_positions_start_after_the_padding_id() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("xlmr_st", tmp.path(), "xlmr_st");
    edit_json(&dir.join("config.json"), |c| {
        c.insert("pad_token_id".into(), 9.into());
    });
    let out = tmp.path().join("x.gguf");
    let o = convert(&dir, &out, "xlmr_st", &["--dtype", "f16"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = wp(&["inspect", out.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["metadata"]["bert.context_length"], "56");
    let t = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "position_embd.weight")
        .unwrap();
    assert_eq!(t["shape"], serde_json::json!([56, 32]), "rows 10..66 of 66");
}
