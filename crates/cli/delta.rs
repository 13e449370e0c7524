//! `weightport delta OLD NEW -o PATCH.safetensors`: a line, or one JSON document
//! (docs/json/delta.schema.json).

use std::io::Write;

use serde_json::json;
use weightport_core::sanitize;

use crate::args::DeltaArgs;
use crate::render::{human, p};
use crate::Failure;

pub(crate) fn run(a: &DeltaArgs, json: bool, out: &mut impl Write) -> Result<(), Failure> {
    let r = weightport_edit::patch::delta(&a.old, &a.new, &a.output, a.force)?;
    let recovered = weightport_edit::notices();
    if json {
        let doc = json!({
            "ok": true,
            "command": "delta",
            "patch": r.patch.display().to_string(),
            "base_sha256": r.base_sha256,
            "result_sha256": r.result_sha256,
            "tensors": r.tensors,
            "tensors_changed": r.tensors_changed,
            "patch_bytes": r.patch_bytes,
            "model_bytes": r.model_bytes,
            "blocks": r.blocks.iter().map(|b| json!({"tensor": b.tensor, "rows": [b.rows.0, b.rows.1], "bytes": b.bytes})).collect::<Vec<_>>(),
            "recovered": recovered,
        });
        writeln!(out, "{doc}")?;
        return Ok(());
    }
    let share = r.patch_bytes as f64 * 100.0 / r.model_bytes.max(1) as f64;
    writeln!(
        out,
        "{}: {} blocks of {} changed tensors (of {}), {} ({share:.2}% of {})",
        p(&r.patch),
        r.blocks.len(),
        r.tensors_changed,
        r.tensors,
        human(r.patch_bytes),
        human(r.model_bytes)
    )?;
    for b in r.blocks.iter().take(20) {
        writeln!(
            out,
            "  {}[{}:{}]  {}",
            sanitize(&b.tensor),
            b.rows.0,
            b.rows.1,
            human(b.bytes)
        )?;
    }
    if r.blocks.len() > 20 {
        writeln!(out, "  … and {} more: see --json", r.blocks.len() - 20)?;
    }
    writeln!(
        out,
        "base sha256 {}\nresult sha256 {}",
        r.base_sha256, r.result_sha256
    )?;
    Ok(())
}
