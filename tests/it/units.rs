//! `weightport plan` / `unit` / `finish` (issue 18): units run as separate processes of the
//! real binary, in random order and in parallel, killed, raced and tampered with; the committed
//! output must be byte-identical to the one-process `convert` of the same command (whose own
//! identity to torch / llama.cpp is tested elsewhere).

use crate::common;
use common::tmpfs::Tmpfs;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use common::{fixtures, wp};

fn ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A unit process: `--threads 1`, its own TMPDIR.
fn spawn_unit(plan: &Path, i: usize, tmp: &Path) -> Child {
    let tmp = tmp.join(format!("tmp-{i}-{}", fastrand()));
    std::fs::create_dir_all(&tmp).unwrap();
    Command::new(env!("CARGO_BIN_EXE_weightport"))
        .args(["--threads", "1", "unit", plan.to_str().unwrap(), "--index"])
        .arg(i.to_string())
        .env("TMPDIR", &tmp)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn unit")
}

fn fastrand() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.finish()
}

/// 0..n in a random order (the seed is printed, to replay a failure).
fn shuffled(n: usize) -> Vec<usize> {
    let seed = fastrand() | 1;
    eprintln!("unit order seed {seed:#x}");
    let mut s = seed;
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.swap(i, (s % (i as u64 + 1)) as usize);
    }
    v
}

