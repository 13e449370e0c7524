//! Remote inputs read where they live, by byte ranges: `hf://ORG/REPO[@REVISION][/PATH]` (the
//! Hugging Face Hub's layout), `https://…/FILE` and `s3://BUCKET/KEY-or-PREFIX/` (see `s3`).
//!
//! # How an input becomes readable
//!
//! Readers read weights through [`weightport_core::Storage`]; the repo layouts and HF → GGUF
//! read a directory's small files (configs, tokenizers, indexes) as local files. So
//! [`open`] lays the remote input out as a *view*: a private temp directory holding the small
//! files fetched whole (checked against the listed size and LFS sha256) and, for every weights
//! file, an empty stand-in whose path [`RemoteFiles`] (the storage [`install`] makes the
//! process default) opens as the remote object, by ranged requests. A stand-in is empty, so
//! anything that read it around the storage would find no bytes and fail, never convert
//! zeros. Dropping the [`RemoteInput`] removes the view and forgets its objects.
//!
//! # Consistency
//!
//! A Hub revision is resolved to a commit once (the model API's `sha`); every file is read at
//! that commit and every `X-Repo-Commit` must agree. Each object's first answer pins its
//! length and ETag; every later ranged answer must be a 206 of exactly the range asked, of that
//! length and ETag (sent as `If-Match` too), else the read fails with "input changed while
//! reading". Redirects (the Hub's 302 to its LFS store) are followed over https only, and the
//! token is sent to the endpoint's own host and port only.
//!
//! # Read-ahead
//!
//! With [`set_read_ahead`] (the CLI sets it for `convert` and `verify`), a weights object read
//! past its first answer is fetched ahead of its reads, in file order, by a few connections of
//! this crate, within the budget given; a file streamed whole is checked against the listing's
//! LFS sha256 before its last bytes are served (see `ahead.rs`).

mod ahead;
mod fetch;
mod hub;
mod object;
mod s3;
mod sparse;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use sha2::{Digest, Sha256};
use weightport_core::{ByteSource, Error, Result, Storage};

use crate::fetch::{shown_url, Client, Token};
use crate::hub::{HubRef, Sibling};
use crate::object::{Expect, RemoteObject, Target};

/// What servers answer, parsed: the entry points of the fuzz target `formats/remote_answers`.
#[doc(hidden)]
pub mod answers {
    /// The model API's answer: its commit and `(path, size, LFS sha256)` of each file.
    pub type Files = Vec<(String, Option<u64>, Option<String>)>;

    /// Parses a model API answer.
    pub fn listing(body: &[u8]) -> Result<(String, Files), String> {
        let l = crate::hub::parse_listing(body)?;
        let files = l
            .files
            .into_iter()
            .map(|f| (f.path, f.size, f.lfs_sha256))
            .collect();
        Ok((l.commit, files))
    }

    /// `(first, last, total)` of a `Content-Range: bytes a-b/total` header.
    pub fn content_range(v: &str) -> Option<(u64, u64, u64)> {
        crate::object::content_range(v)
    }

    /// A URL as messages show it.
    pub fn shown_url(url: &str) -> String {
        crate::fetch::shown_url(url)
    }

    /// A ListObjectsV2 page: `(key, size)` of its objects, its common prefixes, its next token.
    pub fn s3_page(body: &[u8]) -> Result<S3Page, String> {
        let l = crate::s3::parse_page(body)?;
        let objects = l.objects.into_iter().map(|o| (o.key, o.size)).collect();
        Ok((objects, l.prefixes, l.next))
    }

    /// A ListObjectsV2 page's parts.
    pub type S3Page = (Vec<(String, Option<u64>)>, Vec<String>, Option<String>);

    /// The code of an S3 error answer.
    pub fn s3_error_code(body: &[u8]) -> Option<String> {
        crate::s3::error_code(body)
    }

