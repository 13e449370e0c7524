//! Split GGUF sets, as llama.cpp's `gguf-split` writes them (spec §7).
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

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use weightport_core::{
    Error, Format, Location, MetaValue, Metadata, ReadOptions, Result, TensorInfo, TensorSource,
};

use crate::header::{align_up, GgufTensor, DEFAULT_ALIGNMENT};
use crate::reader::GgufFile;
use crate::writer::{layout_with, GgufLayout, GgufTensorSpec, WriteOptions};

/// `split.no`: u16, 0-based.
pub const KEY_NO: &str = "split.no";
/// `split.count`: u16.
pub const KEY_COUNT: &str = "split.count";
/// `split.tensors.count`: i32, tensors in the whole set.
pub const KEY_TENSORS: &str = "split.tensors.count";

/// When to start a new split.
#[derive(Debug, Clone, Default)]
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

/// A split set (or a single file) opened as one source.
#[derive(Debug)]
pub struct GgufSplit {
    files: Vec<GgufFile>,
    metadata: Metadata,
    infos: Vec<TensorInfo>,
    /// Per tensor: (file, index in file).
    index: Vec<(usize, usize)>,
}

fn split_u16(f: &GgufFile, key: &str) -> Result<Option<u16>> {
    match f.get(key) {
        None => Ok(None),
        Some(MetaValue::U16(v)) => Ok(Some(*v)),
        Some(v) => Err(Error::malformed(
            Location::file(f.path()),
            Format::Gguf,
            format!(
                "`{key}` must have type u16 but has type {}",
                crate::header::value_type_name(v)
            ),
        )),
    }
}

/// Opens a split set given any of its files (or a plain GGUF file, as a set of one), checking
/// that every split is present, numbered in order, agrees on the count, and that the tensor
/// total matches `split.tensors.count` with no name repeated.
pub fn open_split(path: &Path, opts: &ReadOptions) -> Result<GgufSplit> {
    let Some((prefix, _, count)) = parse_split_path(path) else {
        let f = GgufFile::open(path, opts)?;
        if let Some(c) = split_u16(&f, KEY_COUNT)?.filter(|&c| c > 1) {
            return Err(Error::malformed(
                Location::file(path),
                Format::Gguf,
                format!(
                    "this file is one of {c} splits but is not named `<prefix>-NNNNN-of-{c:05}.gguf`, \
                     so the other splits cannot be found"
                ),
            ));
        }
        return GgufSplit::from_files(vec![f]);
    };
    let target = prefix.with_file_name(format!(
        "{}.gguf",
        prefix
            .file_name()
            .map(|s| s.to_string_lossy())
            .unwrap_or_default()
    ));
    let paths: Vec<PathBuf> = (0..count).map(|i| split_path(&target, i, count)).collect();
    let missing: Vec<String> = paths
        .iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
    if !missing.is_empty() {
        return Err(Error::malformed(
            Location::file(path),
            Format::Gguf,
            format!(
                "split set of {count} is incomplete: missing {}",
                missing.join(", ")
            ),
        ));
    }
    let files = paths
        .iter()
        .map(|p| GgufFile::open(p, opts))
        .collect::<Result<Vec<_>>>()?;
    GgufSplit::from_files(files)
}

