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

use std::path::{Path, PathBuf};

use weightport_core::staged::{write_now, StagedFiles};
use weightport_core::{
    sanitize, Error, FinishedFile, Format, IoCounter, Metadata, Plan, Result, StagedFile,
    TensorInfo, TensorSink,
};

use crate::layout::{layout_with, GgufTensorSpec, WriteOptions};
use crate::partition::{self as split, SplitOptions};

/// A sink writing one GGUF file, or a gguf-split set (see [`GgufSink::split`]).
pub struct GgufSink {
    target: PathBuf,
    opts: WriteOptions,
    split: Option<SplitOptions>,
    specs: Option<Vec<GgufTensorSpec>>,
    files: StagedFiles,
    planned: bool,
    io: IoCounter,
}

impl GgufSink {
    /// A sink writing `path` with default options (the C writer's layout, version 3).
    pub fn new(path: PathBuf) -> Self {
        GgufSink {
            target: path,
            opts: WriteOptions::default(),
            split: None,
            specs: None,
            files: StagedFiles::new(Format::Gguf, 0, &IoCounter::new()),
            planned: false,
            io: IoCounter::new(),
        }
    }

    /// Counts the writes, opens and syncs of its files in `io`.
    pub fn counting(mut self, io: &IoCounter) -> Self {
        self.io = io.clone();
        self
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
        self.files = StagedFiles::new(Format::Gguf, tensors.len(), &self.io).serialize_writes();
        for pf in files {
            let lay = &pf.layout;
            self.files.add(
                &pf.path,
                &lay.header,
                lay.total_len,
                pf.tensors,
                &lay.offsets,
                &lay.nbytes,
            )?;
        }
        Ok(Plan {
            files: self.staged(),
        })
    }

    fn write_at(&self, tensor: usize, offset: u64, bytes: &[u8]) -> Result<()> {
        self.files.write_at(tensor, offset, bytes)
    }

    fn copy_from(
        &self,
        tensor: usize,
        offset: u64,
        from: &weightport_core::kernel_copy::Origin,
        len: u64,
    ) -> Result<u64> {
        self.files.copy_at(tensor, offset, from, len)
    }

    fn staged(&self) -> Vec<StagedFile> {
        self.files.staged()
    }

    fn finish(self: Box<Self>) -> Result<Vec<FinishedFile>> {
        self.files.finish()
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
    let bytes: Vec<&[u8]> = tensors.iter().map(|(_, b)| *b).collect();
    let sink = GgufSink::new(path.to_path_buf())
        .options(opts.clone())
        .specs(specs);
    write_now(Box::new(sink), &infos, kv, &bytes)
}
