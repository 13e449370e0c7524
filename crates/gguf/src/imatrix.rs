//! Importance matrices as `llama-imatrix` writes them, read as `llama-quantize --imatrix` reads
//! them (llama.cpp `common/imatrix-loader.cpp` and `tools/quantize/quantize.cpp` of the pinned
//! sdist), but strictly: every count and length is checked against the file and capped.
//!
//! Two formats:
//! * **GGUF** (the default since 2025): for each weight `W` an F32 tensor `W.in_sum2` (the sums
//!   of squared activations, `ne = [n_per_row, n_mat]`, one row per expert of a 3-D weight) and
//!   an F32 tensor `W.counts` (`ne = [1, n_mat]`, the tokens each expert saw), plus the keys
//!   `imatrix.datasets` (array of strings), `imatrix.chunk_count` and `imatrix.chunk_size`
//!   (u32), all three required. The weights are `in_sum2 / round(count)` per expert; an expert
//!   that saw no token gets weight 1.
//! * **legacy `.dat`**: `i32 n_entries`, then per entry `i32 name_len, name, i32 ncall,
//!   i32 n_values, f32 values[n_values]` (the mean squared activation times `ncall`), then
//!   optionally `i32 chunk_count` and `i32 dataset_len, dataset`. The weights are
//!   `values / ncall` (the values as stored when `ncall` ≤ 0).

use std::collections::BTreeMap;
use std::path::Path;

use weightport_core::bytes::{ByteCursor, InMemory};
use weightport_core::{ByteSource, Error, Format, Limits, Location, MetaValue, Result};

use crate::header;

/// One importance-matrix entry: the raw sums and counts of one weight tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct ImatrixEntry {
    /// The weight's GGUF name (`blk.0.attn_q.weight`).
    pub name: String,
    /// The stored values: GGUF `in_sum2` (row-major, `counts.len()` rows), legacy values.
    pub sums: Vec<f32>,
    /// GGUF: the tokens per expert (rounded as llama.cpp rounds them); legacy: `[ncall]`.
    pub counts: Vec<i64>,
    /// Absolute byte offset of the entry's data (for messages).
    pub at: u64,
}

/// A parsed importance matrix.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Imatrix {
    /// The entries, sorted by name (llama.cpp keeps them in a `std::map`).
    pub entries: Vec<ImatrixEntry>,
    /// The datasets it was computed on (`imatrix.datasets`; legacy: the one trailing name).
    pub datasets: Vec<String>,
    /// Chunks processed (`imatrix.chunk_count`; legacy: the trailing count, 0 when absent).
    pub chunk_count: i64,
    /// Tokens per chunk (`imatrix.chunk_size`; legacy: 0).
    pub chunk_size: u32,
    /// True for the legacy `.dat` format.
    pub legacy: bool,
}

impl ImatrixEntry {
    /// The importance weights llama-quantize computes from this entry (`load_imatrix`): `n_per_row
    /// × n_mat` values, one row per expert.
    pub fn weights(&self, legacy: bool) -> Vec<f32> {
        if legacy {
            let ncall = self.counts.first().copied().unwrap_or(0);
            if ncall > 0 {
                let n = ncall as f32;
                return self.sums.iter().map(|s| s / n).collect();
            }
            return self.sums.clone();
        }
        let ne0 = self.sums.len() / self.counts.len().max(1);
        let mut w = vec![0f32; self.sums.len()];
        for (j, &c) in self.counts.iter().enumerate() {
            let count = c as f32;
            let (src, dst) = (&self.sums[j * ne0..][..ne0], &mut w[j * ne0..][..ne0]);
            for (d, s) in dst.iter_mut().zip(src) {
                *d = if count > 0.0 { s / count } else { 1.0 };
            }
        }
        w
    }
}

impl Imatrix {
    /// The entry for weight `name`.
    pub fn get(&self, name: &str) -> Option<&ImatrixEntry> {
        self.entries
            .binary_search_by(|e| e.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.entries[i])
    }
}

/// Reads the importance matrix at `path`, either format (a GGUF file is recognised by its
/// magic; anything else is read as the legacy format).
pub fn read_imatrix(path: &Path, limits: &Limits) -> Result<Imatrix> {
    // Through the process's storage: a remote `--imatrix` is a view's stand-in.
    let src = weightport_core::mapped::default_storage()
        .open(path, ", expected an importance matrix file")?;
    if src.is_empty() {
        return Err(malformed(path, 0, "the file is empty"));
    }
    read_imatrix_from(src.as_ref(), limits)
}

