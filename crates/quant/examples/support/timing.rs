//! Timing shared by the quant examples.

use std::time::Instant;

/// CPU time of this thread in seconds (Linux /proc/thread-self/schedstat), so that other
/// processes on a loaded machine do not distort the figure; wall time elsewhere.
pub(crate) fn cpu_secs() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(s.split_whitespace().next()?.parse::<f64>().ok()? / 1e9)
}

/// Seconds `f` took: this thread's CPU time where the kernel reports it, else wall time.
pub(crate) fn timed(f: impl FnOnce()) -> f64 {
    let (t, c) = (Instant::now(), cpu_secs());
    f();
    match (c, cpu_secs()) {
        (Some(a), Some(b)) => b - a,
        _ => t.elapsed().as_secs_f64(),
    }
}
