//! indicatif progress on stderr, hidden when stderr is not a terminal: one bar per phase of
//! the engine and, for remote inputs, one of the bytes fetched, drawn together.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use weightport_engine::Progress;

/// The bars drawn on stderr together.
fn bars() -> &'static MultiProgress {
    static M: OnceLock<MultiProgress> = OnceLock::new();
    M.get_or_init(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()))
}

fn style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{prefix:>8} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
}

/// A bar of the bytes of remote inputs fetched (of `total`, the weights files' listed sizes),
/// which weightport-remote reports as they arrive; drawn only when stderr is a terminal.
pub(crate) fn fetching(total: u64) {
    if !std::io::stderr().is_terminal() {
        return;
    }
    let pb = bars().add(ProgressBar::new(total));
    pb.set_style(style());
    pb.set_prefix("fetch");
    pb.enable_steady_tick(Duration::from_millis(200));
    let shown = pb.clone();
    weightport_remote::set_progress(Some(Arc::new(move |n| shown.inc(n))));
    // Finished (left drawn) when the process ends; cleared with the others.
    drop(pb);
}

/// Draws one bar per phase.
pub(crate) struct Bar {
    bar: Mutex<Option<ProgressBar>>,
    enabled: bool,
}

impl Bar {
    /// A bar that draws only when stderr is a terminal.
    pub(crate) fn new() -> Self {
        Bar {
            bar: Mutex::new(None),
            enabled: std::io::stderr().is_terminal(),
        }
    }
}

impl Progress for Bar {
    fn start(&self, phase: &str, total: u64) {
        if !self.enabled {
            return;
        }
        let pb = bars().add(ProgressBar::new(total));
        pb.set_style(style());
        pb.set_prefix(phase.to_string());
        pb.enable_steady_tick(Duration::from_millis(200));
        if let Ok(mut b) = self.bar.lock() {
            *b = Some(pb);
        }
    }

    fn advance(&self, bytes: u64) {
        if let Ok(b) = self.bar.lock() {
            if let Some(pb) = b.as_ref() {
                pb.inc(bytes);
            }
        }
    }

    fn finish(&self) {
        if let Ok(mut b) = self.bar.lock() {
            if let Some(pb) = b.take() {
                pb.finish_and_clear();
            }
        }
    }
}
