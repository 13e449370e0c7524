//! `weightport edit` against torch doing the same edit on a loaded copy (issue 32).
//!
//! fixtures/expected/edit/cases.json (fixtures/gen/gen_edit.py, torch 2.15) lists each case's
//! arguments and torch's outcome: the file `save_file` writes for the tensors torch edited (the
//! edited target must equal it byte for byte), or the error torch raised (the edit must be
//! refused with exit 1 or 2 naming the tensor, and the file left byte-identical).

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{fixtures, wp};
use serde_json::Value;

fn edit_dir() -> PathBuf {
    fixtures().join("good/edit")
}

fn cases() -> Vec<Value> {
    let p = fixtures().join("expected/edit/cases.json");
    let v: Value = serde_json::from_slice(&fs::read(p).unwrap()).unwrap();
    v["cases"].as_array().unwrap().clone()
}

/// The case's arguments with the aux file names made absolute.
fn args_of(case: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = case["args"].as_array().unwrap().iter();
    while let (Some(flag), Some(val)) = (it.next(), it.next()) {
        let (flag, val) = (flag.as_str().unwrap(), val.as_str().unwrap());
        out.push(flag.to_string());
        out.push(match flag {
            "--set" => val.to_string(),
            _ => edit_dir().join(val).to_string_lossy().into_owned(),
        });
    }
    out
}

fn run_edit(target: &Path, extra: &[String]) -> std::process::Output {
    let mut a: Vec<&str> = vec!["edit", target.to_str().unwrap()];
    a.extend(extra.iter().map(String::as_str));
    wp(&a)
}

/// One case on a fresh copy of its target: the outcome torch had.
fn check_case(case: &Value, tmp: &Path) -> Result<(), String> {
    let id = case["id"].as_str().unwrap();
    let src = edit_dir().join(case["target"].as_str().unwrap());
    let target = tmp.join(format!("{id}.safetensors"));
    fs::copy(&src, &target).unwrap();
    let out = run_edit(&target, &args_of(case));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let got = fs::read(&target).unwrap();
    if let Some(err) = case["torch_error"].as_str() {
        let code = out.status.code();
        if code == Some(0) || code.is_none() {
            return Err(format!(
                "{id}: torch refused ({err}) but edit exited {code:?}"
            ));
        }
        let name = case["args"][1].as_str().unwrap().split('[').next().unwrap();
        if !stderr.contains(&format!("`{name}`")) && !stderr.contains(name) {
            return Err(format!(
                "{id}: refusal does not name tensor {name}: {stderr}"
            ));
        }
        if got != fs::read(&src).unwrap() {
            return Err(format!("{id}: refused, but the file changed"));
        }
        return Ok(());
    }
    if !out.status.success() {
        return Err(format!("{id}: edit failed where torch did not: {stderr}"));
    }
    let want = fs::read(
        fixtures()
            .join("expected/edit")
            .join(case["expected"].as_str().unwrap()),
    )
    .unwrap();
    if got != want {
        let at = got.iter().zip(&want).position(|(a, b)| a != b);
        return Err(format!(
            "{id}: differs from torch's save_file (first differing byte {at:?}, len {} vs {})",
            got.len(),
            want.len()
        ));
    }
    Ok(())
}

#[test]
fn every_case_equals_torch_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let all = cases();
    assert!(all.len() > 100, "the fixture lists {} cases", all.len());
    let failures: Vec<String> = all
        .iter()
        .filter_map(|c| check_case(c, tmp.path()).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from torch:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}

#[test]
fn dry_run_changes_nothing_and_reports_the_ranges() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("t.safetensors");
    fs::copy(edit_dir().join("base.safetensors"), &target).unwrap();
    let before = fs::read(&target).unwrap();
    let out = wp(&[
        "--json",
        "edit",
        target.to_str().unwrap(),
        "--set",
        "f16[1:3]=0",
        "--dry-run",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(fs::read(&target).unwrap(), before);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["tensors"][0]["name"], "f16");
    assert_eq!(v["tensors"][0]["elements"].as_u64(), Some(16));
    let dir: Vec<_> = fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(dir.len(), 1, "a dry run leaves no side file");
}

