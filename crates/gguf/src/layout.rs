//! The layout of llama.cpp's C writer, planned up front and pure: from the tensor specs and the
//! key/values, the header bytes (magic, version 3, counts, key/values in the given order, tensor
//! infos, zero padding to the alignment) and every tensor's absolute offset, with tensors back
//! to back in the given order, each padded to the alignment including the last (docs/specs/gguf.md §1.1;
//! `gguf.cpp:1409-1422, 1556-1561`). So the file size is a multiple of the alignment, and the
//! same inputs always give the same bytes.

use std::collections::HashSet;

use weightport_core::{
    sanitize, DType, Error, Format, Location, MetaType, MetaValue, Metadata, Result, TensorInfo,
};

use crate::header::{
    align_up, GgufTensor, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS, MAX_NAME,
};
use crate::types;

/// One tensor to write: its name, stored type and GGUF dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensorSpec {
    /// The name (at most 63 bytes: llama.cpp's `GGML_MAX_NAME`).
    pub name: String,
    /// The stored type (must have a ggml type id).
    pub dtype: DType,
    /// Dimensions innermost first, as written; `ne.len()` is the written `n_dims` (≤ 4).
    pub ne: Vec<u64>,
}

impl GgufTensorSpec {
    /// From a tensor description (shape outermost first): `ne` is the shape reversed, with as
    /// many dims as the shape has, as gguf-py (and so `convert_hf_to_gguf.py`) writes them.
    pub fn from_info(t: &TensorInfo) -> Self {
        GgufTensorSpec {
            name: t.name.clone(),
            dtype: t.dtype,
            ne: t.shape.iter().rev().copied().collect(),
        }
    }

    /// As llama.cpp's C writer stores `t`: trailing 1s of `ne` dropped, at least one dim
    /// (`ggml_n_dims`).
    pub fn from_info_c(t: &TensorInfo) -> Self {
        let mut s = Self::from_info(t);
        while s.ne.len() > 1 && s.ne.last() == Some(&1) {
            s.ne.pop();
        }
        if s.ne.is_empty() {
            s.ne.push(1);
        }
        s
    }

    /// Exactly as a reader found it (lossless re-write).
    pub fn from_gguf(t: &GgufTensor) -> Self {
        GgufTensorSpec {
            name: t.name.clone(),
            dtype: t.dtype,
            ne: t.ne.clone(),
        }
    }

    /// The shape outermost first.
    pub fn shape(&self) -> Vec<u64> {
        self.ne.iter().rev().copied().collect()
    }

    /// Validates the spec as llama.cpp's reader would, and returns `(ggml type id, nbytes)`.
    pub fn check(&self) -> Result<(u32, u64)> {
        let bad = |m: String| Error::Usage(format!("gguf tensor `{}`: {m}", sanitize(&self.name)));
        if self.name.len() > MAX_NAME {
            return Err(Error::Unsupported {
                at: Location::default().tensor(shortened(&self.name)),
                format: Some(Format::Gguf),
                what: format!(
                    "the tensor name is {} bytes; llama.cpp allows at most {MAX_NAME} \
                     (GGML_MAX_NAME): shorten it with {} s/PATTERN/REPLACEMENT/",
                    self.name.len(),
                    weightport_core::Knob::Rename
                ),
            });
        }
        if self.ne.len() > MAX_DIMS as usize {
            return Err(bad(format!(
                "{} dimensions; GGUF allows at most {MAX_DIMS}",
                self.ne.len()
            )));
        }
        let id = types::ggml_id(self.dtype).ok_or_else(|| Error::Unsupported {
            at: Location::default().tensor(self.name.clone()),
            format: Some(Format::Gguf),
            what: format!("dtype {} has no ggml type", self.dtype),
        })?;
        let mut nel: u64 = 1;
        for &d in &self.ne {
            nel = nel
                .checked_mul(d)
                .filter(|&n| n <= i64::MAX as u64)
                .ok_or_else(|| bad(format!("shape (ne) {:?} overflows i64", self.ne)))?;
        }
        let (blck, tsize) = types::block_of(self.dtype);
        let ne0 = self.ne.first().copied().unwrap_or(1);
        if ne0 % blck != 0 {
            return Err(bad(format!(
                "row length {ne0} is not a multiple of the {} block size {blck}",
                self.dtype
            )));
        }
        let nbytes = (nel / blck)
            .checked_mul(tsize)
            .ok_or_else(|| bad("byte size overflows".into()))?;
        Ok((id, nbytes))
    }
}

