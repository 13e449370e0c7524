//! Many outputs from one read (`convert IN -o A -o B:quant=… …`, a job's outputs of one
//! input): every output is byte for byte the file a separate `convert` run makes (those runs
//! are checked against convert_hf_to_gguf.py + llama-quantize in tests/it/hf_gguf.rs and
//! tests/it/jobs.rs; the Llama Q8_0/Q4_K_M files here also against the reference sha256 directly),
//! at 1 and 2 threads and in small chunks; each mapped input byte is taken once where separate
//! runs take it once per output; a failed output (refused when planned, or failing while the
//! shared read runs) does not undo the others and is named.

use crate::common;
use common::arch::{reference, sha_file};
use common::{fixtures, wp};

use std::path::{Path, PathBuf};

use serde_json::Value;
use weightport_engine::DtypeChoice;
use weightport_engine::{convert_many, open_inputs, route, ConvertOptions, NoProgress};

/// Every file under `dir` (one level) with its sha256, sorted by name; a file: itself.
fn digests(p: &Path) -> Vec<(String, String)> {
    if p.is_file() {
        return vec![(String::new(), sha_file(p))];
    }
    let mut v: Vec<(String, String)> = std::fs::read_dir(p)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|f| {
            (
                f.file_name().unwrap().to_string_lossy().into_owned(),
                sha_file(&f),
            )
        })
        .collect();
    v.sort();
    v
}

fn json_of(o: &std::process::Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// An output: its name, its options after `-o PATH:`, the same as separate convert flags.
type Out = (&'static str, &'static str, &'static [&'static str]);

/// A release's published set: a repo, Q8_0 and Q4_K_M GGUFs.
const OUTPUTS: [Out; 3] = [
    ("repo", "shard_size=30KB", &["--shard-size", "30KB"]),
    (
        "m-Q8_0.gguf",
        "outtype=f16,quant=Q8_0",
        &["--outtype", "f16", "--quant", "Q8_0"],
    ),
    (
        "m-Q4_K_M.gguf",
        "outtype=f16,quant=Q4_K_M",
        &["--outtype", "f16", "--quant", "Q4_K_M"],
    ),
];

/// A repo without a tokenizer (no GGUF by architecture): a reshard, an F32 file, a Q8_0 GGUF
/// of the tensors as they are.
const PLAIN: [Out; 3] = [
    ("repo", "shard_size=30KB", &["--shard-size", "30KB"]),
    ("f32.safetensors", "dtype=f32", &["--dtype", "f32"]),
    (
        "m-Q8_0.gguf",
        "arch=llama,quant=Q8_0",
        &["--arch", "llama", "--quant", "Q8_0"],
    ),
];

/// Input tensor data bytes of `input`, from `inspect`.
fn data_bytes(input: &Path) -> u64 {
    let v = json_of(&wp(&["--json", "inspect", input.to_str().unwrap()]));
    v["data_bytes"].as_u64().unwrap()
}

