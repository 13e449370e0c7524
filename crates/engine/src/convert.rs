//! A conversion job: open → output plan → prepare (lock, checks) → execute → verify → commit.
//!
//! Nothing here knows a format: inputs and outputs come from the registry, tensors from the
//! output plan ([`crate::by_options`]), publishing from the transaction ([`crate::txn`]).

use std::path::{Path, PathBuf};

use weightport_core::registry::{ExtraContent, OutputPlan};
use weightport_core::{Error, Format, IoCounts, Result, StagedFile, TensorSink, TensorSource};

use crate::by_options::TensorRecipe;
use crate::exec::{run_counted, worker_bytes, Hashes, Progress, Reads, ToSink};
use crate::input::{open_inputs, Input};
use crate::lineage;
use crate::planned::{self, Planned};
use crate::route::{route, ConvertOptions, Route};
use crate::routes::ArchReport;
use crate::side::{self, SideFile};
use crate::transform::quality::Quality;
use crate::txn::{self, Prepared};
use crate::verify::verify_staged;
use crate::workers::pool_of;
use weightport_provenance::{Provenance, TensorProvenance};

/// One file of the plan or of the result.
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct FileReport {
    /// Final path.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Tensors it holds.
    pub tensors: usize,
}

/// A tensor that was transformed, and what happened.
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct TransformReport {
    /// Output tensor name.
    pub tensor: String,
    /// The operation (`F16→F32`).
    pub op: String,
    /// Counts of lossy effects, if any.
    pub outcome: Option<String>,
    /// Error against the source values, for quantizations and narrowing casts.
    pub quality: Option<Quality>,
}

/// One output tensor as planned.
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct TensorReport {
    /// Output name.
    pub name: String,
    /// The source tensor it comes from, when the name changed (HF → GGUF); `None` otherwise or
    /// when generated.
    pub from: Option<String>,
    /// Written type.
    pub dtype: weightport_core::DType,
    /// Shape, outermost first.
    pub shape: Vec<u64>,
    /// Bytes written.
    pub bytes: u64,
    /// Why the type is not the one asked for (a `--quant` fallback).
    pub note: Option<String>,
}

/// What a conversion did (or, with `dry_run`, would do).
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct ConvertReport {
    /// Input files actually read.
    pub inputs: Vec<PathBuf>,
    /// Input format.
    pub input_format: Format,
    /// Output format name (`safetensors`, `hf-repo`, …).
    pub output_format: &'static str,
    /// Output weights files.
    pub files: Vec<FileReport>,
    /// The index written, if sharded.
    pub index: Option<PathBuf>,
    /// Companion files copied (config.json, tokenizer files, …).
    pub copied: Vec<PathBuf>,
    /// Stale files removed (with `force`; in a dry run, those that would be).
    pub removed: Vec<PathBuf>,
    /// Temp files of killed runs that were removed.
    pub cleaned: Vec<PathBuf>,
    /// Files published by finishing a killed run's commit.
    pub recovered: Vec<PathBuf>,
    /// Transformed tensors.
    pub transforms: Vec<TransformReport>,
    /// Every output tensor, in output order.
    pub plan: Vec<TensorReport>,
    /// HF release → GGUF: `arch (HF architecture)`.
    pub architecture: Option<String>,
    /// Tensors of the input not written, and why: those outside the converted dict of a
    /// checkpoint ([`TensorSource::unconverted`]), then (HF release → GGUF) those of the
    /// release llama.cpp does not use.
    pub dropped: Vec<(String, String)>,
    /// Things worth knowing about how the input was read.
    pub notes: Vec<String>,
    /// Number of tensors.
    pub tensors: usize,
    /// Tensor data bytes written.
    pub data_bytes: u64,
    /// Elements (parameters) written.
    pub elements: u64,
    /// Bytes the output weights files occupy.
    pub total_bytes: u64,
    /// Bytes needed on disk, in filesystem blocks, with index and companions.
    pub needed_bytes: u64,
    /// Free bytes where the output goes, when known.
    pub free_bytes: Option<u64>,
    /// Every file was re-validated and its hashes matched.
    pub verified: bool,
    /// Nothing was written.
    pub dry_run: bool,
    /// Worker threads used.
    pub threads: usize,
    /// Buffer and mapped-chunk memory the executor holds at most.
    pub memory_bytes: u64,
    /// With [`ConvertOptions::provenance`]: inputs, outputs and per-tensor sources.
    pub provenance: Option<Provenance>,
    /// Bytes of input tensor data taken from the input (shared by every output of a
    /// [`convert_many`] run).
    pub read_bytes: u64,
    /// The same per input file.
    pub reads: Vec<(PathBuf, u64)>,
    /// The writes, opens and syncs of the output's files (nothing in a dry run).
    pub io: IoCounts,
}

