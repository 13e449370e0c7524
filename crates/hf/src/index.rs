//! `model.safetensors.index.json` (and `pytorch_model.bin.index.json`): reading and writing.
//!
//! Written as transformers 5 does: `json.dumps(index, indent=2, sort_keys=True) + "\n"` with
//! `{"metadata": {"total_parameters": n, "total_size": bytes}, "weight_map": {tensor: file}}`.
//! Python's `json.dumps` escapes every non-ASCII character (`ensure_ascii`), so this writer
//! does too, to stay byte-identical.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use serde_json::Value;
use weightport_core::{sanitize, Error, Format, Limits, Location, Result};

/// A parsed index.
#[derive(Debug, Clone, PartialEq)]
pub struct Index {
    /// `metadata.total_size`, if present and an integer.
    pub total_size: Option<u64>,
    /// tensor name → shard file name.
    pub weight_map: BTreeMap<String, String>,
}

impl Index {
    /// Shard files in the order loaders use: sorted, deduplicated.
    pub fn shards(&self) -> Vec<String> {
        let mut v: Vec<String> = self.weight_map.values().cloned().collect();
        v.sort();
        v.dedup();
        v
    }
}

/// Reads and checks an index file: `weight_map` must be an object of strings, and every shard
/// name must stay inside the repo (no absolute path, no `..`).
pub fn read_index(path: &Path, limits: &Limits) -> Result<Index> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, "open", e))?;
    if meta.len() > limits.max_index_bytes {
        return Err(Error::Limit {
            at: Location::file(path),
            what: "index file size",
            needed: meta.len(),
            limit: limits.max_index_bytes,
        });
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, "read", e))?;
    let sniffed = weightport_core::sniff(&bytes[..bytes.len().min(64)]);
    if matches!(
        sniffed,
        weightport_core::Sniffed::LfsPointer | weightport_core::Sniffed::Html
    ) {
        return Err(Error::NotFormat {
            path: path.to_path_buf(),
            expected: Format::Safetensors,
            what: sniffed.describe(),
        });
    }
    let bad = |offset: Option<u64>, reason: String| {
        Error::malformed(
            Location {
                path: path.to_path_buf(),
                tensor: None,
                offset,
            },
            Format::Safetensors,
            format!("index: {reason}"),
        )
    };
    let v: Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(None, format!("invalid JSON: {e}")))?;
    let map = v
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| bad(None, "no `weight_map` object".into()))?;
    let mut weight_map = BTreeMap::new();
    for (k, v) in map {
        let file = v.as_str().ok_or_else(|| {
            bad(
                None,
                format!("weight_map[`{}`] is not a string", sanitize(k)),
            )
        })?;
        check_inside(file).map_err(|reason| Error::Refused {
            at: Location::file(path).tensor(k.clone()),
            reason: format!("shard `{}` {reason}", sanitize(file)),
        })?;
        weight_map.insert(k.clone(), file.to_string());
    }
    let total_size = v
        .get("metadata")
        .and_then(|m| m.get("total_size"))
        .and_then(Value::as_u64);
    Ok(Index {
        total_size,
        weight_map,
    })
}

/// Refuses a shard name that would leave the repo directory.
pub fn check_inside(name: &str) -> std::result::Result<(), String> {
    let p = Path::new(name);
    if name.is_empty() {
        return Err("is an empty name".into());
    }
    for c in p.components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            _ => return Err("is a path outside the repo".into()),
        }
    }
    if name.contains('\\') || name.contains('\0') {
        return Err("is a path outside the repo".into());
    }
    Ok(())
}

/// Renders an index the way transformers 5 writes it (sorted keys, indent 2, ASCII-only,
/// trailing newline).
pub fn render_index(
    total_parameters: u64,
    total_size: u64,
    weight_map: &BTreeMap<String, String>,
) -> String {
    let mut s = String::new();
    s.push_str("{\n  \"metadata\": {\n");
    s.push_str(&format!("    \"total_parameters\": {total_parameters},\n"));
    s.push_str(&format!("    \"total_size\": {total_size}\n  }},\n"));
    if weight_map.is_empty() {
        s.push_str("  \"weight_map\": {}\n}\n");
        return s;
    }
    s.push_str("  \"weight_map\": {\n");
    let n = weight_map.len();
    for (i, (k, v)) in weight_map.iter().enumerate() {
        s.push_str("    ");
        py_string(&mut s, k);
        s.push_str(": ");
        py_string(&mut s, v);
        s.push_str(if i + 1 < n { ",\n" } else { "\n" });
    }
    s.push_str("  }\n}\n");
    s
}

/// Python `json.dumps` string encoding with `ensure_ascii=True`. Keys sort by code point in
/// Python and by UTF-8 bytes in a BTreeMap: the two orders agree.
fn py_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traversal_is_refused() {
        assert!(check_inside("model-00001-of-00002.safetensors").is_ok());
        assert!(check_inside("../x.safetensors").is_err());
        assert!(check_inside("/etc/passwd").is_err());
        assert!(check_inside("a/../../b").is_err());
        assert!(check_inside("").is_err());
    }

    #[test]
    fn python_escaping() {
        let mut s = String::new();
        py_string(&mut s, "é\n\u{1}\u{7f}😀\"");
        assert_eq!(s, r#""\u00e9\n\u0001\u007f\ud83d\ude00\"""#);
    }
}
