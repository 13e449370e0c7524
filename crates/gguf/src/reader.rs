//! Opening a GGUF file: a read-only map, the header parsed from it, data served zero-copy.
//!
//! Only the header pages are touched by [`GgufFile::open`]; tensor bytes are read when the
//! executor asks for them, and their pages can be dropped again with
//! [`TensorSource::release`].

use std::path::{Path, PathBuf};

use memmap2::Mmap;
use weightport_core::mapped::{self, Extent};
use weightport_core::{
    sniff, Error, Format, Location, MetaValue, Metadata, ReadOptions, Result, Sniffed, TensorInfo,
    TensorSource,
};

use crate::header::{self, GgufHeader, GgufTensor};

/// A validated GGUF file.
pub struct GgufFile {
    path: PathBuf,
    map: Mmap,
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
    /// Opens and validates `path`.
    pub fn open(path: &Path, opts: &ReadOptions) -> Result<Self> {
        let (file, len) = mapped::open_input(path, ", expected a file")?;
        if len < 4 {
            let mut head = vec![0u8; len as usize];
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut head, 0)
                .map_err(|e| Error::io(path, "read", e))?;
            return Err(impostor(path, &head).unwrap_or_else(|| {
                Error::malformed(
                    Location::file(path).at(0),
                    Format::Gguf,
                    format!("the file has {len} bytes, fewer than the 4-byte magic (truncated?)"),
                )
            }));
        }
        let map = mapped::map(&file, path)?;
        if &map[..4] != header::MAGIC {
            if let Some(e) = impostor(path, &map[..map.len().min(64)]) {
                return Err(e);
            }
        }
        let header = header::parse(path, &map, &opts.limits)?;
        Ok(Self::from_parts(path.to_path_buf(), map, header))
    }

    fn from_parts(path: PathBuf, map: Mmap, header: GgufHeader) -> Self {
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
            map,
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
        self.map.len() as u64
    }

    /// Absolute file offset of tensor `index`'s first byte.
    pub fn tensor_offset(&self, index: usize) -> u64 {
        self.header.data_start + self.header.tensors[index].offset
    }

    fn extent(&self, index: usize) -> Extent {
        Extent::new(self.tensor_offset(index), self.header.tensors[index].nbytes)
    }

    fn at(&self, index: usize) -> Location {
        Location::file(&self.path)
            .tensor(self.infos[index].name.clone())
            .at(self.tensor_offset(index))
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
        self.extent(index).of(&self.map)
    }

    fn read_into(&self, index: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        let at = || self.at(index);
        (self.extent(index)).read_into(&self.map, at, Format::Gguf, offset, dst)
    }

    fn will_need(&self, index: usize, offset: u64, len: u64) {
        self.extent(index).will_need(&self.map, offset, len);
    }

    fn release(&self, index: usize, offset: u64, len: u64) {
        self.extent(index).release(&self.map, offset, len);
    }
}
