//! The legacy stacked format (torch 0.1.10 – 1.5, or `_use_new_zipfile_serialization=False`),
//! docs/specs/pickle.md §1.4.
//!
//! Byte layout: five pickles back to back — the magic number `0x1950A86A20F9469CFC6C`, the
//! protocol version `1001`, `sys_info` (a dict of primitives), the object (persistent ids are
//! `('storage', cls, key, location, numel, view_metadata)`), and the list of storage keys —
//! then, for each key in that list, an `int64` element count followed by the raw storage.
//! Pickles 1, 2, 3 and 5 may only hold constants: any global or persistent id in them is
//! refused (payloads hide there: GHSA-97f8-7cmv-76j2).
//!
//! The file is a [`ByteSource`]. Each pickle runs over the file's bytes from its start on: the
//! map when there is one; otherwise growing windows of them (64 KiB, then 4× larger), until the
//! pickle ends inside a window or the window is the rest of the file. A run that succeeds read
//! nothing past its window, so it is the run over the whole rest; a failed one is retried on a
//! larger window, so its error is the one the whole rest gives. The size cap on a pickle is
//! checked against the whole rest first, as the interpreter checks it.

use std::collections::HashMap;
use std::sync::Arc;

use weightport_core::{ByteSource, Error, Format, Location, ReadOptions, Result};

use crate::select;
use crate::source::{vm_error, Checkpoint, Record, RecordData};
use crate::value::Node;
use crate::vm::{Parsed, PidStyle, Vm, VmError, VmErrorKind, VmLimits};

/// `0x1950A86A20F9469CFC6C` in decimal.
pub(crate) const MAGIC: &str = "119547037146038801333356";

/// The first bytes of a legacy checkpoint: `PROTO 2`, `LONG1` of 10 bytes, the magic.
pub(crate) fn magic_prefix() -> [u8; 14] {
    let mut b = [0u8; 14];
    b[..4].copy_from_slice(b"\x80\x02\x8a\x0a");
    b[4..].copy_from_slice(&0x1950A86A20F9469CFC6Cu128.to_le_bytes()[..10]);
    b
}

/// True when `head` begins with a pickle (any protocol, 0 to 5) of the legacy magic number:
/// `torch.save(..., _use_new_zipfile_serialization=False, pickle_protocol=N)` writes it first.
pub(crate) fn starts_with_magic(head: &[u8]) -> bool {
    if head.starts_with(&magic_prefix()) {
        return true;
    }
    let head = &head[..head.len().min(64)];
    Vm::new(head, VmLimits::default(), PidStyle::Forbidden, false)
        .run(true)
        .is_ok_and(|p| matches!(p.arena.get(p.root), Node::BigInt(s) if s == MAGIC))
}

/// The first window of an unmapped file a pickle runs over.
const WINDOW: u64 = 64 << 10;

/// `run` over the bytes of `src` from `pos` on, as the module docs describe: the map, or
/// growing windows until `run` succeeds or the window is the whole rest. The outer error is a
/// read failure.
fn over_rest<T, E>(
    src: &dyn ByteSource,
    pos: u64,
    mut run: impl FnMut(&[u8]) -> std::result::Result<T, E>,
) -> Result<std::result::Result<T, E>> {
    if let Some(map) = src.map() {
        return Ok(run(map.get(pos as usize..).unwrap_or(&[])));
    }
    let rest = src.len().saturating_sub(pos);
    let mut n = rest.min(WINDOW);
    loop {
        let r = run(&src.range(pos, n)?);
        if r.is_ok() || n == rest {
            return Ok(r);
        }
        n = rest.min(n.saturating_mul(4));
    }
}

/// Runs one pickle of the stack, starting at `pos` of `src`: the interpreter's size cap
/// against the whole rest, then `run` through [`over_rest`].
fn run_pickle(
    src: &dyn ByteSource,
    pos: u64,
    limits: &VmLimits,
    run: impl FnMut(&[u8]) -> std::result::Result<Parsed, VmError>,
) -> Result<std::result::Result<Parsed, VmError>> {
    let rest = src.len().saturating_sub(pos);
    if rest > limits.max_pickle_bytes {
        return Ok(Err(VmError {
            offset: 0,
            kind: VmErrorKind::Limit {
                what: "pickle size",
                needed: rest,
                limit: limits.max_pickle_bytes,
            },
        }));
    }
    over_rest(src, pos, run)
}

/// The refusal of a pickle that is not a checkpoint (no legacy magic number first), naming
/// the globals a static walk of it finds so the user sees what it holds.
fn raw_pickle(src: &dyn ByteSource) -> Result<Error> {
    let path = src.name();
    let max = VmLimits::default().max_opcodes;
    let walked = over_rest(src, 0, |data| {
        let w = crate::walk::walk(data, max);
        if w.end.is_some() {
            Ok(w)
        } else {
            Err(w)
        }
    })?;
    let walk = walked.unwrap_or_else(|w| w);
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
    Ok(Error::Refused {
        at: Location::file(path),
        reason: format!(
            "a raw pickle, not a PyTorch checkpoint (it is neither a torch ZIP nor begins with \
             the legacy magic number){named}; refused without running it"
        ),
    })
}

/// The parsed pickles.
pub(crate) struct LegacyParse {
    pub object: Parsed,
    pub keys: Vec<String>,
    pub data_start: u64,
    pub little_endian: bool,
}