/// Parses the importance matrix whose complete contents are `buf`; `path` names it in
/// messages.
pub fn parse_imatrix(path: &Path, buf: &[u8], limits: &Limits) -> Result<Imatrix> {
    read_imatrix_from(&InMemory::new(path, buf), limits)
}

/// Reads the importance matrix `src` (either format), by ranges: every length is checked
/// against its cap and the bytes left before it is read.
pub fn read_imatrix_from(src: &dyn ByteSource, limits: &Limits) -> Result<Imatrix> {
    if src.head(4)? == header::MAGIC {
        parse_gguf(src, limits)
    } else {
        parse_legacy(src, limits)
    }
}

fn malformed(path: &Path, at: u64, reason: impl Into<String>) -> Error {
    Error::malformed(Location::file(path).at(at), None, reason)
}

fn limit(path: &Path, at: u64, what: &'static str, needed: u64, limit: u64) -> Error {
    Error::Limit {
        at: Location::file(path).at(at),
        what,
        needed,
        limit,
    }
}

/// A cursor over the legacy format.
struct Legacy<'a> {
    path: &'a Path,
    cur: ByteCursor<'a>,
}

impl<'a> Legacy<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&[u8]> {
        if n as u64 > self.cur.remaining() {
            return Err(malformed(
                self.path,
                self.cur.pos(),
                format!(
                    "{what} needs {n} bytes but the file ends after {} (truncated?)",
                    self.rest()
                ),
            ));
        }
        self.cur.take(n as u64)
    }

    fn i32(&mut self, what: &str) -> Result<i32> {
        let b = self.take(4, what)?;
        Ok(i32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    fn rest(&self) -> usize {
        self.cur.remaining() as usize
    }
}

fn parse_legacy(src: &dyn ByteSource, limits: &Limits) -> Result<Imatrix> {
    let path = src.name();
    let mut c = Legacy {
        path,
        cur: ByteCursor::new(src, 0),
    };
    let n = c.i32("the entry count")?;
    if n < 1 {
        return Err(malformed(
            path,
            0,
            format!("not an importance matrix: the legacy format's entry count is {n}, must be at least 1"),
        ));
    }
    if n as u64 > limits.max_imatrix_entries {
        return Err(limit(
            path,
            0,
            "importance matrix entry count",
            n as u64,
            limits.max_imatrix_entries,
        ));
    }
    let mut entries: BTreeMap<String, ImatrixEntry> = BTreeMap::new();
    for i in 0..n {
        let e = legacy_entry(&mut c, i, limits)?;
        if let Some(prev) = entries.get(&e.name) {
            return Err(malformed(
                path,
                e.at,
                format!(
                    "entry {} repeats the name `{}` of an earlier entry (data at byte {})",
                    i + 1,
                    weightport_core::sanitize(&e.name),
                    prev.at
                ),
            ));
        }
        entries.insert(e.name.clone(), e);
    }
    let (chunk_count, datasets) = legacy_trailer(&mut c, limits)?;
    Ok(Imatrix {
        entries: entries.into_values().collect(),
        datasets,
        chunk_count,
        chunk_size: 0,
        legacy: true,
    })
}

fn legacy_entry(c: &mut Legacy, i: i32, limits: &Limits) -> Result<ImatrixEntry> {
    let path = c.path;
    let at = c.cur.pos();
    let len = c.i32("a name length")?;
    if len < 0 || len as u64 > limits.max_imatrix_name {
        return Err(limit(
            path,
            at,
            "importance matrix name length",
            len.unsigned_abs() as u64,
            limits.max_imatrix_name,
        ));
    }
    let raw = c.take(len as usize, "a name")?.to_vec();
    let name = String::from_utf8(raw)
        .ok()
        .filter(|s| !s.is_empty() && !s.contains('\0'))
        .ok_or_else(|| {
            malformed(
                path,
                at + 4,
                format!(
                    "entry {}: the name is empty, not UTF-8 or holds a NUL byte",
                    i + 1
                ),
            )
        })?;
    let ncall = c.i32("the call count")?;
    let vat = c.cur.pos();
    let nval = c.i32("the value count")?;
    let at_entry = |reason: String| {
        Error::malformed(
            Location::file(path).tensor(name.clone()).at(vat),
            None,
            reason,
        )
    };
    if nval < 1 {
        return Err(at_entry(format!(
            "the value count is {nval}, must be at least 1"
        )));
    }
    if nval as u64 > limits.max_imatrix_values {
        return Err(limit(
            path,
            vat,
            "importance matrix values of one entry",
            nval as u64,
            limits.max_imatrix_values,
        ));
    }
    if nval as u64 * 4 > c.rest() as u64 {
        return Err(at_entry(format!(
            "{nval} values need {} bytes but the file ends after {} (truncated?)",
            nval as u64 * 4,
            c.rest()
        )));
    }
    let data_at = c.cur.pos();
    let sums = f32s(c.take(nval as usize * 4, "the values")?);
    Ok(ImatrixEntry {
        name,
        sums,
        counts: vec![i64::from(ncall)],
        at: data_at,
    })
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|v| f32::from_le_bytes(v.try_into().expect("4 bytes")))
        .collect()
}

