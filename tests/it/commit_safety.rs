//! Issue 5: what a hostile-but-realistic user broke in the foundation, one test per defect.
//! Every expected output here is either an input written by safetensors-py / huggingface_hub
//! (a rewrite of a `save_file` file is byte-identical to it) or a property (no partial file,
//! input untouched, no temp left).

use crate::common;
use common::tmpfs::Tmpfs;
use common::{fixtures, wp};

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited normally")
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
    }
}

fn temps_in(d: &Path) -> Vec<String> {
    std::fs::read_dir(d)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".wp-tmp") || n.starts_with(".weightport-commit"))
                .collect()
        })
        .unwrap_or_default()
}

/// Item 1: two writers on one output, 20 times: always exactly one input's content.
#[test]
fn concurrent_writers_never_mix_or_silently_replace() {
    let a = fixtures().join("good/safetensors/llama_tiny.safetensors");
    let b = fixtures().join("good/safetensors/edge_cases.safetensors");
    let (ba, bb) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    for round in 0..20 {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("one.safetensors");
        let spawn = |i: &Path, force: bool| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_weightport"));
            c.args(["convert", s(i), "-o", s(&out)]);
            if force {
                c.arg("--force");
            }
            c.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        };
        let force = round % 2 == 1;
        let (mut p, mut q) = (spawn(&a, force), spawn(&b, force));
        let (ea, eb) = (p.wait().unwrap(), q.wait().unwrap());
        let got = std::fs::read(&out).unwrap();
        assert!(
            got == ba || got == bb,
            "round {round}: the output is neither input"
        );
        if !force {
            assert!(
                ea.success() != eb.success(),
                "round {round}: without --force exactly one writer may succeed"
            );
        }
        assert!(temps_in(tmp.path()).is_empty());
    }
}

fn big_input(dir: &Path) -> PathBuf {
    // A few-MB model in save_file's layout (weightport's writer is byte-identical to it for
    // metadata-free files, checked against the fixtures in tests/it/cli.rs).
    use weightport_core::{DType, TensorInfo};
    let mut tensors = Vec::new();
    let data: Vec<Vec<u8>> = (0..6)
        .map(|i| {
            (0..(1u32 << 20))
                .map(|j| (j.wrapping_mul(2654435761).wrapping_add(i) >> 13) as u8)
                .collect()
        })
        .collect();
    for (i, d) in data.iter().enumerate() {
        tensors.push((
            TensorInfo {
                name: format!("layer.{i}.weight"),
                dtype: DType::F16,
                shape: vec![512, 1024],
                byte_len: d.len() as u64,
            },
            d.as_slice(),
        ));
    }
    let p = dir.join("in.safetensors");
    weightport_safetensors::write_file(&p, &tensors, None).unwrap();
    p
}

