//! Cooperative cancellation and fatal-signal cleanup.
//!
//! SIGINT, SIGTERM and SIGHUP (what Ctrl-C, `kill`, `timeout`, `docker stop` and CI
//! cancellation send) set a flag through signal-hook; the executor checks it between chunks and
//! fails with [`weightport_core::Error::Interrupted`], so every temp file is removed by the
//! normal failure path. A second SIGINT/SIGTERM exits at once (130). SIGBUS, which a memory map
//! raises when another process truncates an input while it is read, cannot be recovered from:
//! its handler removes the live temp files ([`weightport_core::staging::emergency_unlink_all`]),
//! says so, and exits 1. SIGXFSZ (file-size limit) is ignored so the write fails with EFBIG and
//! the normal error path runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

static CANCELLED: AtomicBool = AtomicBool::new(false);
static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();

fn flag() -> &'static Arc<AtomicBool> {
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Asks running jobs to stop (async-signal-safe: one atomic store).
pub fn request() {
    CANCELLED.store(true, Ordering::SeqCst);
}

/// Forgets a [`request`] once the jobs it stopped have returned (a caller in a long-lived
/// process, such as the Python module, whose next job must run). A termination signal caught by
/// [`install`]'s handlers is not forgotten.
pub fn clear() {
    CANCELLED.store(false, Ordering::SeqCst);
}

/// True once [`request`] was called or a termination signal arrived.
pub fn requested() -> bool {
    CANCELLED.load(Ordering::Relaxed) || flag().load(Ordering::Relaxed)
}

const BUS_MSG: &[u8] = b"weightport: input changed while reading (a file was truncated or rewritten by another process); temp files removed, nothing was written\n";
const BUS_JSON: &[u8] = b"{\"ok\":false,\"error\":{\"kind\":\"io\",\"message\":\"input changed while reading (a file was truncated or rewritten by another process)\",\"exit_code\":1}}\n";

/// Installs the handlers described in the module docs. `json`: the fatal-signal message is also
/// printed as a JSON document on stdout.
pub fn install(json: bool) -> std::io::Result<()> {
    use signal_hook::consts::{SIGBUS, SIGHUP, SIGINT, SIGTERM, SIGXFSZ};
    let f = flag().clone();
    for sig in [SIGINT, SIGTERM, SIGHUP] {
        // Exit at once on the second signal, cooperatively on the first.
        signal_hook::flag::register_conditional_shutdown(sig, 130, f.clone())?;
        signal_hook::flag::register(sig, f.clone())?;
    }
    // SAFETY: the handler only calls async-signal-safe functions (atomic loads, unlink, write,
    // _exit) and touches no locks or allocations.
    unsafe {
        signal_hook::low_level::register(SIGBUS, move || {
            weightport_core::staging::emergency_unlink_all();
            libc::write(2, BUS_MSG.as_ptr().cast(), BUS_MSG.len());
            if json {
                libc::write(1, BUS_JSON.as_ptr().cast(), BUS_JSON.len());
            }
            libc::_exit(1);
        })?;
        libc::signal(SIGXFSZ, libc::SIG_IGN);
    }
    Ok(())
}
