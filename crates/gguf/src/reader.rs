//! Opening a GGUF file: the header read front to back from its [`ByteSource`], data served
//! zero-copy from the map when the source has one (a local file), by ranged reads otherwise.
//!
//! Only the header bytes are read by [`GgufFile::from_source`]; tensor bytes are read when the
//! executor asks for them, and mapped pages can be dropped again with
//! [`TensorSource::release`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use weightport_core::bytes::{Extent, StoredTensors};
use weightport_core::{
    sniff, ByteSource, Error, Format, Location, MetaValue, Metadata, ReadOptions, Result, Sniffed,
    TensorInfo, TensorSource,
};

use crate::header::{self, GgufHeader, GgufTensor};

/// A validated GGUF file.
pub struct GgufFile {
    path: PathBuf,
    data: StoredTensors,
    header: GgufHeader,
    infos: Vec<TensorInfo>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.header.version)
            .field("kv", &self.header.metadata.len())
            .field("tensors", &self.infos.len())
            .finish()
    }
}

impl GgufFile {
    /// Opens `path` through [`ReadOptions::storage`] and validates it.
    pub fn open(path: &Path, opts: &ReadOptions) -> Result<Self> {
        Self::from_source(opts.storage.open(path, ", expected a file")?, opts)
    }

    /// Validates the GGUF file `src`.
    pub fn from_source(src: Arc<dyn ByteSource>, opts: &ReadOptions) -> Result<Self> {
        let (path, len) = (src.name().to_path_buf(), src.len());
        let head = src.head(64)?;
        if len < 4 {
            return Err(impostor(&path, &head).unwrap_or_else(|| {
                Error::malformed(
                    Location::file(&path).at(0),
                    Format::Gguf,
                    format!("the file has {len} bytes, fewer than the 4-byte magic (truncated?)"),
                )
            }));
        }
        if &head[..4] != header::MAGIC {
            if let Some(e) = impostor(&path, &head) {
                return Err(e);
            }
        }
        let header = header::parse_source(&*src, &opts.limits)?;
        Ok(Self::from_parts(path, src, header))
    }

    fn from_parts(path: PathBuf, src: Arc<dyn ByteSource>, header: GgufHeader) -> Self {
        let extents = header
            .tensors
            .iter()
            .map(|t| Extent::new(header.data_start + t.offset, t.nbytes))
            .collect();
        let infos = header
            .tensors
            .iter()
            .map(|t| TensorInfo {
                name: t.name.clone(),
                dtype: t.dtype,
                shape: t.shape(),
                byte_len: t.nbytes,
            })
            .collect();
        GgufFile {
            path,
            data: StoredTensors::new(src, Format::Gguf, extents),
            header,
            infos,
        }
    }

    /// The path opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The validated header.
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.header.version
    }

    /// The alignment in force.
    pub fn alignment(&self) -> u32 {
        self.header.alignment
    }

    /// Tensor infos as stored (ggml type id, `ne` innermost first, `n_dims`, offsets).
    pub fn gguf_tensors(&self) -> &[GgufTensor] {
        &self.header.tensors
    }

    /// The keys in file order.
    pub fn keys(&self) -> Vec<&str> {
        self.header.metadata.iter().map(|(k, _)| k).collect()
    }

    /// A key's value.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.header.metadata.get(key)
    }

    /// Absolute offset of the data section.
    pub fn data_start(&self) -> u64 {
        self.header.data_start
    }

    /// Absolute offset where the tensor infos end.
    pub fn infos_end(&self) -> u64 {
        self.header.infos_end
    }

    /// The file's length in bytes.
    pub fn file_len(&self) -> u64 {
        self.data.source().len()
    }

    /// Absolute file offset of tensor `index`'s first byte.
    pub fn tensor_offset(&self, index: usize) -> u64 {
        self.header.data_start + self.header.tensors[index].offset
    }
}

/// An error saying what a non-GGUF file really is, when it is recognisably something else.
fn impostor(path: &Path, head: &[u8]) -> Option<Error> {
    let what = match sniff(head) {
        Sniffed::Format(Format::Gguf) | Sniffed::Unknown => return None,
        Sniffed::Format(f) => format!("is a {} file, not GGUF", f.name()),
        Sniffed::Zip => "is a ZIP archive (a PyTorch checkpoint or a NumPy .npz), not GGUF".into(),
        other => other.describe(),
    };
    Some(Error::NotFormat {
        path: path.to_path_buf(),
        expected: Format::Gguf,
        what,
    })
}

impl TensorSource for GgufFile {
    fn format(&self) -> Format {
        Format::Gguf
    }

    fn metadata(&self) -> &Metadata {
        &self.header.metadata
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