/// The crash test: SIGKILL and SIGTERM at random points, 20 times each. The target never holds
/// a partial or mixed file, the input is byte-identical, no temp survives a SIGTERM, and the
/// next run cleans up after a SIGKILL.
#[test]
fn kills_at_random_points_never_leave_partial_output() {
    let tmp = tempfile::tempdir().unwrap();
    let input = big_input(tmp.path());
    let before = std::fs::read(&input).unwrap();
    let mut seed = 0x2545F4914F6CDD1Du64;
    for (sig, name) in [(libc::SIGKILL, "KILL"), (libc::SIGTERM, "TERM")] {
        for round in 0..20 {
            let out = tmp.path().join(format!("out-{name}-{round}"));
            let target = out.join("model-00001-of-00006.safetensors");
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            // A debug-build run of this job takes about 0.5 s: kill anywhere in it.
            let delay = Duration::from_micros(seed % 500_000);
            let mut child = Command::new(env!("CARGO_BIN_EXE_weightport"))
                .args(["convert", s(&input), "-o", s(&out), "--shard-size", "2MB"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(delay);
            // SAFETY: signalling our own child process.
            unsafe { libc::kill(child.id() as i32, sig) };
            let status = child.wait().unwrap();
            if sig == libc::SIGTERM && !status.success() {
                use std::os::unix::process::ExitStatusExt;
                assert!(
                    status.code() == Some(130) || status.signal().is_some(),
                    "SIGTERM: {status:?}"
                );
            }
            if target.exists() {
                // Published (or rolled forward next time): must be complete.
                let r = wp(&["verify", s(&out)]);
                if temps_in(&out)
                    .iter()
                    .all(|t| !t.starts_with(".weightport-commit"))
                {
                    assert_eq!(code(&r), 0, "{name} round {round}: {}", err(&r));
                }
            }
            if sig == libc::SIGTERM {
                assert!(
                    temps_in(&out).is_empty(),
                    "TERM round {round}: {:?}",
                    temps_in(&out)
                );
            }
            // The next run finishes or cleans up whatever the killed one left.
            let r = wp(&[
                "convert",
                s(&input),
                "-o",
                s(&out),
                "--shard-size",
                "2MB",
                "--force",
            ]);
            assert_eq!(code(&r), 0, "{name} round {round}: {}", err(&r));
            assert!(temps_in(&out).is_empty());
            let v = wp(&["verify", s(&out), "--against", s(&input)]);
            assert_eq!(code(&v), 0, "{}", err(&v));
        }
    }
    assert_eq!(
        std::fs::read(&input).unwrap(),
        before,
        "the input was modified"
    );
}

/// Item 2: an unreadable companion fails before anything is published.
#[test]
fn a_failing_companion_leaves_the_old_repo_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    copy_dir(&fixtures().join("good/hf_repo_single"), &src);
    std::fs::write(src.join("tokenizer.json"), b"{}").unwrap();
    std::fs::set_permissions(
        src.join("tokenizer.json"),
        std::fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    if std::fs::read(src.join("tokenizer.json")).is_ok() {
        eprintln!("skipped: running as a user who can read mode-0 files (root)");
        // Use a directory named like a companion instead: opening it for copy fails.
        std::fs::remove_file(src.join("tokenizer.json")).unwrap();
    }
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("model.safetensors"), b"old").unwrap();
    std::fs::write(out.join("config.json"), b"old config").unwrap();
    // A symlink companion pointing outside the repo is refused before anything is written.
    std::os::unix::fs::symlink("/etc/hostname", src.join("vocab.txt")).unwrap();
    let o = wp(&["convert", s(&src), "-o", s(&out), "--force"]);
    assert_eq!(code(&o), 3, "{}", err(&o));
    assert_eq!(
        std::fs::read(out.join("model.safetensors")).unwrap(),
        b"old"
    );
    assert_eq!(
        std::fs::read(out.join("config.json")).unwrap(),
        b"old config"
    );
    assert!(temps_in(&out).is_empty());
}

/// Item 3: an index is checked against the repo, not trusted.
#[test]
fn incomplete_or_inconsistent_indexes_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    copy_dir(&fixtures().join("good/hf_repo_sharded"), &repo);
    let idx_path = repo.join("model.safetensors.index.json");
    let orig: Value = serde_json::from_slice(&std::fs::read(&idx_path).unwrap()).unwrap();
    let write = |v: &Value| std::fs::write(&idx_path, v.to_string()).unwrap();

    let mut only_first = orig.clone();
    let wm = only_first["weight_map"].as_object_mut().unwrap();
    wm.retain(|_, f| f == "model-00001-of-00003.safetensors");
    only_first["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("total_size");
    write(&only_first);
    let o = wp(&["inspect", s(&repo)]);
    assert_eq!(code(&o), 1, "{}", err(&o));
    assert!(
        err(&o).contains("model-00002-of-00003.safetensors"),
        "{}",
        err(&o)
    );
    assert_eq!(code(&wp(&["inspect", s(&repo), "--index-only"])), 0);

    let mut empty = orig.clone();
    empty["weight_map"] = serde_json::json!({});
    write(&empty);
    let o = wp(&["inspect", s(&repo)]);
    assert_eq!(code(&o), 1);
    assert!(err(&o).contains("empty"), "{}", err(&o));

    let mut wrong_size = orig.clone();
    wrong_size["metadata"]["total_size"] = serde_json::json!(12345);
    write(&wrong_size);
    let o = wp(&["inspect", s(&repo)]);
    assert_eq!(code(&o), 1);
    assert!(err(&o).contains("total_size"), "{}", err(&o));
    write(&orig);
    assert_eq!(code(&wp(&["inspect", s(&repo)])), 0);
}

/// Item 4: a repo with both a single file and an index is read as transformers reads it.
#[test]
fn single_file_beside_an_index_is_chosen_and_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    copy_dir(&fixtures().join("good/hf_repo_sharded"), &repo);
    std::fs::copy(
        fixtures().join("good/safetensors/edge_cases.safetensors"),
        repo.join("model.safetensors"),
    )
    .unwrap();
    let o = wp(&["--json", "inspect", s(&repo)]);
    assert_eq!(code(&o), 0);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["chosen"]
        .as_str()
        .unwrap()
        .ends_with("/model.safetensors"));
    assert!(v["notes"][0]
        .as_str()
        .unwrap()
        .contains("as transformers does"));
}

