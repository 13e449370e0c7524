//! The job every unit command rebuilds from the plan file's command: the same inputs, output
//! tensors, metadata and output plan as the one-process `convert` of that command, so a unit
//! writes exactly the bytes `convert` would have written for its tensors.

use std::ops::Range;

use sha2::{Digest, Sha256};
use weightport_core::registry::ExtraContent;
use weightport_core::{Error, Result};

use weightport_engine::{open_inputs, route, ConvertOptions, Job};

/// CPU nanoseconds per byte read plus written of a conversion without a kernel (mapping,
/// hashing, writing durably, verifying): 9 CPU-s for the 2.4 GiB bench release copied into a
/// repo (2 × 2.55 GB moved) on the 2-core dev VM, rounded.
pub(super) const IO_NS_PER_BYTE: f64 = 2.0;

/// What units ask of a planned job ([`weightport_engine::plan`]: convert's own plan) beyond
/// the engine's protocol: its costs and its fingerprint.
pub(crate) trait JobCosts {
    /// The input ranges output tensor `k` reads for all its bytes (each with its position in
    /// [`Job::inputs`]): its operation's needs, or (no operation) its one input whole.
    fn reads(&self, k: usize) -> Vec<(usize, Range<u64>)>;
    /// Bytes unit work costs for output tensor `k`: what it reads plus what it writes.
    fn cost(&self, k: usize) -> u64;
    /// Estimated single-thread CPU nanoseconds unit work on output tensor `k` takes.
    fn work(&self, k: usize) -> f64;
    /// sha256 (hex) of everything that decides the output bytes.
    fn fingerprint(&self) -> String;
}

impl JobCosts for Job<'_> {
    fn reads(&self, k: usize) -> Vec<(usize, Range<u64>)> {
        let out = 0..self.tensor(k).byte_len;
        match self.operation(k) {
            None => vec![(0, out)],
            Some(op) => op.needs(out),
        }
    }

    /// Bytes unit work costs for output tensor `k`: what it reads plus what it writes.
    fn cost(&self, k: usize) -> u64 {
        let len = self.tensor(k).byte_len;
        let read: u64 = self.reads(k).iter().map(|(_, r)| r.end - r.start).sum();
        read + len
    }

    /// Estimated single-thread CPU nanoseconds unit work on output tensor `k` takes: its
    /// bytes moved ([`Job::cost`]) at [`IO_NS_PER_BYTE`] plus its kernel's time per value
    /// ([`weightport_engine::Transform::cost_ns`]). Units are balanced by it: a Q4_K value
    /// costs about 1.4× a Q6_K one, though Q6_K writes more bytes.
    fn work(&self, k: usize) -> f64 {
        let kernel = self.operation(k).map_or(0.0, |op| op.cost_ns());
        self.cost(k) as f64 * IO_NS_PER_BYTE + self.tensor(k).numel() as f64 * kernel
    }

    /// sha256 (hex) of everything that decides the output bytes: files, sizes, tensors per
    /// file, every tensor's name, type, shape, length and operation, and the extras.
    fn fingerprint(&self) -> String {
        let mut h = Sha256::new();
        for f in &self.output_plan().files {
            h.update(format!(
                "file {} {} {:?}\n",
                f.path.display(),
                f.size,
                f.tensors
            ));
        }
        for k in 0..self.tensor_count() {
            let op = self
                .operation(k)
                .map(|op| op.describe())
                .unwrap_or_default();
            let i = self.tensor(k);
            h.update(format!(
                "tensor {:?} {} {:?} {} {op} {:?}\n",
                i.name,
                i.dtype,
                i.shape,
                i.byte_len,
                self.inputs(k)
            ));
        }
        for e in &self.output_plan().extras {
            h.update(format!("extra {} {}\n", e.path.display(), e.is_index));
            if let ExtraContent::Bytes(b) = &e.content {
                h.update(b);
            }
        }
        format!("{:x}", h.finalize())
    }
}

/// Opens `opts.inputs` and plans the job exactly as `convert` does (the engine's protocol:
/// route, open, plan), then calls `f` with it.
pub(crate) fn with_job<R>(opts: &ConvertOptions, f: impl FnOnce(&Job) -> Result<R>) -> Result<R> {
    let route = route(opts)?;
    let input = open_inputs(&opts.inputs, &route.open)?;
    let job = weightport_engine::plan(&input, &route)?;
    if job.tensor_count() == 0 {
        return Err(Error::Usage("the input holds no tensors to convert".into()));
    }
    f(&job)
}
