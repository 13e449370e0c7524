//! docs/units.md's recipes other than Slurm (issue 34; Slurm is tests/it/slurm.rs): GitHub
//! Actions runners that each check the inputs out again, `xargs -P`, GNU `parallel` and the
//! Kubernetes Indexed Job. The outputs must be byte-identical to the one-process `convert`.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, SystemTime};

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

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
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

/// `got` holds exactly `want`'s files, with the same bytes.
fn assert_same_files(got: &Path, want: &Path) {
    let (g, w) = (files_of(got), files_of(want));
    assert_eq!(g.keys().collect::<Vec<_>>(), w.keys().collect::<Vec<_>>());
    for (name, bytes) in &w {
        assert!(g[name] == *bytes, "{name} differs from convert's");
    }
}

/// A runner's own checkout of `src` at `at`: the files copied again (new inodes), their mtimes
/// set `age` seconds back, as another runner's download leaves them.
fn check_out(src: &Path, at: &Path, age: u64) {
    let _ = std::fs::remove_dir_all(at);
    std::fs::create_dir_all(at).unwrap();
    let when = SystemTime::now() - Duration::from_secs(age);
    for (name, bytes) in files_of(src) {
        let p = at.join(name);
        std::fs::write(&p, bytes).unwrap();
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        f.set_modified(when).unwrap();
    }
}

/// The GitHub Actions recipe's runners, in one directory `base`: the inputs at `base/release`,
/// the output in `base/out`, the plan `base/job.plan.json` (the same paths on every runner).
struct Runners {
    base: tempfile::TempDir,
    plan_args: Vec<String>,
}

impl Runners {
    fn new(args: &[&str], units: usize) -> Runners {
        let base = tempfile::tempdir().unwrap();
        let b = base.path();
        let mut plan_args: Vec<String> = ["plan", s(&b.join("release")), "-o"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        plan_args.push(s(&b.join("out/model.gguf")).into());
        plan_args.extend(args.iter().map(|a| a.to_string()));
        plan_args.extend(["--units".into(), units.to_string()]);
        plan_args.extend(["--plan".into(), s(&b.join("job.plan.json")).into()]);
        Runners { base, plan_args }
    }
    fn path(&self, p: &str) -> PathBuf {
        self.base.path().join(p)
    }
    /// A fresh runner: only the artifacts survive; the inputs are checked out from `src`.
    fn fresh(&self, src: &Path, age: u64) {
        for d in ["out", "job.plan.json"] {
            let p = self.path(d);
            let _ = std::fs::remove_dir_all(&p);
            let _ = std::fs::remove_file(&p);
        }
        check_out(src, &self.path("release"), age);
        std::fs::create_dir_all(self.path("out")).unwrap();
        let a: Vec<&str> = self.plan_args.iter().map(String::as_str).collect();
        ok(&wp(&a), "plan");
    }
    fn staging(&self) -> PathBuf {
        self.path("out/.model.gguf.wp-units")
    }
    /// The matrix job `i`: its own checkout and plan, unit `i`, the staging files uploaded.
    fn unit_job(&self, src: &Path, i: usize) {
        self.fresh(src, 1000 * (i as u64 + 1));
        let plan = self.path("job.plan.json");
        ok(&wp(&["unit", s(&plan), "--index", &i.to_string()]), "unit");
        let art = self.path(&format!("artifacts/unit-{i}"));
        std::fs::create_dir_all(&art).unwrap();
        for e in std::fs::read_dir(self.staging()).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("unit-") {
                std::fs::copy(e.path(), art.join(&name)).unwrap();
            }
        }
    }
    /// The finish job: its own checkout and plan, every artifact downloaded into the staging
    /// directory, `finish`.
    fn finish_job(&self, src: &Path) -> Output {
        self.fresh(src, 50);
        std::fs::create_dir_all(self.staging()).unwrap();
        for e in std::fs::read_dir(self.path("artifacts")).unwrap().flatten() {
            for f in std::fs::read_dir(e.path()).unwrap().flatten() {
                std::fs::copy(f.path(), self.staging().join(f.file_name())).unwrap();
            }
        }
        wp(&["finish", s(&self.path("job.plan.json"))])
    }
}