#[test]
fn repo_edit_changes_one_shard_as_torch_does() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    fs::create_dir(&repo).unwrap();
    for e in fs::read_dir(edit_dir().join("repo")).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), repo.join(e.file_name())).unwrap();
    }
    let out = wp(&[
        "edit",
        repo.to_str().unwrap(),
        "--set",
        "f16[1:3]=0",
        "--set",
        "bf16[:, 0]=-inf",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s2 = "model-00002-of-00002.safetensors";
    let want = fs::read(fixtures().join("expected/edit").join(format!("repo-{s2}"))).unwrap();
    assert_eq!(fs::read(repo.join(s2)).unwrap(), want);
    for f in [
        "model-00001-of-00002.safetensors",
        "model.safetensors.index.json",
    ] {
        assert_eq!(
            fs::read(repo.join(f)).unwrap(),
            fs::read(edit_dir().join("repo").join(f)).unwrap(),
            "{f} changed"
        );
    }
    let left: Vec<_> = fs::read_dir(&repo).unwrap().collect();
    assert_eq!(left.len(), 3, "no journal left behind");
}

/// `diff`'s figures against numpy's (fixtures/expected/edit/diff.json: the base against
/// edited files, with and without a tolerance, and against numpy's own .npz).
#[test]
fn diff_figures_equal_numpys() {
    let p = fixtures().join("expected/edit/diff.json");
    let v: Value = serde_json::from_slice(&fs::read(p).unwrap()).unwrap();
    let mut bad = Vec::new();
    for pair in v["pairs"].as_array().unwrap() {
        let (a, b) = (
            fixtures().join(pair["a"].as_str().unwrap()),
            fixtures().join(pair["b"].as_str().unwrap()),
        );
        let mut args = vec![
            "--json".to_string(),
            "diff".into(),
            a.display().to_string(),
            b.display().to_string(),
        ];
        for t in ["atol", "rtol"] {
            if let Some(x) = pair[t].as_f64() {
                args.extend([format!("--{t}"), x.to_string()]);
            }
        }
        let o = wp(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(
            o.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let got: Value = serde_json::from_slice(&o.stdout).unwrap();
        let got: std::collections::HashMap<&str, &Value> = got["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap(), t))
            .collect();
        for (name, want) in pair["tensors"].as_object().unwrap() {
            let what = format!("{} vs {} {name}", pair["a"], pair["b"]);
            let Some(g) = got.get(name.as_str()) else {
                bad.push(format!("{what}: missing"));
                continue;
            };
            if g["status"] != want["status"] {
                bad.push(format!(
                    "{what}: status {} want {}",
                    g["status"], want["status"]
                ));
                continue;
            }
            if want["status"] != "changed" && want["status"] != "dtype_changed" {
                continue;
            }
            for k in ["changed", "rows", "nonfinite"] {
                if g[k] != want[k] {
                    bad.push(format!("{what}: {k} {} want {}", g[k], want[k]));
                }
            }
            for k in ["max_abs", "max_rel"] {
                let (x, y) = (g[k].as_f64(), want[k].as_f64().unwrap());
                if x.is_none_or(|x| (x - y).abs() > 1e-12 * y.abs()) {
                    bad.push(format!("{what}: {k} {} want {y}", g[k]));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// `slice` writes what numpy's `np.save` (and safetensors' `save_file`, and gguf-py's
/// dequantization of Q4_K/Q6_K rows) write for the same selection, byte for byte.
#[test]
fn slices_equal_numpy_save_file_and_gguf_py() {
    let p = fixtures().join("expected/edit/slice.json");
    let v: Value = serde_json::from_slice(&fs::read(p).unwrap()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut bad = Vec::new();
    for c in v["cases"].as_array().unwrap() {
        let want_name = c["expected"].as_str().unwrap();
        let ext = Path::new(want_name).extension().unwrap().to_str().unwrap();
        let out = tmp.path().join(format!("out.{ext}"));
        let _ = fs::remove_file(&out);
        let input = fixtures().join(c["input"].as_str().unwrap());
        let sel = c["sel"].as_str().unwrap();
        let o = wp(&[
            "slice",
            input.to_str().unwrap(),
            sel,
            "-o",
            out.to_str().unwrap(),
        ]);
        if !o.status.success() {
            bad.push(format!("{sel}: {}", String::from_utf8_lossy(&o.stderr)));
            continue;
        }
        let want = fs::read(fixtures().join("expected/edit/slice").join(want_name)).unwrap();
        if fs::read(&out).unwrap() != want {
            bad.push(format!("{sel}: differs from {want_name}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn slice_refuses_out_of_bounds_and_an_existing_output() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o.npy");
    let base = edit_dir().join("base.safetensors");
    let b = base.to_str().unwrap();
    for sel in [
        "f32[6]",
        "f32[0:9]",
        "f32[:, :, 1]",
        "missing[0]",
        "f32[1:1]",
    ] {
        let o = wp(&["slice", b, sel, "-o", out.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{sel}");
        let e = String::from_utf8_lossy(&o.stderr);
        let name = sel.split('[').next().unwrap();
        assert!(e.contains(name), "{sel}: {e}");
        assert!(!out.exists(), "{sel} wrote an output");
    }
    fs::write(&out, b"keep").unwrap();
    let o = wp(&["slice", b, "f32[0]", "-o", out.to_str().unwrap()]);
    assert_ne!(o.status.code(), Some(0));
    assert_eq!(fs::read(&out).unwrap(), b"keep");
}

/// A real fine-tune pair (a tiny Llama before and after 3 AdamW steps, transformers'
/// save_pretrained): the patch holds only the changed rows, applying it to a copy of OLD gives
/// NEW byte for byte, and a base other than OLD is refused with nothing changed.
#[test]
fn delta_and_apply_round_trip_a_real_fine_tune() {
    let tmp = tempfile::tempdir().unwrap();
    let ft = edit_dir().join("finetune");
    let (old, new) = (
        ft.join("old/model.safetensors"),
        ft.join("new/model.safetensors"),
    );
    let patch = tmp.path().join("patch.safetensors");
    let o = wp(&[
        "--json",
        "delta",
        old.to_str().unwrap(),
        new.to_str().unwrap(),
        "-o",
        patch.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let model = fs::metadata(&new).unwrap().len();
    let patch_len = fs::metadata(&patch).unwrap().len();
    // 5 of 256 embedding rows and the 16 rows of one 16x16 o_proj changed (~1.5 KB of 27 KB).
    assert!(
        patch_len * 8 < model,
        "patch {patch_len} of a {model}-byte model"
    );
    let target = tmp.path().join("model.safetensors");
    fs::copy(&old, &target).unwrap();
    let o = wp(&[
        "edit",
        target.to_str().unwrap(),
        "--apply",
        patch.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(fs::read(&target).unwrap(), fs::read(&new).unwrap());
    // Applied again (the base is now NEW) and to another file: refused, nothing changed.
    for base in [target.clone(), {
        let other = tmp.path().join("other.safetensors");
        fs::copy(edit_dir().join("base.safetensors"), &other).unwrap();
        other
    }] {
        let before = fs::read(&base).unwrap();
        let o = wp(&[
            "edit",
            base.to_str().unwrap(),
            "--apply",
            patch.to_str().unwrap(),
        ]);
        assert_ne!(o.status.code(), Some(0));
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains("patch") && e.contains("nothing was changed"),
            "{e}"
        );
        assert_eq!(fs::read(&base).unwrap(), before);
    }
}

/// GGUF in place: F32/F16/BF16 slices and whole quantized rows (Q8_0 quantized as gguf-py
/// quantizes, Q4_K rows zeroed), against the file gguf-py's reader and quantizer make
/// (fixtures/expected/edit/gguf_edit.json); a slice that cuts a quantized row is refused.
#[test]
fn gguf_edits_equal_gguf_py_and_cut_rows_are_refused() {
    let p = fixtures().join("expected/edit/gguf_edit.json");
    let v: Value = serde_json::from_slice(&fs::read(p).unwrap()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("t.gguf");
    let src = fixtures().join(v["input"].as_str().unwrap());
    fs::copy(&src, &target).unwrap();
    let strs = |a: &Value| -> Vec<String> {
        a.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    for r in v["refused"].as_array().unwrap() {
        let o = run_edit(&target, &strs(r));
        assert_eq!(
            o.status.code(),
            Some(3),
            "{r}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(String::from_utf8_lossy(&o.stderr).contains("cuts rows"));
        assert_eq!(fs::read(&target).unwrap(), fs::read(&src).unwrap());
    }
    let o = run_edit(&target, &strs(&v["args"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = fs::read(fixtures().join("expected/edit/gguf_edit.gguf")).unwrap();
    let got = fs::read(&target).unwrap();
    let at = got.iter().zip(&want).position(|(a, b)| a != b);
    assert!(got == want, "differs from gguf-py's file at byte {at:?}");
    // Whole Q8_0 rows replaced from F32 rows: quantized as gguf-py's quantizer does.
    fs::copy(&src, &target).unwrap();
    let mut a = strs(&v["replace_args"]);
    a[1] = edit_dir().join(&a[1]).to_string_lossy().into_owned();
    let o = run_edit(&target, &a);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = fs::read(
        fixtures()
            .join("expected/edit")
            .join(v["replace_expected"].as_str().unwrap()),
    )
    .unwrap();
    assert!(
        fs::read(&target).unwrap() == want,
        "--replace differs from gguf-py's Q8_0 rows"
    );
}

/// A patch whose block bytes were changed after `delta` wrote it (one flipped byte in its data)
/// no longer makes the file it names: refused before a byte is written.
#[test]
fn a_tampered_patch_is_refused_and_nothing_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let ft = edit_dir().join("finetune");
    let (old, new) = (
        ft.join("old/model.safetensors"),
        ft.join("new/model.safetensors"),
    );
    let patch = tmp.path().join("patch.safetensors");
    let o = wp(&[
        "delta",
        old.to_str().unwrap(),
        new.to_str().unwrap(),
        "-o",
        patch.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut b = fs::read(&patch).unwrap();
    let last = b.len() - 1;
    b[last] ^= 0x01;
    fs::write(&patch, &b).unwrap();
    let target = tmp.path().join("model.safetensors");
    fs::copy(&old, &target).unwrap();
    let o = wp(&[
        "edit",
        target.to_str().unwrap(),
        "--apply",
        patch.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("does not make the file"));
    assert_eq!(fs::read(&target).unwrap(), fs::read(&old).unwrap());
}

/// `slice` reads only the bytes of the selection (the safetensors `get_slice` behaviour): rows
/// of a tensor are one contiguous read, a column box one read per row.
#[test]
fn slice_reads_only_the_selected_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let base = edit_dir().join("base.safetensors");
    for (sel, want) in [("f64[2:4]", 2 * 8 * 8), ("f32[1:3, 2:5]", 2 * 3 * 4)] {
        let out = tmp.path().join("o.npy");
        let _ = fs::remove_file(&out);
        let o = wp(&[
            "--json",
            "slice",
            base.to_str().unwrap(),
            sel,
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["bytes_read"].as_u64(), Some(want), "{sel}: {v}");
    }
}

/// `diff` across formats and sharding: the `llama` release as transformers wrote it (safetensors
/// shards) against the same tensors saved by torch.save as `.bin` shards in the state dict's order
/// (fixtures/gen/gen_arch_files.py) compares tensor by tensor by name: all 21 the same, exit 0;
/// against gguf-py's v2 copy of its own v3 file, the same; a release against another model's
/// release differs (exit 1, `--json` says so).
#[test]
fn diff_across_formats_and_sharding() {
    let arch = fixtures().join("good/arch");
    let o = wp(&[
        "diff",
        arch.join("llama_bin").to_str().unwrap(),
        arch.join("llama").to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["equal"], true, "{v}");
    assert_eq!(v["counts"]["same"], 21, "{v}");
    assert_eq!(
        (v["a"]["format"].as_str(), v["b"]["format"].as_str()),
        (Some("pytorch-zip"), Some("safetensors"))
    );
    let gguf = fixtures().join("good/gguf");
    let o = wp(&[
        "diff",
        gguf.join("py_tensors.gguf").to_str().unwrap(),
        gguf.join("py_tensors_v2.gguf").to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = wp(&[
        "diff",
        arch.join("llama").to_str().unwrap(),
        arch.join("mistral").to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}
