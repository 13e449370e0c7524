//! HF release → GGUF tests (tests/hf_gguf*.rs): the tiny releases of fixtures/good/arch, the
//! reference's recorded sha256s in fixtures/expected/arch, and the whole-file comparison.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::{fixtures, wp};

/// fixtures/expected/arch/`file`: what a generator recorded from the reference.
pub(crate) fn expected(file: &str) -> Value {
    serde_json::from_slice(&std::fs::read(fixtures().join("expected/arch").join(file)).unwrap())
        .unwrap()
}

/// The sha256 the reference recorded for the tiny Llama release quantized to `quant`.
pub(crate) fn reference(quant: &str) -> String {
    expected("files.json")["llama"]["quantized"][quant]["sha256"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A tiny release of fixtures/good/arch.
pub(crate) fn release(name: &str) -> PathBuf {
    fixtures().join("good/arch").join(name)
}

/// Copies directory `from` to `to`, subdirectories (sentence-transformers modules) included.
pub(crate) fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dst = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_tree(&p, &dst);
        } else {
            std::fs::copy(&p, &dst).unwrap();
        }
    }
}

/// A writable copy of release `name` in `tmp/dir_name` (the directory name becomes
/// `general.name`).
pub(crate) fn copy_release(name: &str, tmp: &Path, dir_name: &str) -> PathBuf {
    let dir = tmp.join(dir_name);
    copy_tree(&release(name), &dir);
    dir
}

/// Rewrites the JSON object in `path` with `edit` applied (pretty-printed).
pub(crate) fn edit_json(path: &Path, edit: impl FnOnce(&mut Map<String, Value>)) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    edit(v.as_object_mut().unwrap());
    std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// Rewrites `dir`/config.json with `edit` applied.
pub(crate) fn edit_config(dir: &Path, edit: impl FnOnce(&mut Map<String, Value>)) {
    edit_json(&dir.join("config.json"), edit);
}

pub(crate) fn sha_file(p: &Path) -> String {
    format!("{:x}", Sha256::digest(std::fs::read(p).unwrap()))
}

