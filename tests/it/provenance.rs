//! `convert --attest` and `verify --attestation` (issue 17 item 3): the statement validates with
//! the in-toto reference library, its subjects are the files' sha256 as coreutils' `sha256sum`
//! computes them, outputs and attestations are the same at 1 and 2 threads on every run, and
//! `verify --attestation` names a changed, a missing and an extra file.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fixtures, wp, write_dat_imatrix};
use serde_json::Value;

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// Converts `input` into `out` with `extra` arguments and `--attest`; returns the statement.
fn convert(input: &Path, out: &Path, att: &Path, threads: usize, extra: &[&str]) -> Value {
    let mut args = vec![
        "--threads".to_string(),
        threads.to_string(),
        "convert".into(),
        s(input),
        "-o".into(),
        s(out),
        "--attest".into(),
        s(att),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = wp(&refs);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&std::fs::read(att).unwrap()).unwrap()
}

/// Files with their bytes.
type Tree = Vec<(PathBuf, Vec<u8>)>;

/// Every regular file under `dir` with its bytes, sorted by relative path.
fn files(dir: &Path) -> Tree {
    let mut v = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                v.push((
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    v.sort();
    v
}

/// Outputs and attestations do not depend on the thread count or the run.
#[test]
fn outputs_and_attestations_are_the_same_at_any_thread_count() {
    let t = tempfile::tempdir().unwrap();
    let f = fixtures();
    let cases: [(&str, &str, &[&str]); 2] = [
        (
            "good/hf_repo_sharded",
            "repo",
            &["--shard-size", "30KB", "--dtype", "bf16"],
        ),
        ("good/arch/llama", "gguf/l.gguf", &["--quant", "Q4_K_M"]),
    ];
    for (input, target, extra) in cases {
        let mut seen: Option<(Tree, Value)> = None;
        for (run, threads) in [1, 2, 1, 2].into_iter().enumerate() {
            let root = t.path().join(format!("{run}"));
            let out = root.join(target);
            // One statement per case and run: an existing one is not replaced without --force.
            let att = root.join(format!("{}.intoto.json", target.replace('/', "-")));
            let st = convert(&f.join(input), &out, &att, threads, extra);
            let dir = if target.ends_with(".gguf") {
                out.parent().unwrap().to_path_buf()
            } else {
                out
            };
            let got = (files(&dir), st);
            if let Some((bytes, first)) = &seen {
                assert!(
                    bytes == &got.0,
                    "{input}: run {run} ({threads} threads) wrote other bytes"
                );
                for key in ["subject", "predicateType"] {
                    assert_eq!(first[key], got.1[key], "{input}: run {run}: {key}");
                }
                for key in ["materials", "tensors", "modelSigning"] {
                    assert_eq!(
                        first["predicate"][key], got.1["predicate"][key],
                        "{input}: {key}"
                    );
                }
            } else {
                assert!(
                    got.0.len() > 1 || target.ends_with(".gguf"),
                    "{input}: a sharded repo"
                );
                seen = Some(got);
            }
        }
    }
}

fn sha256sum(path: &Path) -> String {
    let o = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum (coreutils)");
    String::from_utf8(o.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// The statement's subjects, materials and tensors, against coreutils and the source.
#[test]
fn the_statement_names_every_file_and_tensor() {
    let t = tempfile::tempdir().unwrap();
    let input = fixtures().join("good/hf_repo_sharded");
    let repo = t.path().join("repo");
    let att = t.path().join("a.json");
    let st = convert(
        &input,
        &repo,
        &att,
        2,
        &["--shard-size", "30KB", "--dtype", "f16"],
    );
    assert_eq!(st["_type"], "https://in-toto.io/Statement/v1");
    let subjects = st["subject"].as_array().unwrap();
    let on_disk: Vec<PathBuf> = files(&repo).into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        subjects.len(),
        on_disk.len(),
        "every published file is a subject"
    );
    for sub in subjects {
        let name = sub["name"].as_str().unwrap();
        assert_eq!(
            sub["digest"]["sha256"],
            sha256sum(&repo.join(name)).as_str(),
            "{name}"
        );
    }
    let materials = st["predicate"]["materials"].as_array().unwrap();
    for m in materials {
        let p = PathBuf::from(m["name"].as_str().unwrap());
        assert_eq!(
            m["digest"]["sha256"],
            sha256sum(&p).as_str(),
            "{}",
            p.display()
        );
    }
    let index = materials
        .iter()
        .any(|m| m["name"].as_str().unwrap().ends_with(".index.json"));
    let shards = materials
        .iter()
        .filter(|m| m["name"].as_str().unwrap().ends_with(".safetensors"));
    assert!(
        index && shards.count() >= 2,
        "the input's index and every shard: {materials:?}"
    );
    // Per tensor: the source it was cast from, and that source's content hash as
    // `verify --json` of the input reports it.
    let o = wp(&["--json", "inspect", &s(&input)]);
    let inspected: Value = serde_json::from_slice(&o.stdout).unwrap();
    let tensors = st["predicate"]["tensors"].as_array().unwrap();
    assert_eq!(
        tensors.len(),
        inspected["tensors"].as_array().unwrap().len()
    );
    let opts = &st["predicate"]["recipe"]["options"];
    assert_eq!(opts["shard_size"], 30_000);
    assert!(st["predicate"]["recipe"]["command"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a == "--attest"));
    for tensor in tensors {
        let src = &tensor["sources"][0];
        assert_eq!(src["name"], tensor["name"], "names are kept");
        assert_eq!(tensor["dtype"], "F16");
        assert!(src["contentHash"].as_str().unwrap().len() == 32);
    }
}

/// The content hashes of what was read equal those of an identity run over the input (the
/// hashes `verify` computes), for cast tensors (hashed again) and copied ones (reused).
#[test]
fn source_hashes_equal_a_plain_read_of_the_input() {
    let t = tempfile::tempdir().unwrap();
    let input = fixtures().join("good/quality/model.safetensors");
    let st = convert(
        &input,
        &t.path().join("o.safetensors"),
        &t.path().join("a.json"),
        2,
        &["--dtype", "f16", "--dtype-filter", "mlp"],
    );
    // An identity conversion's statement: its tensors' own hashes are those of the input.
    let plain = convert(
        &input,
        &t.path().join("p.safetensors"),
        &t.path().join("b.json"),
        1,
        &[],
    );
    let want: std::collections::HashMap<String, String> = plain["predicate"]["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().into(),
                t["contentHash"].as_str().unwrap().into(),
            )
        })
        .collect();
    let mut cast = 0;
    for tensor in st["predicate"]["tensors"].as_array().unwrap() {
        let src = &tensor["sources"][0];
        assert_eq!(
            src["contentHash"].as_str().unwrap(),
            want[src["name"].as_str().unwrap()]
        );
        cast += usize::from(tensor["op"].is_string());
    }
    assert_eq!(cast, 4, "the four mlp weights were cast");
}

/// `verify --attestation`: exit 0 on the published repo; exit 1 naming a changed, a missing
/// and an extra file.
#[test]
fn verify_attestation_names_what_differs() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let att = t.path().join("a.json");
    convert(
        &fixtures().join("good/hf_repo_sharded"),
        &repo,
        &att,
        2,
        &["--shard-size", "30KB"],
    );
    let check = |what: &str| {
        let o = wp(&["verify", "--attestation", &s(&att), &s(&repo)]);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            what.to_string(),
        )
    };
    let (code, _, _) = check("as published");
    assert_eq!(code, Some(0));
    // The statement may lie inside the directory it describes.
    std::fs::copy(&att, repo.join("provenance.intoto.json")).unwrap();
    let o = wp(&[
        "verify",
        "--attestation",
        &s(&repo.join("provenance.intoto.json")),
        &s(&repo),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    std::fs::remove_file(repo.join("provenance.intoto.json")).unwrap();
    let shard = files(&repo)
        .into_iter()
        .map(|(p, _)| p)
        .find(|p| p.to_str().unwrap().ends_with(".safetensors"))
        .unwrap();
    let mut bytes = std::fs::read(repo.join(&shard)).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(repo.join(&shard), &bytes).unwrap();
    std::fs::write(repo.join("notes.txt"), "x").unwrap();
    std::fs::remove_file(repo.join("config.json")).unwrap();
    let (code, out, _) = check("changed");
    assert_eq!(code, Some(1), "{out}");
    let shard = shard.to_str().unwrap();
    assert!(out.contains(&format!("{shard}: sha256 ")), "{out}");
    assert!(out.contains("config.json: missing"), "{out}");
    assert!(out.contains("notes.txt: extra"), "{out}");
    let o = wp(&["--json", "verify", "--attestation", &s(&att), &s(&repo)]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            v["ok"].as_bool(),
            v["differences"].as_array().unwrap().len()
        ),
        (Some(false), 3)
    );
}

