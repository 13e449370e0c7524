//! `weightport run JOB.toml`: a job's outputs are the bytes llama.cpp's tools make
//! (`convert_hf_to_gguf.py --outtype f16` + `llama-quantize`, sha256 from
//! fixtures/expected/arch/files.json), the same bytes as separate `convert` runs of this
//! binary, and the tensors transformers wrote; a rerun skips what still verifies and makes
//! again what does not; a failed output does not undo the others; `--dry-run` writes nothing;
//! a bad job file is refused with the key and line.

use crate::common;
use common::arch::{reference, sha_file};
use common::{fixtures, wp, write_dat_imatrix};

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

fn llama() -> String {
    fixtures().join("good/arch/llama").display().to_string()
}

/// The release → safetensors repo + Q8_0 + Q4_K_M job (attested, with a report).
const RELEASE_JOB: &str = r#"
[defaults]
threads = 2

[[job]]
input = "INPUT"

[[job.output]]
path = "out/repo"
shard_size = "30KB"

[[job.output]]
path = "out/m-Q8_0.gguf"
outtype = "f16"
quant = "Q8_0"

[[job.output]]
path = "out/m-Q4_K_M.gguf"
outtype = "f16"
quant = "Q4_K_M"
attest = "out/m-Q4_K_M.intoto.json"
report = "out/m-Q4_K_M.html"
"#;

fn write_job(dir: &Path, text: &str) -> PathBuf {
    let job = dir.join("job.toml");
    std::fs::write(&job, text.replace("INPUT", &llama())).unwrap();
    job
}

fn run_json(job: &Path, extra: &[&str]) -> (Output, Value) {
    let mut args = vec!["--json", "run", job.to_str().unwrap()];
    args.extend(extra);
    let o = wp(&args);
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o, v)
}

