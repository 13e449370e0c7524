//! Opening a safetensors file: header by ranged reads, data zero-copy from the map when the
//! source has one (a local file), by ranged reads otherwise.
//!
//! `from_source` reads the 8-byte prefix and the JSON header (at most the header cap) by
//! ranges of the [`ByteSource`], validates everything (docs/specs/safetensors.md §1.2, plus
//! duplicate names) and touches no data byte, so inspecting a 100 GB file reads only its
//! header. When the first checks fail, the file's first bytes are sniffed so that a Git LFS
//! pointer, an HTML page or a ZIP checkpoint gets a message saying what it really is instead
//! of "header too large".

use std::path::{Path, PathBuf};
use std::sync::Arc;

use weightport_core::bytes::{Extent, StoredTensors};
use weightport_core::mapped::LocalFile;

use weightport_core::{
    sniff, ByteSource, Error, Format, Limits, Location, MetaValue, Metadata, Result, Sniffed,
    TensorInfo, TensorSource,
};

use crate::header::{self, Header, HeaderError};

/// A validated safetensors file.
pub struct SafetensorsFile {
    path: PathBuf,
    data: StoredTensors,
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

impl SafetensorsFile {
    /// Opens and validates `path` with default limits.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path.as_ref(), &Limits::default())
    }

    /// Opens (maps) and validates `path`.
    pub fn open_with(path: &Path, limits: &Limits) -> Result<Self> {
        Self::from_source(
            Arc::new(LocalFile::open(path, ", expected a file")?),
            limits,
        )
    }

    /// Validates the safetensors file `src`.
    pub fn from_source(src: Arc<dyn ByteSource>, limits: &Limits) -> Result<Self> {
        let path = src.name().to_path_buf();
        let file_len = src.len();
        let n = header_len(&*src, &path, file_len, limits)?;
        let json = src.range(8, n)?;
        let header =
            header::parse(&json, file_len - 8 - n, limits).map_err(|e| to_error(&path, n, e))?;
        drop(json);
        let data_start = 8 + n;
        let extents = header
            .tensors
            .iter()
            .map(|t| Extent::new(data_start + t.begin, t.end - t.begin))
            .collect();
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
            path,
            data: StoredTensors::new(src, Format::Safetensors, extents),
            header,
            data_start,
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
}

/// The header length `N` from the 8-byte prefix, checked against the limit and the file's
/// length. A file that sniffs as something else (a Git LFS pointer, an HTML page, a ZIP
/// checkpoint) is named as what it is.
fn header_len(src: &dyn ByteSource, path: &Path, file_len: u64, limits: &Limits) -> Result<u64> {
    let malformed = |offset: u64, reason: String| {
        Error::malformed(Location::file(path).at(offset), Format::Safetensors, reason)
    };
    let prefix = src.head(64)?;
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
        self.data.bytes(index)
    }

    fn read_into(&self, index: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.data
            .read_into(index, &self.infos[index].name, offset, dst)
    }

    fn will_need(&self, index: usize, offset: u64, len: u64) {
        self.data.will_need(index, offset, len);
    }

    fn release(&self, index: usize, offset: u64, len: u64) {
        self.data.release(index, offset, len);
    }
}
