//! Deltas: the changed row blocks of NEW against OLD, as a safetensors file, and applying one.
//!
//! A patch is an ordinary safetensors file. Each tensor is one block of consecutive changed
//! slabs ("rows": indices of axis 0) of one tensor of NEW, named `NAME[a:b]` (a scalar tensor:
//! `NAME`), with NEW's dtype and shape `[b - a, …]`; a block of a ggml block type is `U8
//! [b - a, bytes per slab]`. Its `__metadata__`:
//!
//! | key | value |
//! |---|---|
//! | `weightport.patch` | `1` |
//! | `weightport.container` | `safetensors` or `gguf` |
//! | `weightport.size` | the file's length (OLD's and NEW's) |
//! | `weightport.base_sha256` | sha256 of OLD |
//! | `weightport.result_sha256` | sha256 of NEW |
//!
//! A delta needs OLD and NEW to differ only inside tensor data (same header, same padding);
//! anything else is a conversion. [`apply`] checks OLD's sha256, and that OLD with the blocks
//! written is NEW's sha256, before it writes a byte; it then writes through the edit
//! transaction (journal, read-back), so the result is byte-identical to NEW or OLD is unchanged.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use weightport_core::staging::sync_dir;
use weightport_core::{
    sanitize, shown, DType, Error, Location, Metadata, Result, TensorInfo, TensorSink, TensorSource,
};

use crate::lock::settle;
use crate::ops::{Aux, AuxRef, Step, TensorEdit};
use crate::select::{Item, Selection};
use crate::target::{Placed, Target};
use crate::txn::{EditOptions, EditReport};

const KEY: &str = "weightport.patch";
const CONTAINER: &str = "weightport.container";
const SIZE: &str = "weightport.size";
const BASE: &str = "weightport.base_sha256";
const RESULT: &str = "weightport.result_sha256";
const STEP: usize = 8 << 20;

/// One block of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The tensor.
    pub tensor: String,
    /// Slabs `[a, b)` of axis 0 (`(0, 1)` for a scalar).
    pub rows: (u64, u64),
    /// Bytes.
    pub bytes: u64,
}

/// What a delta wrote.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DeltaReport {
    /// The patch file.
    pub patch: PathBuf,
    /// Its blocks, in file order.
    pub blocks: Vec<Block>,
    /// Tensors with at least one changed slab.
    pub tensors_changed: usize,
    /// Tensors compared.
    pub tensors: usize,
    /// Length of the patch file.
    pub patch_bytes: u64,
    /// Length of OLD (and NEW).
    pub model_bytes: u64,
    /// sha256 of OLD.
    pub base_sha256: String,
    /// sha256 of NEW.
    pub result_sha256: String,
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes the changed row blocks of `new` against `old` to `out` (module docs). `force` allows
/// replacing an existing `out` (never one of the inputs).
pub fn delta(old: &Path, new: &Path, out: &Path, force: bool) -> Result<DeltaReport> {
    let (a, b) = (Target::open_read(old)?, Target::open_read(new)?);
    for t in [&a, &b] {
        if t.files.len() != 1 {
            return Err(Error::Usage(format!(
                "{}: delta works on single files; for a repo, make one delta per shard",
                shown(&t.given)
            )));
        }
    }
    let _guards = (settle(old)?, settle(new)?);
    refuse_input_as_output(out, &[&a, &b])?;
    if a.container != b.container || a.files[0].size != b.files[0].size {
        return Err(Error::Usage(format!("{} and {}: different containers or lengths; a delta describes changed tensor bytes of one layout (use convert)", shown(old), shown(new))));
    }
    let (fa, fb) = (open_side(&a)?, open_side(&b)?);
    let (changed, sha_a, sha_b) = compare_files(&a, &b, &fa, &fb)?;
    let blocks = blocks_of(&b, &changed);
    let mut meta = BTreeMap::new();
    meta.insert(KEY.to_string(), "1".to_string());
    meta.insert(CONTAINER.to_string(), b.container.name().to_string());
    meta.insert(SIZE.to_string(), b.files[0].size.to_string());
    meta.insert(BASE.to_string(), sha_a.clone());
    meta.insert(RESULT.to_string(), sha_b.clone());
    let patch_bytes = write_patch(&b, &fb, &blocks, out, meta, force)?;
    Ok(DeltaReport {
        patch: out.to_path_buf(),
        tensors_changed: changed.iter().filter(|c| !c.is_empty()).count(),
        tensors: b.tensors.len(),
        blocks: blocks
            .into_iter()
            .map(|(i, r)| Block {
                tensor: b.tensors[i].name.clone(),
                rows: r,
                bytes: (r.1 - r.0) * b.tensors[i].slab(),
            })
            .collect(),
        patch_bytes,
        model_bytes: b.files[0].size,
        base_sha256: sha_a,
        result_sha256: sha_b,
    })
}

