//! Multimodal projectors (issue 31 item 3): `weightport convert RELEASE -o mmproj.gguf --mmproj`
//! against the pinned `convert_hf_to_gguf.py --mmproj`, and the releases it must refuse.
//!
//! The releases are the tiny vision-language releases of fixtures/good/arch (written by
//! transformers 5.24 `save_pretrained`, random weights) with the processor files the real
//! releases ship (fixtures/gen/gen_mmproj.py, which also recorded the sha256 of the reference's
//! output per `--outtype` in fixtures/expected/mmproj/files.json). transformers 5 saves
//! Gemma 3's SigLIP tower as `vision_tower.embeddings…`; the reference maps only the releases'
//! `vision_tower.vision_model.embeddings…`, so it was run on a copy renamed to that layout
//! (`renamed` in the expected file): weightport must give the same bytes from both layouts.
//! Whole-file equality covers every KV (the `clip.*` keys from config.json and the processor
//! files, the card's name and size label), the tensor order, names, types (the F16 projection
//! in an F32 file, F32 embeddings, Q8_0 fallbacks), `1 + w` of the soft embedding norm and the
//! layout.

use crate::common;
use common::arch::{self, copy_release, edit_config, edit_json, sha_file};
use common::fixtures;

use std::path::Path;
use std::process::Output;

use serde_json::{json, Map, Value};

fn expected() -> Value {
    let p = fixtures().join("expected/mmproj/files.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

pub(crate) fn mmproj(src: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["--mmproj"];
    args.extend(extra);
    arch::convert_output(src, out, None, &args)
}

/// Renames the tensors of every safetensors file (and the index) of `dir`: a name starting with
/// a key of `renames` gets its value instead (the releases' layout, as the generator made it for
/// the reference). Offsets are relative to the data, so only the header changes.
fn rename_tensors(dir: &Path, renames: &Map<String, Value>) {
    let rename = |n: &str| -> String {
        for (from, to) in renames {
            let to = to.as_str().unwrap();
            if n.starts_with(from.as_str()) && !n.starts_with(to) {
                return format!("{to}{}", &n[from.len()..]);
            }
        }
        n.to_owned()
    };
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "safetensors") {
            let b = std::fs::read(&p).unwrap();
            let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
            let header: Map<String, Value> = serde_json::from_slice(&b[8..8 + n]).unwrap();
            let header: Map<String, Value> =
                header.into_iter().map(|(k, v)| (rename(&k), v)).collect();
            let mut h = serde_json::to_vec(&header).unwrap();
            while !h.len().is_multiple_of(8) {
                h.push(b' ');
            }
            let mut out = (h.len() as u64).to_le_bytes().to_vec();
            out.extend(h);
            out.extend(&b[8 + n..]);
            std::fs::write(&p, out).unwrap();
        }
    }
    edit_json(&dir.join("model.safetensors.index.json"), |m| {
        let map = m["weight_map"].as_object().unwrap().clone();
        m["weight_map"] = Value::Object(map.into_iter().map(|(k, v)| (rename(&k), v)).collect());
    });
}

/// Converts release `dir` with `--mmproj` for every recorded output type; returns how many
/// files equal the reference's.
fn against_reference(name: &str, dir: &Path, entry: &Value, tmp: &Path, tag: &str) -> usize {
    let mut n = 0;
    for (t, want) in entry["outtypes"].as_object().unwrap() {
        let out = tmp.join(format!("mmproj-{name}-{tag}-{t}.gguf"));
        let o = mmproj(dir, &out, &["--dtype", t]);
        assert!(
            o.status.success(),
            "{name} {tag} {t}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            sha_file(&out),
            want["sha256"].as_str().unwrap(),
            "{name} ({tag} layout) --dtype {t} differs from convert_hf_to_gguf.py --mmproj --outtype {t}"
        );
        n += 1;
    }
    n
}

/// The releases whose projector weightport converts (the expected file records the reference's
/// outputs for more).
const CONVERTED: &[&str] = &[
    "gemma3_mm",
    "qwen25vl_mm",
    "qwen3vl",
    "llava_pixtral",
    "mistral3_mm",
    "idefics3",
    "smolvlm2",
];