/// Choices for the written file.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WriteOptions {
    /// The alignment; `None` takes `general.alignment` from the key/values, else 32. When set,
    /// it must agree with `general.alignment` (and a value other than 32 requires the key, since
    /// readers learn the alignment from it).
    pub alignment: Option<u32>,
    /// The version written (3, or 2 to reproduce a v2 file; the layout is the same).
    pub version: u32,
    /// Pad the header to the alignment even when there are no tensors. llama.cpp's writer
    /// does; gguf-py's vocab-only files (`models/ggml-vocab-*.gguf`) are not padded.
    pub pad_without_tensors: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            alignment: None,
            version: 3,
            pad_without_tensors: true,
        }
    }
}

/// A planned GGUF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufLayout {
    /// Everything before the data section: magic, version, counts, key/values, tensor infos,
    /// padding.
    pub header: Vec<u8>,
    /// The alignment used.
    pub alignment: u32,
    /// Absolute offset of the data section (`header.len()`).
    pub data_start: u64,
    /// For each tensor (same order as given), its absolute file offset.
    pub offsets: Vec<u64>,
    /// For each tensor, its byte length (without padding).
    pub nbytes: Vec<u64>,
    /// Total file size (a multiple of the alignment, unless there are no tensors and
    /// [`WriteOptions::pad_without_tensors`] is off).
    pub total_len: u64,
}

/// Plans a file with the C writer's layout: `alignment` as in [`WriteOptions::alignment`],
/// everything else at its default.
pub fn layout(
    tensors: &[GgufTensorSpec],
    kv: &Metadata,
    alignment: Option<u32>,
) -> Result<GgufLayout> {
    layout_with(
        tensors,
        kv,
        &WriteOptions {
            alignment,
            ..WriteOptions::default()
        },
    )
}

/// The alignment a file with `kv` must use, checked against an explicit request.
pub(crate) fn resolve_alignment(kv: &Metadata, requested: Option<u32>) -> Result<u32> {
    let from_kv = match kv.get(ALIGNMENT_KEY) {
        None => None,
        Some(MetaValue::U32(a)) if a.is_power_of_two() => Some(*a),
        Some(other) => {
            return Err(Error::Usage(format!(
                "`{ALIGNMENT_KEY}` must be a u32 power of two, got {}",
                other.to_text()
            )))
        }
    };
    match (requested, from_kv) {
        (Some(r), _) if !r.is_power_of_two() => Err(Error::Usage(format!(
            "gguf alignment {r} is not a power of two"
        ))),
        (Some(r), Some(k)) if r != k => Err(Error::Usage(format!(
            "gguf alignment {r} disagrees with `{ALIGNMENT_KEY}` = {k}"
        ))),
        (Some(r), None) if r != DEFAULT_ALIGNMENT => Err(Error::Usage(format!(
            "gguf alignment {r} needs the key `{ALIGNMENT_KEY}` (u32) so readers know it"
        ))),
        (Some(r), _) => Ok(r),
        (None, k) => Ok(k.unwrap_or(DEFAULT_ALIGNMENT)),
    }
}