fn statuses(v: &Value) -> Vec<String> {
    v["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["status"].as_str().unwrap().to_string())
        .collect()
}

/// Every file under `dir`, relative, sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn convert(args: &[&str]) {
    let mut full = vec!["convert"];
    full.extend(args);
    let o = wp(&full);
    assert!(
        o.status.success(),
        "{full:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_job_makes_the_reference_bytes_and_the_bytes_of_separate_runs() {
    let t = tempfile::tempdir().unwrap();
    let job = write_job(t.path(), RELEASE_JOB);
    let (o, v) = run_json(&job, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(statuses(&v), ["made", "made", "made"]);
    assert_eq!(
        (v["made"].as_u64(), v["failed"].as_u64()),
        (Some(3), Some(0))
    );
    let out = t.path().join("out");
    // The reference chain's bytes.
    assert_eq!(
        sha_file(&out.join("m-Q8_0.gguf")),
        reference("Q8_0"),
        "Q8_0 vs llama-quantize"
    );
    assert_eq!(
        sha_file(&out.join("m-Q4_K_M.gguf")),
        reference("Q4_K_M"),
        "Q4_K_M vs llama-quantize"
    );
    // The repo holds the tensors transformers wrote.
    let repo = out.join("repo");
    let o = wp(&["verify", repo.to_str().unwrap(), "--against", &llama()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    // Separate runs of this binary give the same bytes, file for file.
    let sep = t.path().join("sep");
    let s = |p: &str| sep.join(p).display().to_string();
    convert(&[&llama(), "-o", &s("repo"), "--shard-size", "30KB"]);
    for q in ["Q8_0", "Q4_K_M"] {
        convert(&[
            &llama(),
            "-o",
            &s(&format!("m-{q}.gguf")),
            "--outtype",
            "f16",
            "--quant",
            q,
        ]);
    }
    assert_eq!(tree(&repo), tree(&sep.join("repo")));
    for f in tree(&repo) {
        assert_eq!(
            sha_file(&repo.join(&f)),
            sha_file(&sep.join("repo").join(&f)),
            "repo/{f}"
        );
    }
    assert!(tree(&repo).len() > 3, "a sharded repo with its companions");
    // The attestation names the GGUF with its sha256; the report is a page.
    let st: Value =
        serde_json::from_slice(&std::fs::read(out.join("m-Q4_K_M.intoto.json")).unwrap()).unwrap();
    assert_eq!(st["subject"][0]["name"], "m-Q4_K_M.gguf");
    assert_eq!(st["subject"][0]["digest"]["sha256"], reference("Q4_K_M"));
    let html = std::fs::read_to_string(out.join("m-Q4_K_M.html")).unwrap();
    assert!(html.contains("<svg"), "the report's chart");
}

#[test]
fn a_rerun_skips_what_verifies_and_makes_again_what_does_not() {
    let t = tempfile::tempdir().unwrap();
    let job = write_job(t.path(), RELEASE_JOB);
    assert!(run_json(&job, &[]).0.status.success());
    let out = t.path().join("out");
    let q8 = out.join("m-Q8_0.gguf");
    let before = std::fs::metadata(&q8).unwrap().modified().unwrap();
    let (o, v) = run_json(&job, &[]);
    assert!(o.status.success());
    assert_eq!(statuses(&v), ["skipped", "skipped", "skipped"]);
    assert_eq!(std::fs::metadata(&q8).unwrap().modified().unwrap(), before);
    // A changed byte in one output, a deleted attestation of another: those two are made
    // again, the repo is skipped.
    let mut b = std::fs::read(&q8).unwrap();
    let n = b.len();
    b[n - 1] ^= 1;
    std::fs::write(&q8, b).unwrap();
    std::fs::remove_file(out.join("m-Q4_K_M.intoto.json")).unwrap();
    let (o, v) = run_json(&job, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(statuses(&v), ["skipped", "made", "made"]);
    let why = v["outputs"][1]["redone_because"].as_str().unwrap();
    assert!(why.contains("m-Q8_0.gguf changed"), "{why}");
    assert_eq!(sha_file(&q8), reference("Q8_0"));
    assert!(out.join("m-Q4_K_M.intoto.json").is_file());
    // Changed options make it again too.
    let edited = RELEASE_JOB.replace("quant = \"Q8_0\"", "quant = \"Q8_0\"\npure = true");
    let job = write_job(t.path(), &edited);
    let (_, v) = run_json(&job, &["--dry-run"]);
    assert_eq!(statuses(&v), ["skipped", "planned", "skipped"]);
    assert_eq!(v["outputs"][1]["redone_because"], "its options changed");
}

#[test]
fn a_failed_output_does_not_undo_the_others() {
    let t = tempfile::tempdir().unwrap();
    let gguf = fixtures().join("good/gguf/c_quant_q4_k_m.gguf");
    let text = format!(
        "[[job]]\ninput = \"{}\"\n\n[[job.output]]\npath = \"a.safetensors\"\n\n\
         [[job.output]]\npath = \"b.gguf\"\nquant = \"Q8_0\"\n\n[[job.output]]\npath = \"c.gguf\"\n",
        gguf.display()
    );
    std::fs::write(t.path().join("job.toml"), &text).unwrap();
    let job = t.path().join("job.toml");
    // The dry run plans the two that can be made and names the refusal; it writes nothing.
    let (o, v) = run_json(&job, &["--dry-run"]);
    assert_eq!(o.status.code(), Some(3), "a requantize refusal");
    assert_eq!(statuses(&v), ["planned", "failed", "planned"]);
    assert!(v["needed_bytes"].as_u64().unwrap() > 0);
    assert_eq!(tree(t.path()), ["job.toml"]);
    let (o, v) = run_json(&job, &[]);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(statuses(&v), ["made", "failed", "made"]);
    let e = &v["outputs"][1]["error"];
    assert_eq!(e["kind"], "refused");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("--allow-requantize"),
        "{e}"
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("job.toml:8: job 1 output 2"), "{stderr}");
    assert!(stderr.contains("2 made, 0 skipped, 1 failed"), "{stderr}");
    assert!(!t.path().join("b.gguf").exists());
    // The outputs made are what convert makes: the GGUF copied byte for byte, the F32 values.
    assert_eq!(sha_file(&t.path().join("c.gguf")), sha_file(&gguf));
    let o = wp(&[
        "verify",
        t.path().join("a.safetensors").to_str().unwrap(),
        "--against",
        gguf.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
}

#[test]
fn an_output_made_by_someone_else_is_refused_unless_forced() {
    let t = tempfile::tempdir().unwrap();
    let text =
        "[[job]]\ninput = \"INPUT\"\n[[job.output]]\npath = \"m.gguf\"\nouttype = \"q8_0\"\n";
    let job = write_job(t.path(), text);
    std::fs::write(t.path().join("m.gguf"), b"not ours").unwrap();
    let (o, v) = run_json(&job, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(v["outputs"][0]["error"]["kind"], "usage");
    assert_eq!(std::fs::read(t.path().join("m.gguf")).unwrap(), b"not ours");
    let (o, v) = run_json(&job, &["--force"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(statuses(&v), ["made"]);
    let want: Value = serde_json::from_slice(
        &std::fs::read(fixtures().join("expected/arch/files.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        sha_file(&t.path().join("m.gguf")),
        want["llama"]["outtypes"]["q8_0"]["sha256"]
            .as_str()
            .unwrap(),
        "convert_hf_to_gguf.py --outtype q8_0"
    );
}

#[test]
fn a_bad_job_file_is_refused_with_the_key_and_line_before_anything_runs() {
    let t = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[[job]]\ninput = \"INPUT\"\n[[job.output]]\npath = \"a.gguf\"\n[[job.output]]\npath = \"b.gguf\"\nquantt = \"Q8_0\"\n",
            "job.toml:7: unknown field `quantt`",
        ),
        (
            "[[job]]\ninput = \"INPUT\"\n[[job.output]]\npath = \"a.gguf\"\n\n[[job.output]]\npath = \"b.gguf\"\nshard_size = \"lots\"\n",
            "job.toml:7: job 1 output 2",
        ),
        ("[defaults]\nthreads = 2\n", "no [[job]]"),
        ("[[job]]\ninput = \"INPUT\"\n[[job.output]]\npath = \"a.gguf\"\nthreads = \"two\"\n", "job.toml:5"),
    ];
    for (text, want) in cases {
        let job = write_job(t.path(), text);
        let o = wp(&["run", job.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{text}: {stderr}");
        assert!(stderr.contains(want), "{text}: {stderr}");
        assert_eq!(tree(t.path()), ["job.toml"], "nothing ran");
    }
}

#[test]
fn records_hold_from_any_working_directory_and_a_broken_state_is_named() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("ci")).unwrap();
    let text = "[[job]]\ninput = \"INPUT\"\n[[job.output]]\npath = \"../out/m.gguf\"\nouttype = \"q8_0\"\n";
    std::fs::write(
        t.path().join("ci/job.toml"),
        text.replace("INPUT", &llama()),
    )
    .unwrap();
    let run_in = |dir: &Path, job: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_weightport"))
            .args(["--json", "run", job])
            .current_dir(dir)
            .output()
            .unwrap()
    };
    let o = run_in(t.path(), "ci/job.toml");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        t.path().join("out/m.gguf").is_file(),
        "relative to the job file"
    );
    let o = run_in(&t.path().join("ci"), "job.toml");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(statuses(&v), ["skipped"]);
    std::fs::write(t.path().join("ci/.job.toml.state.json"), b"{not json").unwrap();
    let o = run_in(t.path(), "ci/job.toml");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(".job.toml.state.json: not a weightport job state"),
        "{stderr}"
    );
}

/// The run's `--json` and its exit code, `job` run as `args` from `dir`.
fn spawn_run(job: &Path) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_weightport"))
        .args(["--json", "run", job.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Issue 28 item 3: a `state` path naming an output (or lying in an output directory, or an
/// existing file that is not a state) was overwritten after the output was verified, exit 0.
/// Now the whole job is refused before anything runs.
#[test]
fn the_state_file_never_replaces_an_output_or_an_unrelated_file() {
    let t = tempfile::tempdir().unwrap();
    let cases = [
        ("out/m.gguf", "the output"),
        ("out/repo/state.json", "inside the output"),
        ("out/m.intoto.json", "the attestation"),
    ];
    for (state, what) in cases {
        let text = format!(
            "state = \"{state}\"\n[[job]]\ninput = \"INPUT\"\n[[job.output]]\npath = \"out/m.gguf\"\n\
             outtype = \"q8_0\"\nattest = \"out/m.intoto.json\"\n[[job.output]]\npath = \"out/repo\"\n"
        );
        let job = write_job(t.path(), &text);
        let o = wp(&["run", job.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{what}: {stderr}");
        assert!(
            stderr.contains(state) && stderr.contains("state"),
            "{what}: {stderr}"
        );
        assert_eq!(tree(t.path()), ["job.toml"], "{what}: nothing ran");
    }
    // An existing file that is not a job state is not replaced without --force.
    let notes = t.path().join("notes.json");
    std::fs::write(&notes, b"[1, 2, 3]\n").unwrap();
    let text = "state = \"notes.json\"\n[[job]]\ninput = \"INPUT\"\n[[job.output]]\npath = \"m.gguf\"\nouttype = \"q8_0\"\n";
    let job = write_job(t.path(), text);
    let o = wp(&["run", job.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(std::fs::read(&notes).unwrap(), b"[1, 2, 3]\n");
    assert!(!t.path().join("m.gguf").exists(), "nothing ran");
    let (o, v) = run_json(&job, &["--force"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(statuses(&v), ["made"]);
    let st: Value = serde_json::from_slice(&std::fs::read(&notes).unwrap()).unwrap();
    assert_eq!(st["outputs"].as_object().unwrap().len(), 1, "{st}");
    let left: Vec<String> = tree(t.path())
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "no temp or lock file is left: {left:?}");
}

/// The state file never replaces an input or the job file, even with `--force`, nor becomes an
/// input (a non-dot file in an input directory); a dot file there is fine.
#[test]
fn the_state_file_never_replaces_an_input_even_forced() {
    let t = tempfile::tempdir().unwrap();
    let release = t.path().join("release");
    std::fs::create_dir(&release).unwrap();
    for e in std::fs::read_dir(llama()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), release.join(e.file_name())).unwrap();
    }
    let config = std::fs::read(release.join("config.json")).unwrap();
    for state in ["release/config.json", "release/notes.json", "job.toml"] {
        let text = format!(
            "state = \"{state}\"\n[[job]]\ninput = \"release\"\n[[job.output]]\npath = \"m.gguf\"\nouttype = \"q8_0\"\n"
        );
        std::fs::write(t.path().join("job.toml"), &text).unwrap();
        let o = wp(&[
            "run",
            t.path().join("job.toml").to_str().unwrap(),
            "--force",
        ]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{state}: {stderr}");
        assert!(
            stderr.contains("state file would replace"),
            "{state}: {stderr}"
        );
        assert!(!t.path().join("m.gguf").exists(), "{state}: nothing ran");
        assert_eq!(std::fs::read(release.join("config.json")).unwrap(), config);
        assert_eq!(
            std::fs::read_to_string(t.path().join("job.toml")).unwrap(),
            text
        );
        assert!(!release.join("notes.json").exists());
    }
    let text = "state = \"release/.state.json\"\n[[job]]\ninput = \"release\"\n[[job.output]]\npath = \"m.gguf\"\nouttype = \"q8_0\"\n";
    std::fs::write(t.path().join("job.toml"), text).unwrap();
    let (o, v) = run_json(&t.path().join("job.toml"), &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(statuses(&v), ["made"]);
    let (_, v) = run_json(&t.path().join("job.toml"), &[]);
    assert_eq!(statuses(&v), ["skipped"], "a dot file is no input");
}

/// Issue 28 item 5: an input rewritten in place with its old size and mtime (`touch -r`) was
/// "skipped … verified against its recorded provenance".
#[test]
fn a_rerun_makes_again_what_an_input_rewritten_with_its_old_mtime_changes() {
    let t = tempfile::tempdir().unwrap();
    let release = t.path().join("release");
    std::fs::create_dir(&release).unwrap();
    for e in std::fs::read_dir(llama()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), release.join(e.file_name())).unwrap();
    }
    let text = format!(
        "[[job]]\ninput = \"{}\"\n[[job.output]]\npath = \"m.gguf\"\nouttype = \"f16\"\n",
        release.display()
    );
    std::fs::write(t.path().join("job.toml"), text).unwrap();
    let job = t.path().join("job.toml");
    let (o, v) = run_json(&job, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(statuses(&v), ["made"]);
    let first = sha_file(&t.path().join("m.gguf"));
    // One byte of the last tensor of the last shard, same size, mtime put back.
    let shard = release.join("model-00003-of-00003.safetensors");
    let mtime = std::fs::metadata(&shard).unwrap().modified().unwrap();
    let mut b = std::fs::read(&shard).unwrap();
    let n = b.len();
    b[n - 2] ^= 0x10;
    std::fs::write(&shard, &b).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert_eq!(
        std::fs::metadata(&shard).unwrap().modified().unwrap(),
        mtime
    );
    let (o, v) = run_json(&job, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(statuses(&v), ["made"], "{v}");
    let why = v["outputs"][0]["redone_because"].as_str().unwrap();
    assert!(why.contains("model-00003-of-00003.safetensors"), "{why}");
    assert_ne!(sha_file(&t.path().join("m.gguf")), first);
    // Unchanged since: skipped.
    let (_, v) = run_json(&job, &[]);
    assert_eq!(statuses(&v), ["skipped"]);
}

/// Issue 28 item 5: a changed importance matrix was "skipped … verified against its recorded
/// provenance" (the record held its path only).
#[test]
fn a_rerun_makes_again_what_a_changed_importance_matrix_changes() {
    let t = tempfile::tempdir().unwrap();
    let im = t.path().join("im.dat");
    write_dat_imatrix(&im, 1.0);
    let text = format!(
        "[[job]]\ninput = \"INPUT\"\n[[job.output]]\npath = \"m.gguf\"\nouttype = \"f16\"\n\
         quant = \"Q4_K_M\"\nimatrix = \"{}\"\n",
        im.display()
    );
    let job = write_job(t.path(), &text);
    let (o, v) = run_json(&job, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(statuses(&v), ["made"]);
    let first = sha_file(&t.path().join("m.gguf"));
    write_dat_imatrix(&im, 0.001);
    let (o, v) = run_json(&job, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(statuses(&v), ["made"], "{v}");
    let why = v["outputs"][0]["redone_because"].as_str().unwrap();
    assert!(why.contains("im.dat"), "{why}");
    let second = sha_file(&t.path().join("m.gguf"));
    assert_ne!(second, first, "the importance matrix decides the bytes");
    // The same output from a plain convert with this importance matrix.
    let c = t.path().join("c.gguf");
    let (src, cs) = (llama(), c.display().to_string());
    let ims = im.display().to_string();
    convert(&[
        &src,
        "-o",
        &cs,
        "--outtype",
        "f16",
        "--quant",
        "Q4_K_M",
        "--imatrix",
        &ims,
    ]);
    assert_eq!(sha_file(&c), second);
}

/// Issue 28 item 6: two runs at once sharing one state file each wrote the records they had
/// (last writer wins), so the next run refused the outputs whose records were lost.
#[test]
fn runs_at_once_sharing_a_state_keep_every_record() {
    let t = tempfile::tempdir().unwrap();
    let mut jobs = Vec::new();
    for name in ["a", "b"] {
        let mut text = String::from("state = \"shared.state.json\"\n[[job]]\ninput = \"INPUT\"\n");
        for q in ["q8_0", "f16", "bf16"] {
            text += &format!("[[job.output]]\npath = \"out/{name}-{q}.gguf\"\nouttype = \"{q}\"\n");
        }
        let job = t.path().join(format!("{name}.toml"));
        std::fs::write(&job, text.replace("INPUT", &llama())).unwrap();
        jobs.push(job);
    }
    for round in 0..3 {
        let kids: Vec<_> = jobs.iter().map(|j| spawn_run(j)).collect();
        for k in kids {
            let o = k.wait_with_output().unwrap();
            assert!(
                o.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let state: Value =
            serde_json::from_slice(&std::fs::read(t.path().join("shared.state.json")).unwrap())
                .unwrap();
        let records = state["outputs"].as_object().unwrap();
        assert_eq!(
            records.len(),
            6,
            "round {round}: every output's record kept"
        );
    }
    for j in &jobs {
        let (o, v) = run_json(j, &[]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(statuses(&v), ["skipped", "skipped", "skipped"]);
    }
}
