//! docs/units.md's Slurm recipe on a real single-node cluster (issue 34). `.ci/slurm.sh` brings
//! the cluster up (munged, slurmctld, slurmd on loopback, started without systemd) and sets
//! `WEIGHTPORT_SLURM=1` and `SLURM_CONF`; without them these tests skip, and fail in CI unless
//! `WEIGHTPORT_NO_SLURM` says why. The recipe's code blocks are extracted from the doc and run
//! with only the edits a user makes (paths, units, array size, CPUs); each output must be
//! byte-identical to the one-process `convert`. Locally:
//! `bash .ci/slurm.sh run cargo test --test it slurm::` (as root).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{fixtures, wp};

/// The tests share one cluster of one node, and some stop its partition: one at a time.
static CLUSTER: Mutex<()> = Mutex::new(());

/// The cluster, locked for this test; `None` (skip) when there is none outside CI.
fn cluster() -> Option<MutexGuard<'static, ()>> {
    if std::env::var("WEIGHTPORT_SLURM").as_deref() == Ok("1") {
        return Some(CLUSTER.lock().unwrap_or_else(|e| e.into_inner()));
    }
    let why = std::env::var("WEIGHTPORT_NO_SLURM").ok();
    assert!(
        std::env::var_os("CI").is_none() || why.is_some(),
        "CI must start a Slurm cluster (.ci/slurm.sh) or say why it could not (WEIGHTPORT_NO_SLURM)"
    );
    eprintln!(
        "SKIPPED the Slurm recipe: {}",
        why.unwrap_or_else(|| "no cluster (run under `bash .ci/slurm.sh run ...` as root)".into())
    );
    None
}

/// The fenced ```bash blocks of docs/units.md's "Slurm job array" section, in order.
fn doc_blocks() -> Vec<String> {
    let doc = std::fs::read_to_string(fixtures().join("../docs/units.md")).unwrap();
    let start = doc.find("### Slurm job array").expect("the Slurm section");
    let rest = &doc[start + 4..];
    let section = &rest[..rest.find("\n### ").unwrap_or(rest.len())];
    let mut blocks = Vec::new();
    let mut lines = section.lines();
    while let Some(l) = lines.next() {
        if l.trim() == "```bash" {
            let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            blocks.push(body.join("\n") + "\n");
        }
    }
    assert_eq!(
        blocks.len(),
        3,
        "units.sbatch, the submission, the resubmission"
    );
    blocks
}

/// `text` with `from` replaced by `to`; `from` must be there (the doc changed otherwise).
fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "the recipe no longer has {from:?}:\n{text}"
    );
    text.replace(from, to)
}

/// One conversion run through the recipe: the input, the output's name and convert options.
struct Case {
    dir: tempfile::TempDir,
    input: PathBuf,
    out: String,
    args: Vec<String>,
    units: usize,
    /// `plan --in-place` (the doc: add it to `plan` on a POSIX filesystem).
    in_place: bool,
}

