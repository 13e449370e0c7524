//! `--imatrix` against the pinned llama.cpp (fixtures/gen/gen_imatrix.py,
//! fixtures/expected/imatrix/reference.json): the tiny 256-row Llama release is rebuilt from its
//! generator (sha256 of the safetensors file and of the F16 GGUF llama-quantize saw asserted),
//! then every file type is converted GGUF → GGUF with the importance matrix llama-imatrix
//! computed, and one-pass from the release, and the whole files' sha256 compared with
//! `llama-quantize --imatrix`'s; the refusals without an importance matrix (exit 3, the tensor
//! llama-quantize names) and `--dry-run`'s per-tensor types are checked too.

use crate::common;

use std::path::Path;
use std::process::Output;

use common::arch::sha_file;
use serde_json::Value;
use sha2::{Digest, Sha256};

const IMATRIX: &str = "fixtures/good/imatrix/imatrix.gguf";
const IMATRIX_DAT: &str = "fixtures/good/imatrix/imatrix.dat";

pub(crate) fn reference() -> Value {
    let p = common::fixtures().join("expected/imatrix/reference.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// Runs weightport from the repository root, so relative paths are the ones
/// llama-quantize was given (it records `--imatrix`'s path in the output).
fn wp(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_weightport"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .expect("run weightport")
}

fn ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// splitmix64, as fixtures/gen/gen_imatrix.py `values()`.
fn values(index: u64, count: u64) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(index + 1);
    let mut out = Vec::with_capacity(count as usize * 2);
    for _ in 0..count {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let k = ((z >> 32) % 2048) as i64 - 1024;
        let scale = if z.is_multiple_of(64) {
            2f32.powi(-10)
        } else {
            2f32.powi(-14)
        };
        // Exact in F16: |k| < 2^11 steps of at least 2^-14.
        out.extend_from_slice(&half::f16::from_f32(k as f32 * scale).to_le_bytes());
    }
    out
}

/// (name, shape) of the release, sorted by name (the generator's order).
fn tensors() -> Vec<(String, Vec<u64>)> {
    let (h, i, kv, v) = (256, 256, 128, 560);
    let mut out = vec![
        ("lm_head.weight".to_string(), vec![v, h]),
        ("model.embed_tokens.weight".into(), vec![v, h]),
        ("model.norm.weight".into(), vec![h]),
    ];
    for l in 0..8 {
        let p = format!("model.layers.{l}.");
        for (n, s) in [
            ("input_layernorm.weight", vec![h]),
            ("mlp.down_proj.weight", vec![h, i]),
            ("mlp.gate_proj.weight", vec![i, h]),
            ("mlp.up_proj.weight", vec![i, h]),
            ("post_attention_layernorm.weight", vec![h]),
            ("self_attn.k_proj.weight", vec![kv, h]),
            ("self_attn.o_proj.weight", vec![h, h]),
            ("self_attn.q_proj.weight", vec![h, h]),
            ("self_attn.v_proj.weight", vec![kv, h]),
        ] {
            out.push((format!("{p}{n}"), s));
        }
    }
    out.sort();
    out
}

/// The release's safetensors file, byte for byte as the generator writes it.
fn safetensors_bytes() -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (idx, (name, shape)) in tensors().iter().enumerate() {
        let n: u64 = shape.iter().product();
        let b = if name.ends_with("norm.weight") {
            half::f16::ONE.to_le_bytes().repeat(n as usize)
        } else {
            values(idx as u64, n)
        };
        let entry = serde_json::json!({"dtype": "F16", "shape": shape,
            "data_offsets": [data.len(), data.len() + b.len()]});
        header.insert(name.clone(), entry);
        data.extend_from_slice(&b);
    }
    let mut head = serde_json::to_vec(&header).unwrap();
    head.resize(head.len().div_ceil(8) * 8, b' ');
    let mut out = (head.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&head);
    out.extend_from_slice(&data);
    out
}

