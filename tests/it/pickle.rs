//! PyTorch checkpoints through `convert`: every fixture written by torch 2.15 becomes a
//! safetensors file whose tensors have the bytes `torch.load(weights_only=True)` gives
//! (fixtures/expected/pickle, sha256 of each tensor's contiguous bytes), with exact aliases
//! (tied weights) kept once and recorded in `__metadata__` as convert.py does; the sharded
//! `.bin` repo becomes a safetensors repo equal to the checkpoint; the hostile corpus is
//! refused by `convert` and `scan` with exit 3.

use crate::common;
use common::{fixtures, wp};

use serde_json::Value;
use sha2::{Digest, Sha256};
use weightport_core::TensorSource;
use weightport_safetensors::SafetensorsFile;

#[test]
fn checkpoints_convert_to_what_torch_load_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    for e in std::fs::read_dir(fixtures().join("expected/pickle")).unwrap() {
        let want: Value =
            serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap();
        let file = want["file"].as_str().unwrap();
        if want.get("weightport").is_some() || file.contains("bin_repo") {
            continue; // refused on purpose (complex128), or checked as a repo below
        }
        let src = fixtures().join(file);
        let out = tmp.path().join(format!("{n}.safetensors"));
        let select: Vec<&str> = want["select"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        let key = select.join(".");
        let mut args = vec![
            "convert",
            src.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        if select.len() > 1 {
            args.extend(["--key", key.as_str()]);
        }
        let o = wp(&args);
        assert!(
            o.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let got = SafetensorsFile::open(&out).unwrap();
        let dropped: Vec<(&str, &str)> = want["aliases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[1].as_str().unwrap(), p[0].as_str().unwrap()))
            .collect();
        for t in want["tensors"].as_array().unwrap() {
            let name = t["name"].as_str().unwrap();
            if let Some((_, kept)) = dropped.iter().find(|(d, _)| *d == name) {
                let kept_in = got.metadata().get(name).and_then(|v| v.as_str());
                assert_eq!(kept_in, Some(*kept), "{file}: alias `{name}` recorded");
                continue;
            }
            let i = got
                .tensors()
                .iter()
                .position(|x| x.name == name)
                .unwrap_or_else(|| panic!("{file}: `{name}` missing"));
            let h = format!("{:x}", Sha256::digest(got.bytes(i).unwrap()));
            assert_eq!(
                h,
                t["sha256"].as_str().unwrap(),
                "{file}: `{name}` differs from torch"
            );
            assert_eq!(
                got.tensors()[i].shape,
                t["shape"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_u64().unwrap())
                    .collect::<Vec<_>>()
            );
        }
        n += 1;
    }
    assert!(n >= 20, "{n}");
}

#[test]
fn a_sharded_bin_repo_becomes_an_equal_safetensors_repo() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/pickle/bin_repo");
    let out = tmp.path().join("out");
    let o = wp(&[
        "convert",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--shard-size",
        "1KB",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.join("model.safetensors.index.json").exists());
    let v = wp(&[
        "verify",
        out.to_str().unwrap(),
        "--against",
        src.to_str().unwrap(),
    ]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
}

#[test]
fn hostile_checkpoints_are_refused_by_convert_and_scan() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixtures().join("hostile/pickle");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json" || x == "md") {
            continue;
        }
        let out = tmp.path().join("o.safetensors");
        let o = wp(&["convert", p.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert_eq!(
            o.status.code(),
            Some(3),
            "{}: {}",
            p.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!out.exists());
        n += 1;
    }
    assert!(n >= 60, "{n}");
    let o = wp(&["--json", "scan", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    // Every file is unsafe; members of an archive (the legacy tar's) are reports of their own,
    // named `FILE!MEMBER`.
    let unsafe_files: std::collections::BTreeSet<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["verdict"] == "unsafe")
        .map(|f| f["path"].as_str().unwrap().split('!').next().unwrap())
        .collect();
    assert_eq!(unsafe_files.len(), n);
    let o = wp(&[
        "scan",
        fixtures().join("good/pickle/tied.pt").to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // No payload ever ran.
    assert!(std::fs::read_dir("/tmp").unwrap().flatten().all(|e| !e
        .file_name()
        .to_string_lossy()
        .starts_with("weightport-pwned")));
}

/// Output tensors equal the reference's (what torch.load returned, saved by `save_file`): same
/// names in the same order, dtypes, shapes and bytes.
fn assert_same_tensors(got: &std::path::Path, want: &std::path::Path, case: &str) {
    let got = SafetensorsFile::open(got).unwrap();
    let want = SafetensorsFile::open(want).unwrap();
    let names = |s: &SafetensorsFile| -> Vec<String> {
        s.tensors().iter().map(|t| t.name.clone()).collect()
    };
    assert_eq!(names(&got), names(&want), "{case}: names");
    for (i, w) in want.tensors().iter().enumerate() {
        let g = &got.tensors()[i];
        assert_eq!(
            (g.dtype, &g.shape),
            (w.dtype, &w.shape),
            "{case}: {}",
            w.name
        );
        assert_eq!(got.bytes(i), want.bytes(i), "{case}: {} bytes", w.name);
    }
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// Issue 14 items 7 and 17: training checkpoints (model + optimizer + RNG state, a stray
/// `best_acc` tensor, Lightning's layout) convert the state dict, `--key` reaches int keys and
/// list items, a `torch.save(t)` file converts its one tensor named after the file, and every
/// tensor outside the converted dict is listed in `--json` `dropped` (fixtures/expected/ckpt,
/// written by gen_ckpt.py from what torch.load returns).
#[test]
fn training_checkpoints_convert_the_state_dict_and_report_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    for e in std::fs::read_dir(fixtures().join("expected/ckpt")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        let case = p.file_stem().unwrap().to_str().unwrap().to_string();
        let want: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        let src = fixtures().join(want["file"].as_str().unwrap());
        let out = tmp.path().join(format!("{case}.safetensors"));
        let mut args = vec![
            "convert".to_string(),
            src.to_str().unwrap().into(),
            "-o".into(),
            out.to_str().unwrap().into(),
            "--json".into(),
        ];
        args.extend(strs(&want["args"]));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = wp(&args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        if want.get("refused").is_some() {
            assert_eq!(o.status.code(), Some(1), "{case}: {stderr}");
            assert!(!out.exists(), "{case}");
            let text = String::from_utf8_lossy(&o.stdout).to_string() + &stderr;
            for c in want["candidates"].as_array().unwrap() {
                let line = format!(
                    "`--key {}` ({} tensors, {} bytes)",
                    c["key"].as_str().unwrap(),
                    c["tensors"],
                    c["bytes"]
                );
                assert!(text.contains(&line), "{case}: {line} not in {text}");
            }
            n += 1;
            continue;
        }
        assert!(o.status.success(), "{case}: {stderr}");
        let r: Value = serde_json::from_slice(&o.stdout).unwrap();
        let dropped: Vec<String> = r["dropped"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["tensor"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(dropped, strs(&want["dropped"]), "{case}: dropped");
        let reference = p.with_extension("safetensors");
        assert_same_tensors(&out, &reference, &case);
        n += 1;
    }
    assert!(n >= 10, "{n}");
}

#[test]
fn dropped_checkpoint_tensors_are_in_the_text_summary_and_wrong_keys_list_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/ckpt/train.pt");
    let out = tmp.path().join("o.safetensors");
    let o = wp(&[
        "convert",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("NOT converted: 19 tensors/arrays"), "{text}");
    assert!(text.contains("rng_state: uint8 tensor [5056]"), "{text}");
    assert!(
        text.contains("optimizer.state.0.exp_avg: float32 tensor [3, 4]"),
        "{text}"
    );
    let o = wp(&[
        "convert",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--force",
        "--key",
        "optimizer.state.9",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("keys at optimizer.state: 0, 1, 2, 3, 4, 5"),
        "{err}"
    );
    // A key naming a dict without tensors of its own converts nothing: refused, with the
    // dicts of tensors under it.
    let o = wp(&[
        "convert",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--force",
        "--key",
        "optimizer.state",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("`--key optimizer.state.0` (3 tensors, 100 bytes)"),
        "{err}"
    );
}