#[test]
fn projectors_are_byte_identical_to_convert_hf_to_gguf_mmproj() {
    let exp = expected();
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    for name in CONVERTED {
        let entry = &exp[name];
        // The layout transformers 5 saved (the directory keeps the release's name: it is
        // `general.name`).
        let (saved_dir, real_dir) = (tmp.path().join("saved"), tmp.path().join("release"));
        std::fs::create_dir_all(&saved_dir).unwrap();
        std::fs::create_dir_all(&real_dir).unwrap();
        let saved = copy_release(name, &saved_dir, name);
        n += against_reference(name, &saved, entry, tmp.path(), "saved");
        // The releases' layout, the one the reference read.
        let renames = entry["renamed"].as_object().unwrap();
        if !renames.is_empty() {
            let real = copy_release(name, &real_dir, name);
            rename_tensors(&real, renames);
            n += against_reference(name, &real, entry, tmp.path(), "release");
        }
    }
    assert_eq!(
        n, 32,
        "gemma3_mm × f32/f16/bf16/q8_0 × two layouts, six others × f32/f16/bf16/q8_0"
    );
}

/// The text model of the same releases (processor files and all) still converts as the
/// reference's text converter does (fixtures/expected/arch/dense.json, archs4.json).
#[test]
fn the_text_model_of_a_vision_release_converts_as_before() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, file, pre) in [
        ("gemma3_mm", "dense.json", None),
        ("qwen3vl", "archs4.json", Some("qwen2")),
        ("qwen25vl_mm", "", Some("qwen2")),
        ("mistral3_mm", "", Some("tekken")),
    ] {
        let want = match file {
            // Made by gen_mmproj.py, which recorded its text model too.
            "" => expected()[name]["text"]["f16"]["sha256"].clone(),
            _ => arch::expected(file)[name]["outtypes"]["f16"]["sha256"].clone(),
        };
        let out = tmp.path().join(format!("{name}-text.gguf"));
        arch::convert(&arch::release(name), &out, pre, &["--dtype", "f16"]);
        assert_eq!(sha_file(&out), want.as_str().unwrap(), "{name}");
    }
}

/// A refusal: non-zero exit `code`, stderr naming `file` and `field`, nothing written.
pub(crate) fn refused(dir: &Path, code: i32, file: &str, field: &str) {
    let out = dir.parent().unwrap().join("out.gguf");
    let o = mmproj(dir, &out, &["--dtype", "f16"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert!(err.contains(file), "names {file}: {err}");
    assert!(err.contains(field), "names {field}: {err}");
    assert!(!out.exists(), "nothing is written");
    let leftovers: Vec<_> = std::fs::read_dir(dir.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != dir.file_name().unwrap())
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temporary file left: {leftovers:?}"
    );
}

/// A copy of the Gemma 3 release in its own directory, with `edit` applied.
fn hostile(edit: impl FnOnce(&Path)) -> (tempfile::TempDir, std::path::PathBuf) {
    hostile_copy("gemma3_mm", edit)
}

/// A copy of release `name` in its own directory, with `edit` applied.
pub(crate) fn hostile_copy(
    name: &str,
    edit: impl FnOnce(&Path),
) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release(name, tmp.path(), name);
    edit(&dir);
    (tmp, dir)
}

/// Replaces the weights by garbage: a refusal that comes before any weight is read still
/// names the configuration, not a tensor file.
pub(crate) fn garble_weights(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "safetensors") {
            std::fs::write(&p, b"not safetensors").unwrap();
        }
    }
}

#[test]
fn a_release_without_processor_files_is_refused() {
    let (_t, dir) = hostile(|d| {
        std::fs::remove_file(d.join("preprocessor_config.json")).unwrap();
        std::fs::remove_file(d.join("processor_config.json")).unwrap();
        garble_weights(d);
    });
    refused(&dir, 1, "preprocessor_config.json", "missing");
}