/// Issue 34: the plan's hash covered the inputs' mtimes, so the records of a unit run on one
/// runner were not those of the plan the finishing runner made from its own checkout: finish
/// named every unit missing. Now each runner's plan is the same plan.
#[test]
fn gha_runners_with_their_own_checkouts_make_one_output() {
    let llama = fixtures().join("good/arch/llama");
    let r = Runners::new(&["--quant", "Q4_K_M"], 3);
    for i in 0..3 {
        r.unit_job(&llama, i);
    }
    ok(&r.finish_job(&llama), "finish on the third checkout");
    // convert reads the same name: the GGUF's general.name comes from the release's directory.
    let c = r.path("c");
    convert_q4(&r.path("release"), &c, "model.gguf");
    assert_same_files(&r.path("out"), &c);
}

/// A runner whose checkout differs (one byte of a weight, the same size) makes another plan:
/// the finishing runner does not take its unit's records, names the unit and publishes nothing.
#[test]
fn gha_a_runner_with_a_changed_input_is_refused() {
    let llama = fixtures().join("good/arch/llama");
    let changed = tempfile::tempdir().unwrap();
    check_out(&llama, changed.path(), 0);
    let shard = changed.path().join("model-00002-of-00003.safetensors");
    let mut b = std::fs::read(&shard).unwrap();
    let last = b.len() - 1;
    b[last] ^= 1;
    std::fs::write(&shard, b).unwrap();
    let r = Runners::new(&["--quant", "Q4_K_M"], 3);
    r.unit_job(&llama, 0);
    r.unit_job(changed.path(), 1);
    r.unit_job(&llama, 2);
    let o = r.finish_job(&llama);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not finished: missing (not run, running, or killed): 1;"),
        "{err}"
    );
    assert!(!r.path("out/model.gguf").exists());
}

/// On one machine, an input touched after the plan (its mtime changed, its bytes not) is still
/// the planned one; a byte of it changed is refused by name.
#[test]
fn a_touched_input_is_the_planned_one_and_a_changed_one_is_refused() {
    let llama = fixtures().join("good/arch/llama");
    let r = Runners::new(&["--quant", "Q4_K_M"], 2);
    r.fresh(&llama, 10);
    let plan = r.path("job.plan.json");
    let shard = r.path("release/model-00001-of-00003.safetensors");
    let f = std::fs::File::options().write(true).open(&shard).unwrap();
    f.set_modified(SystemTime::now()).unwrap();
    ok(
        &wp(&["unit", s(&plan), "--index", "0"]),
        "unit 0 after touch",
    );
    let mut b = std::fs::read(&shard).unwrap();
    let last = b.len() - 1;
    b[last] ^= 1;
    std::fs::write(&shard, b).unwrap();
    let o = wp(&["unit", s(&plan), "--index", "1"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("model-00001-of-00003.safetensors") && err.contains("sha256"),
        "{err}"
    );
}

/// The fenced blocks (```LANG) of docs/units.md's section `heading`, in order.
fn doc_blocks(heading: &str, lang: &str) -> Vec<String> {
    let doc = std::fs::read_to_string(fixtures().join("../docs/units.md")).unwrap();
    let start = doc
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"));
    let rest = &doc[start + heading.len()..];
    let section = &rest[..rest.find("\n### ").unwrap_or(rest.len())];
    let mut blocks = Vec::new();
    let mut lines = section.lines();
    let fence = format!("```{lang}");
    while let Some(l) = lines.next() {
        if l.trim() == fence {
            let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            blocks.push(body.join("\n") + "\n");
        }
    }
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

/// PATH with this build's weightport first.
fn path_with_weightport() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_weightport"))
        .parent()
        .unwrap();
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap())
}