/// Runs a conversion of `opts.inputs`.
pub fn convert(opts: &ConvertOptions, progress: &dyn Progress) -> Result<ConvertReport> {
    let route = route(opts)?;
    let input = open_inputs(&opts.inputs, &route.open)?;
    convert_input(&input, &route, progress)
}

/// Runs the conversion [`route`] decided of an input opened with its request (the inputs
/// are not opened again).
pub fn convert_input(
    input: &Input,
    route: &Route,
    progress: &dyn Progress,
) -> Result<ConvertReport> {
    let source = input.source.as_ref();
    let mut r = convert_source(source, input.repo_dir.as_deref(), route, progress)?;
    r.notes = input.notes.clone();
    Ok(r)
}

/// Runs the conversion [`route`] decided of an already opened source (the options' inputs are
/// ignored). `repo_dir` is the input repo whose companion files are copied into a repo output.
pub fn convert_source(
    source: &dyn TensorSource,
    repo_dir: Option<&Path>,
    route: &Route,
    progress: &dyn Progress,
) -> Result<ConvertReport> {
    let mut out = start(source, repo_dir, route)?;
    let run = &route.run;
    let worker = worker_bytes(out.job.source(), &out.job.outs, run.chunk);
    let (threads, memory) = run.workers.fit(worker, None, "this job")?;
    out.report.threads = threads;
    out.report.memory_bytes = memory;
    if run.dry_run {
        return Ok(out.report);
    }
    let pool = pool_of(threads)?;
    let reads = Reads::new(out.job.input_tensors);
    let sink = out.open_sink()?;
    let hashes = pool.install(|| {
        progress.start("write", out.report.data_bytes);
        let h = run_counted(
            out.job.source(),
            &out.job.outs,
            run.chunk,
            &reads,
            progress,
            ToSink(&*sink),
        );
        progress.finish();
        h
    })?;
    out.report.read_bytes = reads.total();
    out.report.reads = reads.by_file(source);
    pool.install(|| out.finish(sink, &hashes, progress))
}

/// An output planned and prepared (locked, checked), with its report so far: the plan and
/// the verify-commit phases of a conversion around an executor run.
pub(crate) struct Started<'s> {
    pub(crate) job: Planned<'s>,
    prepared: Option<Prepared>,
    pub(crate) report: ConvertReport,
    staged: Vec<StagedFile>,
}

/// Plans the output of `route` from `source` and prepares it (lock, refusals, disk space).
pub(crate) fn start<'s>(
    source: &'s dyn TensorSource,
    repo_dir: Option<&'s Path>,
    route: &Route,
) -> Result<Started<'s>> {
    let job = planned::plan(source, repo_dir, route)?;
    let run = &job.run;
    check_side_files(&job, &run.side_files)?;
    let prepared = prepare_output(&job, run.dry_run)?;
    let mut report = report_of(
        job.source(),
        job.output.format.name,
        &job.plan,
        &job.outs,
        &prepared,
        run.dry_run,
    );
    report.dropped = job.source().unconverted();
    if let Some(arch) = job.architecture.clone() {
        architecture_into(&mut report, arch);
    }
    Ok(Started {
        job,
        prepared: Some(prepared),
        report,
        staged: Vec::new(),
    })
}

/// Every file the conversion reads: the inputs given, every file read, the input repo's
/// companions, the importance matrix.
fn input_files(job: &Planned) -> Vec<PathBuf> {
    let run = &job.run;
    let mut inputs = run.given.clone();
    inputs.extend(job.source().files());
    inputs.extend(job.repo_dir.map(companions).unwrap_or_default());
    inputs.extend(run.imatrix.as_ref().map(|(given, _)| given.clone()));
    inputs.extend(run.metadata_file.clone());
    inputs
}