/// Pickle `what` at `base` of `src`, which may hold constants only.
fn constant(src: &dyn ByteSource, base: u64, limits: &VmLimits, what: &str) -> Result<Parsed> {
    let path = src.name();
    let p = run_pickle(src, base, limits, |data| {
        Vm::new(data, limits.clone(), PidStyle::Forbidden, false).run(true)
    })?
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

pub(crate) fn parse(src: &dyn ByteSource, limits: &VmLimits, inert: bool) -> Result<LegacyParse> {
    let path = src.name();
    let bad =
        |o: u64, m: String| Error::malformed(Location::file(path).at(o), Format::PytorchLegacy, m);
    let mut pos = 0u64;
    if !starts_with_magic(&src.head(64)?) {
        return Err(raw_pickle(src)?);
    }
    let p1 = constant(src, 0, limits, "magic-number")?;
    if !matches!(p1.arena.get(p1.root), Node::BigInt(s) if s == MAGIC) {
        return Err(Error::Refused {
            at: Location::file(path),
            reason: "a raw pickle, not a PyTorch checkpoint (its first pickle is not the legacy magic number); refused without running it".into(),
        });
    }
    pos += p1.end as u64;
    let p2 = constant(src, pos, limits, "protocol-version")?;
    if !matches!(p2.arena.get(p2.root), Node::Int(1001)) {
        return Err(bad(pos, "legacy protocol version is not 1001".into()));
    }
    pos += p2.end as u64;
    let p3 = constant(src, pos, limits, "sys_info")?;
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
    let object = run_pickle(src, pos, limits, |data| {
        Vm::new(data, limits.clone(), PidStyle::Legacy, false)
            .inert_foreign(inert)
            .run(true)
    })?
    .map_err(|e| vm_error(path, Format::PytorchLegacy, pos, e))?;
    pos += object.end as u64;
    let p5 = constant(src, pos, limits, "storage-key list")?;
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
    src: &dyn ByteSource,
    lp: &LegacyParse,
    by_key: &HashMap<&str, &crate::torch::StorageRef>,
) -> Result<HashMap<String, Record>> {
    let path = src.name();
    let mut keyed = HashMap::new();
    let mut pos = lp.data_start;
    let len = src.len();
    for k in &lp.keys {
        let s = by_key.get(k.as_str()).ok_or_else(|| {
            Error::malformed(
                Location::file(path).at(pos),
                Format::PytorchLegacy,
                format!("storage key `{k}` is listed but never used"),
            )
        })?;
        if pos.checked_add(8).is_none_or(|end| end > len) {
            return Err(Error::malformed(
                Location::file(path).at(pos),
                Format::PytorchLegacy,
                "truncated storage section",
            ));
        }
        let mut h = [0u8; 8];
        src.read_at(pos, &mut h)?;
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

/// Opens the legacy checkpoint `src`.
pub(crate) fn open(
    opts: &ReadOptions,
    limits: &VmLimits,
    src: Arc<dyn ByteSource>,
) -> Result<Checkpoint> {
    let path = &src.name().to_path_buf();
    let lp = parse(&*src, limits, opts.inert_objects)?;
    let parsed = &lp.object;
    let sel = crate::source::select_for(path, Format::PytorchLegacy, parsed, opts, limits)?;
    let by_key: HashMap<&str, &crate::torch::StorageRef> = parsed
        .storages
        .iter()
        .map(|s| (s.key.as_str(), s))
        .collect();
    let keyed = storage_records(&*src, &lp, &by_key)?;
    Checkpoint::build(
        path,
        Format::PytorchLegacy,
        src,
        keyed,
        &parsed.storages,
        sel,
        !lp.little_endian,
        parsed.protocol,
        opts,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use weightport_core::bytes::InMemory;

    /// A protocol-2 pickle of a list of `n` small ints (2 bytes each), then other bytes.
    fn list_pickle(n: usize) -> Vec<u8> {
        let mut b = b"\x80\x02](".to_vec();
        for _ in 0..n {
            b.extend_from_slice(b"K\x07");
        }
        b.extend_from_slice(b"e.the next pickle");
        b
    }

    /// A pickle longer than the first window of an unmapped file reads as from the map, whole
    /// or cut anywhere (the error of a cut one is the whole rest's), and the size cap counts
    /// the whole rest, not the window.
    #[test]
    fn pickles_past_the_first_window_read_as_from_the_map() {
        let b = list_pickle(50_000);
        let limits = VmLimits::default();
        let run = |src: &dyn ByteSource, limits: &VmLimits| {
            constant(src, 0, limits, "test")
                .map(|p| p.end)
                .map_err(|e| e.to_string())
        };
        for cut in [b.len(), 100_006, 100_005, 70_000, 65_536, 1_000, 3, 0] {
            let mapped = run(&InMemory::new("l.pt", &b[..cut]), &limits);
            let ranged = run(&InMemory::new("l.pt", &b[..cut]).unmapped(), &limits);
            assert_eq!(ranged, mapped, "cut at {cut}");
            assert_eq!(mapped.is_ok(), cut >= 100_006, "cut at {cut}: {mapped:?}");
        }
        let small = VmLimits {
            max_pickle_bytes: 70_000,
            ..VmLimits::default()
        };
        let mapped = run(&InMemory::new("l.pt", &b[..]), &small);
        let ranged = run(&InMemory::new("l.pt", &b[..]).unmapped(), &small);
        assert_eq!(ranged, mapped);
        assert!(mapped.unwrap_err().contains("pickle size"));
    }
}
