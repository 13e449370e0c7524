//! The torch ZIP container (spec §1.2).
//!
//! Byte layout: a ZIP (stored entries written by miniz, 64-byte aligned data, ZIP64 always
//! enabled) whose entries all sit under one arbitrary prefix `<p>/`: `data.pkl` (the pickle),
//! `data/<key>` (raw storages), `byteorder`, `version` (or `.data/version`),
//! `.data/serialization_id`, `.format_version`, `.storage_alignment`. Local headers of torch
//! files carry CRC 0 and sizes 0 (bit 3, data descriptor), so sizes come from the central
//! directory, which the `zip` crate parses (including ZIP64). Data offsets are computed from the
//! local header's own name and extra lengths, as torch's `getRecordOffset` does.
//!
//! Checks the `zip` crate does not make, each refused with the entry and its offset: duplicate
//! names, a local name that differs from the central one, encryption and "patched data" flags
//! (local or central), names with `..`, a leading `/`, `\` or NUL, entries outside the prefix,
//! methods other than stored/deflate, stored entries whose sizes differ, records past the end of
//! the file. TorchScript archives and the legacy tar format are refused with what they are.

use std::collections::HashMap;
use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;
use weightport_core::{Error, Format, Location, ReadOptions, Result};

use crate::source::{inflate, kind_error, vm_error, Checkpoint, Record, RecordData};
use crate::vm::{Parsed, PidStyle, Vm, VmErrorKind, VmLimits};

/// One ZIP entry as the central directory and its local header describe it.
#[derive(Debug, Clone)]
pub struct ZipEntry {
    /// Name (from the central directory).
    pub name: String,
    /// 0 stored, 8 deflate.
    pub method: u16,
    /// Absolute offset of the local header.
    pub header_start: u64,
    /// Absolute offset of the data.
    pub data_start: u64,
    /// Compressed size.
    pub csize: u64,
    /// Uncompressed size.
    pub usize: u64,
    /// CRC-32 from the central directory (0: not computed).
    pub crc: u32,
}

/// An anomaly found in the container.
#[derive(Debug, Clone)]
pub struct Anomaly {
    /// Absolute byte offset.
    pub offset: u64,
    /// Whether it makes the file unsafe (refused) or just malformed.
    pub refused: bool,
    /// Description.
    pub what: String,
}

/// The validated layout of a torch ZIP.
#[derive(Debug, Clone, Default)]
pub struct ZipLayout {
    /// The archive prefix.
    pub prefix: String,
    /// Entries in central-directory order.
    pub entries: Vec<ZipEntry>,
    /// Problems, in the order found (the reader refuses on the first).
    pub anomalies: Vec<Anomaly>,
    /// Entries under the prefix that torch does not write (reported, ignored).
    pub extra: Vec<String>,
}

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    b.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]))
}

/// Opens the map read-only.
#[allow(unsafe_code)]
pub(crate) fn map_file(path: &Path) -> Result<Arc<Mmap>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
    if meta.is_dir() {
        return Err(Error::Usage(format!(
            "{}: is a directory, expected a file",
            path.display()
        )));
    }
    // SAFETY: a private read-only mapping that weightport never writes through. As with every
    // mmap reader, a file truncated by another process while mapped can fault (SIGBUS).
    let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, "mmap", e))?;
    Ok(Arc::new(map))
}

/// What a non-ZIP file is, for messages.
pub(crate) fn is_tar(b: &[u8]) -> bool {
    b.get(257..262) == Some(b"ustar")
}

fn bad_name(n: &str) -> bool {
    n.starts_with('/') || n.contains('\\') || n.contains('\0') || n.split('/').any(|c| c == "..")
}