/// Prepares the output's transaction ([`txn::prepare`]) and refuses, even with `--force`, an
/// output whose commit would replace or remove a file the conversion reads (`convert
/// m.safetensors -o m.safetensors --force`, or a repo written over its own shards): inputs are
/// never modified.
pub(crate) fn prepare_output(job: &Planned, dry_run: bool) -> Result<Prepared> {
    let target = &job.output.target;
    let prepared = txn::prepare(&job.plan, target, job.run.force, dry_run)?;
    let inputs = input_files(job);
    let plan = &job.plan;
    let touched = plan.files.iter().map(|f| &f.path);
    let touched = touched.chain(plan.extras.iter().map(|e| &e.path));
    side::refuse_inputs(touched.chain(prepared.removals.iter()), &inputs)?;
    Ok(prepared)
}

/// Refuses side files at an input's place ([`input_files`]) or an output file's, or existing
/// ones without `--force`.
pub(crate) fn check_side_files(job: &Planned, sides: &[SideFile]) -> Result<()> {
    if sides.is_empty() {
        return Ok(());
    }
    let inputs = input_files(job);
    let plan = &job.plan;
    let mut outputs: Vec<PathBuf> = plan.files.iter().map(|f| f.path.clone()).collect();
    outputs.extend(plan.extras.iter().map(|e| e.path.clone()));
    side::check(sides, &inputs, &outputs, !job.run.dry_run)?;
    refuse_own_names(plan, sides)
}

/// Refuses a side file inside an output repo under a name of the repo's format (a shard, an
/// index): a reader would take it for the repo's, and `--force` removes it as stale.
fn refuse_own_names(plan: &OutputPlan, sides: &[SideFile]) -> Result<()> {
    if !plan.is_repo {
        return Ok(());
    }
    let dir = side::resolved(&plan.dir);
    for s in sides {
        let name = s.path.file_name().map(|n| n.to_string_lossy().into_owned());
        let inside = s.path.parent().map(side::resolved) == Some(dir.clone());
        if inside && name.is_some_and(|n| (plan.is_own_file)(&n)) {
            return Err(Error::Usage(format!(
                "{}: is named as a file of the output repo {} (a reader would take it for \
                 one); name another file",
                s.label(),
                weightport_core::shown(&plan.dir)
            )));
        }
    }
    Ok(())
}

impl Started<'_> {
    /// The sink the executor writes this output's staged files through.
    pub(crate) fn open_sink(&mut self) -> Result<Box<dyn TensorSink>> {
        let req = self.job.request();
        let mut sink = (self.job.output.format.sink)(&req, &self.job.plan)?;
        self.staged = sink.plan(&self.job.infos, &self.job.metadata)?.files;
        Ok(sink)
    }

    /// After the executor wrote `sink`'s files: verifies them when asked, commits them, and
    /// completes the report (with `--attest`, each tensor's provenance).
    pub(crate) fn finish(
        mut self,
        sink: Box<dyn TensorSink>,
        hashes: &Hashes,
        progress: &dyn Progress,
    ) -> Result<ConvertReport> {
        let (job, data_bytes) = (&self.job, self.report.data_bytes);
        let (source, outs, run) = (job.source(), &job.outs, &job.run);
        let read = match run.provenance {
            true => Some(lineage::source_hashes(source, outs, hashes, run.chunk)?),
            false => None,
        };
        if run.verify {
            progress.start("verify", data_bytes);
            for f in &self.staged {
                // The reader opens the staged file once.
                job.io.opened();
                verify_staged(f, outs, hashes, source, &run.reopen, run.chunk, progress)?;
            }
            progress.finish();
        }
        let finished = sink.finish()?;
        let prepared = self.prepared.take().expect("finished once");
        let committed = txn::commit(prepared, &job.plan, finished, run.force, &job.io)?;
        if let Some(r) = read {
            let tensors = lineage::tensors_of(source, outs, hashes, &r);
            let by_arch = job.output.format.by_architecture;
            let mut inputs = run.given.clone();
            // The importance matrix decides the quantized bytes: a material too.
            inputs.extend(run.imatrix.as_ref().map(|(_, read)| read.clone()));
            // So does the metadata override file of an HF release → GGUF.
            inputs.extend(run.metadata_file.clone());
            let p = provenance_of(
                &inputs,
                source,
                job.repo_dir,
                by_arch,
                &job.plan,
                &committed,
                tensors,
            );
            self.report.provenance = Some(p);
        }
        let mut report = self.report;
        report.verified = run.verify;
        report.files = committed.files.into_iter().map(file_report).collect();
        report.removed = committed.removed;
        report.transforms = transforms_of(outs);
        report.io = job.io.counts();
        Ok(report)
    }
}

