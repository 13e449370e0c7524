//! Remote inputs (`hf://`, `https://`) on the command line: each is laid out as a local view
//! by weightport-remote before the command runs, and the command is given the view's path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use weightport_core::{Error, Identity, Storage};
use weightport_remote::{is_remote, RemoteInput};

use crate::args::Command;
use crate::job::Job;

/// The share of `--max-memory` the read-ahead of remote inputs may hold (bytes being fetched
/// and fetched but not yet read): an eighth, at most 64 MiB.
fn read_ahead_of(max_memory: Option<u64>) -> u64 {
    let budget = max_memory.unwrap_or_else(weightport_engine::default_max_memory);
    (budget / 8).min(64 << 20)
}

/// Replaces `p` by its view's path when it is remote; the opened input is kept in `held`.
fn localize_one(p: &mut PathBuf, held: &mut Vec<RemoteInput>) -> Result<(), Error> {
    localize_as(p, held, weightport_remote::open)
}

/// [`localize_one`], laying the view out with `open`.
fn localize_as(
    p: &mut PathBuf,
    held: &mut Vec<RemoteInput>,
    open: fn(&str) -> Result<RemoteInput, Error>,
) -> Result<(), Error> {
    if !is_remote(p) {
        return Ok(());
    }
    weightport_remote::install();
    let r = open(&p.to_string_lossy())?;
    for n in &r.notes {
        eprintln!("weightport: {}: {n}", r.shown);
    }
    *p = r.path.clone();
    held.push(r);
    Ok(())
}

/// `--imatrix` and `--metadata` given as remote addresses, laid out as inputs are: a GGUF
/// importance matrix read by ranges through its view's stand-in, a `.dat` matrix or the
/// metadata JSON fetched whole into the view (checked against the listed size and sha256).
fn localize_sides(
    q: &mut crate::args::QuantArgs,
    held: &mut Vec<RemoteInput>,
    open: fn(&str) -> Result<RemoteInput, Error>,
) -> Result<(), Error> {
    if let Some(p) = q.imatrix.as_mut().filter(|p| is_remote(p)) {
        q.imatrix_given = Some(weightport_remote::answers::shown_url(&p.to_string_lossy()));
        localize_as(p, held, open)?;
    }
    if let Some(p) = q.metadata.as_mut() {
        localize_as(p, held, open)?;
    }
    Ok(())
}

/// A plan's units read its `--imatrix`/`--metadata` files themselves, maybe elsewhere: those
/// must be local (or mounted) paths.
fn sides_are_local(q: &crate::args::QuantArgs, command: &str) -> Result<(), Error> {
    let given = [("--imatrix", &q.imatrix), ("--metadata", &q.metadata)];
    match given
        .into_iter()
        .find_map(|(flag, p)| p.as_ref().filter(|p| is_remote(p)).map(|p| (flag, p)))
    {
        None => Ok(()),
        Some((flag, p)) => Err(Error::Usage(format!(
            "{command}: {flag} {}: a plan's units read this file themselves; give a local \
             (or mounted) path",
            weightport_remote::answers::shown_url(&p.to_string_lossy())
        ))),
    }
}

/// `edit` rewrites its target in place, which a remote file cannot be; its other inputs are
/// refused too rather than half supported.
fn edit_is_local(a: &crate::args::EditArgs) -> Result<(), Error> {
    if is_remote(&a.target) {
        return Err(Error::Usage(format!(
            "{}: edit rewrites its target in place, and a remote file cannot be rewritten; \
             convert it to a local file first (weightport convert {} -o FILE), then edit that",
            weightport_remote::answers::shown_url(&a.target.to_string_lossy()),
            weightport_remote::answers::shown_url(&a.target.to_string_lossy()),
        )));
    }
    let others = a.mask.iter().chain(&a.add).chain(&a.apply);
    if let Some(p) = others.into_iter().find(|p| is_remote(p)) {
        return Err(Error::Usage(format!(
            "{}: edit reads its --mask, --add and --apply files locally only",
            weightport_remote::answers::shown_url(&p.to_string_lossy())
        )));
    }
    Ok(())
}

