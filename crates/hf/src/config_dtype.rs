//! `config.json` after `--dtype`: the `dtype` / `torch_dtype` values rewritten in place, as
//! `save_pretrained` of the cast model writes them, every other byte kept (key order,
//! spacing, escapes).

use weightport_core::DType;

/// Largest config.json rewritten (larger ones are copied unchanged).
const MAX_CONFIG: u64 = 16 << 20;

/// torch's name of a floating dtype (`None`: torch has no such dtype name to write).
pub(crate) fn torch_name(d: DType) -> Option<&'static str> {
    Some(match d.name() {
        "F64" => "float64",
        "F32" => "float32",
        "F16" => "float16",
        "BF16" => "bfloat16",
        "F8_E4M3" => "float8_e4m3fn",
        "F8_E5M2" => "float8_e5m2",
        _ => return None,
    })
}

fn is_float_name(s: &str) -> bool {
    matches!(s, "float64" | "float32" | "float16" | "bfloat16")
        || s.starts_with("float8_")
        || s.starts_with("torch.float")
        || s.starts_with("torch.bfloat")
}

/// The end (exclusive, past the closing quote) of the JSON string starting at `start`.
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// `text` with every `"dtype"` / `"torch_dtype"` key (at any depth) whose value is a floating
/// dtype name set to `to`; `None` when `text` is not JSON or nothing changes.
pub(crate) fn rewrite(text: &str, to: &str) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(text).ok()?;
    let b = text.as_bytes();
    let (mut out, mut copied, mut i) = (String::new(), 0, 0);
    while i < b.len() {
        if b[i] != b'"' {
            i += 1;
            continue;
        }
        let end = string_end(b, i)?;
        let key = &text[i + 1..end - 1];
        let colon = skip_ws(b, end);
        if matches!(key, "dtype" | "torch_dtype") && b.get(colon) == Some(&b':') {
            let v = skip_ws(b, colon + 1);
            if b.get(v) == Some(&b'"') {
                let vend = string_end(b, v)?;
                let value = &text[v + 1..vend - 1];
                if is_float_name(value) && value != to {
                    out.push_str(&text[copied..v + 1]);
                    out.push_str(to);
                    copied = vend - 1;
                }
                i = vend;
                continue;
            }
        }
        i = end;
    }
    (copied > 0).then(|| out + &text[copied..])
}

/// The bytes of `path` (a config.json) rewritten for `dtype`, or `None` to copy it as is
/// (unreadable, too large, not JSON, no floating `dtype` to change).
pub(crate) fn config_for(path: &std::path::Path, dtype: DType) -> Option<Vec<u8>> {
    let to = torch_name(dtype)?;
    if std::fs::metadata(path).ok()?.len() > MAX_CONFIG {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    rewrite(&text, to).map(String::into_bytes)
}

#[cfg(test)]
mod tests {
    use super::rewrite;

    #[test]
    fn only_floating_dtype_values_change_and_every_other_byte_stays() {
        let src = "{\n  \"a\": \"dtype\",\n  \"dtype\" : \"float16\",\n  \"text_config\": {\"torch_dtype\":\"bfloat16\", \"x\": 1},\n  \"quant\": {\"dtype\": \"int8\"},\n  \"s\": \"\\\"dtype\\\": \\\"float16\\\"\"\n}";
        let want = "{\n  \"a\": \"dtype\",\n  \"dtype\" : \"float32\",\n  \"text_config\": {\"torch_dtype\":\"float32\", \"x\": 1},\n  \"quant\": {\"dtype\": \"int8\"},\n  \"s\": \"\\\"dtype\\\": \\\"float16\\\"\"\n}";
        assert_eq!(rewrite(src, "float32").as_deref(), Some(want));
        assert_eq!(rewrite(want, "float32"), None);
        assert_eq!(rewrite("{\"dtype\": \"float16\"", "float32"), None);
    }
}
