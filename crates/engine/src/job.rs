//! The planned job as other crates see it: one output planned exactly as `convert` plans it
//! ([`plan`]), its output tensors executed into files of the caller's ([`Job::execute`]), and
//! staged files verified and committed by `convert`'s transaction ([`Job::prepare`],
//! [`Job::verify`], [`Job::commit`]). The unit commands (`weightport-units`) are built on it.

use std::path::{Path, PathBuf};

use weightport_core::kernel_copy::Origin;
use weightport_core::registry::{OutputPlan, OutputRequest};
use weightport_core::{
    ContentHash, FinishedFile, IoCounter, Result, StagedFile, TensorInfo, TensorSink, TensorSource,
};

use crate::by_options::TensorRecipe;
use crate::convert::FileReport;
use crate::exec::{leaf_of, run, worker_bytes, Hashes, Progress};
use crate::input::Input;
use crate::planned::Planned;
use crate::route::Route;
use crate::side::SideFile;
use crate::transform::Transform;
use crate::txn;
use crate::workers::pool_of;

/// One output planned as `convert` plans it: its output tensors (each an input range and an
/// operation), metadata and the output format's plan, every file, header and offset fixed.
pub struct Job<'s>(Planned<'s>);

/// Plans the output of `route` from `input` (opened with its request): the same plan, so the
/// same bytes, as [`crate::convert_input`] writes. Nothing is written.
pub fn plan<'s>(input: &'s Input, route: &Route) -> Result<Job<'s>> {
    let source = input.source.as_ref();
    crate::planned::plan(source, input.repo_dir.as_deref(), route).map(Job)
}

/// Where [`Job::execute`] puts each chunk of output bytes (positional writes into the caller's
/// files). Every `Fn(tensor, offset, bytes)` closure is one.
pub trait Emit: Sync {
    /// Puts `bytes` at `offset` of output tensor `k` (an index into the executed tensors).
    fn bytes(&self, k: usize, offset: u64, bytes: &[u8]) -> Result<()>;
    /// Whether [`Emit::copy`] can copy at all (so no origin is looked up for nothing).
    fn copies(&self) -> bool {
        false
    }
    /// Copies `len` bytes of the input file `from` to `offset` of output tensor `k` in the
    /// kernel; returns the bytes copied (fewer: the rest is the caller's to write).
    fn copy(&self, _k: usize, _offset: u64, _from: &Origin, _len: u64) -> Result<u64> {
        Ok(0)
    }
}

/// An output locked and checked ([`Job::prepare`]), to be committed once ([`Job::commit`]).
pub struct Prepared(txn::Prepared);

/// What [`Job::commit`] published.
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct Committed {
    /// Weights files.
    pub files: Vec<FileReport>,
    /// Index and companion files.
    pub extras: Vec<PathBuf>,
    /// Stale files removed (with `force`).
    pub removed: Vec<PathBuf>,
}