/// `weightport convert SRC -o OUT [--pre-tokenizer PRE] EXTRA…`, whatever its outcome.
pub(crate) fn convert_output(src: &Path, out: &Path, pre: Option<&str>, extra: &[&str]) -> Output {
    let mut args = vec![
        "convert",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    if let Some(p) = pre {
        args.extend(["--pre-tokenizer", p]);
    }
    args.extend(extra);
    wp(&args)
}

/// [`convert_output`], which must succeed.
pub(crate) fn convert(src: &Path, out: &Path, pre: Option<&str>, extra: &[&str]) {
    let o = convert_output(src, out, pre, extra);
    assert!(
        o.status.success(),
        "{} {extra:?}: {}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// One release to compare: its directory, its name in the expected file, the pre-tokenizer name
/// the generator gave the reference, and its entry of the expected file.
pub(crate) struct Case {
    pub dir: PathBuf,
    pub name: String,
    pub pre: Option<String>,
    pub entry: Value,
}

/// The committed releases of `expected`, each with the pre-tokenizer `pre` names for it.
pub(crate) fn cases(expected: &Value, pre: impl Fn(&str, &Value) -> Option<String>) -> Vec<Case> {
    let releases = expected.as_object().unwrap();
    releases
        .iter()
        .map(|(name, entry)| Case {
            dir: release(name),
            name: name.clone(),
            pre: pre(name, entry),
            entry: entry.clone(),
        })
        .collect()
}

/// Converts each case once per entry of its `section` (the entry's key becomes the flags `args`
/// gives; a case without the section is skipped) and compares the whole file with the
/// reference's sha256; returns `"name key"` for each file compared.
pub(crate) fn against(
    cases: &[Case],
    section: &str,
    args: fn(&str) -> Vec<&str>,
    reference: &str,
) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    let mut done = Vec::new();
    for c in cases {
        for (key, want) in c.entry[section].as_object().into_iter().flatten() {
            let out = tmp.path().join(format!("{}-{key}.gguf", c.name));
            convert(&c.dir, &out, c.pre.as_deref(), &args(key));
            assert_eq!(
                sha_file(&out),
                want["sha256"].as_str().unwrap(),
                "{} {key}: differs from {reference}",
                c.name
            );
            done.push(format!("{} {key}", c.name));
        }
    }
    done
}

/// llama-simple's greedy continuation (`-n 8`, the generators' prompt) of our file of each case,
/// against the one recorded for the reference's file on the outtype the entry names (f16 by
/// default); cases without a recorded continuation are skipped, and where llama-simple failed on
/// the reference's file (`<llama-simple exit N>`) it must fail on ours. The tools' directory is
/// `WEIGHTPORT_LLAMA_BIN` (the callers are `#[ignore]`d: CI builds no llama.cpp). Returns the
/// names run.
pub(crate) fn continuations(cases: &[Case]) -> Vec<String> {
    let bin = std::env::var_os("WEIGHTPORT_LLAMA_BIN")
        .map(PathBuf::from)
        .expect(
            "WEIGHTPORT_LLAMA_BIN is not set: the directory of the pinned llama.cpp build's tools",
        );
    let tmp = tempfile::tempdir().unwrap();
    let mut done = Vec::new();
    for c in cases {
        let Some(want) = c.entry["continuation"].as_str() else {
            continue;
        };
        let on = c.entry["continuation_outtype"].as_str().unwrap_or("f16");
        let out = tmp.path().join(format!("{}-{on}.gguf", c.name));
        convert(&c.dir, &out, c.pre.as_deref(), &["--dtype", on]);
        let o = std::process::Command::new(bin.join("llama-simple"))
            .args([
                "-m",
                out.to_str().unwrap(),
                "-n",
                "8",
                "The quick brown fox",
            ])
            .env("LD_LIBRARY_PATH", &bin)
            .output()
            .unwrap();
        if want.starts_with("<llama-simple exit") {
            assert!(
                !o.status.success(),
                "{}: llama-simple ran ours, not the reference's",
                c.name
            );
            done.push(c.name.clone());
            continue;
        }
        assert!(o.status.success(), "{}: llama-simple failed", c.name);
        let got = format!("{:x}", Sha256::digest(&o.stdout));
        assert_eq!(
            want.split(' ').next().unwrap(),
            got,
            "{}: continuation",
            c.name
        );
        done.push(c.name.clone());
    }
    done
}

/// A table of releases the generator recorded in one expected file (`file` under
/// fixtures/expected/arch), in its order, each converted with the pre-tokenizer name `pre`
/// gives it: the three comparisons every table gets.
pub(crate) struct Table {
    pub file: &'static str,
    pub releases: &'static [&'static str],
    pub pre: fn(&str) -> Option<&'static str>,
}

impl Table {
    fn cases(&self) -> Vec<Case> {
        let exp = expected(self.file);
        let names: Vec<&str> = exp
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(names, self.releases, "{}", self.file);
        cases(&exp, |name, _| (self.pre)(name).map(str::to_owned))
    }

    /// f32, f16, bf16 and q8_0 of every release, whole files against `convert_hf_to_gguf.py`.
    pub(crate) fn outtypes_match_the_reference(&self) {
        let done = against(
            &self.cases(),
            "outtypes",
            |t| vec!["--dtype", t],
            "convert_hf_to_gguf.py --outtype",
        );
        assert_eq!(done.len(), self.releases.len() * 4, "{done:?}");
    }

    /// One-pass `--quant` of every release against the reference's f16 file run through the
    /// pinned `llama-quantize` (recorded by the generator; no llama.cpp needed here).
    pub(crate) fn one_pass_quant_matches_llama_quantize(&self) {
        let done = against(
            &self.cases(),
            "quantized",
            |q| vec!["--outtype", "f16", "--quant", q],
            "convert_hf_to_gguf.py --outtype f16 + llama-quantize",
        );
        assert_eq!(done.len(), self.releases.len(), "{done:?}");
    }

    /// llama-simple continues our f16 file of every release as it continues the reference's.
    pub(crate) fn llama_simple_continues_like_the_reference(&self) {
        assert_eq!(continuations(&self.cases()).len(), self.releases.len());
    }
}

/// Rewrites tensor `name` of release `dir` (found through the index): `Some((dtype, shape,
/// bytes))` replaces its entry and data, `None` drops it (from the shard and the index).
pub(crate) fn edit_tensor(dir: &Path, name: &str, new: Option<(&str, &[u64], &[u8])>) {
    let index = dir.join("model.safetensors.index.json");
    let mut shard = String::new();
    edit_json(&index, |m| {
        let map = m["weight_map"].as_object_mut().unwrap();
        shard = map[name].as_str().unwrap().to_owned();
        if new.is_none() {
            map.remove(name);
        }
    });
    let path = dir.join(&shard);
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Map<String, Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let mut entries: Vec<(String, Value)> = header.into_iter().collect();
    entries.sort_by_key(|(_, v)| v.get("data_offsets").map(|o| o[0].as_u64().unwrap()));
    let (mut out_header, mut out_data) = (Map::new(), Vec::new());
    for (k, mut v) in entries {
        let Some(o) = v.get("data_offsets").cloned() else {
            out_header.insert(k, v);
            continue;
        };
        let (a, b) = (
            o[0].as_u64().unwrap() as usize,
            o[1].as_u64().unwrap() as usize,
        );
        let start = out_data.len();
        if k == name {
            let Some((dtype, shape, payload)) = new else {
                continue;
            };
            v["dtype"] = dtype.into();
            v["shape"] = serde_json::json!(shape);
            out_data.extend_from_slice(payload);
        } else {
            out_data.extend_from_slice(&data[a..b]);
        }
        v["data_offsets"] = serde_json::json!([start, out_data.len()]);
        out_header.insert(k, v);
    }
    let mut h = serde_json::to_vec(&out_header).unwrap();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut file = (h.len() as u64).to_le_bytes().to_vec();
    file.extend(h);
    file.extend(out_data);
    std::fs::write(&path, file).unwrap();
    fix_total_size(dir);
}

/// Sets the index's `metadata.total_size` to the data bytes its shards hold.
pub(crate) fn fix_total_size(dir: &Path) {
    let index = dir.join("model.safetensors.index.json");
    let mut total = 0u64;
    edit_json(&index, |m| {
        let shards: std::collections::BTreeSet<String> = m["weight_map"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        for s in shards {
            let bytes = std::fs::read(dir.join(s)).unwrap();
            let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
            total += bytes.len() as u64 - 8 - n;
        }
        m["metadata"]["total_size"] = total.into();
    });
}

/// Converts `dir` to f16 (pre-tokenizer `pre`), which must fail naming each of `words` with no
/// panic and nothing at `out`; returns the message.
pub(crate) fn refused(dir: &Path, out: &Path, pre: Option<&str>, words: &[&str]) -> String {
    let o = convert_output(dir, out, pre, &["--dtype", "f16"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{words:?}: {err}");
    for w in words {
        assert!(err.contains(w), "`{w}` not in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists());
    err.into_owned()
}
