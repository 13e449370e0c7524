//! One executor pass for many outputs of one opened input: each input range is taken once and
//! fanned out to every output chunk that reads it.
//!
//! Every output's chunks are the executor's own ([`crate::exec`]: one hash leaf of the output
//! dtype each), so each output's bytes and hashes are those of a run of its own. What changes
//! is the order. A chunk's *span* is the smallest range holding all its input ranges in the
//! tensor of its first one (a permuted or row-quantized chunk reads several ranges). The
//! chunks whose span lies in a mapped tensor of the input are sorted by where it starts and cut
//! into *windows*: a window starts at the first chunk's span and takes every chunk starting
//! less than `window` bytes after it; it spans from its start to the furthest end of its
//! chunks' spans. Workers take chunks in that order
//! from one cursor, and none starts a chunk of window `w` before every window up to
//! `w - AHEAD` is done, so at most `AHEAD` windows are resident at once. A window is released
//! (its pages dropped from the process) when it and every window before it are done, up to
//! where the next window of the tensor starts: bytes two windows share stay resident for the
//! second. A window counts as read the bytes of its span not spanned by an earlier window of
//! the tensor, so [`Reads`] counts every mapped input byte once however many outputs read it.
//!
//! Each output has its own emitter: an identity chunk of a mapped local input is hashed from
//! the window and copied into that output by the kernel (`copy_file_range` from the input file,
//! [`crate::exec::ToSink`]) as a single-output run does, while the outputs that transform the
//! bytes read them from the same window; the window's residency and release do not change.
//!
//! Not shared: chunks whose first range lies in a tensor read with `read_into` (strided or
//! byte-swapped pickle views) or generated in memory, the ranges of a chunk in tensors other
//! than its first one's (stacked experts, fused QKV), and tensors only readable front to back (deflated ZIP
//! members): each output reads those itself, and [`Reads`] counts each read.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

use weightport_core::{hash, Error, Result, TensorSource};

use crate::by_options::TensorRecipe;
use crate::exec::{
    chunks, hashes_of, leaf_of, needs_of, sequential, Buffers, Ctx, Emit, Hashes, Leaf, Progress,
    Reads,
};

/// Windows resident at most at once.
pub(crate) const AHEAD: usize = 4;

/// One output of a shared run: the source it reads (the opened input, or the input followed by
/// tensors generated for it) and its planned tensors.
pub(crate) struct Output<'a> {
    /// The opened input, possibly with generated tensors after its own.
    pub source: &'a dyn TensorSource,
    /// Output tensors.
    pub outs: &'a [TensorRecipe],
}

/// Chunk `c` (`None`: every chunk, in order) of tensor `k` of output `p`, in window `window`.
#[derive(Clone, Copy)]
struct Task {
    p: usize,
    k: usize,
    c: Option<u64>,
    window: Option<usize>,
}

/// Part of input tensor `i` resident while its chunks run.
struct Window {
    i: usize,
    /// Bytes of the span no earlier window of the tensor spans.
    fresh: u64,
    /// Released when done.
    release: Range<u64>,
}

