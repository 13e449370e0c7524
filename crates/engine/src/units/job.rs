//! The job every unit command rebuilds from the plan file's command: the same inputs, output
//! tensors, metadata and output plan as the one-process `convert` of that command, so a unit
//! writes exactly the bytes `convert` would have written for its tensors.

use sha2::{Digest, Sha256};
use weightport_core::registry::ExtraContent;
use weightport_core::{Error, Result};

use crate::input::open_inputs;
use crate::route::ConvertOptions;

/// CPU nanoseconds per byte read plus written of a conversion without a kernel (mapping,
/// hashing, writing durably, verifying): 9 CPU-s for the 2.4 GiB bench release copied into a
/// repo (2 × 2.55 GB moved) on the 2-core dev VM, rounded.
pub(super) const IO_NS_PER_BYTE: f64 = 2.0;

/// A planned job: convert's own plan ([`crate::planned::plan`]).
pub(super) type Job<'s> = crate::planned::Planned<'s>;

impl Job<'_> {
    /// Bytes unit work costs for output tensor `k`: what it reads plus what it writes.
    pub(crate) fn cost(&self, k: usize) -> u64 {
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

    /// Estimated single-thread CPU nanoseconds unit work on output tensor `k` takes: its
    /// bytes moved ([`Job::cost`]) at [`IO_NS_PER_BYTE`] plus its kernel's time per value
    /// ([`crate::Transform::cost_ns`]). Units are balanced by it: a Q4_K value costs about
    /// 1.4× a Q6_K one, though Q6_K writes more bytes.
    pub(crate) fn work(&self, k: usize) -> f64 {
        let o = &self.outs[k];
        let kernel = o.op.as_ref().map_or(0.0, |op| op.cost_ns());
        self.cost(k) as f64 * IO_NS_PER_BYTE + o.info.numel() as f64 * kernel
    }

    /// sha256 (hex) of everything that decides the output bytes: files, sizes, tensors per
    /// file, every tensor's name, type, shape, length and operation, and the extras.
    pub(crate) fn fingerprint(&self) -> String {
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
pub(super) fn with_job<R>(opts: &ConvertOptions, f: impl FnOnce(&Job) -> Result<R>) -> Result<R> {
    let route = crate::route::route(opts)?;
    let input = open_inputs(&opts.inputs, &route.open)?;
    let job = crate::planned::plan(
        input.source.as_ref(),
        input.repo_dir.as_deref(),
        opts,
        &route,
    )?;
    if job.outs.is_empty() {
        return Err(Error::Usage("the input holds no tensors to convert".into()));
    }
    f(&job)
}
