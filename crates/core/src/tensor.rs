//! Tensor descriptions and non-tensor metadata.

use crate::dtype::DType;

/// One tensor as a reader describes it from headers alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The name (any UTF-8 string; may contain control characters: sanitize before printing).
    pub name: String,
    /// The element type of the logical bytes the source yields.
    pub dtype: DType,
    /// Dimensions, outermost first (row-major). Empty for a scalar.
    pub shape: Vec<u64>,
    /// Length in bytes of the logical (little-endian, row-major) data.
    pub byte_len: u64,
}

impl TensorInfo {
    /// Element count.
    pub fn numel(&self) -> u64 {
        DType::numel(&self.shape).unwrap_or(0)
    }
}

/// A typed metadata value. Covers GGUF key/value types exactly and the plain values a pickle
/// or a JSON header can carry.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum MetaValue {
    /// UTF-8 string.
    Str(String),
    /// Boolean.
    Bool(bool),
    /// u8.
    U8(u8),
    /// i8.
    I8(i8),
    /// u16.
    U16(u16),
    /// i16.
    I16(i16),
    /// u32.
    U32(u32),
    /// i32.
    I32(i32),
    /// u64.
    U64(u64),
    /// i64.
    I64(i64),
    /// f32.
    F32(f32),
    /// f64.
    F64(f64),
    /// A list (homogeneous in GGUF; free in pickles).
    Array(Vec<MetaValue>),
    /// A string-keyed map, in order.
    Map(Vec<(String, MetaValue)>),
    /// Absent / None.
    Null,
}

impl MetaValue {
    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A compact text rendering (strings as-is, everything else in JSON-like notation).
    pub fn to_text(&self) -> String {
        match self {
            MetaValue::Str(s) => s.clone(),
            other => other.to_json_like(),
        }
    }

    fn to_json_like(&self) -> String {
        match self {
            MetaValue::Str(s) => format!("{s:?}"),
            MetaValue::Bool(b) => b.to_string(),
            MetaValue::U8(v) => v.to_string(),
            MetaValue::I8(v) => v.to_string(),
            MetaValue::U16(v) => v.to_string(),
            MetaValue::I16(v) => v.to_string(),
            MetaValue::U32(v) => v.to_string(),
            MetaValue::I32(v) => v.to_string(),
            MetaValue::U64(v) => v.to_string(),
            MetaValue::I64(v) => v.to_string(),
            MetaValue::F32(v) => v.to_string(),
            MetaValue::F64(v) => v.to_string(),
            MetaValue::Array(a) => {
                let items: Vec<String> = a.iter().map(|v| v.to_json_like()).collect();
                format!("[{}]", items.join(","))
            }
            MetaValue::Map(m) => {
                let items: Vec<String> = m
                    .iter()
                    .map(|(k, v)| format!("{k:?}:{}", v.to_json_like()))
                    .collect();
                format!("{{{}}}", items.join(","))
            }
            MetaValue::Null => "null".into(),
        }
    }
}

/// Ordered key/value metadata of a source (safetensors `__metadata__`, GGUF key/values, …).
/// Keys are unique; insertion order is kept (GGUF writers need it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, MetaValue)>,
}

impl Metadata {
    /// Empty metadata.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key`, replacing an existing value in place.
    pub fn insert(&mut self, key: impl Into<String>, value: MetaValue) {
        let key = key.into();
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    /// Looks a key up.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &MetaValue)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl FromIterator<(String, MetaValue)> for Metadata {
    fn from_iter<I: IntoIterator<Item = (String, MetaValue)>>(iter: I) -> Self {
        let mut m = Metadata::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}
