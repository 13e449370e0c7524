//! Side files (issue 28, items 3, 4, 9 and part of 10): what `--attest`, `--report`, a job's
//! `attest`/`report`, `plan --plan` and a unit's failure record write never replaces an input,
//! an output or another side file, nor an existing file without `--force`; it is written
//! through a fresh temp file and a rename; every refusal comes before anything is written.
//! `-o PATH:KEYS` is read as the job file reads its keys; a job is checked whole before any of
//! it runs. Every case is an attack made through the command line, as a user would make it;
//! the reference is the bytes of the files before the command (the fixtures as committed).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::arch::sha_file;
use common::{fixtures, wp};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs weightport in `dir` (so that a relative path the command makes up stays there).
fn wp_in(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_weightport"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run weightport")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The exit code is `code`; stderr.
fn code(o: &Output, code: i32) -> String {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{e}");
    e
}

/// The names in `dir` (hidden ones too), sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A copy of the single-file repo's weights in `dir` (a safetensors file written by
/// safetensors-py, fixtures/gen).
fn input_in(dir: &Path) -> PathBuf {
    let p = dir.join("in.safetensors");
    std::fs::copy(fixtures().join("good/hf_repo_single/model.safetensors"), &p).unwrap();
    p
}

/// `--attest`/`--report` onto the input weights: with and without `--force`, through a
/// symlink, and a hard link. Before: exit 0, the input replaced by the statement. Now: exit 2
/// naming the flag and the path; the input is the fixture's bytes; no output, no temp file.
#[test]
fn a_side_file_onto_the_input_is_refused_and_the_input_kept() {
    let t = tempfile::tempdir().unwrap();
    let input = input_in(t.path());
    let want = sha_file(&fixtures().join("good/hf_repo_single/model.safetensors"));
    let link = t.path().join("link.json");
    std::os::unix::fs::symlink(&input, &link).unwrap();
    let hard = t.path().join("hard.json");
    std::fs::hard_link(&input, &hard).unwrap();
    let out = t.path().join("out.gguf");
    let cases: [(&str, &Path, &[&str]); 6] = [
        ("--attest", &input, &[]),
        ("--attest", &input, &["--force"]),
        ("--report", &input, &["--force"]),
        ("--attest", &link, &["--force"]),
        ("--report", &hard, &["--force"]),
        ("--attest", &input, &["--force", "--no-verify"]),
    ];
    for (flag, side, extra) in cases {
        let mut a = vec!["convert", s(&input), "-o", s(&out), flag, s(side)];
        a.extend(extra);
        let e = code(&wp(&a), 2);
        assert!(e.contains(flag) && e.contains(s(side)), "{flag} {e}");
        assert_eq!(
            sha_file(&input),
            want,
            "{flag} {side:?} {extra:?}: input changed"
        );
        assert!(!out.exists(), "{flag} {extra:?}: an output was committed");
        assert_eq!(
            names(t.path()),
            ["hard.json", "in.safetensors", "link.json"],
            "{flag} {extra:?}"
        );
    }
    // The importance matrix is an input too.
    let imatrix = t.path().join("imatrix.gguf");
    std::fs::copy(fixtures().join("good/imatrix/imatrix.gguf"), &imatrix).unwrap();
    let want_m = sha_file(&imatrix);
    let e = code(
        &wp(&[
            "convert",
            s(&input),
            "-o",
            s(&out),
            "--quant",
            "Q8_0",
            "--imatrix",
            s(&imatrix),
            "--attest",
            s(&imatrix),
            "--force",
        ]),
        2,
    );
    assert!(e.contains("--attest") && e.contains("is an input"), "{e}");
    assert_eq!(sha_file(&imatrix), want_m);
    assert!(!out.exists());
    // A repo input: its weights and its companions are inputs too.
    let out = t.path().join("out.safetensors");
    let repo = t.path().join("repo");
    common::arch::copy_tree(&fixtures().join("good/hf_repo_sharded"), &repo);
    for name in ["model-00002-of-00003.safetensors", "config.json"] {
        let victim = repo.join(name);
        let before = sha_file(&victim);
        let e = code(
            &wp(&[
                "convert",
                s(&repo),
                "-o",
                s(&out),
                "--attest",
                s(&victim),
                "--force",
            ]),
            2,
        );
        assert!(e.contains("--attest") && e.contains(name), "{e}");
        assert_eq!(sha_file(&victim), before, "{name}");
        assert!(!out.exists());
    }
}

