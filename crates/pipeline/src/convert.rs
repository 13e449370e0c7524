//! A conversion job: plan → parallel execute → verify → commit → index and companion files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use weightport_core::hash::HASH_CHUNK;
use weightport_core::{
    Budget, Error, Format, Limits, Location, Metadata, Result, TensorInfo, TensorSink,
    TensorSource, WrittenFile,
};
use weightport_hf::{companion_files, index::render_index, shard};
use weightport_safetensors::writer::{layout, string_metadata};
use weightport_safetensors::SafetensorsSink;

use crate::exec::{run_chunks, Progress};
use crate::input::open_input;
use crate::multi::MultiSource;
use crate::verify::verify_staged;

/// huggingface_hub's default `max_shard_size`.
pub const DEFAULT_SHARD_SIZE: u64 = 5_000_000_000;

/// What to convert, and how.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// Input files or repo directories.
    pub inputs: Vec<PathBuf>,
    /// Output: `*.safetensors` for one file, otherwise a repo directory.
    pub output: PathBuf,
    /// Largest shard for repo output (default [`DEFAULT_SHARD_SIZE`]).
    pub shard_size: Option<u64>,
    /// Replace existing outputs.
    pub force: bool,
    /// Re-open and hash every emitted file before committing it (default on).
    pub verify: bool,
    /// Plan only: write nothing.
    pub dry_run: bool,
    /// Caps on sizes read from inputs.
    pub limits: Limits,
}

/// One file of the plan or of the result.
#[derive(Debug, Clone)]
pub struct FileReport {
    /// Final path.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Tensors it holds.
    pub tensors: usize,
}

/// What a conversion did (or, with `dry_run`, would do).
#[derive(Debug, Clone)]
pub struct ConvertReport {
    /// Input files actually read.
    pub inputs: Vec<PathBuf>,
    /// Input format.
    pub input_format: Format,
    /// Output weights files.
    pub files: Vec<FileReport>,
    /// The index written, if sharded.
    pub index: Option<PathBuf>,
    /// Companion files copied (config.json, tokenizer files, …).
    pub copied: Vec<PathBuf>,
    /// Stale shards removed from the output directory (with `force`).
    pub removed: Vec<PathBuf>,
    /// Number of tensors.
    pub tensors: usize,
    /// Tensor data bytes.
    pub data_bytes: u64,
    /// Bytes the output occupies (all weights files).
    pub total_bytes: u64,
    /// Free bytes where the output goes, when known.
    pub free_bytes: Option<u64>,
    /// Every file was re-validated and its hashes matched.
    pub verified: bool,
    /// Nothing was written.
    pub dry_run: bool,
    /// Buffer and mapped-page memory the executor holds at most (threads × chunk).
    pub memory_bytes: u64,
}

enum Target {
    File(PathBuf),
    Repo(PathBuf),
}

fn target_of(output: &Path) -> Result<Target> {
    let name = output.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.ends_with(".safetensors") {
        return Ok(Target::File(output.to_path_buf()));
    }
    if name.ends_with(".gguf") {
        return Err(Error::Unsupported {
            at: Location::file(output),
            format: Format::Gguf,
            what: "writing GGUF is not available yet; write safetensors (a .safetensors file or a repo directory)".into(),
        });
    }
    Ok(Target::Repo(output.to_path_buf()))
}

/// Free bytes on the filesystem holding `path` (or its nearest existing ancestor).
pub fn free_space(path: &Path) -> Option<u64> {
    let mut p = path;
    while !p.exists() {
        p = p.parent()?;
        if p.as_os_str().is_empty() {
            p = Path::new(".");
        }
    }
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    (rc == 0).then(|| s.f_bavail as u64 * s.f_frsize as u64)
}

fn is_stale_weights(name: &str) -> bool {
    let b = name.as_bytes();
    let shard = name.len() == "model-00001-of-00002.safetensors".len()
        && name.starts_with("model-")
        && name.ends_with(".safetensors")
        && b[6..11].iter().all(u8::is_ascii_digit)
        && &name[11..15] == "-of-"
        && b[15..20].iter().all(u8::is_ascii_digit);
    shard || name == shard::SINGLE || name == shard::INDEX
}

struct DirGuard {
    created: Option<PathBuf>,
}

