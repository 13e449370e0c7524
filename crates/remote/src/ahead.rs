//! Read-ahead: a weights object is fetched in windows ahead of the reads, in file order, so
//! download and conversion overlap.
//!
//! Once an object's reader asks for bytes past its first answer, the object *streams*: windows
//! of [`Budget::window`] bytes from there on are queued, as far as the process-wide budget of
//! bytes in flight allows (windows being fetched and windows fetched but not yet read, over
//! all objects). [`CONNECTIONS`] fetcher threads take the queue in order, each window one
//! ranged request (retried and resumed as every read is). A read waits for the windows that
//! hold its bytes; a window is dropped once all its bytes were read, or, when the budget is
//! full, once reads passed it. A read the stream does not hold (the reader jumped) is fetched
//! directly and moves the stream there. Reads therefore never wait for budget, and the budget
//! is never exceeded: the counter is raised before a window is queued.
//!
//! While the windows come in file order, they are hashed in order; the window that ends the
//! object is held back from readers until the digest is compared with the listing's LFS
//! sha256, so a mismatch fails that read, and the conversion, before anything is committed.
//! A stream that jumps past bytes it never fetched gives the check up for that object.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use sha2::{Digest, Sha256};

use crate::fetch::Failure;

/// Fetcher threads (connections) of the process.
pub(crate) const CONNECTIONS: usize = 4;
/// The largest window.
const MAX_WINDOW: u64 = 8 << 20;
/// The smallest window.
const MIN_WINDOW: u64 = 64 << 10;

/// What fetches a range of one object (retried, resumed); the object's connection details.
pub(crate) trait Fetch: Send + Sync {
    fn fetch_range(&self, offset: u64, buf: &mut [u8]) -> Result<(), Failure>;
}

/// The process-wide read-ahead budget and what it is spent on.
#[derive(Debug, Default)]
struct Pool {
    /// Bytes of windows queued, being fetched or fetched and unread.
    in_flight: u64,
    /// The most `in_flight` ever was.
    peak: u64,
    /// Bytes `in_flight` may reach; 0: no read-ahead.
    budget: u64,
    queue: VecDeque<Job>,
    threads: usize,
}

/// One window to fetch.
struct Job {
    stream: Arc<Stream>,
    start: u64,
    end: u64,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Job({}..{})", self.start, self.end)
    }
}

fn pool() -> &'static (Mutex<Pool>, Condvar) {
    static P: OnceLock<(Mutex<Pool>, Condvar)> = OnceLock::new();
    P.get_or_init(Default::default)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets the bytes read-ahead may hold at once over all objects (0: none).
pub(crate) fn set_budget(bytes: u64) {
    lock(&pool().0).budget = bytes;
}

/// The budget and the most bytes ever in flight.
pub(crate) fn stats() -> (u64, u64) {
    let p = lock(&pool().0);
    (p.budget, p.peak)
}

/// The window size for a budget: an eighth of it, within 64 KiB and 8 MiB.
fn window_for(budget: u64) -> u64 {
    (budget / 8).clamp(MIN_WINDOW, MAX_WINDOW) & !4095
}

/// Raises `in_flight` by `n` if the budget allows it.
fn reserve(n: u64) -> bool {
    let mut p = lock(&pool().0);
    if p.in_flight + n > p.budget {
        return false;
    }
    p.in_flight += n;
    p.peak = p.peak.max(p.in_flight);
    true
}

fn give_back(n: u64) {
    let mut p = lock(&pool().0);
    p.in_flight = p.in_flight.saturating_sub(n);
}

fn enqueue(job: Job) {
    let (m, cv) = pool();
    let mut p = lock(m);
    p.queue.push_back(job);
    if p.threads < CONNECTIONS {
        let spawned = std::thread::Builder::new()
            .name("weightport-fetch".into())
            .spawn(fetcher);
        if spawned.is_ok() {
            p.threads += 1;
        }
    }
    cv.notify_one();
}

/// A fetcher thread: takes windows off the queue for the life of the process.
fn fetcher() {
    let (m, cv) = pool();
    loop {
        let job = {
            let mut p = lock(m);
            loop {
                if let Some(j) = p.queue.pop_front() {
                    break j;
                }
                p = cv.wait(p).unwrap_or_else(|e| e.into_inner());
            }
        };
        job.stream.run(job.start, job.end);
    }
}