impl Case {
    fn new(input: &Path, out: &str, args: &[&str], units: usize) -> Case {
        let dir = tempfile::tempdir().unwrap();
        for d in ["jobs", "out", "ref"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        Case {
            dir,
            input: input.into(),
            out: out.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            units,
            in_place: false,
        }
    }
    fn in_place(mut self) -> Case {
        self.in_place = true;
        self
    }
    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
    fn plan(&self) -> PathBuf {
        self.path("jobs/release.plan.json")
    }
    /// The user's edits: their paths, CPUs and array size.
    fn edit_common(&self, text: &str) -> String {
        let jobs = format!("{}/", self.path("jobs").display());
        let t = edit(text, "/shared/jobs/", &jobs);
        edit(&t, "--cpus-per-task=32", "--cpus-per-task=1")
    }
    /// Writes the doc's units.sbatch, edited, into the submission directory.
    fn write_sbatch(&self, blocks: &[String]) {
        let array = format!("--array=0-{}", self.units - 1);
        let s = edit(&self.edit_common(&blocks[0]), "--array=0-63", &array);
        std::fs::write(self.path("units.sbatch"), s).unwrap();
    }
    /// The doc's submission block, edited: this case's input, output, options and units.
    fn submission(&self, blocks: &[String]) -> String {
        let what = format!(
            "{} -o {} {}{}",
            self.input.display(),
            self.path("out").join(&self.out).display(),
            self.args.join(" "),
            if self.in_place { " --in-place" } else { "" }
        );
        let s = self.edit_common(&blocks[1]);
        let s = edit(
            &s,
            "/shared/release -o /shared/out/release-Q4_K_M.gguf --quant Q4_K_M",
            &what,
        );
        edit(&s, "--units 64", &format!("--units {}", self.units))
    }
    /// Runs `script` in the submission directory with this build's weightport on PATH, as
    /// the user would in a shell; its stdout.
    fn sh(&self, script: &str) -> String {
        let bin = Path::new(env!("CARGO_BIN_EXE_weightport"))
            .parent()
            .unwrap();
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
        let o = Command::new("bash")
            .args(["-euo", "pipefail", "-c", script])
            .current_dir(self.dir.path())
            .env("PATH", path)
            .output()
            .unwrap();
        ok(&o, script);
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
    /// Runs a submission block; the units' job id (`$jid`) and the finish job's id.
    fn submit(&self, script: &str) -> (u64, u64) {
        let out = self.sh(&format!("{script}echo \"units-job $jid\"\n"));
        let id = |prefix: &str| -> u64 {
            let l = out.lines().rev().find_map(|l| l.strip_prefix(prefix));
            l.unwrap_or_else(|| panic!("no {prefix:?} in {out}"))
                .trim()
                .parse()
                .unwrap()
        };
        (id("units-job "), id("Submitted batch job "))
    }
    /// The one-process convert of the same command, compared with the recipe's output.
    fn assert_identical_to_convert(&self) {
        let reference = self.path("ref").join(&self.out);
        let mut a: Vec<&str> = vec!["convert", self.input.to_str().unwrap()];
        a.extend(self.args.iter().map(String::as_str));
        a.extend(["-o", reference.to_str().unwrap()]);
        ok(&wp(&a), "convert");
        let got = files_of(&self.path("out"));
        let want = files_of(&self.path("ref"));
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "the same files (and no staging directory left)"
        );
        for (name, bytes) in &want {
            assert!(got[name] == *bytes, "{name} differs from convert's");
        }
    }
    /// The log of a job (`slurm-ID.out`) or array task (`slurm-ID_K.out`).
    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(&format!("slurm-{name}.out"))).unwrap_or_default()
    }
}

fn ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Every file under `dir` (hidden ones too) by relative path.
fn files_of(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                m.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    m
}

fn slurm(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd).args(args).output().unwrap();
    ok(&o, cmd);
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `(task or job id, JobState, Reason)` of every record of job `id` (one per array task).
fn states(id: u64) -> Vec<(String, String, String)> {
    let out = slurm("scontrol", &["-o", "show", "job", &id.to_string()]);
    let field = |l: &str, k: &str| -> String {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .unwrap_or("")
            .to_string()
    };
    out.lines()
        .map(|l| {
            let task = field(l, "ArrayTaskId=");
            (task, field(l, "JobState="), field(l, "Reason="))
        })
        .collect()
}

const WAITING: [&str; 5] = [
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "REQUEUED",
];