/// The architecture plan's part of the report: the architecture, the source tensors it drops
/// and the source name of each output tensor.
fn architecture_into(report: &mut ConvertReport, (architecture, dropped, from): ArchReport) {
    report.architecture = Some(architecture);
    report.dropped.extend(dropped);
    for (t, f) in report.plan.iter_mut().zip(from) {
        t.from = f;
    }
}

fn file_report(w: weightport_core::WrittenFile) -> FileReport {
    FileReport {
        path: w.path,
        size: w.size,
        tensors: w.tensors,
    }
}

/// A worker pool of `threads` threads.
/// Inputs and outputs of a committed conversion.
fn provenance_of(
    inputs: &[PathBuf],
    source: &dyn TensorSource,
    repo_dir: Option<&Path>,
    by_arch: bool,
    plan: &OutputPlan,
    committed: &txn::Committed,
    tensors: Vec<TensorProvenance>,
) -> Provenance {
    let mut materials = source.files();
    for e in &plan.extras {
        if let ExtraContent::CopyOf(p) = &e.content {
            materials.push(p.clone());
        }
    }
    // Inputs named on the command line (an `*.index.json`) and the importance matrix, a repo's
    // index, and for an HF release read by its architecture its configs and tokenizer files.
    materials.extend(inputs.iter().filter(|p| p.is_file()).cloned());
    if let Some(dir) = repo_dir {
        let all = companions(dir);
        let index = |p: &PathBuf| p.to_string_lossy().ends_with(".index.json");
        materials.extend(all.into_iter().filter(|p| by_arch || index(p)));
    }
    let mut outputs: Vec<PathBuf> = committed.files.iter().map(|w| w.path.clone()).collect();
    outputs.extend(committed.extras.iter().cloned());
    Provenance {
        root: plan.dir.clone(),
        materials,
        outputs,
        tensors,
    }
}

/// The regular, non-hidden files at the top of `dir`.
fn companions(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect()
}

fn transforms_of(outs: &[TensorRecipe]) -> Vec<TransformReport> {
    outs.iter()
        .filter_map(|o| {
            o.op.as_ref().map(|op| TransformReport {
                tensor: o.info.name.clone(),
                op: op.describe(),
                outcome: op.outcome(),
                quality: op.quality(),
            })
        })
        .collect()
}

fn report_of(
    source: &dyn TensorSource,
    output_format: &'static str,
    plan: &OutputPlan,
    outs: &[TensorRecipe],
    prepared: &Prepared,
    dry_run: bool,
) -> ConvertReport {
    let files: Vec<FileReport> = plan
        .files
        .iter()
        .map(|f| FileReport {
            path: f.path.clone(),
            size: f.size,
            tensors: f.tensors.len(),
        })
        .collect();
    ConvertReport {
        inputs: source.files(),
        input_format: source.format(),
        output_format,
        total_bytes: files.iter().map(|f| f.size).sum(),
        files,
        index: plan
            .extras
            .iter()
            .find(|e| e.is_index)
            .map(|e| e.path.clone()),
        copied: plan
            .extras
            .iter()
            .filter(|e| !e.is_index)
            .map(|e| e.path.clone())
            .collect(),
        removed: prepared.removals.clone(),
        cleaned: prepared.cleaned.clone(),
        recovered: prepared.recovered.clone(),
        transforms: transforms_of(outs),
        plan: outs
            .iter()
            .map(|o| TensorReport {
                name: o.info.name.clone(),
                from: None,
                dtype: o.info.dtype,
                shape: o.info.shape.clone(),
                bytes: o.info.byte_len,
                note: o.note.clone(),
            })
            .collect(),
        architecture: None,
        dropped: Vec::new(),
        notes: Vec::new(),
        tensors: outs.len(),
        data_bytes: outs.iter().map(|o| o.info.byte_len).sum(),
        elements: outs.iter().map(|o| o.info.numel()).sum(),
        needed_bytes: prepared.needed_bytes,
        free_bytes: prepared.free_bytes,
        verified: false,
        dry_run,
        threads: 0,
        memory_bytes: 0,
        provenance: None,
        read_bytes: 0,
        reads: Vec::new(),
        io: IoCounts::default(),
    }
}