/// The optional trailer: `i32 chunk_count`, then `i32 len` and the dataset name.
fn legacy_trailer(c: &mut Legacy, limits: &Limits) -> Result<(i64, Vec<String>)> {
    if c.rest() == 0 {
        return Ok((0, Vec::new()));
    }
    let chunks = c.i32("the chunk count")?;
    if c.rest() == 0 {
        return Ok((i64::from(chunks), Vec::new()));
    }
    let at = c.cur.pos();
    let len = c.i32("the dataset name length")?;
    if len < 0 || len as u64 > limits.max_imatrix_name {
        return Err(limit(
            c.path,
            at,
            "importance matrix dataset name length",
            len.unsigned_abs() as u64,
            limits.max_imatrix_name,
        ));
    }
    let raw = c.take(len as usize, "the dataset name")?.to_vec();
    if c.rest() != 0 {
        return Err(malformed(
            c.path,
            c.cur.pos(),
            format!(
                "{} bytes after the dataset name, which ends the legacy format",
                c.rest()
            ),
        ));
    }
    // llama.cpp reads the name as a C string.
    let raw = raw.split(|&b| b == 0).next().unwrap_or(&[]);
    let name = String::from_utf8_lossy(raw).into_owned();
    // Kept when its length is positive, even if a NUL makes it empty, as llama.cpp keeps it.
    let datasets = if len > 0 { vec![name] } else { Vec::new() };
    Ok((i64::from(chunks), datasets))
}

const SUMS: &str = ".in_sum2";
const COUNTS: &str = ".counts";

fn parse_gguf(src: &dyn ByteSource, limits: &Limits) -> Result<Imatrix> {
    let path = src.name();
    let h = header::parse_source(src, limits)?;
    if h.tensors.is_empty() {
        return Err(malformed(
            path,
            0,
            "the GGUF importance matrix holds no tensors",
        ));
    }
    let (datasets, chunk_count, chunk_size) = gguf_keys(path, &h)?;
    let mut pairs: BTreeMap<&str, [Option<usize>; 2]> = BTreeMap::new();
    for (i, t) in h.tensors.iter().enumerate() {
        if let Some(n) = t.name.strip_suffix(SUMS) {
            pairs.entry(n).or_default()[0] = Some(i);
        } else if let Some(n) = t.name.strip_suffix(COUNTS) {
            pairs.entry(n).or_default()[1] = Some(i);
        }
    }
    if pairs.is_empty() {
        // llama.cpp reads such a file as an empty matrix and quantizes without one.
        return Err(malformed(
            path,
            0,
            format!("the GGUF file holds no importance entries (no `{SUMS}`/`{COUNTS}` tensors)"),
        ));
    }
    if pairs.len() as u64 > limits.max_imatrix_entries {
        return Err(limit(
            path,
            0,
            "importance matrix entry count",
            pairs.len() as u64,
            limits.max_imatrix_entries,
        ));
    }
    let mut entries = Vec::with_capacity(pairs.len());
    for (name, pair) in pairs {
        let ([Some(s), Some(c)], false) = (pair, name.is_empty()) else {
            let t = &h.tensors[pair[0].or(pair[1]).expect("one of the pair")];
            return Err(Error::malformed(
                Location::file(path).tensor(t.name.clone()).at(t.info_at),
                Format::Gguf,
                format!(
                    "`{}` needs both `{SUMS}` and `{COUNTS}` tensors",
                    weightport_core::sanitize(name)
                ),
            ));
        };
        entries.push(gguf_entry(src, &h, name, s, c, limits)?);
    }
    Ok(Imatrix {
        entries,
        datasets,
        chunk_count,
        chunk_size,
        legacy: false,
    })
}