/// A window's bytes, once fetched.
#[derive(Clone)]
enum Slot {
    Pending,
    /// Fetched, but held until the object's digest is compared (the object's last window).
    Held(Arc<Vec<u8>>),
    Ready(Arc<Vec<u8>>),
    Failed(Failure),
}

struct Window {
    end: u64,
    slot: Slot,
    /// Bytes of it read so far.
    used: u64,
}

/// The in-order digest of an object's bytes.
struct Hashing {
    sha: Sha256,
    /// Bytes hashed: `[0, to)`.
    to: u64,
}

struct State {
    windows: BTreeMap<u64, Window>,
    /// The start of the next window to queue.
    cursor: u64,
    /// `None` once given up (or with no digest to compare).
    hashing: Option<Hashing>,
    /// The object was dropped: fetched windows are given back at once.
    closed: bool,
}

/// One object's read-ahead.
pub(crate) struct Stream {
    source: Arc<dyn Fetch>,
    /// The object as messages name it.
    shown: String,
    len: u64,
    /// The first answer's length: the stream starts past it.
    head: u64,
    window: u64,
    /// The LFS sha256 the listing gave, as lowercase hex.
    want: Option<String>,
    state: Mutex<State>,
    arrived: Condvar,
    /// The digest taken in order (one thread at a time).
    digest: Mutex<()>,
}

/// A piece of a read: served by the window at `start`, or fetched directly.
enum Piece {
    Window(u64, Arc<Vec<u8>>),
    Direct(u64),
}

impl Stream {
    /// A stream over `source` of `len` bytes whose first `head` bytes are already held;
    /// `None` when read-ahead is off. `head_bytes` are hashed first.
    pub(crate) fn new(
        source: Arc<dyn Fetch>,
        shown: &str,
        len: u64,
        head_bytes: &[u8],
        want: Option<String>,
    ) -> Option<Arc<Stream>> {
        let budget = lock(&pool().0).budget;
        if budget == 0 || head_bytes.len() as u64 >= len {
            return None;
        }
        let window = window_for(budget);
        let head = head_bytes.len() as u64;
        let hashing = want.as_ref().map(|_| {
            let mut sha = Sha256::new();
            sha.update(head_bytes);
            Hashing { sha, to: head }
        });
        Some(Arc::new(Stream {
            source,
            shown: shown.to_string(),
            len,
            head,
            window,
            want: want.map(|w| w.to_ascii_lowercase()),
            state: Mutex::new(State {
                windows: BTreeMap::new(),
                cursor: head,
                hashing,
                closed: false,
            }),
            arrived: Condvar::new(),
            digest: Mutex::new(()),
        }))
    }

    /// The window holding byte `at`: its start and end.
    fn bounds(&self, at: u64) -> (u64, u64) {
        let k = at / self.window;
        let start = (k * self.window).max(self.head);
        (start, ((k + 1) * self.window).min(self.len))
    }

    /// Fills `buf` with the bytes at `offset` (past the head): from windows, waiting for them,
    /// or fetched directly where the stream holds none and will not.
    /// `direct` reads what the stream does not hold (the object's own small-read blocks).
    pub(crate) fn read(
        self: &Arc<Self>,
        offset: u64,
        buf: &mut [u8],
        direct: &dyn Fn(u64, &mut [u8]) -> weightport_core::Result<()>,
    ) -> weightport_core::Result<()> {
        let end = offset + buf.len() as u64;
        let mut at = offset;
        while at < end {
            let piece = self
                .piece(at, end - at)
                .map_err(|f| crate::fetch::error(std::path::Path::new(&self.shown), &f))?;
            let done = (at - offset) as usize;
            match piece {
                Piece::Window(start, data) => {
                    let from = (at - start) as usize;
                    let take = ((end - at) as usize).min(data.len() - from);
                    buf[done..done + take].copy_from_slice(&data[from..from + take]);
                    self.used(start, take as u64);
                    at += take as u64;
                }
                Piece::Direct(until) => {
                    let take = (until.min(end) - at) as usize;
                    direct(at, &mut buf[done..done + take])?;
                    at += take as u64;
                }
            }
        }
        Ok(())
    }

