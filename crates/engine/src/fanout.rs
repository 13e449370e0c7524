//! Many outputs of one opened input from one read: every output planned and prepared as
//! `convert` does, the chunks of all of them run in one executor pass that takes each input
//! range once ([`crate::one_read`]), each output's identity chunks of mapped inputs copied into
//! its own sink in the kernel, then each output verified and committed on its own (a failed
//! output does not undo the others).

use std::path::PathBuf;

use weightport_core::{Error, Result, TensorSink};

use crate::convert::{start, ConvertReport, Started};
use crate::exec::{worker_bytes, Progress, Reads, ToSink};
use crate::input::Input;
use crate::one_read::{run_one_read, Output, AHEAD};
use crate::route::{Route, Run};
use crate::workers::{pool_of, Workers};

/// What a [`convert_many`] run did.
#[non_exhaustive]
#[derive(Debug)]
pub struct ManyReport {
    /// Per output, in the order given: its report, or why it failed.
    pub outputs: Vec<Result<ConvertReport>>,
    /// Bytes of input tensor data taken from the input, for all outputs together.
    pub read_bytes: u64,
    /// The same per input file.
    pub reads: Vec<(PathBuf, u64)>,
    /// Worker threads used.
    pub threads: usize,
    /// Buffer, mapped-chunk and window memory the executor holds at most.
    pub memory_bytes: u64,
}

/// An output during the run: failed, or started with its sink once open.
enum Slot<'s> {
    Failed(Error),
    /// The sink first: fields drop in order, so a failed output's temp files are gone before its
    /// transaction's drop removes the directory it created (only an empty one is removed).
    Live(Option<Box<dyn TensorSink>>, Box<Started<'s>>),
}

/// Converts `input` (opened with the request of every route in `outputs`, which are equal)
/// into the output of every route in `outputs` (each the [`crate::route`] decided for its
/// options). Threads, memory budget and chunk size are the first output's (the budget the
/// smallest given). `Err` only when the run as a whole cannot go on:
/// an interruption, worker threads that cannot start, a budget too small for one worker.
pub fn convert_many(
    input: &Input,
    outputs: &[Route],
    progress: &dyn Progress,
) -> Result<ManyReport> {
    let runs: Vec<&Run> = outputs.iter().map(|r| &r.run).collect();
    let runs = runs.as_slice();
    let source = input.source.as_ref();
    let repo = input.repo_dir.as_deref();
    let mut slots: Vec<Slot> = outputs
        .iter()
        .map(|r| match start(source, repo, r) {
            Ok(s) => Slot::Live(None, Box::new(s)),
            Err(e) => Slot::Failed(e),
        })
        .collect();
    let (threads, memory) = match threads_for(&slots, runs) {
        Ok(x) => x,
        Err(e) => {
            abandon(slots);
            return Err(e);
        }
    };
    for slot in &mut slots {
        if let Slot::Live(_, s) = slot {
            s.report.threads = threads;
            s.report.memory_bytes = memory;
            s.report.notes = input.notes.clone();
        }
    }
    let mut report = ManyReport {
        outputs: Vec::new(),
        read_bytes: 0,
        reads: Vec::new(),
        threads,
        memory_bytes: memory,
    };
    if runs.first().is_none_or(|r| r.dry_run) {
        report.outputs = slots.into_iter().map(planned).collect();
        return Ok(report);
    }
    for slot in slots.iter_mut() {
        if let Slot::Live(sink, s) = slot {
            match s.open_sink() {
                Ok(k) => *sink = Some(k),
                Err(e) => *slot = Slot::Failed(e),
            }
        }
    }
    let reads = Reads::new(source.tensors().len());
    let executed = pool_of(threads).and_then(|pool| {
        Ok((
            pool.install(|| execute(&slots, runs, &reads, progress))?,
            pool,
        ))
    });
    let (hashes, pool) = match executed {
        Ok(x) => x,
        Err(e) => {
            abandon(slots);
            return Err(e);
        }
    };
    report.read_bytes = reads.total();
    report.reads = reads.by_file(source);
    let mut hashes = hashes.into_iter();
    for slot in slots {
        let r = match slot {
            Slot::Failed(e) => Err(e),
            Slot::Live(Some(sink), mut s) => {
                s.report.read_bytes = report.read_bytes;
                s.report.reads = report.reads.clone();
                match hashes.next().expect("one result per live output") {
                    Ok(h) => pool.install(|| s.finish(sink, &h, progress)),
                    // The sink's temp files go first, then `s` removes the directories it made.
                    Err(e) => {
                        drop(sink);
                        Err(e)
                    }
                }
            }
            Slot::Live(..) => Err(Error::Internal("an output without its sink".into())),
        };
        report.outputs.push(r);
    }
    Ok(report)
}