/// A side file onto the output it describes, onto a file of an output repo, or two side files
/// at one path: refused before the output is committed (the output is not there afterwards).
#[test]
fn a_side_file_onto_an_output_or_another_side_file_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let input = input_in(t.path());
    let gguf = t.path().join("out.gguf");
    let repo = t.path().join("r");
    let cases: Vec<(Vec<String>, &str, &Path)> = vec![
        (
            vec![
                "-o".into(),
                s(&gguf).into(),
                "--report".into(),
                s(&gguf).into(),
            ],
            "--report",
            &gguf,
        ),
        (
            vec![
                "-o".into(),
                s(&gguf).into(),
                "--attest".into(),
                s(&gguf).into(),
                "--force".into(),
            ],
            "--attest",
            &gguf,
        ),
        (
            vec![
                "-o".into(),
                s(&repo).into(),
                "--attest".into(),
                s(&repo.join("model.safetensors")).into(),
                "--force".into(),
            ],
            "--attest",
            &repo,
        ),
        (
            vec![
                "-o".into(),
                s(&repo).into(),
                "--attest".into(),
                s(&repo.join("model.safetensors.index.json")).into(),
            ],
            "--attest",
            &repo,
        ),
        (
            vec![
                "-o".into(),
                s(&gguf).into(),
                "--attest".into(),
                s(&t.path().join("same.json")).into(),
                "--report".into(),
                s(&t.path().join("same.json")).into(),
            ],
            "same.json",
            &gguf,
        ),
    ];
    for (args, want, out) in cases {
        let mut a = vec!["convert", s(&input)];
        a.extend(args.iter().map(String::as_str));
        let e = code(&wp(&a), 2);
        assert!(e.contains(want), "{args:?}: {e}");
        assert!(!out.exists(), "{args:?}: an output was committed");
        assert!(!t.path().join("same.json").exists());
    }
    // The statement may lie inside the repo it describes, under a name of its own.
    let inside = repo.join("provenance.intoto.json");
    let o = wp(&["convert", s(&input), "-o", s(&repo), "--attest", s(&inside)]);
    code(&o, 0);
    let o = wp(&["verify", "--attestation", s(&inside), s(&repo)]);
    code(&o, 0);
}

/// A path that cannot be a side file (a FIFO, even with `--force`: the old writer renamed over
/// whatever was there, a device node too; a path ending in `/`; a directory; a file taken for
/// a directory; a directory that takes no file): refused before the output is committed.
/// Before: exit 0 with the FIFO replaced, or exit 1 after the output was committed.
#[test]
fn a_path_that_cannot_be_a_side_file_is_refused_before_the_output() {
    let t = tempfile::tempdir().unwrap();
    let input = input_in(t.path());
    let out = t.path().join("out.gguf");
    let fifo = t.path().join("fifo");
    let c = std::ffi::CString::new(s(&fifo)).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let sub = t.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let cases: [(String, &str); 5] = [
        (s(&fifo).into(), "not a regular file"),
        (
            format!("{}/", t.path().join("nodir").display()),
            "names a directory",
        ),
        (s(&sub).into(), "is a directory"),
        (s(&input.join("x.json")).into(), "is not a directory"),
        ("/proc/self/x.json".into(), "cannot be written"),
    ];
    for (side, want) in cases {
        let o = wp(&[
            "convert",
            s(&input),
            "-o",
            s(&out),
            "--attest",
            &side,
            "--force",
        ]);
        let e = code(&o, 2);
        assert!(e.contains("--attest") && e.contains(want), "{side}: {e}");
        assert!(!out.exists(), "{side}: an output was committed");
    }
    let m = std::fs::symlink_metadata(&fifo).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()));
    assert_eq!(names(t.path()), ["fifo", "in.safetensors", "sub"]);
}

