//! Read-ahead: a weights object is fetched in windows ahead of the reads, so download and
//! conversion overlap.
//!
//! Once an object's reader asks for bytes past its first answer, the object *streams*: windows
//! are queued ahead of the reads, as far as the process-wide budget of bytes in flight allows
//! (windows being fetched and windows fetched but not yet read, over all objects).
//! [`CONNECTIONS`] fetcher threads take the queue in order, each window one ranged request
//! (retried and resumed as every read is). A read waits for the windows that hold its bytes; a
//! window is dropped once all its bytes were read, or, when the budget is full, once no reader
//! will read it. Reads never wait for budget (a read the windows cannot hold is fetched
//! directly, through the object's small-read blocks), and the budget is never exceeded: the
//! counter is raised before a window is queued.
//!
//! **In file order, digest first.** While the object's bytes are read in file order (reads
//! ahead of the one cursor, within `4 × (budget + n)`, wait for it: other workers read what
//! lies between), windows (an eighth of the budget, 64 KiB to 8 MiB) come in order and are hashed in order;
//! the window that ends the object is held back from readers until the digest is compared with
//! the listing's LFS sha256, so a mismatch fails that read, and the conversion, before
//! anything is committed.
//!
//! **By region, once the object is not read in order.** A read far ahead of the cursor (an
//! engine worker starting on its share of the work: HF → GGUF writes tensors in GGUF order,
//! two workers read two far-apart tensors) gives the digest up for that object, explicitly:
//! bytes skipped are never hashed, and no digest is reported as compared. From then on the
//! object keeps up to [`CURSORS`] cursors, one per region read: a read continues the cursor
//! whose latest read is at most a window behind it and whose queued bytes reach to within a
//! window of it; a read far from all of them starts a new cursor (in place of the least
//! recently continued). Each cursor queues windows up to its allowance past its latest read:
//! twice the first read (at least 64 KiB), doubled each time a read moves it on, up to its
//! share of the budget (the budget over the cursors read lately), so a small read far from
//! the others (a norm) fetches little past itself and two workers' regions both stay ahead.
//! Windows stay disjoint (a cursor skips windows another one holds) and need not be aligned.
//! When the budget is full, fetched windows no cursor read lately will read are dropped.

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
/// Cursors an object read in regions keeps at most: one per engine worker's region on a
/// small machine, and one for the small reads between them.
const CURSORS: usize = 4;

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