/// `imatrix.datasets`, `imatrix.chunk_count`, `imatrix.chunk_size`: llama-quantize refuses a
/// GGUF importance matrix without all three.
fn gguf_keys(path: &Path, h: &header::GgufHeader) -> Result<(Vec<String>, i64, u32)> {
    let key_at = |k: &str| {
        let i = h.metadata.iter().position(|(x, _)| x == k)?;
        Some(h.kv_offsets[i])
    };
    let missing: Vec<&str> = [
        "imatrix.datasets",
        "imatrix.chunk_count",
        "imatrix.chunk_size",
    ]
    .into_iter()
    .filter(|k| h.metadata.get(k).is_none())
    .collect();
    if !missing.is_empty() {
        return Err(Error::malformed(
            Location::file(path).at(0),
            Format::Gguf,
            format!(
                "missing importance matrix metadata: {} (not a file llama-imatrix wrote?)",
                missing.join(", ")
            ),
        ));
    }
    let u32_key = |k: &str| -> Result<u32> {
        match h.metadata.get(k) {
            Some(MetaValue::U32(v)) => Ok(*v),
            other => Err(Error::malformed(
                Location::file(path).at(key_at(k).unwrap_or(0)),
                Format::Gguf,
                format!(
                    "`{k}` must be a u32, found {}",
                    other.map_or("nothing".into(), header::value_type_name)
                ),
            )),
        }
    };
    let datasets = match h.metadata.get("imatrix.datasets") {
        Some(MetaValue::TypedArray { items, .. }) | Some(MetaValue::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    // llama.cpp keeps the count in an `int32_t`.
    Ok((
        datasets,
        i64::from(u32_key("imatrix.chunk_count")? as i32),
        u32_key("imatrix.chunk_size")?,
    ))
}

fn gguf_entry(
    src: &dyn ByteSource,
    h: &header::GgufHeader,
    name: &str,
    s: usize,
    c: usize,
    limits: &Limits,
) -> Result<ImatrixEntry> {
    let path = src.name();
    let (ts, tc) = (&h.tensors[s], &h.tensors[c]);
    let bad = |t: &header::GgufTensor, reason: String| {
        Error::malformed(
            Location::file(path).tensor(t.name.clone()).at(t.info_at),
            Format::Gguf,
            reason,
        )
    };
    for t in [ts, tc] {
        if t.dtype != weightport_core::DType::F32 {
            return Err(bad(t, format!("must be F32, is {}", t.dtype)));
        }
    }
    let nval = ts.nbytes / 4;
    let ncounts = tc.nbytes / 4;
    if nval > limits.max_imatrix_values {
        return Err(limit(
            path,
            ts.info_at,
            "importance matrix values of one entry",
            nval,
            limits.max_imatrix_values,
        ));
    }
    if ncounts == 0 || nval == 0 || nval % ncounts != 0 {
        return Err(bad(
            ts,
            format!("{nval} sums do not split into {ncounts} equal rows, one per count"),
        ));
    }
    // Both sizes are capped (the counts divide the sums) and lie in the file (the header).
    let data = |t: &header::GgufTensor| src.range(h.data_start + t.offset, t.nbytes);
    let counts = f32s(&data(tc)?);
    if let Some(bad_count) = counts
        .iter()
        .find(|v| !v.is_finite() || **v < 0.0 || **v > 9.0e15)
    {
        return Err(bad(
            tc,
            format!("holds the count {bad_count}, not a token count"),
        ));
    }
    Ok(ImatrixEntry {
        name: name.to_string(),
        sums: f32s(&data(ts)?),
        // `std::lround`: half away from zero, as `f32::round`.
        counts: counts.iter().map(|v| v.round() as i64).collect(),
        at: h.data_start + ts.offset,
    })
}
