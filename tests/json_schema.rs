//! The `--json` contract: every command's document, from real runs on fixtures (conversions to
//! a repo, a quantized GGUF and a checkpoint with dropped tensors; inspect; verify; scans of
//! safe and hostile trees; failures), validates against its schema in `docs/json/`, with
//! Python's `jsonschema` (CI's venv has it; elsewhere the test says it skipped).

mod common;

use std::path::Path;

use common::{fixtures, python_with_jsonschema, validate_json, wp};

fn validate(py: &str, schema: &str, doc: &[u8], what: &str) {
    let schema =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("docs/json/{schema}.schema.json"));
    validate_json(py, &schema, doc, what);
}

#[test]
fn every_json_document_matches_its_schema() {
    let Some(py) = python_with_jsonschema() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let f = fixtures();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let repo = t.path().join("repo");
    let runs: Vec<(&str, Vec<String>, &str)> = vec![
        (
            "convert",
            vec![
                s(&f.join("good/hf_repo_sharded")),
                "-o".into(),
                s(&repo),
                "--shard-size".into(),
                "30KB".into(),
            ],
            "convert a repo",
        ),
        (
            "convert",
            vec![
                s(&f.join("good/arch/llama")),
                "-o".into(),
                s(&t.path().join("l.gguf")),
                "--quant".into(),
                "Q4_K_M".into(),
            ],
            "HF → Q4_K_M",
        ),
        (
            "convert",
            vec![
                s(&f.join("good/quality/model.safetensors")),
                "-o".into(),
                s(&t.path().join("att/q.safetensors")),
                "--dtype".into(),
                "f16".into(),
                "--attest".into(),
                s(&t.path().join("q.intoto.json")),
                "--report".into(),
                s(&t.path().join("q.html")),
            ],
            "F32 → F16 with quality figures, --attest and --report",
        ),
        (
            "verify",
            vec![
                "--attestation".into(),
                s(&t.path().join("q.intoto.json")),
                s(&t.path().join("att")),
            ],
            "verify --attestation",
        ),
        (
            "convert",
            vec![
                s(&f.join("good/ckpt/train.pt")),
                "-o".into(),
                s(&t.path().join("c.safetensors")),
            ],
            "a training checkpoint",
        ),
        (
            "convert",
            vec![
                s(&f.join("good/hf_repo_sharded")),
                "-o".into(),
                s(&t.path().join("d")),
                "--dry-run".into(),
            ],
            "dry run",
        ),
        (
            "inspect",
            vec![s(&f.join("good/hf_repo_sharded"))],
            "inspect a repo",
        ),
        (
            "inspect",
            vec![s(&f.join("good/gguf/c_quant_q4_k_m.gguf"))],
            "inspect a GGUF",
        ),
        (
            "verify",
            vec![
                s(&f.join("good/hf_repo_sharded")),
                "--against".into(),
                s(&repo),
            ],
            "verify --against",
        ),
        ("scan", vec![s(&f.join("good/scan"))], "scan a safe tree"),
        (
            "scan",
            vec![s(&f.join("hostile/scan"))],
            "scan a hostile tree",
        ),
        (
            "error",
            vec![
                "convert".into(),
                "/nonexistent".into(),
                "-o".into(),
                s(&t.path().join("x.safetensors")),
            ],
            "a failure",
        ),
    ];
    for (schema, args, what) in runs {
        let mut full = vec!["--json".to_string()];
        if schema != "error" {
            full.push(schema.to_string());
        }
        full.extend(args);
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