/// Item 5: outputs follow the umask like cp, also when --force replaces a file.
#[test]
fn outputs_get_0666_minus_umask() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o.safetensors");
    let f = fixtures().join("good/safetensors/llama_tiny.safetensors");
    std::fs::write(&out, b"x").unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = Command::new("sh")
        .args([
            "-c",
            &format!(
                "umask 022; exec {} convert {} -o {} --force",
                env!("CARGO_BIN_EXE_weightport"),
                s(&f),
                s(&out)
            ),
        ])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert_eq!(
        std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o644
    );
    let repo = tmp.path().join("r");
    let o = Command::new("sh")
        .args([
            "-c",
            &format!(
                "umask 002; exec {} convert {} -o {} --shard-size 30KB",
                env!("CARGO_BIN_EXE_weightport"),
                s(&fixtures().join("good/hf_repo_sharded")),
                s(&repo)
            ),
        ])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", err(&o));
    for e in std::fs::read_dir(&repo).unwrap() {
        let m = e.unwrap().metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(m, 0o664);
    }
}

/// Item 6: odd names in the output directory never panic.
#[test]
fn odd_names_in_the_output_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("model-00001-o€1234.safetensors"), b"x").unwrap();
    let f = fixtures().join("good/hf_repo_sharded");
    let o = wp(&[
        "convert",
        s(&f),
        "-o",
        s(&out),
        "--force",
        "--shard-size",
        "30KB",
    ]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert!(
        out.join("model-00001-o€1234.safetensors").exists(),
        "not ours: kept"
    );
}

