//! Cooperative cancellation: the CLI's SIGINT handler calls [`request`]; the executor checks
//! [`requested`] between chunks and stops with an error, so every temp file is removed by the
//! normal failure path instead of being left behind by a killed process.

use std::sync::atomic::{AtomicBool, Ordering};

static CANCELLED: AtomicBool = AtomicBool::new(false);

/// Asks running jobs to stop (async-signal-safe: one atomic store).
pub fn request() {
    CANCELLED.store(true, Ordering::SeqCst);
}

/// True once [`request`] was called.
pub fn requested() -> bool {
    CANCELLED.load(Ordering::Relaxed)
}
