//! The `--json` contract: every command's document, from real runs on fixtures (conversions to
//! a repo, a quantized GGUF and a checkpoint with dropped tensors; inspect; verify; scans of
//! safe and hostile trees; failures), validates against its schema in `docs/json/`, with
//! Python's `jsonschema` (CI's venv has it; elsewhere the test says it skipped).

use crate::common;

use std::path::Path;

use common::{fixtures, python_with_jsonschema, validate_json, wp};

fn validate(py: &str, schema: &str, doc: &[u8], what: &str) {
    let schema =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("docs/json/{schema}.schema.json"));
    validate_json(py, &schema, doc, what);
}

/// The runs, in order (a later one reads what an earlier one wrote): the schema of the document,
/// the arguments after `--json` and the command (none for "error"), what the run is. `F/` is
/// the fixtures directory, `T/` the test's temporary directory.
const RUNS: &[(&str, &[&str], &str)] = &[
    (
        "convert",
        &[
            "F/good/hf_repo_sharded",
            "-o",
            "T/repo",
            "--shard-size",
            "30KB",
        ],
        "convert a repo",
    ),
    (
        "convert",
        &["F/good/arch/llama", "-o", "T/l.gguf", "--quant", "Q4_K_M"],
        "HF → Q4_K_M",
    ),
    (
        "convert",
        &[
            "F/good/quality/model.safetensors",
            "-o",
            "T/att/q.safetensors",
            "--dtype",
            "f16",
            "--attest",
            "T/q.intoto.json",
            "--report",
            "T/q.html",
        ],
        "F32 → F16 with quality figures, --attest and --report",
    ),
    (
        "verify",
        &["--attestation", "T/q.intoto.json", "T/att"],
        "verify --attestation",
    ),
    (
        "convert",
        &["F/good/ckpt/train.pt", "-o", "T/c.safetensors"],
        "a training checkpoint",
    ),
    (
        "convert",
        &["F/good/hf_repo_sharded", "-o", "T/d", "--dry-run"],
        "dry run",
    ),
    ("inspect", &["F/good/hf_repo_sharded"], "inspect a repo"),
    (
        "inspect",
        &["F/good/gguf/c_quant_q4_k_m.gguf"],
        "inspect a GGUF",
    ),
    (
        "verify",
        &["F/good/hf_repo_sharded", "--against", "T/repo"],
        "verify --against",
    ),
    (
        "diff",
        &[
            "F/good/edit/base.safetensors",
            "F/expected/edit/set_cols_bf16.safetensors",
        ],
        "diff with infinities",
    ),
    (
        "diff",
        &[
            "F/good/edit/base.safetensors",
            "F/good/edit/add.npz",
            "--atol",
            "0.01",
        ],
        "diff across formats",
    ),
    (
        "edit",
        &[
            "F/good/edit/base.safetensors",
            "--set",
            "f16[1:3]=0",
            "--dry-run",
        ],
        "edit --dry-run",
    ),
    (
        "delta",
        &[
            "F/good/edit/finetune/old/model.safetensors",
            "F/good/edit/finetune/new/model.safetensors",
            "-o",
            "T/patch.safetensors",
        ],
        "delta of a fine-tune",
    ),
    (
        "slice",
        &["F/good/edit/base.safetensors", "f32[1:3]", "-o", "T/s.npy"],
        "slice",
    ),
    ("scan", &["F/good/scan"], "scan a safe tree"),
    ("scan", &["F/hostile/scan"], "scan a hostile tree"),
    (
        "error",
        &["convert", "/nonexistent", "-o", "T/x.safetensors"],
        "a failure",
    ),
    (
        "error",
        &[
            "convert",
            "T/repo",
            "-o",
            "T/z.safetensors",
            "--attest",
            "T/repo/config.json",
            "--force",
        ],
        "a side file refused (onto an input)",
    ),
    (
        "error",
        &[
            "convert",
            "T/repo",
            "-o",
            "T/k.gguf:quantt=Q8_0",
            "-o",
            "T/k2",
        ],
        "an -o key refused",
    ),
];

#[test]
fn every_json_document_matches_its_schema() {
    let Some(py) = python_with_jsonschema() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let f = fixtures();
    let path = |arg: &str| {
        let place = |root: &Path, rest: &str| root.join(rest).to_str().unwrap().to_string();
        match (arg.strip_prefix("F/"), arg.strip_prefix("T/")) {
            (Some(rest), _) => place(&f, rest),
            (_, Some(rest)) => place(t.path(), rest),
            _ => arg.to_string(),
        }
    };
    for (schema, args, what) in RUNS {
        let mut full = vec!["--json".to_string()];
        if *schema != "error" {
            full.push(schema.to_string());
        }
        full.extend(args.iter().map(|a| path(a)));
        let refs: Vec<&str> = full.iter().map(String::as_str).collect();
        let o = wp(&refs);
        validate(&py, schema, &o.stdout, what);
    }
    let statement = std::fs::read(t.path().join("q.intoto.json")).unwrap();
    validate(&py, "attestation", &statement, "the --attest statement");
    run_documents_match_their_schema(&py, t.path());
}

/// `run`: a dry run with a refusal, a run that makes two outputs and fails one, a rerun that
/// skips.
fn run_documents_match_their_schema(py: &str, dir: &Path) {
    let f = fixtures();
    let job = dir.join("job.toml");
    let text = format!(
        "[defaults]\nattest = true\n[[job]]\ninput = \"{}\"\n[[job.output]]\npath = \"j/q4.gguf\"\n\
         quant = \"Q4_K_M\"\n[[job.output]]\npath = \"j/repo\"\n[[job]]\ninput = \"{}\"\n\
         [[job.output]]\npath = \"j/c.gguf\"\nquant = \"Q8_0\"\n",
        f.join("good/arch/llama").display(),
        f.join("good/gguf/c_quant_q4_k_m.gguf").display()
    );
    std::fs::write(&job, text).unwrap();
    let j = job.to_str().unwrap();
    for (args, what) in [
        (vec!["--json", "run", j, "--dry-run"], "run --dry-run"),
        (vec!["--json", "run", j], "run, one output failing"),
        (vec!["--json", "run", j], "run again, skipping"),
    ] {
        let o = wp(&args);
        assert_eq!(o.status.code(), Some(3), "{what}");
        validate(py, "run", &o.stdout, what);
    }
    let statement = std::fs::read(dir.join("j/q4.gguf.intoto.json")).unwrap();
    validate(py, "attestation", &statement, "a statement made by run");
}