/// Plans a file. Pure: no I/O.
pub fn layout_with(
    tensors: &[GgufTensorSpec],
    kv: &Metadata,
    opts: &WriteOptions,
) -> Result<GgufLayout> {
    if !(2..=3).contains(&opts.version) {
        return Err(Error::Usage(format!(
            "gguf version {} cannot be written (2 or 3)",
            opts.version
        )));
    }
    let alignment = resolve_alignment(kv, opts.alignment)?;
    let mut h = Vec::new();
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&opts.version.to_le_bytes());
    h.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    h.extend_from_slice(&(kv.len() as u64).to_le_bytes());
    for (k, v) in kv.iter() {
        encode_kv(&mut h, k, v)?;
    }
    let mut names = HashSet::new();
    let mut rel = 0u64;
    let mut rels = Vec::with_capacity(tensors.len());
    let mut nbytes = Vec::with_capacity(tensors.len());
    for t in tensors {
        let (id, n) = t.check()?;
        if !names.insert(t.name.as_str()) {
            return Err(Error::Usage(format!(
                "duplicate gguf tensor name `{}`",
                sanitize(&t.name)
            )));
        }
        put_str(&mut h, t.name.as_bytes());
        h.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
        for d in &t.ne {
            h.extend_from_slice(&d.to_le_bytes());
        }
        h.extend_from_slice(&id.to_le_bytes());
        h.extend_from_slice(&rel.to_le_bytes());
        rels.push(rel);
        nbytes.push(n);
        rel = align_up(n, alignment)
            .and_then(|p| rel.checked_add(p))
            .ok_or_else(|| Error::Usage("gguf data section size overflows".into()))?;
    }
    let infos_end = h.len() as u64;
    let data_start = if tensors.is_empty() && !opts.pad_without_tensors {
        infos_end
    } else {
        align_up(infos_end, alignment).expect("header length is small")
    };
    h.resize(data_start as usize, 0);
    let total_len = data_start
        .checked_add(rel)
        .ok_or_else(|| Error::Usage("gguf file size overflows".into()))?;
    Ok(GgufLayout {
        header: h,
        alignment,
        data_start,
        offsets: rels.iter().map(|r| data_start + r).collect(),
        nbytes,
        total_len,
    })
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

/// The GGUF type of a metadata value, if GGUF can hold it.
fn gguf_type(v: &MetaValue) -> Option<MetaType> {
    Some(match v {
        MetaValue::Str(_) | MetaValue::Bytes(_) => MetaType::Str,
        MetaValue::Bool(_) => MetaType::Bool,
        MetaValue::U8(_) => MetaType::U8,
        MetaValue::I8(_) => MetaType::I8,
        MetaValue::U16(_) => MetaType::U16,
        MetaValue::I16(_) => MetaType::I16,
        MetaValue::U32(_) => MetaType::U32,
        MetaValue::I32(_) => MetaType::I32,
        MetaValue::U64(_) => MetaType::U64,
        MetaValue::I64(_) => MetaType::I64,
        MetaValue::F32(_) => MetaType::F32,
        MetaValue::F64(_) => MetaType::F64,
        MetaValue::Array(_) | MetaValue::TypedArray { .. } => MetaType::Array,
        _ => return None,
    })
}

fn put_scalar(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::Str(s) => put_str(out, s.as_bytes()),
        MetaValue::Bytes(b) => put_str(out, b),
        MetaValue::Bool(b) => out.push(u8::from(*b)),
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        _ => unreachable!("checked by encode_kv"),
    }
}