/// Item 11: the Hugging Face cache layout (symlinks into blobs/) reads; links outside refuse.
#[test]
fn hf_cache_snapshots_work_and_outside_links_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let entry = tmp.path().join("hub/models--org--tiny");
    let blobs = entry.join("blobs");
    let snap = entry.join("snapshots/0123abcd");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::create_dir_all(&snap).unwrap();
    for e in std::fs::read_dir(fixtures().join("good/hf_repo_sharded")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        let blob = blobs.join(format!("sha-{name}"));
        std::fs::copy(&p, &blob).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/sha-{name}"), snap.join(&name)).unwrap();
    }
    let o = wp(&["inspect", s(&snap)]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let out = tmp.path().join("out");
    let o = wp(&["convert", s(&snap), "-o", s(&out)]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let cfg = std::fs::symlink_metadata(out.join("config.json")).unwrap();
    assert!(
        cfg.file_type().is_file(),
        "companions are copied as regular files"
    );

    let secret = tmp.path().join("id_rsa");
    std::fs::write(&secret, b"SECRETKEYBYTES").unwrap();
    std::fs::remove_file(snap.join("model-00002-of-00003.safetensors")).unwrap();
    std::os::unix::fs::symlink(&secret, snap.join("model-00002-of-00003.safetensors")).unwrap();
    let o = wp(&["inspect", s(&snap)]);
    assert_eq!(code(&o), 3, "{}", err(&o));
    assert!(!err(&o).contains("SECRET"));
}

/// Item 12: names from files never reach the terminal raw.
#[test]
fn terminal_escapes_from_files_are_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let evil = "evil\u{1b}]0;pwned\u{7}\u{1b}[2J.safetensors";
    let idx = serde_json::json!({"metadata": {}, "weight_map": {"w": evil}});
    std::fs::write(repo.join("model.safetensors.index.json"), idx.to_string()).unwrap();
    let o = wp(&["inspect", s(&repo)]);
    assert_ne!(code(&o), 0);
    assert!(!err(&o).contains('\u{1b}'), "{:?}", err(&o));
}

