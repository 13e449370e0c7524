//! The model-card heuristics against gguf-py's own: `card::components` for every id and
//! parameter count of fixtures/expected/arch/card_ids.json, which
//! fixtures/gen/gen_arch_card.py wrote by calling the pinned tree's
//! `Metadata.get_model_id_components`. (The whole-file comparison of releases with model cards is
//! tests/it/hf_gguf.rs's `model_cards_*`.)

use std::path::Path;

use serde_json::Value;
use weightport_arch::card::components;

#[test]
fn id_components_equal_gguf_py() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/expected/arch/card_ids.json");
    let cases: Vec<Value> = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert!(cases.len() >= 100, "{} cases", cases.len());
    check_ids(&cases);
}

/// Adapter names (issue 31): gguf-py counts an adapter's size as negative, which drops a
/// redundant `lora` part and keeps size parts an adapter is smaller than.
#[test]
fn adapter_id_components_equal_gguf_py() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/expected/lora/gguf.json");
    let v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let cases = v["card_ids"].as_array().unwrap();
    assert!(cases.len() >= 20, "{} cases", cases.len());
    assert!(cases.iter().all(|c| c[1].as_i64().unwrap() < 0));
    check_ids(cases);
}

/// Each `[id, total, components]` of `cases` against `components`.
fn check_ids(cases: &[Value]) {
    let mut wrong = Vec::new();
    for c in cases {
        let id = c[0].as_str().unwrap();
        let total = c[1].as_i64().unwrap();
        let p = components(id, total);
        let got = [
            p.full_name,
            p.org,
            p.basename,
            p.finetune,
            p.version,
            p.size_label,
        ];
        let want: Vec<Option<String>> = c[2]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().map(String::from))
            .collect();
        if got.as_slice() != want.as_slice() {
            wrong.push(format!("{id} ({total}): got {got:?}, gguf-py {want:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// What the reference crashes on (a number where a string goes, YAML that does not parse, a
/// list override that is not a list) is refused naming the file and the key; what it skips (a
/// falsy value) is skipped; a missing `--metadata` file is an error, not ignored.
#[test]
fn values_the_reference_cannot_write_are_refused_with_the_key() {
    use weightport_arch::card::{Authorship, CardOptions};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("Model-7B");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("config.json"), "{}").unwrap();
    let keys = |opts: &CardOptions| -> Result<Vec<String>, String> {
        let a = Authorship::load(&dir, opts, 1000, || "1.0K".into()).map_err(|e| e.to_string())?;
        let mut v = Vec::new();
        a.kvs(&mut |k, _| v.push(k)).map_err(|e| e.to_string())?;
        Ok(v)
    };
    let none = CardOptions::default();
    std::fs::write(dir.join("README.md"), "---\nversion: 2\n---\n").unwrap();
    let e = keys(&none).unwrap_err();
    assert!(
        e.contains("README.md") && e.contains("general.version"),
        "{e}"
    );
    std::fs::write(dir.join("README.md"), "---\nversion: 0\nauthor: no\n---\n").unwrap();
    let k = keys(&none).unwrap();
    assert!(
        !k.iter()
            .any(|k| k == "general.version" || k == "general.author"),
        "{k:?}"
    );
    std::fs::write(dir.join("README.md"), "---\nlicense: [a\n---\n").unwrap();
    let e = keys(&none).unwrap_err();
    assert!(e.contains("README.md") && e.contains("YAML"), "{e}");
    std::fs::write(dir.join("README.md"), "---\ntags: [1, x]\n---\n").unwrap();
    assert!(keys(&none).unwrap_err().contains("general.tags"));
    std::fs::remove_file(dir.join("README.md")).unwrap();
    let over = tmp.path().join("over.json");
    std::fs::write(&over, r#"{"general.tags": "x"}"#).unwrap();
    let mut with = CardOptions::default();
    with.overrides = Some(over.clone());
    assert!(keys(&with).unwrap_err().contains("general.tags"));
    std::fs::remove_file(&over).unwrap();
    assert!(keys(&with).unwrap_err().contains("over.json"));
    // Nothing but the directory: its name, parsed ("Model-7B": basename Model, size 7B is far
    // from 1000 parameters, so a context-length-like finetune "7b").
    let k = keys(&none).unwrap();
    assert_eq!(
        k,
        [
            "general.name",
            "general.finetune",
            "general.basename",
            "general.size_label"
        ]
    );
}