/// An attestation records each remote file's published sha256 (the Hub's LFS sha256); a file
/// without one would have to be downloaded whole a second time to be hashed, so the
/// attestation is refused before anything is converted.
fn attestable<'a>(held: impl IntoIterator<Item = &'a RemoteInput>) -> Result<(), Error> {
    let missing: Vec<String> = held.into_iter().flat_map(|r| r.without_digest()).collect();
    match missing.first() {
        None => Ok(()),
        Some(first) => Err(Error::Usage(format!(
            "--attest: {first}{} has no sha256 published by its server (the Hub lists one for \
             LFS files only), and weightport does not download a file a second time to hash \
             it: attest the conversion of a local copy",
            match missing.len() {
                1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            }
        ))),
    }
}

/// Lays out every remote input of `cmd` (convert, inspect, verify, scan, diff, delta, slice) and
/// points the command at the views; the returned inputs must live until the command is done.
/// `edit` given a remote input is refused; a job file's (and `convert` with several `-o`'s)
/// are laid out by [`localize_job`], a plan's by `unit` and `finish` ([`localize_plan`]). A scan's view holds every file under the
/// address (its notes are files not scanned, which `scan` reports as unread). `convert` (but a
/// dry run), `verify` and `delta`, which read the weights whole, read them ahead within `max_memory` (see
/// [`read_ahead_of`]), with a bar of the bytes fetched.
pub(crate) fn localize(
    cmd: &mut Command,
    max_memory: Option<u64>,
) -> Result<Vec<RemoteInput>, Error> {
    let mut held = Vec::new();
    // The commands that read the weights whole (not a dry run, a scan or an inspection).
    let streams = match cmd {
        Command::Convert(a) => !a.dry_run,
        Command::Verify(_) | Command::Delta(_) => true,
        _ => false,
    };
    if streams {
        weightport_remote::set_read_ahead(read_ahead_of(max_memory));
    }
    match cmd {
        // Several outputs: the job they make lays its inputs out ([`localize_job`]).
        Command::Convert(a) if crate::multi::is_multi(a) => {}
        Command::Convert(a) => {
            // A dry run reads headers only: in small pieces, not the conversion's blocks.
            let open = match a.dry_run {
                true => weightport_remote::open_for_plan,
                false => weightport_remote::open,
            };
            for p in &mut a.inputs {
                localize_as(p, &mut held, open)?;
            }
            localize_sides(&mut a.quant, &mut held, open)?;
            if a.attest.is_some() {
                attestable(&held)?;
            }
        }
        Command::Inspect(a) => localize_one(&mut a.input, &mut held)?,
        Command::Verify(a) => {
            localize_one(&mut a.path, &mut held)?;
            if let Some(p) = &mut a.against {
                localize_one(p, &mut held)?;
            }
        }
        Command::Diff(a) => {
            localize_one(&mut a.a, &mut held)?;
            localize_one(&mut a.b, &mut held)?;
        }
        // Read-only sides: compared and hashed front to back through their objects.
        Command::Delta(a) => {
            localize_one(&mut a.old, &mut held)?;
            localize_one(&mut a.new, &mut held)?;
        }
        Command::Slice(a) => localize_one(&mut a.input, &mut held)?,
        Command::Edit(a) => edit_is_local(a)?,
        // A plan's units each lay the inputs out again from the pinned addresses.
        Command::Plan(a) => {
            sides_are_local(&a.convert.quant, "plan")?;
            for p in a.convert.inputs.iter_mut().filter(|p| is_remote(p)) {
                refuse_signed(p)?;
                plan_hooks();
                let mut one = Vec::new();
                localize_as(p, &mut one, weightport_remote::open_for_plan)?;
                pin(&one);
                held.extend(one);
            }
        }
        Command::Scan(a) if is_remote(&a.input) => {
            weightport_remote::install();
            let r = weightport_remote::open_for_scan(&a.input.to_string_lossy())?;
            a.input = r.path.clone();
            held.push(r);
        }
        _ => {}
    }
    let weights: u64 = held.iter().map(|r| r.weights_bytes).sum();
    if weights > 0 && streams {
        crate::progress::fetching(weights);
    }
    Ok(held)
}

