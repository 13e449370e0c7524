//! One remote object as a [`ByteSource`]: opened by one ranged request (its first bytes, its
//! length, its ETag pinned), then read by ranged requests that must answer 206 with exactly the
//! range asked, of the same length and ETag; failures are retried with backoff, resuming from the
//! last byte received.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ureq::http::{Response, StatusCode};
use ureq::Body;
use weightport_core::{ByteSource, Identity, Result};

use crate::ahead::{Fetch, Stream};
use crate::fetch::{
    backoff, error, header_str, read_body, shown_url, status_failure, Client, Failure, Hub, Token,
    ATTEMPTS,
};

/// Bytes asked by the first request: what huggingface_hub reads for a safetensors header
/// (`bytes=0-100000`), so `inspect` of a file whose header fits costs one ranged request.
pub(crate) const FIRST_READ: u64 = 100_001;
/// Reads shorter than this are served from blocks of this size fetched whole (neighbouring
/// small reads coalesce into one request); longer reads go straight into the caller's buffer.
const BLOCK: u64 = 4 << 20;
/// Blocks kept per object (least recently used dropped first).
const BLOCKS_KEPT: usize = 4;
/// Bytes of blocks kept by all objects together: past it a fetched block serves its read and
/// is not kept, so a repo of many shards read at once stays within this.
const KEPT_BYTES: u64 = 64 << 20;

static KEPT: AtomicU64 = AtomicU64::new(0);

/// A kept block: its number, when it was last used, its bytes.
type Kept = (u64, u64, std::sync::Arc<Vec<u8>>);

/// What the caller knows of the object before opening it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Expect {
    /// The size a listing gave.
    pub(crate) len: Option<u64>,
    /// The commit a Hub revision was resolved to: every `X-Repo-Commit` must say the same.
    pub(crate) commit: Option<String>,
    /// The LFS sha256 a listing gave: a weights object read whole in order is checked
    /// against it.
    pub(crate) sha256: Option<String>,
}

/// Makes the URL of each request afresh: S3's presigned SigV4 URLs (the signature in the query,
/// which messages never show) expire, so every request is signed when it is made.
pub(crate) trait Sign: Send + Sync + std::fmt::Debug {
    fn url(&self) -> String;
}

/// Where the object is and how to ask for it.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The URL asked first (a Hub `/resolve/` URL, or the file's own; S3's, unsigned).
    pub(crate) url: String,
    /// The Hub token, for its own host only.
    pub(crate) token: Option<Token>,
    pub(crate) expect: Expect,
    /// When set, every request goes to the URL it makes instead (no redirect is kept).
    pub(crate) sign: Option<std::sync::Arc<dyn Sign>>,
}

impl Target {
    /// The URL of the next request.
    fn request_url(&self) -> String {
        self.sign
            .as_ref()
            .map_or_else(|| self.url.clone(), |s| s.url())
    }
}

/// How ranges of an opened object are asked for: what every read of it, and its read-ahead's
/// fetchers, share.
struct Conn {
    /// The URL as messages show it.
    shown: String,
    client: Client,
    token: Option<Token>,
    /// Where ranged reads go: the URL after redirects, and how many times it was replaced by
    /// resolving the address again.
    location: Mutex<(String, u32)>,
    sign: Option<std::sync::Arc<dyn Sign>>,
    len: u64,
    etag: String,
    /// The address that redirected, when the first request was redirected (a signed URL that
    /// expires is resolved again there).
    resolve: Option<Resolve>,
}

/// Fresh locations asked of a redirecting address per opened object at most: past it, the
/// signed URL "kept failing".
pub(crate) const RE_RESOLVES: u32 = 3;

/// The address a redirect came from and what the first answer said of the file there: a
/// location resolved again must name the same commit, LFS ETag and size.
struct Resolve {
    url: String,
    hub: Hub,
    /// Re-resolutions made so far (held while one is made, so concurrent readers that meet
    /// the same expired location make one between them).
    done: Mutex<u32>,
}

/// Statuses a signed URL answers once it has expired: 403 (S3 presigned URLs' `AccessDenied`
/// "Request has expired", CloudFront's "Access denied"), 400 and 410 (nginx's `secure_link`
/// examples, other stores).
fn expired_status(s: StatusCode) -> bool {
    matches!(s.as_u16(), 400 | 403 | 410)
}

