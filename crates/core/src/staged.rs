//! The staged files of a sink: what the safetensors and GGUF sinks share between
//! [`TensorSink::plan`] and [`TensorSink::finish`] (temp files from [`crate::staging`], the
//! layout each format computes).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::Format;
use crate::io_counts::IoCounter;
use crate::source::{FinishedFile, StagedFile, TensorSink};
use crate::staging::{sync_dir, TempFile};
use crate::tensor::{Metadata, TensorInfo};

/// The files a [`TensorSink`] stages, shared by every sink: each a temp file beside its
/// target, sized and given its header when added (padding is never written: `set_len` reads
/// back as zeros), then written at each tensor's final offset from any thread, fsynced and
/// handed over on [`StagedFiles::finish`]. Dropping it unfinished removes the temp files.
#[derive(Debug)]
pub struct StagedFiles {
    format: Format,
    files: Vec<Staged>,
    /// Per planned tensor: (file index, absolute offset, byte length); `usize::MAX`: unplaced.
    slots: Vec<(usize, u64, u64)>,
    serialize_writes: bool,
    io: IoCounter,
}

#[derive(Debug)]
struct Staged {
    temp: TempFile,
    size: u64,
    tensors: Vec<usize>,
    /// See [`StagedFiles::serialize_writes`].
    write_lock: std::sync::Mutex<()>,
}

impl StagedFiles {
    /// No files yet, for `tensors` planned tensors of a `format` output; their I/O is counted
    /// in `io`.
    pub fn new(format: Format, tensors: usize, io: &IoCounter) -> Self {
        StagedFiles {
            format,
            files: Vec::new(),
            slots: vec![(usize::MAX, 0, 0); tensors],
            serialize_writes: false,
            io: io.clone(),
        }
    }

    /// Serializes the writers of each file in user space: ext4 takes the inode lock for every
    /// buffered write, and threads spinning on it in the kernel burn the CPU the other workers
    /// (and the kernel's writeback) need.
    pub fn serialize_writes(mut self) -> Self {
        self.serialize_writes = true;
        self
    }

    /// Stages the file `target` of `size` bytes starting with `header`, holding the planned
    /// tensors `tensors`, whose bytes go at the absolute `offsets` and are `lens` long (one
    /// each, in the order of `tensors`).
    pub fn add(
        &mut self,
        target: &Path,
        header: &[u8],
        size: u64,
        tensors: Vec<usize>,
        offsets: &[u64],
        lens: &[u64],
    ) -> Result<()> {
        let temp = TempFile::beside(target, &self.io)?;
        temp.set_len(size)?;
        temp.write_at(header, 0)?;
        let fi = self.files.len();
        for (k, &i) in tensors.iter().enumerate() {
            self.slots[i] = (fi, offsets[k], lens[k]);
        }
        self.files.push(Staged {
            temp,
            size,
            tensors,
            write_lock: std::sync::Mutex::new(()),
        });
        Ok(())
    }

    /// The first planned tensor no file holds.
    pub fn unplaced(&self) -> Option<usize> {
        self.slots.iter().position(|s| s.0 == usize::MAX)
    }

    /// Writes `bytes` at `offset` within tensor `tensor`'s data.
    pub fn write_at(&self, tensor: usize, offset: u64, bytes: &[u8]) -> Result<()> {
        let (f, at) = self.slot(tensor, offset, bytes.len() as u64)?;
        let _one_writer = self
            .serialize_writes
            .then(|| f.write_lock.lock().unwrap_or_else(|e| e.into_inner()));
        f.temp.write_at(bytes, at)
    }

    /// Copies `len` bytes of an input file to `offset` within tensor `tensor`'s data in the
    /// kernel; returns the bytes copied (see [`TensorSink::copy_from`]).
    pub fn copy_at(
        &self,
        tensor: usize,
        offset: u64,
        from: &crate::kernel_copy::Origin,
        len: u64,
    ) -> Result<u64> {
        let (f, at) = self.slot(tensor, offset, len)?;
        let _one_writer = self
            .serialize_writes
            .then(|| f.write_lock.lock().unwrap_or_else(|e| e.into_inner()));
        f.temp.copy_in(from, len, at)
    }