/// The in-toto reference library accepts the statement (CI installs it; elsewhere skipped with
/// a note).
#[test]
fn the_statement_is_a_valid_in_toto_statement() {
    let py = std::env::var("WEIGHTPORT_PYTHON").unwrap_or_else(|_| "python3".into());
    let has = Command::new(&py)
        .args(["-c", "import in_toto_attestation.v1.statement"])
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI's python must have in-toto-attestation"
        );
        eprintln!("SKIPPED in-toto validation: {py} lacks in-toto-attestation (pip install in-toto-attestation==0.9.3)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    for (input, target, extra) in [
        ("good/hf_repo_sharded", "repo", vec!["--shard-size", "30KB"]),
        ("good/arch/llama", "g/l.gguf", vec!["--quant", "Q4_K_M"]),
    ] {
        let out = t.path().join(target);
        // One statement per conversion: a side file is never replaced without --force.
        let att = t
            .path()
            .join(format!("{}.intoto.json", target.replace('/', "_")));
        convert(&fixtures().join(input), &out, &att, 2, &extra);
        let root = if target.ends_with(".gguf") {
            out.parent().unwrap().to_path_buf()
        } else {
            out
        };
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/intoto_check.py");
        let o = Command::new(&py)
            .arg(script)
            .arg(&att)
            .arg(&root)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{input}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        eprintln!("{input}: {}", String::from_utf8_lossy(&o.stdout).trim());
    }
}

