//! HF release → GGUF for Gemma 3n's text model (issue 30 item 4: `Gemma3nForCausalLM` →
//! `gemma3n`), against the pinned `convert_hf_to_gguf.py`. The tiny release
//! (fixtures/gen/gen_arch_gemma3n.py: transformers 5.24's `Gemma3nForCausalLM`, random weights,
//! 3 layers of 128 with the widths llama.cpp fixes (per-layer inputs 256, laurel rank 64, 4 altup
//! inputs), the last sharing KV, activation sparsity 0.95/0.95/0, a per-layer embedding of
//! 64 rows for a 560-token vocabulary; `gemma2/`'s SentencePiece tokenizer) is converted by
//! `weightport convert DIR -o OUT.gguf --dtype T` and compared, as a whole file, with the sha256
//! of what the reference wrote (fixtures/expected/arch/altup.json) for f32, f16, bf16 and q8_0:
//! the two altup stacks, the embeddings padded with zero rows to `vocab_size`, the per-layer
//! `feed_forward_length` array, the sparsity scales and the sliding-window pattern included; and
//! the same text model as `Gemma3nForConditionalGeneration` writes it (`model.language_model.*`
//! beside an audio tower, the vision/audio embedders and a stand-in vision tower, all dropped).

use std::path::Path;

use crate::common;
use common::arch::{self, copy_release, edit_config, edit_tensor, expected, sha_file};

fn pre(name: &str) -> Option<&'static str> {
    match name {
        "gemma3n" | "gemma3n_mm" => None,
        other => panic!("no release {other}"),
    }
}

const TABLE: arch::Table = arch::Table {
    file: "altup.json",
    releases: &["gemma3n", "gemma3n_mm"],
    pre,
};

#[test]
fn gemma3n_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    TABLE.outtypes_match_the_reference();
}

/// One-pass `--quant Q4_K_M` equals the reference's f16 file run through the pinned
/// `llama-quantize` (recorded by the generator; no llama.cpp needed here).
#[test]
fn gemma3n_one_pass_quant_equals_convert_then_llama_quantize() {
    TABLE.one_pass_quant_matches_llama_quantize();
}

/// llama.cpp runs our f16 file and continues the prompt as it continues the reference's (8 ×
/// `<unk>` for both, a weak check on this random 3-layer release; docs/design-notes.md, "Gemma 3n
/// text").
#[test]
#[ignore = "needs WEIGHTPORT_LLAMA_BIN: llama.cpp's tools, which CI does not build"]
fn gemma3n_llama_simple_continues_like_the_reference() {
    TABLE.llama_simple_continues_like_the_reference();
}

/// config.json without the per-layer lists (`intermediate_size` one integer, no
/// `activation_sparsity_pattern`, no `layer_types`): transformers' defaults, as the reference
/// reads them (a list of widths, zero sparsity, every 5th layer full), give its file.
#[test]
fn gemma3n_with_transformers_default_lists_equals_the_reference() {
    let want = &expected("altup.json")["gemma3n"]["defaults"]["f16"]["sha256"];
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("gemma3n", tmp.path(), "gemma3n_defaults");
    edit_config(&dir, |m| {
        m.insert("intermediate_size".into(), 192.into());
        m.remove("activation_sparsity_pattern");
        m.remove("layer_types");
    });
    let out = tmp.path().join("defaults-f16.gguf");
    arch::convert(&dir, &out, None, &["--dtype", "f16"]);
    assert_eq!(sha_file(&out), want.as_str().unwrap());
}

/// [`arch::refused`] with this release's pre-tokenizer.
fn refused(dir: &Path, out: &Path, words: &[&str]) -> String {
    arch::refused(dir, out, None, words)
}

/// A fresh copy of the release in its own directory under `tmp`.
fn copy(tmp: &Path, sub: &str) -> std::path::PathBuf {
    let parent = tmp.join(sub);
    std::fs::create_dir(&parent).unwrap();
    copy_release("gemma3n", &parent, "gemma3n")
}