    /// An `s3://` address as `(bucket, key)`.
    pub fn s3_ref(arg: &str) -> Option<(String, String)> {
        let r = crate::s3::S3Ref::parse(arg).ok()?;
        Some((r.bucket, r.key))
    }

    /// Whether a file name may be laid out in a view.
    pub fn safe_name(n: &str) -> bool {
        crate::safe_name(n)
    }

    /// An `hf://` address as `(repo, revision, path)`.
    pub fn hub_ref(arg: &str) -> Option<(String, String, String)> {
        let r = crate::hub::HubRef::parse(arg).ok()?;
        Some((r.repo, r.revision, r.path))
    }
}

/// Files other than weights are fetched whole into the view up to this size; larger ones are
/// left out (and said so).
const MAX_WHOLE: u64 = 64 << 20;

/// Weights files: read by ranges through the storage, never fetched whole.
const RANGED: &[&str] = &[
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".gguf",
    ".npz",
    ".npy",
];
/// Weights of formats weightport does not read: left out of a view.
const LEFT_OUT: &[&str] = &[".h5", ".msgpack", ".onnx", ".ot", ".tflite", ".mlmodel"];

/// Whether `arg` names a remote input (`hf://`, `https://`, `http://`, `s3://`).
pub fn is_remote(arg: &Path) -> bool {
    let s = arg.to_string_lossy();
    ["hf://", "https://", "http://", "s3://"]
        .iter()
        .any(|p| s.starts_with(p))
}

/// A stand-in's object: where it is, and once opened, the object.
struct Entry {
    shown: String,
    target: Target,
    opened: Option<Arc<RemoteObject>>,
    /// Read in small pieces ([`sparse::Sparse`]): a scan's view.
    sparse: bool,
}

/// What an attestation records of a view's file: its remote address and its sha256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Material {
    /// The address as shown (`hf://ORG/REPO@COMMIT/PATH`, or the URL without its query).
    pub shown: String,
    /// The sha256 of the whole file, hex: the Hub's LFS sha256 for a file read by ranges (the
    /// Hub's claim, checked when a file is read whole), the bytes' own for a file fetched whole
    /// into the view; `None` where the server publishes none (an `https://` file, a Hub file
    /// outside LFS read by ranges).
    pub sha256: Option<String>,
}

fn materials() -> &'static Mutex<HashMap<PathBuf, Material>> {
    static M: OnceLock<Mutex<HashMap<PathBuf, Material>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

fn record(path: &Path, shown: &str, sha256: Option<String>) {
    let m = Material {
        shown: shown.to_string(),
        sha256,
    };
    materials()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(path.to_path_buf(), m);
}

/// The remote file a view's path stands for (`None`: not a file of an open view).
pub fn material(path: &Path) -> Option<Material> {
    materials()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(path)
        .cloned()
}

/// The file of an open view that stands for the remote file shown as `shown` (the reverse of
/// [`material`]); the first by path when two open views hold it.
pub fn view_file(shown: &str) -> Option<PathBuf> {
    let m = materials().lock().unwrap_or_else(|e| e.into_inner());
    let mut v: Vec<&PathBuf> = m
        .iter()
        .filter(|(_, x)| x.shown == shown)
        .map(|(p, _)| p)
        .collect();
    v.sort();
    v.first().map(|p| p.to_path_buf())
}

fn table() -> &'static Mutex<HashMap<PathBuf, Entry>> {
    static T: OnceLock<Mutex<HashMap<PathBuf, Entry>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

/// The client of the process, one per `SSL_CERT_FILE` (its roots are read when it is made).
fn client(name: &Path) -> Result<Client> {
    client_of(false, name)
}

