//! `.npy` files: one array per file, or a directory of them read as one source.
//!
//! ```text
//! [\x93NUMPY│major│minor│HLEN│header text][data: exactly shape × itemsize bytes, then EOF]
//! ```
//!
//! See: <https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html>. numpy ignores
//! bytes after the data; this reader rejects them (no writer produces them, and a file that is
//! longer than its header says is not the file its header describes).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use weightport_core::bytes::InMemory;
use weightport_core::mapped::LocalFile;
use weightport_core::{
    Access, ByteSource, Error, Format, Location, Metadata, ReadOptions, Result, TensorInfo,
    TensorSource,
};

use crate::array::{header_error, read_header, Array, Body, Origin};
use crate::header;

/// One `.npy` file, or a directory of them, as a source.
pub struct NpySource {
    files: Vec<PathBuf>,
    sources: Vec<Arc<dyn ByteSource>>,
    arrays: Vec<Array>,
    infos: Vec<TensorInfo>,
    metadata: Metadata,
}

impl std::fmt::Debug for NpySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NpySource")
            .field("files", &self.files.len())
            .field("tensors", &self.infos.len())
            .finish()
    }
}

/// True when `head` starts with the npy magic `\x93NUMPY`.
pub fn probe_npy(head: &[u8]) -> bool {
    head.starts_with(header::MAGIC)
}

/// The tensor name of an `.npy` file: its file name without the `.npy` suffix.
fn tensor_name(path: &Path) -> Result<String> {
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        Error::Usage(format!(
            "{}: the file name is not UTF-8, so it cannot name a tensor",
            path.display()
        ))
    })?;
    Ok(name.strip_suffix(".npy").unwrap_or(name).to_string())
}

fn open_file(path: &Path, opts: &ReadOptions) -> Result<Arc<dyn ByteSource>> {
    opts.storage.open(path, "; open it with open_npy_dir")
}

/// Opens and validates one `.npy` file (header only; no data is read). The tensor is named
/// after the file, without `.npy`.
pub fn open_npy(path: &Path, opts: &ReadOptions) -> Result<NpySource> {
    let name = tensor_name(path)?;
    NpySource::build(vec![(name, open_file(path, opts)?)], opts)
}

/// Opens every `*.npy` file directly inside `dir` as one source. Tensors are named after the
/// files (without `.npy`) and sorted by name; other files are ignored. Each file is opened
/// separately, through [`ReadOptions::storage`].
pub fn open_npy_dir(dir: &Path, opts: &ReadOptions) -> Result<NpySource> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, "read directory", e))?;
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| Error::io(dir, "read directory", e))?;
        let path = entry.path();
        let Some(n) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !n.ends_with(".npy") {
            continue;
        }
        let meta = std::fs::metadata(&path).map_err(|e| Error::io(&path, "stat", e))?;
        if !meta.is_file() {
            continue;
        }
        found.push((tensor_name(&path)?, path));
        if found.len() as u64 > opts.limits.max_tensors {
            return Err(Error::Limit {
                at: Location::file(dir),
                what: "number of .npy files",
                needed: found.len() as u64,
                limit: opts.limits.max_tensors,
            });
        }
    }
    if found.is_empty() {
        return Err(Error::Usage(format!(
            "{}: the directory holds no .npy files",
            dir.display()
        )));
    }
    found.sort();
    let mut parts = Vec::with_capacity(found.len());
    for (name, path) in found {
        parts.push((name, open_file(&path, opts)?));
    }
    NpySource::build(parts, opts)
}

impl NpySource {
    /// Validates one `.npy` held in memory; `label` names it in messages and gives the tensor
    /// name (its file name without `.npy`).
    pub fn from_bytes(label: &Path, bytes: Vec<u8>, opts: &ReadOptions) -> Result<NpySource> {
        NpySource::from_source(Arc::new(InMemory::new(label, bytes)), opts)
    }