/// Other than 4 altup inputs: the reference asserts 4; refused from config.json, naming it.
#[test]
fn gemma3n_other_altup_input_counts_are_refused_from_config() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy(tmp.path(), "a");
    edit_config(&dir, |m| {
        m.insert("altup_num_inputs".into(), 3.into());
    });
    let out = tmp.path().join("out.gguf");
    refused(&dir, &out, &["altup_num_inputs = 3", "config.json"]);
}

/// A missing altup projection is refused naming it (the reference would leave the stack out
/// and llama.cpp could not load the file); one of another shape naming it and both shapes; a
/// fourth one naming it.
#[test]
fn gemma3n_missing_misshapen_or_extra_altup_projections_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy(tmp.path(), "a");
    // Each part is alone in its shard: the shard goes with it.
    let shard = shard_of(&dir, "model.altup_projections.1.weight");
    edit_tensor(&dir, "model.altup_projections.1.weight", None);
    std::fs::remove_file(dir.join(shard)).unwrap();
    let out = tmp.path().join("a.gguf");
    refused(&dir, &out, &["model.altup_projections.1.weight"]);

    let dir = copy(tmp.path(), "b");
    let name = "model.altup_unembed_projections.2.weight";
    edit_tensor(&dir, name, Some(("BF16", &[128, 64], &[0; 128 * 64 * 2])));
    let out = tmp.path().join("b.gguf");
    refused(&dir, &out, &[name, "[128, 64]", "[128, 128]"]);

    let dir = copy(tmp.path(), "c");
    let name = "model.altup_projections.0.weight";
    // A fourth part, added beside the first in its shard (then the index's total recomputed).
    add_tensor(&dir, name, "model.altup_projections.3.weight");
    let payload = vec![0u8; 128 * 128 * 2];
    edit_tensor(&dir, name, Some(("BF16", &[128, 128], &payload)));
    let out = tmp.path().join("c.gguf");
    refused(
        &dir,
        &out,
        &["model.altup_projections.3.weight", "exactly 3"],
    );
}

/// Per-layer lists that do not have one entry per layer are refused naming the key.
#[test]
fn gemma3n_per_layer_lists_of_the_wrong_length_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, key) in ["intermediate_size", "activation_sparsity_pattern"]
        .into_iter()
        .enumerate()
    {
        let dir = copy(tmp.path(), &format!("d{i}"));
        edit_config(&dir, |m| {
            let v = m[key].as_array().unwrap()[..2].to_vec();
            m.insert(key.into(), v.into());
        });
        let out = tmp.path().join(format!("d{i}.gguf"));
        refused(&dir, &out, &[key, "3 layers"]);
    }
}

/// The shard the index names for tensor `name`.
fn shard_of(dir: &Path, name: &str) -> String {
    let index = std::fs::read(dir.join("model.safetensors.index.json")).unwrap();
    let index: serde_json::Value = serde_json::from_slice(&index).unwrap();
    index["weight_map"][name].as_str().unwrap().to_owned()
}

/// Adds tensor `new` to the shard of `like`, a copy of its entry and bytes (index updated).
fn add_tensor(dir: &Path, like: &str, new: &str) {
    let index = dir.join("model.safetensors.index.json");
    let mut shard = String::new();
    arch::edit_json(&index, |m| {
        let map = m["weight_map"].as_object_mut().unwrap();
        shard = map[like].as_str().unwrap().to_owned();
        map.insert(new.into(), shard.clone().into());
    });
    let path = dir.join(&shard);
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut data = bytes[8 + n..].to_vec();
    let mut entry = header[like].clone();
    let o = entry["data_offsets"].clone();
    let (a, b) = (
        o[0].as_u64().unwrap() as usize,
        o[1].as_u64().unwrap() as usize,
    );
    let start = data.len();
    data.extend_from_within(a..b);
    entry["data_offsets"] = serde_json::json!([start, data.len()]);
    header.insert(new.into(), entry);
    let mut h = serde_json::to_vec(&header).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut file = (h.len() as u64).to_le_bytes().to_vec();
    file.extend(h);
    file.extend(data);
    std::fs::write(&path, file).unwrap();
}