/// The https-only client, or the one that also speaks plain http (only an S3 endpoint given as
/// `http://` makes targets of plain http URLs); one of each per `SSL_CERT_FILE` (its roots are
/// read when it is made).
fn client_of(plain_http: bool, name: &Path) -> Result<Client> {
    type Clients = HashMap<(bool, Option<std::ffi::OsString>), std::result::Result<Client, String>>;
    static C: OnceLock<Mutex<Clients>> = OnceLock::new();
    let mut c = C
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    c.entry((plain_http, std::env::var_os("SSL_CERT_FILE")))
        .or_insert_with(|| match plain_http {
            false => Client::new(),
            true => Client::with_plain_http(true),
        })
        .clone()
        .map_err(|m| Error::io(name, "connect", std::io::Error::other(m)))
}

/// Remote objects registered by [`open`], and local files (mapped) for every other name.
#[derive(Debug, Default, Clone, Copy)]
pub struct RemoteFiles;

impl RemoteFiles {
    fn remote(&self, name: &Path) -> Option<Result<Arc<dyn ByteSource>>> {
        let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
        let e = t.get_mut(name)?;
        let sparse = e.sparse;
        let o = match &e.opened {
            Some(o) => Ok(o.clone()),
            None => client_of(e.target.url.starts_with("http://"), name)
                .and_then(|c| RemoteObject::open(&c, name, &e.shown, &e.target))
                .map(|o| {
                    // A scan's or a dry run's pieces are exact: nothing is read ahead.
                    let o = Arc::new(match sparse {
                        true => o,
                        false => o.reading_ahead(&e.target),
                    });
                    e.opened = Some(o.clone());
                    o
                }),
        };
        Some(o.map(|o| match sparse {
            true => Arc::new(sparse::Sparse::new(o)) as Arc<dyn ByteSource>,
            false => o as Arc<dyn ByteSource>,
        }))
    }
}

impl Storage for RemoteFiles {
    fn open(&self, name: &Path, expected: &str) -> Result<Arc<dyn ByteSource>> {
        if let Some(r) = self.remote(name) {
            return r;
        }
        weightport_core::mapped::LocalFiles::default().open(name, expected)
    }
    fn exists(&self, name: &Path) -> bool {
        table()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(name)
            || name.exists()
    }
}

/// Sets the bytes the read-ahead may hold at once over all remote objects: windows being
/// fetched and fetched but not yet read (0, the default: no read-ahead; reads fetch what they
/// ask when they ask it). Objects opened afterwards read ahead.
pub fn set_read_ahead(bytes: u64) {
    ahead::set_budget(bytes);
}

/// The read-ahead budget and the most bytes it ever held at once.
pub fn read_ahead_stats() -> (u64, u64) {
    ahead::stats()
}

/// What is told of bytes fetched: a count of bytes each time some arrive.
pub type FetchProgress = Arc<dyn Fn(u64) + Send + Sync>;

fn progress() -> &'static RwLock<Option<FetchProgress>> {
    static P: OnceLock<RwLock<Option<FetchProgress>>> = OnceLock::new();
    P.get_or_init(Default::default)
}

static FETCHED: AtomicU64 = AtomicU64::new(0);

/// Reports bytes fetched to `f` (the CLI draws them), or to nobody.
pub fn set_progress(f: Option<FetchProgress>) {
    *progress().write().unwrap_or_else(|e| e.into_inner()) = f;
}

/// Bytes of remote objects fetched by this process so far.
pub fn fetched_bytes() -> u64 {
    FETCHED.load(Ordering::Relaxed)
}

/// `n` bytes arrived.
pub(crate) fn fetched(n: u64) {
    if n == 0 {
        return;
    }
    FETCHED.fetch_add(n, Ordering::Relaxed);
    if let Some(f) = progress()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
    {
        f(n);
    }
}

/// Makes [`RemoteFiles`] the storage of every [`weightport_core::ReadOptions::default`].
pub fn install() {
    weightport_core::mapped::set_default_storage(Some(Arc::new(RemoteFiles)));
}

