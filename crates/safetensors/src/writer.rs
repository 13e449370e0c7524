//! Writing safetensors: layout planned up front, data written in parallel.
//!
//! The layout is the reference's (docs/specs/safetensors.md §2.1), so for the same tensors and at most one metadata
//! key the output is byte-identical to `safetensors.torch.save_file`:
//! tensors sorted by dtype alignment rank descending, then by name (bytewise); offsets back to
//! back; compact JSON with `__metadata__` first (keys sorted: deterministic where the reference
//! is not); the header padded with spaces to a multiple of 8.
//!
//! [`SafetensorsSink`] stages every file as a pre-sized temp file beside its target, writes the
//! header at once, accepts tensor bytes at their final offsets from any thread, and hands the
//! fsynced temp files to the pipeline on finish. Dropping it unfinished removes the temp files.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use weightport_core::staged::{write_now, StagedFiles};
use weightport_core::{
    sanitize, Error, FinishedFile, Format, IoCounter, Location, MetaValue, Metadata, Plan, Result,
    StagedFile, TensorInfo, TensorSink,
};

use crate::dtypes;

/// The reference's header cap, applied on write too.
pub(crate) const MAX_HEADER: u64 = 100_000_000;

/// A planned file: header bytes and where each tensor's data goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLayout {
    /// The 8-byte length prefix, the JSON and its padding.
    pub header: Vec<u8>,
    /// For each input tensor (same order as given), its absolute file offset.
    pub offsets: Vec<u64>,
    /// Input indices in data order.
    pub order: Vec<usize>,
    /// Total file size.
    pub total_len: u64,
}

/// Largest array (GGUF tokenizer vocabularies, merges…) carried into `__metadata__`.
pub(crate) const MAX_METADATA_ARRAY: usize = 64;

/// Converts core metadata to safetensors' string map (non-strings rendered as text). Arrays
/// longer than [`MAX_METADATA_ARRAY`] items (a GGUF vocabulary has 32,000+) are left out: they
/// belong to the tokenizer files, not the weights header.
pub(crate) fn string_metadata(meta: &Metadata) -> BTreeMap<String, String> {
    meta.iter()
        .filter(|(_, v)| match v {
            MetaValue::Array(a) | MetaValue::TypedArray { items: a, .. } => {
                a.len() <= MAX_METADATA_ARRAY
            }
            _ => true,
        })
        .map(|(k, v)| (k.to_string(), v.to_text()))
        .collect()
}

/// Plans one file holding `tensors` with `metadata` (`None` writes no `__metadata__`).
pub fn layout(
    tensors: &[TensorInfo],
    metadata: Option<&BTreeMap<String, String>>,
) -> Result<FileLayout> {
    let ranks = ranks(tensors)?;
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| {
        ranks[b]
            .cmp(&ranks[a])
            .then_with(|| tensors[a].name.as_bytes().cmp(tensors[b].name.as_bytes()))
    });

    let (json, rel, pos) = json_header(tensors, &order, metadata)?;
    let n = (json.len() as u64).next_multiple_of(8);
    if n > MAX_HEADER {
        return Err(Error::Limit {
            at: Location::default(),
            what: "safetensors header",
            needed: n,
            limit: MAX_HEADER,
        });
    }
    let mut header = Vec::with_capacity(8 + n as usize);
    header.extend_from_slice(&n.to_le_bytes());
    header.extend_from_slice(json.as_bytes());
    header.resize(8 + n as usize, b' ');
    let data_start = 8 + n;
    Ok(FileLayout {
        offsets: rel.iter().map(|r| data_start + r).collect(),
        order,
        total_len: data_start + pos,
        header,
    })
}

