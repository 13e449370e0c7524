//! End-to-end tests of the `weightport` binary against files written by the reference
//! libraries (see fixtures/README.md): byte identity with safetensors-py and
//! huggingface_hub's sharding, exit codes, JSON output, and the refusal cases.

use crate::common;
use common::{fixtures, wp};

use std::path::Path;
use std::process::Output;

use serde_json::Value;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited normally (not by a signal)")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn ok(o: Output) -> Output {
    assert_eq!(code(&o), 0, "stderr: {}", stderr(&o));
    o
}

/// Files of a directory (name → bytes), sorted.
fn dir_files(d: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn weights_only(v: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    v.into_iter()
        .filter(|(n, _)| n.contains(".safetensors"))
        .collect()
}

#[test]
fn reshard_is_byte_identical_to_huggingface_hub_and_safetensors_py() {
    let tmp = tempfile::tempdir().unwrap();
    let input = fixtures().join("good/hf_repo_sharded");
    let mut labels = 0;
    for e in std::fs::read_dir(fixtures().join("expected/reshard")).unwrap() {
        let exp = e.unwrap().path();
        let label = exp.file_name().unwrap().to_string_lossy().into_owned();
        let out = tmp.path().join(&label);
        let mut args = vec!["convert", s(&input), "-o", s(&out)];
        if label != "single" {
            args.extend(["--shard-size", &label]);
        }
        ok(wp(&args));
        assert_eq!(
            weights_only(dir_files(&out)),
            dir_files(&exp),
            "shard size {label}"
        );
        // Companion files are copied unchanged.
        for c in ["config.json", "generation_config.json"] {
            assert_eq!(
                std::fs::read(out.join(c)).unwrap(),
                std::fs::read(input.join(c)).unwrap()
            );
        }
        labels += 1;
    }
    assert!(labels >= 3);
}

#[test]
fn merging_shards_into_one_file_matches_save_file() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("model.safetensors");
    ok(wp(&[
        "convert",
        s(&fixtures().join("good/hf_repo_sharded")),
        "-o",
        s(&out),
    ]));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(fixtures().join("expected/merged/model.safetensors")).unwrap()
    );
    // From the index file itself, too.
    let out2 = tmp.path().join("again.safetensors");
    ok(wp(&[
        "convert",
        s(&fixtures().join("good/hf_repo_sharded/model.safetensors.index.json")),
        "-o",
        s(&out2),
    ]));
    assert_eq!(
        std::fs::read(&out2).unwrap(),
        std::fs::read(fixtures().join("expected/merged/model.safetensors")).unwrap()
    );
}

#[test]
fn rewriting_save_file_output_is_byte_identical() {
    // Each of these was written by safetensors.torch.save_file with at most one metadata key.
    let tmp = tempfile::tempdir().unwrap();
    let files = [
        "good/safetensors/all_dtypes.safetensors",
        "good/safetensors/edge_cases.safetensors",
        "good/safetensors/no_metadata.safetensors",
        "good/safetensors/metadata_only.safetensors",
        "good/safetensors/empty.safetensors",
        "good/safetensors/llama_tiny.safetensors",
        "good/hf_repo_single/model.safetensors",
        "good/hf_repo_sharded/model-00001-of-00003.safetensors",
    ];
    for (i, f) in files.iter().enumerate() {
        let out = tmp.path().join(format!("{i}.safetensors"));
        ok(wp(&["convert", s(&fixtures().join(f)), "-o", s(&out)]));
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(fixtures().join(f)).unwrap(),
            "{f}"
        );
    }
}

#[test]
fn output_is_identical_at_one_and_two_threads() {
    let tmp = tempfile::tempdir().unwrap();
    let input = fixtures().join("good/hf_repo_sharded");
    for t in ["1", "2"] {
        ok(wp(&[
            "--threads",
            t,
            "convert",
            s(&input),
            "-o",
            s(&tmp.path().join(t)),
            "--shard-size",
            "7000",
        ]));
    }
    assert_eq!(
        dir_files(&tmp.path().join("1")),
        dir_files(&tmp.path().join("2"))
    );
}