/// The bytes of a delta's base or result: a local file, or a remote input's object.
enum Side {
    Local(File),
    Remote(Arc<dyn weightport_core::ByteSource>),
}

impl Side {
    /// Fills `buf` with the bytes at `pos` of `t`'s file.
    fn read_exact_at(&self, t: &Target, buf: &mut [u8], pos: u64) -> Result<()> {
        match self {
            Side::Local(f) => f
                .read_exact_at(buf, pos)
                .map_err(|e| Error::io(&t.files[0].shown, "read", e)),
            Side::Remote(s) => s.read_at(pos, buf),
        }
    }
}

fn open_side(t: &Target) -> Result<Side> {
    match crate::target::remote_source(&t.files[0].path, false)? {
        Some(src) => Ok(Side::Remote(src)),
        None => open(t).map(Side::Local),
    }
}

fn open(t: &Target) -> Result<File> {
    File::open(&t.files[0].path).map_err(|e| Error::io(&t.files[0].shown, "open", e))
}

fn refuse_input_as_output(out: &Path, inputs: &[&Target]) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = std::fs::metadata(out) {
        if inputs
            .iter()
            .flat_map(|t| &t.files)
            .any(|f| (f.dev, f.ino) == (m.dev(), m.ino()))
        {
            return Err(Error::Usage(format!(
                "{}: is an input; an output never replaces its input",
                shown(out)
            )));
        }
    }
    Ok(())
}

/// Reads both files once, front to back: their sha256s and, per tensor, the changed slabs.
fn compare_files(
    a: &Target,
    b: &Target,
    fa: &Side,
    fb: &Side,
) -> Result<(Vec<Vec<u64>>, String, String)> {
    let mut order: Vec<usize> = (0..b.tensors.len()).collect();
    order.sort_by_key(|&i| b.tensors[i].offset);
    let mut changed: Vec<Vec<u64>> = vec![Vec::new(); b.tensors.len()];
    let (mut ha, mut hb) = (Sha256::new(), Sha256::new());
    let (mut ba, mut bb) = (vec![0u8; STEP], vec![0u8; STEP]);
    let size = a.files[0].size;
    let mut pos = 0u64;
    while pos < size {
        let n = (size - pos).min(STEP as u64) as usize;
        fa.read_exact_at(a, &mut ba[..n], pos)?;
        fb.read_exact_at(b, &mut bb[..n], pos)?;
        ha.update(&ba[..n]);
        hb.update(&bb[..n]);
        mark_changes(b, &order, pos, &ba[..n], &bb[..n], &mut changed)?;
        pos += n as u64;
    }
    Ok((changed, hex(&ha.finalize()), hex(&hb.finalize())))
}

/// Records the slabs of `b`'s tensors where `x` and `y` (the bytes at `pos`) differ; a
/// difference outside every tensor is refused.
fn mark_changes(
    b: &Target,
    order: &[usize],
    pos: u64,
    x: &[u8],
    y: &[u8],
    changed: &mut [Vec<u64>],
) -> Result<()> {
    let mut k = 0usize;
    while let Some(d) = first_difference(&x[k..], &y[k..]) {
        let at = pos + (k + d) as u64;
        let i = order.partition_point(|&i| b.tensors[i].offset + b.tensors[i].byte_len <= at);
        let Some(&ti) = order.get(i).filter(|&&ti| b.tensors[ti].offset <= at) else {
            return Err(Error::Usage(format!(
                "{}: differs from the base outside tensor data (byte {at}: header or padding); a patch carries tensor bytes only (use convert)",
                shown(&b.files[0].shown)
            )));
        };
        let p = &b.tensors[ti];
        let slab = p.slab().max(1);
        let s = (at - p.offset) / slab;
        if changed[ti].last() != Some(&s) {
            changed[ti].push(s);
        }
        let next = p.offset + (s + 1) * slab;
        if next >= pos + x.len() as u64 {
            break;
        }
        k = (next - pos) as usize;
    }
    Ok(())
}

/// The index of the first byte where `x` and `y` differ (compared a page at a time).
fn first_difference(x: &[u8], y: &[u8]) -> Option<usize> {
    let mut off = 0;
    for (a, b) in x.chunks(4096).zip(y.chunks(4096)) {
        if a != b {
            return a.iter().zip(b).position(|(p, q)| p != q).map(|i| off + i);
        }
        off += a.len();
    }
    None
}