/// Runs every output's chunks over one read of the input (`input_tensors` tensors, the first
/// ones of every output's source), putting the chunks of output `p` through `emits[p]` (one
/// per output): an emitter that copies ([`crate::exec::ToSink`]) gets an identity chunk of a
/// mapped local input copied in the kernel from the input file, hashed from the shared window
/// as every other output's chunks are. Returns each output's hashes, or the error that stopped
/// it (the other outputs go on); only an interruption stops them all. Runs on the current
/// rayon pool.
pub(crate) fn run_one_read<E: Emit>(
    input_tensors: usize,
    outputs: &[Output],
    base: u64,
    reads: &Reads,
    progress: &dyn Progress,
    emits: &[E],
) -> Result<Vec<Result<Hashes>>> {
    if emits.len() != outputs.len() {
        return Err(Error::Internal(format!(
            "{} emitters for {} outputs",
            emits.len(),
            outputs.len()
        )));
    }
    let (tasks, windows) = schedule(input_tensors, outputs, base, base);
    let gate = Gate::new(&tasks, windows.len());
    let leaves: Vec<OnceLock<Vec<Leaf>>> = tasks.iter().map(|_| OnceLock::new()).collect();
    let failed: Vec<OnceLock<Error>> = outputs.iter().map(|_| OnceLock::new()).collect();
    let interrupted = AtomicBool::new(false);
    let cursor = AtomicUsize::new(0);
    let work = || {
        let mut buf = Buffers::default();
        loop {
            let idx = cursor.fetch_add(1, Ordering::Relaxed);
            let Some(t) = tasks.get(idx) else { break };
            if let Some(w) = t.window {
                gate.wait(w);
            }
            let skip = interrupted.load(Ordering::Relaxed) || failed[t.p].get().is_some();
            if !skip {
                let o = &outputs[t.p];
                let cx = Ctx {
                    source: o.source,
                    base,
                    progress,
                    reads,
                    windowed: t.window.map(|w| windows[w].i),
                };
                match chunks(&cx, o.outs, t.k, t.c, &mut buf, &emits[t.p]) {
                    Ok(l) => {
                        let _ = leaves[idx].set(l);
                    }
                    Err(Error::Interrupted) => interrupted.store(true, Ordering::Relaxed),
                    Err(e) => {
                        let _ = failed[t.p].set(e);
                    }
                }
            }
            if let Some(w) = t.window {
                gate.done(w, &windows, outputs[0].source, reads);
            }
        }
    };
    let threads = rayon::current_num_threads();
    rayon::scope(|s| {
        for _ in 0..threads {
            s.spawn(|_| work());
        }
    });
    if interrupted.load(Ordering::Relaxed) {
        return Err(Error::Interrupted);
    }
    Ok(collect(outputs, &tasks, leaves, failed))
}

/// Each output's hashes from its tasks' leaves, or the error that stopped it.
fn collect(
    outputs: &[Output],
    tasks: &[Task],
    leaves: Vec<OnceLock<Vec<Leaf>>>,
    failed: Vec<OnceLock<Error>>,
) -> Vec<Result<Hashes>> {
    // Per output, per tensor: (chunk, leaves) as done.
    type Done = Vec<(u64, Vec<Leaf>)>;
    let mut per: Vec<Vec<Done>> = outputs
        .iter()
        .map(|o| vec![Vec::new(); o.outs.len()])
        .collect();
    for (t, l) in tasks.iter().zip(leaves) {
        if let Some(l) = l.into_inner() {
            per[t.p][t.k].push((t.c.unwrap_or(0), l));
        }
    }
    outputs
        .iter()
        .zip(per)
        .zip(failed)
        .map(|((o, mut per), f)| {
            if let Some(e) = f.into_inner() {
                return Err(e);
            }
            let leaves: Vec<Vec<Leaf>> = per
                .iter_mut()
                .map(|v| {
                    v.sort_by_key(|x| x.0);
                    v.drain(..).flat_map(|x| x.1).collect()
                })
                .collect();
            Ok(hashes_of(o.source, o.outs, &leaves))
        })
        .collect()
}

/// The tasks in the order workers take them (whole sequential tensors first, then windowed
/// chunks by input position, then the rest), and the windows.
fn schedule(
    input_tensors: usize,
    outputs: &[Output],
    base: u64,
    window: u64,
) -> (Vec<Task>, Vec<Window>) {
    let (mut first, mut keyed, mut last) = (Vec::new(), Vec::new(), Vec::new());
    for (p, o) in outputs.iter().enumerate() {
        for (k, t) in o.outs.iter().enumerate() {
            if sequential(o.source, t) {
                first.push(Task {
                    p,
                    k,
                    c: None,
                    window: None,
                });
                continue;
            }
            let leaf = leaf_of(t, base);
            for c in 0..hash::leaf_count(t.info.byte_len, leaf) {
                let start = c * leaf;
                let n = (t.info.byte_len - start).min(leaf);
                let task = Task {
                    p,
                    k,
                    c: Some(c),
                    window: None,
                };
                match span_of(t, start, n) {
                    Some((i, r)) if shareable(o.source, input_tensors, i) => {
                        keyed.push((i, r, task))
                    }
                    _ => last.push(task),
                }
            }
        }
    }
    keyed.sort_by_key(|(i, r, t)| (*i, r.start, t.p, t.k, t.c));
    let windows = windows_of(&mut keyed, window);
    first.extend(keyed.into_iter().map(|x| x.2));
    first.extend(last);
    (first, windows)
}

