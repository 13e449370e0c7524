//! Conversions whose inputs are read through a storage that never maps (every byte by a checked
//! `pread`, as a remote object's bytes come by ranged requests) write the reference tools'
//! files: safetensors-py's merge and huggingface_hub's reshard of an HF repo, the files
//! `save_file` wrote, `llama-gguf-split`'s input from its parts, and the state dicts
//! `torch.load` returns from training checkpoints and legacy files. The storage records every
//! name it opens, so a reader that went around it (mapping a file itself) is caught.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use weightport_core::mapped::LocalFile;
use weightport_core::{ByteSource, Identity, Result, Storage, TensorSource};
use weightport_engine::{convert, ConvertOptions, NoProgress, OpenRequest};
use weightport_safetensors::SafetensorsFile;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(rel)
}

/// Local files read by `pread` only, counting what was opened and read.
#[derive(Debug, Default)]
struct Ranged {
    opened: Mutex<Vec<PathBuf>>,
    read: Arc<AtomicU64>,
}

struct RangedFile {
    inner: LocalFile,
    read: Arc<AtomicU64>,
}

impl ByteSource for RangedFile {
    fn name(&self) -> &Path {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn identity(&self) -> &Identity {
        self.inner.identity()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.read.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.inner.read_at(offset, buf)
    }
}

impl Storage for Ranged {
    fn open(&self, name: &Path, expected: &str) -> Result<Arc<dyn ByteSource>> {
        let inner = LocalFile::open_pread(name, expected)?;
        let canonical = name.canonicalize().unwrap_or_else(|_| name.to_path_buf());
        self.opened.lock().unwrap().push(canonical);
        Ok(Arc::new(RangedFile {
            inner,
            read: self.read.clone(),
        }))
    }
    fn exists(&self, name: &Path) -> bool {
        name.exists()
    }
}

/// Converts `inputs` to `out` reading through a fresh [`Ranged`] storage (`edit` sets the other
/// options), and checks that every file of `read` was opened through it and bytes were read.
fn convert_ranged(
    inputs: &[PathBuf],
    out: &Path,
    read: &[PathBuf],
    edit: impl FnOnce(&mut ConvertOptions),
) {
    let storage = Arc::new(Ranged::default());
    let mut o = ConvertOptions::new(inputs.to_vec(), out.to_path_buf());
    o.open = OpenRequest::default();
    o.open.read.storage = storage.clone();
    edit(&mut o);
    convert(&o, &NoProgress).unwrap_or_else(|e| panic!("{}: {e}", inputs[0].display()));
    let opened = storage.opened.lock().unwrap();
    for f in read {
        let f = f.canonicalize().unwrap();
        assert!(
            opened.contains(&f),
            "{} not opened through the storage",
            f.display()
        );
    }
    assert!(storage.read.load(Ordering::Relaxed) > 0);
}

fn weights_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".safetensors"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    v
}

fn shards(dir: &str, n: usize) -> Vec<PathBuf> {
    (1..=n)
        .map(|i| fixture(&format!("{dir}/model-{i:05}-of-{n:05}.safetensors")))
        .collect()
}

/// An HF repo's shards, merged and resharded: safetensors-py's and huggingface_hub's files.
#[test]
fn an_hf_repo_read_by_ranges_merges_and_reshards_as_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture("good/hf_repo_sharded");
    let parts = shards("good/hf_repo_sharded", 3);
    let merged = tmp.path().join("model.safetensors");
    convert_ranged(std::slice::from_ref(&repo), &merged, &parts, |_| {});
    assert!(
        std::fs::read(&merged).unwrap()
            == std::fs::read(fixture("expected/merged/model.safetensors")).unwrap(),
        "merged file differs from save_file's"
    );
    let resharded = tmp.path().join("resharded");
    convert_ranged(&[repo], &resharded, &parts, |o| o.shard_size = Some(10_000));
    assert_eq!(
        weights_of(&resharded),
        weights_of(&fixture("expected/reshard/10000"))
    );
}

/// Files `save_file` wrote are rewritten byte for byte.
#[test]
fn safetensors_files_read_by_ranges_are_rewritten_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let written_by_save_file = [
        "all_dtypes",
        "edge_cases",
        "no_metadata",
        "metadata_only",
        "empty",
        "llama_tiny",
    ];
    for name in written_by_save_file {
        let input = fixture(&format!("good/safetensors/{name}.safetensors"));
        let out = tmp.path().join(format!("{name}.safetensors"));
        convert_ranged(
            std::slice::from_ref(&input),
            &out,
            std::slice::from_ref(&input),
            |_| {},
        );
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(&input).unwrap(),
            "{name}"
        );
    }
}