/// Parses and checks the ZIP structure. Fatal structural errors (not a ZIP at all) are
/// returned as errors; rule violations are collected as anomalies.
pub fn layout(path: &Path, map: &[u8]) -> Result<ZipLayout> {
    let malformed =
        |o: u64, m: String| Error::malformed(Location::file(path).at(o), Format::PytorchZip, m);
    if !map.starts_with(b"PK\x03\x04") {
        if is_tar(map) {
            return Err(Error::Refused {
                at: Location::file(path),
                reason: "legacy tar-format PyTorch checkpoint (torch <= 0.1.9), which torch itself refuses under weights_only; re-save it with a current torch".into(),
            });
        }
        return Err(Error::NotFormat {
            path: path.to_path_buf(),
            expected: Format::PytorchZip,
            what: "is not a PyTorch checkpoint (no ZIP local header at offset 0)".into(),
        });
    }
    // The archive starts at 0 (checked above); the crate's offset detection mis-parses some
    // real torch files (a ZIP64 EOCD before the EOCD, depending on name lengths).
    let config = zip::read::Config {
        archive_offset: zip::read::ArchiveOffset::Known(0),
    };
    let mut ar = zip::ZipArchive::with_config(config, Cursor::new(map))
        .map_err(|e| malformed(0, format!("ZIP central directory: {e}")))?;
    let mut out = ZipLayout::default();
    let anomaly = |out: &mut ZipLayout, offset: u64, refused: bool, what: String| {
        out.anomalies.push(Anomaly {
            offset,
            refused,
            what,
        })
    };
    if ar.has_duplicate_names() {
        anomaly(
            &mut out,
            ar.central_directory_start(),
            true,
            "duplicate entry names in the central directory (torch reads the first, other tools the last)".into(),
        );
    }
    for i in 0..ar.len() {
        let f = ar
            .by_index_raw(i)
            .map_err(|e| malformed(0, format!("ZIP entry {i}: {e}")))?;
        let cd = f.central_header_start();
        let raw = f.name_raw().to_vec();
        let name = match String::from_utf8(raw.clone()) {
            Ok(n) => n,
            Err(_) => {
                anomaly(&mut out, cd, true, format!("entry {i} name is not UTF-8"));
                String::from_utf8_lossy(&raw).into_owned()
            }
        };
        let shown = weightport_core::sanitize(&name);
        if bad_name(&name) {
            anomaly(
                &mut out,
                cd,
                true,
                format!("entry `{shown}`: path traversal or absolute name"),
            );
        }
        let cd_flags = u16_at(map, cd as usize + 8).unwrap_or(0);
        let h = f.header_start();
        let hs = h as usize;
        let (lfh_flags, lfh_method, nlen, xlen) = match (
            map.get(hs..hs + 4),
            u16_at(map, hs + 6),
            u16_at(map, hs + 8),
            u16_at(map, hs + 26),
            u16_at(map, hs + 28),
        ) {
            (Some(b"PK\x03\x04"), Some(fl), Some(m), Some(n), Some(x)) => (fl, m, n, x),
            _ => {
                return Err(malformed(
                    h,
                    format!("entry `{shown}`: no local header at its offset"),
                ))
            }
        };
        let lname = map.get(hs + 30..hs + 30 + nlen as usize).unwrap_or(&[]);
        if lname != raw.as_slice() {
            anomaly(
                &mut out,
                h,
                true,
                format!(
                    "entry `{shown}`: local header name `{}` differs from the central directory",
                    weightport_core::sanitize(&String::from_utf8_lossy(lname))
                ),
            );
        }
        for (which, fl, at) in [("central", cd_flags, cd), ("local", lfh_flags, h)] {
            if fl & 0x41 != 0 || f.encrypted() {
                anomaly(
                    &mut out,
                    at,
                    true,
                    format!("entry `{shown}`: encryption flag set in the {which} header"),
                );
            }
            if fl & 0x20 != 0 {
                anomaly(&mut out, at, true, format!("entry `{shown}`: 'compressed patched data' flag (0x20) set in the {which} header"));
            }
        }
        let method: u16 = match f.compression() {
            zip::CompressionMethod::Stored => 0,
            zip::CompressionMethod::Deflated => 8,
            other => {
                anomaly(
                    &mut out,
                    h,
                    false,
                    format!("entry `{shown}`: compression {other:?} (only stored and deflate)"),
                );
                u16::MAX
            }
        };
        if method != u16::MAX && lfh_method != method {
            anomaly(
                &mut out,
                h,
                true,
                format!("entry `{shown}`: local and central compression methods differ"),
            );
        }
        let data_start = h + 30 + u64::from(nlen) + u64::from(xlen);
        if let Some(ds) = f.data_start() {
            if ds != data_start {
                return Err(malformed(
                    h,
                    format!("entry `{shown}`: data offset disagrees with the zip reader"),
                ));
            }
        }
        let (csize, usize) = (f.compressed_size(), f.size());
        if data_start
            .checked_add(csize)
            .is_none_or(|e| e > map.len() as u64)
        {
            return Err(malformed(
                h,
                format!("entry `{shown}`: data runs past the end of the file"),
            ));
        }
        if method == 0 && csize != usize {
            anomaly(&mut out, h, false, format!("entry `{shown}`: stored entry with different compressed and uncompressed sizes"));
        }
        out.entries.push(ZipEntry {
            name,
            method,
            header_start: h,
            data_start,
            csize,
            usize,
            crc: f.crc32(),
        });
    }
    let Some(first) = out.entries.first() else {
        return Err(malformed(0, "empty ZIP archive".into()));
    };
    let Some((prefix, _)) = first.name.split_once('/') else {
        return Err(malformed(
            first.header_start,
            "file in archive is not in a subdirectory".into(),
        ));
    };
    let prefix = prefix.to_string();
    out.prefix = prefix.clone();
    let p = format!("{prefix}/");
    let mut extra = Vec::new();
    let mut outside = Vec::new();
    let mut torchscript = false;
    for e in &out.entries {
        let Some(rest) = e.name.strip_prefix(&p) else {
            outside.push((e.header_start, weightport_core::sanitize(&e.name)));
            continue;
        };
        match rest {
            "data.pkl"
            | ".format_version"
            | ".storage_alignment"
            | "byteorder"
            | "version"
            | ".data/version"
            | ".data/serialization_id" => {}
            "constants.pkl" => torchscript = true,
            r if r.starts_with("code/") => torchscript = true,
            r if r
                .strip_prefix("data/")
                .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit())) => {}
            r => extra.push(weightport_core::sanitize(r)),
        }
    }
    for (o, n) in outside {
        anomaly(
            &mut out,
            o,
            true,
            format!(
                "entry `{n}` lies outside the archive prefix `{}/`",
                weightport_core::sanitize(&prefix)
            ),
        );
    }
    if torchscript {
        anomaly(&mut out, 0, true, "TorchScript archive (torch.jit.save: constants.pkl, code/), not a checkpoint; load it with torch.jit.load and save its state_dict()".into());
    }
    out.extra = extra;
    Ok(out)
}

