//! The plan phase of a conversion: from an opened source and the options, the output tensors,
//! the metadata and the output format's plan (every file, header and offset fixed). `convert`,
//! a fan-out of many outputs from one read ([`crate::convert::convert_many`]) and the unit
//! commands ([`crate::units`]) all plan with [`plan`], so they write the same bytes.

use std::path::Path;

use weightport_core::registry::{OutputFormat, OutputPlan, OutputRequest};
use weightport_core::{DType, Format, IoCounter, Metadata, Result, TensorInfo, TensorSource};

use crate::by_arch::{self, WithGenerated};
use crate::convert::ConvertOptions;
use crate::plan::{build, output_metadata, DtypeChoice, OutTensor};
use crate::registry::output_for;

/// The source a plan reads: the opened input, or (an HF release planned by its architecture)
/// the input followed by the tensors the architecture generates.
enum Src<'s> {
    Plain(&'s dyn TensorSource),
    Generated(WithGenerated<'s>),
}

/// What an architecture plan adds to the report: the architecture, the source tensors it
/// drops, and per output tensor the source name it comes from.
pub type ArchReport = (String, Vec<(String, String)>, Vec<Option<String>>);

/// A planned output: its source, tensors, metadata and output plan.
pub struct Planned<'s> {
    src: Src<'s>,
    /// Tensors of the opened input (the source's first tensors; generated ones follow).
    pub input_tensors: usize,
    /// Output tensors, in output order (shapes as stored).
    pub outs: Vec<OutTensor>,
    /// Their infos, as the output plan and the sink are given them.
    pub infos: Vec<TensorInfo>,
    /// The output's metadata.
    pub metadata: Metadata,
    /// Files, headers, extras.
    pub plan: OutputPlan,
    /// The output format.
    pub fmt: &'static OutputFormat,
    /// The input repo directory (companions come from it).
    pub repo_dir: Option<&'s Path>,
    /// Planned by architecture: what the report says of it.
    pub architecture: Option<ArchReport>,
    source_format: Format,
    float_dtype: Option<DType>,
    /// The writes, opens and syncs of this output's files.
    pub io: IoCounter,
}

impl Planned<'_> {
    /// The tensors read (with the architecture's generated tensors after the input's own).
    pub fn source(&self) -> &dyn TensorSource {
        match &self.src {
            Src::Plain(s) => *s,
            Src::Generated(g) => g,
        }
    }

    /// The output request the plan and the sink are made from.
    pub fn request<'r>(&'r self, opts: &'r ConvertOptions) -> OutputRequest<'r> {
        OutputRequest {
            target: &opts.output,
            tensors: &self.infos,
            metadata: &self.metadata,
            shard_size: opts.shard_size,
            companions_from: self.repo_dir,
            source_format: self.source_format,
            float_dtype: self.float_dtype,
            io: self.io.clone(),
        }
    }
}

/// Plans the conversion of `source` (opened from `opts.inputs`; `repo_dir` its repo directory)
/// into `opts.output`.
pub fn plan<'s>(
    source: &'s dyn TensorSource,
    repo_dir: Option<&'s Path>,
    opts: &ConvertOptions,
) -> Result<Planned<'s>> {
    let fmt = output_for(&opts.output, opts.to.as_deref())?;
    let by_arch = fmt.by_architecture;
    let float_dtype = float_dtype(opts, by_arch);
    let mut job = match by_arch::wanted(repo_dir, by_arch, &opts.transform) {
        Some(dir) => {
            let arch = by_arch::build(source, dir, &opts.transform, &opts.open.read.limits)?;
            let with = WithGenerated::new(source, arch.generated, dir.join("config.json"));
            Planned {
                source_format: arch.rewrites.unwrap_or_else(|| with.format()),
                src: Src::Generated(with),
                input_tensors: source.tensors().len(),
                infos: arch.outs.iter().map(|o| o.info.clone()).collect(),
                outs: arch.outs,
                metadata: arch.metadata,
                plan: empty_plan(),
                fmt,
                repo_dir,
                architecture: Some((arch.architecture, arch.dropped, arch.from)),
                float_dtype,
                io: IoCounter::new(),
            }
        }
        None => {
            let outs = build(source, &opts.transform, fmt.stores, fmt.cast_rule)?;
            Planned {
                source_format: source.format(),
                src: Src::Plain(source),
                input_tensors: source.tensors().len(),
                infos: outs.iter().map(|o| o.info.clone()).collect(),
                outs,
                metadata: output_metadata(source, &opts.transform, by_arch),
                plan: empty_plan(),
                fmt,
                repo_dir,
                architecture: None,
                float_dtype,
                io: IoCounter::new(),
            }
        }
    };
    job.plan = (fmt.plan)(&job.request(opts))?;
    for (i, shape) in &job.plan.reshaped {
        job.outs[*i].info.shape = shape.clone();
    }
    Ok(job)
}

fn empty_plan() -> OutputPlan {
    OutputPlan {
        dir: Default::default(),
        is_repo: false,
        files: Vec::new(),
        extras: Vec::new(),
        is_own_file: |_| false,
        reshaped: Vec::new(),
    }
}

/// The dtype every floating tensor was cast to, when `--dtype` applied to all of them.
fn float_dtype(opts: &ConvertOptions, by_arch: bool) -> Option<DType> {
    let t = &opts.transform;
    match t.dtype {
        DtypeChoice::To(d) if !by_arch && t.dtype_filter.is_none() && t.quant.is_none() => Some(d),
        _ => None,
    }
}