/// Items 13, 10, 14, 15: argument errors in JSON, absurd threads, honest dry runs, odd inputs.
#[test]
fn json_argument_errors_threads_dry_run_and_odd_inputs() {
    let f = fixtures().join("good/safetensors/llama_tiny.safetensors");
    for args in [
        vec!["--json", "convert", s(&f)],
        vec![
            "--json",
            "convert",
            s(&f),
            "-o",
            "/tmp/x",
            "--shard-size",
            "5XB",
        ],
        vec!["--json", "convert", s(&f), "-o", "/tmp/x", "--frobnicate"],
    ] {
        let o = wp(&args);
        assert_eq!(code(&o), 2);
        let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"]["exit_code"], 2);
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o.safetensors");
    assert_eq!(
        code(&wp(&["--threads", "3000", "convert", s(&f), "-o", s(&out)])),
        2
    );
    assert!(!out.exists());

    std::fs::write(&out, b"existing").unwrap();
    let o = wp(&["convert", s(&f), "-o", s(&out), "--dry-run"]);
    assert_eq!(
        code(&o),
        2,
        "a dry run is refused like the real run: {}",
        err(&o)
    );
    let repo = tmp.path().join("repo");
    assert_eq!(
        code(&wp(&[
            "convert",
            s(&fixtures().join("good/hf_repo_sharded")),
            "-o",
            s(&repo),
            "--shard-size",
            "10KB"
        ])),
        0
    );
    let o = wp(&[
        "--json",
        "convert",
        s(&f),
        "-o",
        s(&repo),
        "--force",
        "--dry-run",
    ]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["removed"].as_array().unwrap().len() >= 2, "{v}");
    assert!(
        repo.join("model-00001-of-00006.safetensors").exists(),
        "dry run removed nothing"
    );

    let upper = tmp.path().join("X.SAFETENSORS");
    assert_eq!(code(&wp(&["convert", s(&f), "-o", s(&upper)])), 0);
    assert!(upper.is_file());
    let o = wp(&["inspect", "/dev/zero"]);
    assert_ne!(code(&o), 0);
    assert!(err(&o).contains("not a regular file"), "{}", err(&o));
    // A bare relative index path, run from inside the repo.
    let o = Command::new(env!("CARGO_BIN_EXE_weightport"))
        .current_dir(&repo)
        .args(["inspect", "model.safetensors.index.json"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", err(&o));
}

fn sh(script: &str) -> Output {
    Command::new("sh").args(["-c", script]).output().unwrap()
}

/// `input` grown to ~100 MB in `dir`: 16 copies of its tensors under other names.
fn grown(input: &Path, dir: &Path) -> PathBuf {
    let src = weightport_safetensors::SafetensorsFile::open(input).unwrap();
    use weightport_core::TensorSource;
    let mut tensors = Vec::new();
    for k in 0..16 {
        for (i, t) in src.tensors().iter().enumerate() {
            let mut t = t.clone();
            t.name = format!("{k}.{}", t.name);
            tensors.push((t, src.bytes(i).unwrap()));
        }
    }
    let big = dir.join("big.safetensors");
    weightport_safetensors::write_file(&big, &tensors, None).unwrap();
    big
}

/// The reshard the truncation test interrupts: one thread, 20 MB shards.
fn reshard(big: &Path, out: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weightport"));
    c.args([
        "--threads",
        "1",
        "convert",
        s(big),
        "-o",
        s(out),
        "--shard-size",
        "20MB",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    c
}

/// Milliseconds a whole [`reshard`] of a [`grown`] input takes here.
fn whole_reshard_ms(tmp: &Path) -> u64 {
    let dir = tmp.join("whole");
    std::fs::create_dir(&dir).unwrap();
    let big = grown(&big_input(&dir), &dir);
    let t0 = std::time::Instant::now();
    let o = reshard(&big, &dir.join("out")).output().unwrap();
    assert!(o.status.success(), "{}", err(&o));
    t0.elapsed().as_millis() as u64
}

/// Item 8: an input truncated while it is read (SIGBUS under the map) gives a clear error and
/// leaves no temp file; a file-size limit (SIGXFSZ) is an ordinary write error.
#[test]
fn input_truncated_mid_read_and_file_size_limits_fail_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let mut saw_bus = false;
    // Truncations at fixed delays, then at fractions of a whole run's time on this machine (a
    // faster build, or an idle machine, can finish before every fixed delay), then every 7 ms of
    // its first 400: the input is read in a few tens of ms of the run (its bytes are copied by
    // the kernel and hashed from the map; the rest is the output's verify and fsync), a window
    // the coarser delays can all miss.
    let whole = whole_reshard_ms(tmp.path());
    let fractions = (1..8).map(|k| whole * k / 8);
    let sweep = (1..58).map(|k| k * 7);
    for (round, delay) in [30u64, 80, 150, 300, 600]
        .into_iter()
        .chain(fractions)
        .chain(sweep)
        .enumerate()
    {
        if saw_bus {
            break;
        }
        let dir = tmp.path().join(format!("r{round}"));
        std::fs::create_dir(&dir).unwrap();
        let input = big_input(&dir);
        let big = grown(&input, &dir);
        let out = dir.join("out");
        let child = reshard(&big, &out).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&big)
            .unwrap()
            .set_len(4096)
            .unwrap();
        let o = child.wait_with_output().unwrap();
        let e = err(&o);
        if code(&o) == 0 {
            continue; // finished before the truncation
        }
        assert_eq!(code(&o), 1, "{e}");
        saw_bus |= e.contains("input changed while reading");
        assert!(!e.contains("panicked"), "{e}");
        assert!(
            temps_in(&out).is_empty(),
            "round {round}: {:?}",
            temps_in(&out)
        );
        assert!(!out.join("model.safetensors.index.json").exists());
    }
    assert!(saw_bus, "no run was caught mid-read");

    let f = fixtures().join("good/safetensors/llama_tiny.safetensors");
    let out = tmp.path().join("fsize.safetensors");
    let o = sh(&format!(
        "ulimit -f 20; exec {} convert {} -o {}",
        env!("CARGO_BIN_EXE_weightport"),
        s(&f),
        s(&out)
    ));
    assert_eq!(code(&o), 1, "{}", err(&o));
    assert!(
        err(&o).contains("File too large") || err(&o).contains("too large"),
        "{}",
        err(&o)
    );
    assert!(!out.exists());
    assert!(temps_in(tmp.path()).is_empty());
}

/// Item 9: more output shards than the soft open-files limit.
#[test]
fn more_shards_than_the_soft_fd_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = sh(&format!(
        "ulimit -Sn 16; exec {} convert {} -o {} --shard-size 1KB",
        env!("CARGO_BIN_EXE_weightport"),
        s(&fixtures().join("good/hf_repo_sharded")),
        s(&out)
    ));
    assert_eq!(code(&o), 0, "{}", err(&o));
    let shards = std::fs::read_dir(&out)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("model-")
        })
        .count();
    assert!(shards > 16, "{shards} shards");
}

