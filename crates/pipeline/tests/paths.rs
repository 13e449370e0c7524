//! Executor invariants on real fixtures: the zero-copy and the streaming path give identical
//! files; a failure part-way leaves no output and no temp file behind.

use std::path::{Path, PathBuf};

use weightport_core::{
    Error, Format, Limits, Location, Metadata, Result, TensorInfo, TensorSource,
};
use weightport_pipeline::{convert_source, open_input, ConvertOptions, NoProgress};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(rel)
}

/// Wraps a source, hiding its zero-copy bytes (forcing `read_into`) and optionally failing on
/// one tensor.
struct Streaming {
    inner: Box<dyn TensorSource>,
    fail_on: Option<usize>,
}

impl TensorSource for Streaming {
    fn format(&self) -> Format {
        self.inner.format()
    }
    fn metadata(&self) -> &Metadata {
        self.inner.metadata()
    }
    fn tensors(&self) -> &[TensorInfo] {
        self.inner.tensors()
    }
    fn files(&self) -> Vec<PathBuf> {
        self.inner.files()
    }
    fn file_of(&self, i: usize) -> PathBuf {
        self.inner.file_of(i)
    }
    fn bytes(&self, _: usize) -> Option<&[u8]> {
        None
    }
    fn read_into(&self, i: usize, off: u64, dst: &mut [u8]) -> Result<()> {
        if self.fail_on == Some(i) {
            return Err(Error::malformed(
                Location::file(self.file_of(i)),
                Format::Safetensors,
                "injected failure",
            ));
        }
        self.inner.read_into(i, off, dst)
    }
}

fn opts(out: &Path) -> ConvertOptions {
    ConvertOptions {
        inputs: vec![],
        output: out.to_path_buf(),
        shard_size: Some(10_000),
        force: false,
        verify: true,
        dry_run: false,
        limits: Limits::default(),
    }
}

fn read_dir_sorted(d: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn streaming_and_zero_copy_paths_write_identical_repos() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture("good/hf_repo_sharded");
    let direct = open_input(&repo, &Limits::default()).unwrap();
    convert_source(
        direct.source.as_ref(),
        None,
        &opts(&tmp.path().join("a")),
        &NoProgress,
    )
    .unwrap();
    let streamed = Streaming {
        inner: open_input(&repo, &Limits::default()).unwrap().source,
        fail_on: None,
    };
    convert_source(&streamed, None, &opts(&tmp.path().join("b")), &NoProgress).unwrap();
    let a = read_dir_sorted(&tmp.path().join("a"));
    assert!(a.len() > 2, "expected several shards, got {}", a.len());
    assert_eq!(a, read_dir_sorted(&tmp.path().join("b")));
}

#[test]
fn a_failure_part_way_leaves_no_output() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture("good/hf_repo_sharded");
    let inner = open_input(&repo, &Limits::default()).unwrap().source;
    let last = inner.tensors().len() - 1;
    let src = Streaming {
        inner,
        fail_on: Some(last),
    };
    let out = tmp.path().join("out");
    let err = convert_source(&src, None, &opts(&out), &NoProgress).unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert!(
        !out.exists(),
        "the output directory must not be left behind"
    );
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "no temp files may remain"
    );

    // Into an existing directory: nothing may appear in it either.
    std::fs::create_dir(&out).unwrap();
    convert_source(&src, None, &opts(&out), &NoProgress).unwrap_err();
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
    let single = tmp.path().join("one.safetensors");
    convert_source(&src, None, &opts(&single), &NoProgress).unwrap_err();
    assert!(!single.exists());
}

#[test]
fn a_truncated_index_or_shard_is_an_error_never_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture("good/hf_repo_sharded");
    let repo = tmp.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, repo.join(p.file_name().unwrap())).unwrap();
    }
    for name in [
        "model.safetensors.index.json",
        "model-00002-of-00003.safetensors",
    ] {
        let full = std::fs::read(src.join(name)).unwrap();
        for len in (0..full.len()).step_by(37) {
            std::fs::write(repo.join(name), &full[..len]).unwrap();
            assert!(
                open_input(&repo, &Limits::default()).is_err(),
                "{name} cut at {len}"
            );
        }
        std::fs::write(repo.join(name), &full).unwrap();
    }
    assert!(open_input(&repo, &Limits::default()).is_ok());
}