/// An opened remote input: the local path readers are given, and what it stands for.
#[derive(Debug)]
pub struct RemoteInput {
    /// The view's path of the input (a directory, or a weights file's stand-in).
    pub path: PathBuf,
    /// The address as given, for messages (never with a token).
    pub shown: String,
    /// The commit a Hub revision was resolved to.
    pub commit: Option<String>,
    /// What the view left out, for the user.
    pub notes: Vec<String>,
    /// Bytes of the weights files read by ranges (as listed; 0 where no size is known).
    pub weights_bytes: u64,
    view: tempfile::TempDir,
}

impl RemoteInput {
    /// The addresses of this input's files that have no published sha256 (see
    /// [`Material::sha256`]), sorted.
    pub fn without_digest(&self) -> Vec<String> {
        let root = self.view.path();
        let m = materials().lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<String> = m
            .iter()
            .filter(|(p, m)| p.starts_with(root) && m.sha256.is_none())
            .map(|(_, m)| m.shown.clone())
            .collect();
        v.sort();
        v
    }
}

impl Drop for RemoteInput {
    fn drop(&mut self) {
        let root = self.view.path().to_path_buf();
        let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
        t.retain(|p, _| !p.starts_with(&root));
        let mut m = materials().lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|p, _| !p.starts_with(&root));
    }
}

/// How a view is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// For the readers: the files of one directory, small ones fetched whole, weights ranged.
    Convert,
    /// For a dry run: laid out as for [`Mode::Convert`], weights read in small pieces (it
    /// reads headers only, and a 4 MiB block would fetch tensor bytes around each).
    Plan,
    /// For `scan`: every file under the address, subdirectories included, each read by
    /// ranges in small pieces, whatever its name or size (the scan tells files apart by
    /// content). A file that cannot be laid out is a note: the scan reports it unread.
    Scan,
}

/// Opens the remote input `arg` (see the module docs).
pub fn open(arg: &str) -> Result<RemoteInput> {
    open_as(arg, Mode::Convert)
}

/// Opens the remote input `arg` for a dry run: [`open`]'s layout, every weights file read in
/// small pieces (the headers a plan needs, without the 4 MiB blocks conversions read through).
pub fn open_for_plan(arg: &str) -> Result<RemoteInput> {
    open_as(arg, Mode::Plan)
}

/// Opens the remote input `arg` for `scan`: every file under it (subdirectories included) is
/// a stand-in read by ranges in small pieces, so a scan reads the bytes it audits and no
/// others. Each of [`RemoteInput::notes`] is then a file not laid out, so not scanned.
pub fn open_for_scan(arg: &str) -> Result<RemoteInput> {
    open_as(arg, Mode::Scan)
}

fn open_as(arg: &str, mode: Mode) -> Result<RemoteInput> {
    if arg.starts_with("hf://") {
        return open_hub(arg, mode);
    }
    if arg.starts_with("https://") {
        return open_https(arg, mode);
    }
    if arg.starts_with("s3://") {
        return s3::open(arg, mode);
    }
    Err(Error::Usage(format!(
        "{}: plain http is not read (use https)",
        weightport_core::sanitize(arg)
    )))
}

/// A new view directory, under the temp directory with its symlinks resolved: a view's paths
/// are then the paths a reader that resolves symlinks (edit's targets, a delta's sides) opens.
fn view_dir() -> Result<tempfile::TempDir> {
    let tmp = std::env::temp_dir();
    tempfile::Builder::new()
        .prefix("weightport-remote.")
        .tempdir_in(std::fs::canonicalize(&tmp).unwrap_or(tmp))
        .map_err(|e| Error::io(&std::env::temp_dir(), "create a temp directory", e))
}

/// A file name a view may hold: one component, no control characters.
fn safe_name(n: &str) -> bool {
    !n.is_empty()
        && n != "."
        && n != ".."
        && !n.contains(['/', '\\', '\0'])
        && !n.chars().any(char::is_control)
        && n.len() <= 255
}

