//! Reading a split GGUF set (docs/specs/gguf.md §7) as one source: every part opened, its `split.*` keys
//! checked against the set, tensors numbered across the parts. Naming and partitioning live
//! in [`crate::partition`], re-exported here.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use weightport_core::{
    ByteSource, Error, Format, Location, MetaValue, Metadata, ReadOptions, Result, TensorInfo,
    TensorSource,
};

use crate::header::GgufTensor;
pub use crate::partition::{
    assign, parse_size, parse_split_path, plan, split_path, PlannedFile, SplitOptions, KEY_COUNT,
    KEY_NO, KEY_TENSORS,
};
use crate::reader::GgufFile;

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
    open_split_source(opts.storage.open(path, ", expected a file")?, opts)
}

/// [`open_split`] given one file of the set already opened; the other parts are found by name
/// and opened through [`ReadOptions::storage`].
pub fn open_split_source(src: Arc<dyn ByteSource>, opts: &ReadOptions) -> Result<GgufSplit> {
    let path = &src.name().to_path_buf();
    let Some((prefix, _, count)) = parse_split_path(path) else {
        let f = GgufFile::from_source(src, opts)?;
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
        .filter(|p| *p != path && !opts.storage.exists(p))
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
        .map(|p| match p == path {
            true => GgufFile::from_source(src.clone(), opts),
            false => GgufFile::open(p, opts),
        })
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