impl Drop for DirGuard {
    fn drop(&mut self) {
        if let Some(d) = self.created.take() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// A temp file in `path`'s directory, to be renamed onto `path` once complete.
fn temp_beside(path: &Path) -> Result<tempfile::NamedTempFile> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    tempfile::Builder::new()
        .prefix(".wp-")
        .suffix(".wp-tmp")
        .tempfile_in(dir)
        .map_err(|e| Error::io(dir, "create temp file in", e))
}

fn persist(tmp: tempfile::NamedTempFile, path: &Path) -> Result<()> {
    tmp.as_file()
        .sync_all()
        .map_err(|e| Error::io(path, "fsync", e))?;
    tmp.persist(path)
        .map_err(|e| Error::io(path, "rename into place", e.error))?;
    Ok(())
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp = temp_beside(path)?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(|e| Error::io(path, "write", e))?;
    persist(tmp, path)
}

fn copy_atomic(from: &Path, to: &Path) -> Result<()> {
    let tmp = temp_beside(to)?;
    std::fs::copy(from, tmp.path()).map_err(|e| Error::io(from, "copy", e))?;
    persist(tmp, to)
}

/// Opens every input and joins them.
pub fn open_inputs(
    inputs: &[PathBuf],
    limits: &Limits,
) -> Result<(Box<dyn TensorSource>, Option<PathBuf>)> {
    if inputs.is_empty() {
        return Err(Error::Usage("no input given".into()));
    }
    let mut opened = Vec::new();
    for p in inputs {
        opened.push(open_input(p, limits)?);
    }
    if opened.len() == 1 {
        let i = opened.pop().expect("one input");
        return Ok((i.source, i.repo_dir));
    }
    let repo = opened.iter().find_map(|i| i.repo_dir.clone());
    Ok((
        Box::new(MultiSource::new(
            opened.into_iter().map(|i| i.source).collect(),
        )?),
        repo,
    ))
}

/// Runs a conversion of `opts.inputs`.
pub fn convert(opts: &ConvertOptions, progress: &dyn Progress) -> Result<ConvertReport> {
    let (source, repo_dir) = open_inputs(&opts.inputs, &opts.limits)?;
    convert_source(source.as_ref(), repo_dir.as_deref(), opts, progress)
}

/// Runs a conversion of an already opened source (`opts.inputs` is ignored). `repo_dir` is the
/// input repo whose companion files are copied into a repo output.
pub fn convert_source(
    source: &dyn TensorSource,
    repo_dir: Option<&Path>,
    opts: &ConvertOptions,
    progress: &dyn Progress,
) -> Result<ConvertReport> {
    let infos: Vec<TensorInfo> = source.tensors().to_vec();
    let target = target_of(&opts.output)?;
    let meta = string_metadata(source.metadata());
    let meta = (!meta.is_empty()).then_some(meta);

    // Plan: which file holds which tensors, and every file's exact size.
    let (dir, groups): (PathBuf, Vec<(PathBuf, Vec<usize>)>) = match &target {
        Target::File(p) => {
            let dir = p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
            (dir, vec![(p.clone(), (0..infos.len()).collect())])
        }
        Target::Repo(d) => {
            let max = opts.shard_size.unwrap_or(DEFAULT_SHARD_SIZE);
            let sizes: Vec<u64> = infos.iter().map(|t| t.byte_len).collect();
            let shards = shard::assign(&sizes, max);
            let n = shards.len();
            let groups = shards
                .into_iter()
                .enumerate()
                .map(|(i, idx)| {
                    let name = if n == 1 {
                        shard::SINGLE.to_string()
                    } else {
                        shard::shard_name(i + 1, n)
                    };
                    (d.join(name), idx)
                })
                .collect();
            (d.clone(), groups)
        }
    };
    let mut files = Vec::with_capacity(groups.len());
    for (path, idx) in &groups {
        let subset: Vec<TensorInfo> = idx.iter().map(|&i| infos[i].clone()).collect();
        let lay = layout(&subset, meta.as_ref())?;
        files.push(FileReport {
            path: path.clone(),
            size: lay.total_len,
            tensors: idx.len(),
        });
    }
    let total_bytes: u64 = files.iter().map(|f| f.size).sum();
    let data_bytes: u64 = infos.iter().map(|t| t.byte_len).sum();
    let free_bytes = free_space(&dir);
    let sharded = groups.len() > 1 && matches!(target, Target::Repo(_));
    let index_path = sharded.then(|| dir.join(shard::INDEX));
    let companions = match (&target, repo_dir) {
        (Target::Repo(out), Some(src)) if !same_dir(out, src) => companion_files(src)?,
        _ => Vec::new(),
    };
    let mut report = ConvertReport {
        inputs: source.files(),
        input_format: source.format(),
        files,
        index: index_path.clone(),
        copied: companions
            .iter()
            .map(|c| dir.join(c.file_name().expect("file name")))
            .collect(),
        removed: Vec::new(),
        tensors: infos.len(),
        data_bytes,
        total_bytes,
        free_bytes,
        verified: false,
        dry_run: opts.dry_run,
        memory_bytes: Budget {
            threads: rayon::current_num_threads(),
            chunk: HASH_CHUNK,
        }
        .peak_bytes(),
    };
    if opts.dry_run {
        return Ok(report);
    }
    if let Some(free) = free_bytes {
        if free < total_bytes {
            return Err(Error::io(
                &dir,
                "check free space in",
                std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    format!("the output needs {total_bytes} bytes, {free} are free"),
                ),
            ));
        }
    }
    check_overwrite(&target, &report, opts.force)?;
    let mut guard = DirGuard { created: None };
    if let Target::Repo(d) = &target {
        if !d.exists() {
            std::fs::create_dir_all(d).map_err(|e| Error::io(d, "create directory", e))?;
            guard.created = Some(d.clone());
        }
    }