/// An existing file at a side file's path is refused without `--force` (nothing written, the
/// file as it was) and replaced with it.
#[test]
fn an_existing_side_file_needs_force() {
    let t = tempfile::tempdir().unwrap();
    let input = input_in(t.path());
    let out = t.path().join("out.gguf");
    for flag in ["--attest", "--report"] {
        let side = t.path().join("mine.txt");
        std::fs::write(&side, b"mine").unwrap();
        let e = code(
            &wp(&["convert", s(&input), "-o", s(&out), flag, s(&side)]),
            2,
        );
        assert!(
            e.contains(flag) && e.contains("mine.txt") && e.contains("--force"),
            "{e}"
        );
        assert_eq!(std::fs::read(&side).unwrap(), b"mine");
        assert!(!out.exists(), "{flag}: an output was committed");
        let o = wp(&[
            "convert",
            s(&input),
            "-o",
            s(&out),
            flag,
            s(&side),
            "--force",
        ]);
        code(&o, 0);
        assert_ne!(std::fs::read(&side).unwrap(), b"mine");
        std::fs::remove_file(&out).unwrap();
    }
}

/// A symlink planted where the old writer put its temp file (`.NAME.wp-tmp`, a fixed name
/// written with `open(O_CREAT|O_TRUNC)`, which follows it): the file it points to is not
/// written, and the side file is a regular file of its own.
#[test]
fn side_files_are_written_through_a_fresh_temp_file() {
    let t = tempfile::tempdir().unwrap();
    let input = input_in(t.path());
    let victim = t.path().join("victim.txt");
    std::fs::write(&victim, b"precious").unwrap();
    let att = t.path().join("a.json");
    let rep = t.path().join("r.html");
    for side in [&att, &rep] {
        let name = side.file_name().unwrap().to_str().unwrap();
        let planted = t.path().join(format!(".{name}.wp-tmp"));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
    }
    // The temp file of a run killed while it wrote the statement (pid 2147483646 never runs
    // here): removed by the next run that writes it.
    let killed = t.path().join(".a.json.2147483646.abcdef.wp-tmp");
    std::fs::write(&killed, b"{\"half").unwrap();
    let o = wp(&[
        "convert",
        s(&input),
        "-o",
        s(&t.path().join("out.gguf")),
        "--attest",
        s(&att),
        "--report",
        s(&rep),
    ]);
    code(&o, 0);
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(!killed.exists(), "the killed run's temp file is left");
    for side in [&att, &rep] {
        let m = std::fs::symlink_metadata(side).unwrap();
        assert!(m.file_type().is_file(), "{side:?} is not a regular file");
    }
    let st: serde_json::Value = serde_json::from_slice(&std::fs::read(&att).unwrap()).unwrap();
    assert_eq!(st["_type"], "https://in-toto.io/Statement/v1");
    assert!(std::fs::read_to_string(&rep)
        .unwrap()
        .starts_with("<!DOCTYPE html>"));
}