/// The release in `dir`/hf and its F16 GGUF in `dir`/f16.gguf, both checked against the
/// reference's sha256.
pub(crate) fn release(dir: &Path, r: &Value) -> (std::path::PathBuf, std::path::PathBuf) {
    let hf = dir.join("hf");
    std::fs::create_dir_all(&hf).unwrap();
    for f in [
        "config.json",
        "tokenizer.model",
        "tokenizer_config.json",
        "special_tokens_map.json",
    ] {
        std::fs::copy(
            common::fixtures().join("good/imatrix/hf").join(f),
            hf.join(f),
        )
        .unwrap();
    }
    let st = safetensors_bytes();
    std::fs::write(hf.join("model.safetensors"), &st).unwrap();
    assert_eq!(
        format!("{:x}", Sha256::digest(&st)),
        r["safetensors_sha256"].as_str().unwrap(),
        "the generator of tests/it/imatrix.rs differs from gen_imatrix.py's"
    );
    let f16 = dir.join("f16.gguf");
    let o = wp(&[
        "convert",
        hf.to_str().unwrap(),
        "-o",
        f16.to_str().unwrap(),
        "--dtype",
        "f16",
    ]);
    ok(&o, "HF → F16 GGUF");
    assert_eq!(
        sha_file(&f16),
        r["f16_gguf_sha256"].as_str().unwrap(),
        "the F16 GGUF differs from convert_hf_to_gguf.py's, which llama-quantize read"
    );
    (hf, f16)
}

fn quantize_equals(input: &Path, out: &Path, ty: &str, extra: &[&str], want: &str, what: &str) {
    let mut args = vec![
        "convert",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--quant",
        ty,
        "--force",
    ];
    args.extend_from_slice(extra);
    ok(&wp(&args), &format!("{what} {ty}"));
    assert_eq!(
        sha_file(out),
        want,
        "{what} {ty}: differs from llama-quantize --imatrix"
    );
}

#[test]
fn imatrix_quantizations_equal_llama_quantize() {
    let r = reference();
    let tmp = tempfile::tempdir().unwrap();
    let (hf, f16) = release(tmp.path(), &r);
    let out = tmp.path().join("out.gguf");
    let types = r["quant"].as_object().unwrap();
    for t in [
        "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S",
        "IQ3_M", "IQ4_XS", "IQ4_NL", "Q2_K_S", "Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M", "Q8_0",
    ] {
        assert!(types.contains_key(t), "no llama-quantize reference for {t}");
    }
    for (ty, want) in types {
        let want = want.as_str().unwrap();
        quantize_equals(&f16, &out, ty, &["--imatrix", IMATRIX], want, "GGUF→GGUF");
    }
    for (ty, want) in r["quant_dat"].as_object().unwrap() {
        let want = want.as_str().unwrap();
        quantize_equals(&f16, &out, ty, &["--imatrix", IMATRIX_DAT], want, ".dat");
    }
    for (case, want) in r["quant_filtered"].as_object().unwrap() {
        // "include ffn_down IQ4_XS": the flag, its pattern, the type.
        let words: Vec<&str> = case.split(' ').collect();
        let flag = format!("--{}-weights", words[0]);
        let extra = ["--imatrix", IMATRIX, flag.as_str(), words[1]];
        let want = want.as_str().unwrap();
        quantize_equals(&f16, &out, words[2], &extra, want, case);
    }
    // One pass from the release: convert_hf_to_gguf.py f16 + llama-quantize --imatrix.
    for ty in ["Q8_0", "Q4_K_M", "IQ4_XS"] {
        let want = r["quant"][ty].as_str().unwrap();
        quantize_equals(&hf, &out, ty, &["--imatrix", IMATRIX], want, "HF→GGUF");
    }
}