/// Issue 6 item 4: the memory budget is enforced: threads are reduced, and a budget below one
/// worker's need is refused.
#[test]
fn the_memory_budget_reduces_threads_or_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fixtures().join("good/safetensors/llama_tiny.safetensors");
    let run = |mem: &str, out: &str| {
        wp(&[
            "--json",
            "--threads",
            "4",
            "--max-memory",
            mem,
            "convert",
            s(&f),
            "-o",
            s(&tmp.path().join(out)),
        ])
    };
    let o = run("1GiB", "a.safetensors");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["threads"], 4);
    let worker = v["memory_bytes"].as_u64().unwrap() / 4;
    let o = run(&(worker * 2).to_string(), "b.safetensors");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["threads"], 2, "{v}");
    let o = run("100", "c.safetensors");
    assert_eq!(code(&o), 2, "{}", err(&o));
    assert!(!tmp.path().join("c.safetensors").exists());
}

/// Item 2: a disk with room for the new shards but not for the index (or the companions):
/// refused before anything is written, the old repo untouched. Needs a small tmpfs (root).
#[test]
fn a_nearly_full_disk_refuses_up_front_and_keeps_the_old_repo() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount("160k") else {
        return;
    };
    let mnt = disk.mnt.clone();
    let repo = mnt.join("repo");
    copy_dir(&fixtures().join("good/hf_repo_sharded"), &repo);
    let before = files_of(&repo);
    // The new repo is made from a copy outside the small disk: an output never replaces its
    // own input (force_never_replaces_or_removes_an_input).
    let src = tmp.path().join("src");
    copy_dir(&repo, &src);
    // Fill the disk so the new shards (~56 kB) fit but not shards + index + block rounding.
    let ballast = disk.fill_to(60 * 1024);
    let o = wp(&[
        "convert",
        s(&src),
        "-o",
        s(&repo),
        "--force",
        "--shard-size",
        "20KB",
    ]);
    assert_eq!(code(&o), 1, "{}", err(&o));
    assert!(err(&o).contains("free"), "{}", err(&o));
    assert_eq!(files_of(&repo), before, "the old repo must be untouched");
    // With the ballast gone the same reshard succeeds and verifies.
    std::fs::remove_file(ballast).unwrap();
    let o = wp(&[
        "convert",
        s(&src),
        "-o",
        s(&repo),
        "--force",
        "--shard-size",
        "20KB",
    ]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert_eq!(code(&wp(&["verify", s(&repo)])), 0);
    assert!(temps_in(&repo).is_empty());
}

/// The files of `dir` with their bytes, by name.
fn files_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
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

/// Runs the weightport binary with at most 256 open descriptors (`ulimit -n 256` sets the soft
/// and the hard limit).
fn wp_with_256_fds(args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 256 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_weightport"))
        .args(args)
        .output()
        .expect("run weightport under sh")
}