/// Each tensor's dtype alignment rank, after the checks the reference needs: no tensor named
/// `__metadata__`, no name twice, a dtype safetensors stores, and a byte length that matches
/// the dtype and shape.
fn ranks(tensors: &[TensorInfo]) -> Result<Vec<usize>> {
    let usage = |m: String| Error::Usage(m);
    let mut names = HashSet::new();
    let mut ranks = Vec::with_capacity(tensors.len());
    for t in tensors {
        if t.name == "__metadata__" {
            return Err(usage(
                "a tensor may not be named `__metadata__` in safetensors".into(),
            ));
        }
        if !names.insert(t.name.as_str()) {
            return Err(usage(format!(
                "duplicate tensor name `{}`",
                sanitize(&t.name)
            )));
        }
        let rank = dtypes::rank(t.dtype).ok_or_else(|| Error::Unsupported {
            at: Location::default().tensor(t.name.clone()),
            format: Some(Format::Safetensors),
            what: format!("dtype {} cannot be stored in safetensors", t.dtype),
        })?;
        let need = t
            .dtype
            .byte_len(&t.shape)
            .map_err(|e| usage(format!("tensor `{}`: {e}", sanitize(&t.name))))?;
        if need != t.byte_len {
            return Err(usage(format!(
                "tensor `{}`: {} bytes given but {} {:?} needs {need}",
                sanitize(&t.name),
                t.byte_len,
                t.dtype,
                t.shape
            )));
        }
        ranks.push(rank);
    }
    Ok(ranks)
}

/// The header JSON (without padding) for `tensors` in data `order`, with every tensor's offset
/// relative to the data section and the data section's length.
fn json_header(
    tensors: &[TensorInfo],
    order: &[usize],
    metadata: Option<&BTreeMap<String, String>>,
) -> Result<(String, Vec<u64>, u64)> {
    let usage = |m: String| Error::Usage(m);
    let mut json = String::from("{");
    let mut first = true;
    if let Some(m) = metadata {
        json.push_str("\"__metadata__\":");
        json.push_str(&serde_json::to_string(m).map_err(|e| usage(e.to_string()))?);
        first = false;
    }
    let mut rel = vec![0u64; tensors.len()];
    let mut pos = 0u64;
    for &i in order {
        let t = &tensors[i];
        if !first {
            json.push(',');
        }
        first = false;
        rel[i] = pos;
        let end = pos + t.byte_len;
        json.push_str(&serde_json::to_string(&t.name).map_err(|e| usage(e.to_string()))?);
        json.push_str(":{\"dtype\":\"");
        json.push_str(t.dtype.name());
        json.push_str("\",\"shape\":[");
        let dims: Vec<String> = t.shape.iter().map(u64::to_string).collect();
        json.push_str(&dims.join(","));
        json.push_str(&format!("],\"data_offsets\":[{pos},{end}]}}"));
        pos = end;
    }
    json.push('}');
    Ok((json, rel, pos))
}

/// Decides which tensors go to which file: `(final path, tensor indices)` per file.
pub(crate) type Assign =
    Box<dyn FnOnce(&[TensorInfo]) -> Result<Vec<(PathBuf, Vec<usize>)>> + Send + Sync>;

/// A sink writing one or more safetensors files.
pub struct SafetensorsSink {
    assign: Option<Assign>,
    metadata: Option<BTreeMap<String, String>>,
    files: StagedFiles,
    io: IoCounter,
}

impl SafetensorsSink {
    /// A sink that lets `assign` split the tensors into files. `metadata` goes into every file
    /// (`None`: no `__metadata__` key).
    pub fn new(assign: Assign, metadata: Option<BTreeMap<String, String>>) -> Self {
        SafetensorsSink {
            assign: Some(assign),
            metadata,
            files: StagedFiles::new(Format::Safetensors, 0, &IoCounter::new()),
            io: IoCounter::new(),
        }
    }

    /// Counts the writes, opens and syncs of its files in `io`.
    pub fn counting(mut self, io: &IoCounter) -> Self {
        self.io = io.clone();
        self
    }

    /// A sink writing every tensor into the single file `path`.
    pub fn single(path: PathBuf, metadata: Option<BTreeMap<String, String>>) -> Self {
        Self::new(
            Box::new(move |t: &[TensorInfo]| Ok(vec![(path, (0..t.len()).collect())])),
            metadata,
        )
    }
}

