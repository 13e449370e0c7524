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
    /// A GGUF array: its element type is part of the value, so an empty array round-trips.
    TypedArray {
        /// The element type.
        elem: MetaType,
        /// The elements (each of type `elem`).
        items: Vec<MetaValue>,
    },
    /// A string-keyed map, in order.
    Map(Vec<(String, MetaValue)>),
    /// A map whose keys are not all strings (pickle dicts keyed by ints or tuples), in order.
    Dict(Vec<(MetaValue, MetaValue)>),
    /// Raw bytes (pickle `bytes`/`bytearray`).
    Bytes(Vec<u8>),
    /// An integer outside i64/u64 (pickle `LONG`), as a decimal string.
    BigInt(String),
    /// An object weightport does not interpret, described by its class (`module.Name`) and
    /// the inert state it was built from.
    Object {
        /// `module.qualname` of the class.
        class: String,
        /// The arguments/state, as inert values.
        state: Box<MetaValue>,
    },
    /// Absent / None.
    Null,
}

/// The type of a GGUF value (and of a [`MetaValue::TypedArray`]'s elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaType {
    /// u8.
    U8,
    /// i8.
    I8,
    /// u16.
    U16,
    /// i16.
    I16,
    /// u32.
    U32,
    /// i32.
    I32,
    /// f32.
    F32,
    /// bool.
    Bool,
    /// string.
    Str,
    /// array (nested arrays: gguf-py writes them, llama.cpp's reader refuses them).
    Array,
    /// u64.
    U64,
    /// i64.
    I64,
    /// f64.
    F64,
}

impl MetaType {
    /// The lowercase name (`u32`, `str`, …).
    pub fn name(self) -> &'static str {
        match self {
            MetaType::U8 => "u8",
            MetaType::I8 => "i8",
            MetaType::U16 => "u16",
            MetaType::I16 => "i16",
            MetaType::U32 => "u32",
            MetaType::I32 => "i32",
            MetaType::F32 => "f32",
            MetaType::Bool => "bool",
            MetaType::Str => "str",
            MetaType::Array => "array",
            MetaType::U64 => "u64",
            MetaType::I64 => "i64",
            MetaType::F64 => "f64",
        }
    }
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
            MetaValue::Array(a) | MetaValue::TypedArray { items: a, .. } => {
                let items: Vec<String> = a.iter().map(|v| v.to_json_like()).collect();
                format!("[{}]", items.join(","))
            }
            MetaValue::Dict(m) => {
                let items: Vec<String> = m
                    .iter()
                    .map(|(k, v)| format!("{}:{}", k.to_json_like(), v.to_json_like()))
                    .collect();
                format!("{{{}}}", items.join(","))
            }
            MetaValue::Bytes(b) => format!("<{} bytes>", b.len()),
            MetaValue::BigInt(s) => s.clone(),
            MetaValue::Object { class, state } => format!("{class}({})", state.to_json_like()),
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

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<MetaValue> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }

    /// Sets `key` as the last entry (removing it first where it was): what llama.cpp's
    /// `gguf_set_val_*` does, so rewritten keys move to the end.
    pub fn push_last(&mut self, key: impl Into<String>, value: MetaValue) {
        let key = key.into();
        self.remove(&key);
        self.entries.push((key, value));
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
