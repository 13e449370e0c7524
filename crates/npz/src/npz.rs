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
//! The `zip` crate finds and parses the end-of-central-directory records (including ZIP64) and
//! the central directory, and (through `validate_header_consistency`) rejects duplicate names,
//! local headers that disagree with their central-directory entry (name, method, sizes, CRC,
//! flags), members whose bytes overlap, and local headers missing from the central directory.
//! This module adds: the member count cap, encrypted members, compression methods other than
//! stored/deflated, names not ending in `.npy`, member data running past the end of the file,
//! stored members whose compressed and uncompressed sizes differ, a declared compression ratio
//! no deflate stream can reach, the npy header against the member's declared size, and (while
//! streaming) the inflated length and CRC-32 against the central directory.

use std::fs::File;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use weightport_core::{
    Access, Error, Format, Location, Metadata, ReadOptions, Result, TensorInfo, TensorSource,
};
use zip::{CompressionMethod, ZipArchive};

use crate::array::{
    header_error, inflate_header, Array, Backing, Body, Deflated, Origin, DEFAULT_SCRATCH,
};
use crate::header;

/// A validated `.npz` archive.
pub struct NpzSource {
    path: PathBuf,
    backing: Backing,
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
    let file = File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
    if meta.is_dir() {
        return Err(Error::Usage(format!(
            "{}: is a directory, expected an .npz file (use a directory of .npy files as such)",
            path.display()
        )));
    }
    let backing = Backing::map(&file, path, meta.len())?;
    NpzSource::build(path.to_path_buf(), backing, opts)
}

/// True when `head` starts like a ZIP and the archive's central directory holds `.npy` members
/// and no `data.pkl` (a PyTorch checkpoint). Decided by the central directory, not by the file
/// name; any error reading it answers false.
pub fn probe_npz(path: &Path, head: &[u8]) -> bool {
    if !(head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06")) {
        return false;
    }
    let Ok(file) = File::open(path) else {
        return false;
    };
    let Ok(ar) = ZipArchive::new(std::io::BufReader::new(file)) else {
        return false;
    };
    let mut npy = false;
    for name in ar.file_names_raw() {
        if name == b"data.pkl" || name.ends_with(b"/data.pkl") {
            return false;
        }
        npy |= name.ends_with(b".npy");
    }
    npy
}

fn zip_error(path: &Path, e: zip::result::ZipError) -> Error {
    Error::malformed(
        Location::file(path),
        Format::Npz,
        format!("not a valid ZIP archive: {e}"),
    )
}

