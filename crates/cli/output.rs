//! The three commands: run the job, print the result as a table or as JSON.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use weightport_core::{sanitize, Error, IoCounts, MetaValue, TensorInfo};
use weightport_engine::importance;
use weightport_engine::mix::Ftype;
use weightport_engine::mix::Importance;
use weightport_engine::ConvertOptions;
use weightport_engine::Workers;
use weightport_engine::{comparable_hashes, compare};
use weightport_engine::{
    convert as run_convert, open_inputs, ConvertReport, Input, OpenRequest, Progress,
};
use weightport_engine::{QuantOptions, Rename, TransformOptions};

use crate::args::{ConvertArgs, InspectArgs, QuantArgs, ReadArgs, VerifyArgs};
use crate::Failure;

/// The error document `{"ok": false, "error": {...}}`.
pub fn error_json(kind: &str, message: &str, code: i32) -> String {
    json!({"ok": false, "error": {"kind": kind, "message": message, "exit_code": code}}).to_string()
}

/// Prints the error document on stdout.
pub fn print_error_json(kind: &str, message: &str, code: i32) {
    let _ = writeln!(std::io::stdout(), "{}", error_json(kind, message, code));
}

/// The `io` object of a `--json` document: what the job wrote, opened and synced.
pub fn io_json(c: &IoCounts) -> Value {
    json!({
        "files": c.files,
        "writes": c.writes,
        "bytes_written": c.bytes_written,
        "opens": c.opens,
        "syncs": c.syncs,
    })
}

