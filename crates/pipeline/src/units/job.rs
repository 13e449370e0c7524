//! The job every unit command rebuilds from the plan file's command: the same inputs, output
//! tensors, metadata and output plan as the one-process `convert` of that command, so a unit
//! writes exactly the bytes `convert` would have written for its tensors.

use std::path::Path;

use sha2::{Digest, Sha256};
use weightport_core::registry::{ExtraContent, OutputFormat, OutputPlan, OutputRequest};
use weightport_core::{Error, Format, Metadata, Result, TensorInfo, TensorSource};

use crate::by_arch::{self, WithGenerated};
use crate::convert::ConvertOptions;
use crate::input::open_inputs;
use crate::plan::{build, output_metadata, DtypeChoice, OutTensor};
use crate::registry::output_for;

/// A planned job: the source it reads, its output tensors and output plan.
pub struct Job<'s> {
    /// The tensors read (with the architecture's generated tensors after the release's own).
    pub source: &'s dyn TensorSource,
    /// Output tensors, in output order (shapes as stored).
    pub outs: Vec<OutTensor>,
    /// Their infos, as the sink is given them.
    pub infos: Vec<TensorInfo>,
    /// The output's metadata.
    pub metadata: Metadata,
    /// Files, headers, extras.
    pub plan: OutputPlan,
    /// The output format.
    pub fmt: &'static OutputFormat,
    /// The input repo directory (companions come from it).
    pub repo_dir: Option<&'s Path>,
    source_format: Format,
    float_dtype: Option<weightport_core::DType>,
}

impl Job<'_> {
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
        }
    }

    /// Bytes unit work costs for output tensor `k`: what it reads plus what it writes.
    pub fn cost(&self, k: usize) -> u64 {
        let o = &self.outs[k];
        let read: u64 = match &o.op {
            None => o.info.byte_len,
            Some(op) => op
                .needs(0..o.info.byte_len)
                .iter()
                .map(|(_, r)| r.end - r.start)
                .sum(),
        };
        read + o.info.byte_len
    }

    /// sha256 (hex) of everything that decides the output bytes: files, sizes, tensors per
    /// file, every tensor's name, type, shape, length and operation, and the extras.
    pub fn fingerprint(&self) -> String {
        let mut h = Sha256::new();
        for f in &self.plan.files {
            h.update(format!(
                "file {} {} {:?}\n",
                f.path.display(),
                f.size,
                f.tensors
            ));
        }
        for o in &self.outs {
            let op = o.op.as_ref().map(|op| op.describe()).unwrap_or_default();
            let i = &o.info;
            h.update(format!(
                "tensor {:?} {} {:?} {} {op} {:?}\n",
                i.name, i.dtype, i.shape, i.byte_len, o.inputs
            ));
        }
        for e in &self.plan.extras {
            h.update(format!("extra {} {}\n", e.path.display(), e.is_index));
            if let ExtraContent::Bytes(b) = &e.content {
                h.update(b);
            }
        }
        format!("{:x}", h.finalize())
    }
}

/// Opens `opts.inputs` and plans the job exactly as `convert` does, then calls `f` with it.
pub fn with_job<R>(opts: &ConvertOptions, f: impl FnOnce(&Job) -> Result<R>) -> Result<R> {
    let fmt = output_for(&opts.output, opts.to.as_deref())?;
    let by_arch = fmt.by_architecture;
    let input = open_inputs(&opts.inputs, &crate::convert::input_request(opts)?)?;
    let source = input.source.as_ref();
    let repo_dir = input.repo_dir.as_deref();
    match by_arch::wanted(repo_dir, by_arch, &opts.transform) {
        Some(dir) => {
            let arch = by_arch::build(source, dir, &opts.transform, &opts.open.read.limits)?;
            let with = WithGenerated::new(source, arch.generated, dir.join("config.json"));
            let format = arch.rewrites.unwrap_or_else(|| with.format());
            let job = assemble(&with, arch.outs, arch.metadata, fmt, repo_dir, format, opts)?;
            f(&job)
        }
        None => {
            let outs = build(source, &opts.transform, fmt.stores, fmt.cast_rule)?;
            let metadata = output_metadata(source, &opts.transform, by_arch);
            let job = assemble(source, outs, metadata, fmt, repo_dir, source.format(), opts)?;
            f(&job)
        }
    }
}

fn assemble<'s>(
    source: &'s dyn TensorSource,
    mut outs: Vec<OutTensor>,
    metadata: Metadata,
    fmt: &'static OutputFormat,
    repo_dir: Option<&'s Path>,
    source_format: Format,
    opts: &ConvertOptions,
) -> Result<Job<'s>> {
    let float_dtype = match opts.transform.dtype {
        DtypeChoice::To(d)
            if !fmt.by_architecture
                && opts.transform.dtype_filter.is_none()
                && opts.transform.quant.is_none() =>
        {
            Some(d)
        }
        _ => None,
    };
    let mut job = Job {
        source,
        infos: outs.iter().map(|o| o.info.clone()).collect(),
        outs: Vec::new(),
        metadata,
        plan: OutputPlan {
            dir: Default::default(),
            is_repo: false,
            files: Vec::new(),
            extras: Vec::new(),
            is_own_file: |_| false,
            reshaped: Vec::new(),
        },
        fmt,
        repo_dir,
        source_format,
        float_dtype,
    };
    let plan = (fmt.plan)(&job.request(opts))?;
    for (i, shape) in &plan.reshaped {
        outs[*i].info.shape = shape.clone();
    }
    if outs.is_empty() {
        return Err(Error::Usage("the input holds no tensors to convert".into()));
    }
    job.outs = outs;
    job.plan = plan;
    Ok(job)
}
