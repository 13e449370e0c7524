//! indicatif progress on stderr, hidden when stderr is not a terminal.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use weightport_engine::Progress;

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
        let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "{prefix:>8} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        pb.set_style(style);
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