pub fn human(bytes: u64) -> String {
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

pub fn p(path: &Path) -> String {
    sanitize(&path.display().to_string())
}

fn paths(v: &[PathBuf]) -> Value {
    Value::Array(
        v.iter()
            .map(|x| Value::String(x.display().to_string()))
            .collect(),
    )
}

/// Options that apply to every command.
pub struct Global {
    /// `--threads` and `--max-memory`, validated once.
    pub workers: Workers,
}

fn open_request(r: &ReadArgs) -> OpenRequest {
    let mut read = weightport_core::ReadOptions::default();
    read.void2_as_bf16 = r.void2_as.is_some();
    read.key = r.key.clone();
    read.shared_copy = r.shared == "copy";
    read.inert_objects = r.allow_inert_objects;
    OpenRequest {
        read,
        from: r.from.clone(),
        index_only: r.index_only,
    }
}

/// Opens one input (a file, an index or a repo) through the registry: the one call `diff` and
/// `slice` make into the readers.
pub fn open_one(path: &Path, read: &ReadArgs) -> Result<Input, Error> {
    open_inputs(
        std::slice::from_ref(&path.to_path_buf()),
        &open_request(read),
    )
}

fn transform_options(a: &ConvertArgs) -> Result<TransformOptions, Error> {
    let renames = a
        .rename
        .iter()
        .map(|r| Rename::parse(r).map_err(Error::Usage))
        .collect::<Result<_, _>>()?;
    let dtype_filter = a
        .dtype_filter
        .as_deref()
        .map(|f| {
            regex::Regex::new(f).map_err(|e| Error::Usage(format!("--dtype-filter `{f}`: {e}")))
        })
        .transpose()?;
    let mut t = TransformOptions::default();
    t.dtype = a.dtype;
    t.dtype_filter = dtype_filter;
    t.allow_lossy = a.allow_lossy;
    t.renames = renames;
    t.quant = quant_options(&a.quant, a.dry_run)?;
    t.arch = a.quant.arch.clone();
    t.name = a.quant.name.clone();
    t.metadata = a.quant.metadata.clone();
    t.pre_tokenizer = a.quant.pre_tokenizer.clone();
    t.merge_lora = a.merge_lora.clone();
    t.lora_scale = a.lora_scale;
    t.measure_quality = false;
    Ok(t)
}

fn ggml_type(s: &str) -> Result<weightport_core::DType, Error> {
    weightport_core::DType::from_name(&s.to_ascii_uppercase())
        .filter(|d| d.is_block() || matches!(d.name(), "F32" | "F16" | "BF16"))
        .ok_or_else(|| {
            Error::Usage(format!(
                "`{s}`: not a ggml tensor type (Q4_K, Q8_0, F16, …)"
            ))
        })
}

fn quant_options(q: &QuantArgs, dry_run: bool) -> Result<Option<QuantOptions>, Error> {
    let Some(t) = &q.quant else {
        return Ok(None);
    };
    let tensor_types = q
        .tensor_type
        .iter()
        .map(|r| {
            let (re, ty) = r
                .rsplit_once('=')
                .ok_or_else(|| Error::Usage(format!("--tensor-type `{r}`: expected REGEX=TYPE")))?;
            let re = regex::Regex::new(re)
                .map_err(|e| Error::Usage(format!("--tensor-type `{r}`: {e}")))?;
            Ok((re, ggml_type(ty)?))
        })
        .collect::<Result<_, Error>>()?;
    Ok(Some(QuantOptions {
        ftype: Ftype::parse(t)?,
        pure: q.pure,
        tensor_types,
        output_type: q.output_tensor_type.as_deref().map(ggml_type).transpose()?,
        token_embd_type: q
            .token_embedding_type
            .as_deref()
            .map(ggml_type)
            .transpose()?,
        leave_output: q.leave_output_tensor,
        allow_requantize: q.allow_requantize,
        imatrix: importance(q)?.map(Arc::new),
        dry_run,
    }))
}

/// `--imatrix FILE` with its `--include-weights`/`--exclude-weights`.
fn importance(q: &QuantArgs) -> Result<Option<Importance>, Error> {
    let Some(path) = &q.imatrix else {
        return Ok(None);
    };
    let regexes = |flag: &str, v: &[String]| -> Result<Vec<regex::Regex>, Error> {
        v.iter()
            // llama-quantize keeps or drops the entries whose name contains the string
            .map(|r| {
                regex::Regex::new(&regex::escape(r))
                    .map_err(|e| Error::Usage(format!("{flag} `{r}`: {e}")))
            })
            .collect()
    };
    let include = regexes("--include-weights", &q.include_weights)?;
    let exclude = regexes("--exclude-weights", &q.exclude_weights)?;
    let given = path.to_string_lossy();
    let limits = weightport_core::Limits::default();
    importance::load(path, &given, &include, &exclude, &limits).map(Some)
}

/// The pipeline's options for `convert` arguments `a`.
pub fn convert_options(a: &ConvertArgs, g: &Global, json: bool) -> Result<ConvertOptions, Error> {
    let mut opts = ConvertOptions::new(a.inputs.clone(), a.output.clone());
    opts.to = a.to.clone();
    opts.shard_size = a.shard_size;
    opts.force = a.force;
    opts.verify = !a.no_verify;
    opts.dry_run = a.dry_run;
    opts.open = open_request(&a.read);
    opts.transform = transform_options(a)?;
    opts.workers = g.workers;
    opts.provenance = a.attest.is_some();
    opts.side_files = crate::attest::side_files(a);
    opts.lora_base = a.base.clone();
    opts.transform.measure_quality = json || a.report.is_some();
    Ok(opts)
}

pub fn convert(
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

/// Arrays longer than this are summarized (`[str; 32000]`) in `inspect`.
const SHOW_ITEMS: usize = 16;

fn long_array(v: &MetaValue) -> Option<(String, usize)> {
    match v {
        MetaValue::TypedArray { elem, items } if items.len() > SHOW_ITEMS => {
            Some((elem.name().to_string(), items.len()))
        }
        MetaValue::Array(items) if items.len() > SHOW_ITEMS => Some(("any".into(), items.len())),
        _ => None,
    }
}

fn meta_text(v: &MetaValue) -> String {
    match long_array(v) {
        Some((elem, n)) => format!("[{elem}; {n}]"),
        None => v.to_text(),
    }
}

pub fn meta_json(v: &MetaValue) -> Value {
    match (v, long_array(v)) {
        (_, Some((elem, n))) => json!({"array_of": elem, "len": n}),
        (MetaValue::Str(s), _) => Value::String(s.clone()),
        (other, _) => Value::String(other.to_text()),
    }
}

pub fn inspect(a: &InspectArgs, json: bool, out: &mut impl Write) -> Result<(), Failure> {
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

/// A tensor's quality figures in `--json`.
fn quality_json(q: weightport_engine::Quality) -> Value {
    json!({"values": q.values, "rmse": q.rmse, "max_abs_error": q.max_abs,
           "relative_error": q.relative, "clipped_share": q.clipped,
           "weighted_rmse": q.weighted_rmse, "weighted_max_abs_error": q.weighted_max_abs})
}

pub fn verify(
    a: &VerifyArgs,
    json: bool,
    bar: &dyn Progress,
    out: &mut impl Write,
) -> Result<(), Failure> {
    if let Some(file) = &a.attestation {
        return crate::attest::verify(a, file, json, out);
    }
    let req = open_request(&a.read);
    let src = open_inputs(std::slice::from_ref(&a.path), &req)?.source;
    let data: u64 = src.tensors().iter().map(|t| t.byte_len).sum();
    let mut diffs = Vec::new();
    let against = match &a.against {
        Some(other) => {
            Some(open_inputs(std::slice::from_ref(other), &OpenRequest::default())?.source)
        }
        None => None,
    };
    let mine = match &against {
        Some(o) => {
            let (mine, theirs) = comparable_hashes(src.as_ref(), o.as_ref(), bar)?;
            diffs = compare(&mine, &theirs);
            mine
        }
        None => {
            let h = weightport_engine::hash_source(src.as_ref(), bar)?;
            src.tensors()
                .iter()
                .map(|t| t.name.clone())
                .zip(h)
                .collect()
        }
    };
    let ok = diffs.is_empty();
    if json {
        let v = json!({
            "ok": ok,
            "command": "verify",
            "files": paths(&src.files()),
            "tensors": mine.len(),
            "data_bytes": data,
            "against": a.against.as_ref().map(|p| p.display().to_string()),
            "differences": diffs,
        });
        writeln!(out, "{v}")?;
    } else {
        writeln!(
            out,
            "{}: valid {}, {} tensors, {}",
            p(&a.path),
            src.format(),
            mine.len(),
            human(data)
        )?;
        if let Some(other) = &a.against {
            if ok {
                writeln!(
                    out,
                    "identical to {}: every tensor has the same shape and values (the same bytes where dtypes agree)",
                    p(other)
                )?;
            } else {
                writeln!(out, "differs from {}:", p(other))?;
                for d in &diffs {
                    writeln!(out, "  {d}")?;
                }
            }
        }
    }
    if ok {
        Ok(())
    } else {
        let message = format!("{}: {} differences", p(&a.path), diffs.len());
        Err(Failure::Findings(1, Some(message)))
    }
}
