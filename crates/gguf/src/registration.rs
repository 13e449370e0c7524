//! GGUF in the format registry: the input (a file or a whole gguf-split set, given any member)
//! and the output (`-o model.gguf`; `--shard-size`/`--split-max-size` writes a gguf-split set).
//!
//! The output keeps the metadata GGUF can hold (typed values, arrays) and leaves out what it
//! cannot (pickle dicts, objects, big integers, nulls). Dims follow the source's convention: a
//! GGUF source is rewritten as llama.cpp's C writer does (trailing 1s of `ne` dropped), anything
//! else as gguf-py (and so convert_hf_to_gguf.py) writes it (`ne` = the shape reversed).
//! The plan reports the tensors whose stored shape so differs from the requested one
//! (`OutputPlan::reshaped`), so the pipeline verifies them as they are written.

use weightport_core::registry::{
    InputFormat, OutputFormat, OutputPlan, OutputRequest, PlannedFile,
};
use weightport_core::{
    DType, Format, MetaValue, Metadata, Plan, ReadOptions, Result, StagedFile, TensorInfo,
    TensorSink, TensorSource,
};

use crate::layout::{GgufTensorSpec, WriteOptions};
use crate::split::{self, SplitOptions};
use crate::writer::GgufSink;
use crate::{probe, types};

/// The GGUF reader (a split set is one source).
pub const INPUT: InputFormat = InputFormat {
    name: "gguf",
    format: Format::Gguf,
    probe: |_, head| probe(head),
    open: |src, opts: &ReadOptions| -> Result<Box<dyn TensorSource>> {
        if opts.one_part {
            return Ok(Box::new(crate::GgufFile::from_source(src, opts)?));
        }
        Ok(Box::new(split::open_split_source(src, opts)?))
    },
};

fn specs(req: &OutputRequest) -> Vec<GgufTensorSpec> {
    let conv = if req.source_format == Format::Gguf {
        GgufTensorSpec::from_info_c
    } else {
        GgufTensorSpec::from_info
    };
    req.tensors.iter().map(conv).collect()
}

fn storable(v: &MetaValue) -> bool {
    match v {
        MetaValue::Map(_)
        | MetaValue::Dict(_)
        | MetaValue::Object { .. }
        | MetaValue::BigInt(_)
        | MetaValue::Null => false,
        MetaValue::Array(a) => !a.is_empty() && a.iter().all(storable),
        _ => true,
    }
}

/// The key/values a GGUF output carries: those of the request GGUF can hold, `split.*` left
/// to the split writer.
pub fn output_kv(req: &OutputRequest) -> Metadata {
    req.metadata
        .iter()
        .filter(|(k, v)| !k.starts_with("split.") && storable(v))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn split_options(req: &OutputRequest) -> Option<SplitOptions> {
    req.shard_size.map(|max| SplitOptions {
        max_bytes: Some(max),
        ..SplitOptions::default()
    })
}

/// The tensors whose `ne` as written, read back outermost first, is not the requested shape
/// (trailing 1s of `ne` dropped, as llama.cpp writes a GGUF source's tensors).
fn reshaped(req: &OutputRequest, specs: &[GgufTensorSpec]) -> Vec<(usize, Vec<u64>)> {
    specs
        .iter()
        .zip(req.tensors)
        .enumerate()
        .filter(|(_, (s, t))| s.shape() != t.shape)
        .map(|(i, (s, _))| (i, s.shape()))
        .collect()
}

fn plan(req: &OutputRequest) -> Result<OutputPlan> {
    let specs = specs(req);
    let kv = output_kv(req);
    let dir = match req.target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => ".".into(),
    };
    let files = split::plan(
        req.target,
        &specs,
        &kv,
        &split_options(req).unwrap_or_default(),
        &WriteOptions::default(),
    )?
    .into_iter()
    .map(|f| PlannedFile {
        path: f.path,
        size: f.layout.total_len,
        tensors: f.tensors,
    })
    .collect();
    Ok(OutputPlan {
        dir,
        is_repo: false,
        files,
        extras: Vec::new(),
        is_own_file: |_| false,
        reshaped: reshaped(req, &specs),
    })
}

/// A GGUF sink that writes the key/values the plan laid out, whatever metadata it is given.
struct Sink {
    inner: GgufSink,
    kv: Metadata,
}

impl TensorSink for Sink {
    fn plan(&mut self, tensors: &[TensorInfo], _: &Metadata) -> Result<Plan> {
        self.inner.plan(tensors, &self.kv)
    }
    fn write_at(&self, tensor: usize, offset: u64, bytes: &[u8]) -> Result<()> {
        self.inner.write_at(tensor, offset, bytes)
    }
    fn copy_from(
        &self,
        tensor: usize,
        offset: u64,
        from: &weightport_core::kernel_copy::Origin,
        len: u64,
    ) -> Result<u64> {
        self.inner.copy_from(tensor, offset, from, len)
    }
    fn staged(&self) -> Vec<StagedFile> {
        self.inner.staged()
    }
    fn finish(self: Box<Self>) -> Result<Vec<weightport_core::FinishedFile>> {
        Box::new(self.inner).finish()
    }
}

/// `-o *.gguf`.
pub const OUTPUT: OutputFormat = OutputFormat {
    name: "gguf",
    format: Format::Gguf,
    claims: |p| {
        !p.as_os_str().as_encoded_bytes().ends_with(b"/")
            && p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    },
    plan,
    sink: |req, _| -> Result<Box<dyn TensorSink>> {
        let mut sink = GgufSink::new(req.target.to_path_buf())
            .specs(specs(req))
            .counting(&req.io);
        if let Some(s) = split_options(req) {
            sink = sink.split(s);
        }
        Ok(Box::new(Sink {
            inner: sink,
            kv: output_kv(req),
        }))
    },
    stores: |d: DType| types::ggml_id(d).is_some(),
    by_architecture: true,
    cast_rule: weightport_core::CastRule::Ggml,
};
