//! Writing GGUF: the layout of llama.cpp's C writer, planned up front, data written in parallel.
//!
//! [`layout_with`] is pure: from the tensor specs and the key/values it computes the header
//! bytes (magic, version 3, counts, key/values in the given order, tensor infos, zero padding to
//! the alignment) and every tensor's absolute offset, with tensors back to back in the given
//! order, each padded to the alignment including the last (docs/specs/gguf.md §1.1; `gguf.cpp:1409-1422,
//! 1556-1561`). So the file size is a multiple of the alignment, and the same inputs always give
//! the same bytes.
//!
//! [`GgufSink`] stages the file (or the splits, see [`crate::split`]) as pre-sized temp files
//! beside the target, writes the headers at plan time, takes tensor bytes at their final
//! offsets from any thread, and hands the fsynced temp files over on
//! [`TensorSink::finish`]. Dropping it unfinished removes the temp files. Padding is never written: the
//! temp file is created by `set_len`, which reads back as zeros.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use weightport_core::staging::{sync_dir, TempFile};
use weightport_core::{
    sanitize, Error, FinishedFile, Format, Metadata, Plan, Result, StagedFile, TensorInfo,
    TensorSink,
};

use crate::layout::{layout_with, GgufTensorSpec, WriteOptions};
use crate::partition::{self as split, SplitOptions};

struct Staged {
    temp: TempFile,
    size: u64,
    tensors: Vec<usize>,
    /// Serializes writers of this file in user space: ext4 takes the inode lock for every
    /// buffered write, and threads spinning on it in the kernel burn the CPU the other
    /// workers (and the kernel's writeback) need.
    write_lock: std::sync::Mutex<()>,
}

/// A sink writing one GGUF file, or a gguf-split set (see [`GgufSink::split`]).
pub struct GgufSink {
    target: PathBuf,
    opts: WriteOptions,
    split: Option<SplitOptions>,
    specs: Option<Vec<GgufTensorSpec>>,
    files: Vec<Staged>,
    /// Per planned tensor: (file index, absolute offset, byte length).
    slots: Vec<(usize, u64, u64)>,
    planned: bool,
}

impl GgufSink {
    /// A sink writing `path` with default options (the C writer's layout, version 3).
    pub fn new(path: PathBuf) -> Self {
        GgufSink {
            target: path,
            opts: WriteOptions::default(),
            split: None,
            specs: None,
            files: Vec::new(),
            slots: Vec::new(),
            planned: false,
        }
    }

    /// Sets the write options.
    pub fn options(mut self, opts: WriteOptions) -> Self {
        self.opts = opts;
        self
    }

    /// Gives the exact GGUF dims of every tensor (same order as the tensors passed to `plan`),
    /// e.g. from [`crate::GgufFile::gguf_tensors`] for a lossless re-write. Without it, each
    /// tensor's `ne` is its shape reversed ([`GgufTensorSpec::from_info`]).
    pub fn specs(mut self, specs: Vec<GgufTensorSpec>) -> Self {
        self.specs = Some(specs);
        self
    }

    /// Writes a gguf-split set `<stem>-NNNNN-of-MMMMM.gguf` beside the target instead of one
    /// file, when the limits make more than one split.
    pub fn split(mut self, split: SplitOptions) -> Self {
        self.split = Some(split);
        self
    }

    fn specs_for(&self, tensors: &[TensorInfo]) -> Result<Vec<GgufTensorSpec>> {
        let Some(specs) = &self.specs else {
            return Ok(tensors.iter().map(GgufTensorSpec::from_info).collect());
        };
        if specs.len() != tensors.len() {
            return Err(Error::Usage(format!(
                "{} gguf tensor specs given for {} tensors",
                specs.len(),
                tensors.len()
            )));
        }
        for (s, t) in specs.iter().zip(tensors) {
            let (_, n) = s.check()?;
            if s.name != t.name || s.dtype != t.dtype || n != t.byte_len {
                return Err(Error::Usage(format!(
                    "gguf tensor spec `{}` ({} {:?}, {n} bytes) does not match tensor `{}` ({} {:?}, {} bytes)",
                    sanitize(&s.name),
                    s.dtype,
                    s.shape(),
                    sanitize(&t.name),
                    t.dtype,
                    t.shape,
                    t.byte_len
                )));
            }
        }
        Ok(specs.clone())
    }
}

