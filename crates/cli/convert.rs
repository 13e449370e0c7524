//! `weightport convert`: run the job, print the result as a table or as JSON.

use std::io::Write;
use std::time::Instant;

use serde_json::{json, Value};
use weightport_core::{sanitize, Error};
use weightport_engine::{convert as run_convert, ConvertReport, Progress};

use crate::args::ConvertArgs;
use crate::options::{convert_options, Global};
use crate::render::{human, io_json, p, paths, quality_json};
use crate::Failure;

pub(crate) fn run(
    a: &ConvertArgs,
    g: &Global,
    json: bool,
    progress: &dyn Progress,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let opts = convert_options(a, g, json)?;
    let t0 = Instant::now();
    let _locks = crate::attest::lock_side_files(&opts)?;
    let r = run_convert(&opts, progress).map_err(|e| base_hint(e, a))?;
    crate::attest::write_outputs(a, &r, None, &opts.side_files)?;
    let secs = t0.elapsed().as_secs_f64();
    let iv = crate::imatrix::view(opts.transform.quant.as_ref(), &r);
    if json {
        return convert_json(a, &r, iv.as_ref(), secs, out);
    }
    convert_summary(&r, iv.as_ref(), secs, out)?;
    convert_files(&r, out)?;
    convert_transforms(&r, out)?;
    convert_written(a, out)?;
    Ok(())
}

/// Says how to name a LoRA adapter's base model when it was not found.
fn base_hint(e: Error, a: &ConvertArgs) -> Error {
    match e {
        Error::Usage(m)
            if a.base.is_none() && m.ends_with(weightport_engine::ADAPTER_NEEDS_BASE) =>
        {
            Error::Usage(format!("{m}: pass --base BASE_DIR"))
        }
        e => e,
    }
}

/// The `--json` document of a conversion.
fn convert_json(
    a: &ConvertArgs,
    r: &ConvertReport,
    iv: Option<&crate::imatrix::ImatrixView>,
    secs: f64,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let files: Vec<Value> = r
        .files
        .iter()
        .map(|f| json!({"path": f.path.display().to_string(), "bytes": f.size, "tensors": f.tensors}))
        .collect();
    let v = json!({
        "ok": true,
        "command": "convert",
        "dry_run": r.dry_run,
        "verified": r.verified,
        "input_format": r.input_format.name(),
        "output_format": r.output_format,
        "inputs": paths(&r.inputs),
        "files": files,
        "index": r.index.as_ref().map(|p| p.display().to_string()),
        "copied": paths(&r.copied),
        "removed": paths(&r.removed),
        "cleaned": paths(&r.cleaned),
        "recovered": paths(&r.recovered),
        "notes": r.notes,
        "transforms": r.transforms.iter().map(|t| json!({"tensor": t.tensor, "op": t.op, "outcome": t.outcome, "quality": t.quality.map(quality_json)})).collect::<Vec<_>>(),
        "attestation": a.attest.as_ref().map(|p| p.display().to_string()),
        "report": a.report.as_ref().map(|p| p.display().to_string()),
        "architecture": r.architecture,
        "dropped": r.dropped.iter().map(|(n, why)| json!({"tensor": n, "reason": why})).collect::<Vec<_>>(),
        "plan": r.plan.iter().enumerate().map(|(i, t)| json!({"name": t.name, "from": t.from, "dtype": t.dtype.name(), "shape": t.shape, "bytes": t.bytes, "bpw": crate::imatrix::bpw(t.bytes, &t.shape), "imatrix": iv.and_then(|v| v.per_tensor[i]), "note": t.note})).collect::<Vec<_>>(),
        "imatrix": iv.map(|v| v.json()),
        "tensors": r.tensors,
        "data_bytes": r.data_bytes,
        "elements": r.elements,
        "total_bytes": r.total_bytes,
        "needed_bytes": r.needed_bytes,
        "free_bytes": r.free_bytes,
        "threads": r.threads,
        "memory_bytes": r.memory_bytes,
        "read_bytes": r.read_bytes,
        "reads": r.reads.iter().map(|(p, n)| json!({"path": p.display().to_string(), "bytes": n})).collect::<Vec<_>>(),
        "io": io_json(&r.io),
        "seconds": secs,
    });
    writeln!(out, "{v}")?;
    Ok(())
}

/// What was (or would be) written, and the architecture.
/// Where the provenance statement and the quality report went.
fn convert_written(a: &ConvertArgs, out: &mut impl Write) -> std::io::Result<()> {
    if let Some(f) = &a.attest {
        writeln!(out, "  provenance (in-toto statement) written to {}", p(f))?;
    }
    if let Some(f) = &a.report {
        writeln!(out, "  quality report written to {}", p(f))?;
    }
    Ok(())
}

fn convert_summary(
    r: &ConvertReport,
    iv: Option<&crate::imatrix::ImatrixView>,
    secs: f64,
    out: &mut impl Write,
) -> std::io::Result<()> {
    if r.dry_run {
        writeln!(
            out,
            "plan (nothing written): {} tensors, {} files, {} on disk",
            r.tensors,
            r.files.len(),
            human(r.total_bytes)
        )?;
    } else {
        let v = if r.verified {
            "verified"
        } else {
            "NOT verified"
        };
        writeln!(
            out,
            "wrote {} tensors into {} files, {} in {secs:.2} s ({v})",
            r.tensors,
            r.files.len(),
            human(r.total_bytes)
        )?;
    }
    if let Some(a) = &r.architecture {
        writeln!(
            out,
            "  architecture {}; {} tensors of the release not written",
            sanitize(a),
            r.dropped.len()
        )?;
    }
    if r.dry_run {
        plan_lines(r, iv, out)?;
    } else if r.architecture.is_none() {
        not_converted_lines(&r.dropped, out)?;
    }
    for l in iv.map(|v| v.lines(r.dry_run)).unwrap_or_default() {
        writeln!(out, "  {}", sanitize(&l))?;
    }
    Ok(())
}