    let mut sink: Box<dyn TensorSink> = Box::new(SafetensorsSink::new(
        Box::new(move |_: &[TensorInfo]| Ok(groups)),
        meta,
    ));
    let plan = sink.plan(&infos, &Metadata::new())?;
    let all: Vec<usize> = (0..infos.len()).collect();
    let refs: Vec<&TensorInfo> = infos.iter().collect();
    progress.start("write", data_bytes);
    let hashes = run_chunks(source, &all, &refs, progress, |k, off, bytes| {
        sink.write_at(k, off, bytes)
    })?;
    progress.finish();
    if opts.verify {
        progress.start("verify", data_bytes);
        for f in &plan.files {
            verify_staged(f, &infos, &hashes, &opts.limits, progress)?;
        }
        progress.finish();
        report.verified = true;
    }
    let written: Vec<WrittenFile> = sink.commit()?;
    guard.created = None;
    if let Some(ip) = &index_path {
        let mut weight_map = BTreeMap::new();
        for f in &plan.files {
            let base = f
                .path
                .file_name()
                .expect("file name")
                .to_string_lossy()
                .into_owned();
            for &i in &f.tensors {
                weight_map.insert(infos[i].name.clone(), base.clone());
            }
        }
        let params: u64 = infos.iter().map(TensorInfo::numel).sum();
        write_atomic(ip, render_index(params, data_bytes, &weight_map).as_bytes())?;
    }
    if let Target::Repo(d) = &target {
        if opts.force {
            report.removed = remove_stale(d, &written, index_path.as_deref())?;
        }
    }
    for c in &companions {
        copy_atomic(c, &dir.join(c.file_name().expect("file name")))?;
    }
    report.files = written
        .into_iter()
        .map(|w| FileReport {
            path: w.path,
            size: w.size,
            tensors: w.tensors,
        })
        .collect();
    Ok(report)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

fn check_overwrite(target: &Target, report: &ConvertReport, force: bool) -> Result<()> {
    if force {
        return Ok(());
    }
    let exists = |p: &Path| p.exists();
    match target {
        Target::File(p) if exists(p) => Err(Error::Usage(format!(
            "{}: already exists; pass --force to replace it",
            p.display()
        ))),
        Target::Repo(d) if d.exists() => {
            if !d.is_dir() {
                return Err(Error::Usage(format!(
                    "{}: exists and is not a directory",
                    d.display()
                )));
            }
            let clash = std::fs::read_dir(d)
                .map_err(|e| Error::io(d, "read directory", e))?
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|n| {
                    weightport_hf::repo::is_weights_file(n)
                        || report
                            .copied
                            .iter()
                            .any(|c| c.file_name().is_some_and(|f| f.to_string_lossy() == *n))
                });
            match clash {
                Some(n) => Err(Error::Usage(format!(
                    "{}: already holds `{n}`; pass --force to replace the repo's weights",
                    d.display()
                ))),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

fn remove_stale(dir: &Path, written: &[WrittenFile], index: Option<&Path>) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for e in std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, "read directory", e))?
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let p = e.path();
        let keep = written.iter().any(|w| w.path.file_name() == p.file_name())
            || index.is_some_and(|i| i.file_name() == p.file_name());
        if !keep && is_stale_weights(&name) {
            std::fs::remove_file(&p).map_err(|e| Error::io(&p, "remove stale shard", e))?;
            removed.push(p);
        }
    }
    removed.sort();
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_names() {
        assert!(is_stale_weights("model-00001-of-00004.safetensors"));
        assert!(is_stale_weights("model.safetensors.index.json"));
        assert!(!is_stale_weights("config.json"));
        assert!(!is_stale_weights("model-1-of-4.safetensors"));
    }
}