/// An opened remote object (see the module docs).
pub(crate) struct RemoteObject {
    /// The local stand-in's path (what readers and messages name).
    name: PathBuf,
    conn: Arc<Conn>,
    len: u64,
    identity: Identity,
    head: Vec<u8>,
    blocks: Mutex<Vec<Kept>>,
    tick: AtomicU64,
    /// The read-ahead, when on (see [`crate::ahead`]).
    stream: Option<Arc<Stream>>,
}

impl std::fmt::Debug for RemoteObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RemoteObject({}, {} bytes)", self.conn.shown, self.len)
    }
}

/// `bytes a-b/total` of a Content-Range header.
pub(crate) fn content_range(v: &str) -> Option<(u64, u64, u64)> {
    let (range, total) = v.strip_prefix("bytes ")?.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    Some((
        a.trim().parse().ok()?,
        b.trim().parse().ok()?,
        total.trim().parse().ok()?,
    ))
}

/// Runs `attempt` until it succeeds, fails finally, or [`ATTEMPTS`] are spent (pausing with
/// [`backoff`] between them).
pub(crate) fn retry<T>(
    mut attempt: impl FnMut() -> std::result::Result<T, Failure>,
) -> std::result::Result<T, Failure> {
    let mut n = 0;
    loop {
        match attempt() {
            Err(Failure::Transient(_)) if n + 1 < ATTEMPTS => {
                n += 1;
                std::thread::sleep(backoff(n));
            }
            other => return other,
        }
    }
}

/// The first answer: status, length, ETag and the first bytes.
struct First {
    url: String,
    len: u64,
    etag: String,
    hub: Hub,
    head: Vec<u8>,
}

fn first_request(client: &Client, t: &Target) -> std::result::Result<First, Failure> {
    let range = ("range", format!("bytes=0-{}", FIRST_READ - 1));
    let (resp, url, hub) = client.get(&t.request_url(), &[range], t.token.as_ref())?;
    let etag = header_str(&resp, "etag").map(str::to_string);
    let (len, body) = match resp.status() {
        StatusCode::PARTIAL_CONTENT => {
            let cr = header_str(&resp, "content-range").and_then(content_range);
            let Some((0, b, total)) =
                cr.filter(|&(a, b, total)| a == 0 && b < total && b < FIRST_READ)
            else {
                return Err(Failure::Final(format!(
                    "{}: a 206 answer without the Content-Range asked for",
                    shown_url(&url)
                )));
            };
            (total, b + 1)
        }
        StatusCode::OK => {
            let n = resp.body().content_length();
            match n.filter(|&n| n <= FIRST_READ) {
                Some(n) => (n, n),
                None => return Err(ignored_range(&url)),
            }
        }
        StatusCode::RANGE_NOT_SATISFIABLE
            if header_str(&resp, "content-range").is_some_and(|v| v.trim() == "bytes */0") =>
        {
            (0, 0)
        }
        s => return Err(status_failure(&url, s)),
    };
    let etag = etag.ok_or_else(|| {
        Failure::Final(format!(
            "{}: the server gives no ETag, so a change of the object while it is read could not \
             be detected",
            shown_url(&url)
        ))
    })?;
    let mut head = vec![0u8; body as usize];
    if body > 0 {
        if let (_, Some(f)) = read_body(resp, &mut head, &url) {
            return Err(f);
        }
    }
    Ok(First {
        url,
        len,
        etag,
        hub,
        head,
    })
}

fn ignored_range(url: &str) -> Failure {
    Failure::Final(format!(
        "{}: the server ignored the Range request (it answered 200 with the whole object); \
         reading only the bytes needed is not possible there",
        shown_url(url)
    ))
}

/// Checks the first answer against what the listing and the Hub said.
fn check_first(first: &First, t: &Target) -> std::result::Result<(), Failure> {
    let url = shown_url(&first.url);
    if let (Some(want), Some(got)) = (&t.expect.commit, &first.hub.commit) {
        if want != got {
            return Err(Failure::Changed(format!(
                "{url}: X-Repo-Commit {got}, but the revision was resolved to {want}"
            )));
        }
    }
    let sizes = [
        t.expect.len,
        first
            .hub
            .linked_size
            .as_deref()
            .and_then(|s| s.parse().ok()),
    ];
    if let Some(s) = sizes.into_iter().flatten().find(|&s| s != first.len) {
        return Err(Failure::Changed(format!(
            "{url}: {} bytes, but the Hub lists {s}",
            first.len
        )));
    }
    Ok(())
}