/// Lays out every remote input of `job`'s outputs once (one view per address, kept by the
/// caller until the run ends, so every output that reads it reads the same commit and ETags)
/// and points the outputs at the views; `given` keeps the addresses. A dry run reads headers
/// only (small pieces); otherwise the weights are read ahead within `max_memory`. An output
/// with `attest` whose remote input has a file without a published sha256 is refused before
/// anything is converted, as `convert --attest` refuses it.
pub(crate) fn localize_job(
    job: &mut Job,
    dry_run: bool,
    max_memory: Option<u64>,
) -> Result<Vec<RemoteInput>, Error> {
    let mut held: Vec<RemoteInput> = Vec::new();
    let mut views: HashMap<PathBuf, usize> = HashMap::new();
    let open = match dry_run {
        true => weightport_remote::open_for_plan,
        false => weightport_remote::open,
    };
    for o in &mut job.outputs {
        let label = o.label(&job.file);
        let labelled = |e: Error| match e {
            Error::Usage(m) => Error::Usage(format!("{label}: {m}")),
            e => e,
        };
        let mut mine = Vec::new();
        for p in o.args.inputs.iter_mut().filter(|p| is_remote(p)) {
            if held.is_empty() && !dry_run {
                weightport_remote::set_read_ahead(read_ahead_of(max_memory));
            }
            let i = match views.get(p.as_path()) {
                Some(&i) => i,
                None => {
                    let (mut at, mut one) = (p.clone(), Vec::new());
                    if let Err(e) = localize_as(&mut at, &mut one, open) {
                        // The error names the request; say which output's input it was.
                        let shown = weightport_remote::answers::shown_url(&p.to_string_lossy());
                        eprintln!("weightport: {label}: input {shown} could not be opened");
                        return Err(e);
                    }
                    views.insert(p.clone(), held.len());
                    held.extend(one);
                    held.len() - 1
                }
            };
            *p = held[i].path.clone();
            mine.push(i);
        }
        let mut sides = Vec::new();
        localize_sides(&mut o.args.quant, &mut sides, open).map_err(labelled)?;
        for r in sides {
            mine.push(held.len());
            held.push(r);
        }
        if o.args.attest.is_some() {
            attestable(mine.iter().map(|&i| &held[i])).map_err(labelled)?;
        }
    }
    let weights: u64 = held.iter().map(|r| r.weights_bytes).sum();
    if weights > 0 && !dry_run {
        crate::progress::fetching(weights);
    }
    Ok(held)
}

/// A file of a remote input's view as a job's state records it (see [`identity`]).
pub(crate) struct RemoteId {
    /// Its address: `hf://ORG/REPO@COMMIT/PATH` (the commit the revision was resolved to),
    /// `s3://BUCKET/KEY`, an `https://` URL without its query.
    pub address: String,
    /// Its sha256: the Hub's LFS sha256, or the bytes' own for a file fetched whole.
    pub sha256: Option<String>,
    /// The ETag every ranged read of it is pinned to (none for a file fetched whole).
    pub etag: Option<String>,
    /// Its length in bytes.
    pub len: u64,
}

/// Whether `path` is a file of an open remote input's view.
pub(crate) fn is_view(path: &Path) -> bool {
    weightport_remote::material(path).is_some()
}