impl ZipLayout {
    /// The entry `<prefix>/<rest>`.
    pub fn get(&self, rest: &str) -> Option<&ZipEntry> {
        let full = format!("{}/{rest}", self.prefix);
        self.entries.iter().find(|e| e.name == full)
    }
}

/// Reads a small or pickle entry into memory (bounded by `cap`).
pub(crate) fn entry_bytes(
    path: &Path,
    map: &Arc<Mmap>,
    e: &ZipEntry,
    cap: u64,
    what: &'static str,
) -> Result<Vec<u8>> {
    if e.usize > cap {
        return Err(Error::Limit {
            at: Location::file(path).at(e.header_start),
            what,
            needed: e.usize,
            limit: cap,
        });
    }
    if e.method == 0 {
        Ok(map[e.data_start as usize..(e.data_start + e.csize) as usize].to_vec())
    } else {
        inflate(map, e.data_start, e.csize, e.usize).map_err(|m| {
            Error::malformed(
                Location::file(path).at(e.data_start),
                Format::PytorchZip,
                format!("`{}`: {m}", weightport_core::sanitize(&e.name)),
            )
        })
    }
}

/// Everything the ZIP reader learned, for `open` and `scan`.
pub(crate) struct ZipParse {
    pub layout: ZipLayout,
    pub parsed: Option<Parsed>,
    pub big_endian: bool,
}