/// Drops the outputs of a run that cannot go on: every sink first (their temp files), then
/// the transactions, the last started first, so each removes the directories it made (an
/// output's parent another output also uses is empty only once that one is gone).
fn abandon(mut slots: Vec<Slot>) {
    for slot in &mut slots {
        if let Slot::Live(sink, _) = slot {
            sink.take();
        }
    }
    while let Some(slot) = slots.pop() {
        drop(slot);
    }
}

fn planned(slot: Slot) -> Result<ConvertReport> {
    match slot {
        Slot::Failed(e) => Err(e),
        Slot::Live(_, s) => Ok(s.report),
    }
}

/// One executor pass over the live outputs; their hashes (or errors) in order.
fn execute(
    slots: &[Slot],
    runs: &[&Run],
    reads: &Reads,
    progress: &dyn Progress,
) -> Result<Vec<Result<crate::exec::Hashes>>> {
    let live: Vec<(&Started, &dyn TensorSink)> = slots
        .iter()
        .filter_map(|s| match s {
            Slot::Live(Some(k), s) => Some((s.as_ref(), k.as_ref())),
            _ => None,
        })
        .collect();
    let outputs: Vec<Output> = live
        .iter()
        .map(|(s, _)| Output {
            source: s.job.source(),
            outs: &s.job.outs,
        })
        .collect();
    let Some((first, _)) = live.first() else {
        return Ok(Vec::new());
    };
    // Each output's own sink: identity chunks of mapped inputs are copied into it in the
    // kernel, as `convert` does for one output.
    let sinks: Vec<ToSink> = live.iter().map(|(_, k)| ToSink(*k)).collect();
    let total = live.iter().map(|(s, _)| s.report.data_bytes).sum();
    progress.start("write", total);
    let r = run_one_read(
        first.job.input_tensors,
        &outputs,
        runs[0].chunk,
        reads,
        progress,
        &sinks,
    );
    progress.finish();
    r
}

/// Threads for the run: as the first output asks (or one per core), reduced to fit the
/// smallest budget given with the resident windows; and the memory they hold.
fn threads_for(slots: &[Slot], runs: &[&Run]) -> Result<(usize, u64)> {
    let first = runs.first().map(|r| r.chunk);
    let chunk = first.unwrap_or(weightport_core::hash::HASH_CHUNK);
    let worker = slots
        .iter()
        .filter_map(|s| match s {
            Slot::Live(_, s) => Some(worker_bytes(s.job.source(), &s.job.outs, chunk)),
            Slot::Failed(_) => None,
        })
        .max()
        .unwrap_or(0)
        .max(1);
    // Windows resident, the last one's span past its start at most one chunk's input; never
    // more than the input's tensor data.
    let input: u64 = slots
        .iter()
        .find_map(|s| match s {
            Slot::Live(_, s) => Some(s.job.source().tensors().iter().map(|t| t.byte_len).sum()),
            Slot::Failed(_) => None,
        })
        .unwrap_or(0);
    let windows = (AHEAD as u64 * chunk + worker).min(input);
    Workers::tightest(runs.iter().map(|r| r.workers)).fit(worker, Some(windows), "these outputs")
}