/// Runs `script` with bash in `dir`, this build's weightport on PATH.
fn sh(dir: &Path, script: &str, env: &[(&str, &str)]) -> Output {
    std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .env("PATH", path_with_weightport())
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// The one-process convert of `release` (a checkout of the Llama release: the GGUF's name
/// comes from its directory's) to `--quant Q4_K_M`, into `dir/name`.
fn convert_q4(release: &Path, dir: &Path, name: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let out = dir.join(name);
    ok(
        &wp(&["convert", s(release), "-o", s(&out), "--quant", "Q4_K_M"]),
        "convert",
    );
    out
}

fn assert_same_bytes(a: &Path, b: &Path) {
    assert!(
        std::fs::read(a).unwrap() == std::fs::read(b).unwrap(),
        "{} differs from {}",
        a.display(),
        b.display()
    );
}

/// The one-machine block `k` (0: `xargs -P`, 1: GNU `parallel`) run as written in a directory
/// holding `release`.
fn one_machine_recipe(k: usize) {
    let blocks = doc_blocks("### One machine", "sh");
    assert_eq!(blocks.len(), 2, "xargs and parallel");
    let t = tempfile::tempdir().unwrap();
    check_out(
        &fixtures().join("good/arch/llama"),
        &t.path().join("release"),
        0,
    );
    ok(&sh(t.path(), &blocks[k], &[]), &blocks[k]);
    let want = convert_q4(&t.path().join("release"), &t.path().join("c"), "model.gguf");
    assert_same_bytes(&t.path().join("release-Q4_K_M.gguf"), &want);
    assert!(!t.path().join(".release-Q4_K_M.gguf.wp-units").exists());
}

#[test]
fn the_docs_xargs_recipe_equals_convert() {
    one_machine_recipe(0);
}

/// GNU parallel (`apt-get install parallel`; CI installs it or says why not in
/// `WEIGHTPORT_NO_PARALLEL`).
#[test]
fn the_docs_gnu_parallel_recipe_equals_convert() {
    let have = std::process::Command::new("parallel")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        let why = std::env::var("WEIGHTPORT_NO_PARALLEL").ok();
        assert!(
            std::env::var_os("CI").is_none() || why.is_some(),
            "CI must install GNU parallel or say why it could not (WEIGHTPORT_NO_PARALLEL)"
        );
        eprintln!(
            "SKIPPED the GNU parallel recipe: {}",
            why.unwrap_or_else(|| "no `parallel` on PATH (apt-get install parallel)".into())
        );
        return;
    }
    one_machine_recipe(1);
}

