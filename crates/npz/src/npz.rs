//! `.npz`: a ZIP archive of `.npy` members (`np.savez` stores them, `np.savez_compressed`
//! deflates them; both pass `force_zip64=True` to Python's zipfile).
//!
//! ```text
//! [local header 1│name│extra][data 1] … [local header n│name│extra][data n]
//! [central directory: one entry per member: name, method, CRC-32, sizes, local header offset]
//! [ZIP64 end of central directory record + locator, when needed][end of central directory]
//! ```
//!
//! See: APPNOTE.TXT <https://pkware.cachefly.net/webdocs/casestudies/APPNOTE.TXT> §4.3, and
//! numpy's `savez` (`numpy/lib/_npyio_impl.py`).
//!
//! The archive's entries are read and checked by [`weightport_core::archive`] (the ZIP layer
//! the torch reader shares: duplicate names, local/central disagreements, flags, methods,
//! bounds, sizes, the deflate ratio and the entry count cap); its inflater enforces each
//! member's length and CRC-32 while streaming. This module adds names not ending in `.npy` and
//! the npy header against the member's declared size.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use weightport_core::archive::{self, Concern, Method};
use weightport_core::bytes::{InMemory, SourceReader};
use weightport_core::mapped::LocalFile;
use weightport_core::{
    Access, ByteSource, Error, Format, Location, Metadata, ReadOptions, Result, TensorInfo,
    TensorSource,
};
use zip::ZipArchive;

use crate::array::{
    header_error, inflate_header, read_header, Array, Body, Deflated, Origin, DEFAULT_SCRATCH,
};

/// A validated `.npz` archive.
pub struct NpzSource {
    path: PathBuf,
    src: Arc<dyn ByteSource>,
    arrays: Vec<Array>,
    members: Vec<String>,
    infos: Vec<TensorInfo>,
    metadata: Metadata,
    scratch: usize,
}

impl std::fmt::Debug for NpzSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NpzSource")
            .field("path", &self.path)
            .field("tensors", &self.infos.len())
            .finish()
    }
}

/// Opens and validates an `.npz` archive (central directory and every member's npy header; no
/// array data is read).
pub fn open_npz(path: &Path, opts: &ReadOptions) -> Result<NpzSource> {
    let expected = ", expected an .npz file (use a directory of .npy files as such)";
    NpzSource::from_source(opts.storage.open(path, expected)?, opts)
}

/// True when `head` starts like a ZIP and the archive's central directory holds `.npy` members
/// and no `data.pkl` (a PyTorch checkpoint). Decided by the central directory, not by the file
/// name; any error reading it answers false.
pub fn probe_npz(path: &Path, head: &[u8]) -> bool {
    zip_head(head) && LocalFile::open(path, "").is_ok_and(|src| probe_npz_source(&src, head))
}

fn zip_head(head: &[u8]) -> bool {
    head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06")
}

/// [`probe_npz`] of a source.
pub fn probe_npz_source(src: &dyn ByteSource, head: &[u8]) -> bool {
    if !zip_head(head) {
        return false;
    }
    let reader = std::io::BufReader::new(SourceReader::new(src));
    let Ok(ar) = ZipArchive::new(reader) else {
        return false;
    };
    let mut npy = false;
    for name in ar.file_names_raw() {
        let pkl = b"data.pkl";
        let tail = &name[name.len().saturating_sub(pkl.len())..];
        // torch finds `data.pkl` ignoring letter case.
        if tail.eq_ignore_ascii_case(pkl)
            && (name.len() == pkl.len() || name[name.len() - pkl.len() - 1] == b'/')
        {
            return false;
        }
        npy |= name.ends_with(b".npy");
    }
    npy
}

impl NpzSource {
    /// Validates an `.npz` held in memory; `label` names it in messages.
    pub fn from_bytes(label: &Path, bytes: Vec<u8>, opts: &ReadOptions) -> Result<NpzSource> {
        NpzSource::from_source(Arc::new(InMemory::new(label, bytes)), opts)
    }

    /// Validates an `.npz` already mapped (a member `scan` unpacked); `label` names it in
    /// messages.
    pub fn from_map(
        label: &Path,
        map: Arc<memmap2::Mmap>,
        opts: &ReadOptions,
    ) -> Result<NpzSource> {
        NpzSource::from_source(Arc::new(LocalFile::from_map(label, map)), opts)
    }

    /// Validates the `.npz` archive `src` (central directory and every member's npy header,
    /// read by ranges; no array data is read).
    pub fn from_source(src: Arc<dyn ByteSource>, opts: &ReadOptions) -> Result<NpzSource> {
        let path = src.name().to_path_buf();
        let table = table(&path, &*src, opts)?;
        let mut arrays = Vec::with_capacity(table.entries.len());
        let mut members = Vec::with_capacity(table.entries.len());
        for e in &table.entries {
            arrays.push(member(&path, &*src, e, opts)?);
            members.push(e.name.clone());
        }
        let infos = arrays.iter().map(|a| a.info.clone()).collect();
        Ok(NpzSource {
            path,
            src,
            arrays,
            members,
            infos,
            metadata: Metadata::new(),
            scratch: DEFAULT_SCRATCH,
        })
    }

