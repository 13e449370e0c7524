//! `weightport diff A B`: a table of the tensors that differ, or one JSON document
//! (docs/json/diff.schema.json); exit 0 when equal, 1 when not.

use std::io::Write;

use serde_json::{json, Value};
use weightport_core::{sanitize, TensorSource};
use weightport_edit::diff::{diff, DiffOptions, DiffReport, Status, TensorDiff};

use crate::args::DiffArgs;
use crate::options::open_one;
use crate::render::p;
use crate::Failure;

pub(crate) fn run(a: &DiffArgs, json: bool, out: &mut impl Write) -> Result<(), Failure> {
    for (name, v) in [("--atol", a.atol), ("--rtol", a.rtol)] {
        if v.is_some_and(|x| !(x >= 0.0 && x.is_finite())) {
            return Err(weightport_core::Error::Usage(format!(
                "{name}: must be a finite number >= 0"
            ))
            .into());
        }
    }
    let ia = open_one(&a.a, &a.read)?;
    let ib = open_one(&a.b, &a.read)?;
    let mut opts = DiffOptions::default();
    opts.atol = a.atol;
    opts.rtol = a.rtol;
    let r = diff(ia.source.as_ref(), ib.source.as_ref(), opts)?;
    let recovered = weightport_edit::notices();
    if json {
        writeln!(
            out,
            "{}",
            document(a, ia.source.as_ref(), ib.source.as_ref(), &r, &recovered)
        )?;
    } else {
        text(a, &r, out)?;
    }
    if r.equal() {
        Ok(())
    } else {
        Err(Failure::Findings(1, None))
    }
}

fn side(s: &dyn TensorSource) -> Value {
    json!({
        "format": s.format().name(),
        "files": s.files().iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
        "tensors": s.tensors().len(),
    })
}

fn tensor_json(t: &TensorDiff) -> Value {
    json!({
        "name": t.name,
        "status": t.status.name(),
        "dtype_a": t.a.as_ref().map(|x| x.0.name()),
        "dtype_b": t.b.as_ref().map(|x| x.0.name()),
        "shape_a": t.a.as_ref().map(|x| &x.1),
        "shape_b": t.b.as_ref().map(|x| &x.1),
        "elements": t.elements,
        "changed": t.changed,
        "max_abs": t.max_abs.map(finite_or_text),
        "max_rel": t.max_rel.map(finite_or_text),
        "nonfinite": t.nonfinite,
        "rows": t.rows.iter().map(|(x, y)| json!([x, y])).collect::<Vec<_>>(),
        "rows_truncated": t.rows_truncated,
        "hash_a": t.hash_a.map(|h| h.to_string()),
        "hash_b": t.hash_b.map(|h| h.to_string()),
    })
}

/// JSON numbers are finite: an infinite figure is written as the string "inf".
fn finite_or_text(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        json!("inf")
    }
}

fn counts(r: &DiffReport) -> Value {
    let mut m = serde_json::Map::new();
    for s in [
        Status::Same,
        Status::Changed,
        Status::DtypeChanged,
        Status::ShapeChanged,
        Status::OnlyInA,
        Status::OnlyInB,
    ] {
        m.insert(
            s.name().into(),
            json!(r.tensors.iter().filter(|t| t.status == s).count()),
        );
    }
    Value::Object(m)
}

fn document(
    a: &DiffArgs,
    sa: &dyn TensorSource,
    sb: &dyn TensorSource,
    r: &DiffReport,
    recovered: &[String],
) -> Value {
    json!({
        "ok": r.equal(),
        "command": "diff",
        "equal": r.equal(),
        "a": side(sa),
        "b": side(sb),
        "atol": a.atol,
        "rtol": a.rtol,
        "counts": counts(r),
        "bytes_read_a": r.read_a,
        "bytes_read_b": r.read_b,
        "tensors": r.tensors.iter().map(tensor_json).collect::<Vec<_>>(),
        "recovered": recovered,
    })
}

fn rows_text(t: &TensorDiff) -> String {
    let shown: Vec<String> = t
        .rows
        .iter()
        .take(4)
        .map(|(a, b)| {
            if b - a == 1 {
                a.to_string()
            } else {
                format!("{a}..{b}")
            }
        })
        .collect();
    let more = if t.rows.len() > 4 || t.rows_truncated {
        ", …"
    } else {
        ""
    };
    format!("rows {}{more}", shown.join(", "))
}

fn line(t: &TensorDiff) -> String {
    let ty = |x: &Option<(weightport_core::DType, Vec<u64>)>| {
        x.as_ref()
            .map(|(d, s)| format!("{} {s:?}", d.name()))
            .unwrap_or_default()
    };
    match t.status {
        Status::OnlyInA => format!("only in A      {}  {}", sanitize(&t.name), ty(&t.a)),
        Status::OnlyInB => format!("only in B      {}  {}", sanitize(&t.name), ty(&t.b)),
        Status::ShapeChanged => format!(
            "shape changed  {}  {} → {}",
            sanitize(&t.name),
            ty(&t.a),
            ty(&t.b)
        ),
        _ => {
            let head = if t.status == Status::DtypeChanged {
                format!(
                    "dtype changed  {}  {} → {}",
                    sanitize(&t.name),
                    ty(&t.a),
                    ty(&t.b)
                )
            } else {
                format!("changed        {}  {}", sanitize(&t.name), ty(&t.a))
            };
            let figs = match (t.max_abs, t.max_rel) {
                (Some(x), Some(y)) => format!(", max abs {x:.6e}, max rel {y:.6e}"),
                _ => String::new(),
            };
            let rows = if t.changed > 0 {
                format!(", {}", rows_text(t))
            } else {
                String::new()
            };
            format!(
                "{head}: {} of {} elements{figs}{rows}",
                t.changed, t.elements
            )
        }
    }
}

fn text(a: &DiffArgs, r: &DiffReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "A {}\nB {}", p(&a.a), p(&a.b))?;
    for t in r.tensors.iter().filter(|t| t.status != Status::Same) {
        writeln!(out, "  {}", line(t))?;
    }
    let c = counts(r);
    let parts: Vec<String> = c
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| v.as_u64() != Some(0))
        .map(|(k, v)| format!("{v} {}", k.replace('_', " ")))
        .collect();
    let verdict = if r.equal() { "equal" } else { "differ" };
    writeln!(out, "{}: {verdict}", parts.join(", "))
}