#[test]
fn legal_edge_cases_load() {
    for f in [
        "whitespace_header",
        "metadata_null",
        "header_order",
        "zero_size_middle",
        "metadata_only",
        "empty",
        "edge_cases",
    ] {
        let p = fixtures().join(format!("good/safetensors/{f}.safetensors"));
        ok(wp(&["inspect", s(&p)]));
        ok(wp(&["verify", s(&p)]));
    }
}

#[test]
fn malformed_files_fail_with_exit_1_and_say_what_is_wrong() {
    let cases = [
        ("lfs_pointer", "Git LFS pointer"),
        ("html_page", "HTML page"),
        ("truncated", "truncated"),
        ("trailing_bytes", "trailing bytes"),
        ("header_too_small", "header too small"),
        ("header_len_past_eof", "invalid header length"),
        ("header_len_u64_max", "header too large"),
        ("header_len_zero", "EOF while parsing"),
        ("header_not_object", "invalid type: sequence"),
        ("bom_header", "expected value"),
        ("trailing_nul_header", "trailing characters"),
        ("invalid_utf8", "invalid UTF-8"),
        ("duplicate_metadata", "duplicate field `__metadata__`"),
        ("metadata_value_not_string", "expected a string"),
        ("unknown_dtype", "unknown variant `F128`"),
        ("negative_offset", "invalid value: integer `-1`"),
        ("offset_not_at_zero", "invalid offset"),
        ("offsets_hole", "invalid offset"),
        ("offsets_overlap", "invalid offset"),
        ("size_mismatch", "needs 16"),
        ("shape_overflow", "overflow"),
        ("f4_odd_count", "byte boundary"),
    ];
    for (name, want) in cases {
        let p = fixtures().join(format!("bad/safetensors/{name}.safetensors"));
        assert!(p.exists(), "{name}");
        for cmd in ["inspect", "verify"] {
            let o = wp(&[cmd, s(&p)]);
            assert_eq!(code(&o), 1, "{cmd} {name}: {}", stderr(&o));
            let e = stderr(&o);
            assert!(e.contains(want), "{name}: {e}");
            assert!(
                e.contains(&format!("{name}.safetensors")),
                "{name}: the message must name the file: {e}"
            );
            assert!(!e.contains("panicked"), "{e}");
        }
    }
    // Every bad fixture is covered by the table above (torch_zip, a real checkpoint, by
    // `a_misnamed_checkpoint_is_read_as_what_it_is`).
    let n = std::fs::read_dir(fixtures().join("bad/safetensors"))
        .unwrap()
        .count();
    assert_eq!(n, cases.len() + 1);
}

#[test]
fn errors_name_the_tensor_and_the_byte_offset() {
    let o = wp(&[
        "inspect",
        s(&fixtures().join("bad/safetensors/offsets_overlap.safetensors")),
    ]);
    let e = stderr(&o);
    assert!(e.contains("tensor `b`") && e.contains("(byte "), "{e}");
}

#[test]
fn broken_repos_get_specific_errors() {
    let o = wp(&["inspect", s(&fixtures().join("bad/repo_missing_shard"))]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("is missing"), "{}", stderr(&o));
    let o = wp(&["inspect", s(&fixtures().join("bad/repo_missing_tensor"))]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("does not hold it"), "{}", stderr(&o));
    let o = wp(&["inspect", s(&fixtures().join("bad/repo_traversal"))]);
    assert_eq!(code(&o), 3, "path traversal is a refusal: {}", stderr(&o));
    assert!(stderr(&o).contains("outside the repo"), "{}", stderr(&o));
}

fn copy_repo(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for (n, b) in dir_files(from) {
        std::fs::write(to.join(n), b).unwrap();
    }
}