/// Waits until every record of job `id` has ended or waits on a dependency that can no longer
/// be met; returns the records.
fn wait_job(id: u64) -> Vec<(String, String, String)> {
    let t0 = Instant::now();
    loop {
        let s = states(id);
        let waiting = s.iter().any(|(_, st, why)| {
            WAITING.contains(&st.as_str()) && why != "DependencyNeverSatisfied"
        });
        if !waiting {
            return s;
        }
        assert!(t0.elapsed() < Duration::from_secs(300), "job {id}: {s:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The array's tasks by index, each COMPLETED.
fn assert_completed(id: u64) {
    for (task, st, why) in wait_job(id) {
        assert_eq!(st, "COMPLETED", "job {id} task {task} ({why})");
    }
}

/// The partition stopped (jobs queue but none starts) until dropped.
struct Paused;
impl Paused {
    fn new() -> Paused {
        slurm("scontrol", &["update", "PartitionName=wp", "State=DOWN"]);
        Paused
    }
}
impl Drop for Paused {
    fn drop(&mut self) {
        let _ = Command::new("scontrol")
            .args(["update", "PartitionName=wp", "State=UP"])
            .status();
    }
}

fn llama() -> PathBuf {
    fixtures().join("good/arch/llama")
}

/// A reshard, a `.bin` repo → safetensors repo, an HF release → one Q4_K_M GGUF (parts and
/// `--in-place`), submitted together; each finish job completes and each output is convert's.
#[test]
fn the_docs_slurm_recipe_equals_convert() {
    let Some(_cluster) = cluster() else { return };
    let blocks = doc_blocks();
    let sharded = fixtures().join("good/hf_repo_sharded");
    let bin_repo = fixtures().join("good/pickle/bin_repo");
    let cases = [
        Case::new(&sharded, "repo", &["--shard-size", "12KB"], 3),
        Case::new(&sharded, "repo", &["--shard-size", "12KB"], 3).in_place(),
        Case::new(&bin_repo, "repo", &[], 2),
        Case::new(&llama(), "model.gguf", &["--quant", "Q4_K_M"], 3),
        Case::new(&llama(), "model.gguf", &["--quant", "Q4_K_M"], 3).in_place(),
    ];
    let jobs: Vec<(u64, u64)> = cases
        .iter()
        .map(|c| {
            c.write_sbatch(&blocks);
            c.submit(&c.submission(&blocks))
        })
        .collect();
    for (c, (units, finish)) in cases.iter().zip(jobs) {
        assert_completed(units);
        let fin = wait_job(finish);
        assert_eq!(
            fin[0].1,
            "COMPLETED",
            "{fin:?}: {}",
            c.log(&finish.to_string())
        );
        c.assert_identical_to_convert();
    }
}

/// One array task cancelled: the finish job can never start, `finish` by hand names the unit
/// (exit 1), and the doc's resubmission of that index alone completes the job.
#[test]
fn a_cancelled_task_is_named_and_its_resubmission_completes_the_job() {
    let Some(_cluster) = cluster() else { return };
    let blocks = doc_blocks();
    let c = Case::new(&llama(), "model.gguf", &["--quant", "Q4_K_M"], 3);
    c.write_sbatch(&blocks);
    let (units, finish) = {
        let _paused = Paused::new();
        let ids = c.submit(&c.submission(&blocks));
        slurm("scancel", &[&format!("{}_1", ids.0)]);
        ids
    };
    let tasks = wait_job(units);
    let by_task: BTreeMap<&str, &str> = tasks
        .iter()
        .map(|(t, s, _)| (t.as_str(), s.as_str()))
        .collect();
    // A pending task cancelled may leave no record of its own (22.05 drops it from the array).
    assert_eq!(by_task.get("0"), Some(&"COMPLETED"), "{tasks:?}");
    assert_eq!(by_task.get("2"), Some(&"COMPLETED"), "{tasks:?}");
    assert!(
        matches!(by_task.get("1"), None | Some(&"CANCELLED")),
        "{tasks:?}"
    );
    let fin = wait_job(finish);
    assert_eq!(
        (fin[0].1.as_str(), fin[0].2.as_str()),
        ("PENDING", "DependencyNeverSatisfied")
    );
    let by_hand = wp(&["finish", c.plan().to_str().unwrap()]);
    assert_eq!(by_hand.status.code(), Some(1));
    let err = String::from_utf8_lossy(&by_hand.stderr);
    assert!(
        err.contains("not finished: missing (not run, running, or killed): 1;"),
        "{err}"
    );
    assert!(!c.path("out/model.gguf").exists(), "nothing published");
    let resubmit = edit(&c.edit_common(&blocks[2]), "--array=3 ", "--array=1 ");
    let (again, finish2) = c.submit(&resubmit);
    assert_eq!(states(finish)[0].1, "CANCELLED", "scancel --name=wp-finish");
    assert_completed(again);
    let fin = wait_job(finish2);
    assert_eq!(fin[0].1, "COMPLETED", "{}", c.log(&finish2.to_string()));
    c.assert_identical_to_convert();
}

/// Unit 0 submitted again while the array is queued (both copies start together): one
/// publishes, the other writes nothing, and the output is convert's.
#[test]
fn a_unit_run_twice_on_slurm_leaves_one_result() {
    let Some(_cluster) = cluster() else { return };
    let blocks = doc_blocks();
    for in_place in [false, true] {
        let mut c = Case::new(&llama(), "model.gguf", &["--quant", "Q4_K_M"], 2);
        c.in_place = in_place;
        c.write_sbatch(&blocks);
        let (units, dup, finish) = {
            let _paused = Paused::new();
            // Submitted first: it and the array's task 0 take the node's first two CPUs.
            let dup = c.sh("sbatch --parsable --array=0 units.sbatch");
            let dup: u64 = dup.trim().parse().unwrap();
            let (units, finish) = c.submit(&c.submission(&blocks));
            (units, dup, finish)
        };
        assert_completed(units);
        assert_completed(dup);
        let fin = wait_job(finish);
        assert_eq!(fin[0].1, "COMPLETED", "{}", c.log(&finish.to_string()));
        let outcomes = [c.log(&format!("{units}_0")), c.log(&format!("{dup}_0"))];
        eprintln!("unit 0 twice (in_place {in_place}): {outcomes:?}");
        let done = outcomes.iter().filter(|l| l.contains(": done,")).count();
        let other = outcomes
            .iter()
            .filter(|l| l.contains(": already-done,") || l.contains(": done-elsewhere,"))
            .count();
        assert_eq!((done, other), (1, 1), "{outcomes:?}");
        c.assert_identical_to_convert();
    }
}

/// The records of job `id` once those of `tasks` have all ended.
fn wait_tasks(id: u64, tasks: &[&str]) -> Vec<(String, String, String)> {
    let t0 = Instant::now();
    loop {
        let s = states(id);
        let ended = tasks.iter().all(|t| {
            s.iter()
                .any(|(k, st, _)| k == t && !WAITING.contains(&st.as_str()))
        });
        if ended {
            return s;
        }
        assert!(t0.elapsed() < Duration::from_secs(300), "job {id}: {s:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One array task fails (an input rewritten while the job ran: the unit refuses it): the
/// finish job can never start, `finish` by hand names the failed unit and why; with the input
/// put back, the doc's resubmission of that index alone completes the job.
#[test]
fn a_failed_task_is_named_and_its_resubmission_completes_the_job() {
    let Some(_cluster) = cluster() else { return };
    let blocks = doc_blocks();
    let release = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(llama()).unwrap().flatten() {
        std::fs::copy(e.path(), release.path().join(e.file_name())).unwrap();
    }
    let c = Case::new(release.path(), "model.gguf", &["--quant", "Q4_K_M"], 3);
    c.write_sbatch(&blocks);
    let (units, finish) = {
        let _paused = Paused::new();
        let ids = c.submit(&c.submission(&blocks));
        slurm("scontrol", &["hold", &format!("{}_1", ids.0)]);
        ids
    };
    wait_tasks(units, &["0", "2"]);
    let shard = release.path().join("model-00002-of-00003.safetensors");
    let good = std::fs::read(&shard).unwrap();
    let mut bad = good.clone();
    *bad.last_mut().unwrap() ^= 1;
    std::fs::write(&shard, &bad).unwrap();
    slurm("scontrol", &["release", &format!("{units}_1")]);
    let tasks = wait_job(units);
    let task1 = tasks.iter().find(|(t, _, _)| t == "1").expect("task 1");
    assert_eq!(task1.1, "FAILED", "{tasks:?}");
    let fin = wait_job(finish);
    assert_eq!(
        (fin[0].1.as_str(), fin[0].2.as_str()),
        ("PENDING", "DependencyNeverSatisfied")
    );
    let by_hand = wp(&["finish", c.plan().to_str().unwrap()]);
    assert_eq!(by_hand.status.code(), Some(1));
    let err = String::from_utf8_lossy(&by_hand.stderr);
    assert!(err.contains("failed: 1 ("), "{err}");
    assert!(err.contains("model-00002-of-00003.safetensors"), "{err}");
    assert!(!c.path("out/model.gguf").exists(), "nothing published");
    std::fs::write(&shard, &good).unwrap();
    let resubmit = edit(&c.edit_common(&blocks[2]), "--array=3 ", "--array=1 ");
    let (again, finish2) = c.submit(&resubmit);
    assert_completed(again);
    let fin = wait_job(finish2);
    assert_eq!(fin[0].1, "COMPLETED", "{}", c.log(&finish2.to_string()));
    c.assert_identical_to_convert();
}