/// Runs of consecutive changed slabs: `(tensor, (a, b))`, in file order.
fn blocks_of(b: &Target, changed: &[Vec<u64>]) -> Vec<(usize, (u64, u64))> {
    let mut out = Vec::new();
    let mut order: Vec<usize> = (0..b.tensors.len()).collect();
    order.sort_by_key(|&i| b.tensors[i].offset);
    for i in order {
        let mut run: Option<(u64, u64)> = None;
        for &s in &changed[i] {
            run = match run {
                Some((a, e)) if e == s => Some((a, s + 1)),
                Some(r) => {
                    out.push((i, r));
                    Some((s, s + 1))
                }
                None => Some((s, s + 1)),
            };
        }
        out.extend(run.map(|r| (i, r)));
    }
    out
}

/// The patch tensor of block `(a, b)` of `p`.
fn block_info(p: &Placed, (a, b): (u64, u64)) -> TensorInfo {
    let slab = p.slab();
    let (name, dtype, shape) = if p.shape.is_empty() {
        (p.name.clone(), p.dtype, Vec::new())
    } else if p.dtype.is_block() {
        (format!("{}[{a}:{b}]", p.name), DType::U8, vec![b - a, slab])
    } else {
        let mut s = p.shape.clone();
        s[0] = b - a;
        (format!("{}[{a}:{b}]", p.name), p.dtype, s)
    };
    TensorInfo {
        name,
        dtype,
        shape,
        byte_len: (b - a) * slab,
    }
}

fn write_patch(
    b: &Target,
    fb: &Side,
    blocks: &[(usize, (u64, u64))],
    out: &Path,
    meta: BTreeMap<String, String>,
    force: bool,
) -> Result<u64> {
    let infos: Vec<TensorInfo> = blocks
        .iter()
        .map(|&(i, r)| block_info(&b.tensors[i], r))
        .collect();
    let mut sink = weightport_safetensors::SafetensorsSink::single(out.to_path_buf(), Some(meta));
    sink.plan(&infos, &Metadata::new())?;
    let mut buf = vec![0u8; STEP];
    for (k, &(i, (a, _))) in blocks.iter().enumerate() {
        let p = &b.tensors[i];
        let start = p.offset + a * p.slab();
        let mut done = 0u64;
        while done < infos[k].byte_len {
            let n = (infos[k].byte_len - done).min(STEP as u64) as usize;
            fb.read_exact_at(b, &mut buf[..n], start + done)?;
            sink.write_at(k, done, &buf[..n])?;
            done += n as u64;
        }
    }
    let mut size = 0;
    for f in Box::new(sink).finish()? {
        size += f.size;
        f.temp.publish(force)?;
    }
    sync_dir(
        out.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )?;
    Ok(size)
}

/// A patch opened and checked against a target.
pub struct Patch {
    aux: Arc<Aux>,
    /// sha256 the base must have.
    pub base: String,
    /// sha256 of the result.
    pub result: String,
}

fn meta<'a>(aux: &'a Aux, key: &str) -> Result<&'a str> {
    aux.file
        .metadata()
        .get(key)
        .and_then(|v| v.as_str())
        .ok_or_else(|| {
            Error::Usage(format!(
                "{}: not a weightport patch (no `{key}` in its metadata)",
                shown(&aux.path)
            ))
        })
}

impl Patch {
    /// Opens `path` as a patch for `t`.
    pub fn open(path: &Path, t: &Target) -> Result<Patch> {
        let aux = Aux::open(path, t)?;
        if meta(&aux, KEY)? != "1" {
            return Err(Error::Usage(format!(
                "{}: a patch of another version",
                shown(path)
            )));
        }
        let (c, size) = (meta(&aux, CONTAINER)?, meta(&aux, SIZE)?);
        if t.files.len() != 1 || c != t.container.name() || size != t.files[0].size.to_string() {
            return Err(Error::Refused {
                at: Location::file(&t.given),
                reason: format!("the patch {} is for a {c} file of {size} bytes; this is not one (nothing was changed)", shown(path)),
            });
        }
        let (base, result) = (
            meta(&aux, BASE)?.to_string(),
            meta(&aux, RESULT)?.to_string(),
        );
        Ok(Patch { aux, base, result })
    }

