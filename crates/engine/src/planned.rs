//! The plan phase of a conversion: from an opened source and the options, the output tensors,
//! the metadata and the output format's plan (every file, header and offset fixed). `convert`,
//! a fan-out of many outputs from one read ([`crate::convert_many`]) and the job protocol's
//! [`crate::plan`] (the unit commands) all plan with [`plan`], so they write the same bytes.

use std::path::Path;

use weightport_core::registry::{OutputFormat, OutputPlan, OutputRequest};
use weightport_core::{DType, Format, IoCounter, Metadata, Result, TensorInfo, TensorSource};

use crate::by_arch::{self, WithGenerated};
use crate::by_options::{build, output_metadata, DtypeChoice, TensorRecipe};
use crate::route::{AdapterRoute, ConvertOptions, Route};

/// The source a plan reads: the opened input, or (an HF release planned by its architecture)
/// the input followed by the tensors the architecture generates.
enum Src<'s> {
    Plain(&'s dyn TensorSource),
    Generated(WithGenerated<'s>),
}

/// What an architecture plan adds to the report: the architecture, the source tensors it
/// drops, and per output tensor the source name it comes from.
pub(crate) type ArchReport = (String, Vec<(String, String)>, Vec<Option<String>>);

/// A planned output: its source, tensors, metadata and output plan.
pub(crate) struct Planned<'s> {
    src: Src<'s>,
    /// Tensors of the opened input (the source's first tensors; generated ones follow).
    pub input_tensors: usize,
    /// Output tensors, in output order (shapes as stored).
    pub outs: Vec<TensorRecipe>,
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
    pub(crate) fn source(&self) -> &dyn TensorSource {
        match &self.src {
            Src::Plain(s) => *s,
            Src::Generated(g) => g,
        }
    }

    /// The output request the plan and the sink are made from.
    pub(crate) fn request<'r>(&'r self, opts: &'r ConvertOptions) -> OutputRequest<'r> {
        let what = (self.source_format, self.float_dtype);
        request_of(
            opts,
            (&self.infos, &self.metadata),
            self.repo_dir,
            what,
            &self.io,
        )
    }
}

/// The output request for `infos` and `metadata` planned from `opts`.
fn request_of<'r>(
    opts: &'r ConvertOptions,
    (tensors, metadata): (&'r [TensorInfo], &'r Metadata),
    repo_dir: Option<&'r Path>,
    (source_format, float_dtype): (Format, Option<DType>),
    io: &IoCounter,
) -> OutputRequest<'r> {
    OutputRequest {
        target: &opts.output,
        tensors,
        metadata,
        shard_size: opts.shard_size,
        companions_from: repo_dir,
        source_format,
        float_dtype,
        io: io.clone(),
    }
}

/// The output tensors of a plan and what they are read from, before the output format plans
/// the files.
struct Tensors<'s> {
    src: Src<'s>,
    outs: Vec<TensorRecipe>,
    metadata: Metadata,
    source_format: Format,
    architecture: Option<ArchReport>,
}

/// The tensors of a release planned by its architecture (`dir`: the release directory).
fn by_architecture<'s>(
    source: &'s dyn TensorSource,
    dir: &Path,
    opts: &ConvertOptions,
    mmproj: bool,
) -> Result<Tensors<'s>> {
    let (transform, limits) = (&opts.transform, &opts.open.read.limits);
    let arch = if mmproj {
        by_arch::build_mmproj(source, dir, transform, limits)?
    } else {
        by_arch::build(source, dir, transform, limits)?
    };
    let with = WithGenerated::new(
        source,
        arch.generated,
        dir.join("config.json"),
        arch.dequant,
    );
    Ok(Tensors {
        source_format: arch.rewrites.unwrap_or_else(|| with.format()),
        src: Src::Generated(with),
        outs: arch.outs,
        metadata: arch.metadata,
        architecture: Some((arch.architecture, arch.dropped, arch.from)),
    })
}