#[test]
fn without_an_imatrix_the_low_bit_types_are_refused_as_llama_quantize_refuses_them() {
    let r = reference();
    let tmp = tempfile::tempdir().unwrap();
    let (_, f16) = release(tmp.path(), &r);
    let out = tmp.path().join("out.gguf");
    let (f, o) = (f16.to_str().unwrap(), out.to_str().unwrap());
    for (ty, want) in r["refusals"].as_object().unwrap() {
        let res = wp(&["convert", f, "-o", o, "--quant", ty, "--force"]);
        if want["exit"] == 0 {
            ok(&res, ty);
            assert_eq!(
                sha_file(&out),
                want["sha256"].as_str().unwrap(),
                "{ty} without imatrix"
            );
            continue;
        }
        let err = String::from_utf8_lossy(&res.stderr);
        assert_eq!(res.status.code(), Some(3), "{ty}: {err}");
        let tensor = want["tensor"].as_str().unwrap();
        let target = want["target"].as_str().unwrap().to_ascii_uppercase();
        assert!(
            err.contains(&format!("tensor `{tensor}`"))
                && err.contains("requires an importance matrix")
                && err.contains(&format!("as {target} in a {ty} file")),
            "{ty}: {err}"
        );
        assert!(!out.exists(), "{ty}: nothing is written");
    }
    // With an imatrix lacking the tensor: llama-quantize's "missing importance matrix".
    let res = wp(&[
        "convert",
        f,
        "-o",
        o,
        "--quant",
        "IQ2_XXS",
        "--imatrix",
        IMATRIX,
        "--exclude-weights",
        "attn_k",
        "--force",
    ]);
    let err = String::from_utf8_lossy(&res.stderr);
    assert_eq!(res.status.code(), Some(3), "{err}");
    assert!(
        err.contains(
            "missing importance matrix for tensor `blk.0.attn_k.weight` in a very low-bit"
        ),
        "{err}"
    );
}

#[test]
fn dry_run_lists_types_bpw_and_imatrix_coverage() {
    let r = reference();
    let tmp = tempfile::tempdir().unwrap();
    let (_, f16) = release(tmp.path(), &r);
    let out = tmp.path().join("out.gguf");
    let (f, o) = (f16.to_str().unwrap(), out.to_str().unwrap());
    for (ty, want) in r["dry_run"].as_object().unwrap() {
        let res = wp(&[
            "--json",
            "convert",
            f,
            "-o",
            o,
            "--quant",
            ty,
            "--imatrix",
            IMATRIX,
            "--dry-run",
        ]);
        ok(&res, ty);
        let doc: Value = serde_json::from_slice(&res.stdout).unwrap();
        if let Some(py) = common::python_with_jsonschema() {
            let schema = common::fixtures().join("../docs/json/convert.schema.json");
            common::validate_json(&py, &schema, &res.stdout, "convert --dry-run --imatrix");
        }
        for t in doc["plan"].as_array().unwrap() {
            let name = t["name"].as_str().unwrap();
            let Some(w) = want.get(name) else {
                assert!(t["imatrix"].is_null(), "{ty} {name}");
                continue;
            };
            let dtype = t["dtype"].as_str().unwrap();
            assert!(
                dtype.eq_ignore_ascii_case(w.as_str().unwrap()),
                "{ty} {name}"
            );
            let has = !matches!(name, "output.weight" | "token_embd.weight");
            assert_eq!(t["imatrix"], has, "{ty} {name}");
            assert!(t["bpw"].as_f64().unwrap() > 0.0);
        }
        let im = &doc["imatrix"];
        assert_eq!(im["file"], IMATRIX);
        assert_eq!(im["entries"], 56);
        assert_eq!(im["unused_entries"].as_array().unwrap().len(), 0);
        assert_eq!(
            im["without_data"],
            serde_json::json!(["output.weight", "token_embd.weight"])
        );
        assert!(!out.exists(), "a dry run writes nothing");
    }
}