/// A statement whose subject names a path outside the directory, or that is not an in-toto
/// statement, is refused as such (exit 2), never followed.
#[test]
fn verify_attestation_refuses_paths_outside_the_directory() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("a.bin"), "x").unwrap();
    let zeros = "0".repeat(64);
    for (doc, want) in [
        (
            format!(
                r#"{{"_type":"https://in-toto.io/Statement/v1","subject":[{{"name":"../secret","digest":{{"sha256":"{zeros}"}}}}]}}"#
            ),
            "is not a relative path",
        ),
        (
            format!(
                r#"{{"_type":"https://in-toto.io/Statement/v1","subject":[{{"name":"/etc/passwd","digest":{{"sha256":"{zeros}"}}}}]}}"#
            ),
            "is not a relative path",
        ),
        (
            r#"{"_type":"https://in-toto.io/Statement/v0.1","subject":[]}"#.to_string(),
            "not a weightport attestation",
        ),
    ] {
        let att = t.path().join("a.json");
        std::fs::write(&att, doc).unwrap();
        let o = wp(&["verify", "--attestation", &s(&att), &s(&dir)]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err}");
    }
}

/// `verify --attestation FILE DIR`: exit code, stdout, stderr.
fn verify_att(att: &Path, dir: &Path) -> (Option<i32>, String, String) {
    let o = wp(&["verify", "--attestation", &s(att), &s(dir)]);
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A repo converted with `--attest` into `t/repo`; returns (repo, statement path).
fn attested_repo(t: &Path) -> (PathBuf, PathBuf) {
    let repo = t.join("repo");
    let att = t.join("a.json");
    convert(
        &fixtures().join("good/hf_repo_sharded"),
        &repo,
        &att,
        2,
        &["--shard-size", "30KB"],
    );
    (repo, att)
}

/// Issue 28 item 7: a statement naming one subject twice passed when the wrong digest came
/// first (the later entry replaced it). Every entry is checked now.
#[test]
fn a_subject_listed_twice_with_conflicting_digests_fails() {
    let t = tempfile::tempdir().unwrap();
    let (repo, att) = attested_repo(t.path());
    let mut st: Value = serde_json::from_slice(&std::fs::read(&att).unwrap()).unwrap();
    let first = st["subject"][0].clone();
    let name = first["name"].as_str().unwrap().to_string();
    let mut wrong = first.clone();
    wrong["digest"]["sha256"] = "ab".repeat(32).into();
    let subjects = st["subject"].as_array_mut().unwrap();
    subjects.insert(0, wrong);
    std::fs::write(&att, serde_json::to_vec_pretty(&st).unwrap()).unwrap();
    let (code, out, err) = verify_att(&att, &repo);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains(&name) && out.contains(&"ab".repeat(32)),
        "{out}"
    );
    // Listed twice with the right digest both times: that is no difference.
    st["subject"].as_array_mut().unwrap()[0] = first;
    std::fs::write(&att, serde_json::to_vec_pretty(&st).unwrap()).unwrap();
    let (code, out, err) = verify_att(&att, &repo);
    assert_eq!(code, Some(0), "{out}{err}");
}