    /// The file and absolute offset of `n` bytes at `offset` of tensor `tensor`, checked to lie
    /// inside the tensor.
    fn slot(&self, tensor: usize, offset: u64, n: u64) -> Result<(&Staged, u64)> {
        let &(fi, base, len) = self
            .slots
            .get(tensor)
            .filter(|s| s.0 != usize::MAX)
            .ok_or_else(|| Error::Internal(format!("write to unplanned tensor {tensor}")))?;
        if offset.checked_add(n).is_none_or(|e| e > len) {
            return Err(Error::Internal(format!(
                "write of {n} bytes at {offset} past the end of tensor {tensor} ({len} bytes)"
            )));
        }
        Ok((&self.files[fi], base + offset))
    }

    /// The staged files, for the plan and for verification.
    pub fn staged(&self) -> Vec<StagedFile> {
        self.files
            .iter()
            .map(|f| StagedFile {
                temp: f.temp.path().to_path_buf(),
                path: f.temp.target().to_path_buf(),
                format: self.format,
                size: f.size,
                tensors: f.tensors.clone(),
            })
            .collect()
    }

    /// fsyncs every file and hands them over, in the order added.
    pub fn finish(self) -> Result<Vec<FinishedFile>> {
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

/// Plans `sink` for `tensors` and `metadata`, writes each tensor's bytes whole, finishes and
/// publishes every file (replacing existing ones), then fsyncs the target directory; returns
/// the paths written. For small files and tests.
pub fn write_now(
    mut sink: Box<dyn TensorSink>,
    tensors: &[TensorInfo],
    metadata: &Metadata,
    bytes: &[&[u8]],
) -> Result<Vec<PathBuf>> {
    sink.plan(tensors, metadata)?;
    for (i, b) in bytes.iter().enumerate() {
        sink.write_at(i, 0, b)?;
    }
    let mut out = Vec::new();
    let mut dirs = Vec::new();
    for f in sink.finish()? {
        let path = f.temp.publish(true)?;
        let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
        out.push(path);
    }
    for d in dirs {
        sync_dir(&d)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared sink files: sized, header written, writes land at each tensor's offset,
    /// out-of-range and unplanned writes are errors (not a panic or a wrapped offset).
    #[test]
    fn staged_files_place_check_and_hand_over_writes() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("out.bin");
        let io = IoCounter::new();
        let mut files = StagedFiles::new(Format::Safetensors, 3, &io).serialize_writes();
        files
            .add(&target, b"HDR", 10, vec![0, 2], &[3, 6], &[3, 4])
            .unwrap();
        assert_eq!(files.unplaced(), Some(1));
        files.write_at(0, 1, b"ab").unwrap();
        files.write_at(2, 0, b"wxyz").unwrap();
        assert!(files.write_at(2, 1, b"wxyz").is_err());
        assert!(files.write_at(2, u64::MAX, b"w").is_err());
        assert!(files.write_at(1, 0, b"w").is_err());
        assert!(files.write_at(9, 0, b"w").is_err());
        let staged = files.staged();
        assert_eq!((staged[0].size, &staged[0].tensors), (10, &vec![0, 2]));
        let done = files.finish().unwrap();
        assert_eq!(done[0].tensors, 2);
        let c = io.counts();
        assert_eq!((c.files, c.opens, c.writes, c.syncs), (1, 1, 3, 1));
        let path = done
            .into_iter()
            .next()
            .unwrap()
            .temp
            .publish(false)
            .unwrap();
        assert_eq!(std::fs::read(path).unwrap(), b"HDR\0abwxyz");
    }
}