impl TensorSink for SafetensorsSink {
    fn plan(&mut self, tensors: &[TensorInfo], _metadata: &Metadata) -> Result<Plan> {
        let assign = self
            .assign
            .take()
            .ok_or_else(|| Error::Internal("plan called twice".into()))?;
        let groups = assign(tensors)?;
        self.files = StagedFiles::new(Format::Safetensors, tensors.len(), &self.io);
        for (path, idx) in groups {
            let subset: Vec<TensorInfo> = idx.iter().map(|&i| tensors[i].clone()).collect();
            let lay = layout(&subset, self.metadata.as_ref()).map_err(|e| match e {
                Error::Usage(m) => Error::Usage(format!("{}: {m}", path.display())),
                other => other,
            })?;
            let lens: Vec<u64> = subset.iter().map(|t| t.byte_len).collect();
            self.files
                .add(&path, &lay.header, lay.total_len, idx, &lay.offsets, &lens)?;
        }
        if let Some(i) = self.files.unplaced() {
            return Err(Error::Internal(format!(
                "tensor `{}` was assigned to no file",
                sanitize(&tensors[i].name)
            )));
        }
        Ok(Plan {
            files: self.staged(),
        })
    }

    fn write_at(&self, tensor: usize, offset: u64, bytes: &[u8]) -> Result<()> {
        self.files.write_at(tensor, offset, bytes)
    }

    fn copy_from(
        &self,
        tensor: usize,
        offset: u64,
        from: &weightport_core::kernel_copy::Origin,
        len: u64,
    ) -> Result<u64> {
        self.files.copy_at(tensor, offset, from, len)
    }

    fn staged(&self) -> Vec<StagedFile> {
        self.files.staged()
    }

    fn finish(self: Box<Self>) -> Result<Vec<FinishedFile>> {
        self.files.finish()
    }
}

/// Writes `tensors` (with their bytes) into `path` at once; for small files and tests.
pub fn write_file(
    path: &Path,
    tensors: &[(TensorInfo, &[u8])],
    metadata: Option<&BTreeMap<String, String>>,
) -> Result<()> {
    let (infos, bytes): (Vec<TensorInfo>, Vec<&[u8]>) =
        tensors.iter().map(|(t, b)| (t.clone(), *b)).unzip();
    let sink = SafetensorsSink::single(path.to_path_buf(), metadata.cloned());
    write_now(Box::new(sink), &infos, &Metadata::new(), &bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weightport_core::DType;

    fn t(name: &str, dtype: DType, shape: &[u64]) -> TensorInfo {
        TensorInfo {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
            byte_len: dtype.byte_len(shape).unwrap(),
        }
    }

    #[test]
    fn empty_headers_match_reference_golden_vectors() {
        // docs/specs/safetensors.md §2.3 (tensor.rs:1132-1158): no tensors → `{}` + 6 spaces, N = 8.
        let l = layout(&[], None).unwrap();
        assert_eq!(l.header, b"\x08\0\0\0\0\0\0\0{}      ");
        let mut m = BTreeMap::new();
        m.insert("framework".to_string(), "pt".to_string());
        let l = layout(&[], Some(&m)).unwrap();
        assert_eq!(&l.header[..8], &40u64.to_le_bytes());
        assert_eq!(
            &l.header[8..],
            b"{\"__metadata__\":{\"framework\":\"pt\"}}     "
        );
    }

    #[test]
    fn rejects_names_the_reference_mishandles() {
        assert!(layout(&[t("__metadata__", DType::F32, &[1])], None).is_err());
        assert!(layout(&[t("a", DType::F32, &[1]), t("a", DType::F32, &[1])], None).is_err());
        assert!(matches!(
            layout(&[t("q", DType::Q4_0, &[32])], None),
            Err(Error::Unsupported { .. })
        ));
    }
}