/// A job whose later output's statement is an earlier job's input, the job file or the job's
/// state file (with `force`): refused before anything runs; nothing made, nothing replaced.
#[test]
fn a_job_side_file_onto_an_input_the_job_file_or_the_state_is_refused_whole() {
    for (victim, what) in [
        ("in.safetensors", "input"),
        ("job.toml", "job file"),
        ("state.json", "state"),
    ] {
        let t = tempfile::tempdir().unwrap();
        let input = input_in(t.path());
        let job = t.path().join("job.toml");
        std::fs::write(
            t.path().join("state.json"),
            b"{\"version\":1,\"outputs\":{}}\n",
        )
        .unwrap();
        let text = format!(
            "state = \"state.json\"\n\
             [[job]]\ninput = \"in.safetensors\"\n[[job.output]]\npath = \"a.safetensors\"\n\
             [[job]]\ninput = \"in.safetensors\"\ndtype = \"f32\"\n\
             [[job.output]]\npath = \"b.safetensors\"\nforce = true\nattest = \"{victim}\"\n"
        );
        std::fs::write(&job, &text).unwrap();
        let before: Vec<(String, String)> = names(t.path())
            .into_iter()
            .map(|n| (n.clone(), sha_file(&t.path().join(&n))))
            .collect();
        let e = code(&wp(&["run", s(&job)]), 2);
        assert!(e.contains("attest") && e.contains(victim), "{what}: {e}");
        let after: Vec<(String, String)> = names(t.path())
            .into_iter()
            .map(|n| (n.clone(), sha_file(&t.path().join(&n))))
            .collect();
        assert_eq!(after, before, "{what}: something was written");
        assert_eq!(
            sha_file(&input),
            sha_file(&fixtures().join("good/hf_repo_single/model.safetensors"))
        );
    }
}

/// In a job, an existing side file without `force` refuses its output before it is made, as
/// an existing output is refused; the other outputs are made.
#[test]
fn a_job_output_with_an_existing_side_file_is_refused_alone() {
    let t = tempfile::tempdir().unwrap();
    input_in(t.path());
    std::fs::write(t.path().join("taken.html"), b"mine").unwrap();
    let job = t.path().join("job.toml");
    std::fs::write(
        &job,
        "[[job]]\ninput = \"in.safetensors\"\n[[job.output]]\npath = \"a.safetensors\"\n\
         [[job.output]]\npath = \"b.gguf\"\nreport = \"taken.html\"\n",
    )
    .unwrap();
    let e = code(&wp(&["run", s(&job)]), 2);
    assert!(e.contains("taken.html") && e.contains("--force"), "{e}");
    assert_eq!(std::fs::read(t.path().join("taken.html")).unwrap(), b"mine");
    assert!(t.path().join("a.safetensors").is_file());
    assert!(!t.path().join("b.gguf").exists());
}

/// `-o PATH:KEYS` reads `attest`/`report` as the job file does: `true` is a file beside the
/// output, a bare key is `true`, a path is a path. Before: a file named `true`, and
/// `q.gguf:quant=Q8_0,report` a safetensors repo named after the whole string.
#[test]
fn output_keys_attest_and_report_are_read_as_the_job_file_reads_them() {
    let t = tempfile::tempdir().unwrap();
    let input = input_in(t.path());
    let a = t.path().join("a.safetensors");
    let q = t.path().join("q.gguf");
    let o = wp_in(
        t.path(),
        &[
            "convert",
            s(&input),
            "-o",
            &format!("{}:attest=true", a.display()),
            "-o",
            &format!("{}:quant=Q8_0,report", q.display()),
        ],
    );
    code(&o, 0);
    assert_eq!(
        names(t.path()),
        [
            "a.safetensors",
            "a.safetensors.intoto.json",
            "in.safetensors",
            "q.gguf",
            "q.gguf.html"
        ]
    );
    let st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.path().join("a.safetensors.intoto.json")).unwrap())
            .unwrap();
    assert_eq!(st["subject"][0]["name"], "a.safetensors");
    // A path that is a path: a file named as given.
    let b = t.path().join("b.safetensors");
    let o = wp_in(
        t.path(),
        &[
            "convert",
            s(&input),
            "-o",
            &format!(
                "{}:attest={},report=false",
                b.display(),
                t.path().join("true").display()
            ),
            "-o",
            s(&t.path().join("c.safetensors")),
        ],
    );
    code(&o, 0);
    let st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.path().join("true")).unwrap()).unwrap();
    assert_eq!(st["subject"][0]["name"], "b.safetensors");
}