#[test]
fn garbled_processor_files_are_refused() {
    let (_t, dir) = hostile(|d| {
        std::fs::write(
            d.join("preprocessor_config.json"),
            b"{\"image_mean\": [0.5,",
        )
        .unwrap();
        garble_weights(d);
    });
    refused(&dir, 1, "preprocessor_config.json", "not valid JSON");
    let (_t, dir) = hostile(|d| {
        std::fs::write(d.join("processor_config.json"), b"[1, 2]").unwrap();
    });
    refused(&dir, 1, "processor_config.json", "not a JSON object");
    for (bad, field) in [
        (json!("0.5"), "image_mean"),
        (json!([]), "image_mean"),
        (json!([0.5, "x", 0.5]), "image_mean"),
        (json!(vec![0.5; 100]), "image_mean"),
    ] {
        let (_t, dir) = hostile(|d| {
            edit_json(&d.join("preprocessor_config.json"), |m| {
                m.insert("image_mean".into(), bad.clone());
            });
        });
        refused(&dir, 1, "preprocessor_config.json", field);
    }
    let (_t, dir) = hostile(|d| {
        edit_json(&d.join("preprocessor_config.json"), |m| {
            m.remove("image_std");
        });
    });
    refused(&dir, 1, "preprocessor_config.json", "image_std");
}

#[test]
fn absurd_sizes_and_a_tower_without_layers_are_refused() {
    for (key, value) in [
        ("patch_size", json!(0)),
        ("patch_size", json!(64)),
        ("image_size", json!(1u64 << 40)),
        ("image_size", json!(-32)),
        ("num_hidden_layers", json!(0)),
        ("num_hidden_layers", json!(1_000_000)),
        ("hidden_size", json!("32")),
    ] {
        let (_t, dir) = hostile(|d| {
            edit_config(d, |m| {
                m["vision_config"][key] = value.clone();
            });
            garble_weights(d);
        });
        refused(&dir, 1, "config.json", &format!("vision_config.{key}"));
    }
    // Python's `int(0 ** 0.5)` divides by zero in the reference.
    let (_t, dir) = hostile(|d| {
        for f in ["preprocessor_config.json", "processor_config.json"] {
            edit_json(&d.join(f), |m| {
                m.insert("image_seq_length".into(), json!(0));
            });
        }
    });
    refused(&dir, 1, "_config.json", "image_seq_length");
}

/// Qwen3-VL's aliases are named as config.json names them (`depth`, `num_heads`); deepstack
/// indexes past the tower (an IndexError in the reference) are refused.
#[test]
fn absurd_qwen3_vl_configs_are_refused() {
    for (key, value) in [
        ("depth", json!(0)),
        ("num_heads", json!(null)),
        ("num_position_embeddings", json!(0)),
        ("deepstack_visual_indexes", json!([2])),
        ("deepstack_visual_indexes", json!("1")),
        ("spatial_merge_size", json!(-2)),
    ] {
        let (_t, dir) = hostile_copy("qwen3vl", |d| {
            edit_config(d, |m| {
                m["vision_config"][key] = value.clone();
            });
            garble_weights(d);
        });
        refused(&dir, 1, "config.json", &format!("vision_config.{key}"));
    }
}

/// Qwen2.5-VL: a window attention pattern the reference rejects, another `model_type` (Qwen2-VL's
/// projector differs).
#[test]
fn absurd_qwen25_vl_releases_are_refused() {
    for (key, value) in [
        ("fullatt_block_indexes", json!([0, 2, 3])),
        ("fullatt_block_indexes", json!([])),
        ("fullatt_block_indexes", json!([7])),
    ] {
        let (_t, dir) = hostile_copy("qwen25vl_mm", |d| {
            edit_config(d, |m| {
                m["vision_config"][key] = value.clone();
            });
            garble_weights(d);
        });
        refused(&dir, 1, "config.json", &format!("vision_config.{key}"));
    }
    let (_t, dir) = hostile_copy("qwen25vl_mm", |d| {
        edit_config(d, |m| {
            m["model_type"] = json!("qwen2_vl");
        });
        garble_weights(d);
    });
    refused(&dir, 1, "config.json", "model_type");
}