#[test]
fn an_lfs_pointer_shard_is_named_as_such_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    copy_repo(&fixtures().join("good/hf_repo_sharded"), &repo);
    std::fs::copy(
        fixtures().join("bad/safetensors/lfs_pointer.safetensors"),
        repo.join("model-00002-of-00003.safetensors"),
    )
    .unwrap();
    let before = dir_files(&repo);
    let out = tmp.path().join("out");
    let o = wp(&["convert", s(&repo), "-o", s(&out)]);
    assert_eq!(code(&o), 1);
    let e = stderr(&o);
    assert!(
        e.contains("model-00002-of-00003.safetensors") && e.contains("git lfs pull"),
        "{e}"
    );
    assert!(!out.exists());
    assert_eq!(dir_files(&repo), before, "the input must not change");
}

#[test]
fn existing_outputs_need_force_and_force_removes_stale_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let input = fixtures().join("good/hf_repo_sharded");
    let out = tmp.path().join("out");
    ok(wp(&[
        "convert",
        s(&input),
        "-o",
        s(&out),
        "--shard-size",
        "5000",
    ]));
    let o = wp(&["convert", s(&input), "-o", s(&out), "--shard-size", "30000"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--force"));
    let o = ok(wp(&[
        "--json",
        "convert",
        s(&input),
        "-o",
        s(&out),
        "--shard-size",
        "30000",
        "--force",
    ]));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["removed"].as_array().unwrap().len(), 12);
    assert_eq!(
        weights_only(dir_files(&out)),
        dir_files(&fixtures().join("expected/reshard/30000"))
    );
    let single = tmp.path().join("m.safetensors");
    std::fs::write(&single, b"x").unwrap();
    assert_eq!(code(&wp(&["convert", s(&input), "-o", s(&single)])), 2);
    assert_eq!(std::fs::read(&single).unwrap(), b"x");
}

#[test]
fn dry_run_prints_the_plan_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = ok(wp(&[
        "convert",
        s(&fixtures().join("good/hf_repo_sharded")),
        "-o",
        s(&out),
        "--shard-size",
        "10000",
        "--dry-run",
        "--json",
    ]));
    assert!(!out.exists());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["dry_run"], true);
    let files = v["files"].as_array().unwrap();
    let expected = dir_files(&fixtures().join("expected/reshard/10000"));
    let shards: Vec<_> = expected
        .iter()
        .filter(|(n, _)| n.ends_with(".safetensors"))
        .collect();
    assert_eq!(files.len(), shards.len());
    for (f, (name, bytes)) in files.iter().zip(shards) {
        assert!(f["path"].as_str().unwrap().ends_with(name.as_str()));
        assert_eq!(
            f["bytes"].as_u64().unwrap(),
            bytes.len() as u64,
            "planned size of {name}"
        );
    }
    assert!(v["free_bytes"].as_u64().is_some());
    let o = ok(wp(&[
        "convert",
        s(&fixtures().join("good/hf_repo_sharded")),
        "-o",
        s(&out),
        "--dry-run",
    ]));
    assert!(String::from_utf8_lossy(&o.stdout).contains("disk needed"));
}

#[test]
fn json_outputs_follow_the_schema() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fixtures().join("good/safetensors/all_dtypes.safetensors");
    let v: Value = serde_json::from_slice(&ok(wp(&["inspect", s(&f), "--json"])).stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["command"], "inspect");
    assert_eq!(v["format"], "safetensors");
    assert_eq!(v["metadata"]["format"], "pt");
    assert_eq!(v["tensor_count"], v["tensors"].as_array().unwrap().len());
    let t = &v["tensors"][0];
    for k in ["name", "dtype", "shape", "bytes", "file"] {
        assert!(!t[k].is_null(), "{k}");
    }
    let out = tmp.path().join("o.safetensors");
    let v: Value =
        serde_json::from_slice(&ok(wp(&["--json", "convert", s(&f), "-o", s(&out)])).stdout)
            .unwrap();
    assert_eq!(v["verified"], true);
    assert_eq!(
        v["files"][0]["bytes"].as_u64().unwrap(),
        std::fs::metadata(&out).unwrap().len()
    );
    let v: Value =
        serde_json::from_slice(&ok(wp(&["verify", s(&out), "--against", s(&f), "--json"])).stdout)
            .unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["differences"].as_array().unwrap().len(), 0);
    // Errors are JSON on stdout too, with the exit code.
    let o = wp(&[
        "inspect",
        "--json",
        s(&fixtures().join("bad/safetensors/lfs_pointer.safetensors")),
    ]);
    assert_eq!(code(&o), 1);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["kind"], "not_format");
    assert_eq!(v["error"]["exit_code"], 1);
}