/// A Python that can read YAML and check it against the GitHub workflow schema
/// (`check-jsonschema`, in .ci/requirements.txt): `WEIGHTPORT_PYTHON`, else `python3`. `None`
/// with a note outside CI.
fn python_with_yaml_checks() -> Option<String> {
    let cands = [
        std::env::var("WEIGHTPORT_PYTHON").ok(),
        Some("python3".into()),
    ];
    let found = cands.into_iter().flatten().find(|py| {
        std::process::Command::new(py)
            .args(["-c", "import yaml, check_jsonschema"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI's Python must have pyyaml and check-jsonschema (.ci/requirements.txt)"
        );
        eprintln!("SKIPPED: no Python with pyyaml and check-jsonschema");
    }
    found
}

/// The YAML document `text` as JSON (pyyaml's safe loader).
fn yaml_to_json(py: &str, text: &str) -> serde_json::Value {
    let t = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(t.path(), text).unwrap();
    let o = std::process::Command::new(py)
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
            s(t.path()),
        ])
        .output()
        .unwrap();
    ok(&o, "yaml.safe_load");
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The `--units N` of a plan command line.
fn units_of(cmd: &str) -> u64 {
    let w: Vec<&str> = cmd.split_whitespace().collect();
    let i = w.iter().position(|a| *a == "--units").expect("--units");
    w[i + 1].parse().unwrap()
}

/// The Indexed Job's manifest has the shape Kubernetes needs (no cluster runs here), and its
/// container command, run once per index with `JOB_COMPLETION_INDEX` set as each pod has it,
/// makes convert's output.
#[test]
fn the_docs_kubernetes_indexed_job_runs_its_units() {
    let Some(py) = python_with_yaml_checks() else {
        return;
    };
    let yaml = doc_blocks("### Kubernetes Indexed Job", "yaml");
    assert_eq!(yaml.len(), 1);
    let job = yaml_to_json(&py, &yaml[0]);
    assert_eq!(job["apiVersion"], "batch/v1");
    assert_eq!(job["kind"], "Job");
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    let slurm_plan = &doc_blocks("### Slurm job array", "bash")[1];
    assert_eq!(spec["completions"].as_u64(), Some(units_of(slurm_plan)));
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    let c = &pod["containers"][0];
    let cmd: Vec<String> = serde_json::from_value(c["command"].clone()).unwrap();
    assert_eq!(cmd[0], "weightport");
    assert_eq!(cmd[cmd.len() - 2], "unit", "{cmd:?}");
    let mount = c["volumeMounts"][0]["mountPath"].as_str().unwrap();
    let plan_in_pod = &cmd[cmd.len() - 1];
    assert!(plan_in_pod.starts_with(&format!("{mount}/")), "{cmd:?}");
    assert_eq!(pod["volumes"][0]["name"], c["volumeMounts"][0]["name"]);

    // The volume: `mount` is this directory; the plan made before the Job, at the pod's path.
    let t = tempfile::tempdir().unwrap();
    let plan = t.path().join(&plan_in_pod[mount.len() + 1..]);
    std::fs::create_dir_all(plan.parent().unwrap()).unwrap();
    let llama = fixtures().join("good/arch/llama");
    let out = t.path().join("out/model.gguf");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    ok(
        &wp(&[
            "plan",
            s(&llama),
            "-o",
            s(&out),
            "--quant",
            "Q4_K_M",
            "--units",
            "3",
            "--plan",
            s(&plan),
        ]),
        "plan",
    );
    let pods: Vec<_> = (0..3)
        .map(|i| {
            std::process::Command::new(env!("CARGO_BIN_EXE_weightport"))
                .args(&cmd[1..cmd.len() - 1])
                .arg(&plan)
                .env("JOB_COMPLETION_INDEX", i.to_string())
                .env_remove("SLURM_ARRAY_TASK_ID")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, p) in pods.into_iter().enumerate() {
        let o = p.wait_with_output().unwrap();
        ok(&o, &format!("pod {i}"));
        let line = String::from_utf8_lossy(&o.stdout);
        assert!(line.starts_with(&format!("unit {i} of 3: done")), "{line}");
    }
    ok(&wp(&["finish", s(&plan)]), "finish");
    assert_same_bytes(&out, &convert_q4(&llama, &t.path().join("c"), "model.gguf"));
}

/// Stand-ins for the workflow's download tools on a runner: `pip install` has nothing to do
/// (this build's weightport is on PATH) and `hf download REPO --local-dir DIR` checks the
/// release out from `$WP_RELEASE` with the mtime `$WP_MTIME` (seconds), as a fresh runner's
/// download leaves it.
const RUNNER_TOOLS: &str = r#"
pip() { :; }
hf() {
  local dir=
  while [ $# -gt 0 ]; do [ "$1" = --local-dir ] && dir=$2; shift; done
  mkdir -p "$dir" && cp "$WP_RELEASE"/* "$dir"/ && touch -d "@$WP_MTIME" "$dir"/*
}
"#;

/// One job of the workflow on a fresh runner: `base` emptied but for the artifacts, then its
/// steps in order (`index` for `${{ matrix.index }}`).
fn run_gha_job(base: &Path, job: &serde_json::Value, plan: &str, index: Option<u64>, age: u64) {
    for e in std::fs::read_dir(base).unwrap().flatten() {
        if e.file_name() != "artifacts" {
            let _ = std::fs::remove_dir_all(e.path());
            let _ = std::fs::remove_file(e.path());
        }
    }
    let matrix = |t: &str| match index {
        Some(i) => t.replace("${{ matrix.index }}", &i.to_string()),
        None => t.to_string(),
    };
    let llama = fixtures().join("good/arch/llama");
    let mtime = (SystemTime::now() - Duration::from_secs(age))
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let artifacts = base.join("artifacts");
    for step in job["steps"].as_array().unwrap() {
        let with = &step["with"];
        match (step["run"].as_str(), step["uses"].as_str()) {
            (Some(run), None) => {
                let script = format!("{RUNNER_TOOLS}{}\n", matrix(run));
                let env = [
                    ("PLAN", plan),
                    ("REVISION", "main"),
                    ("WP_RELEASE", s(&llama)),
                    ("WP_MTIME", mtime.as_str()),
                ];
                ok(&sh(base, &script, &env), run);
            }
            (None, Some("actions/upload-artifact@v4")) => {
                let name = matrix(with["name"].as_str().unwrap());
                let path = PathBuf::from(with["path"].as_str().unwrap());
                let to = artifacts.join(name);
                std::fs::create_dir_all(&to).unwrap();
                let file = path.file_name().unwrap().to_string_lossy().into_owned();
                match file.strip_suffix('*') {
                    Some(prefix) => {
                        for e in std::fs::read_dir(path.parent().unwrap()).unwrap().flatten() {
                            if e.file_name().to_string_lossy().starts_with(prefix) {
                                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
                            }
                        }
                    }
                    None => {
                        std::fs::copy(&path, to.join(&file)).unwrap();
                    }
                }
            }
            (None, Some("actions/download-artifact@v4")) => {
                assert_eq!(with["merge-multiple"], true);
                let to = PathBuf::from(with["path"].as_str().unwrap());
                std::fs::create_dir_all(&to).unwrap();
                for a in std::fs::read_dir(&artifacts).unwrap().flatten() {
                    for f in std::fs::read_dir(a.path()).unwrap().flatten() {
                        std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
                    }
                }
            }
            other => panic!("a step this test cannot run: {other:?}"),
        }
    }
}

/// The workflow passes the GitHub workflow schema and has the matrix the plan needs; its jobs
/// run in the matrix's order, each on a fresh checkout (other inodes, other mtimes), with the
/// artifacts moved between them, and the finish job's output is convert's.
#[test]
fn the_docs_github_actions_workflow_runs_on_fresh_runners() {
    let Some(py) = python_with_yaml_checks() else {
        return;
    };
    let blocks = doc_blocks("### GitHub Actions matrix", "yaml");
    assert_eq!(blocks.len(), 1);
    let t = tempfile::tempdir().unwrap();
    // The user's edit: their paths.
    let base = t.path().join("wp");
    std::fs::create_dir_all(&base).unwrap();
    let text = edit(&blocks[0], "/tmp/wp", s(&base));
    let file = t.path().join("quantize.yml");
    std::fs::write(&file, &text).unwrap();
    let o = std::process::Command::new(&py)
        .args([
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-workflows",
        ])
        .arg(&file)
        .output()
        .unwrap();
    ok(&o, "check-jsonschema (GitHub workflow schema)");
    let wf = yaml_to_json(&py, &text);
    let plan = wf["env"]["PLAN"].as_str().unwrap().to_string();
    let n = units_of(&plan);
    let unit = &wf["jobs"]["unit"];
    let matrix: Vec<u64> =
        serde_json::from_value(unit["strategy"]["matrix"]["index"].clone()).unwrap();
    assert_eq!(
        matrix,
        (0..n).collect::<Vec<_>>(),
        "one matrix job per unit"
    );
    assert_eq!(wf["jobs"]["finish"]["needs"], "unit");
    for (k, i) in matrix.iter().enumerate() {
        run_gha_job(&base, unit, &plan, Some(*i), 1000 * (k as u64 + 1));
    }
    run_gha_job(&base, &wf["jobs"]["finish"], &plan, None, 10);
    let out = base.join("out/release-Q4_K_M.gguf");
    let want = convert_q4(&base.join("release"), &t.path().join("c"), "model.gguf");
    assert_same_bytes(&out, &want);
    assert_same_bytes(&base.join("artifacts/gguf/release-Q4_K_M.gguf"), &want);
}