/// `plan` makes one output and takes its options as flags: `-o m.gguf:quant=Q8_0` is
/// refused, not planned as a safetensors repo named after the whole string (as before).
#[test]
fn plan_refuses_output_keys() {
    let t = tempfile::tempdir().unwrap();
    let input = input_in(t.path());
    let spec = format!("{}:quant=Q8_0", t.path().join("m.gguf").display());
    let e = code(&wp(&["plan", s(&input), "-o", &spec, "--units", "2"]), 2);
    assert!(
        e.contains("m.gguf:quant=Q8_0") && e.contains("--quant"),
        "{e}"
    );
    assert_eq!(names(t.path()), ["in.safetensors"]);
}

/// Options after the colon that are ambiguous or wrong are refused naming the key, and nothing
/// is written: an unknown key next to a known one, a key without its value, a switch with a
/// value other than true/false, a key given twice, a value where none is taken.
#[test]
fn output_keys_that_are_ambiguous_are_refused_naming_the_key() {
    let t = tempfile::tempdir().unwrap();
    let input = input_in(t.path());
    let o = |spec: &str| {
        let p = format!("{}/{spec}", t.path().display());
        wp_in(
            t.path(),
            &[
                "convert",
                s(&input),
                "-o",
                &p,
                "-o",
                s(&t.path().join("z.gguf")),
            ],
        )
    };
    for (spec, key) in [
        ("a.gguf:quant=Q8_0,quantt=Q4_0", "quantt"),
        ("a.gguf:quant", "quant"),
        ("a.gguf:pure=maybe,quant=Q8_0", "pure"),
        ("a.gguf:quant=Q8_0,quant=Q4_0", "quant"),
        ("a.gguf:attest=", "attest"),
        ("a.gguf:threads=lots", "threads"),
    ] {
        let e = code(&o(spec), 2);
        assert!(e.contains(&format!("`{key}`")), "{spec}: {e}");
        assert_eq!(names(t.path()), ["in.safetensors"], "{spec}");
    }
}

