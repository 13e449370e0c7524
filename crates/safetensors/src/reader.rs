//! Opening a safetensors file: header by positional reads, data by a read-only memory map.
//!
//! `open` reads the 8-byte prefix and the JSON header with `pread`, validates everything
//! (docs/specs/safetensors.md §1.2, plus duplicate names), and maps the file without touching data pages, so
//! inspecting a 100 GB file reads only its header. When the first checks fail, the file's
//! first bytes are sniffed so that a Git LFS pointer, an HTML page or a ZIP checkpoint gets a
//! message saying what it really is instead of "header too large".

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use weightport_core::mapped::{self, Extent};

use weightport_core::{
    sniff, Error, Format, Limits, Location, MetaValue, Metadata, Result, Sniffed, TensorInfo,
    TensorSource,
};

use crate::header::{self, Header, HeaderError};

/// A validated safetensors file.
pub struct SafetensorsFile {
    path: PathBuf,
    map: Mmap,
    header: Header,
    data_start: u64,
    infos: Vec<TensorInfo>,
    metadata: Metadata,
}

impl std::fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("path", &self.path)
            .field("tensors", &self.infos.len())
            .finish()
    }
}

fn not_format(path: &Path, what: &Sniffed) -> Error {
    Error::NotFormat {
        path: path.to_path_buf(),
        expected: Format::Safetensors,
        what: what.describe(),
    }
}

fn read_prefix(file: &File, path: &Path, len: u64) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len.min(64) as usize];
    file.read_exact_at(&mut buf, 0)
        .map_err(|e| Error::io(path, "read", e))?;
    Ok(buf)
}

impl SafetensorsFile {
    /// Opens and validates `path` with default limits.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path.as_ref(), &Limits::default())
    }

    /// Opens and validates `path`.
    pub fn open_with(path: &Path, limits: &Limits) -> Result<Self> {
        let (file, file_len) = mapped::open_input(path, ", expected a file")?;
        let n = header_len(&file, path, file_len, limits)?;
        let mut json = vec![0u8; n as usize];
        file.read_exact_at(&mut json, 8)
            .map_err(|e| Error::io(path, "read", e))?;
        let header =
            header::parse(&json, file_len - 8 - n, limits).map_err(|e| to_error(path, n, e))?;
        let map = mapped::map(&file, path)?;
        let infos = header
            .tensors
            .iter()
            .map(|t| TensorInfo {
                name: t.name.clone(),
                dtype: t.dtype,
                shape: t.shape.clone(),
                byte_len: t.end - t.begin,
            })
            .collect();
        let metadata = header
            .metadata
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), MetaValue::Str(v.clone())))
            .collect();
        Ok(SafetensorsFile {
            path: path.to_path_buf(),
            map,
            header,
            data_start: 8 + n,
            infos,
            metadata,
        })
    }

    /// The path opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The validated header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Absolute file offset where the data section begins (8 + N).
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    /// Absolute file offset of tensor `index`'s first byte.
    pub fn tensor_offset(&self, index: usize) -> u64 {
        self.data_start + self.header.tensors[index].begin
    }

    fn extent(&self, index: usize) -> Extent {
        let t = &self.header.tensors[index];
        Extent::new(self.data_start + t.begin, t.end - t.begin)
    }

    fn at(&self, index: usize) -> Location {
        Location::file(&self.path)
            .tensor(self.infos[index].name.clone())
            .at(self.tensor_offset(index))
    }
}

/// The header length `N` from the 8-byte prefix, checked against the limit and the file's
/// length. A file that sniffs as something else (a Git LFS pointer, an HTML page, a ZIP
/// checkpoint) is named as what it is.
fn header_len(file: &File, path: &Path, file_len: u64, limits: &Limits) -> Result<u64> {
    let malformed = |offset: u64, reason: String| {
        Error::malformed(Location::file(path).at(offset), Format::Safetensors, reason)
    };
    let prefix = read_prefix(file, path, file_len)?;
    let sniffed = sniff(&prefix);
    let impostor = !matches!(
        sniffed,
        Sniffed::Format(Format::Safetensors) | Sniffed::Unknown
    );
    if file_len < 8 {
        if impostor {
            return Err(not_format(path, &sniffed));
        }
        return Err(malformed(0, format!("header too small: the file has {file_len} bytes, fewer than the 8-byte length prefix")));
    }
    let n = u64::from_le_bytes(prefix[..8].try_into().expect("8 bytes"));
    if impostor {
        return Err(not_format(path, &sniffed));
    }
    if n > limits.max_header_bytes {
        if n.checked_add(8).is_some_and(|end| end <= file_len) {
            return Err(Error::Limit {
                at: Location::file(path).at(0),
                what: "header length",
                needed: n,
                limit: limits.max_header_bytes,
            });
        }
        return Err(malformed(0, format!(
            "header too large: the length prefix says {n} bytes (limit {}) but the file has only {file_len}: not a safetensors file?",
            limits.max_header_bytes
        )));
    }
    if 8 + n > file_len {
        return Err(malformed(0, format!(
            "invalid header length: the prefix says the header is {n} bytes but the file has only {} after the prefix (truncated?)",
            file_len - 8
        )));
    }
    Ok(n)
}

fn to_error(path: &Path, n: u64, e: HeaderError) -> Error {
    let offset = match (e.json_offset, e.data_offset) {
        (Some(j), _) => Some(8 + j),
        (None, Some(d)) => Some(8 + n + d),
        _ => None,
    };
    let at = Location {
        path: path.to_path_buf(),
        tensor: e.tensor,
        offset,
    };
    match e.limit {
        Some((what, needed, limit)) => Error::Limit {
            at,
            what,
            needed,
            limit,
        },
        None => Error::malformed(at, Format::Safetensors, e.reason),
    }
}

impl TensorSource for SafetensorsFile {
    fn format(&self) -> Format {
        Format::Safetensors
    }

    fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn tensors(&self) -> &[TensorInfo] {
        &self.infos
    }

    fn files(&self) -> Vec<PathBuf> {
        vec![self.path.clone()]
    }

    fn file_of(&self, _index: usize) -> PathBuf {
        self.path.clone()
    }

    fn bytes(&self, index: usize) -> Option<&[u8]> {
        self.extent(index).of(&self.map)
    }

    fn read_into(&self, index: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        let at = || self.at(index);
        (self.extent(index)).read_into(&self.map, at, Format::Safetensors, offset, dst)
    }

    fn will_need(&self, index: usize, offset: u64, len: u64) {
        self.extent(index).will_need(&self.map, offset, len);
    }

    fn release(&self, index: usize, offset: u64, len: u64) {
        self.extent(index).release(&self.map, offset, len);
    }
}