impl Job<'_> {
    /// Number of output tensors.
    pub fn tensor_count(&self) -> usize {
        self.0.outs.len()
    }

    /// Output tensor `k` as written: name, dtype, shape (as stored), length.
    pub fn tensor(&self, k: usize) -> &TensorInfo {
        &self.0.outs[k].info
    }

    /// The source tensors output tensor `k` reads (indices into [`Job::source`]).
    pub fn inputs(&self, k: usize) -> &[usize] {
        &self.0.outs[k].inputs
    }

    /// The operation making output tensor `k`; `None`: its one input's bytes unchanged.
    pub fn operation(&self, k: usize) -> Option<&dyn Transform> {
        self.0.outs[k].op.as_deref()
    }

    /// The tensors read (an architecture's generated tensors and merged adapters' factors
    /// after the input's own).
    pub fn source(&self) -> &dyn TensorSource {
        self.0.source()
    }

    /// The output format's plan: files (paths, sizes, tensors), extras (index, companions).
    pub fn output_plan(&self) -> &OutputPlan {
        &self.0.plan
    }

    /// The output format's name.
    pub fn format_name(&self) -> &'static str {
        self.0.output.format.name
    }

    /// The input repo directory (companions come from it).
    pub fn repo_dir(&self) -> Option<&Path> {
        self.0.repo_dir
    }

    /// The writes, opens and syncs of this output's files.
    pub fn io(&self) -> &IoCounter {
        &self.0.io
    }

    /// The leaf (hashing chunk) length of output tensor `k` for chunk size `chunk`: a content
    /// hash is the root of the hashes of its leaves ([`weightport_core::hash::root`]).
    pub fn leaf_bytes(&self, k: usize, chunk: u64) -> u64 {
        leaf_of(&self.0.outs[k], chunk)
    }

    /// The format's sink opened on the job, its files planned and staged (sparse temp files
    /// beside them, removed with the sink): the headers and offsets `convert` writes. With
    /// `into`, every file (and the target) is moved into that directory first.
    pub fn stage(&self, into: Option<&Path>) -> Result<(Box<dyn TensorSink>, Vec<StagedFile>)> {
        let job = &self.0;
        let moved = |p: &Path| into.map(|d| d.join(p.file_name().unwrap_or_default()));
        let mut plan = job.plan.clone();
        for f in &mut plan.files {
            f.path = moved(&f.path).unwrap_or_else(|| f.path.clone());
        }
        let output = &job.output.target;
        let target = moved(output).unwrap_or_else(|| output.clone());
        let req = OutputRequest {
            target: &target,
            ..job.request()
        };
        let mut sink = (job.output.format.sink)(&req, &plan)?;
        let staged = sink.plan(&job.infos, &job.metadata)?.files;
        Ok((sink, staged))
    }

    /// Worker threads for executing `tensors` within the route's threads and memory budget;
    /// refused when not even one worker fits (`what` names the work: "this unit").
    pub fn threads(&self, tensors: &[usize], what: &str) -> Result<usize> {
        let (outs, run) = (self.outs_of(tensors), &self.0.run);
        let worker = worker_bytes(self.0.source(), &outs, run.chunk);
        Ok(run.workers.fit(worker, None, what)?.0)
    }

    fn outs_of(&self, tensors: &[usize]) -> Vec<TensorRecipe> {
        tensors.iter().map(|&k| self.0.outs[k].clone()).collect()
    }

    /// Computes output tensors `tensors` on `threads` workers, handing every chunk to `emit`
    /// (its tensor index is the position in `tensors`); returns their content hashes.
    /// Progress: a "write" phase.
    pub fn execute(
        &self,
        tensors: &[usize],
        threads: usize,
        progress: &dyn Progress,
        emit: impl Emit + Send,
    ) -> Result<Vec<ContentHash>> {
        let (outs, chunk) = (self.outs_of(tensors), self.0.run.chunk);
        progress.start("write", outs.iter().map(|o| o.info.byte_len).sum());
        let hashes = pool_of(threads)?
            .install(|| run(self.0.source(), &outs, chunk, progress, ByEmit(&emit)))?;
        progress.finish();
        Ok(hashes.out)
    }

    /// Refuses side files at an input's place or an output file's, or existing ones without
    /// their `replace`.
    pub fn check_side_files(&self, sides: &[SideFile]) -> Result<()> {
        crate::convert::check_side_files(&self.0, sides)
    }

    /// Locks and checks the output as `convert` does before writing (an existing output
    /// without `force`, a file the job reads, killed commits finished); with `dry_run`,
    /// refuses what the real run would and changes nothing.
    pub fn prepare(&self, dry_run: bool) -> Result<Prepared> {
        crate::convert::prepare_output(&self.0, dry_run).map(Prepared)
    }

    /// Verifies a staged output file (`file.temp`, to be published as `file.path`) as
    /// `convert` does: reopened strictly, every tensor's content hash against `hashes` (one
    /// per output tensor, as written). Runs on the route's worker threads.
    pub fn verify(
        &self,
        file: &StagedFile,
        hashes: &[ContentHash],
        progress: &dyn Progress,
    ) -> Result<()> {
        let (job, run) = (&self.0, &self.0.run);
        let hashes = Hashes {
            out: hashes.to_vec(),
            src: vec![None; hashes.len()],
        };
        // The reader opens the staged file once.
        job.io.opened();
        pool_of(run.workers.wanted())?.install(|| {
            crate::verify::verify_staged(
                file,
                &job.outs,
                &hashes,
                job.source(),
                &run.reopen,
                run.chunk,
                progress,
            )
        })
    }

    /// Publishes the verified weights files `files` (one per planned file, in plan order) and
    /// the extras with `convert`'s transaction.
    pub fn commit(&self, prepared: Prepared, files: Vec<FinishedFile>) -> Result<Committed> {
        let job = &self.0;
        let c = txn::commit(prepared.0, &job.plan, files, job.run.force, &job.io)?;
        Ok(Committed {
            files: c
                .files
                .into_iter()
                .map(|w| FileReport {
                    path: w.path,
                    size: w.size,
                    tensors: w.tensors,
                })
                .collect(),
            extras: c.extras,
            removed: c.removed,
        })
    }
}

/// The executor's emit over a public [`Emit`].
struct ByEmit<'a, E>(&'a E);

impl<E: Emit> crate::exec::Emit for ByEmit<'_, E> {
    fn bytes(&self, k: usize, offset: u64, bytes: &[u8]) -> Result<()> {
        self.0.bytes(k, offset, bytes)
    }
    fn copies(&self) -> bool {
        self.0.copies()
    }
    fn copy(&self, k: usize, offset: u64, from: &Origin, len: u64) -> Result<u64> {
        self.0.copy(k, offset, from, len)
    }
}