    /// The window holding `at` once fetched, or how far a direct fetch from `at` goes. A read
    /// behind the stream is fetched directly; one ahead of it waits for the stream to get
    /// there (other workers read what lies between) unless it is further ahead than
    /// `4 × (budget + n)` or the stream holds nothing: then the stream jumps to it.
    fn piece(self: &Arc<Self>, at: u64, n: u64) -> Result<Piece, Failure> {
        let horizon = 4 * (lock(&pool().0).budget + n);
        let mut s = lock(&self.state);
        loop {
            self.queue(&mut s, at);
            let found = s
                .windows
                .range(..=at)
                .next_back()
                .filter(|(_, w)| w.end > at)
                .map(|(&start, w)| (start, w.slot.clone()));
            match found {
                Some((start, Slot::Ready(d))) => return Ok(Piece::Window(start, d)),
                Some((_, Slot::Failed(f))) => return Err(f),
                Some(_) => {}
                None if at < s.cursor => return Ok(self.direct(&s, at)),
                None if at - s.cursor > horizon || s.windows.is_empty() => {
                    // A jump ahead: the bytes skipped are never hashed.
                    s.hashing = None;
                    self.release_held(&mut s, None);
                    s.cursor = self.bounds(at).0;
                    self.queue(&mut s, at);
                    if s.cursor <= at {
                        // No budget for it: fetched directly, and the stream goes on past it.
                        let d = self.direct(&s, at);
                        if let Piece::Direct(until) = d {
                            s.cursor = self.bounds(until.min(at + n).max(at + 1) - 1).1;
                        }
                        return Ok(d);
                    }
                    continue;
                }
                None if !s.windows.values().any(|w| matches!(w.slot, Slot::Pending))
                    && self.digest.try_lock().is_ok() =>
                {
                    // Nothing in flight to wait for, and no room: the digest gives way (its
                    // unhashed windows may go), so the stream moves on.
                    if s.hashing.take().is_some() {
                        self.release_held(&mut s, None);
                        continue;
                    }
                    if !self.drop_passed(&mut s, at) {
                        return Ok(self.direct(&s, at));
                    }
                    continue;
                }
                None => {}
            }
            let wait = std::time::Duration::from_millis(50);
            s = self
                .arrived
                .wait_timeout(s, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// A direct fetch from `at` up to the next window the stream holds.
    fn direct(&self, s: &State, at: u64) -> Piece {
        let next = s.windows.range(at..).next().map(|(&k, _)| k);
        Piece::Direct(next.unwrap_or(self.len))
    }

    /// Counts `n` bytes of the window at `start` read; drops it once all were.
    fn used(&self, start: u64, n: u64) {
        let mut s = lock(&self.state);
        let hashed_to = s.hashing.as_ref().map(|h| h.to);
        let Some(w) = s.windows.get_mut(&start) else {
            return;
        };
        w.used += n;
        let size = w.end - start;
        if w.used >= size && hashed_to.is_none_or(|to| to >= w.end) {
            s.windows.remove(&start);
            give_back(size);
            self.arrived.notify_all();
        }
    }

    /// Drops the window at `start` if all its bytes were read (it waited for the digest).
    fn drop_if_read(&self, s: &mut State, start: u64) {
        if s.windows
            .get(&start)
            .is_some_and(|w| w.used >= w.end - start)
        {
            if let Some(w) = s.windows.remove(&start) {
                give_back(w.end - start);
            }
        }
    }

    /// Queues the windows from the stream's cursor on that the budget allows (dropping, when
    /// it is full, windows the reads passed: wholly before `at`).
    fn queue(self: &Arc<Self>, s: &mut State, at: u64) {
        while s.cursor < self.len {
            let (start, end) = self.bounds(s.cursor);
            if s.windows.contains_key(&start) {
                s.cursor = end;
                continue;
            }
            let room = reserve(end - start) || self.drop_passed(s, at) && reserve(end - start);
            if !room {
                break;
            }
            s.windows.insert(
                start,
                Window {
                    end,
                    slot: Slot::Pending,
                    used: 0,
                },
            );
            s.cursor = end;
            enqueue(Job {
                stream: self.clone(),
                start,
                end,
            });
        }
    }

    /// Drops fetched windows wholly before `at` (and hashed): the reads passed them. Whether
    /// any was dropped.
    fn drop_passed(&self, s: &mut State, at: u64) -> bool {
        let hashed_to = s.hashing.as_ref().map(|h| h.to);
        let gone: Vec<u64> = s
            .windows
            .iter()
            .filter(|(_, w)| w.end <= at && matches!(w.slot, Slot::Ready(_) | Slot::Failed(_)))
            .filter(|(_, w)| hashed_to.is_none_or(|to| to >= w.end))
            .map(|(&k, _)| k)
            .collect();
        for k in &gone {
            if let Some(w) = s.windows.remove(k) {
                give_back(w.end - k);
            }
        }
        !gone.is_empty()
    }

    /// A fetcher's work: fetches `[start, end)`, files it, and carries the digest on.
    fn run(&self, start: u64, end: u64) {
        if lock(&self.state).closed {
            return self.file(start, end, Slot::Failed(Failure::Final("closed".into())));
        }
        let mut data = vec![0u8; (end - start) as usize];
        let slot = match self.source.fetch_range(start, &mut data) {
            Ok(()) if end == self.len && self.want.is_some() => Slot::Held(Arc::new(data)),
            Ok(()) => Slot::Ready(Arc::new(data)),
            Err(f) => Slot::Failed(f),
        };
        self.file(start, end, slot);
        self.carry_digest();
    }

    fn file(&self, start: u64, end: u64, slot: Slot) {
        let mut s = lock(&self.state);
        if s.closed {
            if s.windows.remove(&start).is_some() {
                give_back(end - start);
            }
            return;
        }
        if let Some(w) = s.windows.get_mut(&start) {
            w.slot = slot;
        }
        self.arrived.notify_all();
    }

    /// Hashes the fetched windows that continue the digest, in order; at the object's end,
    /// compares it and releases (or fails) the held window.
    fn carry_digest(&self) {
        let _one = lock(&self.digest);
        loop {
            let mut s = lock(&self.state);
            let Some(to) = s.hashing.as_ref().map(|h| h.to) else {
                return self.release_held(&mut s, None);
            };
            let next = s.windows.get(&to).map(|w| (w.end, w.slot.clone()));
            let (end, data) = match next {
                Some((end, Slot::Ready(d) | Slot::Held(d))) => (end, d),
                Some((_, Slot::Failed(_))) => {
                    s.hashing = None;
                    continue;
                }
                _ => return,
            };
            // Hashed outside the lock, on a copy: the digest stays visible as not past `to`.
            let mut h = s
                .hashing
                .as_ref()
                .map(|h| h.sha.clone())
                .unwrap_or_default();
            drop(s);
            h.update(&data[..]);
            let mut s = lock(&self.state);
            if s.hashing.is_none() {
                return self.release_held(&mut s, None);
            }
            if end < self.len {
                s.hashing = Some(Hashing { sha: h, to: end });
                self.drop_if_read(&mut s, to);
                continue;
            }
            s.hashing = None;
            let got = format!("{:x}", h.finalize());
            return self.release_held(&mut s, Some(got));
        }
    }

    /// The last window, held for the digest: ready when `got` is the listed sha256, failed
    /// otherwise (or when the digest was given up: ready, unchecked).
    fn release_held(&self, s: &mut State, got: Option<String>) {
        for w in s.windows.values_mut() {
            if let Slot::Held(d) = &w.slot {
                w.slot = match (&got, &self.want) {
                    (Some(g), Some(want)) if g != want => Slot::Failed(Failure::Final(format!(
                        "sha256 {g}, but the Hub lists {want}"
                    ))),
                    _ => Slot::Ready(d.clone()),
                };
            }
        }
        self.arrived.notify_all();
    }

    /// The object is dropped: its windows are given back.
    pub(crate) fn close(&self) {
        let mut s = lock(&self.state);
        s.closed = true;
        let keep: Vec<u64> = s
            .windows
            .iter()
            .filter(|(_, w)| matches!(w.slot, Slot::Pending))
            .map(|(&k, _)| k)
            .collect();
        let gone: Vec<(u64, u64)> = s
            .windows
            .iter()
            .filter(|(k, _)| !keep.contains(k))
            .map(|(&k, w)| (k, w.end))
            .collect();
        for (k, end) in gone {
            s.windows.remove(&k);
            give_back(end - k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_an_eighth_of_the_budget_within_bounds() {
        assert_eq!(window_for(1 << 20), 128 << 10);
        assert_eq!(window_for(1), MIN_WINDOW);
        assert_eq!(window_for(1 << 40), MAX_WINDOW);
    }
}
