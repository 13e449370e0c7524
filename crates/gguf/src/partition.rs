//! Split GGUF sets, as llama.cpp's `gguf-split` writes them (docs/specs/gguf.md §7).
//!
//! A set is `<prefix>-00001-of-0000N.gguf` … `<prefix>-0000N-of-0000N.gguf`
//! (`llama_split_path`), each file a complete GGUF with its own header, offsets and padding.
//! Every split carries `split.no` (u16, 0-based), `split.count` (u16) and
//! `split.tensors.count` (i32, tensors in the whole set); all other key/values go into the first
//! split only. gguf-split appends the three keys in the order `split.no`,
//! `split.tensors.count`, `split.count` (it re-sets `split.count` last), and so does
//! [`plan`]. Splits after the first carry no `general.alignment`, so they use 32.
//!
//! Splitting by size counts each tensor as its byte length padded to 32, and starts a new split
//! when adding a tensor would exceed the limit (`gguf-split.cpp:255-266`); sizes are decimal
//! (`4G` = 4·10⁹ bytes). A tensor larger than the limit gets a split of its own (gguf-split
//! stops with an error there).

use std::path::{Path, PathBuf};

use weightport_core::{Error, MetaValue, Metadata, Result};

use crate::header::{align_up, DEFAULT_ALIGNMENT};
use crate::layout::{layout_with, GgufLayout, GgufTensorSpec, WriteOptions};

/// `split.no`: u16, 0-based.
pub const KEY_NO: &str = "split.no";
/// `split.count`: u16.
pub const KEY_COUNT: &str = "split.count";
/// `split.tensors.count`: i32, tensors in the whole set.
pub const KEY_TENSORS: &str = "split.tensors.count";

/// When to start a new split.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SplitOptions {
    /// Largest sum of tensor sizes (each padded to 32) per split (`--split-max-size`).
    pub max_bytes: Option<u64>,
    /// Most tensors per split (`--split-max-tensors`).
    pub max_tensors: Option<usize>,
    /// Put no tensors in the first split, only metadata (`--no-tensor-first-split`).
    pub no_tensor_first_split: bool,
}

/// Parses a gguf-split size: a decimal number with an optional `M` (10⁶) or `G` (10⁹) suffix,
/// as `--split-max-size` takes it.
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = match s.as_bytes().last()? {
        b'M' | b'm' => (&s[..s.len() - 1], 1_000_000),
        b'G' | b'g' => (&s[..s.len() - 1], 1_000_000_000),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul).filter(|&n| n > 0)
}

/// `<prefix>-NNNNN-of-MMMMM.gguf` for 0-based split `no` of `count`, where the prefix is
/// `target` without its `.gguf` extension.
pub fn split_path(target: &Path, no: u16, count: u16) -> PathBuf {
    let name = target
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".gguf").unwrap_or(&name);
    target.with_file_name(format!(
        "{stem}-{:05}-of-{count:05}.gguf",
        u32::from(no) + 1
    ))
}

/// If `path` is named like a split, `(prefix path, 0-based no, count)`.
pub fn parse_split_path(path: &Path) -> Option<(PathBuf, u16, u16)> {
    let name = path.file_name()?.to_str()?;
    let rest = name.strip_suffix(".gguf")?;
    // "-NNNNN-of-MMMMM" is 15 bytes.
    if rest.len() < 15 || !rest.is_char_boundary(rest.len() - 15) {
        return None;
    }
    let (prefix, tail) = rest.split_at(rest.len() - 15);
    let b = tail.as_bytes();
    if b[0] != b'-' || &b[6..10] != b"-of-" {
        return None;
    }
    let digits = |s: &str| {
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse::<u32>().ok())?
    };
    let no = digits(&tail[1..6])?;
    let count = digits(&tail[10..15])?;
    if no == 0 || no > count || count > u32::from(u16::MAX) {
        return None;
    }
    Some((path.with_file_name(prefix), (no - 1) as u16, count as u16))
}

/// One file of a planned output.
#[derive(Debug, Clone)]
pub struct PlannedFile {
    /// Final path.
    pub path: PathBuf,
    /// Indices of the tensors it holds.
    pub tensors: Vec<usize>,
    /// Its layout.
    pub layout: GgufLayout,
}

/// Assigns tensors to splits (indices per split), gguf-split's rule.
pub fn assign(specs: &[GgufTensorSpec], opts: &SplitOptions) -> Result<Vec<Vec<usize>>> {
    let mut groups: Vec<Vec<usize>> = vec![Vec::new()];
    if opts.no_tensor_first_split {
        groups.push(Vec::new());
    }
    let mut size = 0u64;
    for (i, s) in specs.iter().enumerate() {
        let (_, n) = s.check()?;
        let n = align_up(n, DEFAULT_ALIGNMENT)
            .ok_or_else(|| Error::Usage("tensor size overflows".into()))?;
        let cur = groups.last_mut().expect("one group");
        let by_size = opts
            .max_bytes
            .is_some_and(|m| !cur.is_empty() && size.saturating_add(n) > m);
        let by_count = opts.max_tensors.is_some_and(|m| m > 0 && cur.len() >= m);
        if by_size || by_count {
            groups.push(vec![i]);
            size = n;
        } else {
            cur.push(i);
            size += n;
        }
    }
    Ok(groups)
}

/// Plans the files of a split output. One resulting split is written unsplit to `target`
/// without `split.*` keys (as gguf-py does); otherwise the set is named by [`split_path`].
pub fn plan(
    target: &Path,
    specs: &[GgufTensorSpec],
    kv: &Metadata,
    opts: &SplitOptions,
    wopts: &WriteOptions,
) -> Result<Vec<PlannedFile>> {
    let groups = assign(specs, opts)?;
    if groups.len() == 1 {
        return Ok(vec![PlannedFile {
            path: target.to_path_buf(),
            tensors: groups.into_iter().next().expect("one"),
            layout: layout_with(specs, kv, wopts)?,
        }]);
    }
    let count = u16::try_from(groups.len())
        .map_err(|_| Error::Usage(format!("{} splits; gguf-split allows 65535", groups.len())))?;
    let total = i32::try_from(specs.len()).map_err(|_| {
        Error::Usage(format!(
            "{} tensors do not fit split.tensors.count (i32)",
            specs.len()
        ))
    })?;
    let mut out = Vec::with_capacity(groups.len());
    for (no, idx) in groups.into_iter().enumerate() {
        let mut meta: Metadata = if no == 0 {
            kv.iter()
                .filter(|(k, _)| ![KEY_NO, KEY_COUNT, KEY_TENSORS].contains(k))
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect()
        } else {
            Metadata::new()
        };
        meta.insert(KEY_NO, MetaValue::U16(no as u16));
        meta.insert(KEY_TENSORS, MetaValue::I32(total));
        meta.insert(KEY_COUNT, MetaValue::U16(count));
        let sub: Vec<GgufTensorSpec> = idx.iter().map(|&i| specs[i].clone()).collect();
        let mut w = wopts.clone();
        if no > 0 {
            w.alignment = None;
        }
        out.push(PlannedFile {
            path: split_path(target, no as u16, count),
            tensors: idx,
            layout: layout_with(&sub, &meta, &w)?,
        });
    }
    Ok(out)
}