impl GgufSplit {
    fn from_files(files: Vec<GgufFile>) -> Result<Self> {
        let n = files.len();
        let mut total_declared = None;
        let mut index = Vec::new();
        let mut infos = Vec::new();
        let mut names = HashSet::new();
        for (fi, f) in files.iter().enumerate() {
            let bad = |m: String| Error::malformed(Location::file(f.path()), Format::Gguf, m);
            let no = split_u16(f, KEY_NO)?;
            let count = split_u16(f, KEY_COUNT)?;
            let tc = match f.get(KEY_TENSORS) {
                None => None,
                Some(MetaValue::I32(v)) => Some(*v),
                Some(v) => {
                    return Err(bad(format!(
                        "`{KEY_TENSORS}` must have type i32 but has type {}",
                        crate::header::value_type_name(v)
                    )))
                }
            };
            if n > 1 {
                if no != Some(fi as u16) {
                    return Err(bad(format!("`{KEY_NO}` is {no:?}, expected {fi}")));
                }
                if count != Some(n as u16) {
                    return Err(bad(format!("`{KEY_COUNT}` is {count:?}, expected {n}")));
                }
                let Some(tc) = tc else {
                    return Err(bad(format!("`{KEY_TENSORS}` is missing")));
                };
                if *total_declared.get_or_insert(tc) != tc {
                    return Err(bad(format!(
                        "`{KEY_TENSORS}` is {tc}, the first split says {}",
                        total_declared.unwrap_or_default()
                    )));
                }
            } else if let Some(tc) = tc {
                total_declared = Some(tc);
            }
            for (ti, t) in f.tensors().iter().enumerate() {
                if !names.insert(t.name.clone()) {
                    return Err(Error::malformed(
                        Location::file(f.path()).tensor(t.name.clone()),
                        Format::Gguf,
                        "tensor name repeated across splits",
                    ));
                }
                infos.push(t.clone());
                index.push((fi, ti));
            }
        }
        if let Some(tc) = total_declared {
            if i64::from(tc) != infos.len() as i64 {
                return Err(Error::malformed(
                    Location::file(files[0].path()),
                    Format::Gguf,
                    format!(
                        "`{KEY_TENSORS}` says {tc} tensors but the {n} split(s) hold {}",
                        infos.len()
                    ),
                ));
            }
        }
        let metadata = files[0]
            .metadata()
            .iter()
            .filter(|(k, _)| n == 1 || ![KEY_NO, KEY_COUNT, KEY_TENSORS].contains(k))
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        Ok(GgufSplit {
            files,
            metadata,
            infos,
            index,
        })
    }

    /// The files of the set, in split order.
    pub fn splits(&self) -> &[GgufFile] {
        &self.files
    }

    /// Tensor `index` as stored in its split.
    pub fn gguf_tensor(&self, index: usize) -> &GgufTensor {
        let (f, t) = self.index[index];
        &self.files[f].gguf_tensors()[t]
    }
}

impl TensorSource for GgufSplit {
    fn format(&self) -> Format {
        Format::Gguf
    }

    /// The first split's key/values; for a set of several files, without the `split.*` keys
    /// (they describe the container, not the model).
    fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn tensors(&self) -> &[TensorInfo] {
        &self.infos
    }

    fn files(&self) -> Vec<PathBuf> {
        self.files.iter().map(|f| f.path().to_path_buf()).collect()
    }

    fn file_of(&self, index: usize) -> PathBuf {
        self.files[self.index[index].0].path().to_path_buf()
    }

    fn bytes(&self, index: usize) -> Option<&[u8]> {
        let (f, t) = self.index[index];
        self.files[f].bytes(t)
    }

    fn read_into(&self, index: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        let (f, t) = self.index[index];
        self.files[f].read_into(t, offset, dst)
    }

    fn release(&self, index: usize, offset: u64, len: u64) {
        let (f, t) = self.index[index];
        self.files[f].release(t, offset, len)
    }

    fn will_need(&self, index: usize, offset: u64, len: u64) {
        let (f, t) = self.index[index];
        self.files[f].will_need(t, offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let p = split_path(Path::new("out/model.gguf"), 1, 3);
        assert_eq!(p, Path::new("out/model-00002-of-00003.gguf"));
        assert_eq!(
            parse_split_path(&p),
            Some((PathBuf::from("out/model"), 1, 3))
        );
        assert_eq!(parse_split_path(Path::new("model.gguf")), None);
        assert_eq!(parse_split_path(Path::new("m-00004-of-00003.gguf")), None);
        assert_eq!(parse_split_path(Path::new("m-00000-of-00003.gguf")), None);
        assert_eq!(parse_size("4G"), Some(4_000_000_000));
        assert_eq!(parse_size("500M"), Some(500_000_000));
        assert_eq!(parse_size("x"), None);
    }
}