/// Registers an empty stand-in at `path` for `target`.
fn stand_in(path: &Path, shown: String, target: Target, sparse: bool) -> Result<()> {
    std::fs::write(path, b"").map_err(|e| Error::io(path, "create", e))?;
    let entry = Entry {
        shown,
        target,
        opened: None,
        sparse,
    };
    table()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(path.to_path_buf(), entry);
    Ok(())
}

fn open_https(arg: &str, mode: Mode) -> Result<RemoteInput> {
    let no_query = arg.split(['?', '#']).next().unwrap_or_default();
    let name = no_query.rsplit('/').next().unwrap_or_default();
    if !safe_name(name) || no_query.trim_start_matches("https://").find('/').is_none() {
        return Err(Error::Usage(format!(
            "{}: expected the URL of a file (https://HOST/…/FILE)",
            shown_url(arg)
        )));
    }
    let view = view_dir()?;
    let path = view.path().join(name);
    let target = Target {
        url: arg.to_string(),
        token: None,
        expect: Expect::default(),
        sign: None,
    };
    stand_in(&path, shown_url(arg), target, mode != Mode::Convert)?;
    record(&path, &shown_url(arg), None);
    Ok(RemoteInput {
        path,
        shown: shown_url(arg),
        commit: None,
        notes: Vec::new(),
        weights_bytes: 0,
        view,
    })
}

/// How one listed file enters a view.
enum Placement {
    Ranged,
    Whole,
    LeftOut(&'static str),
}

fn placement(s: &Sibling, mode: Mode) -> Placement {
    if mode == Mode::Scan {
        return Placement::Ranged;
    }
    let lower = s.path.to_ascii_lowercase();
    if RANGED.iter().any(|e| lower.ends_with(e)) {
        Placement::Ranged
    } else if LEFT_OUT.iter().any(|e| lower.ends_with(e)) {
        Placement::LeftOut("weights of a format weightport does not read")
    } else if s.size.is_none_or(|n| n > MAX_WHOLE) {
        Placement::LeftOut("not a weights file, and larger than 64 MiB or of no listed size")
    } else {
        Placement::Whole
    }
}

/// Whether a listed path below the view's directory is laid out in this mode: a file of the
/// directory itself, or (scanning) of any directory under it.
fn under(rest: &str, mode: Mode) -> bool {
    mode == Mode::Scan || !rest.contains('/')
}

/// The repo directory a view holds for the address path `path` (a file's directory, or the
/// directory named), and that directory as a prefix of listed paths (`""` or `"DIR/"`).
fn view_dir_of(path: &str, is_file: bool) -> (String, String) {
    let dir = match (is_file, path.rsplit_once('/')) {
        (true, Some((d, _))) => d.to_string(),
        (true, None) => String::new(),
        (false, _) => path.to_string(),
    };
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    (dir, prefix)
}

fn open_hub(arg: &str, mode: Mode) -> Result<RemoteInput> {
    let r = HubRef::parse(arg)?;
    let endpoint = hub::endpoint();
    let token = hub::token(&endpoint);
    let c = client(Path::new(&shown_url(&endpoint)))?;
    let listing = hub::list(&c, &endpoint, &r, token.as_ref())?;
    let is_file = listing.files.iter().any(|f| f.path == r.path);
    let (dir, prefix) = view_dir_of(&r.path, is_file);
    let here: Vec<&Sibling> = listing
        .files
        .iter()
        .filter(|f| match (is_file, mode) {
            // A file scanned is that file; a file converted brings its directory's companions.
            (true, Mode::Scan) => f.path == r.path,
            _ => f.path.strip_prefix(&prefix).is_some_and(|n| under(n, mode)),
        })
        .collect();
    if here.is_empty() {
        return Err(Error::Usage(format!(
            "{}: no such file or directory at commit {}",
            weightport_core::sanitize(arg),
            listing.commit
        )));
    }
    let view = view_dir()?;
    // Laid out as huggingface_hub's cache lays out a snapshot, so what reads a directory's
    // name (HF → GGUF's model name) reads the repo's name, as it does from a local download.
    let root = view
        .path()
        .join(format!("models--{}", r.repo.replace('/', "--")))
        .join("snapshots")
        .join(&listing.commit)
        .join(&dir);
    std::fs::create_dir_all(&root).map_err(|e| Error::io(&root, "create", e))?;
    let ctx = HubView {
        client: c,
        endpoint,
        token,
        r: r.clone(),
        commit: listing.commit.clone(),
        sparse: mode != Mode::Convert,
    };
    let mut notes = Vec::new();
    let mut weights_bytes = 0;
    for f in here {
        let name = &f.path[prefix.len()..];
        if !name.split('/').all(safe_name) {
            notes.push(format!(
                "{}: a file name not laid out locally; not read",
                weightport_core::sanitize(&f.path)
            ));
            continue;
        }
        let at = root.join(name);
        if let Some(parent) = at.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, "create", e))?;
        }
        match placement(f, mode) {
            Placement::Ranged => {
                weights_bytes += f.size.unwrap_or(0);
                ctx.ranged(&at, f)?
            }
            Placement::Whole => ctx.whole(&at, f)?,
            Placement::LeftOut(why) => notes.push(format!(
                "{}: {why}; not read",
                weightport_core::sanitize(&f.path)
            )),
        }
    }
    let path = if is_file {
        root.join(&r.path[prefix.len()..])
    } else {
        root
    };
    Ok(RemoteInput {
        path,
        shown: format!("hf://{}@{}/{}", r.repo, listing.commit, r.path),
        commit: Some(listing.commit),
        notes,
        weights_bytes,
        view,
    })
}