/// The files written, copied, removed, cleaned and recovered.
fn convert_files(r: &ConvertReport, out: &mut impl Write) -> std::io::Result<()> {
    for f in &r.files {
        writeln!(
            out,
            "  {:<48} {:>11}  {} tensors",
            p(&f.path),
            human(f.size),
            f.tensors
        )?;
    }
    if let Some(i) = &r.index {
        writeln!(out, "  {}", p(i))?;
    }
    for c in &r.copied {
        writeln!(out, "  {} (copied)", p(c))?;
    }
    let removed = if r.dry_run {
        "stale, would be removed"
    } else {
        "stale, removed"
    };
    for c in &r.removed {
        writeln!(out, "  {} ({removed})", p(c))?;
    }
    for c in &r.cleaned {
        writeln!(out, "  {} (temp file of a killed run, removed)", p(c))?;
    }
    for c in &r.recovered {
        writeln!(
            out,
            "  {} (published: finished a killed run's commit)",
            p(c)
        )?;
    }
    Ok(())
}

/// Transform counts and outcomes, bits per weight, notes and the dry run's needs.
fn convert_transforms(r: &ConvertReport, out: &mut impl Write) -> std::io::Result<()> {
    let mut casts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    let with_outcome = r.transforms.iter().filter(|t| t.outcome.is_some()).count();
    for t in &r.transforms {
        *casts.entry(t.op.as_str()).or_default() += 1;
        match &t.outcome {
            Some(o) if with_outcome <= 8 => {
                writeln!(out, "  tensor `{}`: {}", sanitize(&t.tensor), sanitize(o))?
            }
            _ => {}
        }
    }
    if with_outcome > 8 {
        writeln!(
            out,
            "  {with_outcome} tensors report quantization error or overflow counts: see --json"
        )?;
    }
    for (op, n) in casts {
        writeln!(out, "  {op}: {n} tensors")?;
    }
    if !r.transforms.is_empty() && r.elements > 0 {
        let bpw = r.data_bytes as f64 * 8.0 / r.elements as f64;
        writeln!(
            out,
            "  {bpw:.2} bits per weight over {} parameters",
            r.elements
        )?;
    }
    for n in &r.notes {
        writeln!(out, "note: {}", sanitize(n))?;
    }
    if r.dry_run {
        let free = r.free_bytes.map(human).unwrap_or_else(|| "unknown".into());
        writeln!(
            out,
            "disk needed {}, free {free}; memory ≈ {} ({} threads)",
            human(r.needed_bytes),
            human(r.memory_bytes),
            r.threads
        )?;
    }
    Ok(())
}

/// The dry run's per-tensor plan: name (and source name), type, shape, size, fallback reason.
fn plan_lines(
    r: &weightport_engine::ConvertReport,
    iv: Option<&crate::imatrix::ImatrixView>,
    out: &mut impl Write,
) -> std::io::Result<()> {
    for (i, t) in r.plan.iter().enumerate() {
        let from = t.from.as_deref().map(|f| format!(" ← {}", sanitize(f)));
        let note = t.note.as_deref().map(|n| format!("  ({})", sanitize(n)));
        let imatrix = match iv.and_then(|v| v.per_tensor[i]) {
            Some(true) => "  imatrix",
            Some(false) => "  no imatrix",
            None => "",
        };
        writeln!(
            out,
            "  {:<32} {:<7} {:>18} {:>11} {:>6.2} bpw{imatrix}{}{}",
            sanitize(&t.name),
            t.dtype.name(),
            format!("{:?}", t.shape),
            human(t.bytes),
            crate::imatrix::bpw(t.bytes, &t.shape),
            from.unwrap_or_default(),
            note.unwrap_or_default()
        )?;
    }
    for (n, why) in &r.dropped {
        writeln!(out, "  {} not written: {}", sanitize(n), sanitize(why))?;
    }
    Ok(())
}

/// Tensors shown one by one in the text summary of what a conversion left out (all are in
/// `--json`).
const SHOW_DROPPED: usize = 20;

/// Every tensor/array of the input not converted (a checkpoint's optimizer state, stray
/// tensors beside the converted state dict), so part of an input is never dropped silently;
/// and the foreign classes `--allow-inert-objects` kept inert (their entries are named by the
/// pickle offset, `<pickle byte N>`).
fn not_converted_lines(dropped: &[(String, String)], out: &mut impl Write) -> std::io::Result<()> {
    let (inert, tensors): (Vec<_>, Vec<_>) = dropped
        .iter()
        .partition(|(n, _)| n.starts_with("<pickle byte "));
    listed(
        &tensors,
        "tensors/arrays of the input (choose another dict with --key)",
        out,
    )?;
    listed(
        &inert,
        "foreign classes kept as inert records, never called",
        out,
    )
}

fn listed(items: &[&(String, String)], what: &str, out: &mut impl Write) -> std::io::Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    writeln!(out, "  NOT converted: {} {what}:", items.len())?;
    for (n, why) in items.iter().take(SHOW_DROPPED) {
        writeln!(out, "    {}: {}", sanitize(n), sanitize(why))?;
    }
    if items.len() > SHOW_DROPPED {
        let more = items.len() - SHOW_DROPPED;
        writeln!(out, "    … and {more} more: see --json")?;
    }
    Ok(())
}