/// `-o x.safetensors:pure`: before, "the following required arguments were not provided:"
/// and nothing after it; now the missing option is named.
#[test]
fn a_missing_required_option_is_named() {
    let t = tempfile::tempdir().unwrap();
    let input = input_in(t.path());
    let spec = format!("{}:pure", t.path().join("x.safetensors").display());
    let e = code(&wp(&["convert", s(&input), "-o", &spec]), 2);
    assert!(e.contains("quant"), "{e}");
    let o = wp(&["--json", "convert", s(&input), "-o", &spec]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.contains("quant"), "{m}");
    // The plain command line, and a job file, name it too.
    let o = wp(&[
        "--json",
        "convert",
        s(&input),
        "-o",
        "x.safetensors",
        "--pure",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.contains("--quant"), "{m}");
    let job = t.path().join("job.toml");
    std::fs::write(
        &job,
        "[[job]]\ninput = \"in.safetensors\"\n[[job.output]]\npath = \"x.gguf\"\npure = true\n",
    )
    .unwrap();
    let e = code(&wp(&["run", s(&job)]), 2);
    assert!(e.contains("job.toml:4") && e.contains("quant"), "{e}");
}

/// A later output's bad value (`threads = 999`, a bad regex) refuses the whole job before the
/// first output is made. Before: the first output was committed, then the second failed.
#[test]
fn a_later_outputs_bad_value_refuses_the_job_before_anything_runs() {
    for (key, value) in [
        ("threads", "999"),
        ("threads", "0"),
        ("tensor_type", "[\"(=Q8_0\"]"),
    ] {
        let t = tempfile::tempdir().unwrap();
        input_in(t.path());
        let job = t.path().join("job.toml");
        std::fs::write(
            &job,
            format!(
                "[[job]]\ninput = \"in.safetensors\"\n[[job.output]]\npath = \"a.safetensors\"\n\
                 [[job]]\ninput = \"in.safetensors\"\n[[job.output]]\npath = \"b.gguf\"\n\
                 quant = \"Q8_0\"\n{key} = {value}\n"
            ),
        )
        .unwrap();
        let e = code(&wp(&["run", s(&job)]), 2);
        assert!(e.contains("job.toml:8"), "{key}: {e}");
        assert_eq!(names(t.path()), ["in.safetensors", "job.toml"], "{key}");
    }
}

/// Nested outputs (one inside another's directory, directly or through a symlinked
/// directory; a GGUF split part beside its set's name): refused before anything runs. Before:
/// the first committed, the second failed with "appeared … (another process?)".
#[test]
fn nested_outputs_are_refused_before_anything_runs() {
    let t = tempfile::tempdir().unwrap();
    let input = input_in(t.path());
    let d = |n: &str| t.path().join(n).display().to_string();
    std::fs::create_dir(t.path().join("real")).unwrap();
    std::os::unix::fs::symlink(t.path().join("real"), t.path().join("link")).unwrap();
    let cases: [(String, String); 4] = [
        (d("out/r"), d("out/r/model.safetensors")),
        (d("out/r/model.safetensors"), d("out/r")),
        (d("real/r"), d("link/r/model.safetensors")),
        (
            format!("{}:shard_size=20KB", d("m.gguf")),
            d("m-00001-of-00003.gguf"),
        ),
    ];
    for (a, b) in cases {
        let o = wp(&["convert", s(&input), "-o", &a, "-o", &b]);
        let e = code(&o, 2);
        let said = ["lies inside", "contains", "part of"];
        assert!(said.iter().any(|w| e.contains(w)), "{a} {b}: {e}");
        assert_eq!(
            names(t.path()),
            ["in.safetensors", "link", "real"],
            "{a} {b}"
        );
        assert_eq!(names(&t.path().join("real")), Vec::<String>::new());
    }
}

/// `plan --plan FILE --force` onto the input: refused, the input kept.
#[test]
fn a_plan_file_onto_the_input_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let input = input_in(t.path());
    let want = sha_file(&input);
    let e = code(
        &wp(&[
            "plan",
            s(&input),
            "-o",
            s(&t.path().join("out.gguf")),
            "--units",
            "2",
            "--plan",
            s(&input),
            "--force",
        ]),
        2,
    );
    assert!(e.contains("--plan") && e.contains("in.safetensors"), "{e}");
    assert_eq!(sha_file(&input), want);
}

/// A unit that fails records why in the staging directory: a symlink planted there under the
/// record's name is replaced, the file it points to not written.
#[test]
fn a_failed_unit_record_does_not_write_through_a_planted_symlink() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    common::arch::copy_tree(&fixtures().join("good/hf_repo_sharded"), &repo);
    let out = t.path().join("out");
    let plan = t.path().join("job.plan.json");
    let o = wp(&[
        "plan",
        s(&repo),
        "-o",
        s(&out),
        "--shard-size",
        "12KB",
        "--units",
        "2",
        "--plan",
        s(&plan),
    ]);
    code(&o, 0);
    let staging = t.path().join(".out.wp-units");
    std::fs::create_dir_all(&staging).unwrap();
    let victim = t.path().join("victim.txt");
    std::fs::write(&victim, b"precious").unwrap();
    let record = staging.join("unit-00000.failed.json");
    std::os::unix::fs::symlink(&victim, &record).unwrap();
    // An input changed after planning: the unit fails and records it.
    std::fs::write(repo.join("config.json"), b"{}\n").unwrap();
    let e = code(&wp(&["unit", s(&plan), "--index", "0"]), 1);
    assert!(e.contains("changed since the plan"), "{e}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    let m = std::fs::symlink_metadata(&record).unwrap();
    assert!(m.file_type().is_file(), "the record is a file of its own");
    let f = wp(&["finish", s(&plan)]);
    assert!(stderr(&f).contains("failed: 0 ("), "{}", stderr(&f));
}

