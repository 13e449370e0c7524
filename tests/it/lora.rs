//! PEFT LoRA adapters (issue 31): `weightport convert ADAPTER_DIR -o adapter.gguf [--base DIR]`
//! against the pinned `convert_lora_to_gguf.py`, and the adapters it must refuse.
//!
//! The adapters (fixtures/good/lora, fixtures/hostile/lora) were written by peft 0.21.2's
//! `save_pretrained` on the tiny Llama and Qwen2 releases of fixtures/good/arch, their factors
//! set to seeded random values (peft starts B at zero); fixtures/gen/gen_lora.py recorded the
//! sha256 of the reference's output for each adapter and `--outtype` in
//! fixtures/expected/lora/gguf.json. Whole-file equality covers the KVs (the adapter's model
//! card, `adapter.lora.alpha`, no file type), the order, names, types (Q8_0 rows that fall back to
//! F16), the q/k permutation of B, the transposed embedding A and the layout.

use crate::common;
use common::arch::sha_file;
use common::{fixtures, wp};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use weightport_core::{DType, TensorSource};
use weightport_safetensors::SafetensorsFile;

fn expected() -> Value {
    let p = fixtures().join("expected/lora/gguf.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn good(name: &str) -> PathBuf {
    fixtures().join("good/lora").join(name)
}

fn hostile(name: &str) -> PathBuf {
    fixtures().join("hostile/lora").join(name)
}

fn convert(adapter: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "convert",
        adapter.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    wp(&args)
}

/// Every file under `dir` with its sha256.
fn hashes(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut v: Vec<(PathBuf, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let h = sha_file(&p);
            (p, h)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn adapters_are_byte_identical_to_convert_lora_to_gguf() {
    let exp = expected();
    let tmp = tempfile::tempdir().unwrap();
    let mut done = 0;
    for (name, entry) in exp["good"].as_object().unwrap() {
        if name == "llama_rs" {
            continue; // rsLoRA: refused below
        }
        let base = fixtures().join("..").join(entry["base"].as_str().unwrap());
        let before = hashes(&good(name));
        for (t, want) in entry["outtypes"].as_object().unwrap() {
            let out = tmp.path().join(format!("{name}.{t}.gguf"));
            let o = convert(
                &good(name),
                &out,
                &["--base", base.to_str().unwrap(), "--dtype", t],
            );
            assert!(
                o.status.success(),
                "{name} {t}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert_eq!(
                sha_file(&out),
                want["sha256"].as_str().unwrap(),
                "{name} --dtype {t} differs from convert_lora_to_gguf.py --outtype {t}"
            );
            done += 1;
        }
        assert_eq!(
            hashes(&good(name)),
            before,
            "{name}: the adapter was modified"
        );
    }
    // llama_qv, llama_all (every linear layer, a rank_pattern), qwen2_tied (BF16 factors, the
    // embedding's), each in f32, f16, bf16 and q8_0.
    assert_eq!(done, 12);
}

#[test]
fn the_base_is_found_from_base_model_name_or_path() {
    // The adapter records `fixtures/good/arch/llama`, relative to the repository root, where
    // the reference was run (it resolves the path as transformers does, from the working
    // directory).
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("qv.gguf");
    let o = Command::new(env!("CARGO_BIN_EXE_weightport"))
        .current_dir(fixtures().join(".."))
        .args(["convert", "fixtures/good/lora/llama_qv", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = &expected()["good"]["llama_qv"]["outtypes"]["f32"]["sha256"];
    assert_eq!(sha_file(&out), want.as_str().unwrap());

    // Elsewhere the relative path names nothing: the base must be given.
    let o = Command::new(env!("CARGO_BIN_EXE_weightport"))
        .current_dir(tmp.path())
        .args(["convert"])
        .arg(good("llama_qv"))
        .arg("-o")
        .arg(tmp.path().join("x.gguf"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("fixtures/good/arch/llama") && err.contains("--base"),
        "{err}"
    );
    assert!(!tmp.path().join("x.gguf").exists());
}

/// `(adapter dir, base release, exit code, words of the message)` for every adapter that
/// must be refused.
fn refusals() -> Vec<(PathBuf, &'static str, i32, &'static str)> {
    vec![
        (hostile("dora"), "llama", 1, "DoRA"),
        (
            hostile("modules_to_save"),
            "llama",
            1,
            "modules_to_save: lm_head",
        ),
        (hostile("lm_head_tied"), "qwen2", 1, "tie_word_embeddings"),
        (
            hostile("bad_shape"),
            "llama",
            3,
            "the factors make a [48, 64] update, the base model's weight is [64, 64]",
        ),
        (
            hostile("bad_rank"),
            "llama",
            3,
            "the rank of A [4, 64] (4) is not the rank of B [64, 3] (3)",
        ),
        (
            hostile("other_base"),
            "llama",
            3,
            "`model.layers.0.mlp.down_proj.weight`: refused: the factors make a [64, 96] update",
        ),
        (hostile("bin_payload"), "llama", 3, "posix.system"),
        (good("llama_rs"), "llama", 1, "rsLoRA"),
        // An adapter on another base of the same hidden size: the q/v shapes differ.
        (good("llama_qv"), "qwen2_tied_bin", 0, ""),
    ]
}

#[test]
fn hostile_and_unsupported_adapters_are_refused_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    for (adapter, base, code, words) in refusals() {
        if code == 0 {
            continue;
        }
        let before = hashes(&adapter);
        let out_dir = tmp.path().join(adapter.file_name().unwrap());
        std::fs::create_dir(&out_dir).unwrap();
        let out = out_dir.join("a.gguf");
        let base = fixtures().join("good/arch").join(base);
        let o = convert(&adapter, &out, &["--base", base.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{}: {err}", adapter.display());
        assert!(err.contains(words), "{}: {err}", adapter.display());
        assert!(
            std::fs::read_dir(&out_dir).unwrap().next().is_none(),
            "{}: something was written",
            adapter.display()
        );
        assert_eq!(hashes(&adapter), before);
    }
    assert!(!Path::new("/tmp/wp-lora-payload").exists());
}

#[test]
fn an_unsupported_base_architecture_is_refused_from_its_config() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir(&base).unwrap();
    std::fs::write(
        base.join("config.json"),
        r#"{"architectures": ["FooForCausalLM"], "hidden_size": 64}"#,
    )
    .unwrap();
    let out = tmp.path().join("a.gguf");
    let o = convert(&good("llama_qv"), &out, &["--base", base.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("architecture `FooForCausalLM` cannot be converted to GGUF"),
        "{err}"
    );
    assert!(!out.exists());

    // --base for an input that is no adapter is a usage error.
    let o = convert(
        &fixtures().join("good/arch/llama"),
        &out,
        &["--base", base.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(!out.exists());
}

// --merge-lora (issue 31 item 2): fixtures/expected/lora/merged/NAME is what
// `PeftModel.from_pretrained(base, adapter).merge_and_unload().save_pretrained(dir)` wrote.

/// Every tensor of the safetensors files in `dir`, by name: `(dtype, shape, bytes)`.
fn tensors_of(dir: &Path) -> std::collections::BTreeMap<String, (DType, Vec<u64>, Vec<u8>)> {
    let mut all = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "safetensors") {
            let f = SafetensorsFile::open(&p).unwrap();
            for (i, t) in f.tensors().iter().enumerate() {
                let b = f.bytes(i).unwrap().to_vec();
                all.insert(t.name.clone(), (t.dtype, t.shape.clone(), b));
            }
        }
    }
    all
}

/// `(elements, differing, differing by one unit in the last place)` of `got` against `want`.
fn ulps(got: &Path, want: &Path) -> (usize, usize, usize) {
    let (g, w) = (tensors_of(got), tensors_of(want));
    assert_eq!(g.keys().collect::<Vec<_>>(), w.keys().collect::<Vec<_>>());
    let (mut n, mut diff, mut one) = (0, 0, 0);
    for (name, (dt, shape, bytes)) in &w {
        let (gd, gs, gb) = &g[name];
        assert_eq!((gd, gs), (dt, shape), "{name}");
        let el = dt.elem_bytes().unwrap() as usize;
        for (x, y) in gb.chunks_exact(el).zip(bytes.chunks_exact(el)) {
            let bits = |b: &[u8]| b.iter().rev().fold(0i64, |a, &v| (a << 8) | i64::from(v));
            let d = (bits(x) - bits(y)).abs();
            n += 1;
            diff += usize::from(d != 0);
            one += usize::from(d == 1);
        }
    }
    (n, diff, one)
}

#[test]
fn merged_weights_equal_peft_merge_and_unload_element_by_element() {
    let tmp = tempfile::tempdir().unwrap();
    // llama_rs: every linear layer, rsLoRA, a rank and an alpha pattern, F32 factors into F16.
    // qwen2_tied: BF16 factors (PEFT loads them as float32) into BF16, the tied embedding's.
    for (base, adapter) in [("llama", "llama_rs"), ("qwen2", "qwen2_tied")] {
        let out = tmp.path().join(adapter);
        let o = wp(&[
            "convert",
            fixtures().join("good/arch").join(base).to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--merge-lora",
            good(adapter).to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let want = fixtures().join("expected/lora/merged").join(adapter);
        let (n, diff, one) = ulps(&out, &want);
        eprintln!("{adapter}: {n} elements, {diff} differ ({one} by 1 ulp)");
        assert!(n > 80_000);
        // The dot products are accumulated in order with fused multiply-adds, as torch's CPU
        // product does at these shapes: no difference at all.
        assert_eq!(
            diff, 0,
            "{adapter}: {diff} of {n} elements differ ({one} by 1 ulp)"
        );
    }
}

#[test]
fn a_bin_adapter_converts_and_merges_through_the_restricted_unpickler() {
    // fixtures/gen/gen_lora_bin.py: qwen2_tied saved by PEFT with safe_serialization=False
    // (adapter_model.bin, a torch.save ZIP of BF16 factors), the pinned convert_lora_to_gguf.py's
    // sha256 of it per outtype, and PEFT's merge of it, checked there to be merged/qwen2_tied.
    let exp: Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("expected/lora/bin.json")).unwrap())
            .unwrap();
    let adapter = good("qwen2_tied_bin");
    assert!(adapter.join("adapter_model.bin").is_file());
    assert!(!adapter.join("adapter_model.safetensors").exists());
    let base = fixtures().join("good/arch/qwen2");
    let before = hashes(&adapter);
    let tmp = tempfile::tempdir().unwrap();
    let outtypes = exp["outtypes"].as_object().unwrap();
    assert_eq!(outtypes.len(), 4);
    for (t, want) in outtypes {
        let out = tmp.path().join(format!("{t}.gguf"));
        let o = convert(
            &adapter,
            &out,
            &["--base", base.to_str().unwrap(), "--dtype", t],
        );
        assert!(
            o.status.success(),
            "{t}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(sha_file(&out), want["sha256"].as_str().unwrap(), "{t}");
    }
    let merged = tmp.path().join("merged");
    let o = wp(&[
        "convert",
        base.to_str().unwrap(),
        "-o",
        merged.to_str().unwrap(),
        "--merge-lora",
        adapter.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = fixtures().join(
        exp["peft_merge_equals"]
            .as_str()
            .unwrap()
            .trim_start_matches("fixtures/"),
    );
    let (n, diff, one) = ulps(&merged, &want);
    assert!(n > 80_000);
    assert_eq!(diff, 0, "{diff} of {n} elements differ ({one} by 1 ulp)");
    assert_eq!(hashes(&adapter), before, "the adapter was modified");
}

#[test]
fn two_adapters_with_a_scale_equal_peft_merging_them_one_after_the_other() {
    // fixtures/gen/gen_lora_multi.py: llama_all then llama_qv merged by PEFT into the tiny
    // Llama, each LoraLayer's scaling halved (`scale_layer(0.5)`); q_proj and v_proj take both
    // adapters, each sum rounded to F16 in turn.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("merged");
    let o = wp(&[
        "convert",
        fixtures().join("good/arch/llama").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--merge-lora",
        good("llama_all").to_str().unwrap(),
        "--merge-lora",
        good("llama_qv").to_str().unwrap(),
        "--lora-scale",
        "0.5",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = fixtures().join("expected/lora/merged/two_adapters_half");
    let (n, diff, one) = ulps(&out, &want);
    eprintln!("two adapters at 0.5: {n} elements, {diff} differ ({one} by 1 ulp)");
    assert!(n > 80_000);
    assert_eq!(diff, 0, "{diff} of {n} elements differ ({one} by 1 ulp)");
    // The reference is not one adapter's merge: without the second adapter, or at scale 1,
    // q_proj differs.
    for extra in [
        &["--lora-scale", "0.5"][..],
        &["--merge-lora", "llama_qv"][..],
    ] {
        let other = tmp.path().join(format!("other{}", extra[0]));
        let mut args = vec![
            "convert".to_string(),
            fixtures().join("good/arch/llama").display().to_string(),
            "-o".into(),
            other.display().to_string(),
            "--merge-lora".into(),
            good("llama_all").display().to_string(),
        ];
        if extra[0] == "--merge-lora" {
            args.extend(["--merge-lora".into(), good(extra[1]).display().to_string()]);
        } else {
            args.extend(extra.iter().map(|s| s.to_string()));
        }
        let o = wp(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let (_, diff, _) = ulps(&other, &want);
        assert!(diff > 1000, "{extra:?}: only {diff} elements differ");
    }
}

#[test]
fn merged_then_quantized_in_one_pass_equals_the_peft_merged_release_quantized() {
    // PEFT's merged weights are bit-identical to ours (above); as a release beside the base's
    // config and tokenizer, converted to Q4_K_M (a path equal to convert_hf_to_gguf.py +
    // llama-quantize, tests/hf_gguf.rs), it must give the one-pass file byte for byte.
    let tmp = tempfile::tempdir().unwrap();
    let peft = tmp.path().join("peft").join("llama");
    std::fs::create_dir_all(&peft).unwrap();
    let merged = fixtures().join("expected/lora/merged/llama_rs");
    for dir in [fixtures().join("good/arch/llama"), merged.clone()] {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_owned();
            let weights = name.to_string_lossy().starts_with("model");
            if (dir == merged) == weights {
                std::fs::copy(&p, peft.join(name)).unwrap();
            }
        }
    }
    let want = tmp.path().join("want.gguf");
    let o = wp(&[
        "convert",
        peft.to_str().unwrap(),
        "-o",
        want.to_str().unwrap(),
        "--quant",
        "Q4_K_M",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = tmp.path().join("got.gguf");
    let o = wp(&[
        "convert",
        fixtures().join("good/arch/llama").to_str().unwrap(),
        "-o",
        got.to_str().unwrap(),
        "--merge-lora",
        good("llama_rs").to_str().unwrap(),
        "--quant",
        "Q4_K_M",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(sha_file(&got), sha_file(&want));
}

#[test]
fn merges_that_do_not_fit_the_base_are_refused_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let llama = fixtures().join("good/arch/llama");
    for (adapter, code, words) in [
        (
            hostile("other_base"),
            3,
            "the factors make a [64, 96] update",
        ),
        (hostile("bad_rank"), 3, "is not the rank of B"),
        (hostile("dora"), 1, "DoRA"),
        (hostile("bin_payload"), 3, "posix.system"),
        (
            fixtures().join("good/arch/qwen2"),
            2,
            "not a PEFT LoRA adapter directory",
        ),
    ] {
        let out = tmp.path().join("out");
        let o = wp(&[
            "convert",
            llama.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--merge-lora",
            adapter.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{}: {err}", adapter.display());
        assert!(err.contains(words), "{}: {err}", adapter.display());
        assert!(!out.exists(), "{}", adapter.display());
    }
}

#[test]
fn an_adapter_beside_a_copy_of_the_base_config_is_still_an_adapter() {
    // Some adapters ship the base's config.json: the directory is still read as an adapter.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("llama_qv");
    std::fs::create_dir(&dir).unwrap();
    for e in std::fs::read_dir(good("llama_qv")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    let base = fixtures().join("good/arch/llama");
    std::fs::copy(base.join("config.json"), dir.join("config.json")).unwrap();
    let out = tmp.path().join("a.gguf");
    let o = convert(
        &dir,
        &out,
        &["--base", base.to_str().unwrap(), "--dtype", "f16"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = &expected()["good"]["llama_qv"]["outtypes"]["f16"]["sha256"];
    assert_eq!(sha_file(&out), want.as_str().unwrap());
}

/// `--lora-scale` must be a finite number: NaN, ±inf or a value that overflows f64 would write a
/// model of NaN/inf weights with exit 0 (it did before this test). Negative scales (subtracting
/// an adapter) are numbers like any other.
#[test]
fn a_lora_scale_that_is_not_a_finite_number_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let llama = fixtures().join("good/arch/llama");
    let adapter = good("llama_qv");
    let out = tmp.path().join("out.safetensors");
    for s in ["nan", "inf", "-inf", "1e999"] {
        let scale = format!("--lora-scale={s}");
        let o = wp(&[
            "convert",
            llama.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--merge-lora",
            adapter.to_str().unwrap(),
            &scale,
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{s}: {err}");
        assert!(err.contains("finite"), "{s}: {err}");
        assert!(!out.exists(), "{s}");
    }
    let o = wp(&[
        "convert",
        llama.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--merge-lora",
        adapter.to_str().unwrap(),
        "--lora-scale",
        "-0.5",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A `rank_pattern` rank of 0, below 0 or past 2^53 (no exact integer; a cast would saturate
/// it) is refused from adapter_config.json, for the adapter's conversion and for a merge
/// alike, and nothing is written (the product of rank-0 factors is also zeros, not a panic:
/// the engine's unit test).
#[test]
fn a_rank_pattern_of_zero_or_below_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let src = good("llama_qv");
    for (i, rank) in ["0", "-3", "1e300"].into_iter().enumerate() {
        let adapter = tmp.path().join(format!("adapter{i}"));
        std::fs::create_dir(&adapter).unwrap();
        for e in std::fs::read_dir(&src).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, adapter.join(p.file_name().unwrap())).unwrap();
        }
        let cfg_path = adapter.join("adapter_config.json");
        let mut cfg: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&cfg_path).unwrap()).unwrap();
        cfg["rank_pattern"] = serde_json::from_str(&format!(r#"{{"q_proj": {rank}}}"#)).unwrap();
        std::fs::write(&cfg_path, cfg.to_string()).unwrap();
        let base = fixtures().join("good/arch/llama");
        let out_dir = tmp.path().join(format!("out{i}"));
        std::fs::create_dir(&out_dir).unwrap();
        let runs = [
            convert(
                &adapter,
                &out_dir.join("a.gguf"),
                &["--base", base.to_str().unwrap()],
            ),
            convert(
                &base,
                &out_dir.join("m.safetensors"),
                &["--merge-lora", adapter.to_str().unwrap()],
            ),
        ];
        for o in runs {
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "rank {rank}: {err}");
            assert!(
                err.contains("rank_pattern[\"q_proj\"] is") && err.contains("not a positive"),
                "rank {rank}: {err}"
            );
            assert!(std::fs::read_dir(&out_dir).unwrap().next().is_none());
        }
    }
}
