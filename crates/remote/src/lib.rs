//! Remote inputs read where they live, by byte ranges: `hf://ORG/REPO[@REVISION][/PATH]` (the
//! Hugging Face Hub's layout) and `https://…/FILE`.
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
}

fn table() -> &'static Mutex<HashMap<PathBuf, Entry>> {
    static T: OnceLock<Mutex<HashMap<PathBuf, Entry>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

/// The client of the process, one per `SSL_CERT_FILE` (its roots are read when it is made).
fn client(name: &Path) -> Result<Client> {
    type Clients = HashMap<Option<std::ffi::OsString>, std::result::Result<Client, String>>;
    static C: OnceLock<Mutex<Clients>> = OnceLock::new();
    let mut c = C
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    c.entry(std::env::var_os("SSL_CERT_FILE"))
        .or_insert_with(Client::new)
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
        if let Some(o) = &e.opened {
            return Some(Ok(o.clone()));
        }
        let opened = client(name).and_then(|c| RemoteObject::open(&c, name, &e.shown, &e.target));
        let opened = opened.map(|o| o.reading_ahead(&e.target));
        Some(opened.map(|o| {
            let o = Arc::new(o);
            e.opened = Some(o.clone());
            o as Arc<dyn ByteSource>
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

impl Drop for RemoteInput {
    fn drop(&mut self) {
        let root = self.view.path().to_path_buf();
        let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
        t.retain(|p, _| !p.starts_with(&root));
    }
}

/// Opens the remote input `arg` (see the module docs).
pub fn open(arg: &str) -> Result<RemoteInput> {
    if arg.starts_with("hf://") {
        return open_hub(arg);
    }
    if arg.starts_with("https://") {
        return open_https(arg);
    }
    let why = if arg.starts_with("http://") {
        "plain http is not read (use https)"
    } else {
        "s3:// inputs are not read by this build yet"
    };
    Err(Error::Usage(format!(
        "{}: {why}",
        weightport_core::sanitize(arg)
    )))
}

fn view_dir() -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("weightport-remote.")
        .tempdir()
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
fn stand_in(path: &Path, shown: String, target: Target) -> Result<()> {
    std::fs::write(path, b"").map_err(|e| Error::io(path, "create", e))?;
    let entry = Entry {
        shown,
        target,
        opened: None,
    };
    table()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(path.to_path_buf(), entry);
    Ok(())
}

fn open_https(arg: &str) -> Result<RemoteInput> {
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
    };
    stand_in(&path, shown_url(arg), target)?;
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

fn placement(s: &Sibling) -> Placement {
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

fn open_hub(arg: &str) -> Result<RemoteInput> {
    let r = HubRef::parse(arg)?;
    let endpoint = hub::endpoint();
    let token = hub::token(&endpoint);
    let c = client(Path::new(&shown_url(&endpoint)))?;
    let listing = hub::list(&c, &endpoint, &r, token.as_ref())?;
    let is_file = listing.files.iter().any(|f| f.path == r.path);
    let dir = match (is_file, r.path.rsplit_once('/')) {
        (true, Some((d, _))) => d.to_string(),
        (true, None) => String::new(),
        (false, _) => r.path.clone(),
    };
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    let here: Vec<&Sibling> = listing
        .files
        .iter()
        .filter(|f| {
            f.path
                .strip_prefix(&prefix)
                .is_some_and(|n| !n.contains('/'))
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
    };
    let mut notes = Vec::new();
    let mut weights_bytes = 0;
    for f in here {
        let name = &f.path[prefix.len()..];
        if !safe_name(name) {
            notes.push(format!(
                "{}: a file name not laid out locally; not read",
                weightport_core::sanitize(&f.path)
            ));
            continue;
        }
        match placement(f) {
            Placement::Ranged => {
                weights_bytes += f.size.unwrap_or(0);
                ctx.ranged(&root.join(name), f)?
            }
            Placement::Whole => ctx.whole(&root.join(name), f)?,
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
        };
        (shown, t)
    }

    fn ranged(&self, path: &Path, f: &Sibling) -> Result<()> {
        let (shown, t) = self.target(f);
        stand_in(path, shown, t)
    }

    /// Fetches `f` whole into `path`, checked against its listed size and LFS sha256.
    fn whole(&self, path: &Path, f: &Sibling) -> Result<()> {
        let (shown, t) = self.target(f);
        let o = RemoteObject::open(&self.client, path, &shown, &t)?;
        let mut bytes = vec![0u8; o.len() as usize];
        o.read_at(0, &mut bytes)?;
        if let Some(want) = &f.lfs_sha256 {
            let got = format!("{:x}", Sha256::digest(&bytes));
            if !got.eq_ignore_ascii_case(want) {
                return Err(Error::io(
                    path,
                    "fetch",
                    std::io::Error::other(format!(
                        "{shown}: sha256 {got}, but the Hub lists {want}"
                    )),
                ));
            }
        }
        std::fs::write(path, &bytes).map_err(|e| Error::io(path, "write", e))
    }
}
