//! The legacy stacked format (torch 0.1.10 – 1.5, or `_use_new_zipfile_serialization=False`),
//! docs/specs/pickle.md §1.4.
//!
//! Byte layout: five pickles back to back — the magic number `0x1950A86A20F9469CFC6C`, the
//! protocol version `1001`, `sys_info` (a dict of primitives), the object (persistent ids are
//! `('storage', cls, key, location, numel, view_metadata)`), and the list of storage keys —
//! then, for each key in that list, an `int64` element count followed by the raw storage.
//! Pickles 1, 2, 3 and 5 may only hold constants: any global or persistent id in them is
//! refused (payloads hide there: GHSA-97f8-7cmv-76j2).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;
use weightport_core::{Error, Format, Location, ReadOptions, Result};

use crate::select;
use crate::source::{vm_error, Checkpoint, Record, RecordData};
use crate::value::Node;
use crate::vm::{Parsed, PidStyle, Vm, VmLimits};

/// `0x1950A86A20F9469CFC6C` in decimal.
pub const MAGIC: &str = "119547037146038801333356";

/// The first bytes of a legacy checkpoint: `PROTO 2`, `LONG1` of 10 bytes, the magic.
pub fn magic_prefix() -> [u8; 14] {
    let mut b = [0u8; 14];
    b[..4].copy_from_slice(b"\x80\x02\x8a\x0a");
    b[4..].copy_from_slice(&0x1950A86A20F9469CFC6Cu128.to_le_bytes()[..10]);
    b
}

/// True when `head` begins with a pickle (any protocol, 0 to 5) of the legacy magic number:
/// `torch.save(..., _use_new_zipfile_serialization=False, pickle_protocol=N)` writes it first.
pub fn starts_with_magic(head: &[u8]) -> bool {
    if head.starts_with(&magic_prefix()) {
        return true;
    }
    let head = &head[..head.len().min(64)];
    Vm::new(head, VmLimits::default(), PidStyle::Forbidden, false)
        .run(true)
        .is_ok_and(|p| matches!(p.arena.get(p.root), Node::BigInt(s) if s == MAGIC))
}

/// The refusal of a pickle that is not a checkpoint (no legacy magic number first), naming
/// the globals a static walk of it finds so the user sees what it holds.
fn raw_pickle(path: &Path, map: &[u8]) -> Error {
    let walk = crate::walk::walk(map, VmLimits::default().max_opcodes);
    let mut names: Vec<String> = walk
        .globals
        .iter()
        .map(|g| {
            format!(
                "{}.{}",
                weightport_core::sanitize(&g.module),
                weightport_core::sanitize(&g.name)
            )
        })
        .collect();
    names.dedup();
    let named = match names.len() {
        0 => String::new(),
        n => format!(
            "; it names {}{}",
            names[..n.min(5)].join(", "),
            if n > 5 { ", ..." } else { "" }
        ),
    };
    Error::Refused {
        at: Location::file(path),
        reason: format!(
            "a raw pickle, not a PyTorch checkpoint (it is neither a torch ZIP nor begins with \
             the legacy magic number){named}; refused without running it"
        ),
    }
}

/// The parsed pickles.
pub(crate) struct LegacyParse {
    pub object: Parsed,
    pub keys: Vec<String>,
    pub data_start: u64,
    pub little_endian: bool,
}

fn constant(path: &Path, data: &[u8], base: u64, limits: &VmLimits, what: &str) -> Result<Parsed> {
    let p = Vm::new(data, limits.clone(), PidStyle::Forbidden, false)
        .run(true)
        .map_err(|e| vm_error(path, Format::PytorchLegacy, base, e))?;
    if let Some(g) = p.globals.first() {
        return Err(Error::Refused {
            at: Location::file(path).at(base + g.offset),
            reason: format!(
                "global `{}.{}` in the {what} pickle, which may only hold constants",
                weightport_core::sanitize(&g.module),
                weightport_core::sanitize(&g.name)
            ),
        });
    }
    Ok(p)
}

