//! The worker policy: how many threads the engine runs on and how much memory their buffers
//! may hold. One validated [`Workers`] is built by the caller (the CLI builds it once from
//! `--threads`/`--max-memory` or a job file's `threads`/`max_memory`, and words a refusal with
//! its own flag names); every part of the engine that starts workers (a conversion, a fan-out
//! of many outputs, a unit, `finish`, hashing files) sizes them here.

use weightport_core::{Error, Result};

/// Largest `threads` accepted.
pub const MAX_THREADS: usize = 256;

/// The default memory budget (`--max-memory`): 1 GiB, or a quarter of physical memory if that
/// is less.
pub fn default_max_memory() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let phys = (pages.max(0) as u64).saturating_mul(size.max(0) as u64);
    (1u64 << 30).min(if phys > 0 { phys / 4 } else { u64::MAX })
}

/// A thread count outside `1..=`[`MAX_THREADS`]: the count asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadsOutOfRange(pub usize);

/// Worker threads and their memory budget, validated: a thread count, when given, is within
/// `1..=`[`MAX_THREADS`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Workers {
    threads: Option<usize>,
    max_memory: Option<u64>,
}

impl Workers {
    /// `threads` workers (`None`: one per core) within `max_memory` bytes (`None`:
    /// [`default_max_memory`]); refuses a thread count outside `1..=`[`MAX_THREADS`].
    pub fn new(
        threads: Option<usize>,
        max_memory: Option<u64>,
    ) -> std::result::Result<Workers, ThreadsOutOfRange> {
        match threads {
            Some(n) if n == 0 || n > MAX_THREADS => Err(ThreadsOutOfRange(n)),
            _ => Ok(Workers {
                threads,
                max_memory,
            }),
        }
    }

    /// The thread count asked for, if any.
    pub fn threads(&self) -> Option<usize> {
        self.threads
    }

    /// The memory budget asked for, if any.
    pub fn max_memory(&self) -> Option<u64> {
        self.max_memory
    }

    /// The threads asked for, or one per core (at most [`MAX_THREADS`]).
    pub(crate) fn wanted(&self) -> usize {
        self.threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(MAX_THREADS)
        })
    }

    /// The memory budget in bytes.
    pub(crate) fn budget(&self) -> u64 {
        self.max_memory.unwrap_or_else(default_max_memory)
    }

    /// The policy of a run serving several outputs: the first one's threads within the
    /// smallest budget given.
    pub(crate) fn tightest(all: impl IntoIterator<Item = Workers>) -> Workers {
        let mut all = all.into_iter();
        let Some(first) = all.next() else {
            return Workers::default();
        };
        let budget = all.fold(first.budget(), |b, w| b.min(w.budget()));
        Workers {
            threads: first.threads,
            max_memory: Some(budget),
        }
    }

    /// Threads as wanted, reduced so that `threads × worker` bytes and the shared read's
    /// `windows` fit the budget, and the memory they hold; refused when not even one worker
    /// fits (`what`: "this job", "this unit", "these outputs").
    pub(crate) fn fit(
        &self,
        worker: u64,
        windows: Option<u64>,
        what: &str,
    ) -> Result<(usize, u64)> {
        let budget = self.budget();
        let worker = worker.max(1);
        let resident = windows.unwrap_or(0);
        if worker + resident > budget {
            let need = match windows {
                None => format!("one worker needs {worker} bytes"),
                Some(r) => format!(
                    "one worker and the shared read's windows need {} bytes",
                    worker + r
                ),
            };
            return Err(Error::Usage(format!(
                "{} {budget}: {need} for {what}",
                weightport_core::Knob::MaxMemory
            )));
        }
        let threads = self
            .wanted()
            .min(((budget - resident) / worker) as usize)
            .max(1);
        Ok((threads, threads as u64 * worker + resident))
    }
}

/// A pool of `threads` worker threads.
pub(crate) fn pool_of(threads: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::Internal(format!("cannot start {threads} worker threads: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_outside_the_range_are_refused() {
        assert_eq!(Workers::new(Some(0), None), Err(ThreadsOutOfRange(0)));
        assert_eq!(
            Workers::new(Some(MAX_THREADS + 1), None),
            Err(ThreadsOutOfRange(MAX_THREADS + 1))
        );
        assert!(Workers::new(Some(MAX_THREADS), None).is_ok());
    }

    #[test]
    fn threads_shrink_to_the_budget() {
        let w = Workers::new(Some(8), Some(1000)).unwrap();
        assert_eq!(w.fit(300, None, "this job").unwrap(), (3, 900));
        assert_eq!(w.fit(300, Some(100), "these outputs").unwrap(), (3, 1000));
        let e = w.fit(2000, None, "this unit").unwrap_err().to_string();
        assert!(
            e.contains("`max_memory` 1000: one worker needs 2000 bytes for this unit"),
            "{e}"
        );
        let e = w
            .fit(600, Some(500), "these outputs")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("shared read's windows need 1100 bytes for these outputs"),
            "{e}"
        );
    }

    #[test]
    fn many_outputs_take_the_first_threads_and_the_smallest_budget() {
        let a = Workers::new(Some(3), Some(500)).unwrap();
        let b = Workers::new(Some(7), Some(200)).unwrap();
        let t = Workers::tightest([a, b]);
        assert_eq!((t.threads(), t.budget()), (Some(3), 200));
    }
}