impl RemoteObject {
    /// Opens `t` (one request, retried), standing in at `name`.
    pub(crate) fn open(
        client: &Client,
        name: &Path,
        shown: &str,
        t: &Target,
    ) -> Result<RemoteObject> {
        let at = Path::new(shown);
        let first = retry(|| first_request(client, t)).map_err(|f| error(at, &f))?;
        check_first(&first, t).map_err(|f| error(at, &f))?;
        let etag = first
            .hub
            .linked_etag
            .clone()
            .unwrap_or_else(|| first.etag.clone());
        let resolve = (t.sign.is_none() && first.url != t.url).then(|| Resolve {
            url: t.url.clone(),
            hub: first.hub.clone(),
            done: Mutex::new(0),
        });
        let conn = Arc::new(Conn {
            shown: shown.to_string(),
            client: client.clone(),
            token: t.token.clone(),
            location: Mutex::new((first.url, 0)),
            sign: t.sign.clone(),
            len: first.len,
            etag: first.etag,
            resolve,
        });
        Ok(RemoteObject {
            name: name.to_path_buf(),
            conn,
            len: first.len,
            identity: Identity::Object {
                etag,
                revision: first.hub.commit.clone().or(t.expect.commit.clone()),
            },
            head: first.head,
            blocks: Mutex::new(Vec::new()),
            tick: AtomicU64::new(0),
            stream: None,
        })
    }

    /// This object read ahead (when the process's read-ahead is on), its digest compared
    /// with `t`'s LFS sha256 when it is read whole in order.
    pub(crate) fn reading_ahead(mut self, t: &Target) -> RemoteObject {
        let conn: Arc<dyn Fetch> = self.conn.clone();
        let shown = self.conn.shown.clone();
        self.stream = Stream::new(conn, &shown, self.len, &self.head, t.expect.sha256.clone());
        self
    }

    /// Fills `buf` from `offset` by ranged requests, resuming after each failure.
    fn fetch(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.conn
            .fetch_range(offset, buf)
            .map_err(|f| error(Path::new(&self.conn.shown), &f))
    }
}

impl Fetch for Conn {
    /// Fills `buf` from `offset` by ranged requests, resuming after each failure.
    fn fetch_range(&self, offset: u64, buf: &mut [u8]) -> std::result::Result<(), Failure> {
        let mut got = 0usize;
        let mut failures = 0;
        while got < buf.len() {
            let (url, generation) = self.location();
            let (n, failure) = self.attempt(&url, offset + got as u64, &mut buf[got..]);
            got += n;
            crate::fetched(n as u64);
            match failure {
                None => {}
                Some(Failure::Expired(why)) => self.resolve_again(generation, why)?,
                Some(Failure::Transient(_)) if failures + 1 < ATTEMPTS => {
                    failures += 1;
                    std::thread::sleep(backoff(failures));
                }
                Some(f) => return Err(f),
            }
        }
        Ok(())
    }
}

impl Conn {
    /// Where the next ranged request goes, and the location's generation.
    fn location(&self) -> (String, u32) {
        let at = self.location.lock().unwrap_or_else(|e| e.into_inner());
        match &self.sign {
            Some(s) => (s.url(), at.1),
            None => at.clone(),
        }
    }

    /// One attempt at `buf.len()` bytes from `offset` at `url`: how many arrived, and why not
    /// all.
    fn attempt(&self, url: &str, offset: u64, buf: &mut [u8]) -> (usize, Option<Failure>) {
        let end = offset + buf.len() as u64 - 1;
        let headers = [
            ("range", format!("bytes={offset}-{end}")),
            ("if-match", self.etag.clone()),
        ];
        let (resp, url, _) = match self.client.get(url, &headers, self.token.as_ref()) {
            Ok(r) => r,
            Err(f) => return (0, Some(f)),
        };
        if self.resolve.is_some() && expired_status(resp.status()) {
            let m = format!("{}: the server answered {}", shown_url(&url), resp.status());
            return (0, Some(Failure::Expired(m)));
        }
        if let Err(f) = self.check_answer(&resp, &url, offset, end) {
            return (0, Some(f));
        }
        read_body(resp, buf, &url)
    }

