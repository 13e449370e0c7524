//! Parsing and validating a GGUF header (key/values and tensor infos) from bytes.
//!
//! [`parse_source`] reads the header front to back from a [`ByteSource`] (zero-copy from a
//! mapped file, so only the header pages are touched; in bounded steps by `read_at` otherwise;
//! [`parse`] does the same over bytes in memory) and applies every check of docs/specs/gguf.md
//! §1.3 in the order llama.cpp's `gguf_init_from_file` applies them, with checked arithmetic
//! throughout and no allocation or read sized by a count or length before the cap on it is
//! checked and the bytes backing it are known to exist. Every error names the file, the key or
//! tensor concerned, and the absolute byte offset.

use std::collections::HashSet;
use std::path::Path;

use weightport_core::bytes::{ByteCursor, InMemory};
use weightport_core::{
    sanitize, ByteSource, DType, Error, Format, Limits, Location, MetaType, MetaValue, Metadata,
    Result,
};

use crate::types::{self, TypeIdError};

/// The four magic bytes every GGUF file starts with (in either byte order).
pub const MAGIC: &[u8; 4] = b"GGUF";
/// `general.alignment` when the key is absent (`GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: u32 = 32;
/// Longest tensor name, in bytes (`GGML_MAX_NAME` is 64 including the NUL).
pub const MAX_NAME: usize = 63;
/// Most dimensions of a tensor (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// The key holding the alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// One tensor info, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensor {
    /// The name.
    pub name: String,
    /// The stored element type.
    pub dtype: DType,
    /// The ggml type id as stored.
    pub ggml_type: u32,
    /// The stored dimensions, innermost first (`ne[0]` is the row length); `ne.len()` is the
    /// stored `n_dims` (0 to 4), so a re-write can reproduce it exactly.
    pub ne: Vec<u64>,
    /// Offset of the data relative to the data section.
    pub offset: u64,
    /// Byte length of the data (without padding).
    pub nbytes: u64,
    /// Absolute file offset of this tensor info (for messages).
    pub info_at: u64,
}

impl GgufTensor {
    /// The stored `n_dims`.
    pub fn n_dims(&self) -> u32 {
        self.ne.len() as u32
    }

    /// The shape outermost first (numpy/PyTorch order): `ne` reversed.
    pub fn shape(&self) -> Vec<u64> {
        self.ne.iter().rev().copied().collect()
    }
}

/// A validated header.
#[derive(Debug, Clone)]
pub struct GgufHeader {
    /// The version (2 or 3).
    pub version: u32,
    /// The alignment in force (`general.alignment` or 32).
    pub alignment: u32,
    /// Every key/value pair in file order, each with its exact GGUF type (arrays as
    /// [`MetaValue::TypedArray`]; strings that are not UTF-8 as [`MetaValue::Bytes`]).
    pub metadata: Metadata,
    /// Absolute file offset of each key/value pair, in file order.
    pub kv_offsets: Vec<u64>,
    /// Tensor infos in file order.
    pub tensors: Vec<GgufTensor>,
    /// Absolute offset where the tensor infos end.
    pub infos_end: u64,
    /// Absolute offset of the data section (`infos_end` aligned up when there are tensors).
    pub data_start: u64,
}

/// Rounds `x` up to a multiple of `align` (a power of two), or `None` on overflow.
pub fn align_up(x: u64, align: u32) -> Option<u64> {
    let a = u64::from(align);
    x.checked_add(a - 1).map(|v| v & !(a - 1))
}

struct Cur<'a> {
    path: &'a Path,
    src: ByteCursor<'a>,
    values: u64,
    limits: &'a Limits,
}

impl<'a> Cur<'a> {
    /// The position of the next byte.
    fn pos(&self) -> usize {
        self.src.pos() as usize
    }

    fn remaining(&self) -> u64 {
        self.src.remaining()
    }

    /// The file's length.
    fn file_len(&self) -> u64 {
        self.src.source().len()
    }

