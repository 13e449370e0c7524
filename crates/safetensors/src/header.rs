//! Header parsing and validation, in the reference's order (docs/specs/safetensors.md §1.2).
//!
//! ```text
//! [u64 LE N][N bytes of UTF-8 JSON][data: every tensor's bytes, tiling [0, len) exactly]
//! ```
//! See: <https://github.com/huggingface/safetensors#format>
//!
//! The JSON is strict (serde_json): whitespace may surround the object; trailing characters,
//! trailing commas, non-integer offsets and unknown dtypes are errors. Stricter than the
//! reference, which silently keeps the last of two tensors with one name (reference issue
//! #401): a duplicate tensor name is an error here, and so is a tensor named `__metadata__`.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use weightport_core::{DType, Limits, SizeError};

use crate::dtypes;

/// One tensor entry, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Name.
    pub name: String,
    /// Dtype.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<u64>,
    /// `[begin, end)` relative to the data section.
    pub begin: u64,
    /// End offset (exclusive), relative to the data section.
    pub end: u64,
}

/// A parsed and validated header.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// `__metadata__`: `None` when absent or `null`. Keys sorted.
    pub metadata: Option<BTreeMap<String, String>>,
    /// Tensors in data-offset order.
    pub tensors: Vec<Entry>,
    /// Total data bytes the tensors cover.
    pub data_len: u64,
}

/// A header problem, with the byte offset (relative to the JSON's first byte, or to the data
/// section for [`HeaderError::at_data`]) where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeaderError {
    /// Human-readable reason.
    pub reason: String,
    /// The tensor concerned.
    pub tensor: Option<String>,
    /// Offset within the JSON text.
    pub json_offset: Option<u64>,
    /// Offset within the data section.
    pub data_offset: Option<u64>,
    /// A limit was exceeded (`what`, found, cap): a refusal rather than malformation.
    pub limit: Option<(&'static str, u64, u64)>,
}

impl HeaderError {
    fn new(reason: impl Into<String>) -> Self {
        HeaderError {
            reason: reason.into(),
            tensor: None,
            json_offset: None,
            data_offset: None,
            limit: None,
        }
    }
}

#[derive(Deserialize)]
struct RawTensor {
    dtype: RawDType,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

struct RawDType(DType);

impl<'de> Deserialize<'de> for RawDType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        dtypes::parse(&s)
            .map(RawDType)
            .ok_or_else(|| de::Error::unknown_variant(&s, &dtypes::NAMES))
    }
}

struct RawHeader {
    metadata: Option<BTreeMap<String, String>>,
    tensors: Vec<(String, RawTensor)>,
}

struct HeaderVisitor {
    max_tensors: u64,
}

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = RawHeader;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object of tensors")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawHeader, A::Error> {
        let mut seen = HashSet::new();
        let mut metadata_seen = false;
        let mut metadata = None;
        let mut tensors = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "__metadata__" {
                if metadata_seen {
                    return Err(de::Error::duplicate_field("__metadata__"));
                }
                metadata_seen = true;
                let v: serde_json::Value = map.next_value()?;
                metadata = metadata_from_value(v).map_err(de::Error::custom)?;
                continue;
            }
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!(
                    "duplicate tensor name `{}` (the reference keeps the last one silently)",
                    weightport_core::sanitize(&key)
                )));
            }
            if tensors.len() as u64 >= self.max_tensors {
                return Err(de::Error::custom(format!(
                    "more than {} tensors",
                    self.max_tensors
                )));
            }
            let t: RawTensor = map.next_value()?;
            tensors.push((key, t));
        }
        Ok(RawHeader { metadata, tensors })
    }
}