/// Two runs writing one statement at once, 10 times: one of them writes it (a whole statement
/// of its own output), the other is refused (exit 2), before its output is committed or, when
/// both checked before either wrote, at the rename, which never replaces.
#[test]
fn two_runs_on_one_statement_never_replace_or_mix_it() {
    let t = tempfile::tempdir().unwrap();
    let input = input_in(t.path());
    for round in 0..10 {
        let att = t.path().join(format!("a{round}.json"));
        let kids: Vec<_> = ["x", "y"]
            .iter()
            .map(|n| {
                let out = t.path().join(format!("{n}{round}.gguf"));
                std::process::Command::new(env!("CARGO_BIN_EXE_weightport"))
                    .args(["convert", s(&input), "-o", s(&out), "--attest", s(&att)])
                    .stderr(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let outs: Vec<Output> = kids
            .into_iter()
            .map(|k| k.wait_with_output().unwrap())
            .collect();
        let codes: Vec<i32> = outs.iter().map(|o| o.status.code().unwrap()).collect();
        let mut sorted = codes.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            [0, 2],
            "round {round}: {:?}",
            outs.iter().map(stderr).collect::<Vec<_>>()
        );
        let winner = ["x", "y"][codes.iter().position(|&c| c == 0).unwrap()];
        let st: serde_json::Value = serde_json::from_slice(&std::fs::read(&att).unwrap()).unwrap();
        assert_eq!(st["subject"][0]["name"], format!("{winner}{round}.gguf"));
        let loser = outs.iter().find(|o| o.status.code() == Some(2)).unwrap();
        let e = stderr(loser);
        assert!(
            e.contains("--attest") && e.contains(&format!("a{round}.json")),
            "{e}"
        );
        let other = if winner == "x" { "y" } else { "x" };
        let lost = t.path().join(format!("{other}{round}.gguf"));
        assert!(
            !lost.exists(),
            "round {round}: the refused run's output was committed"
        );
    }
    let temps: Vec<String> = names(t.path())
        .into_iter()
        .filter(|n| n.ends_with(".wp-tmp") || n.ends_with(".wp-lock"))
        .collect();
    assert!(temps.is_empty(), "{temps:?}");
}

/// A rerun replaces the statement its record names (this job wrote it), and not another file
/// when the job now names another path: that one is someone's, refused without `force`.
/// Before: the changed path made the output "made again" with `--force` for all of it, and the
/// other file was replaced.
#[test]
fn a_rerun_replaces_only_the_side_files_its_record_names() {
    let t = tempfile::tempdir().unwrap();
    input_in(t.path());
    let job = t.path().join("job.toml");
    let text = |att: &str| {
        format!(
            "[[job]]\ninput = \"in.safetensors\"\n[[job.output]]\npath = \"a.gguf\"\n\
             attest = \"{att}\"\n"
        )
    };
    std::fs::write(&job, text("a.json")).unwrap();
    code(&wp(&["run", s(&job)]), 0);
    // The output changed: made again, its own statement replaced.
    std::fs::write(t.path().join("a.gguf"), b"changed").unwrap();
    let o = wp(&["run", s(&job)]);
    code(&o, 0);
    let st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.path().join("a.json")).unwrap()).unwrap();
    assert_eq!(st["subject"][0]["name"], "a.gguf");
    // The statement's path changed to someone's file.
    std::fs::write(t.path().join("theirs.json"), b"theirs").unwrap();
    std::fs::write(&job, text("theirs.json")).unwrap();
    let e = code(&wp(&["run", s(&job)]), 2);
    assert!(e.contains("theirs.json") && e.contains("--force"), "{e}");
    assert_eq!(
        std::fs::read(t.path().join("theirs.json")).unwrap(),
        b"theirs"
    );
}