/// The three parts llama-gguf-split wrote merge back into the file it was given.
#[test]
fn a_gguf_split_set_read_by_ranges_merges_into_its_original() {
    let tmp = tempfile::tempdir().unwrap();
    let parts: Vec<PathBuf> = (1..=3)
        .map(|i| fixture(&format!("good/gguf/c_split-{i:05}-of-00003.gguf")))
        .collect();
    let out = tmp.path().join("merged.gguf");
    convert_ranged(&parts[1..2], &out, &parts, |_| {});
    assert!(
        std::fs::read(&out).unwrap()
            == std::fs::read(fixture("good/gguf/c_quant_q4_k_m.gguf")).unwrap(),
        "differs from the file llama-gguf-split was given"
    );
}

fn sha(b: &[u8]) -> String {
    format!("{:x}", Sha256::digest(b))
}

/// Every tensor of `out` (a safetensors file): name, dtype, shape and bytes as in `want`.
fn same_tensors(out: &Path, want: &Path, case: &str) {
    let (got, want) = (
        SafetensorsFile::open(out).unwrap(),
        SafetensorsFile::open(want).unwrap(),
    );
    assert_eq!(
        got.tensors(),
        want.tensors(),
        "{case}: names, dtypes, shapes"
    );
    for i in 0..want.tensors().len() {
        assert_eq!(
            got.bytes(i),
            want.bytes(i),
            "{case}: {}",
            want.tensors()[i].name
        );
    }
}

/// Training checkpoints (torch ZIP and Lightning files, stored and deflated records) convert to
/// the state dicts torch.load returns (fixtures/expected/ckpt, `--key` as recorded there).
#[test]
fn torch_checkpoints_read_by_ranges_convert_to_the_reference_state_dicts() {
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    for e in std::fs::read_dir(fixture("expected/ckpt")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        let want: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        if want.get("refused").is_some() {
            continue;
        }
        let case = p.file_stem().unwrap().to_string_lossy().into_owned();
        let input = fixture(want["file"].as_str().unwrap());
        let args: Vec<&str> = want["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let key = match args.as_slice() {
            [] => None,
            ["--key", k] => Some(k.to_string()),
            other => panic!("{case}: arguments {other:?}"),
        };
        let out = tmp.path().join(format!("{case}.safetensors"));
        convert_ranged(
            std::slice::from_ref(&input),
            &out,
            std::slice::from_ref(&input),
            |o| {
                o.open.read.key = key;
            },
        );
        same_tensors(&out, &p.with_extension("safetensors"), &case);
        n += 1;
    }
    assert!(n >= 8, "{n}");
}

/// Legacy (pre-ZIP) checkpoints and npz archives (deflated members streamed through the
/// inflater by ranges), against torch's and numpy's sha256 of each tensor.
#[test]
fn legacy_pickles_and_npz_read_by_ranges_convert_to_the_reference_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        ("good/pickle/legacy.pt", "expected/pickle/legacy.json"),
        ("good/pickle/bigendian.pt", "expected/pickle/bigendian.json"),
        ("good/pickle/views.pt", "expected/pickle/views.json"),
        (
            "good/npz/dtypes_compressed.npz",
            "expected/npz/dtypes_compressed.npz.json",
        ),
        (
            "good/npz/fortran_compressed.npz",
            "expected/npz/fortran_compressed.npz.json",
        ),
        ("good/npz/bigendian.npz", "expected/npz/bigendian.npz.json"),
    ];
    for (input, expected) in cases {
        let input = fixture(input);
        let out = tmp.path().join("o.safetensors");
        let _ = std::fs::remove_file(&out);
        convert_ranged(
            std::slice::from_ref(&input),
            &out,
            std::slice::from_ref(&input),
            |o| {
                o.open.read.shared_copy = true;
            },
        );
        let want: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture(expected)).unwrap()).unwrap();
        let got = SafetensorsFile::open(&out).unwrap();
        let want = want["tensors"].as_array().unwrap();
        assert_eq!(got.tensors().len(), want.len(), "{}", input.display());
        for w in want {
            let name = w["name"].as_str().unwrap();
            let i = got.tensors().iter().position(|t| t.name == name).unwrap();
            assert_eq!(
                sha(got.bytes(i).unwrap()),
                w["sha256"].as_str().unwrap(),
                "{}: {name}",
                input.display()
            );
        }
    }
}
