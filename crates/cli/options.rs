//! Arguments → the library's options, in one place: what a command line (or a job file's
//! output, through the same argument structs) asks of the engine.

use std::path::Path;
use std::sync::Arc;

use weightport_core::Error;
use weightport_engine::importance;
use weightport_engine::mix::Ftype;
use weightport_engine::mix::Importance;
use weightport_engine::ConvertOptions;
use weightport_engine::Workers;
use weightport_engine::{open_inputs, Input, OpenRequest};
use weightport_engine::{QuantOptions, Rename, TransformOptions};

use crate::args::{ConvertArgs, QuantArgs, ReadArgs};

/// Options that apply to every command.
pub(crate) struct Global {
    /// `--threads` and `--max-memory`, validated once.
    pub workers: Workers,
}

pub(crate) fn open_request(r: &ReadArgs) -> OpenRequest {
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
pub(crate) fn open_one(path: &Path, read: &ReadArgs) -> Result<Input, Error> {
    open_inputs(
        std::slice::from_ref(&path.to_path_buf()),
        &open_request(read),
    )
}

pub(crate) fn transform_options(a: &ConvertArgs) -> Result<TransformOptions, Error> {
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
    t.no_mtp = a.quant.no_mtp;
    t.mtp_only = a.quant.mtp;
    t.merge_lora = a.merge_lora.clone();
    t.lora_scale = a.lora_scale;
    t.measure_quality = false;
    Ok(t)
}

pub(crate) fn ggml_type(s: &str) -> Result<weightport_core::DType, Error> {
    weightport_core::DType::from_name(&s.to_ascii_uppercase())
        .filter(|d| d.is_block() || matches!(d.name(), "F32" | "F16" | "BF16"))
        .ok_or_else(|| {
            Error::Usage(format!(
                "`{s}`: not a ggml tensor type (Q4_K, Q8_0, F16, …)"
            ))
        })
}

pub(crate) fn quant_options(q: &QuantArgs, dry_run: bool) -> Result<Option<QuantOptions>, Error> {
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
    let mut o = QuantOptions::new(Ftype::parse(t)?);
    o.pure = q.pure;
    o.tensor_types = tensor_types;
    o.output_type = q.output_tensor_type.as_deref().map(ggml_type).transpose()?;
    o.token_embd_type = q
        .token_embedding_type
        .as_deref()
        .map(ggml_type)
        .transpose()?;
    o.leave_output = q.leave_output_tensor;
    o.allow_requantize = q.allow_requantize;
    o.imatrix = importance(q)?.map(Arc::new);
    o.dry_run = dry_run;
    Ok(Some(o))
}

/// `--imatrix FILE` with its `--include-weights`/`--exclude-weights`.
pub(crate) fn importance(q: &QuantArgs) -> Result<Option<Importance>, Error> {
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
    let given = match &q.imatrix_given {
        Some(g) => g.clone(),
        None => path.to_string_lossy().into_owned(),
    };
    let limits = weightport_core::Limits::default();
    importance::load(path, &given, &include, &exclude, &limits).map(Some)
}

/// The pipeline's options for `convert` arguments `a`.
pub(crate) fn convert_options(
    a: &ConvertArgs,
    g: &Global,
    json: bool,
) -> Result<ConvertOptions, Error> {
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
    opts.mmproj = a.mmproj;
    opts.transform.measure_quality = json || a.report.is_some();
    Ok(opts)
}

/// How the command line spells each option the libraries' messages point to (installed for
/// the process by [`crate::main`] and [`crate::run_json`]; see `weightport_core::Knob`).
pub(crate) fn flag(k: weightport_core::Knob) -> &'static str {
    use weightport_core::Knob;
    match k {
        Knob::Force => "--force",
        Knob::To => "--to",
        Knob::From => "--from",
        Knob::Rename => "--rename",
        Knob::Dtype => "--dtype",
        Knob::DtypeFilter => "--dtype-filter",
        Knob::Quant => "--quant",
        Knob::AllowRequantize => "--allow-requantize",
        Knob::AllowLossy => "--allow-lossy",
        Knob::Arch => "--arch",
        Knob::Imatrix => "--imatrix",
        Knob::MaxMemory => "--max-memory",
        Knob::Plan => "--plan",
        Knob::Attest => "--attest",
        Knob::IndexOnly => "--index-only",
        Knob::Key => "--key",
        Knob::Void2As => "--void2-as",
        Knob::PreTokenizer => "--pre-tokenizer",
        Knob::Set => "--set",
        Knob::Mask => "--mask",
        Knob::Add => "--add",
        Knob::Replace => "--replace",
        Knob::Apply => "--apply",
        Knob::Undo => "--undo",
        Knob::KeepUndo => "--keep-undo",
        Knob::Recover => "`weightport edit --recover`",
        Knob::RunUnit => "weightport unit",
        Knob::Index => "--index",
    }
}