fn metadata_from_value(v: serde_json::Value) -> Result<Option<BTreeMap<String, String>>, String> {
    use serde_json::Value;
    match v {
        Value::Null => Ok(None),
        Value::Object(obj) => {
            if obj.contains_key("data_offsets") && obj.contains_key("dtype") {
                return Err("a tensor may not be named `__metadata__`".into());
            }
            let mut out = BTreeMap::new();
            for (k, v) in obj {
                match v {
                    Value::String(s) => {
                        out.insert(k, s);
                    }
                    other => {
                        return Err(format!(
                            "__metadata__ value for `{}` is {}, expected a string",
                            weightport_core::sanitize(&k),
                            json_kind(&other)
                        ))
                    }
                }
            }
            Ok(Some(out))
        }
        other => Err(format!(
            "__metadata__ is {}, expected a map of strings",
            json_kind(&other)
        )),
    }
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Byte offset of serde_json's (line, column) within `text` (columns are 1-based bytes).
fn json_position(text: &[u8], line: usize, column: usize) -> u64 {
    let mut start = 0usize;
    for _ in 1..line {
        match text[start..].iter().position(|&b| b == b'\n') {
            Some(p) => start += p + 1,
            None => break,
        }
    }
    (start + column.saturating_sub(1)).min(text.len()) as u64
}

/// Parses the JSON header (steps 4–6 of docs/specs/safetensors.md §1.2) and validates the offsets against
/// `data_len`, the number of bytes after the header (step 7).
pub(crate) fn parse(json: &[u8], data_len: u64, limits: &Limits) -> Result<Header, HeaderError> {
    let text = std::str::from_utf8(json).map_err(|e| {
        let mut err = HeaderError::new(format!("invalid UTF-8 in header: {e}"));
        err.json_offset = Some(e.valid_up_to() as u64);
        err
    })?;
    let mut de = serde_json::Deserializer::from_str(text);
    let raw = de
        .deserialize_map(HeaderVisitor {
            max_tensors: limits.max_tensors,
        })
        .and_then(|h| de.end().map(|()| h))
        .map_err(|e| {
            let mut err = HeaderError::new(format!("invalid JSON in header: {e}"));
            err.json_offset = Some(json_position(json, e.line(), e.column()));
            err
        })?;
    validate(raw, data_len, limits)
}

fn validate(raw: RawHeader, data_len: u64, limits: &Limits) -> Result<Header, HeaderError> {
    let mut tensors: Vec<Entry> = raw
        .tensors
        .into_iter()
        .map(|(name, t)| Entry {
            name,
            dtype: t.dtype.0,
            shape: t.shape,
            begin: t.data_offsets.0,
            end: t.data_offsets.1,
        })
        .collect();
    tensors.sort_by_key(|t| (t.begin, t.end));
    let mut start = 0u64;
    for t in &tensors {
        check_entry(t, start, limits)?;
        start = t.end;
    }
    if start != data_len {
        return Err(not_covered(&tensors, start, data_len));
    }
    Ok(Header {
        metadata: raw.metadata,
        tensors,
        data_len,
    })
}

/// One tensor, in offset order after the one ending at `start`: its rank within the limit, its
/// offsets contiguous with the previous tensor, and exactly the bytes its dtype and shape need.
fn check_entry(t: &Entry, start: u64, limits: &Limits) -> Result<(), HeaderError> {
    let fail = |reason: String| HeaderError {
        reason,
        tensor: Some(t.name.clone()),
        json_offset: None,
        data_offset: Some(t.begin),
        limit: None,
    };
    if t.shape.len() > limits.max_rank {
        let mut e = fail(format!(
            "rank {} exceeds the limit of {}",
            t.shape.len(),
            limits.max_rank
        ));
        e.limit = Some(("tensor rank", t.shape.len() as u64, limits.max_rank as u64));
        return Err(e);
    }
    if t.begin != start || t.end < t.begin {
        let why = if t.end < t.begin {
            format!(
                "data_offsets [{}, {}] end before they begin",
                t.begin, t.end
            )
        } else if t.begin < start {
            format!(
                "data_offsets [{}, {}] overlap the previous tensor, which ends at {start}",
                t.begin, t.end
            )
        } else {
            format!(
                "data_offsets [{}, {}] leave a gap: the previous tensor ends at {start}",
                t.begin, t.end
            )
        };
        return Err(fail(format!("invalid offset: {why}")));
    }
    let need = t.dtype.byte_len(&t.shape).map_err(|e| match e {
        SizeError::Overflow => fail("overflow computing buffer size from shape and dtype".into()),
        other => fail(other.to_string()),
    })?;
    if t.end - t.begin != need {
        return Err(fail(format!(
            "data_offsets [{}, {}] hold {} bytes but {} {:?} needs {need}",
            t.begin,
            t.end,
            t.end - t.begin,
            t.dtype,
            t.shape
        )));
    }
    Ok(())
}

/// The error when the tensors' bytes, ending at `start`, do not cover the `data_len` data bytes
/// exactly: truncated (naming the first tensor cut) or trailing bytes.
fn not_covered(tensors: &[Entry], start: u64, data_len: u64) -> HeaderError {
    let mut e = if start > data_len {
        let cut = tensors
            .iter()
            .find(|t| t.end > data_len)
            .expect("some tensor ends past the data");
        let mut e = HeaderError::new(format!(
            "truncated: the header describes {start} data bytes but the file holds {data_len} \
             (an incomplete download? compare the size with the source)"
        ));
        e.tensor = Some(cut.name.clone());
        e.data_offset = Some(data_len);
        e
    } else {
        let mut e = HeaderError::new(format!(
            "{} trailing bytes after the last tensor: the header describes {start} data bytes but \
             the file holds {data_len}",
            data_len - start
        ));
        e.data_offset = Some(start);
        e
    };
    e.reason = format!("incomplete metadata, file not fully covered: {}", e.reason);
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(json: &str, data_len: u64) -> Result<Header, HeaderError> {
        parse(json.as_bytes(), data_len, &Limits::default())
    }

    #[test]
    fn accepts_legal_edge_cases() {
        let h = p(r#" {"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} "#, 16).unwrap();
        assert_eq!(h.tensors[0].name, "a");
        assert!(p(r#"{"__metadata__":null}"#, 0).unwrap().metadata.is_none());
        assert!(p(
            r#"{"s":{"dtype":"I32","shape":[],"data_offsets":[0,4]}}"#,
            4
        )
        .is_ok());
        assert!(p(r#"{"e":{"dtype":"F32","shape":[2,0],"data_offsets":[0,0]},"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"z":{"dtype":"F32","shape":[0],"data_offsets":[1,1]}}"#, 1).is_ok());
        assert!(p(
            r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":1}}"#,
            1
        )
        .is_ok());
    }

    /// Headers the reference implementation refuses: the header, the data length, a part of the
    /// reason.
    const MALFORMED: &[(&str, u64, &str)] = &[
        (
            r#"{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,20]}}"#,
            20,
            "hold 20 bytes",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}"#,
            24,
            "overlap",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[20,36]}}"#,
            36,
            "gap",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}}"#,
            16,
            "end before",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
            12,
            "truncated",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
            20,
            "trailing bytes",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
            16,
            "duplicate tensor name",
        ),
        (
            r#"{"__metadata__":{},"__metadata__":{}}"#,
            0,
            "duplicate field",
        ),
        (
            r#"{"a":{"dtype":"F32","dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
            16,
            "duplicate field `dtype`",
        ),
        (
            r#"{"a":{"dtype":"F128","shape":[4],"data_offsets":[0,16]}}"#,
            16,
            "unknown variant `F128`",
        ),
        (
            r#"{"a":{"dtype":"Q4_0","shape":[32],"data_offsets":[0,18]}}"#,
            18,
            "unknown variant",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[-1,16]}}"#,
            16,
            "invalid value",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0.0,16.0]}}"#,
            16,
            "floating point",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16,3]}}"#,
            16,
            "invalid JSON in header",
        ),
        (
            r#"{"a":{"dtype":"I32","shape":[2,9223372036854775807],"data_offsets":[0,16]}}"#,
            16,
            "overflow",
        ),
        (
            r#"{"a":{"dtype":"F32","data_offsets":[0,16]}}"#,
            16,
            "missing field `shape`",
        ),
        (r#"{"__metadata__":{"x":1}}"#, 0, "expected a string"),
        (r#"{"__metadata__":"x"}"#, 0, "expected a map"),
        (
            r#"{"__metadata__":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            4,
            "may not be named `__metadata__`",
        ),
        (
            r#"{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}"#,
            1,
            "byte boundary",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,0]}}"#,
            0,
            "hold 0 bytes",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[],"data_offsets":[0,0]}}"#,
            0,
            "hold 0 bytes",
        ),
        ("[]", 0, "invalid type: sequence"),
        ("null", 0, "invalid type: null"),
        (r#"{"a":5}"#, 0, "invalid type: integer"),
        ("{}\0\0", 0, "trailing characters"),
        (r#"{"__metadata__":{},}"#, 0, "trailing comma"),
        ("", 0, "EOF while parsing"),
        ("\u{feff}{}", 0, "expected value"),
        (r#"{"\ud800":1}"#, 0, "escape"),
    ];

    #[test]
    fn rejects_reference_malformed_cases() {
        for (json, len, want) in MALFORMED {
            let err = p(json, *len).expect_err(json);
            assert!(
                err.reason.contains(want),
                "{json}: got {:?}, want {want:?}",
                err.reason
            );
        }
    }

    #[test]
    fn errors_carry_positions() {
        let err = p(r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[20,36]}}"#, 36).unwrap_err();
        assert_eq!(err.tensor.as_deref(), Some("b"));
        assert_eq!(err.data_offset, Some(20));
        let err = p("{\n  \"a\": x}", 0).unwrap_err();
        assert_eq!(err.json_offset, Some(9));
        let err = parse(b"{\"a\xff\":1}", 0, &Limits::default()).unwrap_err();
        assert_eq!(err.json_offset, Some(3));
    }
}
