//! The open descriptors of staged output files: a small process-wide cache, the least recently
//! used closed first.
//!
//! A staged file ([`crate::staging::TempFile`]) holds no descriptor of its own: the one that
//! created it, or one reopened after it was closed here, lives in this cache, which keeps at
//! most [`capacity`] (an eighth of the soft limit on open files, at most 64). So a one-file
//! output is opened once however many writes it takes, and an output of 700 shards written
//! under `ulimit -n 256` holds at most 32 of them open, plus one per writer in the middle of a
//! write (an evicted descriptor is closed when the last write using it returns).

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

struct Slot {
    key: u64,
    file: Arc<File>,
    used: u64,
}

struct Cache {
    slots: Vec<Slot>,
    tick: u64,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    slots: Vec::new(),
    tick: 0,
});

static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// A key no other staged file has.
pub(crate) fn new_key() -> u64 {
    NEXT_KEY.fetch_add(1, Relaxed)
}

fn cache() -> MutexGuard<'static, Cache> {
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Descriptors kept open at most: an eighth of the soft `RLIMIT_NOFILE` (read once, after the
/// CLI raised it to the hard limit), between 1 and 64.
pub(crate) fn capacity() -> usize {
    static CAP: OnceLock<usize> = OnceLock::new();
    *CAP.get_or_init(|| {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit struct we own.
        let soft = match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } {
            0 => r.rlim_cur,
            _ => 256,
        };
        usize::try_from(soft / 8).unwrap_or(64).clamp(1, 64)
    })
}

impl Cache {
    /// The descriptor of `key`, marked used.
    fn get(&mut self, key: u64) -> Option<Arc<File>> {
        self.tick += 1;
        let tick = self.tick;
        let slot = self.slots.iter_mut().find(|s| s.key == key)?;
        slot.used = tick;
        Some(slot.file.clone())
    }

    /// Keeps `file` as `key`'s descriptor, at most `cap` in all; returns the descriptor kept
    /// (an earlier one for `key` wins) and the one evicted to make room.
    fn put(&mut self, key: u64, file: File, cap: usize) -> (Arc<File>, Option<Slot>) {
        if let Some(kept) = self.get(key) {
            return (kept, None);
        }
        let mut evicted = None;
        if self.slots.len() >= cap {
            let oldest = (0..self.slots.len()).min_by_key(|&i| self.slots[i].used);
            evicted = oldest.map(|i| self.slots.swap_remove(i));
        }
        let file = Arc::new(file);
        self.slots.push(Slot {
            key,
            file: file.clone(),
            used: self.tick,
        });
        (file, evicted)
    }
}

/// The cached descriptor of `key`, marked used.
pub(crate) fn get(key: u64) -> Option<Arc<File>> {
    cache().get(key)
}

/// Caches `file` as `key`'s descriptor (closing the least recently used one when full) and
/// returns the descriptor cached for `key`: an earlier one if another thread put one first.
pub(crate) fn put(key: u64, file: File) -> Arc<File> {
    let (kept, evicted) = cache().put(key, file, capacity());
    // Closed outside the lock (if no write holds it still).
    drop(evicted);
    kept
}

/// Closes `key`'s descriptor (once no write holds it).
pub(crate) fn forget(key: u64) {
    let mut c = cache();
    let gone = c
        .slots
        .iter()
        .position(|s| s.key == key)
        .map(|i| c.slots.swap_remove(i));
    drop(c);
    drop(gone);
}

/// Closes every cached descriptor: the process ran out of them (`EMFILE`).
pub(crate) fn close_all() {
    let all = std::mem::take(&mut cache().slots);
    drop(all);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_descriptor_is_closed_first() {
        let d = tempfile::tempdir().unwrap();
        let open = |i: u64| File::create(d.path().join(format!("f{i}"))).unwrap();
        let mut c = Cache {
            slots: Vec::new(),
            tick: 0,
        };
        for k in 1..=3 {
            assert!(c.put(k, open(k), 3).1.is_none());
        }
        assert!(c.get(1).is_some(), "1 used again: 2 is now the oldest");
        let (_, evicted) = c.put(4, open(4), 3);
        assert_eq!(evicted.map(|s| s.key), Some(2));
        assert!(c.get(2).is_none() && c.get(1).is_some());
        // A second descriptor for a cached key is dropped; the first stays.
        let first = c.get(4).unwrap();
        let (kept, evicted) = c.put(4, open(4), 3);
        assert!(Arc::ptr_eq(&first, &kept) && evicted.is_none());
        assert_eq!(c.slots.len(), 3);
        assert!((1..=64).contains(&capacity()));
    }
}