/// Notes `[at, at + n)` read, once the object is read by region (merged with its neighbours).
fn mark_read(s: &mut State, at: u64, n: u64) {
    if s.hashing.is_some() || n == 0 {
        return;
    }
    let (mut a, mut b) = (at, at + n);
    if let Some((&k, &e)) = s.read_done.range(..=a).next_back() {
        if e >= a {
            a = k;
            b = b.max(e);
        }
    }
    let over: Vec<u64> = s.read_done.range(a..=b).map(|(&k, _)| k).collect();
    for k in over {
        if let Some(e) = s.read_done.remove(&k) {
            b = b.max(e);
        }
    }
    s.read_done.insert(a, b);
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
    /// The object's read count when it was queued (the oldest idle window goes first).
    queued: u64,
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

/// One region's read-ahead (once the object is read in regions): where a run of reads is, and
/// the windows queued ahead of it.
#[derive(Debug, Clone)]
struct Cursor {
    /// Where the latest read it served started.
    read: u64,
    /// The start of the next window it queues.
    next: u64,
    /// Bytes it may hold queued past `read`: doubled each time a read moves it on, up to its
    /// share of the budget.
    allowance: u64,
    /// The object's read count when a read last continued it.
    touched: u64,
    /// The thread whose latest read of the object it served, if that thread has not moved
    /// to another cursor since (a cursor no thread owns is idle: it does not count in the
    /// budget's shares, and its windows may go when the budget is full).
    owner: Option<std::thread::ThreadId>,
}

struct State {
    /// The windows, disjoint, by start.
    windows: BTreeMap<u64, Window>,
    /// While the digest is taken: the start of the next window to queue (one cursor, in
    /// file order).
    cursor: u64,
    /// While the digest is taken: where the latest read started, and its thread.
    last_read: (u64, Option<std::thread::ThreadId>),
    /// Once the digest is done or given up: one cursor per region read.
    cursors: Vec<Cursor>,
    /// Reads asked of the object so far.
    reads: u64,
    /// The byte ranges read so far (`start → end`, merged), once read by region: a cursor
    /// stops where its run meets bytes read already (another run read them; the bytes
    /// there are not read again).
    read_done: BTreeMap<u64, u64>,
    /// `None` once given up, done (or with no digest to compare): the object is then read
    /// in regions.
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

/// A piece of a read: served by the window at `start`, or fetched directly up to `until`
/// (`exact`: just those bytes, not the object's small-read blocks around them).
enum Piece {
    Window(u64, Arc<Vec<u8>>),
    Direct { until: u64, exact: bool },
}

/// What reads bytes the stream does not hold: `(offset, buf, exact)`, through the object's
/// small-read blocks or (`exact`) just the bytes asked.
pub(crate) type Direct<'a> = dyn Fn(u64, &mut [u8], bool) -> weightport_core::Result<()> + 'a;

/// What one look at the windows decided for a read.
enum Step {
    Done(Result<Piece, Failure>),
    /// Look again at once (the state changed).
    Again,
    /// Wait for a window to arrive (or room to be given back).
    Wait,
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
                last_read: (head, None),
                cursors: Vec::new(),
                reads: 0,
                read_done: BTreeMap::new(),
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
    /// `direct` reads what the stream does not hold: through the object's own small-read
    /// blocks, or (its last argument) exactly the bytes asked.
    pub(crate) fn read(
        self: &Arc<Self>,
        offset: u64,
        buf: &mut [u8],
        direct: &Direct<'_>,
    ) -> weightport_core::Result<()> {
        let end = offset + buf.len() as u64;
        lock(&self.state).reads += 1;
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
                    self.used(start, at, take as u64);
                    at += take as u64;
                }
                Piece::Direct { until, exact } => {
                    let take = (until.min(end) - at) as usize;
                    direct(at, &mut buf[done..done + take], exact)?;
                    mark_read(&mut lock(&self.state), at, take as u64);
                    at += take as u64;
                }
            }
        }
        Ok(())
    }

    /// The window holding `at` once fetched, or how far a direct fetch from `at` goes: in file
    /// order while the digest is taken ([`Stream::in_order`]), else by region
    /// ([`Stream::by_region`]).
    fn piece(self: &Arc<Self>, at: u64, n: u64) -> Result<Piece, Failure> {
        let mut s = lock(&self.state);
        loop {
            let step = if s.hashing.is_some() {
                self.in_order(&mut s, at, n)
            } else {
                self.by_region(&mut s, at, n)
            };
            match step {
                Step::Done(p) => return p,
                Step::Again => continue,
                Step::Wait => {}
            }
            let wait = std::time::Duration::from_millis(50);
            s = self
                .arrived
                .wait_timeout(s, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The window holding `at`, with its slot.
    fn window_at(s: &State, at: u64) -> Option<(u64, Slot)> {
        s.windows
            .range(..=at)
            .next_back()
            .filter(|(_, w)| w.end > at)
            .map(|(&start, w)| (start, w.slot.clone()))
    }

    /// Whether a fetched window is in flight that may free room or bring bytes.
    fn pending(s: &State) -> bool {
        s.windows.values().any(|w| matches!(w.slot, Slot::Pending))
    }

    /// One step of a read while the digest is taken: one cursor in file order. A read behind
    /// it is fetched directly; one ahead of it waits for the cursor to get there (other
    /// workers read what lies between) unless it is further ahead than `4 × (budget + n)` or
    /// the stream holds nothing: then the digest is given up and the object is read in
    /// regions from there.
    fn in_order(self: &Arc<Self>, s: &mut State, at: u64, n: u64) -> Step {
        let horizon = 4 * (lock(&pool().0).budget + n);
        if at > s.cursor && at - s.cursor > horizon {
            // A jump ahead (before queueing, which would drop the windows it passes): the
            // bytes skipped are never hashed.
            self.give_up_digest(s);
            return Step::Again;
        }
        if at <= s.cursor {
            s.last_read = (at, Some(std::thread::current().id()));
        }
        self.queue_in_order(s, at);
        match Self::window_at(s, at) {
            Some((start, Slot::Ready(d))) => Step::Done(Ok(Piece::Window(start, d))),
            Some((_, Slot::Failed(f))) => Step::Done(Err(f)),
            Some((_, Slot::Held(_))) if !s.windows.contains_key(&self.hashed_to(s)) => {
                // The last window waits for a digest nothing will carry on.
                self.give_up_digest(s);
                Step::Again
            }
            Some(_) => Step::Wait,
            None if at < s.cursor => Step::Done(Ok(self.direct(s, at))),
            None if s.windows.is_empty() => {
                // Nothing held (no budget for it): the bytes skipped are never hashed.
                self.give_up_digest(s);
                Step::Again
            }
            None if !Self::pending(s) && self.digest.try_lock().is_ok() => {
                // Nothing in flight to wait for, and no room: the digest gives way (its
                // unhashed windows may go), so the object is read in regions.
                self.give_up_digest(s);
                Step::Again
            }
            None => Step::Wait,
        }
    }

    /// Where the digest got to (the object's end once none is taken).
    fn hashed_to(&self, s: &State) -> u64 {
        s.hashing.as_ref().map_or(self.len, |h| h.to)
    }

    /// Gives the digest up (the object is not read in order): the held window is released,
    /// unchecked, and the one cursor becomes the first region's.
    fn give_up_digest(&self, s: &mut State) {
        s.hashing = None;
        self.release_held(s, None);
    }

    /// One step of a read by region: the cursor whose run `at` continues (or a new one)
    /// queues its windows; the read takes the window holding `at`, waits for it, or (none
    /// held, and none coming) fetches directly.
    fn by_region(self: &Arc<Self>, s: &mut State, at: u64, n: u64) -> Step {
        let c = self.cursor_for(s, at, n);
        self.queue_region(s, c);
        match Self::window_at(s, at) {
            Some((start, Slot::Ready(d) | Slot::Held(d))) => {
                Step::Done(Ok(Piece::Window(start, d)))
            }
            Some((_, Slot::Failed(f))) => Step::Done(Err(f)),
            Some(_) => Step::Wait,
            None if at < s.cursors[c].next || !Self::pending(s) => {
                let Piece::Direct { until, .. } = self.direct(s, at) else {
                    return Step::Again;
                };
                // Bytes fetched directly: the cursor goes on past them. A small read (a norm
                // read far from the others) fetches just its bytes, not a 4 MiB block.
                let until = until.min(at + n);
                let cur = &mut s.cursors[c];
                cur.next = cur.next.max(until);
                let exact = until - at < MIN_WINDOW;
                Step::Done(Ok(Piece::Direct { until, exact }))
            }
            None => Step::Wait,
        }
    }

    /// The cursor whose run a read of `n` bytes at `at` continues: one whose latest read is at
    /// most a window behind it and whose queued bytes reach to within a window of it (the
    /// nearest); otherwise a new one at `at`, in place of an idle one (the least recently
    /// continued) when [`CURSORS`] are kept. The reading thread owns it from now on.
    fn cursor_for(&self, s: &mut State, at: u64, n: u64) -> usize {
        let tick = s.reads;
        let me = std::thread::current().id();
        if s.cursors.is_empty() && s.cursor > self.head {
            // The cursor of the in-order phase goes on as the first region's.
            s.cursors.push(Cursor {
                read: s.last_read.0.min(s.cursor),
                next: s.cursor,
                allowance: self.window,
                touched: tick,
                owner: s.last_read.1,
            });
        }
        let near = s
            .cursors
            .iter()
            .enumerate()
            .filter(|(_, c)| at + self.window >= c.read && at <= c.next + self.window)
            .min_by_key(|(_, c)| at.abs_diff(c.read))
            .map(|(i, _)| i);
        for (i, c) in s.cursors.iter_mut().enumerate() {
            if c.owner == Some(me) && Some(i) != near {
                c.owner = None;
            }
        }
        let cap = self.share(s, near);
        if let Some(i) = near {
            let c = &mut s.cursors[i];
            if at > c.read {
                c.allowance = (c.allowance * 2).min(cap);
            }
            c.read = c.read.max(at);
            c.touched = tick;
            c.owner = Some(me);
            return i;
        }
        let fresh = Cursor {
            read: at,
            next: at,
            allowance: (2 * n).clamp(MIN_WINDOW, cap.max(MIN_WINDOW)),
            touched: tick,
            owner: Some(me),
        };
        if s.cursors.len() < CURSORS {
            s.cursors.push(fresh);
            return s.cursors.len() - 1;
        }
        let idle_first = (0..s.cursors.len())
            .min_by_key(|&i| (s.cursors[i].owner.is_some(), s.cursors[i].touched))
            .unwrap_or(0);
        s.cursors[idle_first] = fresh;
        idle_first
    }

    /// A cursor's share of the budget: the budget over one more than the cursors threads read
    /// from now (counting `mine`, or a new one), at least one smallest window. The share left
    /// over keeps windows a cursor queued past where its thread left it (a tensor's end:
    /// the next tensor in the file is read later, by another run) until they are read.
    fn share(&self, s: &State, mine: Option<usize>) -> u64 {
        let budget = lock(&pool().0).budget;
        let active = s
            .cursors
            .iter()
            .enumerate()
            .filter(|&(i, c)| Some(i) != mine && c.owner.is_some())
            .count() as u64
            + 2;
        (budget / active).max(MIN_WINDOW)
    }

    /// A direct fetch from `at` up to the next window the stream holds.
    fn direct(&self, s: &State, at: u64) -> Piece {
        let next = s.windows.range(at..).next().map(|(&k, _)| k);
        Piece::Direct {
            until: next.unwrap_or(self.len),
            exact: false,
        }
    }

    /// Counts `n` bytes at `at` of the window at `start` read; drops it once all were (and
    /// hashed).
    fn used(&self, start: u64, at: u64, n: u64) {
        let mut s = lock(&self.state);
        mark_read(&mut s, at, n);
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

    /// Files a new pending window `[start, end)` (its bytes already reserved) and queues it.
    fn add_window(self: &Arc<Self>, s: &mut State, start: u64, end: u64) {
        s.windows.insert(
            start,
            Window {
                end,
                queued: s.reads,
                slot: Slot::Pending,
                used: 0,
            },
        );
        enqueue(Job {
            stream: self.clone(),
            start,
            end,
        });
    }

    /// While the digest is taken: queues the windows from the cursor on that the budget
    /// allows (dropping, when it is full, windows the reads passed: wholly before `at`).
    fn queue_in_order(self: &Arc<Self>, s: &mut State, at: u64) {
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
            s.cursor = end;
            self.add_window(s, start, end);
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

    /// Queues cursor `c`'s windows from its `next` on, up to its allowance past its latest
    /// read, as the budget allows (making room from windows no cursor reads lately). Windows
    /// stay disjoint: a window held already is skipped, a new one ends where the next begins.
    fn queue_region(self: &Arc<Self>, s: &mut State, c: usize) {
        loop {
            let Cursor {
                read,
                next,
                allowance,
                ..
            } = s.cursors[c];
            if next >= self.len {
                return;
            }
            if let Some((start, _)) = Self::window_at(s, next) {
                s.cursors[c].next = s.windows[&start].end;
                continue;
            }
            // Up to `allowance` past the latest read, in order from `next` (a read ahead of
            // `next` waits for the bytes between: the same run reads them, as a q/k
            // permutation's rows are read); while bytes are queued ahead, only once half the
            // allowance (at most a window) is free, so windows stay large.
            let to = read + allowance;
            let least = (allowance / 2).clamp(MIN_WINDOW, self.window);
            if next >= to || (next > read && to - next < least) {
                return;
            }
            let done = s.read_done.range(..=next).next_back();
            if done.is_some_and(|(_, &e)| e > next) {
                return;
            }
            let limit = [
                s.windows.range(next..).next().map(|(&k, _)| k),
                s.read_done.range(next..).next().map(|(&k, _)| k),
            ]
            .into_iter()
            .flatten()
            .fold(self.len, u64::min);
            let size = (to - next).clamp(MIN_WINDOW, self.window);
            let end = (next + size).min(limit);
            let room = reserve(end - next) || self.make_room(s, end - next) && reserve(end - next);
            if !room {
                return;
            }
            s.cursors[c].next = end;
            self.add_window(s, next, end);
        }
    }

    /// Drops fetched windows no owned cursor will read (more than a window behind its latest
    /// read, or beyond what it queued), until `need` bytes fit the budget or none is left to
    /// drop. Whether any was dropped.
    fn make_room(&self, s: &mut State, need: u64) -> bool {
        let live: Vec<(u64, u64)> = s
            .cursors
            .iter()
            .filter(|c| c.owner.is_some())
            .map(|c| (c.read.saturating_sub(self.window), c.next))
            .collect();
        let mut idle: Vec<(u64, u64)> = s
            .windows
            .iter()
            .filter(|(_, w)| matches!(w.slot, Slot::Ready(_) | Slot::Failed(_)))
            .filter(|(&k, w)| !live.iter().any(|&(r, n)| w.end > r && k < n))
            .map(|(&k, w)| (w.queued, k))
            .collect();
        idle.sort_unstable();
        let mut dropped = false;
        for (_, k) in idle {
            if let Some(w) = s.windows.remove(&k) {
                give_back(w.end - k);
                dropped = true;
            }
            let p = lock(&pool().0);
            if p.in_flight + need <= p.budget {
                break;
            }
        }
        dropped
    }

    /// A fetcher's work: fetches `[start, end)`, files it, and carries the digest on.
    fn run(&self, start: u64, end: u64) {
        if lock(&self.state).closed {
            return self.file(start, end, Slot::Failed(Failure::Final("closed".into())));
        }
        let mut data = vec![0u8; (end - start) as usize];
        let slot = match self.source.fetch_range(start, &mut data) {
            Ok(()) if end == self.len && lock(&self.state).hashing.is_some() => {
                Slot::Held(Arc::new(data))
            }
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

    use std::sync::atomic::{AtomicU64, Ordering};

    /// An object in memory that counts the bytes fetched of it.
    struct Mem {
        data: Vec<u8>,
        fetched: AtomicU64,
    }

    impl Fetch for Mem {
        fn fetch_range(&self, offset: u64, buf: &mut [u8]) -> Result<(), Failure> {
            let at = offset as usize;
            buf.copy_from_slice(&self.data[at..at + buf.len()]);
            self.fetched.fetch_add(buf.len() as u64, Ordering::Relaxed);
            Ok(())
        }
    }

    /// Two threads each read their half of a 16 MiB object (no digest) in 256 KiB reads, at
    /// once, with a 1 MiB budget: the bytes are the object's, the budget held, and the object
    /// was fetched about once (a cursor per half; one stream would jump between them).
    #[test]
    fn two_threads_reading_two_halves_fetch_each_byte_about_once() {
        set_budget(1 << 20);
        let len: u64 = 16 << 20;
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mem = Arc::new(Mem {
            data: data.clone(),
            fetched: AtomicU64::new(0),
        });
        let head = 4096;
        let s = Stream::new(mem.clone(), "mem", len, &data[..head], None).unwrap();
        let direct = |at: u64, b: &mut [u8], _exact: bool| {
            mem.fetch_range(at, b)
                .map_err(|_| weightport_core::Error::Interrupted)
        };
        std::thread::scope(|t| {
            for h in 0..2u64 {
                let (s, data, direct) = (&s, &data, &direct);
                t.spawn(move || {
                    let (from, to) = ((h * len / 2).max(head as u64), (h + 1) * len / 2);
                    let mut at = from;
                    while at < to {
                        let mut buf = vec![0u8; (to - at).min(256 << 10) as usize];
                        s.read(at, &mut buf, direct).unwrap();
                        assert!(buf[..] == data[at as usize..at as usize + buf.len()]);
                        at += buf.len() as u64;
                    }
                });
            }
        });
        let fetched = mem.fetched.load(Ordering::Relaxed);
        assert!(
            fetched * 100 <= (len - head as u64) * 105,
            "{fetched} of {len}"
        );
        let (budget, peak) = stats();
        assert!(peak <= budget, "{peak} over {budget}");
        s.close();
        set_budget(0);
    }

    #[test]
    fn bytes_read_are_kept_as_merged_ranges() {
        let mut s = State {
            windows: BTreeMap::new(),
            cursor: 0,
            last_read: (0, None),
            cursors: Vec::new(),
            reads: 0,
            read_done: BTreeMap::new(),
            hashing: None,
            closed: false,
        };
        for (at, n) in [(10, 5), (30, 5), (15, 5), (0, 10), (25, 5), (50, 0)] {
            mark_read(&mut s, at, n);
        }
        let got: Vec<(u64, u64)> = s.read_done.into_iter().collect();
        assert_eq!(got, vec![(0, 20), (25, 35)]);
    }

    #[test]
    fn windows_are_an_eighth_of_the_budget_within_bounds() {
        assert_eq!(window_for(1 << 20), 128 << 10);
        assert_eq!(window_for(1), MIN_WINDOW);
        assert_eq!(window_for(1 << 40), MAX_WINDOW);
    }
}
