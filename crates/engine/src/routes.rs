//! The routes a conversion can take, one value each: what that route needs of the options,
//! and how it plans the output tensors of an opened input ([`PlansTensors`]). [`crate::route`]
//! chooses the value once, from the options; [`crate::planned`] asks it for the tensors and
//! never sees the options.
//!
//! - [`ByOptions`]: names and types as the transform options say ([`crate::by_options`]);
//! - [`ByRelease`]: an HF release by its architecture, or its multimodal projector
//!   ([`crate::by_arch`]); an input that is not a release is planned [`ByOptions`];
//! - [`ByAdapter`]: a PEFT LoRA adapter by its base model's architecture;
//! - [`Merged`]: any of them with LoRA adapters merged into the weights ([`crate::merge`]).

use std::path::Path;
use std::sync::Arc;

use weightport_core::{CastRule, DType, Format, Limits, Metadata, Result, TensorSource};

use crate::by_arch::{self, AdapterRoute, ArchJob};
use crate::by_options::{build, output_metadata, TensorRecipe, TransformOptions};
use crate::generated::WithGenerated;
use crate::merge::MergeAdapter;

/// What an architecture plan adds to the report: the architecture, the source tensors it
/// drops, and per output tensor the source name it comes from.
pub(crate) type ArchReport = (String, Vec<(String, String)>, Vec<Option<String>>);

/// The source a plan reads: the opened input, or the input followed by tensors computed in
/// memory (an architecture's generated tensors, merged adapters' factors).
pub(crate) enum Src<'s> {
    Plain(&'s dyn TensorSource),
    Generated(WithGenerated<'s>),
}

impl Src<'_> {
    /// The tensors read.
    pub(crate) fn source(&self) -> &dyn TensorSource {
        match self {
            Src::Plain(s) => *s,
            Src::Generated(g) => g,
        }
    }
}

/// The output tensors of a route and what they are read from, before the output format plans
/// the files.
pub(crate) struct Tensors<'s> {
    pub(crate) src: Src<'s>,
    pub(crate) outs: Vec<TensorRecipe>,
    pub(crate) metadata: Metadata,
    /// The format the output is written as a rewrite of (its dims convention).
    pub(crate) source_format: Format,
    pub(crate) architecture: Option<ArchReport>,
}

/// How one route plans the output tensors of an opened input (`repo_dir`: its repo directory,
/// when it was one).
pub(crate) trait PlansTensors: Send + Sync {
    /// The output tensors of `source`, in output order, and their metadata.
    fn tensors<'s>(
        &self,
        source: &'s dyn TensorSource,
        repo_dir: Option<&'s Path>,
    ) -> Result<Tensors<'s>>;
}

/// Names and types as the transform options say, for an output format that stores the types
/// `stores` accepts and casts floats under `cast_rule`.
pub(crate) struct ByOptions {
    pub(crate) transform: TransformOptions,
    pub(crate) stores: fn(DType) -> bool,
    pub(crate) cast_rule: CastRule,
    /// The output is a model file that names an architecture (GGUF).
    pub(crate) names_architecture: bool,
}

impl PlansTensors for ByOptions {
    fn tensors<'s>(
        &self,
        source: &'s dyn TensorSource,
        _: Option<&'s Path>,
    ) -> Result<Tensors<'s>> {
        let t = &self.transform;
        Ok(Tensors {
            outs: build(source, t, self.stores, self.cast_rule)?,
            metadata: output_metadata(source, t, self.names_architecture),
            source_format: source.format(),
            src: Src::Plain(source),
            architecture: None,
        })
    }
}

/// An HF release by its architecture (its text model, or with `mmproj` its multimodal
/// projector), when the opened input's repo directory is a release; any other input as the
/// options say.
pub(crate) struct ByRelease {
    pub(crate) options: ByOptions,
    pub(crate) limits: Limits,
    pub(crate) mmproj: bool,
}

impl PlansTensors for ByRelease {
    fn tensors<'s>(
        &self,
        source: &'s dyn TensorSource,
        repo_dir: Option<&'s Path>,
    ) -> Result<Tensors<'s>> {
        let Some(dir) = repo_dir.filter(|d| is_release(d)) else {
            return self.options.tensors(source, repo_dir);
        };
        let (transform, limits) = (&self.options.transform, &self.limits);
        let arch = match self.mmproj {
            true => by_arch::build_mmproj(source, dir, transform, limits)?,
            false => by_arch::build(source, dir, transform, limits)?,
        };
        Ok(arch_tensors(source, arch, dir.join("config.json")))
    }
}

/// A PEFT LoRA adapter written as a GGUF adapter by its base model's architecture.
pub(crate) struct ByAdapter {
    pub(crate) adapter: AdapterRoute,
    pub(crate) transform: TransformOptions,
    pub(crate) limits: Limits,
}

impl PlansTensors for ByAdapter {
    fn tensors<'s>(
        &self,
        source: &'s dyn TensorSource,
        _: Option<&'s Path>,
    ) -> Result<Tensors<'s>> {
        let (adapter, limits) = (&self.adapter, &self.limits);
        let arch = by_arch::build_adapter(source, adapter, &self.transform, limits)?;
        Ok(arch_tensors(source, arch, adapter.config.path.clone()))
    }
}

/// The tensors of an architecture plan, its generated ones (computed from `origin`) after the
/// source's.
fn arch_tensors<'s>(
    source: &'s dyn TensorSource,
    arch: ArchJob,
    origin: std::path::PathBuf,
) -> Tensors<'s> {
    let with = WithGenerated::new(source, arch.generated, origin, arch.dequant);
    Tensors {
        source_format: arch.rewrites.unwrap_or_else(|| with.format()),
        src: Src::Generated(with),
        outs: arch.outs,
        metadata: arch.metadata,
        architecture: Some((arch.architecture, arch.dropped, arch.from)),
    }
}

/// The tensors of `inner` with LoRA adapters merged into the weights they target: their
/// factors become in-memory tensors after the source's (and the architecture's generated
/// ones), scaled by `scale` on top of PEFT's.
pub(crate) struct Merged {
    pub(crate) inner: Arc<dyn PlansTensors>,
    pub(crate) adapters: Vec<MergeAdapter>,
    pub(crate) scale: f64,
}

impl PlansTensors for Merged {
    fn tensors<'s>(
        &self,
        source: &'s dyn TensorSource,
        repo_dir: Option<&'s Path>,
    ) -> Result<Tensors<'s>> {
        let mut t = self.inner.tensors(source, repo_dir)?;
        let first = t.src.source().tensors().len();
        let appended = crate::merge::add(&mut t.outs, source, first, &self.adapters, self.scale)?;
        let origin = self.adapters[0].config.path.clone();
        match &mut t.src {
            Src::Plain(_) => {
                let with = WithGenerated::new(source, appended, origin, Default::default());
                t.src = Src::Generated(with)
            }
            Src::Generated(g) => g.append(appended),
        }
        Ok(t)
    }
}

/// True when `dir` is a release an architecture plan reads: a directory with a `config.json`.
pub(crate) fn is_release(dir: &Path) -> bool {
    dir.join("config.json").is_file()
}
