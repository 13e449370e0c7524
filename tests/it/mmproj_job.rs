//! A vision-language release's text model and its projector from one read (issue 31 item 3):
//! a job file (`mmproj = true` on an output) or `convert RELEASE -o text.gguf -o mm.gguf:mmproj`
//! makes both, each byte-identical to the reference's file (convert_hf_to_gguf.py's text model
//! and `--mmproj` projector, llama-quantize of its f16 file: the sha256 recorded in
//! fixtures/expected/arch and fixtures/expected/mmproj), from one read of the release: one
//! entry in `reads`, every tensor byte of the release taken once (the text route and the
//! projector route read disjoint tensors of the same files; the quantized and repo outputs
//! read them again in separate runs). A projector asked of a release without a vision tower is
//! refused as `convert --mmproj` refuses it, and nothing of it is written.

use crate::common;
use common::arch::{self, copy_release, sha_file};
use common::{fixtures, wp};

use std::path::Path;
use std::process::Output;

use serde_json::Value;
use weightport_core::DType;
use weightport_engine::{
    convert_many, open_inputs, route, ConvertOptions, DtypeChoice, NoProgress, Workers,
};

/// The reference's sha256 of `name`'s projector at `--outtype t`.
fn projector(name: &str, t: &str) -> String {
    let p = fixtures().join("expected/mmproj/files.json");
    let v: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    v[name]["outtypes"][t]["sha256"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The reference's sha256 of `name`'s text model at f16: recorded by the text generators, or
/// by gen_mmproj.py for the releases only it made.
fn text_f16(name: &str) -> String {
    let want = match name {
        "gemma3_mm" => arch::expected("dense.json")[name]["outtypes"]["f16"].clone(),
        "qwen3vl" => arch::expected("archs4.json")[name]["outtypes"]["f16"].clone(),
        _ => {
            let p = fixtures().join("expected/mmproj/files.json");
            let v: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
            v[name]["text"]["f16"].clone()
        }
    };
    want["sha256"].as_str().unwrap().to_owned()
}

/// The releases with a recorded text model and projector, and the pre-tokenizer name the
/// generators gave the reference; Gemma 3 last (its job has more outputs).
const BOTH: [(&str, Option<&str>); 4] = [
    ("qwen3vl", Some("qwen2")),
    ("qwen25vl_mm", Some("qwen2")),
    ("mistral3_mm", Some("tekken")),
    ("gemma3_mm", None),
];

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn run_json(job: &Path, extra: &[&str]) -> (Output, Value) {
    let mut args = vec!["--json", "run", job.to_str().unwrap()];
    args.extend(extra);
    let o = wp(&args);
    let v = json_of(&o);
    (o, v)
}

fn statuses(v: &Value) -> Vec<&str> {
    let outputs = v["outputs"].as_array().unwrap();
    outputs
        .iter()
        .map(|o| o["status"].as_str().unwrap())
        .collect()
}

/// Input tensor data bytes of `input`, from `inspect`.
fn data_bytes(input: &Path) -> u64 {
    json_of(&wp(&["--json", "inspect", input.to_str().unwrap()]))["data_bytes"]
        .as_u64()
        .unwrap()
}

/// The bytes a separate `convert` of `input` with `flags` reads.
fn separate_read(input: &Path, out: &Path, flags: &[&str]) -> u64 {
    let mut a = vec![
        "--json",
        "convert",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    a.extend(flags);
    let o = wp(&a);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    json_of(&o)["read_bytes"].as_u64().unwrap()
}

/// One `[[job]]` per release of [`BOTH`] (copied into `dir`): its text model and its projector
/// at f16; Gemma 3 also a Q4_K_M and a q8_0 text model, a q8_0 projector and a safetensors
/// repo.
fn both_job(dir: &Path) -> String {
    let mut text = String::from("[defaults]\nthreads = 2\n");
    for (name, pre) in BOTH {
        copy_release(name, dir, name);
        let pre = pre.map(|p| format!("pre_tokenizer = \"{p}\"\n"));
        text += &format!(
            "\n[[job]]\ninput = \"{name}\"\n\
             [[job.output]]\npath = \"out/{name}.gguf\"\ndtype = \"f16\"\n{}\
             [[job.output]]\npath = \"out/{name}-mmproj.gguf\"\ndtype = \"f16\"\nmmproj = true\n",
            pre.unwrap_or_default()
        );
    }
    text + "[[job.output]]\npath = \"out/gemma3_mm-Q4_K_M.gguf\"\ndtype = \"f16\"\n\
            quant = \"Q4_K_M\"\n\
            [[job.output]]\npath = \"out/gemma3_mm-q8_0.gguf\"\ndtype = \"q8_0\"\n\
            [[job.output]]\npath = \"out/gemma3_mm-mmproj-q8_0.gguf\"\nmmproj = true\n\
            dtype = \"q8_0\"\n\
            [[job.output]]\npath = \"out/repo\"\nshard_size = \"100KB\"\n"
}

#[test]
fn one_job_makes_the_text_model_and_the_projector_from_one_read() {
    let t = tempfile::tempdir().unwrap();
    let job = t.path().join("job.toml");
    std::fs::write(&job, both_job(t.path())).unwrap();
    // The dry run plans all of it and writes nothing.
    let (o, v) = run_json(&job, &["--dry-run"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(statuses(&v), ["planned"; 12]);
    assert!(!t.path().join("out").exists(), "a dry run writes nothing");
    let mm = &v["outputs"][7]["result"];
    assert_eq!(
        v["outputs"][7]["path"],
        json_path(t.path(), "gemma3_mm-mmproj.gguf")
    );
    assert!(mm["types"]["F16"].as_u64().unwrap() > 0, "{mm}");
    let (o, v) = run_json(&job, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(statuses(&v), ["made"; 12]);
    schema_checks(&v);
    let out = t.path().join("out");
    let sha = |f: &str| sha_file(&out.join(f));
    let dense = arch::expected("dense.json");
    let gemma = &dense["gemma3_mm"];
    for (name, _) in BOTH {
        assert_eq!(sha(&format!("{name}.gguf")), text_f16(name), "{name} text");
        let m = format!("{name}-mmproj.gguf");
        assert_eq!(sha(&m), projector(name, "f16"), "{name} projector");
    }
    let q4 = gemma["quantized"]["Q4_K_M"]["sha256"].as_str().unwrap();
    assert_eq!(sha("gemma3_mm-Q4_K_M.gguf"), q4, "vs llama-quantize");
    let q8 = gemma["outtypes"]["q8_0"]["sha256"].as_str().unwrap();
    assert_eq!(sha("gemma3_mm-q8_0.gguf"), q8, "vs --outtype q8_0");
    let mq8 = projector("gemma3_mm", "q8_0");
    assert_eq!(sha("gemma3_mm-mmproj-q8_0.gguf"), mq8, "projector q8_0");
    let o = wp(&[
        "verify",
        out.join("repo").to_str().unwrap(),
        "--against",
        t.path().join("gemma3_mm").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    one_read_per_release(t.path(), &v);
    // A rerun skips every output: the records hold, the projectors' included.
    let (o, v) = run_json(&job, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(statuses(&v), ["skipped"; 12]);
}

fn json_path(dir: &Path, file: &str) -> String {
    dir.join("out").join(file).display().to_string()
}

/// Each `[[job]]` was one read that took every tensor byte of its release once, where the
/// separate runs of its text model and its projector each take only their own tensors (and
/// separate runs of Gemma 3's six outputs take 3.86 times its tensor bytes).
fn one_read_per_release(dir: &Path, v: &Value) {
    let reads = v["reads"].as_array().unwrap();
    assert_eq!(reads.len(), 4, "one read per release: {reads:?}");
    let sep = dir.join("sep");
    for (k, (name, pre)) in BOTH.iter().enumerate() {
        // Two outputs per job; the last (Gemma 3) six.
        let r = &reads[k];
        let n = if k == 3 { 6 } else { 2 };
        let outputs: Vec<u64> = (2 * k as u64..).take(n).collect();
        assert_eq!(r["outputs"], serde_json::json!(outputs), "{name}");
        let input = dir.join(name);
        let total = data_bytes(&input);
        assert_eq!(r["read_bytes"].as_u64(), Some(total), "{name}: {r}");
        let files = r["files"].as_array().unwrap();
        let per_file: u64 = files.iter().map(|f| f["bytes"].as_u64().unwrap()).sum();
        assert_eq!(per_file, total, "{name}");
        let mut flags = vec!["--dtype", "f16"];
        flags.extend(pre.iter().flat_map(|p| ["--pre-tokenizer", *p]));
        let text = separate_read(&input, &sep.join(format!("{name}.gguf")), &flags);
        let mm = separate_read(
            &input,
            &sep.join(format!("{name}-mm.gguf")),
            &["--dtype", "f16", "--mmproj"],
        );
        assert!(
            text < total && mm < total,
            "{name}: {text} + {mm} of {total}"
        );
        assert_eq!(
            text + mm,
            total,
            "{name}: the two routes' tensors are disjoint"
        );
    }
}

fn schema_checks(v: &Value) {
    if let Some(py) = common::python_with_jsonschema() {
        let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/json/run.schema.json");
        common::validate_json(&py, &schema, v.to_string().as_bytes(), "run text + mmproj");
    }
}

/// `convert RELEASE -o text.gguf -o mm.gguf:mmproj`: the same two files, one read.
#[test]
fn convert_with_a_projector_output_is_one_read_of_both() {
    let t = tempfile::tempdir().unwrap();
    let input = copy_release("qwen3vl", t.path(), "qwen3vl");
    let (text, mm) = (t.path().join("t.gguf"), t.path().join("m.gguf"));
    let mm_spec = format!("{}:mmproj", mm.display());
    let o = wp(&[
        "--json",
        "convert",
        input.to_str().unwrap(),
        "--dtype",
        "f16",
        "-o",
        text.to_str().unwrap(),
        "-o",
        &mm_spec,
        "--pre-tokenizer",
        "qwen2",
    ]);
    // The pre-tokenizer name applies to both outputs: the projector has no tokenizer keys, so
    // it is the same file.
    let v = json_of(&o);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(sha_file(&text), text_f16("qwen3vl"));
    assert_eq!(sha_file(&mm), projector("qwen3vl", "f16"));
    let reads = v["reads"].as_array().unwrap();
    assert_eq!(reads.len(), 1, "{reads:?}");
    assert_eq!(reads[0]["read_bytes"].as_u64(), Some(data_bytes(&input)));
}

/// The library's fan-out in chunks of a few hundred bytes (many windows per tensor, workers
/// waiting for windows to be released) over the text route and the projector route of one
/// opened release: the reference's two files, every tensor byte taken once.
#[test]
fn small_chunks_of_the_text_and_projector_routes_read_once() {
    let t = tempfile::tempdir().unwrap();
    let input = copy_release("gemma3_mm", t.path(), "gemma3_mm");
    let total = data_bytes(&input);
    for threads in [1, 2] {
        let opts: Vec<ConvertOptions> = [false, true]
            .into_iter()
            .map(|mmproj| {
                let out = t.path().join(format!("{threads}-{mmproj}.gguf"));
                let mut o = ConvertOptions::new(vec![input.clone()], out);
                o.chunk = 640;
                o.workers = Workers::new(Some(threads), None).unwrap();
                o.transform.dtype = DtypeChoice::To(DType::F16);
                o.mmproj = mmproj;
                o
            })
            .collect();
        let routes: Vec<_> = opts.iter().map(|o| route(o).unwrap()).collect();
        let req = |i: usize| format!("{:?}", routes[i].open);
        assert_eq!(req(0), req(1), "one open request");
        let opened = open_inputs(&opts[0].inputs, &routes[0].open).unwrap();
        let r = convert_many(&opened, &routes, &NoProgress).unwrap();
        assert!(r.outputs.iter().all(|o| o.is_ok()), "{:?}", r.outputs);
        assert_eq!(r.read_bytes, total, "each tensor byte once");
        assert_eq!(sha_file(&opts[0].output), text_f16("gemma3_mm"));
        assert_eq!(sha_file(&opts[1].output), projector("gemma3_mm", "f16"));
    }
}

/// Every file under `dir` (one level), sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// What `convert RELEASE -o OUT --mmproj` says of `release` on stderr, and its exit code.
fn convert_refusal(release: &Path, out: &Path) -> (Option<i32>, String) {
    let o = wp(&[
        "convert",
        release.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--mmproj",
    ]);
    assert!(!out.exists());
    let err = String::from_utf8_lossy(&o.stderr);
    let msg = err.trim().trim_start_matches("weightport: ").to_owned();
    (o.status.code(), msg)
}

/// A projector of a release without a vision tower (a Llama): the refusal `convert --mmproj`
/// gives, on every projector output of the job (dry run or not), nothing of them written and
/// nothing recorded; the release is not touched.
#[test]
fn a_projector_of_a_release_without_a_vision_tower_is_refused_as_convert_refuses_it() {
    let t = tempfile::tempdir().unwrap();
    let release = copy_release("llama", t.path(), "llama");
    let before: Vec<String> = names(&release)
        .iter()
        .map(|f| sha_file(&release.join(f)))
        .collect();
    let (code, msg) = convert_refusal(&release, &t.path().join("c.gguf"));
    assert!(msg.contains("no multimodal projector"), "{msg}");
    let job = t.path().join("job.toml");
    std::fs::write(
        &job,
        "[[job]]\ninput = \"llama\"\nmmproj = true\n[[job.output]]\npath = \"out/mm.gguf\"\n\
         [[job.output]]\npath = \"out/mm-q8_0.gguf\"\ndtype = \"q8_0\"\n",
    )
    .unwrap();
    for extra in [&["--dry-run"][..], &[]] {
        let (o, v) = run_json(&job, extra);
        assert_eq!(o.status.code(), code, "{extra:?}");
        assert_eq!(statuses(&v), ["failed", "failed"]);
        for out in v["outputs"].as_array().unwrap() {
            assert_eq!(out["error"]["message"].as_str(), Some(msg.as_str()));
        }
        assert!(!t.path().join("out").exists(), "nothing written");
    }
    assert_eq!(
        names(t.path()),
        ["job.toml", "llama"],
        "no state, no temp file"
    );
    // With a text output beside it, the text model is made (a failed output does not undo the
    // others of a job) and is the reference's; the projector is refused alike.
    std::fs::write(
        &job,
        "[[job]]\ninput = \"llama\"\ndtype = \"f16\"\n[[job.output]]\npath = \"out/mm.gguf\"\n\
         mmproj = true\n[[job.output]]\npath = \"out/text.gguf\"\n",
    )
    .unwrap();
    let (o, v) = run_json(&job, &[]);
    assert_eq!(o.status.code(), code);
    assert_eq!(statuses(&v), ["failed", "made"]);
    assert_eq!(v["outputs"][0]["error"]["message"].as_str(), Some(&*msg));
    assert_eq!(names(&t.path().join("out")), ["text.gguf"]);
    let want = arch::expected("files.json")["llama"]["outtypes"]["f16"]["sha256"].clone();
    assert_eq!(
        sha_file(&t.path().join("out/text.gguf")),
        want.as_str().unwrap()
    );
    let state = std::fs::read_to_string(t.path().join(".job.toml.state.json")).unwrap();
    assert!(
        !state.contains("mm.gguf"),
        "the refused output has no record"
    );
    let after: Vec<String> = names(&release)
        .iter()
        .map(|f| sha_file(&release.join(f)))
        .collect();
    assert_eq!(before, after, "the release is not modified");
}