impl TensorSink for GgufSink {
    fn plan(&mut self, tensors: &[TensorInfo], metadata: &Metadata) -> Result<Plan> {
        if self.planned {
            return Err(Error::Internal("plan called twice".into()));
        }
        self.planned = true;
        let specs = self.specs_for(tensors)?;
        let files = match &self.split {
            Some(s) => split::plan(&self.target, &specs, metadata, s, &self.opts)?,
            None => vec![split::PlannedFile {
                path: self.target.clone(),
                tensors: (0..specs.len()).collect(),
                layout: layout_with(&specs, metadata, &self.opts)?,
            }],
        };
        self.slots = vec![(usize::MAX, 0, 0); tensors.len()];
        for (fi, pf) in files.into_iter().enumerate() {
            let temp = TempFile::beside(&pf.path)?;
            let file = temp.open()?;
            file.set_len(pf.layout.total_len)
                .map_err(|e| Error::io(temp.path(), "resize", e))?;
            file.write_all_at(&pf.layout.header, 0)
                .map_err(|e| Error::io(temp.path(), "write", e))?;
            for (k, &i) in pf.tensors.iter().enumerate() {
                self.slots[i] = (fi, pf.layout.offsets[k], pf.layout.nbytes[k]);
            }
            self.files.push(Staged {
                temp,
                size: pf.layout.total_len,
                tensors: pf.tensors,
                write_lock: std::sync::Mutex::new(()),
            });
        }
        Ok(Plan {
            files: self.staged(),
        })
    }

    fn write_at(&self, tensor: usize, offset: u64, bytes: &[u8]) -> Result<()> {
        let &(fi, base, len) = self
            .slots
            .get(tensor)
            .filter(|s| s.0 != usize::MAX)
            .ok_or_else(|| Error::Internal(format!("write to unplanned tensor {tensor}")))?;
        if offset
            .checked_add(bytes.len() as u64)
            .is_none_or(|e| e > len)
        {
            return Err(Error::Internal(format!(
                "write of {} bytes at {offset} past the end of tensor {tensor} ({len} bytes)",
                bytes.len()
            )));
        }
        let f = &self.files[fi];
        let _one_writer = f.write_lock.lock().unwrap_or_else(|e| e.into_inner());
        f.temp.write_at(bytes, base + offset)
    }

    fn staged(&self) -> Vec<StagedFile> {
        self.files
            .iter()
            .map(|f| StagedFile {
                temp: f.temp.path().to_path_buf(),
                path: f.temp.target().to_path_buf(),
                format: Format::Gguf,
                size: f.size,
                tensors: f.tensors.clone(),
            })
            .collect()
    }

    fn finish(self: Box<Self>) -> Result<Vec<FinishedFile>> {
        for f in &self.files {
            f.temp.sync()?;
        }
        Ok(self
            .files
            .into_iter()
            .map(|f| FinishedFile {
                temp: f.temp,
                size: f.size,
                tensors: f.tensors.len(),
            })
            .collect())
    }
}

/// Writes `tensors` with their bytes into `path` (or its splits) at once, replacing existing
/// files; returns the paths written. For small files and tests.
pub fn write_file(
    path: &Path,
    tensors: &[(GgufTensorSpec, &[u8])],
    kv: &Metadata,
    opts: &WriteOptions,
) -> Result<Vec<PathBuf>> {
    let infos: Vec<TensorInfo> = tensors
        .iter()
        .map(|(s, b)| TensorInfo {
            name: s.name.clone(),
            dtype: s.dtype,
            shape: s.shape(),
            byte_len: b.len() as u64,
        })
        .collect();
    let specs = tensors.iter().map(|(s, _)| s.clone()).collect();
    let mut sink = GgufSink::new(path.to_path_buf())
        .options(opts.clone())
        .specs(specs);
    sink.plan(&infos, kv)?;
    for (i, (_, b)) in tensors.iter().enumerate() {
        sink.write_at(i, 0, b)?;
    }
    let mut out = Vec::new();
    for f in Box::new(sink).finish()? {
        out.push(f.temp.publish(true)?);
    }
    if let Some(d) = path.parent() {
        sync_dir(d)?;
    }
    Ok(out)
}