/// Issue 14 item 18: 700 output shards under a hard limit of 256 descriptors. Staging, writing,
/// verification and the commit hold no descriptor per shard; every shard read back holds its
/// tensor of safetensors-py's file (`t{i}` = four times `i`).
#[test]
fn seven_hundred_shards_fit_in_256_descriptors() {
    use weightport_core::TensorSource;
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/many/many_tensors.safetensors");
    let out = tmp.path().join("repo");
    let o = wp_with_256_fds(&["convert", s(&src), "-o", s(&out), "--shard-size", "16"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let mut shards = 0;
    for e in std::fs::read_dir(&out).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "safetensors") {
            continue;
        }
        let f = weightport_safetensors::SafetensorsFile::open(&p).unwrap();
        assert_eq!(f.tensors().len(), 1, "{}", p.display());
        let i: f32 = f.tensors()[0].name[1..].parse().unwrap();
        assert_eq!(
            f.bytes(0).unwrap(),
            i.to_le_bytes().repeat(4),
            "{}",
            p.display()
        );
        shards += 1;
    }
    assert_eq!(shards, 700);
    let v = wp_with_256_fds(&["verify", s(&out), "--against", s(&src)]);
    assert_eq!(code(&v), 0, "{}", String::from_utf8_lossy(&v.stdout));
    // The same for a GGUF output split into 700 parts.
    let g = tmp.path().join("g.gguf");
    let o = wp_with_256_fds(&["convert", s(&src), "-o", s(&g), "--split-max-size", "1"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let first = tmp.path().join("g-00001-of-00700.gguf");
    let v = wp_with_256_fds(&["verify", s(&first), "--against", s(&src)]);
    assert_eq!(code(&v), 0, "{}", String::from_utf8_lossy(&v.stdout));
}

/// Issue 28: an output never replaces or removes an input, even with `--force` (before, `convert
/// m.safetensors -o m.safetensors --force` rewrote the input in place, exit 0). A file given
/// twice, a repo written over its own shards, and a repo written where its shards are stale.
#[test]
fn force_never_replaces_or_removes_an_input() {
    let d = tempfile::tempdir().unwrap();
    let sha = |p: &Path| {
        use sha2::{Digest, Sha256};
        Sha256::digest(std::fs::read(p).unwrap()).to_vec()
    };
    let single = d.path().join("m.safetensors");
    std::fs::copy(
        fixtures().join("good/hf_repo_single/model.safetensors"),
        &single,
    )
    .unwrap();
    let repo = d.path().join("repo");
    copy_dir(&fixtures().join("good/hf_repo_sharded"), &repo);
    let shard = repo.join("model-00001-of-00003.safetensors");
    let before = (sha(&single), sha(&shard));
    let cases: [&[&str]; 3] = [
        &[
            "convert",
            s(&single),
            "-o",
            s(&single),
            "--force",
            "--dtype",
            "f32",
        ],
        &[
            "convert",
            s(&repo),
            "-o",
            s(&repo),
            "--force",
            "--shard-size",
            "20KB",
        ],
        // The one file is written beside the shards, which --force would remove as stale.
        &[
            "convert",
            s(&repo),
            "-o",
            s(&repo),
            "--force",
            "--shard-size",
            "10GB",
        ],
    ];
    for args in cases {
        let o = wp(args);
        assert_eq!(code(&o), 2, "{args:?}: {}", err(&o));
        assert!(
            err(&o).contains("is an input of this conversion"),
            "{}",
            err(&o)
        );
    }
    assert_eq!((sha(&single), sha(&shard)), before);
    assert!(repo.join("model.safetensors.index.json").exists());
    assert!(!repo.join("model.safetensors").exists());
}

/// The `--metadata` overrides file (issue 30) is an input too: an HF → GGUF output at its path
/// is refused even with `--force`, and the file keeps its bytes.
#[test]
fn force_never_replaces_the_metadata_file() {
    let d = tempfile::tempdir().unwrap();
    let meta = d.path().join("m.gguf");
    std::fs::write(&meta, br#"{"general.name": "Kept"}"#).unwrap();
    let before = std::fs::read(&meta).unwrap();
    let release = fixtures().join("good/arch/qwen2");
    let o = wp(&[
        "convert",
        s(&release),
        "-o",
        s(&meta),
        "--metadata",
        s(&meta),
        "--pre-tokenizer",
        "qwen2",
        "--force",
    ]);
    assert_eq!(code(&o), 2, "{}", err(&o));
    assert!(
        err(&o).contains("is an input of this conversion"),
        "{}",
        err(&o)
    );
    assert_eq!(std::fs::read(&meta).unwrap(), before);
}
