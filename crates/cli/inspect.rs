//! `weightport inspect`: what an input holds, as a table or as JSON.

use std::io::Write;

use serde_json::{json, Value};
use weightport_core::{sanitize, TensorInfo};
use weightport_engine::{open_inputs, Input};

use crate::args::InspectArgs;
use crate::options::open_request;
use crate::render::{human, meta_json, meta_text, p, paths};
use crate::Failure;

pub(crate) fn run(a: &InspectArgs, json: bool, out: &mut impl Write) -> Result<(), Failure> {
    let input = open_inputs(std::slice::from_ref(&a.input), &open_request(&a.read))?;
    if json {
        writeln!(out, "{}", inspect_json(&input))?;
    } else {
        inspect_text(&input, out)?;
    }
    Ok(())
}

/// The bytes of tensor data in `tensors`.
fn data_bytes(tensors: &[TensorInfo]) -> u64 {
    tensors.iter().map(|t| t.byte_len).sum()
}

/// `inspect --json`'s document.
fn inspect_json(input: &Input) -> Value {
    let src = &input.source;
    let tensors = src.tensors();
    let ts: Vec<Value> = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({"name": t.name, "dtype": t.dtype.name(), "shape": t.shape, "bytes": t.byte_len,
                   "file": src.file_of(i).display().to_string()})
        })
        .collect();
    let meta: serde_json::Map<String, Value> = src
        .metadata()
        .iter()
        .map(|(k, v)| (k.to_string(), meta_json(v)))
        .collect();
    json!({
        "ok": true,
        "command": "inspect",
        "format": src.format().name(),
        "files": paths(&src.files()),
        "chosen": input.chosen.as_ref().map(|p| p.display().to_string()),
        "notes": input.notes,
        "metadata": meta,
        "tensor_count": tensors.len(),
        "data_bytes": data_bytes(tensors),
        "tensors": ts,
    })
}

/// `inspect`'s text: the format, files, sizes and metadata, then the tensor table.
fn inspect_text(input: &Input, out: &mut impl Write) -> std::io::Result<()> {
    let src = &input.source;
    let tensors = src.tensors();
    let data = data_bytes(tensors);
    let files = src.files();
    writeln!(out, "format    {}", src.format())?;
    if let Some(c) = &input.chosen {
        writeln!(out, "read      {}", p(c))?;
    }
    for n in &input.notes {
        writeln!(out, "note      {}", sanitize(n))?;
    }
    writeln!(out, "files     {}", files.len())?;
    for f in &files {
        writeln!(out, "          {}", p(f))?;
    }
    writeln!(out, "tensors   {}", tensors.len())?;
    writeln!(out, "data      {} ({data} bytes)", human(data))?;
    for (k, v) in src.metadata().iter() {
        writeln!(
            out,
            "metadata  {} = {}",
            sanitize(k),
            sanitize(&meta_text(v))
        )?;
    }
    tensor_table(tensors, out)
}

/// `inspect`'s table of tensors (name, dtype, shape, bytes), after a blank line; nothing
/// without tensors.
fn tensor_table(tensors: &[TensorInfo], out: &mut impl Write) -> std::io::Result<()> {
    if tensors.is_empty() {
        return Ok(());
    }
    let w = tensors
        .iter()
        .map(|t| sanitize(&t.name).chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 60);
    writeln!(out)?;
    writeln!(
        out,
        "{:<w$}  {:<11} {:<20} {:>12}",
        "NAME", "DTYPE", "SHAPE", "BYTES"
    )?;
    for t in tensors {
        let shape = format!("{:?}", t.shape);
        writeln!(
            out,
            "{:<w$}  {:<11} {:<20} {:>12}",
            sanitize(&t.name),
            t.dtype.name(),
            shape,
            t.byte_len
        )?;
    }
    Ok(())
}
