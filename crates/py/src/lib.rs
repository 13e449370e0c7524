//! `weightport._native`: the command line and the `--json` documents of the `weightport`
//! library (crates/cli), for the Python package around it (python/weightport).
//!
//! A job runs on a thread of its own while the calling thread waits without the GIL, waking
//! every [`POLL`] to hand progress to the caller's callback (on the calling thread, so a tqdm
//! bar needs no locking) and to let Python run its signal handlers: a KeyboardInterrupt, or an
//! exception raised by the callback, cancels the job through the pipeline's cooperative
//! cancellation (temp files removed, nothing published) and is raised once it has stopped.

use std::ffi::OsString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use weightport_engine::Progress;

/// How often the waiting thread wakes.
const POLL: Duration = Duration::from_millis(100);

/// Runs the command line `argv` (program name first) as the `weightport` command does, in
/// this process (stdout, stderr, signal handlers and all), and returns its exit code.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<OsString>) -> u8 {
    py.detach(|| weightport::main(argv))
}

/// Runs `argv` as `--json` would and returns `(exit_code, document)`; `progress(phase, done,
/// total)` is called on this thread about every 0.1 s while a phase runs and once as it ends.
#[pyfunction]
#[pyo3(signature = (argv, progress=None))]
fn run_json(
    py: Python<'_>,
    argv: Vec<OsString>,
    progress: Option<Py<PyAny>>,
) -> PyResult<(i32, String)> {
    let sink = Arc::new(Sink::default());
    let (tx, mut rx) = mpsc::channel();
    let job_sink = sink.clone();
    std::thread::Builder::new()
        .name("weightport".into())
        .spawn(move || {
            let _ = tx.send(weightport::run_json(argv, job_sink.as_ref()));
        })
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("cannot start a thread: {e}")))?;
    let mut raised: Option<PyErr> = None;
    let mut reported = Reported::default();
    loop {
        // The receiver is Send, not Sync: it goes into the GIL-free wait and comes back.
        let (done, back) = py.detach(move || (rx.recv_timeout(POLL), rx));
        rx = back;
        if raised.is_none() {
            let step = match &progress {
                Some(cb) => reported.deliver(py, cb, &sink),
                None => Ok(()),
            };
            if let Err(e) = step.and_then(|()| py.check_signals()) {
                weightport_engine::cancel::request();
                raised = Some(e);
            }
        }
        match done {
            Ok(result) => {
                return match raised {
                    Some(e) => {
                        weightport_engine::cancel::clear();
                        Err(e)
                    }
                    None => Ok(result),
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "weightport: the job's thread ended without a result",
                ))
            }
        }
    }
}

/// One phase's progress as the job last left it.
#[derive(Clone, Debug, Default, PartialEq)]
struct PhaseState {
    phase: String,
    done: u64,
    total: u64,
}

/// What the job's threads report: the phase running and the phases ended since the last poll.
#[derive(Default)]
struct Sink {
    current: Mutex<Option<PhaseState>>,
    ended: Mutex<Vec<PhaseState>>,
    done: AtomicU64,
}

impl Progress for Sink {
    fn start(&self, phase: &str, total: u64) {
        self.done.store(0, Ordering::Relaxed);
        if let Ok(mut c) = self.current.lock() {
            *c = Some(PhaseState {
                phase: phase.to_string(),
                done: 0,
                total,
            });
        }
    }

    fn advance(&self, bytes: u64) {
        self.done.fetch_add(bytes, Ordering::Relaxed);
    }

    fn finish(&self) {
        let Ok(mut c) = self.current.lock() else {
            return;
        };
        if let Some(mut s) = c.take() {
            s.done = self.done.load(Ordering::Relaxed);
            if let Ok(mut e) = self.ended.lock() {
                e.push(s);
            }
        }
    }
}

/// What the callback was last told, so an unchanged state is not sent twice.
#[derive(Default)]
struct Reported {
    last: Option<PhaseState>,
}

impl Reported {
    fn deliver(&mut self, py: Python<'_>, cb: &Py<PyAny>, sink: &Sink) -> PyResult<()> {
        let ended = sink
            .ended
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default();
        let current = sink
            .current
            .lock()
            .ok()
            .and_then(|c| c.clone())
            .map(|mut s| {
                s.done = sink.done.load(Ordering::Relaxed).min(s.total);
                s
            });
        for s in ended.into_iter().chain(current) {
            if self.last.as_ref() != Some(&s) {
                cb.call1(py, (s.phase.as_str(), s.done, s.total))?;
                self.last = Some(s);
            }
        }
        Ok(())
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(run_json, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
