//! The plan phase of a conversion: from an opened source and the route decided for it, the
//! output tensors (the route's own [`crate::routes::PlansTensors`]), the metadata and the
//! output format's plan (every file, header and offset fixed). `convert`, a fan-out of many
//! outputs from one read ([`crate::convert_many`]) and the job protocol's [`crate::plan`] (the
//! unit commands) all plan with [`plan`], so they write the same bytes. The options are not
//! read here: the route holds what planning needs.

use std::path::Path;

use weightport_core::registry::{OutputPlan, OutputRequest};
use weightport_core::{Format, IoCounter, Metadata, Result, TensorInfo, TensorSource};

use crate::by_options::TensorRecipe;
use crate::route::{Output, Route, Run};
use crate::routes::{ArchReport, Src};

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
    /// The output: its format, target and what the format plans from.
    pub output: Output,
    /// How the conversion runs, checks and publishes it.
    pub run: Run,
    /// The input repo directory (companions come from it).
    pub repo_dir: Option<&'s Path>,
    /// Planned by architecture: what the report says of it.
    pub architecture: Option<ArchReport>,
    source_format: Format,
    /// The writes, opens and syncs of this output's files.
    pub io: IoCounter,
}

impl Planned<'_> {
    /// The tensors read (with the architecture's generated tensors after the input's own).
    pub(crate) fn source(&self) -> &dyn TensorSource {
        self.src.source()
    }

    /// The output request the plan and the sink are made from.
    pub(crate) fn request(&self) -> OutputRequest<'_> {
        let what = (&self.infos[..], &self.metadata);
        request_of(
            &self.output,
            what,
            self.repo_dir,
            self.source_format,
            &self.io,
        )
    }
}

/// The output request for `tensors` and `metadata` to `output`.
fn request_of<'r>(
    output: &'r Output,
    (tensors, metadata): (&'r [TensorInfo], &'r Metadata),
    repo_dir: Option<&'r Path>,
    source_format: Format,
    io: &IoCounter,
) -> OutputRequest<'r> {
    OutputRequest {
        target: &output.target,
        tensors,
        metadata,
        shard_size: output.shard_size,
        companions_from: repo_dir,
        source_format,
        float_dtype: output.float_dtype,
        io: io.clone(),
    }
}

/// Plans the conversion of `source` (opened with `route`'s request; `repo_dir` its repo
/// directory) on `route`: the route's tensors, then the output format's plan of them.
pub(crate) fn plan<'s>(
    source: &'s dyn TensorSource,
    repo_dir: Option<&'s Path>,
    route: &Route,
) -> Result<Planned<'s>> {
    let t = route.tensors.tensors(source, repo_dir)?;
    let infos: Vec<TensorInfo> = t.outs.iter().map(|o| o.info.clone()).collect();
    let io = IoCounter::new();
    let what = (&infos[..], &t.metadata);
    let request = request_of(&route.output, what, repo_dir, t.source_format, &io);
    let plan = (route.output.format.plan)(&request)?;
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
        output: route.output.clone(),
        run: route.run.clone(),
        repo_dir,
        architecture: t.architecture,
        source_format: t.source_format,
        io,
    })
}