/// The identity of the view's file at `path` (`None`: not a file of a view): its address, its
/// published sha256 and the ETag its reads are pinned to. A file read by ranges is opened for
/// it (one request, the first read the conversion then shares: the object and its ETag are
/// kept for the view's life); nothing of the view's local path, inode or times is in it.
pub(crate) fn identity(path: &Path) -> Option<Result<RemoteId, Error>> {
    let m = weightport_remote::material(path)?;
    let opened = weightport_remote::RemoteFiles.open(path, ", expected a file");
    Some(opened.map(|src| {
        let etag = match src.identity() {
            Identity::Object { etag, .. } => Some(etag.clone()),
            _ => None,
        };
        RemoteId {
            address: m.shown,
            sha256: m.sha256,
            etag,
            len: src.len(),
        }
    }))
}

/// `path` as messages and `--json` show it: a view's file by its remote address.
pub(crate) fn shown_path(path: &Path) -> String {
    match weightport_remote::material(path) {
        Some(m) => m.shown,
        None => path.display().to_string(),
    }
}

/// A plan file is read by every unit, maybe on other machines, and holds no secret: an
/// `https://` URL with a query (a signed URL's signature) or user information is refused.
fn refuse_signed(p: &Path) -> Result<(), Error> {
    let s = p.to_string_lossy();
    let shown = weightport_remote::answers::shown_url(&s);
    if s.starts_with("https://") && shown != s {
        return Err(Error::Usage(format!(
            "plan: {shown}: a plan file never holds a URL's query or user information (a \
             signed URL's signature), and its units could not read the file without them; \
             convert it with `weightport convert`, or plan from a URL without a query"
        )));
    }
    Ok(())
}

/// The pinned address of each open view's input (a Hub revision at its commit), by the
/// view's path: what a plan file names the input by.
fn pinned() -> &'static std::sync::Mutex<HashMap<PathBuf, String>> {
    static P: std::sync::OnceLock<std::sync::Mutex<HashMap<PathBuf, String>>> =
        std::sync::OnceLock::new();
    P.get_or_init(Default::default)
}

fn pin(held: &[RemoteInput]) {
    let mut p = pinned().lock().unwrap_or_else(|e| e.into_inner());
    for r in held {
        p.insert(r.path.clone(), r.shown.clone());
    }
}

/// How a plan names an input (file): a view's by its remote address.
fn plan_name(path: &Path) -> String {
    let p = pinned().lock().unwrap_or_else(|e| e.into_inner());
    match p.get(path) {
        Some(a) => a.clone(),
        None => shown_path(path),
    }
}

/// A view file's identity as a plan records it.
fn plan_identity(path: &Path) -> Option<Result<serde_json::Value, Error>> {
    let id = identity(path)?;
    Some(id.map(|id| {
        serde_json::json!({
            "path": id.address, "size": id.len, "sha256": id.sha256, "etag": id.etag,
            "hashed": "remote",
        })
    }))
}

/// The identity now of the remote file a plan recorded at `address`.
fn plan_now(address: &str) -> Result<serde_json::Value, Error> {
    let gone = || {
        Error::Usage(format!(
            "{address}: not among the files of the plan's inputs as laid out now"
        ))
    };
    let path = weightport_remote::view_file(address).ok_or_else(gone)?;
    plan_identity(&path).ok_or_else(gone)?
}

/// Plans record remote input files by address, sha256 and ETag (see
/// `weightport_units::RemoteInputs`).
fn plan_hooks() {
    weightport_units::set_remote_inputs(Some(weightport_units::RemoteInputs {
        identity: plan_identity,
        now: plan_now,
        name: plan_name,
    }));
}

/// Lays out the remote inputs a plan file names (pinned addresses: a Hub file at the commit
/// `plan` resolved) for `unit` or `finish`, each read in exact pieces (a unit reads its
/// tensors' ranges, not the whole file), and points `inputs` at the views.
pub(crate) fn localize_plan(inputs: &mut [PathBuf]) -> Result<Vec<RemoteInput>, Error> {
    let mut held = Vec::new();
    for p in inputs.iter_mut().filter(|p| is_remote(p)) {
        plan_hooks();
        let mut one = Vec::new();
        localize_as(p, &mut one, weightport_remote::open_for_plan)?;
        pin(&one);
        held.extend(one);
    }
    Ok(held)
}