    /// A ranged answer must be 206 of exactly `[offset, end]` of this length and ETag (or 200 of
    /// the whole object, when that is what was asked).
    fn check_answer(
        &self,
        resp: &Response<Body>,
        url: &str,
        offset: u64,
        end: u64,
    ) -> std::result::Result<(), Failure> {
        let whole = offset == 0 && end + 1 == self.len;
        match resp.status() {
            StatusCode::PARTIAL_CONTENT => {
                let cr = header_str(resp, "content-range").and_then(content_range);
                if cr.is_some_and(|(_, _, total)| total != self.len) {
                    return Err(Failure::Changed(format!(
                        "{}: its length changed",
                        shown_url(url)
                    )));
                }
                if cr != Some((offset, end, self.len)) {
                    return Err(Failure::Final(format!(
                        "{}: a 206 answer for another range than bytes {offset}-{end}",
                        shown_url(url)
                    )));
                }
            }
            StatusCode::OK if whole => {}
            StatusCode::OK => return Err(ignored_range(url)),
            s => return Err(status_failure(url, s)),
        }
        match header_str(resp, "etag") {
            Some(e) if e == self.etag => Ok(()),
            other => Err(Failure::Changed(format!(
                "{}: ETag {} instead of {}",
                shown_url(url),
                other.unwrap_or("(none)"),
                self.etag
            ))),
        }
    }
}

impl Conn {
    /// After location `generation` refused a range (`why`), a new one from the address that
    /// redirected, unless another reader already replaced it; at most [`RE_RESOLVES`] per
    /// object, then a final failure saying the signed URL kept failing.
    fn resolve_again(&self, generation: u32, why: String) -> std::result::Result<(), Failure> {
        let Some(r) = &self.resolve else {
            return Err(Failure::Final(why));
        };
        let mut done = r.done.lock().unwrap_or_else(|e| e.into_inner());
        if self.location().1 != generation {
            return Ok(());
        }
        let mut why = why;
        while *done < RE_RESOLVES {
            *done += 1;
            match retry(|| self.fresh_location(r)) {
                Ok(url) => {
                    *self.location.lock().unwrap_or_else(|e| e.into_inner()) =
                        (url, generation + 1);
                    return Ok(());
                }
                Err(Failure::Expired(m)) => why = m,
                Err(f) => return Err(f),
            }
        }
        Err(Failure::Final(format!(
            "{why}; the signed URL {} redirects to kept failing (resolved again {RE_RESOLVES} \
             times)",
            shown_url(&r.url)
        )))
    }

    /// `r`'s address asked again (the token to its own host only, as always): where it now
    /// redirects, checked to name the same commit, LFS ETag and size, and to answer the
    /// object's first byte with its length and ETag.
    fn fresh_location(&self, r: &Resolve) -> std::result::Result<String, Failure> {
        let range = [("range", "bytes=0-0".to_string())];
        // The Hub's own answers first (its redirects on its own host followed): what they name
        // is checked before the new location on another host is asked.
        let (mut first, mut next) = self.client.get_once(&r.url, &range, self.token.as_ref())?;
        let mut hub = Hub::default();
        hub.note(&first);
        let (mut at, mut hops) = (r.url.clone(), 0);
        while let Some(n) = next.take_if(|n| same_host(n, &r.url) && hops < 5) {
            hops += 1;
            (first, next) = self.client.get_once(&n, &range, self.token.as_ref())?;
            hub.note(&first);
            at = n;
        }
        let shown = shown_url(&r.url);
        let pairs = [
            ("X-Repo-Commit", &r.hub.commit, &hub.commit),
            ("X-Linked-Etag", &r.hub.linked_etag, &hub.linked_etag),
            ("X-Linked-Size", &r.hub.linked_size, &hub.linked_size),
        ];
        for (name, was, now) in pairs {
            if was.is_some() && was != now {
                return Err(Failure::Changed(format!(
                    "{shown} resolved again: {name} {} instead of {}",
                    now.as_deref().unwrap_or("(none)"),
                    was.as_deref().unwrap_or_default()
                )));
            }
        }
        let (resp, url) = match next {
            None => (first, at),
            Some(next) => {
                drop(first);
                let (resp, url, _) = self.client.get(&next, &range, self.token.as_ref())?;
                (resp, url)
            }
        };
        if url != r.url && expired_status(resp.status()) {
            let m = format!("{}: the server answered {}", shown_url(&url), resp.status());
            return Err(Failure::Expired(m));
        }
        self.check_answer(&resp, &url, 0, 0)?;
        match read_body(resp, &mut [0u8; 1], &url) {
            (_, Some(f)) => Err(f),
            _ => Ok(url),
        }
    }
}

/// Whether two URLs name the same host and port.
fn same_host(a: &str, b: &str) -> bool {
    let authority = |u: &str| u.parse::<ureq::http::Uri>().ok()?.authority().cloned();
    authority(a).is_some_and(|x| Some(x) == authority(b))
}