/// A Qwen2.5-VL tower of one block: the reference fails on the merger ("Can not map tensor
/// 'visual.merger.mlp.2.bias'": it maps the merger's index as a vision block); weightport
/// writes the merger under the names llama.cpp reads (`mm.0`, `mm.2`), with the tensors the
/// four-block release's file holds for one block.
#[test]
fn a_one_block_qwen25_vl_tower_converts_where_the_reference_fails() {
    let exp = expected();
    assert!(exp["qwen25vl"]["refused"]["f16"]
        .as_str()
        .unwrap()
        .contains("visual.merger.mlp.2.bias"));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("one.gguf");
    let o = mmproj(&arch::release("qwen25vl"), &out, &["--dtype", "f16"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let f = weightport_gguf::open(&out, &Default::default()).unwrap();
    let names: Vec<String> = weightport_core::TensorSource::tensors(&f)
        .iter()
        .map(|t| t.name.clone())
        .collect();
    for n in [
        "mm.0.weight",
        "mm.2.bias",
        "v.patch_embd.weight.1",
        "v.blk.0.attn_v.weight",
    ] {
        assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
    }
    assert_eq!(
        names.len(),
        7 + 16,
        "the merger and patch embedding, one block"
    );
}

#[test]
fn weights_missing_a_vision_layer_are_refused() {
    let (_t, dir) = hostile(|d| {
        edit_config(d, |m| m["vision_config"]["num_hidden_layers"] = json!(2));
    });
    refused(&dir, 1, "config.json", "announces 2 vision layers");
}

/// A LLaVA release with a CLIP tower (transformers 5.24, gen_mmproj.py `llava_clip`): the reference
/// refuses it ("Unsupported model type: clip_vision_model", recorded); so does weightport, with
/// that reason, exit 3, before reading a weight.
#[test]
fn a_clip_tower_llava_is_refused_as_the_reference_refuses_it() {
    let exp = expected();
    for t in ["f32", "f16", "bf16", "q8_0"] {
        assert_eq!(
            exp["llava_clip"]["refused"][t].as_str().unwrap(),
            "ValueError: Unsupported model type: clip_vision_model"
        );
    }
    let (_t, dir) = hostile_copy("llava_clip", garble_weights);
    refused(&dir, 3, "config.json", "Unsupported model type");
    refused(&dir, 3, "config.json", "clip_vision_model");
}

#[test]
fn a_release_without_a_projector_family_is_refused_before_its_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("llama", tmp.path(), "llama");
    garble_weights(&dir);
    refused(&dir, 1, "config.json", "has no multimodal projector");
}

#[test]
fn a_projector_is_asked_of_a_release_going_to_gguf() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.safetensors");
    let o = mmproj(&arch::release("gemma3_mm"), &out, &[]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!out.exists());
    let out = tmp.path().join("out.gguf");
    let o = mmproj(&arch::release("gemma3_mm"), &out, &["--quant", "Q4_K_M"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!out.exists());
}

/// llama.cpp's `llama-mtmd-cli` loads each projector beside its text model (both written by
/// weightport) and encodes an image with it (a 64×64 PPM; random tiny towers say nothing
/// worth judging, so only the load and the encode are checked).
#[test]
#[ignore = "needs WEIGHTPORT_LLAMA_BIN: llama.cpp's tools, which CI does not build"]
fn llama_mtmd_cli_encodes_an_image_with_our_projectors() {
    let bin: std::path::PathBuf = std::env::var_os("WEIGHTPORT_LLAMA_BIN")
        .expect("WEIGHTPORT_LLAMA_BIN: the directory of the pinned llama.cpp build's tools")
        .into();
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("image.ppm");
    let mut ppm = b"P6\n64 64\n255\n".to_vec();
    ppm.extend((0..64 * 64 * 3).map(|i| (i * 7 % 251) as u8));
    std::fs::write(&image, ppm).unwrap();
    for (name, pre) in [
        ("gemma3_mm", None),
        ("qwen25vl_mm", Some("qwen2")),
        ("qwen3vl", Some("qwen2")),
    ] {
        let (text, proj) = (
            tmp.path().join(format!("{name}.gguf")),
            tmp.path().join(format!("mmproj-{name}.gguf")),
        );
        arch::convert(&arch::release(name), &text, pre, &["--dtype", "f16"]);
        let o = mmproj(&arch::release(name), &proj, &["--dtype", "f16"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let o = std::process::Command::new(bin.join("llama-mtmd-cli"))
            .env("LD_LIBRARY_PATH", &bin)
            .args([
                "-m",
                text.to_str().unwrap(),
                "--mmproj",
                proj.to_str().unwrap(),
            ])
            .args([
                "--image",
                image.to_str().unwrap(),
                "-p",
                "describe",
                "-n",
                "2",
                "-t",
                "1",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{name}: {err}");
        assert!(err.contains("mtmd batch encoding done"), "{name}: {err}");
    }
}