    fn mal(&self, at: usize, tensor: Option<&str>, reason: String) -> Error {
        let mut loc = Location::file(self.path).at(at as u64);
        if let Some(t) = tensor {
            loc = loc.tensor(t);
        }
        Error::malformed(loc, Format::Gguf, reason)
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&[u8]> {
        if n > self.remaining() {
            return Err(self.mal(
                self.pos(),
                None,
                format!(
                    "{} needs {n} bytes but the file ends {} bytes later (truncated?)",
                    what(),
                    self.remaining()
                ),
            ));
        }
        self.src.take(n)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// A `str`: u64 length, then bytes. The length is checked against the cap and the bytes
    /// left before anything is allocated.
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<Vec<u8>> {
        let at = self.pos();
        let len = self.u64(&|| format!("the length of {}", what()))?;
        if len > self.limits.max_gguf_string {
            return Err(Error::Limit {
                at: Location::file(self.path).at(at as u64),
                what: "gguf string length",
                needed: len,
                limit: self.limits.max_gguf_string,
            });
        }
        if len > self.remaining() {
            return Err(self.mal(
                at,
                None,
                format!(
                    "{} is {len} bytes long but only {} bytes follow (truncated?)",
                    what(),
                    self.remaining()
                ),
            ));
        }
        Ok(self.take(len, what)?.to_vec())
    }

    fn count_values(&mut self, n: u64, at: usize) -> Result<()> {
        self.values = self.values.saturating_add(n);
        if self.values > self.limits.max_meta_values {
            return Err(Error::Limit {
                at: Location::file(self.path).at(at as u64),
                what: "number of gguf metadata values",
                needed: self.values,
                limit: self.limits.max_meta_values,
            });
        }
        Ok(())
    }

    fn scalar(&mut self, t: MetaType, what: &dyn Fn() -> String) -> Result<MetaValue> {
        Ok(match t {
            MetaType::U8 => MetaValue::U8(self.take(1, what)?[0]),
            MetaType::I8 => MetaValue::I8(self.take(1, what)?[0] as i8),
            // llama.cpp reads any non-zero byte as true (gguf.cpp:316-323).
            MetaType::Bool => MetaValue::Bool(self.take(1, what)?[0] != 0),
            MetaType::U16 => MetaValue::U16(u16::from_le_bytes(arr(self.take(2, what)?))),
            MetaType::I16 => MetaValue::I16(i16::from_le_bytes(arr(self.take(2, what)?))),
            MetaType::U32 => MetaValue::U32(u32::from_le_bytes(arr(self.take(4, what)?))),
            MetaType::I32 => MetaValue::I32(i32::from_le_bytes(arr(self.take(4, what)?))),
            MetaType::F32 => MetaValue::F32(f32::from_le_bytes(arr(self.take(4, what)?))),
            MetaType::U64 => MetaValue::U64(u64::from_le_bytes(arr(self.take(8, what)?))),
            MetaType::I64 => MetaValue::I64(i64::from_le_bytes(arr(self.take(8, what)?))),
            MetaType::F64 => MetaValue::F64(f64::from_le_bytes(arr(self.take(8, what)?))),
            MetaType::Str => {
                let b = self.string(what)?;
                // llama.cpp does not validate UTF-8: keep such strings, as bytes.
                match String::from_utf8(b) {
                    Ok(s) => MetaValue::Str(s),
                    Err(e) => MetaValue::Bytes(e.into_bytes()),
                }
            }
            MetaType::Array => unreachable!("arrays are read by the caller"),
        })
    }
}

fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
    b.try_into().expect("length checked by take")
}

/// Parses and validates the GGUF file whose complete contents are `buf`; `path` is used in
/// messages only.
pub fn parse(path: &Path, buf: &[u8], limits: &Limits) -> Result<GgufHeader> {
    parse_source(&InMemory::new(path, buf), limits)
}

/// Parses and validates the header of the GGUF file `src`, reading it front to back (see the
/// module docs); `src`'s name is used in messages.
pub fn parse_source(src: &dyn ByteSource, limits: &Limits) -> Result<GgufHeader> {
    let mut c = Cur {
        path: src.name(),
        src: ByteCursor::new(src, 0),
        values: 0,
        limits,
    };
    let version = version(&mut c)?;
    let (n_tensors, n_kv) = counts(&mut c)?;
    let (metadata, kv_offsets, alignment_at) = key_values(&mut c, n_kv)?;
    let alignment = alignment_of(&c, &metadata, alignment_at)?;
    let tensors = tensor_infos(&mut c, n_tensors)?;
    let infos_end = c.pos() as u64;
    let data_start = data_start(&c, &tensors, infos_end, alignment)?;
    check_offsets(&c, &tensors, data_start, alignment)?;
    Ok(GgufHeader {
        version,
        alignment,
        metadata,
        kv_offsets,
        tensors,
        infos_end,
        data_start,
    })
}

/// The magic and a supported version.
fn version(c: &mut Cur) -> Result<u32> {
    let magic = c.src.source().head(4)?;
    if magic != MAGIC {
        let head: Vec<String> = magic.iter().map(|b| format!("{b:02x}")).collect();
        return Err(Error::NotFormat {
            path: c.path.to_path_buf(),
            expected: Format::Gguf,
            what: format!(
                "not a GGUF file: it starts with bytes [{}], not the magic `GGUF` (47 47 55 46)",
                head.join(" ")
            ),
        });
    }
    c.src.seek(4);
    let version = c.u32(&|| "the version".into())?;
    let unsupported = |what: String| Error::Unsupported {
        at: Location::file(c.path).at(4),
        format: Some(Format::Gguf),
        what,
    };
    if version == 0 {
        return Err(c.mal(4, None, "version 0 is not a GGUF version".into()));
    }
    if version & 0xFFFF == 0 {
        // See: docs/specs/gguf.md §1.2 — a byte-swapped (big-endian) file reads as version 0x03000000.
        return Err(unsupported(format!(
            "version field reads {version:#010x}: a big-endian GGUF file; only little-endian \
             GGUF is supported (llama.cpp refuses these too)"
        )));
    }
    if version == 1 {
        return Err(unsupported(
            "GGUF v1 (u32 counts) is no longer supported by llama.cpp; re-convert the model".into(),
        ));
    }
    if version > 3 {
        return Err(unsupported(format!(
            "GGUF version {version}; versions 2 and 3 are supported"
        )));
    }
    Ok(version)
}

/// The tensor and key/value counts, bounded by the bytes left and the caps.
fn counts(c: &mut Cur) -> Result<(u64, u64)> {
    let n_tensors = c.u64(&|| "the tensor count".into())?;
    let n_kv = c.u64(&|| "the key/value count".into())?;
    for (n, what, min, at) in [
        (n_tensors, "tensor count", 24u64, 8usize),
        (n_kv, "key/value count", 14, 16),
    ] {
        if n > i64::MAX as u64 {
            return Err(c.mal(at, None, format!("{what} {n} is negative as i64")));
        }
        // Never allocate by count: each entry needs at least `min` bytes.
        if n > c.remaining() / min {
            return Err(c.mal(
                at,
                None,
                format!(
                    "{what} {n} cannot fit: each entry takes at least {min} bytes and only {} \
                     bytes follow the header",
                    c.remaining()
                ),
            ));
        }
        if what == "key/value count" && n > c.limits.max_meta_keys {
            return Err(Error::Limit {
                at: Location::file(c.path).at(at as u64),
                what: "number of gguf key/value pairs",
                needed: n,
                limit: c.limits.max_meta_keys,
            });
        }
        if what == "tensor count" && n > c.limits.max_tensors {
            return Err(Error::Limit {
                at: Location::file(c.path).at(at as u64),
                what: "number of tensors",
                needed: n,
                limit: c.limits.max_tensors,
            });
        }
    }
    Ok((n_tensors, n_kv))
}

/// The key/value pairs, their offsets, and where `general.alignment` was.
fn key_values(c: &mut Cur, n_kv: u64) -> Result<(Metadata, Vec<u64>, usize)> {
    let mut metadata = Metadata::new();
    let mut kv_offsets = Vec::new();
    let mut seen = HashSet::new();
    let mut alignment_at = 0usize;
    for i in 0..n_kv {
        let at = c.pos();
        let (key, value) = key_value(c, i, &mut seen)?;
        if key == ALIGNMENT_KEY {
            alignment_at = at;
        }
        kv_offsets.push(at as u64);
        metadata.insert(key, value);
    }
    Ok((metadata, kv_offsets, alignment_at))
}

/// Key/value pair `i`: a non-empty unique key, a known type, its value.
fn key_value(c: &mut Cur, i: u64, seen: &mut HashSet<String>) -> Result<(String, MetaValue)> {
    let at = c.pos();
    let kb = c.string(&|| format!("key {i}"))?;
    if kb.is_empty() {
        return Err(c.mal(at, None, format!("key {i} is empty")));
    }
    let key = String::from_utf8(kb)
        .map_err(|_| c.mal(at, None, format!("key {i} is not valid UTF-8")))?;
    let sk = sanitize(&key);
    if !seen.insert(key.clone()) {
        return Err(c.mal(at, None, format!("duplicate key `{sk}`")));
    }
    let ty_at = c.pos();
    let ty = c.u32(&|| format!("the type of key `{sk}`"))?;
    let t = types::meta_type_of(ty).ok_or_else(|| {
        c.mal(
            ty_at,
            None,
            format!("key `{sk}` has unknown value type {ty}"),
        )
    })?;
    let what = || format!("the value of key `{sk}`");
    let value = if t == MetaType::Array {
        let et_at = c.pos();
        let et = c.u32(&what)?;
        let elem = types::meta_type_of(et).ok_or_else(|| {
            c.mal(
                et_at,
                None,
                format!("key `{sk}`: array has unknown element type {et}"),
            )
        })?;
        if elem == MetaType::Array {
            // See: docs/specs/gguf.md §1.1 — gguf-py reads nested arrays, llama.cpp rejects them
            // (gguf.cpp:606-611) and its writer cannot produce them.
            return Err(Error::Unsupported {
                at: Location::file(c.path).at(et_at as u64),
                format: Some(Format::Gguf),
                what: format!("key `{sk}` is an array of arrays, which llama.cpp's reader rejects"),
            });
        }
        let n_at = c.pos();
        let n = c.u64(&what)?;
        if n > c.limits.max_gguf_array {
            return Err(Error::Limit {
                at: Location::file(c.path).at(n_at as u64),
                what: "gguf array length",
                needed: n,
                limit: c.limits.max_gguf_array,
            });
        }
        let min = types::fixed_size(elem).unwrap_or(8);
        if n > c.remaining() / min {
            return Err(c.mal(
                n_at,
                None,
                format!(
                    "key `{sk}`: array of {n} {} needs at least {} bytes but only {} follow",
                    elem.name(),
                    n.saturating_mul(min),
                    c.remaining()
                ),
            ));
        }
        c.count_values(n, n_at)?;
        let mut items = Vec::with_capacity(n as usize);
        for _ in 0..n {
            items.push(c.scalar(elem, &what)?);
        }
        MetaValue::TypedArray { elem, items }
    } else {
        c.count_values(1, ty_at)?;
        c.scalar(t, &what)?
    };
    Ok((key, value))
}

/// `general.alignment`: a `u32` non-zero power of two, or the default.
fn alignment_of(c: &Cur, metadata: &Metadata, alignment_at: usize) -> Result<u32> {
    Ok(match metadata.get(ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some(MetaValue::U32(a)) if a.is_power_of_two() => *a,
        Some(MetaValue::U32(a)) => {
            return Err(c.mal(
                alignment_at,
                None,
                format!("`{ALIGNMENT_KEY}` is {a}, not a non-zero power of two"),
            ))
        }
        Some(other) => {
            return Err(c.mal(
                alignment_at,
                None,
                format!(
                    "`{ALIGNMENT_KEY}` must have type u32 but has type {}",
                    value_type_name(other)
                ),
            ))
        }
    })
}

/// The tensor infos: names, dimensions, types and sizes.
fn tensor_infos(c: &mut Cur, n_tensors: u64) -> Result<Vec<GgufTensor>> {
    let mut tensors: Vec<GgufTensor> = Vec::new();
    let mut names = HashSet::new();
    for i in 0..n_tensors {
        tensors.push(tensor_info(c, i, &mut names)?);
    }
    Ok(tensors)
}

/// Tensor info `i`: a short unique name, at most 4 dimensions, a known type whose block
/// divides `ne[0]`, a size that fits, the offset.
fn tensor_info(c: &mut Cur, i: u64, names: &mut HashSet<String>) -> Result<GgufTensor> {
    let at = c.pos();
    let name = tensor_name(c, i, names)?;
    let what = || format!("the info of tensor `{}`", sanitize(&name));
    let nd_at = c.pos();
    let (ne, nel) = dims(c, &name)?;
    let ty_at = c.pos();
    let ty = c.u32(&what)?;
    let dtype = tensor_type(c, ty, ty_at, &name)?;
    let nbytes = tensor_bytes(c, &name, (&ne, nel), dtype, (nd_at, ty_at))?;
    let offset = c.u64(&what)?;
    Ok(GgufTensor {
        name,
        dtype,
        ggml_type: ty,
        ne,
        offset,
        nbytes,
        info_at: at as u64,
    })
}

/// Tensor `i`'s name: at most [`MAX_NAME`] bytes of UTF-8, not one of `names` (which it joins).
fn tensor_name(c: &mut Cur, i: u64, names: &mut HashSet<String>) -> Result<String> {
    let at = c.pos();
    let nb = c.string(&|| format!("the name of tensor {i}"))?;
    let lossy = String::from_utf8_lossy(&nb).into_owned();
    if nb.len() > MAX_NAME {
        return Err(c.mal(
            at,
            Some(&lossy),
            format!(
                "tensor name is {} bytes; llama.cpp allows at most {MAX_NAME} (GGML_MAX_NAME)",
                nb.len()
            ),
        ));
    }
    let name = String::from_utf8(nb)
        .map_err(|_| c.mal(at, Some(&lossy), "tensor name is not valid UTF-8".into()))?;
    if !names.insert(name.clone()) {
        return Err(c.mal(at, Some(&name), "duplicate tensor name".into()));
    }
    Ok(name)
}

/// The element type of ggml type id `ty` (read at `ty_at`): unknown and removed ids refused.
fn tensor_type(c: &Cur, ty: u32, ty_at: usize, name: &str) -> Result<DType> {
    match types::dtype_of(ty) {
        Ok(d) => Ok(d),
        Err(TypeIdError::Unknown(id)) => Err(c.mal(
            ty_at,
            Some(name),
            format!(
                "unknown ggml type id {id} (known ids are below {})",
                types::GGML_TYPE_COUNT
            ),
        )),
        Err(TypeIdError::Removed(id, n)) => Err(Error::Unsupported {
            at: Location::file(c.path).at(ty_at as u64).tensor(name),
            format: Some(Format::Gguf),
            what: format!("ggml type id {id} ({n}) was removed from ggml"),
        }),
    }
}

/// The byte size of `nel` elements `ne` of `dtype`: whole blocks per row, no overflow, whichever
/// order the dimensions multiply in (`at`: where the dimensions and the type were read).
fn tensor_bytes(
    c: &Cur,
    name: &str,
    (ne, nel): (&[u64], u64),
    dtype: DType,
    (nd_at, ty_at): (usize, usize),
) -> Result<u64> {
    let (blck, tsize) = types::block_of(dtype);
    let ne0 = ne.first().copied().unwrap_or(1);
    if ne0 % blck != 0 {
        return Err(c.mal(
            ty_at,
            Some(name),
            format!("row length ne[0] = {ne0} is not a multiple of the {dtype} block size {blck}"),
        ));
    }
    let nbytes = (nel / blck).checked_mul(tsize).ok_or_else(|| {
        c.mal(
            ty_at,
            Some(name),
            format!("byte size of {dtype} {ne:?} overflows"),
        )
    })?;
    let shape: Vec<u64> = ne.iter().rev().copied().collect();
    if dtype.byte_len(&shape) != Ok(nbytes) {
        return Err(c.mal(
            nd_at,
            Some(name),
            format!(
                "shape {shape:?} of {dtype} overflows when multiplied outermost first \
                 (llama.cpp accepts it because a dimension is 0; weightport does not)"
            ),
        ));
    }
    Ok(nbytes)
}

/// A tensor info's dimensions (at most 4, each non-negative as i64) and their element count
/// (llama.cpp's check, gguf.cpp:700-719: it must fit i64).
fn dims(c: &mut Cur, name: &str) -> Result<(Vec<u64>, u64)> {
    let what = || format!("the info of tensor `{}`", sanitize(name));
    let nd_at = c.pos();
    let n_dims = c.u32(&what)?;
    if n_dims > MAX_DIMS {
        return Err(c.mal(
            nd_at,
            Some(name),
            format!("{n_dims} dimensions; GGUF allows at most {MAX_DIMS}"),
        ));
    }
    let mut ne = Vec::with_capacity(n_dims as usize);
    for j in 0..n_dims {
        let d_at = c.pos();
        let d = c.u64(&what)?;
        if d > i64::MAX as u64 {
            return Err(c.mal(
                d_at,
                Some(name),
                format!("dimension {j} is {d}, negative as i64"),
            ));
        }
        ne.push(d);
    }
    let mut nel: u64 = ne.first().copied().unwrap_or(1);
    for &d in ne.iter().skip(1) {
        if d > 1 && (i64::MAX as u64) / d < nel {
            return Err(c.mal(
                nd_at,
                Some(name),
                format!("shape (ne) {ne:?} has more elements than fit in i64"),
            ));
        }
        nel *= d;
    }
    Ok((ne, nel))
}

/// Where the data section begins: the first multiple of the alignment after the infos.
fn data_start(c: &Cur, tensors: &[GgufTensor], infos_end: u64, alignment: u32) -> Result<u64> {
    let file_len = c.file_len();
    Ok(if tensors.is_empty() {
        infos_end
    } else {
        align_up(infos_end, alignment)
            .filter(|&d| d <= file_len)
            .ok_or_else(|| {
                c.mal(
                    c.pos(),
                    None,
                    format!(
                        "the data section would begin past the end of the file ({file_len} bytes)"
                    ),
                )
            })?
    })
}

/// Offsets exactly sequential, as llama.cpp requires (gguf.cpp:791-801), and every tensor
/// within the file.
fn check_offsets(c: &Cur, tensors: &[GgufTensor], data_start: u64, alignment: u32) -> Result<()> {
    let file_len = c.file_len();
    let mut expected = 0u64;
    let mut prev: Option<&str> = None;
    for t in tensors {
        let at = (t.info_at + 8 + t.name.len() as u64 + 4 + 8 * t.ne.len() as u64 + 4) as usize;
        let m = |reason: String| c.mal(at, Some(&t.name), reason);
        if t.offset % u64::from(alignment) != 0 {
            return Err(m(format!(
                "data offset {} is not a multiple of the alignment {alignment}",
                t.offset
            )));
        }
        if t.offset < expected {
            return Err(m(format!(
                "data offset {} overlaps the data of tensor `{}`, which ends (padded) at {expected}",
                t.offset,
                sanitize(prev.unwrap_or_default())
            )));
        }
        if t.offset > expected {
            return Err(m(format!(
                "data offset {} leaves a gap: tensors must be stored back to back in info order, \
                 so this one must start at {expected}",
                t.offset
            )));
        }
        let end = data_start
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.nbytes))
            .ok_or_else(|| m("data range overflows".into()))?;
        if end > file_len {
            return Err(m(format!(
                "data [{}, {end}) runs past the end of the file ({file_len} bytes; truncated?)",
                data_start + t.offset
            )));
        }
        expected = align_up(t.nbytes, alignment)
            .and_then(|p| expected.checked_add(p))
            .ok_or_else(|| m("data section size overflows".into()))?;
        prev = Some(&t.name);
    }
    Ok(())
}

/// The GGUF type name of a value (`u32`, `array[str]`, …), for messages.
pub fn value_type_name(v: &MetaValue) -> String {
    match v {
        MetaValue::Str(_) | MetaValue::Bytes(_) => "str".into(),
        MetaValue::Bool(_) => "bool".into(),
        MetaValue::U8(_) => "u8".into(),
        MetaValue::I8(_) => "i8".into(),
        MetaValue::U16(_) => "u16".into(),
        MetaValue::I16(_) => "i16".into(),
        MetaValue::U32(_) => "u32".into(),
        MetaValue::I32(_) => "i32".into(),
        MetaValue::U64(_) => "u64".into(),
        MetaValue::I64(_) => "i64".into(),
        MetaValue::F32(_) => "f32".into(),
        MetaValue::F64(_) => "f64".into(),
        MetaValue::TypedArray { elem, .. } => format!("array[{}]", elem.name()),
        MetaValue::Array(_) => "array".into(),
        _ => "non-GGUF value".into(),
    }
}