impl RemoteObject {
    /// Fills `buf` from `offset` with exactly the bytes asked (the first answer's bytes, else
    /// one ranged request for them, never a block): for readers that want only a few small
    /// pieces of a large object and keep what they read themselves (`scan`).
    pub(crate) fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = buf.len() as u64;
        let end = offset
            .checked_add(n)
            .filter(|&e| e <= self.len)
            .ok_or_else(|| weightport_core::bytes::past_end(&self.name, offset, n, self.len))?;
        if end <= self.head.len() as u64 {
            buf.copy_from_slice(&self.head[offset as usize..end as usize]);
            return Ok(());
        }
        if n == 0 {
            return Ok(());
        }
        self.fetch(offset, buf)
    }

    /// Block `k`, fetched when not kept.
    fn block(&self, k: u64) -> Result<std::sync::Arc<Vec<u8>>> {
        let now = self.tick.fetch_add(1, Ordering::Relaxed);
        {
            let mut kept = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(b) = kept.iter_mut().find(|b| b.0 == k) {
                b.1 = now;
                return Ok(b.2.clone());
            }
        }
        let start = k * BLOCK;
        let mut data = vec![0u8; (self.len - start).min(BLOCK) as usize];
        self.fetch(start, &mut data)?;
        let data = std::sync::Arc::new(data);
        let mut kept = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() >= BLOCKS_KEPT {
            let oldest = (0..kept.len()).min_by_key(|&i| kept[i].1).unwrap_or(0);
            let gone = kept.swap_remove(oldest);
            KEPT.fetch_sub(gone.2.len() as u64, Ordering::Relaxed);
        }
        let size = data.len() as u64;
        if KEPT.fetch_add(size, Ordering::Relaxed) + size <= KEPT_BYTES {
            kept.push((k, now, data.clone()));
        } else {
            KEPT.fetch_sub(size, Ordering::Relaxed);
        }
        Ok(data)
    }
}

impl Drop for RemoteObject {
    fn drop(&mut self) {
        if let Some(s) = &self.stream {
            s.close();
        }
        let kept = self.blocks.get_mut().unwrap_or_else(|e| e.into_inner());
        let bytes: u64 = kept.iter().map(|b| b.2.len() as u64).sum();
        KEPT.fetch_sub(bytes, Ordering::Relaxed);
    }
}

impl ByteSource for RemoteObject {
    fn name(&self) -> &Path {
        &self.name
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn identity(&self) -> &Identity {
        &self.identity
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = buf.len() as u64;
        let end = offset
            .checked_add(n)
            .filter(|&e| e <= self.len)
            .ok_or_else(|| weightport_core::bytes::past_end(&self.name, offset, n, self.len))?;
        if end <= self.head.len() as u64 {
            buf.copy_from_slice(&self.head[offset as usize..end as usize]);
            return Ok(());
        }
        if let Some(s) = &self.stream {
            // The head's part from the head, the rest from the read-ahead.
            let h = self
                .head
                .len()
                .saturating_sub(offset as usize)
                .min(buf.len());
            if h > 0 {
                buf[..h].copy_from_slice(&self.head[offset as usize..offset as usize + h]);
            }
            // What it does not hold (a transform's rows read out of order, bytes read twice):
            // through the small-read blocks, so neighbouring rows coalesce into one request.
            return s.read(offset + h as u64, &mut buf[h..], &|at, b, exact| {
                if exact {
                    self.fetch(at, b)
                } else {
                    self.by_blocks(at, b)
                }
            });
        }
        self.by_blocks(offset, buf)
    }
}

impl RemoteObject {
    /// `buf` at `offset` (past the head): straight into it when long, else from blocks.
    fn by_blocks(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let (n, end) = (buf.len() as u64, offset + buf.len() as u64);
        if n >= BLOCK {
            return self.fetch(offset, buf);
        }
        let mut at = offset;
        while at < end {
            let k = at / BLOCK;
            let b = self.block(k)?;
            let from = (at - k * BLOCK) as usize;
            let take = ((end - at) as usize).min(b.len() - from);
            let done = (at - offset) as usize;
            buf[done..done + take].copy_from_slice(&b[from..from + take]);
            at += take as u64;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_statuses_of_an_expired_signature_ask_for_a_fresh_location() {
        for s in [400, 403, 410] {
            assert!(expired_status(StatusCode::from_u16(s).unwrap()), "{s}");
        }
        // 401 (the token), 404 (gone), 412 (changed), 416 and the retried ones are not.
        for s in [401, 404, 412, 416, 429, 500, 503] {
            assert!(!expired_status(StatusCode::from_u16(s).unwrap()), "{s}");
        }
    }
}
