//! Executor invariants on real fixtures: the zero-copy, random-access and sequential paths
//! write exactly huggingface_hub's reshard of the fixture, at 1, 2 and 7 threads, with chunks
//! small enough that every tensor spans several; a failure part-way leaves no output and no
//! temp file behind.

use std::path::{Path, PathBuf};

use weightport_core::{
    Access, Error, Format, Location, Metadata, Result, TensorInfo, TensorSource,
};
use weightport_engine::{
    convert_source, open_input, route, ConvertOptions, NoProgress, OpenRequest,
};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(rel)
}

/// Wraps a source, hiding its zero-copy bytes (forcing `read_into`), optionally claiming to be
/// sequential-only (and then checking reads really come front to back) and optionally failing
/// on one tensor.
struct Streaming {
    inner: Box<dyn TensorSource>,
    fail_on: Option<usize>,
    sequential: bool,
    /// Per tensor: the next offset a sequential reader must ask for.
    next: Vec<std::sync::atomic::AtomicU64>,
}

fn streaming(inner: Box<dyn TensorSource>, fail_on: Option<usize>, sequential: bool) -> Streaming {
    let next = (0..inner.tensors().len())
        .map(|_| std::sync::atomic::AtomicU64::new(0))
        .collect();
    Streaming {
        inner,
        fail_on,
        sequential,
        next,
    }
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
    fn access(&self, _: usize) -> Access {
        if self.sequential {
            Access::Sequential
        } else {
            Access::Random
        }
    }
    fn read_into(&self, i: usize, off: u64, dst: &mut [u8]) -> Result<()> {
        if self.sequential {
            let want =
                self.next[i].swap(off + dst.len() as u64, std::sync::atomic::Ordering::SeqCst);
            assert_eq!(
                want, off,
                "a sequential tensor was read out of order (restart = quadratic)"
            );
        }
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
    let mut o = ConvertOptions::new(vec![], out.to_path_buf());
    o.shard_size = Some(10_000);
    o
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

fn req() -> OpenRequest {
    OpenRequest::default()
}

#[test]
fn every_read_path_and_thread_count_writes_the_reference_reshard() {
    // fixtures/expected/reshard/10000 is huggingface_hub's split + save_file of the fixture.
    let expected = read_dir_sorted(&fixture("expected/reshard/10000"));
    let repo = fixture("good/hf_repo_sharded");
    let biggest = open_input(&repo, &req())
        .unwrap()
        .source
        .tensors()
        .iter()
        .map(|t| t.byte_len)
        .max()
        .unwrap();
    // 1 KiB chunks: every tensor above 1 KiB is cut into several chunks, processed out of order.
    assert!(
        biggest > 4 * 1024,
        "the fixture must have multi-chunk tensors"
    );
    for threads in [1, 2, 7] {
        for mode in ["mapped", "random", "sequential"] {
            let tmp = tempfile::tempdir().unwrap();
            let out = tmp.path().join("out");
            let mut o = opts(&out);
            o.chunk = 1024;
            o.workers = weightport_engine::Workers::new(Some(threads), None).unwrap();
            let inner = open_input(&repo, &req()).unwrap().source;
            match mode {
                "mapped" => convert_source(inner.as_ref(), None, &route(&o).unwrap(), &NoProgress),
                m => convert_source(
                    &streaming(inner, None, m == "sequential"),
                    None,
                    &route(&o).unwrap(),
                    &NoProgress,
                ),
            }
            .unwrap();
            assert_eq!(
                read_dir_sorted(&out),
                expected,
                "{mode} at {threads} threads"
            );
        }
    }
}

#[test]
fn a_failure_part_way_leaves_no_output() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture("good/hf_repo_sharded");
    let inner = open_input(&repo, &req()).unwrap().source;
    let last = inner.tensors().len() - 1;
    let src = streaming(inner, Some(last), false);
    let out = tmp.path().join("out");
    let err = convert_source(&src, None, &route(&opts(&out)).unwrap(), &NoProgress).unwrap_err();
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
    convert_source(&src, None, &route(&opts(&out)).unwrap(), &NoProgress).unwrap_err();
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
    let single = tmp.path().join("one.safetensors");
    convert_source(&src, None, &route(&opts(&single)).unwrap(), &NoProgress).unwrap_err();
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
            assert!(open_input(&repo, &req()).is_err(), "{name} cut at {len}");
        }
        std::fs::write(repo.join(name), &full).unwrap();
    }
    assert!(open_input(&repo, &req()).is_ok());
}