/// Appends one key/value pair: `str key; u32 type; value`. Each value keeps its exact type
/// (`U32` as u32, …); `TypedArray` is written with its element type, even when empty; a plain
/// `Array` takes the type of its elements, which must all agree; `Bytes` is written as a string
/// (the reader's form of a string that is not UTF-8). Values GGUF cannot hold (maps, objects,
/// nested or empty untyped arrays) are refused, naming the key.
pub fn encode_kv(out: &mut Vec<u8>, key: &str, v: &MetaValue) -> Result<()> {
    let sk = sanitize(key);
    let refuse = |what: String| Error::Unsupported {
        at: Location::default(),
        format: Some(Format::Gguf),
        what: format!("metadata key `{sk}`: {what}"),
    };
    if key.is_empty() {
        return Err(refuse("GGUF keys must be non-empty".into()));
    }
    let t =
        gguf_type(v).ok_or_else(|| refuse(format!("value {} has no GGUF type", v.to_text())))?;
    let (elem, items): (MetaType, &[MetaValue]) = match v {
        MetaValue::TypedArray { elem, items } => (*elem, items),
        MetaValue::Array(items) => {
            let first = items.first().ok_or_else(|| {
                refuse("an empty array without an element type (use MetaValue::TypedArray)".into())
            })?;
            let e = gguf_type(first).ok_or_else(|| {
                refuse(format!(
                    "array element {} has no GGUF type",
                    first.to_text()
                ))
            })?;
            (e, items)
        }
        _ => {
            put_str(out, key.as_bytes());
            out.extend_from_slice(&types::meta_type_id(t).to_le_bytes());
            put_scalar(out, v);
            return Ok(());
        }
    };
    if elem == MetaType::Array {
        return Err(refuse(
            "an array of arrays, which llama.cpp's reader rejects".into(),
        ));
    }
    for (i, it) in items.iter().enumerate() {
        if gguf_type(it) != Some(elem) {
            return Err(refuse(format!(
                "array element {i} ({}) is not of the array's type {}",
                it.to_text(),
                elem.name()
            )));
        }
    }
    put_str(out, key.as_bytes());
    out.extend_from_slice(&types::meta_type_id(MetaType::Array).to_le_bytes());
    out.extend_from_slice(&types::meta_type_id(elem).to_le_bytes());
    out.extend_from_slice(&(items.len() as u64).to_le_bytes());
    for it in items {
        put_scalar(out, it);
    }
    Ok(())
}

/// A name cut to what a message can show: its first 48 characters, then how much was cut.
fn shortened(name: &str) -> String {
    let shown: String = sanitize(name).chars().take(48).collect();
    if shown.len() < name.len() {
        format!("{shown}… ({} bytes)", name.len())
    } else {
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_padded_back_to_back() {
        let specs = vec![
            GgufTensorSpec {
                name: "a".into(),
                dtype: DType::F32,
                ne: vec![3],
            },
            GgufTensorSpec {
                name: "b".into(),
                dtype: DType::Q8_0,
                ne: vec![32, 2],
            },
        ];
        let l = layout(&specs, &Metadata::new(), None).unwrap();
        assert_eq!(l.data_start % 32, 0);
        assert_eq!(l.offsets, vec![l.data_start, l.data_start + 32]);
        assert_eq!(l.nbytes, vec![12, 68]);
        assert_eq!(l.total_len, l.data_start + 32 + 96);
    }

    #[test]
    fn refuses_values_gguf_cannot_hold() {
        let mut out = Vec::new();
        for v in [
            MetaValue::Null,
            MetaValue::Array(vec![]),
            MetaValue::Array(vec![MetaValue::U8(1), MetaValue::I8(1)]),
            MetaValue::Array(vec![MetaValue::Array(vec![MetaValue::U8(1)])]),
            MetaValue::TypedArray {
                elem: MetaType::U32,
                items: vec![MetaValue::I32(1)],
            },
            MetaValue::Map(vec![]),
        ] {
            assert!(matches!(
                encode_kv(&mut out, "k", &v),
                Err(Error::Unsupported { .. })
            ));
        }
        let mut m = Metadata::new();
        m.insert(ALIGNMENT_KEY, MetaValue::I32(64));
        assert!(layout(&[], &m, None).is_err());
        assert!(layout(&[], &Metadata::new(), Some(64)).is_err());
        assert!(layout(&[], &Metadata::new(), Some(3)).is_err());
    }
}