#[test]
fn verify_against_proves_sharded_and_merged_equal_and_catches_a_flipped_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let sharded = fixtures().join("good/hf_repo_sharded");
    ok(wp(&[
        "verify",
        s(&sharded),
        "--against",
        s(&fixtures().join("expected/merged/model.safetensors")),
    ]));
    ok(wp(&[
        "verify",
        s(&sharded),
        "--against",
        s(&fixtures().join("good/hf_repo_single")),
    ]));
    let mut bytes = std::fs::read(fixtures().join("expected/merged/model.safetensors")).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let bad = tmp.path().join("flipped.safetensors");
    std::fs::write(&bad, &bytes).unwrap();
    let o = wp(&["verify", s(&sharded), "--against", s(&bad)]);
    assert_eq!(code(&o), 1);
    assert!(String::from_utf8_lossy(&o.stdout).contains("differs"));
}

#[test]
fn usage_errors_exit_2() {
    let f = fixtures().join("good/safetensors/llama_tiny.safetensors");
    assert_eq!(
        code(&wp(&[
            "convert",
            s(&f),
            "-o",
            "/tmp/x",
            "--shard-size",
            "5XB"
        ])),
        2
    );
    assert_eq!(code(&wp(&["frobnicate"])), 2);
    assert_eq!(code(&wp(&["convert", s(&f)])), 2);
    assert_eq!(code(&wp(&["--help"])), 0);
}

/// Formats are sniffed from content: a torch checkpoint saved as `.safetensors` (which
/// safetensors-py rejects) is read as what it is.
#[test]
fn a_misnamed_checkpoint_is_read_as_what_it_is() {
    let p = fixtures().join("bad/safetensors/torch_zip.safetensors");
    let o = ok(wp(&["--json", "inspect", s(&p)]));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["format"], "pytorch-zip");
}

#[test]
fn unsupported_output_and_missing_input_fail_cleanly() {
    let f = fixtures().join("good/safetensors/llama_tiny.safetensors");
    let tmp = tempfile::tempdir().unwrap();
    let never = tmp.path().join("never.npz");
    let o = wp(&["convert", s(&f), "-o", s(&never)]);
    // A usage error (exit 2), not "unsupported safetensors" about a file that is not one.
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("no output format"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("safetensors:"), "{}", stderr(&o));
    assert!(!never.exists());
    let o = wp(&["inspect", "/nonexistent/model.safetensors"]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("/nonexistent/model.safetensors"));
}

/// fixtures/expected/bad.json records what safetensors-py 0.8.0 and transformers 5.24 do with
/// every malformed fixture: every file the reference rejects, we reject (exit 1, never a
/// panic); every repo the reference loads wrongly (a missing tensor filled randomly, a shard
/// outside the repo) we refuse.
#[test]
fn every_file_the_reference_rejects_is_rejected() {
    let bad: Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("expected/bad.json")).unwrap())
            .unwrap();
    let files = bad["files"].as_object().unwrap();
    assert!(files.len() >= 20);
    for (name, rec) in files {
        assert!(rec["load_file"]["exception"].is_string(), "{name}");
        if name == "torch_zip.safetensors" {
            continue; // a real torch checkpoint misnamed: see the next test
        }
        let o = wp(&["inspect", s(&fixtures().join("bad/safetensors").join(name))]);
        assert_eq!(code(&o), 1, "{name}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{name}");
    }
    for (repo, rec) in bad["repos"].as_object().unwrap() {
        let o = wp(&["inspect", s(&fixtures().join("bad").join(repo))]);
        assert_ne!(
            code(&o),
            0,
            "{repo} (transformers: {})",
            rec["transformers"]["result"]
        );
    }
}