/// Every file of `dir` (top level, dot files included) with its bytes.
fn files_of(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn assert_same_dir(a: &Path, b: &Path) {
    let (fa, fb) = (files_of(a), files_of(b));
    assert_eq!(
        fa.keys().collect::<Vec<_>>(),
        fb.keys().collect::<Vec<_>>(),
        "file names differ"
    );
    for (name, bytes) in &fa {
        assert!(bytes == &fb[name], "{name} differs from convert's");
    }
    assert!(!fa.is_empty());
}

/// A planned job: `u/OUT` (units) and `c/OUT` (convert) under one temp dir.
struct Job {
    dir: tempfile::TempDir,
    out: String,
    args: Vec<String>,
    /// `plan --in-place`: units write into one shared staging file per output file.
    in_place: bool,
}

impl Job {
    fn new(input: &Path, out: &str, args: &[&str]) -> Job {
        Job::new_in(&std::env::temp_dir(), input, out, args)
    }
    /// A job whose plan, outputs and staging are under `base`.
    fn new_in(base: &Path, input: &Path, out: &str, args: &[&str]) -> Job {
        let dir = tempfile::tempdir_in(base).unwrap();
        for d in ["u", "c"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        let mut all = vec![input.to_str().unwrap().to_string()];
        all.extend(args.iter().map(|s| s.to_string()));
        Job {
            dir,
            out: out.into(),
            args: all,
            in_place: false,
        }
    }
    /// The same job planned with `--in-place`.
    fn in_place(mut self) -> Job {
        self.in_place = true;
        self
    }
    fn plan_path(&self) -> PathBuf {
        self.dir.path().join("job.plan.json")
    }
    fn units_out(&self) -> PathBuf {
        self.dir.path().join("u").join(&self.out)
    }
    /// `plan ... --units n`; returns the number of units planned.
    fn plan(&self, n: usize) -> usize {
        let out = self.units_out();
        let plan = self.plan_path();
        let n = n.to_string();
        let mut a: Vec<&str> = vec!["--json", "plan"];
        a.extend(self.args.iter().map(String::as_str));
        a.extend(["-o", out.to_str().unwrap(), "--units", &n]);
        a.extend(["--plan", plan.to_str().unwrap()]);
        if self.in_place {
            a.push("--in-place");
        }
        let o = wp(&a);
        ok(&o, "plan");
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        doc["units"].as_array().unwrap().len()
    }
    /// `plan ... --units n`, which must plan `n` units.
    fn plan_exactly(&self, n: usize) {
        assert_eq!(self.plan(n), n);
    }
    /// Plans `n` units and runs them all at once.
    fn plan_and_run_units(&self, n: usize) {
        self.plan_exactly(n);
        self.all_units_in_parallel(n);
    }
    fn unit(&self, i: usize) -> Output {
        spawn_unit(&self.plan_path(), i, self.dir.path())
            .wait_with_output()
            .unwrap()
    }
    /// Every unit at once, started in a random order.
    fn all_units_in_parallel(&self, n: usize) {
        let kids: Vec<(usize, Child)> = shuffled(n)
            .into_iter()
            .map(|i| (i, spawn_unit(&self.plan_path(), i, self.dir.path())))
            .collect();
        for (i, k) in kids {
            ok(&k.wait_with_output().unwrap(), &format!("unit {i}"));
        }
    }
    fn finish(&self) -> Output {
        wp(&["finish", self.plan_path().to_str().unwrap()])
    }
    fn staging(&self) -> PathBuf {
        self.dir
            .path()
            .join("u")
            .join(format!(".{}.wp-units", self.out))
    }
    /// Deletes unit `i`'s record and reruns it from scratch.
    fn redo_unit(&self, i: usize) {
        std::fs::remove_file(self.staging().join(format!("unit-{i:05}.done.json"))).unwrap();
        ok(&self.unit(i), &format!("unit {i} again"));
    }
    /// `finish` succeeds and the output is the one-process convert's.
    fn finish_and_compare(&self) {
        ok(&self.finish(), "finish");
        self.assert_identical_to_convert();
    }
    /// The one-process convert of the same command, then the two outputs compared.
    fn assert_identical_to_convert(&self) {
        let out = self.dir.path().join("c").join(&self.out);
        let mut a: Vec<&str> = vec!["convert"];
        a.extend(self.args.iter().map(String::as_str));
        a.extend(["-o", out.to_str().unwrap()]);
        ok(&wp(&a), "convert");
        let (u, c) = if out.is_dir() {
            (self.units_out(), out)
        } else {
            (self.dir.path().join("u"), self.dir.path().join("c"))
        };
        assert_same_dir(&u, &c);
        assert!(!self.staging().exists(), "finish removes the staging dir");
    }
}

/// The exit code of `o` is `code`; its stderr.
fn failed(o: &Output, code: i32) -> String {
    assert_eq!(o.status.code(), Some(code));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Flips the low bit of the last byte of file `p`.
fn flip_last_byte(p: &Path) {
    let mut bytes = std::fs::read(p).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(p, bytes).unwrap();
}

/// The tiny Llama release.
fn llama() -> PathBuf {
    fixtures().join("good/arch/llama")
}

/// The sharded repo resharded at 12 KB, a job under `base`.
fn reshard_job_in(base: &Path) -> Job {
    Job::new_in(
        base,
        &fixtures().join("good/hf_repo_sharded"),
        "repo",
        &["--shard-size", "12KB"],
    )
}

fn reshard_job() -> Job {
    reshard_job_in(&std::env::temp_dir())
}

/// The Llama release to one Q4_K_M GGUF file, a job under `base`.
fn gguf_q4_job_in(base: &Path) -> Job {
    Job::new_in(base, &llama(), "model.gguf", &["--quant", "Q4_K_M"])
}

fn gguf_q4_job() -> Job {
    gguf_q4_job_in(&std::env::temp_dir())
}

fn run_all_and_compare(job: &Job, n: usize) {
    job.plan_and_run_units(n);
    job.finish_and_compare();
}

#[test]
fn reshard_by_output_shards_equals_convert() {
    run_all_and_compare(&reshard_job(), 3);
}

#[test]
fn bin_repo_to_safetensors_repo_equals_convert() {
    let job = Job::new(&fixtures().join("good/pickle/bin_repo"), "repo", &[]);
    run_all_and_compare(&job, 4);
}

#[test]
fn hf_release_to_gguf_q4_k_m_single_file_equals_convert() {
    run_all_and_compare(&gguf_q4_job(), 5);
}

#[test]
fn hf_release_to_gguf_f16_split_equals_convert() {
    let job = Job::new(
        &llama(),
        "model.gguf",
        &["--dtype", "f16", "--split-max-size", "60KB"],
    );
    run_all_and_compare(&job, 3);
}

#[test]
fn sixteen_units_over_two_cores_each_with_its_own_tmpdir() {
    let job = gguf_q4_job();
    job.plan_exactly(16);
    // 16 processes at once, one thread each, on whatever cores there are (2 on the dev box).
    job.all_units_in_parallel(16);
    let tmps = std::fs::read_dir(job.dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("tmp-"))
        .count();
    assert_eq!(tmps, 16, "every unit had its own TMPDIR");
    job.finish_and_compare();
}

/// A 64 MiB F32 safetensors file of two 2048×4096 tensors (pseudo-random values), written
/// here from the format's spec, so one Q4_K_M unit takes long enough to be killed mid-way.
fn big_input(dir: &Path) -> PathBuf {
    let n: usize = 2048 * 4096;
    let len = n * 4;
    let header = format!(
        r#"{{"a.weight":{{"dtype":"F32","shape":[2048,4096],"data_offsets":[0,{len}]}},"b.weight":{{"dtype":"F32","shape":[2048,4096],"data_offsets":[{len},{}]}}}}"#,
        2 * len
    );
    let mut h = header.into_bytes();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut bytes = Vec::with_capacity(8 + h.len() + 2 * len);
    bytes.extend((h.len() as u64).to_le_bytes());
    bytes.extend(&h);
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2 * n {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let v = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
        bytes.extend(v.to_le_bytes());
    }
    let p = dir.join("big.safetensors");
    std::fs::write(&p, bytes).unwrap();
    p
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Waits until unit `i` has a temp part in the staging dir.
fn wait_for_temp_part(staging: &Path, i: usize) {
    let prefix = format!(".unit-{i:05}.");
    let t0 = Instant::now();
    while !names_in(staging).iter().any(|n| n.starts_with(&prefix)) {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "unit {i} never started writing"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_unit_killed_mid_way_is_redone_by_its_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let input = big_input(dir.path());
    let job = Job::new(&input, "big.gguf", &["--quant", "Q4_K_M"]);
    job.plan_exactly(2);
    let mut k = spawn_unit(&job.plan_path(), 0, job.dir.path());
    wait_for_temp_part(&job.staging(), 0);
    std::thread::sleep(Duration::from_millis(50));
    k.kill().unwrap(); // SIGKILL
    let status = k.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "killed mid-way, not finished");
    let left = names_in(&job.staging());
    assert!(
        !left.contains(&"unit-00000.done.json".to_string()),
        "{left:?}"
    );
    assert!(
        left.iter().any(|n| n.starts_with(".unit-00000.")),
        "the dead run's temp part: {left:?}"
    );
    // finish refuses, naming unit 0 (and 1, never run), changing nothing visible.
    let err = failed(&job.finish(), 1);
    assert!(err.contains("missing") && err.contains("0, 1"), "{err}");
    assert!(!job.units_out().exists());
    ok(&job.unit(0), "rerun of unit 0");
    ok(&job.unit(1), "unit 1");
    let left = names_in(&job.staging());
    assert!(
        !left.iter().any(|n| n.ends_with(".wp-tmp")),
        "the dead run's temp part is removed: {left:?}"
    );
    job.finish_and_compare();
}

#[test]
fn one_unit_run_twice_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let input = big_input(dir.path());
    let job = Job::new(&input, "big.gguf", &["--quant", "Q4_K_M"]);
    job.plan_exactly(2);
    let a = spawn_unit(&job.plan_path(), 1, job.dir.path());
    let b = spawn_unit(&job.plan_path(), 1, job.dir.path());
    let mut outcomes = Vec::new();
    for k in [a, b] {
        let o = k.wait_with_output().unwrap();
        ok(&o, "unit 1 (twice)");
        outcomes.push(String::from_utf8_lossy(&o.stdout).into_owned());
    }
    let done = outcomes.iter().filter(|o| o.contains(": done,")).count();
    assert_eq!(
        done, 1,
        "exactly one process records the unit: {outcomes:?}"
    );
    let again = job.unit(1);
    ok(&again, "third run");
    assert!(String::from_utf8_lossy(&again.stdout).contains("already-done"));
    ok(&job.unit(0), "unit 0");
    job.finish_and_compare();
}

#[test]
fn finish_with_a_missing_unit_names_it_and_changes_nothing() {
    let job = reshard_job();
    job.plan_exactly(3);
    ok(&job.unit(0), "unit 0");
    ok(&job.unit(2), "unit 2");
    let before = names_in(&job.staging());
    let err = failed(&job.finish(), 1);
    assert!(
        err.contains("1 of 3 units are not finished")
            && err.contains("missing (not run, running, or killed): 1;"),
        "{err}"
    );
    assert!(!job.units_out().exists(), "the target is untouched");
    assert_eq!(
        names_in(&job.staging()),
        before,
        "the staging area is untouched"
    );
    ok(&job.unit(1), "unit 1");
    job.finish_and_compare();
}

#[test]
fn finish_detects_a_part_altered_on_disk() {
    let job = reshard_job();
    job.plan_and_run_units(3);
    // Unit 1 wrote one whole shard: its last byte is the last tensor's.
    let part = job.staging().join("unit-00001.0.part");
    flip_last_byte(&part);
    let err = failed(&job.finish(), 1);
    assert!(
        err.contains("unit-00001.0.part") && err.contains("changed after the unit recorded it"),
        "{err}"
    );
    assert!(!job.units_out().exists(), "the target is untouched");
    // Deleting the record reruns the unit from scratch.
    job.redo_unit(1);
    job.finish_and_compare();
}

#[test]
fn an_input_changed_after_planning_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    for (name, bytes) in files_of(&fixtures().join("good/hf_repo_sharded")) {
        std::fs::write(repo.join(name), bytes).unwrap();
    }
    let job = Job::new(&repo, "out", &["--shard-size", "12KB"]);
    job.plan_exactly(2);
    std::fs::write(repo.join("config.json"), b"{}\n").unwrap();
    let err = failed(&job.unit(0), 1);
    assert!(
        err.contains("config.json") && err.contains("changed since the plan"),
        "{err}"
    );
    let f = job.finish();
    assert_eq!(f.status.code(), Some(1), "the failed unit is named");
    assert!(String::from_utf8_lossy(&f.stderr).contains("failed: 0 ("));
    assert!(!job.units_out().exists());
}

#[test]
fn a_bad_plan_file_names_the_field() {
    let job = reshard_job();
    job.plan(2);
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(job.plan_path()).unwrap()).unwrap();
    doc["units"][1]["tensors"] = serde_json::json!([0]);
    std::fs::write(job.plan_path(), doc.to_string()).unwrap();
    let err = failed(&job.unit(0), 1);
    assert!(
        err.contains("job.plan.json") && err.contains("`units[1].tensors`"),
        "{err}"
    );
    // A field of the wrong type is named by its path in the document (and the hash check,
    // which would also refuse the edited file, comes after).
    doc["units"][1]["tensors"] = doc["units"][0]["tensors"].clone();
    doc["files"][0]["size"] = serde_json::json!("big");
    std::fs::write(job.plan_path(), doc.to_string()).unwrap();
    let err = failed(&job.unit(0), 1);
    assert!(
        err.contains("`files[0].size`") && err.contains("expected u64"),
        "{err}"
    );
    let o = wp(&["unit", job.plan_path().to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "no index anywhere is a usage error"
    );
    let o = wp(&["unit", "/nonexistent/plan.json", "--index", "0"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn the_index_comes_from_slurm_or_kubernetes() {
    let job = reshard_job();
    job.plan_exactly(2);
    for (var, i) in [("SLURM_ARRAY_TASK_ID", "0"), ("JOB_COMPLETION_INDEX", "1")] {
        let o = Command::new(env!("CARGO_BIN_EXE_weightport"))
            .args(["unit", job.plan_path().to_str().unwrap()])
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env(var, i)
            .output()
            .unwrap();
        ok(&o, var);
        assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("unit {i} of 2: done")));
    }
    job.finish_and_compare();
}

#[test]
fn plan_file_and_json_documents_match_their_schemas() {
    let Some(py) = common::python_with_jsonschema() else {
        return;
    };
    for in_place in [false, true] {
        schema_check(&py, in_place);
    }
}

/// `plan` (with `--in-place` or not), `unit`, `finish` and a failing `finish`, each `--json`
/// document and the plan file checked against its schema.
fn schema_check(py: &str, in_place: bool) {
    let schema =
        |n: &str| Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("docs/json/{n}.schema.json"));
    let job = gguf_q4_job();
    let (out, plan, src) = (job.units_out(), job.plan_path(), llama());
    let mut args = vec![
        "--json",
        "plan",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend([
        "--quant",
        "Q4_K_M",
        "--units",
        "2",
        "--plan",
        plan.to_str().unwrap(),
    ]);
    if in_place {
        args.push("--in-place");
    }
    let o = wp(&args);
    ok(&o, "plan");
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["in_place"], in_place);
    common::validate_json(py, &schema("plan"), &o.stdout, "plan --json");
    common::validate_json(
        py,
        &schema("plan-file"),
        &std::fs::read(&plan).unwrap(),
        "plan file",
    );
    for i in 0..2 {
        let o = wp(&[
            "--json",
            "unit",
            plan.to_str().unwrap(),
            "--index",
            &i.to_string(),
        ]);
        ok(&o, "unit");
        common::validate_json(py, &schema("unit"), &o.stdout, "unit --json");
    }
    let o = wp(&["--json", "finish", plan.to_str().unwrap()]);
    ok(&o, "finish");
    common::validate_json(py, &schema("finish"), &o.stdout, "finish --json");
    let o = wp(&["--json", "finish", plan.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "the plan's staging is gone; the output exists"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("no unit of"));
    common::validate_json(py, &schema("error"), &o.stdout, "finish error --json");
}

#[test]
fn unit_counts_out_of_range_are_usage_errors_and_unit_size_splits_by_bytes() {
    let job = reshard_job();
    let out = job.units_out();
    let plan = job.plan_path();
    let input = fixtures().join("good/hf_repo_sharded");
    let base = [
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--shard-size",
        "12KB",
        "--plan",
        plan.to_str().unwrap(),
    ];
    for n in ["0", "22"] {
        let mut a = vec!["plan"];
        a.extend(base);
        a.extend(["--units", n]);
        let o = wp(&a);
        assert_eq!(o.status.code(), Some(2), "--units {n}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("between 1 and 21 units"));
        assert!(!plan.exists(), "nothing written");
    }
    // Each tensor is read once and written once (a copy): 2 × 53.6 kB in 20 kB units.
    let mut a = vec!["--json", "plan"];
    a.extend(base);
    a.extend(["--unit-size", "20000"]);
    let o = wp(&a);
    ok(&o, "plan --unit-size");
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let units = doc["units"].as_array().unwrap();
    assert_eq!(units.len(), 107_136usize.div_ceil(20_000));
    let sum: u64 = units
        .iter()
        .map(|u| u["part_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, 53_568);
    // A second plan onto the same file needs --force.
    let mut a = vec!["plan"];
    a.extend(base);
    a.extend(["--units", "2"]);
    assert_eq!(wp(&a).status.code(), Some(2));
}

/// `(file name, tensor name) → absolute offset` of every tensor in the output files of a
/// plan file, as the plan says.
fn planned_offsets(plan: &Path) -> BTreeMap<(String, String), u64> {
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(plan).unwrap()).unwrap();
    let files = doc["files"].as_array().unwrap();
    doc["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let f = &files[t["file"].as_u64().unwrap() as usize];
            let name = Path::new(f["path"].as_str().unwrap()).file_name().unwrap();
            (
                (
                    name.to_string_lossy().into_owned(),
                    t["name"].as_str().unwrap().to_string(),
                ),
                t["offset"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The offsets in a safetensors file, from its header as the format's spec defines it
/// (8-byte little-endian length, JSON, data): 8 + length + `data_offsets[0]`.
fn safetensors_offsets(path: &Path) -> BTreeMap<String, u64> {
    let b = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap());
    let h: serde_json::Value = serde_json::from_slice(&b[8..8 + n as usize]).unwrap();
    h.as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, v)| (k.clone(), 8 + n + v["data_offsets"][0].as_u64().unwrap()))
        .collect()
}

/// The offsets in a GGUF file as gguf-py reads them (`None` without a Python that has gguf).
fn gguf_offsets(path: &Path) -> Option<BTreeMap<String, u64>> {
    let py = std::env::var("WEIGHTPORT_PYTHON").unwrap_or_else(|_| "python3".into());
    let code = "import sys, json\nfrom gguf import GGUFReader\nr = GGUFReader(sys.argv[1])\n\
                print(json.dumps({t.name: int(t.data_offset) for t in r.tensors}))";
    let o = Command::new(&py)
        .args(["-c", code])
        .arg(path)
        .output()
        .ok()?;
    if !o.status.success() {
        eprintln!(
            "SKIPPED gguf-py check of {}: {}",
            path.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        return None;
    }
    serde_json::from_slice(&o.stdout).ok()
}

/// The plan file's per-tensor offsets are the ones in the one-process `convert` output, read
/// back by independent readers (the safetensors header by its spec, GGUF by gguf-py).
#[test]
fn plan_file_offsets_are_those_of_the_convert_output() {
    let llama = llama();
    let cases: [(&Path, &str, &[&str]); 3] = [
        (
            &fixtures().join("good/hf_repo_sharded"),
            "repo",
            &["--shard-size", "12KB"],
        ),
        (&llama, "model.gguf", &["--quant", "Q4_K_M"]),
        (
            &llama,
            "model.gguf",
            &["--dtype", "f16", "--split-max-size", "60KB"],
        ),
    ];
    for (input, out, args) in cases {
        let job = Job::new(input, out, args);
        job.plan(3);
        let planned = planned_offsets(&job.plan_path());
        let c = job.dir.path().join("c");
        let mut a: Vec<&str> = vec!["convert"];
        a.extend(job.args.iter().map(String::as_str));
        let target = c.join(out);
        a.extend(["-o", target.to_str().unwrap()]);
        ok(&wp(&a), "convert");
        let dir = if target.is_dir() {
            target.clone()
        } else {
            c.clone()
        };
        let mut got = BTreeMap::new();
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let offs = if name.ends_with(".safetensors") {
                safetensors_offsets(&e.path())
            } else if name.ends_with(".gguf") {
                match gguf_offsets(&e.path()) {
                    Some(o) => o,
                    None => return,
                }
            } else {
                continue;
            };
            got.extend(offs.into_iter().map(|(t, o)| ((name.clone(), t), o)));
        }
        assert!(!got.is_empty());
        assert_eq!(planned, got, "{out} {args:?}");
    }
}

fn staged_names(job: &Job) -> Vec<String> {
    names_in(&job.staging())
        .into_iter()
        .filter(|n| !n.ends_with(".failed.json"))
        .collect()
}

#[test]
fn disk_full_during_a_unit_leaves_nothing_and_the_rerun_succeeds() {
    let Some(disk) = Tmpfs::mount("1m") else {
        return;
    };
    let job = reshard_job_in(&disk.mnt);
    job.plan_exactly(3);
    ok(&job.unit(1), "unit 1");
    let before = staged_names(&job);
    let ballast = disk.fill_to(4096);
    let o = job.unit(0);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("No space left") && err.contains(".wp-units"),
        "{err}"
    );
    assert_eq!(
        staged_names(&job),
        before,
        "no part, temp or record of unit 0 is left"
    );
    assert!(!job.units_out().exists());
    let f = job.finish();
    assert_eq!(f.status.code(), Some(1), "unit 0 is named");
    let err = String::from_utf8_lossy(&f.stderr);
    // Its failure record is written when the full disk has room for it.
    assert!(
        err.contains("failed: 0 (") || err.contains("killed): 0;"),
        "{err}"
    );
    std::fs::remove_file(ballast).unwrap();
    ok(&job.unit(0), "unit 0 after space is freed");
    ok(&job.unit(2), "unit 2");
    job.finish_and_compare();
}

#[test]
fn disk_full_during_finish_changes_nothing_and_the_rerun_succeeds() {
    let Some(disk) = Tmpfs::mount("2m") else {
        return;
    };
    // One GGUF file from two units: finish writes the header into unit 0's part and appends
    // unit 1's.
    let job = gguf_q4_job_in(&disk.mnt);
    job.plan_and_run_units(2);
    let sizes = |job: &Job| -> Vec<(String, u64)> {
        staged_names(job)
            .into_iter()
            .map(|n| {
                (
                    n.clone(),
                    std::fs::metadata(job.staging().join(&n)).unwrap().len(),
                )
            })
            .collect()
    };
    let before = sizes(&job);
    let ballast = disk.fill_to(8192);
    let f = job.finish();
    assert_eq!(
        f.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&f.stderr)
    );
    let err = String::from_utf8_lossy(&f.stderr);
    assert!(
        err.contains("free") || err.contains("No space left"),
        "{err}"
    );
    assert_eq!(
        names_in(&job.dir.path().join("u")),
        [format!(".{}.wp-units", job.out)],
        "nothing visible"
    );
    assert_eq!(sizes(&job), before, "the parts are as the units left them");
    std::fs::remove_file(ballast).unwrap();
    ok(&job.finish(), "finish after space is freed");
    job.assert_identical_to_convert();
}

#[test]
fn finish_refuses_a_symlinked_output_or_staging_dir() {
    let job = gguf_q4_job();
    job.plan_exactly(2);
    // The staging dir a symlink to elsewhere: units and finish refuse, nothing written there.
    let elsewhere = job.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, job.staging()).unwrap();
    let o = job.unit(0);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("staging directory is a symlink"));
    let f = job.finish();
    assert_eq!(f.status.code(), Some(2));
    assert!(
        names_in(&elsewhere).is_empty(),
        "nothing written through the symlink"
    );
    std::fs::remove_file(job.staging()).unwrap();
    job.all_units_in_parallel(2);
    // The output path a symlink (made after planning): refused, its target untouched.
    let victim = job.dir.path().join("victim.gguf");
    std::fs::write(&victim, b"keep me").unwrap();
    std::os::unix::fs::symlink(&victim, job.units_out()).unwrap();
    let f = job.finish();
    assert_eq!(
        f.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&f.stderr)
    );
    assert!(String::from_utf8_lossy(&f.stderr).contains("already exists"));
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    assert!(job
        .units_out()
        .symlink_metadata()
        .unwrap()
        .file_type()
        .is_symlink());
    std::fs::remove_file(job.units_out()).unwrap();
    job.finish_and_compare();
}

#[test]
fn an_edited_plan_file_is_refused_by_units_and_finish() {
    let job = reshard_job();
    job.plan_exactly(2);
    ok(&job.unit(0), "unit 0");
    let text = std::fs::read(job.plan_path()).unwrap();
    let mut doc: serde_json::Value = serde_json::from_slice(&text).unwrap();
    // A well-formed edit: unit 1's output moved elsewhere.
    let moved = job.dir.path().join("moved");
    doc["output"] = moved.to_str().unwrap().into();
    std::fs::write(job.plan_path(), serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    for o in [job.unit(1), job.finish()] {
        let err = failed(&o, 1);
        assert!(
            err.contains("job.plan.json") && err.contains("edited after"),
            "{err}"
        );
    }
    assert!(!moved.exists() && !job.units_out().exists());
    // Reformatting alone is not an edit; the original content runs.
    let doc: serde_json::Value = serde_json::from_slice(&text).unwrap();
    std::fs::write(job.plan_path(), doc.to_string()).unwrap();
    ok(&job.unit(1), "unit 1");
    job.finish_and_compare();
}

#[test]
fn bad_unit_indices_are_usage_errors_naming_their_source() {
    let job = reshard_job();
    job.plan_exactly(2);
    let plan = job.plan_path();
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weightport"));
        c.arg("unit").arg(&plan).args(args);
        c.env_remove("SLURM_ARRAY_TASK_ID")
            .env_remove("JOB_COMPLETION_INDEX");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    for bad in ["2", "-1", "abc", "1.0", "18446744073709551616"] {
        let o = run(&["--index", bad], &[]);
        assert_eq!(o.status.code(), Some(2), "--index {bad}");
    }
    let o = run(&["--index", "2"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unit index 2 (--index 2)") && err.contains("units 0 to 1"),
        "{err}"
    );
    for bad in [
        "-1",
        "+1",
        "",
        " ",
        "x1",
        "1.0",
        "0x1",
        "99999999999999999999999",
    ] {
        let o = run(&[], &[("SLURM_ARRAY_TASK_ID", bad)]);
        assert_eq!(o.status.code(), Some(2), "SLURM_ARRAY_TASK_ID={bad:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("$SLURM_ARRAY_TASK_ID is `") && err.contains("not a unit index"),
            "{err}"
        );
    }
    let o = run(&[], &[("JOB_COMPLETION_INDEX", "7")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unit index 7 ($JOB_COMPLETION_INDEX=7)"));
    // Garbage in the environment does not matter when --index is given.
    let o = run(&["--index", "1"], &[("SLURM_ARRAY_TASK_ID", "junk")]);
    ok(&o, "--index over a bad $SLURM_ARRAY_TASK_ID");
    assert!(
        !job.staging().join("unit-00000.done.json").exists(),
        "no unit ran but 1"
    );
}

/// One GGUF file from two units: a `finish` killed while appending left unit 0's part longer
/// and with a header; the rerun cuts it back and builds the same file.
#[test]
fn a_finish_interrupted_mid_append_is_redone_by_its_rerun() {
    let job = gguf_q4_job();
    job.plan_and_run_units(2);
    let first = job.staging().join("unit-00000.0.part");
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[..4].copy_from_slice(b"GGUF");
    bytes.extend(std::iter::repeat_n(0x5a, 5000));
    std::fs::write(&first, bytes).unwrap();
    job.finish_and_compare();
}

/// The part appended to another is checked too, and the failed finish leaves the first part
/// as the unit wrote it (its length), so the rerun after redoing the altered unit works.
#[test]
fn finish_detects_an_altered_appended_part_and_recovers() {
    let job = gguf_q4_job();
    job.plan_and_run_units(2);
    let first = job.staging().join("unit-00000.0.part");
    let len = std::fs::metadata(&first).unwrap().len();
    let second = job.staging().join("unit-00001.0.part");
    flip_last_byte(&second);
    let err = failed(&job.finish(), 1);
    assert!(
        err.contains("unit-00001.0.part") && err.contains("changed after the unit recorded it"),
        "{err}"
    );
    assert!(!job.units_out().exists(), "the target is untouched");
    assert_eq!(std::fs::metadata(&first).unwrap().len(), len);
    job.redo_unit(1);
    job.finish_and_compare();
}

// `plan --in-place`: the same outputs, with units writing into one shared staging file per
// output file and `finish` publishing it without appending anything.

#[test]
fn in_place_units_equal_convert_for_one_file_shards_and_splits() {
    let llama = fixtures().join("good/arch/llama");
    let jobs = [
        (Job::new(&llama, "model.gguf", &["--quant", "Q4_K_M"]), 5),
        (
            Job::new(
                &llama,
                "model.gguf",
                &["--dtype", "f16", "--split-max-size", "60KB"],
            ),
            3,
        ),
        (reshard_job(), 3),
        (
            Job::new(&fixtures().join("good/pickle/bin_repo"), "repo", &[]),
            4,
        ),
    ];
    for (job, n) in jobs {
        let job = job.in_place();
        run_all_and_compare(&job, n);
    }
}

/// The shared staging files of a job's staging dir.
fn shared_files(job: &Job) -> Vec<PathBuf> {
    names_in(&job.staging())
        .into_iter()
        .filter(|n| n.starts_with("file-") && n.ends_with(".data"))
        .map(|n| job.staging().join(n))
        .collect()
}

#[test]
fn in_place_a_unit_killed_mid_way_is_redone_and_a_double_run_is_harmless() {
    let dir = tempfile::tempdir().unwrap();
    let input = big_input(dir.path());
    let job = Job::new(&input, "big.gguf", &["--quant", "Q4_K_M"]).in_place();
    assert_eq!(job.plan(2), 2);
    let mut k = spawn_unit(&job.plan_path(), 0, job.dir.path());
    let t0 = Instant::now();
    while shared_files(&job).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "unit 0 never started"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(50));
    k.kill().unwrap(); // SIGKILL
    assert_eq!(
        k.wait().unwrap().signal(),
        Some(9),
        "killed mid-way, not finished"
    );
    let f = job.finish();
    assert_eq!(f.status.code(), Some(1));
    let err = String::from_utf8_lossy(&f.stderr);
    assert!(err.contains("missing") && err.contains("0, 1"), "{err}");
    assert!(!job.units_out().exists());
    // Unit 0 rerun, twice at once, while unit 1 writes the same file.
    let kids = [0, 0, 1].map(|i| (i, spawn_unit(&job.plan_path(), i, job.dir.path())));
    let mut done = 0;
    for (i, k) in kids {
        let o = k.wait_with_output().unwrap();
        ok(&o, &format!("unit {i}"));
        done += usize::from(String::from_utf8_lossy(&o.stdout).contains(": done,"));
    }
    assert_eq!(done, 2, "one record per unit");
    assert_eq!(shared_files(&job).len(), 1, "one shared file, no parts");
    ok(&job.finish(), "finish");
    job.assert_identical_to_convert();
}

#[test]
fn in_place_finish_detects_bytes_altered_in_a_units_range() {
    let job = gguf_q4_job().in_place();
    assert_eq!(job.plan(3), 3);
    job.all_units_in_parallel(3);
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(job.plan_path()).unwrap()).unwrap();
    let t = plan["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["unit"] == 1 && t["bytes"].as_u64() > Some(0))
        .expect("a tensor of unit 1");
    let shared = &shared_files(&job)[0];
    let mut bytes = std::fs::read(shared).unwrap();
    bytes[t["offset"].as_u64().unwrap() as usize] ^= 1;
    std::fs::write(shared, bytes).unwrap();
    let f = job.finish();
    assert_eq!(f.status.code(), Some(1));
    let err = String::from_utf8_lossy(&f.stderr);
    let name = shared.file_name().unwrap().to_string_lossy();
    assert!(
        err.contains("unit 1's part changed") && err.contains(name.as_ref()),
        "{err}"
    );
    assert!(!job.units_out().exists(), "the target is untouched");
    std::fs::remove_file(job.staging().join("unit-00001.done.json")).unwrap();
    ok(&job.unit(1), "unit 1 again");
    ok(&job.finish(), "finish");
    job.assert_identical_to_convert();
}

#[test]
fn in_place_disk_full_during_a_unit_then_the_rerun_succeeds() {
    let Some(disk) = Tmpfs::mount("1m") else {
        return;
    };
    let job = reshard_job_in(&disk.mnt).in_place();
    assert_eq!(job.plan(3), 3);
    ok(&job.unit(1), "unit 1");
    let ballast = disk.fill_to(4096);
    let o = job.unit(0);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("No space left") && err.contains(".wp-units"),
        "{err}"
    );
    assert!(!job.units_out().exists());
    assert_eq!(job.finish().status.code(), Some(1), "unit 0 is not done");
    std::fs::remove_file(ballast).unwrap();
    ok(&job.unit(0), "unit 0 after space is freed");
    ok(&job.unit(2), "unit 2");
    ok(&job.finish(), "finish");
    job.assert_identical_to_convert();
}

#[test]
fn in_place_a_symlink_at_the_shared_file_is_refused() {
    let job = gguf_q4_job().in_place();
    assert_eq!(job.plan(2), 2);
    ok(&job.unit(0), "unit 0");
    let shared = shared_files(&job).remove(0);
    std::fs::remove_file(&shared).unwrap();
    let victim = job.dir.path().join("victim");
    std::fs::write(&victim, b"keep me").unwrap();
    std::os::unix::fs::symlink(&victim, &shared).unwrap();
    let o = job.unit(1);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"keep me",
        "nothing written through it"
    );
    let f = job.finish();
    assert_eq!(f.status.code(), Some(1));
    assert!(!job.units_out().exists());
}

/// A safetensors file of four F32 vectors of odd lengths (3, 7, 64, 5): as one GGUF file their
/// data is padded to GGUF's 32-byte alignment between tensors and at the end.
fn odd_input(dir: &Path) -> PathBuf {
    let mut header = String::from("{");
    let (mut data, mut off) = (Vec::new(), 0usize);
    for (i, (name, n)) in [("a", 3usize), ("b", 7), ("c", 64), ("d", 5)]
        .iter()
        .enumerate()
    {
        let sep = if i == 0 { "" } else { "," };
        let end = off + 4 * n;
        header += &format!(
            r#"{sep}"{name}":{{"dtype":"F32","shape":[{n}],"data_offsets":[{off},{end}]}}"#
        );
        data.extend((0..*n).flat_map(|v| (v as f32 + 0.5).to_le_bytes()));
        off = end;
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.extend(data);
    let p = dir.join("odd.safetensors");
    std::fs::write(&p, bytes).unwrap();
    p
}

/// The first byte of padding between two tensors of output file 0 of `job`'s plan (not in a
/// tensor, not in the header's room): (its offset in the file, the unit whose segment holds it,
/// that segment's index in the unit and start).
fn a_padding_byte(job: &Job) -> (u64, usize, usize, u64) {
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(job.plan_path()).unwrap()).unwrap();
    let mut ranges: Vec<(u64, u64)> = plan["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["file"] == 0)
        .map(|t| {
            let off = t["offset"].as_u64().unwrap();
            (off, off + t["bytes"].as_u64().unwrap())
        })
        .collect();
    ranges.sort();
    let at = ranges
        .windows(2)
        .find(|w| w[0].1 < w[1].0)
        .map(|w| w[0].1)
        .expect("padding between two tensors");
    for (u, unit) in plan["units"].as_array().unwrap().iter().enumerate() {
        for (j, s) in unit["segments"].as_array().unwrap().iter().enumerate() {
            let (start, end) = (s["start"].as_u64().unwrap(), s["end"].as_u64().unwrap());
            if s["file"] == 0 && start <= at && at < end {
                return (at, u, j, start);
            }
        }
    }
    panic!("byte {at} is in no segment");
}

/// Flips every bit of byte `at` of file `p`.
fn flip_byte(p: &Path, at: u64) {
    let mut bytes = std::fs::read(p).unwrap();
    bytes[at as usize] ^= 0xff;
    std::fs::write(p, bytes).unwrap();
}

/// Issue 28 item 8: a byte changed in the padding between two tensors of a part reached the
/// output, and `finish` said verified (it checked the tensors only).
#[test]
fn finish_detects_altered_padding_in_a_part() {
    let dir = tempfile::tempdir().unwrap();
    let job = Job::new(&odd_input(dir.path()), "odd.gguf", &[]);
    job.plan_and_run_units(2);
    let (at, u, j, start) = a_padding_byte(&job);
    let part = job.staging().join(format!("unit-{u:05}.{j}.part"));
    flip_byte(&part, at - start);
    let err = failed(&job.finish(), 1);
    assert!(
        err.contains(&format!("unit-{u:05}.{j}.part")) && err.contains(&at.to_string()),
        "{err}"
    );
    assert!(!job.units_out().exists(), "the target is untouched");
    job.redo_unit(u);
    job.finish_and_compare();
}

/// Issue 28 item 8, `--in-place`: the same in the shared staging file.
#[test]
fn in_place_finish_detects_altered_padding() {
    let dir = tempfile::tempdir().unwrap();
    let job = Job::new(&odd_input(dir.path()), "odd.gguf", &[]).in_place();
    assert_eq!(job.plan(2), 2);
    job.all_units_in_parallel(2);
    let (at, u, _, _) = a_padding_byte(&job);
    let shared = &shared_files(&job)[0];
    flip_byte(shared, at);
    let err = failed(&job.finish(), 1);
    let name = shared.file_name().unwrap().to_string_lossy();
    assert!(
        err.contains(name.as_ref()) && err.contains(&at.to_string()),
        "{err}"
    );
    assert!(!job.units_out().exists(), "the target is untouched");
    // The units' rerun rewrites only their tensors, so the padding byte stays: the staging
    // file is removed and every unit redone.
    std::fs::remove_file(shared).unwrap();
    for i in 0..2 {
        job.redo_unit(i);
    }
    let _ = u;
    job.finish_and_compare();
}

/// Issue 28 item 5: an input changed past its first MiB between units (its mtime put back,
/// as `touch -r` does) was taken by the later unit; the output matched neither version of
/// the input, and `finish` said verified. The later unit refuses it now.
#[test]
fn a_unit_refuses_an_input_changed_past_its_first_mib_since_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let input = big_input(dir.path());
    let job = Job::new(&input, "big.gguf", &["--quant", "Q4_K_M"]);
    job.plan_exactly(2);
    ok(&job.unit(0), "unit 0");
    let mtime = std::fs::metadata(&input).unwrap().modified().unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::options()
            .read(true)
            .write(true)
            .open(&input)
            .unwrap();
        let len = f.metadata().unwrap().len();
        for at in [len / 4, len / 2 + len / 4] {
            let mut b = [0u8; 4];
            f.read_exact_at(&mut b, at).unwrap();
            b[3] ^= 0x40;
            f.write_all_at(&b, at).unwrap();
        }
        f.set_modified(mtime).unwrap();
    }
    assert_eq!(
        std::fs::metadata(&input).unwrap().modified().unwrap(),
        mtime
    );
    let err = failed(&job.unit(1), 1);
    assert!(
        err.contains("big.safetensors") && err.contains("changed since the plan"),
        "{err}"
    );
    assert_eq!(job.finish().status.code(), Some(1), "unit 1 failed");
    assert!(!job.units_out().exists());
}