/// Separate `convert` runs of every output into `dir`; the bytes each read.
fn separate(input: &Path, dir: &Path, outs: &[Out]) -> Vec<u64> {
    outs.iter()
        .map(|(name, _, flags)| {
            let out = dir.join(name);
            let mut a = vec![
                "--json",
                "convert",
                input.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
            ];
            a.extend(flags.iter());
            let o = wp(&a);
            assert!(
                o.status.success(),
                "{a:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            json_of(&o)["read_bytes"].as_u64().unwrap()
        })
        .collect()
}

/// One multi-output `convert` of every output into `dir`.
fn together(input: &Path, dir: &Path, threads: &str, outs: &[Out]) -> Value {
    let specs: Vec<String> = outs
        .iter()
        .map(|(name, opts, _)| format!("{}:{opts}", dir.join(name).display()))
        .collect();
    let mut a = vec![
        "--json",
        "--threads",
        threads,
        "convert",
        input.to_str().unwrap(),
    ];
    for s in &specs {
        a.extend(["-o", s.as_str()]);
    }
    let o = wp(&a);
    assert!(
        o.status.success(),
        "{a:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    json_of(&o)
}

fn one_read_equals_separate_runs(input: &Path, outs: &[Out]) {
    let t = tempfile::tempdir().unwrap();
    let sep = t.path().join("sep");
    let reads = separate(input, &sep, outs);
    let total = data_bytes(input);
    for r in &reads {
        assert!(
            *r >= total,
            "a separate run reads every tensor: {r} < {total}"
        );
    }
    for threads in ["1", "2"] {
        let dir = t.path().join(format!("t{threads}"));
        let v = together(input, &dir, threads, outs);
        assert_eq!(v["command"], "convert");
        assert_eq!(v["made"], 3, "{v}");
        for (name, _, _) in outs {
            assert_eq!(
                digests(&dir.join(name)),
                digests(&sep.join(name)),
                "{} {name} at {threads} threads",
                input.display()
            );
        }
        // One read for the three outputs, each input byte taken once.
        let r = v["reads"].as_array().unwrap();
        assert_eq!(r.len(), 1, "one read: {r:?}");
        assert_eq!(r[0]["outputs"], serde_json::json!([0, 1, 2]));
        assert_eq!(r[0]["read_bytes"].as_u64(), Some(total), "{r:?}");
        let per_file: u64 = r[0]["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(per_file, total);
        assert!(reads.iter().sum::<u64>() >= 3 * total);
    }
}

fn arch(name: &str) -> PathBuf {
    fixtures().join("good/arch").join(name)
}

#[test]
fn llama_release_into_repo_q8_0_and_q4_k_m_from_one_read() {
    let input = arch("llama");
    one_read_equals_separate_runs(&input, &OUTPUTS);
    // And the separate runs' GGUFs are llama-quantize's (via the reference sha256).
    let t = tempfile::tempdir().unwrap();
    let v = together(&input, t.path(), "2", &OUTPUTS);
    if let Some(py) = common::python_with_jsonschema() {
        let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/json/run.schema.json");
        common::validate_json(&py, &schema, v.to_string().as_bytes(), "convert with 3 -o");
    }
    assert_eq!(sha_file(&t.path().join("m-Q8_0.gguf")), reference("Q8_0"));
    assert_eq!(
        sha_file(&t.path().join("m-Q4_K_M.gguf")),
        reference("Q4_K_M")
    );
}

#[test]
fn sharded_repo_from_one_read() {
    one_read_equals_separate_runs(&fixtures().join("good/hf_repo_sharded"), &PLAIN);
}

#[test]
fn pickle_bin_release_from_one_read() {
    one_read_equals_separate_runs(&arch("llama_bin"), &OUTPUTS);
}

/// The library call in chunks of a few hundred bytes (hundreds of windows, spans overlapping
/// across windows, workers waiting for windows to be released): the same files, each input
/// byte taken once.
#[test]
fn small_chunks_give_the_same_files_and_read_once() {
    let t = tempfile::tempdir().unwrap();
    let input = arch("llama");
    let sep = t.path().join("sep");
    separate(&input, &sep, &OUTPUTS);
    let total = data_bytes(&input);
    for threads in [1, 2] {
        let dir = t.path().join(format!("small{threads}"));
        let opts: Vec<ConvertOptions> = OUTPUTS
            .iter()
            .map(|(name, _, flags)| {
                let mut o = ConvertOptions::new(vec![input.clone()], dir.join(name));
                o.chunk = 640;
                o.workers = weightport_engine::Workers::new(Some(threads), None).unwrap();
                if flags[0] == "--shard-size" {
                    o.shard_size = Some(30_000);
                } else {
                    o.transform.dtype = DtypeChoice::To(weightport_core::DType::F16);
                    let q = flags[3];
                    o.transform.quant = Some(quant(q));
                }
                o
            })
            .collect();
        let outputs: Vec<_> = opts.iter().map(|o| route(o).unwrap()).collect();
        let input = open_inputs(&opts[1].inputs, &outputs[1].open).unwrap();
        let r = convert_many(&input, &outputs, &NoProgress).unwrap();
        for o in &r.outputs {
            assert!(o.is_ok(), "{o:?}");
        }
        assert_eq!(r.read_bytes, total, "each input byte once");
        for (name, _, _) in OUTPUTS {
            assert_eq!(digests(&dir.join(name)), digests(&sep.join(name)), "{name}");
        }
    }
}

fn quant(name: &str) -> weightport_engine::mix::QuantOptions {
    weightport_engine::mix::QuantOptions::new(weightport_engine::mix::Ftype::parse(name).unwrap())
}

/// One output refused when planned (requantizing a quantized GGUF), one output path that
/// exists: both failed and named, the others made as separate runs make them.
#[test]
fn refused_outputs_do_not_undo_the_others() {
    let t = tempfile::tempdir().unwrap();
    let gguf = fixtures().join("good/gguf/c_quant_q4_k_m.gguf");
    let d = |n: &str| t.path().join(n).display().to_string();
    std::fs::write(t.path().join("taken.safetensors"), b"not ours").unwrap();
    let o = wp(&[
        "--json",
        "convert",
        gguf.to_str().unwrap(),
        "-o",
        &d("a.safetensors"),
        "-o",
        &format!("{}:quant=Q8_0", d("b.gguf")),
        "-o",
        &d("taken.safetensors"),
        "-o",
        &d("c.gguf"),
    ]);
    let v = json_of(&o);
    assert_eq!(o.status.code(), Some(3), "the highest failure's code");
    let st: Vec<&str> = v["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["status"].as_str().unwrap())
        .collect();
    assert_eq!(st, ["made", "failed", "failed", "made"]);
    assert!(v["outputs"][1]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--allow-requantize"));
    assert_eq!(v["outputs"][2]["error"]["kind"], "usage");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("b.gguf") && stderr.contains("taken.safetensors"),
        "{stderr}"
    );
    assert!(stderr.contains("2 made, 0 skipped, 2 failed"), "{stderr}");
    assert!(!t.path().join("b.gguf").exists());
    assert_eq!(
        std::fs::read(t.path().join("taken.safetensors")).unwrap(),
        b"not ours"
    );
    assert_eq!(sha_file(&t.path().join("c.gguf")), sha_file(&gguf));
    let one = t.path().join("one.safetensors");
    let o = wp(&[
        "convert",
        gguf.to_str().unwrap(),
        "-o",
        one.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    assert_eq!(sha_file(&t.path().join("a.safetensors")), sha_file(&one));
}

/// An output failing while the shared read runs (F16 of NaN is refused, as llama-quantize
/// refuses it): the other outputs of the same read are made and equal separate runs.
#[test]
fn an_output_failing_during_the_shared_read_does_not_undo_the_others() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("llama_nan");
    std::fs::create_dir(&src).unwrap();
    for e in std::fs::read_dir(arch("llama")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, src.join(p.file_name().unwrap())).unwrap();
    }
    let nan = fixtures().join("good/nan/llama_nan");
    for f in [
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
    ] {
        std::fs::copy(nan.join(f), src.join(f)).unwrap();
    }
    let d = |n: &str| t.path().join(n).display().to_string();
    let o = wp(&[
        "--json",
        "convert",
        src.to_str().unwrap(),
        "-o",
        &format!("{}:outtype=f32", d("f32.gguf")),
        "-o",
        &format!("{}:outtype=f32,quant=F16", d("new/dirs/bad.gguf")),
        "-o",
        &d("repo"),
    ]);
    let v = json_of(&o);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = &v["outputs"];
    assert_eq!(out[1]["status"], "failed");
    let msg = out[1]["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("output.weight") && msg.contains("NaN or infinite"),
        "{msg}"
    );
    assert_eq!(
        (out[0]["status"].as_str(), out[2]["status"].as_str()),
        (Some("made"), Some("made"))
    );
    // The directories made for the failed output are removed with it.
    assert!(!t.path().join("new").exists());
    let leftovers: Vec<_> = std::fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "no temp files left: {leftovers:?}");
    for (name, flags) in [("f32.gguf", &["--outtype", "f32"][..]), ("repo", &[][..])] {
        let sep = t.path().join("sep").join(name);
        let mut a = vec![
            "convert",
            src.to_str().unwrap(),
            "-o",
            sep.to_str().unwrap(),
        ];
        a.extend(flags);
        assert!(wp(&a).status.success());
        assert_eq!(digests(&t.path().join(name)), digests(&sep), "{name}");
    }
}

/// A path with a colon is a path unless what follows the last colon are output options; a
/// trailing colon keeps one that looks like options; per-output and command-line options
/// both given are refused; `plan` takes one output.
#[test]
fn output_specs_are_parsed_strictly() {
    let t = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/hf_repo_single");
    let colon = t.path().join("a:b");
    let o = wp(&[
        "convert",
        src.to_str().unwrap(),
        "-o",
        colon.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(colon.join("model.safetensors").is_file());
    let odd = t.path().join("x:quant=Q8_0");
    let spec = format!("{}:", odd.display());
    let o = wp(&["convert", src.to_str().unwrap(), "-o", &spec]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(odd.join("model.safetensors").is_file());
    let q = format!("{}:quant=Q8_0", t.path().join("q.gguf").display());
    let o = wp(&[
        "convert",
        src.to_str().unwrap(),
        "--quant",
        "Q4_0",
        "-o",
        &q,
        "-o",
        "x",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--quant") && e.contains("q.gguf"), "{e}");
    let o = wp(&[
        "plan",
        src.to_str().unwrap(),
        "-o",
        "a",
        "-o",
        "b",
        "--units",
        "2",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

/// A few-MB F16 model (finite values only), written by weightport's safetensors writer.
fn big_input(dir: &Path) -> PathBuf {
    use weightport_core::{DType, TensorInfo};
    // Finite F16 halves: exponent bits kept below all-ones.
    let half = |x: u32| ((x.wrapping_mul(2654435761) >> 9) as u16 & 0xBBFF).to_le_bytes();
    let data: Vec<Vec<u8>> = (0..6u32)
        .map(|i| {
            (0..(1u32 << 19))
                .flat_map(|j| half(j ^ (i << 24)))
                .collect()
        })
        .collect();
    let tensors: Vec<(TensorInfo, &[u8])> = data
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let info = TensorInfo {
                name: format!("layer.{i}.weight"),
                dtype: DType::F16,
                shape: vec![512, 1024],
                byte_len: d.len() as u64,
            };
            (info, d.as_slice())
        })
        .collect();
    let p = dir.join("in.safetensors");
    weightport_safetensors::write_file(&p, &tensors, None).unwrap();
    p
}

/// Files of `dir` (recursively one level) whose names start with a dot: temp files.
fn temps(dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    for d in [dir.to_path_buf(), dir.join("repo")] {
        for e in std::fs::read_dir(&d).into_iter().flatten() {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            if n.starts_with('.') {
                v.push(n);
            }
        }
    }
    v
}

/// The outputs of the kill test: a sharded repo, an F32 safetensors file and a GGUF.
const KILLED: [&str; 3] = ["repo", "f32.safetensors", "m.gguf"];

/// Makes the kill test's outputs from `input` by separate runs, into `sep`.
fn separate_kill_outputs(input: &str, sep: &Path) {
    for (name, flags) in [
        ("repo", &["--shard-size", "2MB"][..]),
        ("f32.safetensors", &["--dtype", "f32"][..]),
        ("m.gguf", &[][..]),
    ] {
        let out = sep.join(name);
        let mut a = vec!["convert", input, "-o", out.to_str().unwrap()];
        a.extend(flags);
        assert!(wp(&a).status.success());
    }
}

/// The `-o` specs of the kill test's outputs in `d`, with `force` (`""` or `",force"`).
fn kill_specs(d: &Path, force: &str) -> [String; 3] {
    [
        format!("{}:shard_size=2MB{force}", d.join("repo").display()),
        format!("{}:dtype=f32{force}", d.join("f32.safetensors").display()),
        format!(
            "{}:{}",
            d.join("m.gguf").display(),
            force.trim_start_matches(',')
        ),
    ]
}

/// The next value of the xorshift64 sequence `seed`.
fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Starts the conversion from `input` into the kill test's outputs in `d`, sends it `sig`
/// after `micros` µs and waits for it.
fn convert_then_signal(input: &str, d: &Path, sig: i32, micros: u64) {
    use std::process::{Command, Stdio};
    let s = kill_specs(d, "");
    let args = ["convert", input, "-o", &s[0], "-o", &s[1], "-o", &s[2]];
    let mut child = Command::new(env!("CARGO_BIN_EXE_weightport"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_micros(micros));
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, sig) };
    child.wait().unwrap();
}

/// Every output in `d` whose (first) file is there verifies, unless a commit was left for the
/// next run to finish; `what` names the round in failures.
fn assert_present_outputs_verify(d: &Path, what: &str) {
    let commit_left = temps(d).iter().any(|n| n.starts_with(".weightport-commit"));
    for name in KILLED {
        let out = d.join(name);
        let whole = if name == "repo" {
            out.join("model-00001-of-00006.safetensors")
        } else {
            out.clone()
        };
        if whole.exists() && !commit_left {
            let v = wp(&["verify", out.to_str().unwrap()]);
            assert!(
                v.status.success(),
                "{what} {name}: {}",
                String::from_utf8_lossy(&v.stdout)
            );
        }
    }
}

/// The forced rerun into `d` succeeds, leaves no temp file and makes the files of the separate
/// runs in `sep`; `what` names the round in failures.
fn assert_rerun_equals_separate(input: &str, d: &Path, sep: &Path, what: &str) {
    let s = kill_specs(d, ",force");
    let o = wp(&["convert", input, "-o", &s[0], "-o", &s[1], "-o", &s[2]]);
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(temps(d).is_empty(), "{what}: {:?}", temps(d));
    for name in KILLED {
        assert_eq!(
            digests(&d.join(name)),
            digests(&sep.join(name)),
            "{what} {name}"
        );
    }
}

/// SIGKILL and SIGTERM at random points of a three-output conversion from one read, 3 times
/// each: every output there is complete (verifies), none is partial; a SIGTERM leaves no temp
/// file; the next run (forced) makes all three, equal to separate runs, and leaves nothing.
#[test]
fn kills_during_the_shared_read_never_leave_partial_outputs() {
    let t = tempfile::tempdir().unwrap();
    let input = big_input(t.path());
    let i = input.to_str().unwrap();
    let sep = t.path().join("sep");
    separate_kill_outputs(i, &sep);
    let mut seed = 0x9E3779B97F4A7C15u64;
    for (sig, signame) in [(libc::SIGKILL, "KILL"), (libc::SIGTERM, "TERM")] {
        for round in 0..3 {
            let what = format!("{signame} {round}");
            let d = t.path().join(format!("{signame}-{round}"));
            std::fs::create_dir(&d).unwrap();
            convert_then_signal(i, &d, sig, xorshift(&mut seed) % 800_000);
            assert_present_outputs_verify(&d, &what);
            if sig == libc::SIGTERM {
                assert!(temps(&d).is_empty(), "TERM {round}: {:?}", temps(&d));
                // The repo's directory, made by the run, is there only with the repo in it.
                let repo = d.join("repo");
                let shard = repo.join("model-00001-of-00006.safetensors");
                assert!(
                    !repo.exists() || shard.exists(),
                    "TERM {round}: an empty repo left"
                );
            }
            assert_rerun_equals_separate(i, &d, &sep, &what);
        }
    }
}

/// The memory budget holds for a shared read: one too small for a worker and the resident
/// windows is refused before anything is written; within one, what the executor holds is
/// reported and stays inside it.
#[test]
fn the_memory_budget_bounds_the_shared_read() {
    let t = tempfile::tempdir().unwrap();
    let input = arch("llama");
    let specs: Vec<String> = OUTPUTS
        .iter()
        .map(|(name, opts, _)| format!("{}:{opts}", t.path().join("new").join(name).display()))
        .collect();
    let run = |budget: &str| {
        let mut a = vec![
            "--json",
            "--threads",
            "2",
            "--max-memory",
            budget,
            "convert",
        ];
        a.push(input.to_str().unwrap());
        for s in &specs {
            a.extend(["-o", s.as_str()]);
        }
        wp(&a)
    };
    let o = run("20000");
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("--max-memory 20000"));
    assert!(
        std::fs::read_dir(t.path()).unwrap().next().is_none(),
        "nothing written, not even the outputs' directory"
    );
    let budget = 4u64 << 20;
    let o = run(&budget.to_string());
    let v = json_of(&o);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for out in v["outputs"].as_array().unwrap() {
        let m = out["result"]["memory_bytes"].as_u64().unwrap();
        assert!(m > 0 && m <= budget, "{m}");
    }
}
