//! The two traits every format plugs into.
//!
//! # Call protocol
//!
//! A reader's constructor parses and validates headers only; after that, [`TensorSource`]
//! describes every tensor (name, dtype, shape, byte length) without touching data. Data comes
//! out in one of two ways, chosen per tensor by the executor:
//!
//! * [`TensorSource::bytes`]: the stored bytes, zero-copy, when they lie contiguous and
//!   little-endian in a mapped file. After consuming a range, the executor calls
//!   [`TensorSource::release`] so resident memory stays bounded by the chunk size, not the file.
//! * [`TensorSource::read_into`]: the logical bytes from `offset` on, written into a buffer the
//!   caller owns (deflated ZIP members, strided or big-endian storages, dequantization). Any
//!   offset/length aligned to [`crate::DType::granule`] must be accepted, so the executor can
//!   split a tensor into chunks and fill them in parallel.
//!
//! A [`TensorSink`] is told the complete list of output tensors once ([`TensorSink::plan`]) and
//! fixes every file, header and offset before any data byte is written. Data then arrives through
//! [`TensorSink::write_at`] in any order and from many threads at once (ranges never overlap).
//! [`TensorSink::staged`] exposes the temp files so they can be verified, and
//! [`TensorSink::finish`] makes them durable and hands them to the pipeline, which publishes
//! every file of the job (weights, index, companions) in one ordered commit. Dropping a sink,
//! or the files it handed over, without publishing removes every temp file.

use std::path::PathBuf;

use crate::error::Result;
use crate::format::Format;
use crate::tensor::{Metadata, TensorInfo};

/// How a tensor's bytes can be read (see [`TensorSource::access`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Contiguous in a mapped file: [`TensorSource::bytes`] returns them.
    Mapped,
    /// [`TensorSource::read_into`] accepts any granule-aligned range, from any thread.
    Random,
    /// Only readable front to back (a deflated ZIP member): the executor reads the tensor once,
    /// in order, from one worker, with consecutive `read_into` calls starting at offset 0.
    Sequential,
}

/// A parsed, validated input.
pub trait TensorSource: Send + Sync {
    /// The container format.
    fn format(&self) -> Format;
    /// Non-tensor metadata.
    fn metadata(&self) -> &Metadata;
    /// Every tensor, in file order.
    fn tensors(&self) -> &[TensorInfo];
    /// The files this source reads (for messages and reports).
    fn files(&self) -> Vec<PathBuf>;
    /// The file holding tensor `index` (for error messages).
    fn file_of(&self, index: usize) -> PathBuf;
    /// Zero-copy access to tensor `index`'s logical bytes, if they are stored as-is.
    fn bytes(&self, index: usize) -> Option<&[u8]>;
    /// Fills `dst` with tensor `index`'s logical bytes from `offset` on.
    fn read_into(&self, index: usize, offset: u64, dst: &mut [u8]) -> Result<()>;
    /// How tensor `index` is best read. The default: mapped when [`TensorSource::bytes`]
    /// answers, otherwise randomly readable. Wrappers must forward it.
    fn access(&self, index: usize) -> Access {
        if self.bytes(index).is_some() {
            Access::Mapped
        } else {
            Access::Random
        }
    }
    /// Tensors (or arrays) the input holds that this source does not offer, as `(path, what
    /// and why)`: a checkpoint's optimizer state, stray tensors beside the converted state
    /// dict. Conversions report them, so part of an input is never dropped silently. Wrappers
    /// must forward it.
    fn unconverted(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// Hints that `[offset, offset+len)` of tensor `index` will not be read again soon, so mapped
    /// pages may be dropped from resident memory. Never changes what later reads return.
    fn release(&self, _index: usize, _offset: u64, _len: u64) {}
    /// Hints that `[offset, offset+len)` of tensor `index` is about to be read through
    /// [`TensorSource::bytes`], so a mapped source can populate its page tables in one call
    /// instead of one fault per page. Never changes what reads return.
    fn will_need(&self, _index: usize, _offset: u64, _len: u64) {}
}

pub use crate::bytes::check_read;

/// One output file a sink stages.
#[derive(Debug, Clone)]
pub struct StagedFile {
    /// The temp file, complete once all writes are done.
    pub temp: PathBuf,
    /// Where it goes on commit.
    pub path: PathBuf,
    /// Its format (for re-validation).
    pub format: Format,
    /// Its total size in bytes.
    pub size: u64,
    /// Indices (into the planned tensor list) of the tensors it holds.
    pub tensors: Vec<usize>,
}

/// What a sink decided in [`TensorSink::plan`].
#[derive(Debug, Clone)]
pub struct Plan {
    /// The files that will be written.
    pub files: Vec<StagedFile>,
}

impl Plan {
    /// Bytes the plan will put on disk.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// A finished (complete, fsynced) but unpublished output file.
#[derive(Debug)]
pub struct FinishedFile {
    /// The temp file; [`crate::staging::TempFile::publish`] renames it onto its target.
    pub temp: crate::staging::TempFile,
    /// Size in bytes.
    pub size: u64,
    /// Number of tensors.
    pub tensors: usize,
}

/// A committed output file.
#[derive(Debug, Clone)]
pub struct WrittenFile {
    /// Final path.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Number of tensors.
    pub tensors: usize,
}

/// The output side of a conversion.
pub trait TensorSink: Send + Sync {
    /// Fixes files, headers and every tensor's offset. Called once, before any write.
    fn plan(&mut self, tensors: &[TensorInfo], metadata: &Metadata) -> Result<Plan>;
    /// Writes `bytes` at `offset` within tensor `tensor`'s data. Disjoint ranges may be
    /// written concurrently.
    fn write_at(&self, tensor: usize, offset: u64, bytes: &[u8]) -> Result<()>;
    /// Copies `len` bytes of an input file ([`crate::kernel_copy::Origin`]) to `offset` within
    /// tensor `tensor`'s data in the kernel, as [`TensorSink::write_at`] would write them;
    /// returns the bytes copied. Fewer than `len` (the default: none) means the rest is the
    /// caller's to write. Wrappers must forward it.
    fn copy_from(
        &self,
        _tensor: usize,
        _offset: u64,
        _from: &crate::kernel_copy::Origin,
        _len: u64,
    ) -> Result<u64> {
        Ok(0)
    }
    /// The staged (not yet committed) files, for verification.
    fn staged(&self) -> Vec<StagedFile>;
    /// fsyncs every temp file and hands them over, in plan order, for publishing.
    fn finish(self: Box<Self>) -> Result<Vec<FinishedFile>>;
}