/// Issue 28 item 7: a subject replaced by a symlink to a copy elsewhere passed (model-signing
/// refuses symlinks: what is published is the link, not the bytes).
#[test]
fn a_subject_replaced_by_a_symlink_fails() {
    let t = tempfile::tempdir().unwrap();
    let (repo, att) = attested_repo(t.path());
    let elsewhere = t.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::rename(repo.join("config.json"), elsewhere.join("config.json")).unwrap();
    std::os::unix::fs::symlink(elsewhere.join("config.json"), repo.join("config.json")).unwrap();
    let (code, out, err) = verify_att(&att, &repo);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("config.json") && out.contains("symlink"),
        "{out}"
    );
    // A symlinked directory holding a copy of the files is refused too.
    std::fs::remove_file(repo.join("config.json")).unwrap();
    std::fs::rename(elsewhere.join("config.json"), repo.join("config.json")).unwrap();
    assert_eq!(verify_att(&att, &repo).0, Some(0));
    let sub = t.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::os::unix::fs::symlink(&sub, repo.join("more")).unwrap();
    let (code, out, _) = verify_att(&att, &repo);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("more") && out.contains("symlink"), "{out}");
}

/// Issue 28 item 7: the importance matrix decides a quantization's bytes but was missing from
/// `materials`.
#[test]
fn the_importance_matrix_is_a_material() {
    let t = tempfile::tempdir().unwrap();
    let im = t.path().join("im.dat");
    write_dat_imatrix(&im, 1.0);
    let out = t.path().join("g/m.gguf");
    let att = t.path().join("a.json");
    let st = convert(
        &fixtures().join("good/arch/llama"),
        &out,
        &att,
        2,
        &["--quant", "Q4_K_M", "--imatrix", &s(&im)],
    );
    let materials = st["predicate"]["materials"].as_array().unwrap();
    let m = materials
        .iter()
        .find(|m| m["name"] == s(&im).as_str())
        .unwrap_or_else(|| panic!("{materials:?}"));
    assert_eq!(m["digest"]["sha256"], sha256sum(&im).as_str());
    let py = std::env::var("WEIGHTPORT_PYTHON").unwrap_or_else(|_| "python3".into());
    let has = Command::new(&py)
        .args(["-c", "import in_toto_attestation.v1.statement"])
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI's python must have in-toto-attestation"
        );
        eprintln!("SKIPPED in-toto validation: {py} lacks in-toto-attestation");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/intoto_check.py");
    let o = Command::new(&py)
        .arg(script)
        .arg(&att)
        .arg(out.parent().unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// base64 of `bytes` by coreutils' `base64`.
fn base64(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut k = Command::new("base64")
        .arg("-w0")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("base64 (coreutils)");
    k.stdin.take().unwrap().write_all(bytes).unwrap();
    String::from_utf8(k.wait_with_output().unwrap().stdout).unwrap()
}

/// Issue 28 item 7: a DSSE envelope (what `sign_dsse`/cosign publish) was refused with a
/// message about `_type`. Its payload is read and checked, and the output says plainly that
/// the signatures are not.
#[test]
fn a_dsse_envelope_is_read_and_its_signatures_are_said_unchecked() {
    let t = tempfile::tempdir().unwrap();
    let (repo, att) = attested_repo(t.path());
    let statement = std::fs::read(&att).unwrap();
    let envelope = serde_json::json!({
        "payloadType": "application/vnd.in-toto+json",
        "payload": base64(&statement),
        "signatures": [{"keyid": "", "sig": base64(b"not a real signature")}],
    });
    let env = t.path().join("a.dsse.json");
    std::fs::write(&env, serde_json::to_vec(&envelope).unwrap()).unwrap();
    let (code, out, err) = verify_att(&env, &repo);
    assert_eq!(code, Some(0), "{out}{err}");
    let all = format!("{out}{err}");
    assert!(
        all.contains("signature") && all.contains("not checked"),
        "{all}"
    );
    let o = wp(&["--json", "verify", "--attestation", &s(&env), &s(&repo)]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["signatures_checked"], false);
    if let Some(py) = common::python_with_jsonschema() {
        let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/json/verify.schema.json");
        common::validate_json(&py, &schema, &o.stdout, "verify --json of an envelope");
    }
    // The payload's subjects are what is checked.
    std::fs::write(repo.join("config.json"), "{}").unwrap();
    let (code, out, _) = verify_att(&env, &repo);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("config.json: sha256"), "{out}");
    // Another payload type, or a payload that is not base64, is refused by name.
    for (doc, want) in [
        (
            serde_json::json!({"payloadType": "text/plain", "payload": base64(&statement), "signatures": []}),
            "payloadType",
        ),
        (
            serde_json::json!({"payloadType": "application/vnd.in-toto+json", "payload": "%%%", "signatures": []}),
            "base64",
        ),
    ] {
        std::fs::write(&env, serde_json::to_vec(&doc).unwrap()).unwrap();
        let (code, _, err) = verify_att(&env, &repo);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains(want), "{err}");
    }
}