    /// The edit steps writing the patch's blocks into `t`.
    pub fn steps(&self, t: &Target) -> Result<Vec<TensorEdit>> {
        let mut out: Vec<TensorEdit> = Vec::new();
        for (j, info) in self.aux.file.tensors().iter().enumerate() {
            let (i, at) = place(t, info).map_err(|e| {
                Error::Usage(format!(
                    "{}: {e}",
                    Location::file(&self.aux.path).tensor(info.name.clone())
                ))
            })?;
            let step = Step::Raw {
                at,
                src: AuxRef {
                    aux: self.aux.clone(),
                    index: j,
                },
            };
            match out.iter_mut().find(|e| e.tensor == i) {
                Some(e) => e.steps.push(step),
                None => out.push(TensorEdit {
                    tensor: i,
                    steps: vec![step],
                }),
            }
        }
        out.sort_by_key(|e| t.tensors[e.tensor].offset);
        Ok(out)
    }
}

/// Where patch tensor `info` goes: the target tensor and the byte offset in it.
fn place(t: &Target, info: &TensorInfo) -> std::result::Result<(usize, u64), String> {
    let sel = Selection::parse(&info.name)?;
    let i = t
        .find(&sel.name)
        .ok_or_else(|| format!("names no tensor `{}` of the target", sanitize(&sel.name)))?;
    let p = &t.tensors[i];
    let (a, b) = match sel.items.as_slice() {
        [] if p.shape.is_empty() => (0, 1),
        [Item::Slice(Some(a), Some(b))] if *a >= 0 && b > a => (*a as u64, *b as u64),
        _ => return Err("a patch block must be NAME[a:b]".into()),
    };
    let want = block_info(p, (a, b));
    if b > p.shape.first().copied().unwrap_or(1)
        || info.dtype != want.dtype
        || info.shape != want.shape
    {
        return Err(format!(
            "is {} {:?}; rows {a}:{b} of the target's tensor would be {} {:?}",
            info.dtype, info.shape, want.dtype, want.shape
        ));
    }
    Ok((i, a * p.slab()))
}

/// The sha256 of the target file, and of the file the patch's blocks would make of it.
fn hashes(t: &Target, f: &File, edits: &[TensorEdit]) -> Result<(String, String)> {
    let (mut hb, mut hr) = (Sha256::new(), Sha256::new());
    let mut buf = vec![0u8; STEP];
    let size = t.files[0].size;
    let mut pos = 0u64;
    while pos < size {
        let n = (size - pos).min(STEP as u64) as usize;
        f.read_exact_at(&mut buf[..n], pos)
            .map_err(|e| Error::io(&t.files[0].shown, "read", e))?;
        hb.update(&buf[..n]);
        for e in edits {
            let p = &t.tensors[e.tensor];
            let (lo, hi) = (
                pos.max(p.offset),
                (pos + n as u64).min(p.offset + p.byte_len),
            );
            if lo < hi {
                e.apply(
                    p,
                    lo - p.offset,
                    &mut buf[(lo - pos) as usize..(hi - pos) as usize],
                )?;
            }
        }
        hr.update(&buf[..n]);
        pos += n as u64;
    }
    Ok((hex(&hb.finalize()), hex(&hr.finalize())))
}

/// `edit TARGET --apply PATCH` (module docs).
pub fn apply(path: &Path, patch: &Path, opts: EditOptions) -> Result<crate::Edited> {
    let t = Target::open(path)?;
    let (guards, notes) = crate::settle_all(&t)?;
    notes.into_iter().for_each(crate::lock::notice);
    let p = Patch::open(patch, &t)?;
    let edits = p.steps(&t)?;
    let lock = if opts.dry_run {
        None
    } else {
        drop(guards);
        Some(crate::lock_target(&t)?)
    };
    let f = match &lock {
        Some(l) => l.files[0]
            .try_clone()
            .map_err(|e| Error::io(&t.given, "dup", e))?,
        None => open(&t)?,
    };
    let (base, result) = hashes(&t, &f, &edits)?;
    if base != p.base {
        return Err(Error::Refused {
            at: Location::file(&t.given),
            reason: format!("the patch {} is for another base: it needs sha256 {}, this file is {base}; nothing was changed", shown(patch), p.base),
        });
    }
    if result != p.result {
        return Err(Error::Refused {
            at: Location::file(&t.given),
            reason: format!("the patch {} does not make the file it names (sha256 {result}, it names {}); nothing was changed", shown(patch), p.result),
        });
    }
    let report: EditReport = crate::txn::run(&t, &edits, lock.as_ref(), opts)?;
    Ok(crate::Edited { target: t, report })
}