/// Checks the layout and runs the pickle; `inert` keeps foreign objects as inert records
/// ([`Vm::inert_foreign`]).
pub(crate) fn parse(
    path: &Path,
    map: &Arc<Mmap>,
    limits: &VmLimits,
    inert: bool,
) -> Result<ZipParse> {
    let layout = layout(path, map)?;
    if let Some(a) = layout.anomalies.first() {
        let at = Location::file(path).at(a.offset);
        return Err(if a.refused {
            Error::Refused {
                at,
                reason: a.what.clone(),
            }
        } else {
            Error::malformed(at, Format::PytorchZip, a.what.clone())
        });
    }
    let malformed = |o: u64, m: &str| {
        Error::malformed(
            Location::file(path).at(o),
            Format::PytorchZip,
            m.to_string(),
        )
    };
    let pkl = layout
        .get("data.pkl")
        .ok_or_else(|| malformed(0, "no data.pkl record"))?
        .clone();
    if layout.get("version").is_none() && layout.get(".data/version").is_none() {
        return Err(malformed(0, "no version record (torch refuses such files)"));
    }
    let big_endian = match layout.get("byteorder") {
        None => false,
        Some(e) => match entry_bytes(path, map, e, 16, "byteorder record size")?.as_slice() {
            b"little" => false,
            b"big" => true,
            _ => {
                return Err(malformed(
                    e.data_start,
                    "byteorder record is neither `little` nor `big`",
                ))
            }
        },
    };
    let data = entry_bytes(path, map, &pkl, limits.max_pickle_bytes, "data.pkl size")?;
    if pkl.crc != 0 {
        let mut c = flate2::Crc::new();
        c.update(&data);
        if c.sum() != pkl.crc {
            return Err(Error::Refused {
                at: Location::file(path).at(pkl.data_start),
                reason:
                    "data.pkl CRC-32 mismatch: the pickle was altered after the archive was written"
                        .into(),
            });
        }
    }
    let parsed = Vm::new(&data, limits.clone(), PidStyle::Zip, false)
        .inert_foreign(inert)
        .run(false)
        .map_err(|e| {
            if pkl.method == 0 {
                vm_error(path, Format::PytorchZip, pkl.data_start, e)
            } else {
                // A deflated data.pkl: the offset is in the inflated pickle, not the file.
                let note = format!(" (at byte {} of the deflated data.pkl)", e.offset);
                let kind = match e.kind {
                    VmErrorKind::Refused(m) => VmErrorKind::Refused(m + &note),
                    VmErrorKind::Malformed(m) => VmErrorKind::Malformed(m + &note),
                    VmErrorKind::Unsupported(m) => VmErrorKind::Unsupported(m + &note),
                    limit => limit,
                };
                kind_error(Location::file(path), Format::PytorchZip, kind)
            }
        })?;
    Ok(ZipParse {
        layout,
        parsed: Some(parsed),
        big_endian,
    })
}

/// Opens a torch ZIP checkpoint.
pub fn open(path: &Path, opts: &ReadOptions, limits: &VmLimits) -> Result<Checkpoint> {
    let map = map_file(path)?;
    let zp = parse(path, &map, limits, opts.inert_objects)?;
    let parsed = zp.parsed.expect("strict parse");
    let sel = crate::source::select_for(path, Format::PytorchZip, &parsed, opts, limits)?;
    let mut keyed = HashMap::new();
    for e in &zp.layout.entries {
        if let Some(k) = e.name.strip_prefix(&format!("{}/data/", zp.layout.prefix)) {
            let data = if e.method == 0 {
                RecordData::Stored {
                    start: e.data_start,
                }
            } else {
                RecordData::Deflated {
                    start: e.data_start,
                    csize: e.csize,
                }
            };
            keyed.insert(
                k.to_string(),
                Record {
                    name: e.name.clone(),
                    data,
                    len: e.usize,
                },
            );
        }
    }
    Checkpoint::build(
        path,
        Format::PytorchZip,
        map,
        keyed,
        &parsed.storages,
        sel,
        zp.big_endian,
        parsed.protocol,
        opts,
    )
}