pub(crate) fn parse(
    path: &Path,
    map: &[u8],
    limits: &VmLimits,
    inert: bool,
) -> Result<LegacyParse> {
    let bad =
        |o: u64, m: String| Error::malformed(Location::file(path).at(o), Format::PytorchLegacy, m);
    let mut pos = 0u64;
    if !starts_with_magic(map) {
        return Err(raw_pickle(path, map));
    }
    let p1 = constant(path, map, 0, limits, "magic-number")?;
    if !matches!(p1.arena.get(p1.root), Node::BigInt(s) if s == MAGIC) {
        return Err(Error::Refused {
            at: Location::file(path),
            reason: "a raw pickle, not a PyTorch checkpoint (its first pickle is not the legacy magic number); refused without running it".into(),
        });
    }
    pos += p1.end as u64;
    let p2 = constant(path, &map[pos as usize..], pos, limits, "protocol-version")?;
    if !matches!(p2.arena.get(p2.root), Node::Int(1001)) {
        return Err(bad(pos, "legacy protocol version is not 1001".into()));
    }
    pos += p2.end as u64;
    let p3 = constant(path, &map[pos as usize..], pos, limits, "sys_info")?;
    let mut little_endian = true;
    match select::dict_items(&p3.arena, p3.root) {
        Some(items) => {
            for (k, v) in items {
                if p3.arena.str(k) == Some("little_endian") {
                    little_endian = !matches!(p3.arena.get(v), Node::Bool(false));
                }
            }
        }
        None => return Err(bad(pos, "sys_info is not a dict".into())),
    }
    pos += p3.end as u64;
    let object = Vm::new(
        &map[pos as usize..],
        limits.clone(),
        PidStyle::Legacy,
        false,
    )
    .inert_foreign(inert)
    .run(true)
    .map_err(|e| vm_error(path, Format::PytorchLegacy, pos, e))?;
    pos += object.end as u64;
    let p5 = constant(path, &map[pos as usize..], pos, limits, "storage-key list")?;
    let keys = match p5.arena.get(p5.root) {
        Node::List(v) => v
            .iter()
            .map(|&i| match p5.arena.str(i) {
                Some(s)
                    if !s.is_empty() && s.len() <= 40 && s.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    Ok(s.to_string())
                }
                _ => Err(Error::Refused {
                    at: Location::file(path).at(pos),
                    reason: "storage key list holds a value that is not a decimal string".into(),
                }),
            })
            .collect::<Result<Vec<_>>>()?,
        _ => return Err(bad(pos, "storage key list is not a list".into())),
    };
    pos += p5.end as u64;
    Ok(LegacyParse {
        object,
        keys,
        data_start: pos,
        little_endian,
    })
}

/// The raw storage sections after the pickles: for each listed key in order, an 8-byte
/// element count (in the file's byte order) that must match the storage's persistent id, then
/// exactly the storage's bytes, inside the file.
fn storage_records(
    path: &Path,
    map: &[u8],
    lp: &LegacyParse,
    by_key: &HashMap<&str, &crate::torch::StorageRef>,
) -> Result<HashMap<String, Record>> {
    let mut keyed = HashMap::new();
    let mut pos = lp.data_start;
    let len = map.len() as u64;
    for k in &lp.keys {
        let s = by_key.get(k.as_str()).ok_or_else(|| {
            Error::malformed(
                Location::file(path).at(pos),
                Format::PytorchLegacy,
                format!("storage key `{k}` is listed but never used"),
            )
        })?;
        let hdr = map.get(pos as usize..pos as usize + 8).ok_or_else(|| {
            Error::malformed(
                Location::file(path).at(pos),
                Format::PytorchLegacy,
                "truncated storage section",
            )
        })?;
        let mut h = [0u8; 8];
        h.copy_from_slice(hdr);
        let numel = if lp.little_endian {
            u64::from_le_bytes(h)
        } else {
            u64::from_be_bytes(h)
        };
        if numel != s.numel {
            return Err(Error::Refused {
                at: Location::file(path).at(pos),
                reason: format!(
                    "storage `{k}` raw section says {numel} elements, its persistent id {}",
                    s.numel
                ),
            });
        }
        let bytes = s.root_bytes().ok_or_else(|| Error::Refused {
            at: Location::file(path).at(pos),
            reason: format!("storage `{k}` byte size overflows"),
        })?;
        let start = pos + 8;
        if start.checked_add(bytes).is_none_or(|e| e > len) {
            return Err(Error::malformed(
                Location::file(path).at(pos),
                Format::PytorchLegacy,
                format!("storage `{k}` ({bytes} bytes) runs past the end of the file"),
            ));
        }
        keyed.insert(
            k.clone(),
            Record {
                name: format!("storage {k}"),
                data: RecordData::Stored { start },
                len: bytes,
            },
        );
        pos = start + bytes;
    }
    Ok(keyed)
}

/// Opens a legacy checkpoint.
pub fn open(
    path: &Path,
    opts: &ReadOptions,
    limits: &VmLimits,
    map: Arc<Mmap>,
) -> Result<Checkpoint> {
    let lp = parse(path, &map, limits, opts.inert_objects)?;
    let parsed = &lp.object;
    let sel = crate::source::select_for(path, Format::PytorchLegacy, parsed, opts, limits)?;
    let by_key: HashMap<&str, &crate::torch::StorageRef> = parsed
        .storages
        .iter()
        .map(|s| (s.key.as_str(), s))
        .collect();
    let keyed = storage_records(path, &map, &lp, &by_key)?;
    Checkpoint::build(
        path,
        Format::PytorchLegacy,
        map,
        keyed,
        &parsed.storages,
        sel,
        !lp.little_endian,
        parsed.protocol,
        opts,
    )
}
