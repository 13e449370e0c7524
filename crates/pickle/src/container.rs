//! The torch ZIP container (docs/specs/pickle.md §1.2).
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
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;
use weightport_core::archive::{self, Concern, Method};
use weightport_core::mapped;
use weightport_core::{ByteSource, Error, Format, Location, ReadOptions, Result};

use crate::source::{inflate, kind_error, vm_error, Checkpoint, Record, RecordData};
use crate::vm::{Parsed, PidStyle, Vm, VmErrorKind, VmLimits};

/// One ZIP entry as the central directory and its local header describe it.
#[derive(Debug, Clone)]
pub(crate) struct ZipEntry {
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
pub(crate) struct Anomaly {
    /// Absolute byte offset.
    pub offset: u64,
    /// Whether it makes the file unsafe (refused) or just malformed.
    pub refused: bool,
    /// Description.
    pub what: String,
}

/// The validated layout of a torch ZIP.
#[derive(Debug, Clone, Default)]
pub(crate) struct ZipLayout {
    /// The archive prefix.
    pub prefix: String,
    /// Entries in central-directory order.
    pub entries: Vec<ZipEntry>,
    /// Problems, in the order found (the reader refuses on the first).
    pub anomalies: Vec<Anomaly>,
    /// Entries under the prefix that torch does not write (reported, ignored).
    pub extra: Vec<String>,
}

/// Opens the map read-only.
pub(crate) fn map_file(path: &Path) -> Result<Arc<Mmap>> {
    let (file, _) = mapped::open_input(path, ", expected a file")?;
    Ok(Arc::new(mapped::map(&file, path)?))
}

/// How many first bytes tell the containers apart (a tar header's `ustar` ends at 262).
pub(crate) const HEAD: usize = 512;

/// What a non-ZIP file is, for messages.
pub(crate) fn is_tar(b: &[u8]) -> bool {
    b.get(257..262) == Some(b"ustar")
}

/// Parses and checks the ZIP structure of `src` (`path` names it). Fatal structural errors
/// (not a ZIP at all) are returned as errors; rule violations are collected as anomalies.
pub(crate) fn layout(
    path: &Path,
    src: &dyn ByteSource,
    limits: &weightport_core::Limits,
) -> Result<ZipLayout> {
    let malformed =
        |o: u64, m: String| Error::malformed(Location::file(path).at(o), Format::PytorchZip, m);
    not_zip(path, &src.head(HEAD)?)?;
    let table = archive::entries(src, limits).map_err(|e| match e {
        archive::TableError::Malformed(m, o) => malformed(o, m),
        archive::TableError::TooMany(n, cap) => Error::Limit {
            at: Location::file(path),
            what: "ZIP entry count",
            needed: n,
            limit: cap,
        },
        archive::TableError::Read(e) => e,
    })?;
    let mut out = ZipLayout {
        anomalies: table.anomalies.iter().map(anomaly).collect(),
        entries: table.entries.iter().map(zip_entry).collect(),
        ..ZipLayout::default()
    };
    if let Some((a, b)) = table.case_twins() {
        out.anomalies.push(case_twins(a, b));
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
    out.prefix = prefix.to_string();
    check_prefix(&mut out);
    Ok(out)
}

/// Refuses what is not a ZIP at byte 0 (`head`: its first bytes), naming what it is.
fn not_zip(path: &Path, head: &[u8]) -> Result<()> {
    if head.starts_with(b"PK\x03\x04") {
        return Ok(());
    }
    if is_tar(head) {
        return Err(Error::Refused {
            at: Location::file(path),
            reason: "legacy tar-format PyTorch checkpoint (torch <= 0.1.9), which torch itself refuses under weights_only; re-save it with a current torch".into(),
        });
    }
    Err(Error::NotFormat {
        path: path.to_path_buf(),
        expected: Format::PytorchZip,
        what: "is not a PyTorch checkpoint (no ZIP local header at offset 0)".into(),
    })
}

/// The shared table's anomaly under torch's policy: an archive tools read differently is
/// refused (a pickle is code), as are bombs and encrypted or patched entries; an unknown method
/// or inconsistent stored sizes are malformed.
fn anomaly(a: &archive::Anomaly) -> Anomaly {
    let refused = match a.concern {
        Concern::Ambiguous | Concern::Bomb => true,
        Concern::Unsupported => a.what.contains("flag"),
        Concern::Malformed => false,
    };
    Anomaly {
        offset: a.offset,
        refused,
        what: a.what.clone(),
    }
}

/// Two entries torch cannot tell apart: its reader looks names up ignoring letter case.
fn case_twins(a: &archive::Entry, b: &archive::Entry) -> Anomaly {
    Anomaly {
        offset: b.central_start,
        refused: true,
        what: format!(
            "entries `{}` and `{}` differ only in letter case: torch's ZIP reader (miniz) looks \
             names up ignoring case, so which of them it loads depends on its sort order",
            weightport_core::sanitize(&a.name),
            weightport_core::sanitize(&b.name)
        ),
    }
}

fn zip_entry(e: &archive::Entry) -> ZipEntry {
    ZipEntry {
        name: e.name.clone(),
        method: match e.method {
            Some(Method::Stored) => 0,
            Some(Method::Deflated) => 8,
            None => u16::MAX,
        },
        header_start: e.header_start,
        data_start: e.data_start,
        csize: e.csize,
        usize: e.size,
        crc: e.crc,
    }
}

/// Entries outside the prefix and TorchScript archives are anomalies; entries under the prefix
/// that torch does not write are listed.
fn check_prefix(out: &mut ZipLayout) {
    let p = format!("{}/", out.prefix);
    let mut torchscript = false;
    for e in &out.entries {
        let Some(rest) = e.name.strip_prefix(&p) else {
            out.anomalies.push(Anomaly {
                offset: e.header_start,
                refused: true,
                what: format!(
                    "entry `{}` lies outside the archive prefix `{}`",
                    weightport_core::sanitize(&e.name),
                    weightport_core::sanitize(&p)
                ),
            });
            continue;
        };
        // torch finds records ignoring case (`ZipLayout::get`), so they are told by the
        // folded name.
        match rest.to_ascii_lowercase().as_str() {
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
            _ => out.extra.push(weightport_core::sanitize(rest)),
        }
    }
    if torchscript {
        out.anomalies.push(Anomaly {
            offset: 0,
            refused: true,
            what: "TorchScript archive (torch.jit.save: constants.pkl, code/), not a checkpoint; load it with torch.jit.load and save its state_dict()".into(),
        });
    }
}

impl ZipLayout {
    /// The entry `<prefix>/<rest>` as torch finds it: letter case ignored
    /// ([`archive::NameRule::AsciiCaseless`]).
    pub(crate) fn get(&self, rest: &str) -> Option<&ZipEntry> {
        let full = format!("{}/{rest}", self.prefix);
        archive::NameRule::AsciiCaseless.find(&self.entries, |e| &e.name, &full)
    }
}

/// Reads a small or pickle entry of `src` into memory (bounded by `cap`).
pub(crate) fn entry_bytes(
    path: &Path,
    src: &dyn ByteSource,
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
        Ok(src.range(e.data_start, e.csize)?.into_owned())
    } else {
        let crc = (e.crc != 0).then_some(e.crc);
        inflate(src, e.data_start, e.csize, e.usize, crc)?.map_err(|m| {
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

/// Reads `data.pkl` (bounded, its CRC-32 checked when recorded) and runs the pickle; an
/// error in a deflated `data.pkl` names its offset in the inflated pickle.
fn run_data_pkl(
    path: &Path,
    src: &dyn ByteSource,
    pkl: &ZipEntry,
    limits: &VmLimits,
    inert: bool,
) -> Result<Parsed> {
    let data = entry_bytes(path, src, pkl, limits.max_pickle_bytes, "data.pkl size")?;
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
    Vm::new(&data, limits.clone(), PidStyle::Zip, false)
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
        })
}

/// Checks the layout and runs the pickle; `inert` keeps foreign objects as inert records
/// ([`Vm::inert_foreign`]).
pub(crate) fn parse(
    path: &Path,
    src: &dyn ByteSource,
    opts: &ReadOptions,
    limits: &VmLimits,
) -> Result<ZipParse> {
    let inert = opts.inert_objects;
    let layout = layout(path, src, &opts.limits)?;
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
        Some(e) => match entry_bytes(path, src, e, 16, "byteorder record size")?.as_slice() {
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
    let parsed = run_data_pkl(path, src, &pkl, limits, inert)?;
    Ok(ZipParse {
        layout,
        parsed: Some(parsed),
        big_endian,
    })
}

fn storage_record(e: &ZipEntry) -> Record {
    let data = if e.method == 0 {
        RecordData::Stored {
            start: e.data_start,
        }
    } else {
        RecordData::Deflated {
            start: e.data_start,
            csize: e.csize,
            crc: (e.crc != 0).then_some(e.crc),
        }
    };
    Record {
        name: e.name.clone(),
        data,
        len: e.usize,
    }
}

/// Opens the torch ZIP checkpoint `src`.
pub(crate) fn open(
    opts: &ReadOptions,
    limits: &VmLimits,
    src: Arc<dyn ByteSource>,
) -> Result<Checkpoint> {
    let path = &src.name().to_path_buf();
    let zp = parse(path, &*src, opts, limits)?;
    let parsed = zp.parsed.expect("strict parse");
    let sel = crate::source::select_for(path, Format::PytorchZip, &parsed, opts, limits)?;
    // Each storage's record as torch finds it: `data/<key>` looked up ignoring case.
    let mut keyed = HashMap::new();
    for s in &parsed.storages {
        if let Some(e) = zp.layout.get(&format!("data/{}", s.key)) {
            keyed.insert(s.key.clone(), storage_record(e));
        }
    }
    Checkpoint::build(
        path,
        Format::PytorchZip,
        src,
        keyed,
        &parsed.storages,
        sel,
        zp.big_endian,
        parsed.protocol,
        opts,
    )
}
