//! Remote inputs (`hf://`, `https://`) for the commands beyond convert/inspect/verify: `scan`
//! (reads a ZIP's central directory and pickles by ranges, never the tensor data; verdicts
//! equal the local ones), `--dry-run` (plans before any weight byte is read), and the commands
//! that refuse a remote input. Against the nginx Hub of `common::hub`; what was read is
//! summed from its access log (`$body_bytes_sent` of every request).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use common::fixtures;
use common::hub::{tools, Hub, Repo};

/// Bytes nginx sent in answer to every request logged so far (the log's last field).
fn bytes_sent(hub: &Hub) -> u64 {
    hub.log()
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// Builds the 1 GiB torch `.bin` of `fixtures/good/big_bin` (real torch's members, its two
/// 512 MiB storages as zeros) with Python's zipfile into `dir`; `None` without python3.
fn big_bin(dir: &Path) -> Option<PathBuf> {
    big_bin_from(&fixtures().join("good/big_bin"), dir)
}

/// [`big_bin`] from the skeleton in `skeleton`.
fn big_bin_from(skeleton: &Path, dir: &Path) -> Option<PathBuf> {
    let out = dir.join("pytorch_model.bin");
    let script = r#"
import json, os, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
layout = json.load(open(os.path.join(src, "layout.json")))
chunk = bytes(1 << 20)
with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
    for e in layout:
        if "file" in e:
            z.writestr(e["name"], open(os.path.join(src, e["file"]), "rb").read())
        else:
            with z.open(e["name"], "w", force_zip64=True) as w:
                for _ in range(e["zeros"] >> 20):
                    w.write(chunk)
"#;
    let py = std::env::var("WEIGHTPORT_PYTHON").unwrap_or_else(|_| "python3".into());
    let st = Command::new(py)
        .args(["-c", script])
        .arg(skeleton)
        .arg(&out)
        .status();
    match st {
        Ok(s) if s.success() => Some(out),
        _ if std::env::var_os("CI").is_some() => panic!("python3 could not build the 1 GiB .bin"),
        _ => {
            eprintln!("note: no python3; the 1 GiB scan is not checked");
            None
        }
    }
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// What a scan's verdict rests on, file by file, without paths: the verdict, the format, the
/// findings (rule, offset, whether unsafe), the globals, the tensors the strict reader found,
/// and the skipped files' unverified flags.
fn verdicts(doc: &Value) -> Value {
    let files: Vec<Value> = doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let findings: Vec<Value> = f["findings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| serde_json::json!([x["rule"], x["offset"], x["unsafe"]]))
                .collect();
            serde_json::json!({
                "name": Path::new(f["path"].as_str().unwrap()).file_name().unwrap().to_string_lossy(),
                "verdict": f["verdict"], "format": f["format"], "findings": findings,
                "globals": f["globals"], "tensors": f["tensors"], "records": f["records"],
            })
        })
        .collect();
    let skipped: Vec<Value> = doc["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| serde_json::json!([s["unverified"]]))
        .collect();
    serde_json::json!({"ok": doc["ok"], "files": files, "skipped": skipped,
        "unsafe": doc["unsafe"], "unverified": doc["unverified"]})
}

/// `scan` of a 1 GiB torch `.bin` on the Hub reads under 1 MB (its end records, central
/// directory, local headers and pickle; never the two 512 MiB storages), and its verdict and
/// report are the local scan's.
#[test]
fn scan_of_a_1_gib_bin_reads_under_1_mb() {
    let Some(nginx) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let Some(bin) = big_bin(dir.path()) else {
        return;
    };
    assert!(std::fs::metadata(&bin).unwrap().len() > 1 << 30);
    let local = common::wp(&["scan", "--json", bin.to_str().unwrap()]);
    let hub = Hub::start(&nginx, &[Repo::of("big", vec![bin.clone()])]);
    let before = bytes_sent(&hub);
    let remote = hub.wp(&["scan", "--json", "hf://org/big"]);
    let sent = bytes_sent(&hub) - before;
    assert_eq!(
        remote.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&remote.stderr)
    );
    assert_eq!(local.status.code(), Some(0));
    let (r, l) = (json_of(&remote), json_of(&local));
    assert_eq!(verdicts(&r), verdicts(&l));
    assert_eq!(r["files"][0]["tensors"], 2);
    let path = r["files"][0]["path"].as_str().unwrap();
    assert!(
        path.starts_with("hf://org/big@") && path.ends_with("/pytorch_model.bin"),
        "{path}"
    );
    assert!(sent < 1_000_000, "scan read {sent} bytes: {:?}", hub.log());
    eprintln!(
        "scan of the 1 GiB .bin: {sent} bytes in {} requests",
        hub.log().len()
    );
}

/// The hostile fixtures of every kind the scan tells apart (torch ZIP anomalies, legacy and raw
/// pickles, tar, compressed joblib streams, NumPy object arrays), scanned on the Hub one by one
/// and as one repo, get the verdicts, findings and globals of the local scans.
#[test]
fn remote_scan_verdicts_equal_the_local_ones() {
    let Some(nginx) = tools() else { return };
    let f = fixtures().join("hostile");
    let files: Vec<PathBuf> = [
        "pickle/01_rce_global_os_system.pt",
        "pickle/26_protocol0_text_mode_rce.pt",
        "pickle/28_payload_after_stop.pt",
        "pickle/29_legacy_magic_via_eval.pt",
        "pickle/30_legacy_payload_in_sys_info.pt",
        "pickle/32_legacy_tar_payload.tar",
        "pickle/33_raw_pickle_named_bin.bin",
        "pickle/34_polyglot_pickle_then_zip.pt",
        "pickle/35_zip_duplicate_data_pkl_evil_first.pt",
        "pickle/37_zip_lfh_cd_name_mismatch.pt",
        "pickle/41_zip_deflate_bomb.pt",
        "pickle/42_zip_second_prefix_dir.pt",
        "pickle/44_torchscript_archive.pt",
        "pickle/63_numpy_object_array.pt",
        "scan/npz_object_array.npz",
        "scan/protocol0_pickle_named_pth_tar.pth.tar",
        "scan_loaders/joblib_gzip.joblib",
        "scan_loaders/joblib_zfile.pkl",
    ]
    .iter()
    .map(|p| f.join(p))
    .collect();
    let all = tempfile::tempdir().unwrap();
    for p in &files {
        std::fs::copy(p, all.path().join(p.file_name().unwrap())).unwrap();
    }
    // Safe files too (a legacy checkpoint, ZIP record names in another letter case, a
    // gzip-compressed checkpoint, an npz): the verdict must be able to pass remotely.
    let safe: Vec<PathBuf> = [
        "good/pickle/legacy.pt",
        "good/pickle/checkpoint.pt",
        "good/scan_loaders/storage_records_upper_case.pt",
        "good/scan_loaders/state_dict.pt.gz",
        "good/scan/numeric.npz",
    ]
    .iter()
    .map(|p| fixtures().join(p))
    .collect();
    let mut served = files.clone();
    for p in &safe {
        std::fs::copy(p, all.path().join(p.file_name().unwrap())).unwrap();
        served.push(p.clone());
    }
    // A legacy checkpoint past the first 1 MiB prefix a remote scan reads (3 MiB appended after
    // its storages): audited over the prefix, it must get the whole file's verdict.
    let padded_dir = tempfile::tempdir().unwrap();
    let padded = padded_dir.path().join("legacy_padded.pt");
    let mut bytes = std::fs::read(fixtures().join("good/pickle/legacy.pt")).unwrap();
    bytes.resize(bytes.len() + (3 << 20), 0);
    std::fs::write(&padded, &bytes).unwrap();
    std::fs::write(all.path().join("legacy_padded.pt"), &bytes).unwrap();
    served.push(padded);
    let hub = Hub::start(&nginx, &[Repo::of("hostile", served.clone())]);
    for p in &served {
        let name = p.file_name().unwrap().to_str().unwrap();
        let local = common::wp(&["scan", "--json", p.to_str().unwrap()]);
        let remote = hub.wp(&["scan", "--json", &format!("hf://org/hostile/{name}")]);
        assert_eq!(
            remote.status.code(),
            local.status.code(),
            "{name}: {}",
            String::from_utf8_lossy(&remote.stderr)
        );
        assert_eq!(
            verdicts(&json_of(&remote)),
            verdicts(&json_of(&local)),
            "{name}"
        );
    }
    // An https:// file.
    let p = f.join("pickle/29_legacy_magic_via_eval.pt");
    let local = common::wp(&["scan", "--json", p.to_str().unwrap()]);
    let remote = hub.wp(&["scan", "--json", &hub.plain(&p)]);
    assert_eq!(remote.status.code(), Some(3));
    assert_eq!(verdicts(&json_of(&remote)), verdicts(&json_of(&local)));
    let local = common::wp(&["scan", "--json", all.path().to_str().unwrap()]);
    let remote = hub.wp(&["scan", "--json", "hf://org/hostile"]);
    assert_eq!(remote.status.code(), Some(3));
    assert_eq!(local.status.code(), Some(3));
    assert_eq!(verdicts(&json_of(&remote)), verdicts(&json_of(&local)));
}

fn sha256_of(p: &Path) -> String {
    common::hub::sha256_hex(&std::fs::read(p).unwrap())
}

/// `--attest` of an `hf://` conversion: each material is named by its address at the resolved
/// commit, with the sha256 of the file's bytes (the LFS sha256 the Hub lists for weights,
/// the fetched bytes' for the small files), checked here against the fixtures' own bytes; the
/// subjects are the local conversion's, and `verify --attestation` accepts the output.
/// `--report` is written too.
#[test]
fn attest_of_a_hub_conversion_records_addresses_commit_and_digests() {
    let Some(nginx) = tools() else { return };
    let local_dir = fixtures().join("good/hf_repo_sharded");
    let hub = Hub::start(
        &nginx,
        &[common::hub::repo("sharded", "good/hf_repo_sharded")],
    );
    let commit = common::hub::commit_of("sharded");
    let tmp = tempfile::tempdir().unwrap();
    let (out, st) = (tmp.path().join("out"), tmp.path().join("st.json"));
    let (lout, lst) = (tmp.path().join("lout"), tmp.path().join("lst.json"));
    let report = tmp.path().join("q.html");
    let o = hub.wp(&[
        "convert",
        "hf://org/sharded",
        "-o",
        out.to_str().unwrap(),
        "--attest",
        st.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    common::hub::ok(&o, "convert --attest");
    assert!(report.is_file());
    let l = common::wp(&[
        "convert",
        local_dir.to_str().unwrap(),
        "-o",
        lout.to_str().unwrap(),
        "--attest",
        lst.to_str().unwrap(),
    ]);
    common::hub::ok(&l, "local convert --attest");
    let doc: Value = serde_json::from_slice(&std::fs::read(&st).unwrap()).unwrap();
    let ldoc: Value = serde_json::from_slice(&std::fs::read(&lst).unwrap()).unwrap();
    assert_eq!(doc["subject"], ldoc["subject"]);
    let materials = doc["predicate"]["materials"].as_array().unwrap();
    assert_eq!(
        materials.len(),
        ldoc["predicate"]["materials"].as_array().unwrap().len()
    );
    for m in materials {
        let name = m["name"].as_str().unwrap();
        let file = name
            .strip_prefix(&format!("hf://org/sharded@{commit}/"))
            .unwrap_or_else(|| panic!("material {name}: not named by its address and commit"));
        assert_eq!(
            m["digest"]["sha256"].as_str().unwrap(),
            sha256_of(&local_dir.join(file)),
            "{name}"
        );
    }
    assert!(!String::from_utf8_lossy(&std::fs::read(&st).unwrap()).contains("weightport-remote."));
    let v = common::wp(&[
        "verify",
        "--attestation",
        st.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    common::hub::ok(&v, "verify --attestation");
}

/// An `https://` file has no published sha256: `--attest` is refused before anything is read
/// past the first answer or written, with a message that names the URL without its query.
#[test]
fn attest_of_a_file_without_a_published_digest_is_refused() {
    let Some(nginx) = tools() else { return };
    let hub = Hub::start(&nginx, &[]);
    let st = fixtures().join("good/safetensors/llama_tiny.safetensors");
    let url = format!("{}?X-Amz-Signature=secret123", hub.plain(&st));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o.safetensors");
    let att = tmp.path().join("st.json");
    let o = hub.wp(&[
        "convert",
        &url,
        "-o",
        out.to_str().unwrap(),
        "--attest",
        att.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no sha256 published"), "{err}");
    assert!(err.contains("/plain/llama_tiny.safetensors"), "{err}");
    assert!(!err.contains("secret123"), "{err}");
    assert!(!out.exists() && !att.exists());
}

/// `[start, end)` of each storage record's bytes in the torch ZIP `bin`.
fn storage_spans(bin: &Path) -> Vec<(u64, u64)> {
    let mut z = zip::ZipArchive::new(std::fs::File::open(bin).unwrap()).unwrap();
    let mut v = Vec::new();
    for i in 0..z.len() {
        let f = z.by_index_raw(i).unwrap();
        let name = f.name().unwrap().to_string();
        if name.contains("/data/") && !name.ends_with(".pkl") {
            let start = f.data_start().unwrap();
            v.push((start, start + f.compressed_size()));
        }
    }
    v
}

/// Bytes of the storages that ranged reads of an LFS object asked for, the first read (the
/// Hub client's fixed `bytes=0-100000`, asked before anything is known of the file) aside.
fn storage_bytes_asked(hub: &Hub, spans: &[(u64, u64)]) -> u64 {
    let mut total = 0;
    for l in hub.log().iter().filter(|l| l.contains("/lfs/")) {
        let Some(r) = l.split("\"bytes=").nth(1).and_then(|r| r.split('"').next()) else {
            continue;
        };
        let (a, b) = r.split_once('-').unwrap();
        let (a, b): (u64, u64) = (a.parse().unwrap(), b.parse::<u64>().unwrap() + 1);
        if a == 0 && b == 100_001 {
            continue;
        }
        for &(s, e) in spans {
            total += e.min(b).saturating_sub(s.max(a));
        }
    }
    total
}

/// The skeleton of `fixtures/good/big_bin` with the pickle of a hostile fixture (an
/// `os.system` global) as its `data.pkl`, in `dir`.
fn evil_skeleton(dir: &Path) -> PathBuf {
    let skel = dir.join("evil_skeleton");
    std::fs::create_dir_all(&skel).unwrap();
    for e in std::fs::read_dir(fixtures().join("good/big_bin")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, skel.join(p.file_name().unwrap())).unwrap();
    }
    let f = std::fs::File::open(fixtures().join("hostile/pickle/01_rce_global_os_system.pt"));
    let mut z = zip::ZipArchive::new(f.unwrap()).unwrap();
    let mut pkl = Vec::new();
    std::io::Read::read_to_end(&mut z.by_name("archive/data.pkl").unwrap(), &mut pkl).unwrap();
    std::fs::write(skel.join("pytorch_model__data.pkl"), pkl).unwrap();
    skel
}

/// A Hub serving, from files made in `dir`: `org/big` (the 1 GiB `.bin`), `org/evil` (the same
/// with an `os.system` pickle), `org/arch` (the `.bin` and a config.json of an unknown
/// architecture). `None` without python3 (outside CI).
fn dry_run_hub(nginx: &Path, dir: &Path) -> Option<(Hub, PathBuf)> {
    let bin = big_bin(dir)?;
    let evil_dir = dir.join("evil");
    std::fs::create_dir_all(&evil_dir).unwrap();
    let evil = big_bin_from(&evil_skeleton(dir), &evil_dir).unwrap();
    let arch_dir = dir.join("arch");
    std::fs::create_dir_all(&arch_dir).unwrap();
    let config = arch_dir.join("config.json");
    std::fs::write(
        &config,
        r#"{"architectures": ["NoSuchModelForCausalLM"], "model_type": "no_such"}"#,
    )
    .unwrap();
    let repo = |name, files| Repo::of(name, files);
    let hub = Hub::start(
        nginx,
        &[
            repo("big", vec![bin.clone()]),
            repo("evil", vec![evil]),
            repo("arch", vec![config, bin.clone()]),
        ],
    );
    Some((hub, bin))
}

/// `convert --dry-run` of a 1 GiB `.bin` on the Hub plans, or refuses (a pickle global, an
/// architecture it does not convert to GGUF, not enough disk), having asked for none of the
/// storages' bytes beyond the slack of the small pieces that hold the ZIP's headers: checked on
/// nginx's access log against the storages' offsets in the file.
#[test]
fn dry_run_plans_and_refuses_before_reading_weights() {
    let Some(nginx) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let Some((hub, bin)) = dry_run_hub(&nginx, dir.path()) else {
        return;
    };
    let spans = storage_spans(&bin);
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let cases: Vec<(&str, Vec<String>, Option<i32>, &str)> = vec![
        (
            "plan",
            vec![
                "hf://org/big".into(),
                "-o".into(),
                out.join("a.safetensors").to_string_lossy().into(),
            ],
            Some(0),
            "",
        ),
        (
            "pickle global",
            vec![
                "hf://org/evil".into(),
                "-o".into(),
                out.join("b.safetensors").to_string_lossy().into(),
            ],
            Some(3),
            "os.system",
        ),
        (
            "architecture",
            vec![
                "hf://org/arch".into(),
                "-o".into(),
                out.join("c.gguf").to_string_lossy().into(),
                "--quant".into(),
                "q4_k_m".into(),
            ],
            None,
            "NoSuchModelForCausalLM",
        ),
    ];
    for (what, args, code, says) in cases {
        let before = hub.log().len();
        let mut v = vec!["convert", "--dry-run"];
        v.extend(args.iter().map(String::as_str));
        let o = hub.wp(&v);
        let err = String::from_utf8_lossy(&o.stderr);
        match code {
            Some(c) => assert_eq!(o.status.code(), Some(c), "{what}: {err}"),
            None => assert!(!o.status.success(), "{what}: {err}"),
        }
        assert!(err.contains(says), "{what}: {err}");
        let asked = storage_bytes_asked(&hub, &spans);
        let lines = hub.log().len() - before;
        eprintln!("dry run, {what}: {asked} storage bytes asked in total so far, {lines} requests");
    }
    // Not enough disk for the 1 GiB output: refused by the plan.
    if let Some(small) = common::tmpfs::Tmpfs::mount("1m") {
        let o = small.mnt.join("d.safetensors");
        let o = hub.wp(&[
            "convert",
            "--dry-run",
            "hf://org/big",
            "-o",
            o.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains("free space"), "{err}");
        assert!(small.mnt.read_dir().unwrap().next().is_none());
    }
    let asked = storage_bytes_asked(&hub, &spans);
    eprintln!("dry runs: {asked} bytes of the 1 GiB of storages asked in all");
    // Each run: at most two 16 KiB pieces holding a header next to a storage.
    assert!(
        asked <= 128 << 10,
        "{asked} bytes of the storages asked: {:?}",
        hub.log()
    );
    assert!(out.read_dir().unwrap().next().is_none());
}

/// `slice` and `diff` of files on the Hub: the slices are numpy's `np.save` bytes
/// (`fixtures/expected/edit/slice`), the diff's figures numpy's (`expected/edit/diff.json`).
#[test]
fn slice_and_diff_read_remote_inputs() {
    let Some(nginx) = tools() else { return };
    let edit = fixtures().join("good/edit");
    let hub = Hub::start(
        &nginx,
        &[
            Repo::of("base", vec![edit.join("base.safetensors")]),
            Repo::of(
                "added",
                vec![fixtures().join("expected/edit/add.safetensors")],
            ),
        ],
    );
    let tmp = tempfile::tempdir().unwrap();
    let v: Value = serde_json::from_slice(
        &std::fs::read(fixtures().join("expected/edit/slice.json")).unwrap(),
    )
    .unwrap();
    let mut sliced = 0;
    for c in v["cases"].as_array().unwrap() {
        if c["input"] != "good/edit/base.safetensors" {
            continue;
        }
        let want = c["expected"].as_str().unwrap();
        let out = tmp.path().join(format!("s{sliced}-{want}"));
        let sel = c["sel"].as_str().unwrap();
        let o = hub.wp(&[
            "slice",
            "hf://org/base/base.safetensors",
            sel,
            "-o",
            out.to_str().unwrap(),
        ]);
        common::hub::ok(&o, sel);
        let expected = fixtures().join("expected/edit/slice").join(want);
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(expected).unwrap(),
            "{sel}"
        );
        sliced += 1;
    }
    assert!(sliced >= 3);
    // diff: numpy's figures for base against add.safetensors.
    let d: Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("expected/edit/diff.json")).unwrap())
            .unwrap();
    let pair = d["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["a"] == "good/edit/base.safetensors"
                && p["b"] == "expected/edit/add.safetensors"
                && p["atol"].is_null()
                && p["rtol"].is_null()
        })
        .unwrap();
    let o = hub.wp(&["--json", "diff", "hf://org/base", "hf://org/added"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let got = json_of(&o);
    for t in got["tensors"].as_array().unwrap() {
        let want = &pair["tensors"][t["name"].as_str().unwrap()];
        assert_eq!(t["status"], want["status"], "{t}");
        if want["status"] == "changed" {
            assert_eq!(t["changed"], want["changed"], "{t}");
            let (g, w) = (
                t["max_abs"].as_f64().unwrap(),
                want["max_abs"].as_f64().unwrap(),
            );
            assert!((g - w).abs() <= 1e-9 * w.abs().max(1.0), "{t}");
        }
    }
    // delta of remote sides: tests/it/remote_jobs.rs.
}

/// `edit` cannot take a remote input (it rewrites its target in place): it says so, exit 2,
/// before any request, the URL shown without its query. (A job file's, a plan's and a delta's
/// remote inputs: tests/it/remote_jobs.rs.)
#[test]
fn edit_refuses_remote_inputs_clearly() {
    let url = "https://127.0.0.1:9/x/model.safetensors?sig=secret123";
    let o = common::wp(&["edit", url, "--set", "k=v"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("rewrites its target in place") && e.contains("/x/model.safetensors"),
        "{e}"
    );
    assert!(!e.contains("secret123"), "{e}");
}

/// The value under `key` anywhere in `v` (the attestation's recipe options).
fn find_key<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Object(m) => m
            .get(key)
            .or_else(|| m.values().find_map(|x| find_key(x, key))),
        Value::Array(a) => a.iter().find_map(|x| find_key(x, key)),
        _ => None,
    }
}

/// `ours` holds the tensors and keys of `theirs` but `quantize.imatrix.file`, which names
/// `given` (the matrix as given on the command line, as llama-quantize records it).
fn same_but_imatrix_file(ours: &Path, theirs: &Path, given: &str) {
    let d = common::wp(&["diff", ours.to_str().unwrap(), theirs.to_str().unwrap()]);
    common::hub::ok(&d, "diff: the tensors are the same");
    let meta = |p: &Path| {
        let o = common::wp(&["--json", "inspect", p.to_str().unwrap()]);
        json_of(&o)["metadata"].as_object().unwrap().clone()
    };
    let (mut a, mut b) = (meta(ours), meta(theirs));
    let key = "quantize.imatrix.file";
    assert_eq!(a.remove(key).unwrap().to_string(), format!("{given:?}"));
    assert!(b.remove(key).is_some());
    assert_eq!(a, b);
}

/// `--imatrix` and `--metadata` read from the Hub: a GGUF importance matrix by ranges through
/// its view's stand-in, a `.dat` one and the metadata JSON fetched whole. Each quantization
/// equals the one from the local file llama-quantize was given (whose bytes are its reference:
/// tests/it/imatrix.rs) but for `quantize.imatrix.file`, which records the address as given; an
/// HF release's conversion with both equals the same command on the local files so, and
/// `--attest` names both files by address at the commit with their sha256 (not the view's
/// empty stand-in's). A plan, whose units read the files themselves, refuses them.
#[test]
fn imatrix_and_metadata_from_the_hub_equal_the_local_files() {
    let Some(nginx) = tools() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let r = crate::imatrix::reference();
    let (hf, f16) = crate::imatrix::release(tmp.path(), &r);
    let meta = tmp.path().join("meta.json");
    std::fs::write(
        &meta,
        r#"{"general.name": "From The Hub", "general.license": "mit", "general.tags": ["a"]}"#,
    )
    .unwrap();
    let im = fixtures().join("good/imatrix");
    let files = vec![
        im.join("imatrix.gguf"),
        im.join("imatrix.dat"),
        meta.clone(),
    ];
    let hub = Hub::start(&nginx, &[Repo::of("imat", files)]);
    let (f16s, out) = (f16.to_str().unwrap(), tmp.path().join("q.gguf"));
    let local = tmp.path().join("local.gguf");
    for (matrix, ty, want) in [
        ("imatrix.gguf", "IQ4_XS", &r["quant"]["IQ4_XS"]),
        ("imatrix.dat", "Q4_K_M", &r["quant_dat"]["Q4_K_M"]),
    ] {
        // The path llama-quantize was given (relative to the repository root, the tests' cwd).
        let rel = format!("fixtures/good/imatrix/{matrix}");
        let at = format!("hf://org/imat/{matrix}");
        for (o, m) in [(&local, rel.as_str()), (&out, at.as_str())] {
            let args = ["convert", f16s, "-o", o.to_str().unwrap(), "--force"];
            let run = hub.wp(&[&args[..], &["--quant", ty, "--imatrix", m]].concat());
            common::hub::ok(&run, m);
        }
        assert_eq!(sha256_of(&local), want.as_str().unwrap(), "{ty} with {rel}");
        same_but_imatrix_file(&out, &local, &at);
    }
    let (rout, ratt) = (tmp.path().join("r.gguf"), tmp.path().join("r.json"));
    let (lout, latt) = (tmp.path().join("l.gguf"), tmp.path().join("l.json"));
    let run = |out: &Path, att: &Path, imatrix: &str, metadata: &str| {
        let args = [
            "convert",
            hf.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--quant",
            "Q8_0",
            "--imatrix",
            imatrix,
            "--metadata",
            metadata,
            "--attest",
            att.to_str().unwrap(),
        ];
        hub.wp(&args)
    };
    let local_matrix = im.join("imatrix.gguf");
    common::hub::ok(
        &run(
            &rout,
            &ratt,
            "hf://org/imat/imatrix.gguf",
            "hf://org/imat/meta.json",
        ),
        "remote sides",
    );
    common::hub::ok(
        &run(
            &lout,
            &latt,
            local_matrix.to_str().unwrap(),
            meta.to_str().unwrap(),
        ),
        "local sides",
    );
    same_but_imatrix_file(&rout, &lout, "hf://org/imat/imatrix.gguf");
    let shown = json_of(&common::wp(&["--json", "inspect", rout.to_str().unwrap()]));
    assert_eq!(shown["metadata"]["general.name"], "From The Hub");
    let doc: Value = serde_json::from_slice(&std::fs::read(&ratt).unwrap()).unwrap();
    let commit = common::hub::commit_of("imat");
    for (key, file) in [("imatrix", &local_matrix), ("metadata", &meta)] {
        let got = find_key(&doc, key).unwrap_or_else(|| panic!("no {key} in {doc}"));
        let name = file.file_name().unwrap().to_str().unwrap();
        assert_eq!(
            got["path"],
            format!("hf://org/imat@{commit}/{name}"),
            "{key}"
        );
        assert_eq!(got["sha256"], sha256_of(file), "{key}");
    }
    // A job file's outputs, one with the remote matrix (read through the job's own layout of
    // side files) and one with the local file: the same tensors, the address recorded.
    let job = tmp.path().join("job.toml");
    let (jr, jl) = (tmp.path().join("jr.gguf"), tmp.path().join("jl.gguf"));
    std::fs::write(
        &job,
        format!(
            "[[job]]\ninput = {f16s:?}\n[[job.output]]\npath = {:?}\nquant = \"IQ4_XS\"\n\
             imatrix = \"hf://org/imat/imatrix.gguf\"\n[[job.output]]\npath = {:?}\n\
             quant = \"IQ4_XS\"\nimatrix = {:?}\n",
            jr.to_str().unwrap(),
            jl.to_str().unwrap(),
            local_matrix.to_str().unwrap(),
        ),
    )
    .unwrap();
    common::hub::ok(&hub.wp(&["run", job.to_str().unwrap()]), "run job.toml");
    same_but_imatrix_file(&jr, &jl, "hf://org/imat/imatrix.gguf");
    let plan = tmp.path().join("plan.json");
    let o = hub.wp(&[
        "plan",
        f16s,
        "-o",
        out.to_str().unwrap(),
        "--quant",
        "Q8_0",
        "--imatrix",
        "hf://org/imat/imatrix.gguf",
        "--units",
        "2",
        "--plan",
        plan.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--imatrix hf://org/imat/imatrix.gguf"),
        "{err}"
    );
    assert!(!plan.exists());
    // A matrix the repo does not hold, and a file that is no matrix (the metadata JSON):
    // clear errors naming it, nothing written.
    let gone = tmp.path().join("gone.gguf");
    for (matrix, word) in [
        ("hf://org/imat/missing.gguf", "missing.gguf"),
        ("hf://org/imat/meta.json", "meta.json"),
    ] {
        let args = ["convert", f16s, "-o", gone.to_str().unwrap()];
        let o = hub.wp(&[&args[..], &["--quant", "Q8_0", "--imatrix", matrix]].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{matrix}: {err}");
        assert!(err.contains(word), "{matrix}: {err}");
        assert!(
            !err.contains("panicked") && !gone.exists(),
            "{matrix}: {err}"
        );
    }
}