/// The input tensor of a chunk's first range, and the span of its ranges in that tensor.
fn span_of(t: &TensorRecipe, start: u64, n: u64) -> Option<(usize, Range<u64>)> {
    let needs = needs_of(t, start, n);
    let i = t.inputs[needs.first()?.0];
    let mut ranges = needs
        .iter()
        .filter(|(j, _)| t.inputs[*j] == i)
        .map(|x| &x.1);
    let first = ranges.next()?.clone();
    Some((
        i,
        ranges.fold(first, |a, r| a.start.min(r.start)..a.end.max(r.end)),
    ))
}

/// A chunk's ranges in tensor `i` can be shared: a mapped tensor of the input.
fn shareable(source: &dyn TensorSource, input_tensors: usize, i: usize) -> bool {
    i < input_tensors && source.bytes(i).is_some()
}

/// Cuts `keyed` (sorted by tensor and start) into windows, setting each task's window.
fn windows_of(keyed: &mut [(usize, Range<u64>, Task)], window: u64) -> Vec<Window> {
    // (tensor, start, end) of each window.
    let mut spans: Vec<(usize, u64, u64)> = Vec::new();
    for (i, r, t) in keyed.iter_mut() {
        match spans.last_mut() {
            Some(s) if s.0 == *i && r.start < s.1.saturating_add(window) => s.2 = s.2.max(r.end),
            _ => spans.push((*i, r.start, r.end)),
        }
        t.window = Some(spans.len() - 1);
    }
    let mut windows = Vec::with_capacity(spans.len());
    let mut reach = 0u64; // furthest end spanned so far in this tensor
    for (w, &(i, start, end)) in spans.iter().enumerate() {
        if w == 0 || spans[w - 1].0 != i {
            reach = 0;
        }
        let fresh = end.saturating_sub(start.max(reach));
        reach = reach.max(end);
        let from = windows.last().map_or(start, |p: &Window| {
            if p.i == i {
                p.release.end.max(start)
            } else {
                start
            }
        });
        let to = match spans.get(w + 1) {
            Some(n) if n.0 == i => n.1.max(from),
            _ => reach,
        };
        windows.push(Window {
            i,
            fresh,
            release: from..to.max(from),
        });
    }
    windows
}

/// Which windows may be resident: a worker waits before a chunk of a window `AHEAD` windows
/// past the first not yet released.
struct Gate {
    state: Mutex<(Vec<usize>, usize)>,
    cv: Condvar,
}

impl Gate {
    fn new(tasks: &[Task], windows: usize) -> Gate {
        let mut left = vec![0usize; windows];
        for w in tasks.iter().filter_map(|t| t.window) {
            left[w] += 1;
        }
        Gate {
            state: Mutex::new((left, 0)),
            cv: Condvar::new(),
        }
    }

    fn wait(&self, w: usize) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while w >= st.1 + AHEAD {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A chunk of window `w` is done: releases (and counts) every window done in order.
    fn done(&self, w: usize, windows: &[Window], source: &dyn TensorSource, reads: &Reads) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.0[w] -= 1;
        while st.1 < windows.len() && st.0[st.1] == 0 {
            let win = &windows[st.1];
            reads.add(win.i, win.fresh);
            let r = &win.release;
            source.release(win.i, r.start, r.end - r.start);
            st.1 += 1;
        }
        self.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> Task {
        Task {
            p: 0,
            k: 0,
            c: None,
            window: None,
        }
    }

    #[test]
    fn windows_count_each_byte_once_and_release_everything() {
        // Chunks of three outputs over one 100-byte tensor, ranges overlapping.
        let ranges = [
            0..10,
            0..30,
            0..16,
            10..20,
            16..32,
            20..30,
            30..60,
            32..48,
            48..64,
        ];
        let mut keyed: Vec<_> = ranges.iter().map(|r| (3, r.clone(), task())).collect();
        keyed.sort_by_key(|(i, r, _)| (*i, r.start));
        let w = windows_of(&mut keyed, 16);
        assert_eq!(w.iter().map(|w| w.fresh).sum::<u64>(), 64);
        let mut at = 0;
        for win in &w {
            assert_eq!(win.release.start, at);
            at = win.release.end;
        }
        assert_eq!(at, 64);
        assert!(keyed.windows(2).all(|p| p[0].2.window <= p[1].2.window));
    }
}