/// Merges the route's LoRA adapters into the weights they target ([`crate::merge`]): their
/// factors become in-memory tensors after the source's (and the architecture's generated ones).
fn merge_adapters<'s>(
    t: &mut Tensors<'s>,
    source: &'s dyn TensorSource,
    route: &Route,
    opts: &ConvertOptions,
) -> Result<()> {
    let first = match &t.src {
        Src::Plain(s) => s.tensors().len(),
        Src::Generated(g) => g.tensors().len(),
    };
    let scale = opts.transform.lora_scale.unwrap_or(1.0);
    let appended = crate::merge::add(&mut t.outs, source, first, &route.merges, scale)?;
    let origin = route.merges[0].config.path.clone();
    match &mut t.src {
        Src::Plain(_) => {
            let with = WithGenerated::new(source, appended, origin, Default::default());
            t.src = Src::Generated(with)
        }
        Src::Generated(g) => g.append(appended),
    }
    Ok(())
}

/// The tensors of a LoRA adapter planned by its base model's architecture.
fn by_adapter<'s>(
    source: &'s dyn TensorSource,
    adapter: &AdapterRoute,
    opts: &ConvertOptions,
) -> Result<Tensors<'s>> {
    let arch = by_arch::build_adapter(source, adapter, &opts.transform, &opts.open.read.limits)?;
    let config = adapter.config.path.clone();
    let with = WithGenerated::new(source, arch.generated, config, arch.dequant);
    Ok(Tensors {
        source_format: with.format(),
        src: Src::Generated(with),
        outs: arch.outs,
        metadata: arch.metadata,
        architecture: Some((arch.architecture, arch.dropped, arch.from)),
    })
}

/// The tensors of `source` as the transform options name them, for the output format `fmt`.
fn by_options<'s>(
    source: &'s dyn TensorSource,
    fmt: &OutputFormat,
    opts: &ConvertOptions,
) -> Result<Tensors<'s>> {
    Ok(Tensors {
        outs: build(source, &opts.transform, fmt.stores, fmt.cast_rule)?,
        metadata: output_metadata(source, &opts.transform, fmt.by_architecture),
        source_format: source.format(),
        src: Src::Plain(source),
        architecture: None,
    })
}

/// Plans the conversion of `source` (opened from `opts.inputs` with `route`'s request;
/// `repo_dir` its repo directory) into `opts.output`, on the route decided for it.
pub(crate) fn plan<'s>(
    source: &'s dyn TensorSource,
    repo_dir: Option<&'s Path>,
    opts: &ConvertOptions,
    route: &Route,
) -> Result<Planned<'s>> {
    let fmt = route.output;
    let mut t = match (&route.adapter, route.arch_release(repo_dir)) {
        (Some(adapter), _) => by_adapter(source, adapter, opts)?,
        (None, Some(dir)) => by_architecture(source, dir, opts, route.mmproj)?,
        (None, None) => by_options(source, fmt, opts)?,
    };
    if !route.merges.is_empty() {
        merge_adapters(&mut t, source, route, opts)?;
    }
    let infos: Vec<TensorInfo> = t.outs.iter().map(|o| o.info.clone()).collect();
    let float_dtype = float_dtype(opts, fmt.by_architecture);
    let io = IoCounter::new();
    let what = (t.source_format, float_dtype);
    let plan = (fmt.plan)(&request_of(
        opts,
        (&infos, &t.metadata),
        repo_dir,
        what,
        &io,
    ))?;
    let mut outs = t.outs;
    for (i, shape) in &plan.reshaped {
        outs[*i].info.shape = shape.clone();
    }
    Ok(Planned {
        src: t.src,
        input_tensors: source.tensors().len(),
        outs,
        infos,
        metadata: t.metadata,
        plan,
        fmt,
        repo_dir,
        architecture: t.architecture,
        source_format: t.source_format,
        float_dtype,
        io,
    })
}

/// The dtype every floating tensor was cast to, when `--dtype` applied to all of them.
fn float_dtype(opts: &ConvertOptions, by_arch: bool) -> Option<DType> {
    let t = &opts.transform;
    match t.dtype {
        DtypeChoice::To(d) if !by_arch && t.dtype_filter.is_none() && t.quant.is_none() => Some(d),
        _ => None,
    }
}