impl NpzSource {
    /// Validates an `.npz` held in memory; `label` names it in messages.
    pub fn from_bytes(label: &Path, bytes: Vec<u8>, opts: &ReadOptions) -> Result<NpzSource> {
        NpzSource::build(label.to_path_buf(), Backing::Owned(bytes), opts)
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

    fn build(path: PathBuf, backing: Backing, opts: &ReadOptions) -> Result<NpzSource> {
        let data = backing.bytes();
        let file_len = data.len() as u64;
        let mut ar = ZipArchive::new(Cursor::new(data)).map_err(|e| zip_error(&path, e))?;
        let limits = &opts.limits;
        if ar.len() as u64 > limits.max_tensors {
            return Err(Error::Limit {
                at: Location::file(&path),
                what: "npz member count",
                needed: ar.len() as u64,
                limit: limits.max_tensors,
            });
        }
        if ar.has_duplicate_names() {
            return Err(Error::malformed(
                Location::file(&path).at(ar.central_directory_start()),
                Format::Npz,
                "the central directory lists the same member name twice",
            ));
        }
        ar.validate_header_consistency().map_err(|e| {
            Error::malformed(
                Location::file(&path),
                Format::Npz,
                format!("local headers disagree with the central directory: {e}"),
            )
        })?;
        let mut arrays = Vec::with_capacity(ar.len());
        let mut members = Vec::with_capacity(ar.len());
        for i in 0..ar.len() {
            let f = ar.by_index_raw(i).map_err(|e| zip_error(&path, e))?;
            let member = f.name().map_err(|e| zip_error(&path, e))?.into_owned();
            let header_start = f.header_start();
            // Messages name the tensor (the member name without `.npy`), or the member itself.
            let label = member.strip_suffix(".npy").unwrap_or(&member);
            let at = Location::file(&path).tensor(label).at(header_start);
            let bad = |reason: String| Error::malformed(at.clone(), Format::Npz, reason);
            let Some(name) = member.strip_suffix(".npy") else {
                return Err(bad(format!(
                    "member `{}` is not an .npy array (an npz holds only NAME.npy members)",
                    weightport_core::sanitize(&member)
                )));
            };
            if f.encrypted() {
                return Err(Error::Unsupported {
                    at,
                    format: Some(Format::Npz),
                    what: "encrypted member".into(),
                });
            }
            let deflated = match f.compression() {
                CompressionMethod::Stored => false,
                CompressionMethod::Deflated => true,
                m => {
                    return Err(Error::Unsupported {
                        at,
                        format: Some(Format::Npz),
                        what: format!("compression method {m} (only stored and deflated)"),
                    })
                }
            };
            let comp_start = f
                .data_start()
                .ok_or_else(|| bad("local header could not be read".into()))?;
            let comp_len = f.compressed_size();
            let size = f.size();
            let crc = f.crc32();
            if comp_start
                .checked_add(comp_len)
                .is_none_or(|end| end > file_len)
            {
                return Err(bad(format!(
                    "member data ({comp_len} bytes at byte {comp_start}) runs past the end of \
                     the file ({file_len} bytes): truncated?"
                )));
            }
            let comp = &data[comp_start as usize..(comp_start + comp_len) as usize];
            let header = if deflated {
                let ratio = opts.limits.max_deflate_ratio;
                if size > comp_len.saturating_mul(ratio) {
                    return Err(Error::Refused {
                        at,
                        reason: format!(
                            "member declares {size} bytes from {comp_len} compressed bytes, a \
                             ratio over {ratio}:1 that no deflate stream reaches \
                             (a ZIP bomb or a corrupt size)"
                        ),
                    });
                }
                inflate_header(comp, size, opts).map_err(|e| match e {
                    Ok(h) => header_error(
                        h,
                        &path,
                        Some(name),
                        Format::Npz,
                        Origin::Member(comp_start),
                        size,
                    ),
                    Err(reason) => bad(format!("deflated member: {reason} (in its npy header)")),
                })?
            } else {
                if comp_len != size {
                    return Err(bad(format!(
                        "stored member has compressed size {comp_len} but uncompressed size \
                         {size}"
                    )));
                }
                header::parse(comp, opts).map_err(|e| {
                    header_error(
                        e,
                        &path,
                        Some(name),
                        Format::Npz,
                        Origin::File(comp_start),
                        size,
                    )
                })?
            };
            let total = header.data_offset.checked_add(header.byte_len);
            if total != Some(size) {
                return Err(bad(format!(
                    "declared size mismatch: the npy header says shape {:?} of '{}' ({} data \
                     bytes after a {}-byte header) but the member's uncompressed size is {size}",
                    header.shape, header.descr, header.byte_len, header.data_offset
                )));
            }
            let body = if deflated {
                Body::Deflated(Box::new(Deflated {
                    comp_start,
                    comp_len,
                    size,
                    crc,
                    cursor: Mutex::new(None),
                }))
            } else {
                Body::Stored {
                    data: comp_start + header.data_offset,
                }
            };
            arrays.push(Array {
                info: TensorInfo {
                    name: name.to_string(),
                    dtype: header.dtype,
                    shape: header.shape.clone(),
                    byte_len: header.byte_len,
                },
                header,
                file: 0,
                body,
            });
            members.push(member);
        }
        drop(ar);
        let infos = arrays.iter().map(|a| a.info.clone()).collect();
        Ok(NpzSource {
            path,
            backing,
            arrays,
            members,
            infos,
            metadata: Metadata::new(),
            scratch: DEFAULT_SCRATCH,
        })
    }
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
        self.arrays[index].bytes(self.backing.bytes())
    }

    /// See the crate docs: for an [`Access::Sequential`] tensor, calls should continue where
    /// the previous one stopped; any other order is answered correctly but re-inflates.
    fn read_into(&self, index: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.arrays[index].read_into(
            self.backing.bytes(),
            &self.path,
            Format::Npz,
            self.scratch,
            offset,
            dst,
        )
    }

    fn access(&self, index: usize) -> Access {
        self.arrays[index].access()
    }

    fn will_need(&self, index: usize, offset: u64, len: u64) {
        self.arrays[index].will_need(&self.backing, offset, len);
    }

    fn release(&self, index: usize, offset: u64, len: u64) {
        self.arrays[index].release(&self.backing, offset, len);
    }
}
