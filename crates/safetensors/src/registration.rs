//! safetensors in the format registry: the input (any file whose bytes look like safetensors,
//! or that nothing else recognises, so the strict reader can say what is wrong with it) and the
//! single-file output (`-o model.safetensors`).

use std::path::Path;

use weightport_core::registry::{
    InputFormat, OutputFormat, OutputPlan, OutputRequest, PlannedFile,
};
use weightport_core::{
    sniff, Error, Format, ReadOptions, Result, Sniffed, TensorSink, TensorSource,
};

use crate::writer::{layout, string_metadata};
use crate::{SafetensorsFile, SafetensorsSink};

/// The safetensors reader.
pub const INPUT: InputFormat = InputFormat {
    name: "safetensors",
    format: Format::Safetensors,
    probe: |src, head| match sniff(head) {
        Sniffed::Format(Format::Safetensors) | Sniffed::Empty => true,
        // Named .safetensors, or a length prefix a header could have: the reader says what is
        // wrong. Other unknown bytes are another format, which the registry names.
        Sniffed::Unknown => {
            named_safetensors(src.name())
                || head.len() < 8
                || header_length(head) <= MAX_HEADER_PROBE
        }
        _ => false,
    },
    open: |src, opts: &ReadOptions| -> Result<Box<dyn TensorSource>> {
        Ok(Box::new(SafetensorsFile::from_source(src, &opts.limits)?))
    },
};

/// The largest header length prefix the probe takes for a (possibly broken) safetensors file:
/// the reader's own cap.
const MAX_HEADER_PROBE: u64 = 100_000_000;

fn named_safetensors(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"))
}

fn header_length(head: &[u8]) -> u64 {
    u64::from_le_bytes(head[..8].try_into().expect("8 bytes"))
}

/// True when `path` names a `.safetensors` file (any case; a trailing `/` means a directory).
pub fn names_file(path: &Path) -> bool {
    let s = path.as_os_str().as_encoded_bytes();
    !s.ends_with(b"/")
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.to_ascii_lowercase().ends_with(".safetensors"))
}

/// The `__metadata__` a request's metadata becomes (`None` when empty). Weights read from a
/// PyTorch pickle get `"format": "pt"`, as transformers' `save_pretrained` and safetensors'
/// convert.py write it for torch weights (transformers 4.x and diffusers refuse a header
/// `__metadata__` without it); other sources keep their metadata as it is, so a safetensors
/// source still round-trips byte for byte and an npz source matches `save_file`.
pub fn header_metadata(req: &OutputRequest) -> Option<std::collections::BTreeMap<String, String>> {
    let mut m = string_metadata(req.metadata);
    if matches!(
        req.source_format,
        Format::PytorchZip | Format::PytorchLegacy
    ) {
        m.entry("format".into()).or_insert_with(|| "pt".into());
    }
    (!m.is_empty()).then_some(m)
}

/// Names the file a layout error concerns (the layout itself knows no paths).
pub fn at_file(e: Error, path: &Path) -> Error {
    match e {
        Error::Limit {
            mut at,
            what,
            needed,
            limit,
        } => {
            at.path = path.to_path_buf();
            Error::Limit {
                at,
                what,
                needed,
                limit,
            }
        }
        Error::Unsupported {
            mut at,
            format,
            what,
        } => {
            at.path = path.to_path_buf();
            Error::Unsupported { at, format, what }
        }
        Error::Usage(m) => Error::Usage(format!("{}: {m}", weightport_core::shown(path))),
        other => other,
    }
}

fn plan_file(req: &OutputRequest) -> Result<OutputPlan> {
    let lay =
        layout(req.tensors, header_metadata(req).as_ref()).map_err(|e| at_file(e, req.target))?;
    let dir = match req.target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => ".".into(),
    };
    Ok(OutputPlan {
        dir,
        is_repo: false,
        files: vec![PlannedFile {
            path: req.target.to_path_buf(),
            size: lay.total_len,
            tensors: (0..req.tensors.len()).collect(),
        }],
        extras: Vec::new(),
        is_own_file: |_| false,
        reshaped: Vec::new(),
    })
}

/// One `.safetensors` file.
pub const OUTPUT: OutputFormat = OutputFormat {
    name: "safetensors",
    format: Format::Safetensors,
    claims: names_file,
    plan: plan_file,
    sink: sink_for,
    stores,
    by_architecture: false,
    cast_rule: weightport_core::CastRule::Torch,
};

/// The dtypes safetensors can hold (no ggml block types).
pub fn stores(d: weightport_core::DType) -> bool {
    crate::dtypes::rank(d).is_some()
}

/// A sink writing `plan`'s files (one or many shards) as safetensors.
pub fn sink_for(req: &OutputRequest, plan: &OutputPlan) -> Result<Box<dyn TensorSink>> {
    let groups: Vec<_> = plan
        .files
        .iter()
        .map(|f| (f.path.clone(), f.tensors.clone()))
        .collect();
    Ok(Box::new(
        SafetensorsSink::new(Box::new(move |_| Ok(groups)), header_metadata(req)).counting(&req.io),
    ))
}