/// A python with numpy and gguf (`WEIGHTPORT_PYTHON`, else `python3`), or `None` with a note.
fn python_with_gguf() -> Option<String> {
    let py = std::env::var("WEIGHTPORT_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = std::process::Command::new(&py)
        .args(["-c", "import numpy, gguf"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI's python must have numpy and gguf"
        );
        eprintln!("SKIPPED the weighted quality check: no python with numpy and gguf");
    }
    ok.then_some(py)
}

#[test]
fn weighted_quality_figures_equal_numpy() {
    let r = reference();
    let tmp = tempfile::tempdir().unwrap();
    let (_, f16) = release(tmp.path(), &r);
    let out = tmp.path().join("q8.gguf");
    let o = wp(&[
        "--json",
        "convert",
        f16.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--quant",
        "Q8_0",
        "--imatrix",
        IMATRIX_DAT,
    ]);
    ok(&o, "Q8_0 --imatrix --json");
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let weighted = doc["transforms"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["quality"]["weighted_rmse"].is_number())
        .count();
    assert_eq!(
        weighted, 56,
        "every tensor with importance data reports weighted figures"
    );
    if let Some(py) = common::python_with_jsonschema() {
        let schema = common::fixtures().join("../docs/json/convert.schema.json");
        common::validate_json(&py, &schema, &o.stdout, "convert --quant --imatrix --json");
    }
    let Some(py) = python_with_gguf() else { return };
    let report = tmp.path().join("report.json");
    std::fs::write(&report, &o.stdout).unwrap();
    let check = std::process::Command::new(py)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tests/imatrix_quality_check.py",
            f16.to_str().unwrap(),
            out.to_str().unwrap(),
            IMATRIX_DAT,
            report.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

/// Entries naming no tensor of the output and quantized tensors without data are reported;
/// an entry of another size is refused naming the tensor llama-quantize names ("imatrix size
/// 256 is different from tensor size 160 for blk.0.attn_k.weight", pinned llama-quantize on
/// the same files).
#[test]
fn coverage_is_reported_and_a_foreign_imatrix_refused() {
    let model = common::fixtures().join("good/gguf-mix/llama10_256.f16.gguf");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.gguf");
    let o = wp(&[
        "--json",
        "convert",
        model.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--quant",
        "Q8_0",
        "--imatrix",
        IMATRIX,
        "--rename",
        r"s/^blk\.7\./blk.17./",
        "--dry-run",
    ]);
    ok(&o, "coverage");
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let im = &doc["imatrix"];
    let names = |k: &str| -> Vec<String> {
        im[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    let unused = names("unused_entries");
    assert_eq!(unused.len(), 7);
    assert!(unused.iter().all(|n| n.starts_with("blk.7.")), "{unused:?}");
    let without = names("without_data");
    assert_eq!(without.len(), 2 + 3 * 7, "{without:?}");
    for n in [
        "output.weight",
        "token_embd.weight",
        "blk.9.ffn_down.weight",
        "blk.17.attn_q.weight",
    ] {
        assert!(without.iter().any(|w| w == n), "{n}");
    }
    let model = common::fixtures().join("good/gguf-mix/llama3_160_tied.f16.gguf");
    let o = wp(&[
        "convert",
        model.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--quant",
        "Q8_0",
        "--imatrix",
        IMATRIX,
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("tensor `blk.0.attn_k.weight`") && err.contains("has 256 values"),
        "{err}"
    );
}

/// `--attest` records the importance matrix (path as given, sha256 of its bytes) in the recipe.
#[test]
fn the_attestation_records_the_imatrix() {
    let model = common::fixtures().join("good/gguf-mix/llama10_256.f16.gguf");
    let tmp = tempfile::tempdir().unwrap();
    let (out, att) = (tmp.path().join("m.gguf"), tmp.path().join("m.intoto.json"));
    let o = wp(&[
        "convert",
        model.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--quant",
        "Q8_0",
        "--imatrix",
        IMATRIX_DAT,
        "--exclude-weights",
        "ffn",
        "--attest",
        att.to_str().unwrap(),
    ]);
    ok(&o, "--attest");
    let st: Value = serde_json::from_slice(&std::fs::read(&att).unwrap()).unwrap();
    let opts = &st["predicate"]["recipe"]["options"];
    assert_eq!(opts["imatrix"]["path"], IMATRIX_DAT);
    let want = sha_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join(IMATRIX_DAT));
    assert_eq!(opts["imatrix"]["sha256"], want.as_str());
    assert_eq!(opts["exclude_weights"], serde_json::json!(["ffn"]));
}

/// A non-finite importance value is refused as llama-quantize refuses it ("imatrix contains
/// non-finite value"), naming the entry and the value's byte offset; an excluded entry's is not
/// looked at (llama-quantize checks after filtering).
#[test]
fn non_finite_importance_values_are_refused() {
    let dat = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(IMATRIX_DAT)).unwrap();
    let len = u32::from_le_bytes(dat[4..8].try_into().unwrap()) as usize;
    let name = String::from_utf8(dat[8..8 + len].to_vec()).unwrap();
    let value_at = 8 + len + 8 + 4 * 3;
    let mut bad = dat.clone();
    bad[value_at..value_at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    let tmp = tempfile::tempdir().unwrap();
    let im = tmp.path().join("nan.dat");
    std::fs::write(&im, &bad).unwrap();
    let model = common::fixtures().join("good/gguf-mix/llama10_256.f16.gguf");
    let out = tmp.path().join("m.gguf");
    let (m, o, i) = (
        model.to_str().unwrap(),
        out.to_str().unwrap(),
        im.to_str().unwrap(),
    );
    let res = wp(&["convert", m, "-o", o, "--quant", "Q8_0", "--imatrix", i]);
    let err = String::from_utf8_lossy(&res.stderr);
    assert_eq!(res.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("tensor `{name}` (byte {value_at})")) && err.contains("NaN"),
        "{err}"
    );
    let res = wp(&[
        "convert",
        m,
        "-o",
        o,
        "--quant",
        "Q8_0",
        "--imatrix",
        i,
        "--exclude-weights",
        &name,
    ]);
    ok(&res, "the entry excluded");
}

/// `--include-weights`/`--exclude-weights` are plain substrings, as llama-quantize's
/// `name.find(s)`: `attn_.` names no tensor (a regex would match every attention tensor),
/// `attn_k` drops exactly the attn_k entries.
#[test]
fn weight_filters_are_substrings_as_llama_quantize() {
    let r = reference();
    let tmp = tempfile::tempdir().unwrap();
    let (_, f16) = release(tmp.path(), &r);
    let out = tmp.path().join("out.gguf");
    let plan = |pattern: &str| -> Vec<(String, Value)> {
        let res = wp(&[
            "--json",
            "convert",
            f16.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--quant",
            "Q4_K_M",
            "--imatrix",
            IMATRIX,
            "--exclude-weights",
            pattern,
            "--dry-run",
        ]);
        ok(&res, pattern);
        let doc: Value = serde_json::from_slice(&res.stdout).unwrap();
        doc["plan"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["name"].as_str().unwrap().to_string(),
                    t["imatrix"].clone(),
                )
            })
            .collect()
    };
    for (name, has) in plan("attn_.") {
        if name.contains("attn_") && name.ends_with(".weight") && !name.contains("norm") {
            assert_eq!(has, true, "`attn_.` is no regex: {name} keeps its data");
        }
    }
    let mut dropped = 0;
    for (name, has) in plan("attn_k") {
        if name.contains("attn_k.") {
            assert_eq!(has, false, "{name}");
            dropped += 1;
        } else if name.contains("attn_q.") {
            assert_eq!(has, true, "{name}");
        }
    }
    assert_eq!(dropped, 8, "one attn_k per layer of the 8-layer model");
}

/// The executor cuts tensors at its hash leaves, which need not fall on rows, while an
/// importance-weighted row is quantized whole (the legacy and IQ4_NL types take σ² over the
/// row). In small chunks (IQ4_NL's 144-byte rows in 234-byte leaves; Q4_K_M's and IQ2_XXS's
/// rows are one leaf) every type still equals llama-quantize --imatrix.
#[test]
fn pieces_that_cut_rows_give_llama_quantizes_bytes() {
    use std::sync::Arc;
    use weightport_engine::mix::{Ftype, QuantOptions};
    use weightport_engine::{convert as run, ConvertOptions};
    let r = reference();
    let tmp = tempfile::tempdir().unwrap();
    let (_, f16) = release(tmp.path(), &r);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let limits = weightport_core::Limits::default();
    let im = weightport_engine::importance::load(&root.join(IMATRIX), IMATRIX, &[], &[], &limits)
        .unwrap();
    let im = Arc::new(im);
    for ty in ["IQ4_NL", "IQ3_M", "IQ2_XXS", "Q4_K_M"] {
        let want = r["quant"][ty].as_str().unwrap();
        let out = tmp.path().join(format!("small-{ty}.gguf"));
        let mut o = ConvertOptions::new(vec![f16.clone()], out.clone());
        o.chunk = 1000;
        o.workers = weightport_engine::Workers::new(Some(2), None).unwrap();
        let mut q = QuantOptions::new(Ftype::parse(ty).unwrap());
        q.imatrix = Some(im.clone());
        o.transform.quant = Some(q);
        run(&o, &weightport_engine::NoProgress).unwrap();
        assert_eq!(sha_file(&out), want, "{ty} in 1000-byte chunks");
    }
}
