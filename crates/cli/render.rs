//! How results are shown: sizes, paths and metadata values as text, and the JSON pieces
//! every command's document shares (the error document, I/O counts, quality).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use weightport_core::{sanitize, IoCounts, MetaValue};

/// The error document `{"ok": false, "error": {...}}`.
pub(crate) fn error_json(kind: &str, message: &str, code: i32) -> String {
    json!({"ok": false, "error": {"kind": kind, "message": message, "exit_code": code}}).to_string()
}

/// Prints the error document on stdout.
pub(crate) fn print_error_json(kind: &str, message: &str, code: i32) {
    let _ = writeln!(std::io::stdout(), "{}", error_json(kind, message, code));
}

/// The `io` object of a `--json` document: what the job wrote, opened and synced.
pub(crate) fn io_json(c: &IoCounts) -> Value {
    json!({
        "files": c.files,
        "writes": c.writes,
        "bytes_written": c.bytes_written,
        "bytes_copied": c.bytes_copied,
        "opens": c.opens,
        "syncs": c.syncs,
    })
}

pub(crate) fn human(bytes: u64) -> String {
    const U: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1000.0 && u < U.len() - 1 {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", U[u])
    }
}

pub(crate) fn p(path: &Path) -> String {
    sanitize(&path.display().to_string())
}

pub(crate) fn paths(v: &[PathBuf]) -> Value {
    Value::Array(
        v.iter()
            .map(|x| Value::String(x.display().to_string()))
            .collect(),
    )
}

/// Arrays longer than this are summarized (`[str; 32000]`) in `inspect`.
pub(crate) const SHOW_ITEMS: usize = 16;

pub(crate) fn long_array(v: &MetaValue) -> Option<(String, usize)> {
    match v {
        MetaValue::TypedArray { elem, items } if items.len() > SHOW_ITEMS => {
            Some((elem.name().to_string(), items.len()))
        }
        MetaValue::Array(items) if items.len() > SHOW_ITEMS => Some(("any".into(), items.len())),
        _ => None,
    }
}

pub(crate) fn meta_text(v: &MetaValue) -> String {
    match long_array(v) {
        Some((elem, n)) => format!("[{elem}; {n}]"),
        None => v.to_text(),
    }
}

pub(crate) fn meta_json(v: &MetaValue) -> Value {
    match (v, long_array(v)) {
        (_, Some((elem, n))) => json!({"array_of": elem, "len": n}),
        (MetaValue::Str(s), _) => Value::String(s.clone()),
        (other, _) => Value::String(other.to_text()),
    }
}

/// A tensor's quality figures in `--json`.
pub(crate) fn quality_json(q: weightport_engine::Quality) -> Value {
    json!({"values": q.values, "rmse": q.rmse, "max_abs_error": q.max_abs,
           "relative_error": q.relative, "clipped_share": q.clipped,
           "weighted_rmse": q.weighted_rmse, "weighted_max_abs_error": q.weighted_max_abs})
}