    /// Validates one `.npy` already mapped (a member `scan` unpacked); `label` names it as in
    /// [`NpySource::from_bytes`].
    pub fn from_map(
        label: &Path,
        map: std::sync::Arc<memmap2::Mmap>,
        opts: &ReadOptions,
    ) -> Result<NpySource> {
        NpySource::from_source(Arc::new(LocalFile::from_map(label, map)), opts)
    }

    /// Validates the `.npy` file `src` (its header, read by ranges), named as in
    /// [`NpySource::from_bytes`] by `src`'s name.
    pub fn from_source(src: Arc<dyn ByteSource>, opts: &ReadOptions) -> Result<NpySource> {
        let name = tensor_name(src.name())?;
        NpySource::build(vec![(name, src)], opts)
    }

    fn build(parts: Vec<(String, Arc<dyn ByteSource>)>, opts: &ReadOptions) -> Result<NpySource> {
        let mut files = Vec::with_capacity(parts.len());
        let mut sources = Vec::with_capacity(parts.len());
        let mut arrays = Vec::with_capacity(parts.len());
        for (i, (name, src)) in parts.into_iter().enumerate() {
            let path = src.name().to_path_buf();
            let len = src.len();
            let header = read_header(&*src, 0, len, opts)?.map_err(|e| {
                header_error(e, &path, Some(&name), Format::Npy, Origin::File(0), len)
            })?;
            let at = Location::file(&path).tensor(name.clone());
            let expected = header.data_offset.checked_add(header.byte_len);
            match expected {
                Some(e) if e == len => {}
                Some(e) if e < len => {
                    return Err(Error::malformed(
                        at.at(e),
                        Format::Npy,
                        format!(
                            "{} bytes after the array data (shape {:?} of '{}' ends at byte {e})",
                            len - e,
                            header.shape,
                            header.descr
                        ),
                    ))
                }
                _ => {
                    return Err(Error::malformed(
                        at.at(len),
                        Format::Npy,
                        format!(
                            "truncated: the header says shape {:?} of '{}' ({} data bytes) but \
                             the file has {} bytes after the {}-byte header",
                            header.shape,
                            header.descr,
                            header.byte_len,
                            len - header.data_offset,
                            header.data_offset
                        ),
                    ))
                }
            }
            arrays.push(Array {
                info: TensorInfo {
                    name,
                    dtype: header.dtype,
                    shape: header.shape.clone(),
                    byte_len: header.byte_len,
                },
                body: Body::Stored {
                    data: header.data_offset,
                },
                header,
                file: i,
            });
            files.push(path);
            sources.push(src);
        }
        let infos = arrays.iter().map(|a| a.info.clone()).collect();
        Ok(NpySource {
            files,
            sources,
            arrays,
            infos,
            metadata: Metadata::new(),
        })
    }
}

impl TensorSource for NpySource {
    fn format(&self) -> Format {
        Format::Npy
    }

    fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn tensors(&self) -> &[TensorInfo] {
        &self.infos
    }

    fn files(&self) -> Vec<PathBuf> {
        self.files.clone()
    }

    fn file_of(&self, index: usize) -> PathBuf {
        self.files[self.arrays[index].file].clone()
    }

    fn bytes(&self, index: usize) -> Option<&[u8]> {
        let a = &self.arrays[index];
        a.bytes(&*self.sources[a.file])
    }

    fn read_into(&self, index: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        let a = &self.arrays[index];
        a.read_into(
            &*self.sources[a.file],
            &self.files[a.file],
            Format::Npy,
            crate::array::DEFAULT_SCRATCH,
            offset,
            dst,
        )
    }

    fn access(&self, index: usize) -> Access {
        let a = &self.arrays[index];
        a.access(self.sources[a.file].map().is_some())
    }

    fn will_need(&self, index: usize, offset: u64, len: u64) {
        let a = &self.arrays[index];
        a.will_need(&*self.sources[a.file], offset, len);
    }

    fn release(&self, index: usize, offset: u64, len: u64) {
        let a = &self.arrays[index];
        a.release(&*self.sources[a.file], offset, len);
    }
}