    /// Sets the size of the buffer used to skip and scatter inflated bytes (default 256 KiB;
    /// at least one element is always used). Tests set it small so that small fixtures cross
    /// many buffer boundaries.
    pub fn with_scratch(mut self, bytes: usize) -> Self {
        self.scratch = bytes.max(1);
        self
    }

    /// The ZIP member name of tensor `index` (the tensor name plus `.npy`).
    pub fn member_name(&self, index: usize) -> &str {
        &self.members[index]
    }

    /// True when tensor `index` is deflated in the archive.
    pub fn is_deflated(&self, index: usize) -> bool {
        matches!(self.arrays[index].body, Body::Deflated(_))
    }
}

/// The archive's checked entry table; its first anomaly is the error (an ambiguous archive is
/// malformed here: an npz holds no code, so a member two tools read differently is a broken
/// file, not an attack on the reader).
fn table(path: &Path, src: &dyn ByteSource, opts: &ReadOptions) -> Result<archive::Table> {
    let table = archive::entries(src, &opts.limits).map_err(|e| match e {
        archive::TableError::Malformed(m, o) => {
            Error::malformed(Location::file(path).at(o), Format::Npz, m)
        }
        archive::TableError::TooMany(n, cap) => Error::Limit {
            at: Location::file(path),
            what: "npz member count",
            needed: n,
            limit: cap,
        },
        archive::TableError::Read(e) => e,
    })?;
    if let Some(a) = table.anomalies.first() {
        let at = Location::file(path).at(a.offset);
        return Err(match a.concern {
            Concern::Bomb => Error::Refused {
                at,
                reason: a.what.clone(),
            },
            Concern::Unsupported => Error::unsupported(at, Format::Npz, a.what.clone()),
            Concern::Ambiguous | Concern::Malformed => {
                Error::malformed(at, Format::Npz, a.what.clone())
            }
        });
    }
    Ok(table)
}

/// One `NAME.npy` member: its npy header (inflated as far as needed) against its declared size.
fn member(
    path: &Path,
    src: &dyn ByteSource,
    e: &archive::Entry,
    opts: &ReadOptions,
) -> Result<Array> {
    // Messages name the tensor (the member name without `.npy`), or the member itself.
    let label = e.name.strip_suffix(".npy").unwrap_or(&e.name);
    let at = Location::file(path).tensor(label).at(e.header_start);
    let bad = |reason: String| Error::malformed(at.clone(), Format::Npz, reason);
    let Some(name) = e.name.strip_suffix(".npy") else {
        return Err(bad(format!(
            "member `{}` is not an .npy array (an npz holds only NAME.npy members)",
            weightport_core::sanitize(&e.name)
        )));
    };
    let deflated = e.method == Some(Method::Deflated);
    let (comp, size) = (e.data(src), e.size);
    let header_error = |h, origin| header_error(h, path, Some(name), Format::Npz, origin, size);
    let header = if deflated {
        inflate_header(comp, size, opts).map_err(|err| match err {
            Ok(h) => header_error(h, Origin::Member(e.data_start)),
            Err(z) => z.into_error(|z| bad(format!("deflated member: {z} (in its npy header)"))),
        })?
    } else {
        read_header(src, e.data_start, e.csize, opts)?
            .map_err(|h| header_error(h, Origin::File(e.data_start)))?
    };
    if header.data_offset.checked_add(header.byte_len) != Some(size) {
        return Err(bad(format!(
            "declared size mismatch: the npy header says shape {:?} of '{}' ({} data bytes \
             after a {}-byte header) but the member's uncompressed size is {size}",
            header.shape, header.descr, header.byte_len, header.data_offset
        )));
    }
    let body = if deflated {
        Body::Deflated(Box::new(Deflated {
            comp_start: e.data_start,
            comp_len: e.csize,
            size,
            crc: e.crc,
            cursor: Default::default(),
        }))
    } else {
        Body::Stored {
            data: e.data_start + header.data_offset,
        }
    };
    Ok(Array {
        info: TensorInfo {
            name: name.to_string(),
            dtype: header.dtype,
            shape: header.shape.clone(),
            byte_len: header.byte_len,
        },
        header,
        file: 0,
        body,
    })
}

impl TensorSource for NpzSource {
    fn format(&self) -> Format {
        Format::Npz
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
        self.arrays[index].bytes(&*self.src)
    }

    /// See the crate docs: for an [`Access::Sequential`] tensor, calls should continue where
    /// the previous one stopped; any other order is answered correctly but re-inflates.
    fn read_into(&self, index: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.arrays[index].read_into(
            &*self.src,
            &self.path,
            Format::Npz,
            self.scratch,
            offset,
            dst,
        )
    }

    fn access(&self, index: usize) -> Access {
        self.arrays[index].access(self.src.map().is_some())
    }

    fn will_need(&self, index: usize, offset: u64, len: u64) {
        self.arrays[index].will_need(&*self.src, offset, len);
    }

    fn release(&self, index: usize, offset: u64, len: u64) {
        self.arrays[index].release(&*self.src, offset, len);
    }
}