/// What laying out one Hub view needs.
struct HubView {
    client: Client,
    endpoint: String,
    token: Option<Token>,
    r: HubRef,
    commit: String,
    sparse: bool,
}

impl HubView {
    fn target(&self, f: &Sibling) -> (String, Target) {
        let url = hub::resolve_url(&self.endpoint, &self.r, &self.commit, &f.path);
        let shown = format!("hf://{}@{}/{}", self.r.repo, self.commit, f.path);
        let t = Target {
            url,
            token: self.token.clone(),
            expect: Expect {
                len: f.size,
                commit: Some(self.commit.clone()),
                sha256: f.lfs_sha256.clone(),
            },
            sign: None,
        };
        (shown, t)
    }

    fn ranged(&self, path: &Path, f: &Sibling) -> Result<()> {
        let (shown, t) = self.target(f);
        record(path, &shown, f.lfs_sha256.clone());
        stand_in(path, shown, t, self.sparse)
    }

    /// Fetches `f` whole into `path`, checked against its listed size and LFS sha256.
    fn whole(&self, path: &Path, f: &Sibling) -> Result<()> {
        let (shown, t) = self.target(f);
        let got = fetch_whole(&self.client, path, &shown, &t, f.lfs_sha256.as_deref())?;
        record(path, &shown, Some(got));
        Ok(())
    }
}

/// Fetches `t` whole into `path` (checked against its listed size and, given one, the sha256);
/// returns the sha256 of the bytes fetched.
fn fetch_whole(
    client: &Client,
    path: &Path,
    shown: &str,
    t: &Target,
    sha256: Option<&str>,
) -> Result<String> {
    let o = RemoteObject::open(client, path, shown, t)?;
    let mut bytes = vec![0u8; o.len() as usize];
    o.read_at(0, &mut bytes)?;
    let got = format!("{:x}", Sha256::digest(&bytes));
    if let Some(want) = sha256 {
        if !got.eq_ignore_ascii_case(want) {
            return Err(Error::io(
                path,
                "fetch",
                std::io::Error::other(format!("{shown}: sha256 {got}, but the Hub lists {want}")),
            ));
        }
    }
    std::fs::write(path, &bytes).map_err(|e| Error::io(path, "write", e))?;
    Ok(got)
}
