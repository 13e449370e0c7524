//! Remote inputs (`hf://`, `https://`) on the command line: each is laid out as a local view
//! by weightport-remote before the command runs, and the command is given the view's path.

use std::path::PathBuf;

use weightport_core::Error;
use weightport_remote::{is_remote, RemoteInput};

use crate::args::Command;

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
fn attestable(held: &[RemoteInput]) -> Result<(), Error> {
    let missing: Vec<String> = held.iter().flat_map(|r| r.without_digest()).collect();
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

/// Lays out every remote input of `cmd` (convert, inspect, verify, scan, diff, slice) and
/// points the command at the views; the returned inputs must live until the command is done.
/// `edit`, `delta`, `plan` (so `unit`/`finish`) and job files given a remote input are
/// refused. A scan's view holds every file under the
/// address (its notes are files not scanned, which `scan` reports as unread). `convert` (but a
/// dry run) and `verify`, which read the weights whole, read them ahead within `max_memory` (see
/// [`read_ahead_of`]), with a bar of the bytes fetched.
pub(crate) fn localize(
    cmd: &mut Command,
    max_memory: Option<u64>,
) -> Result<Vec<RemoteInput>, Error> {
    let mut held = Vec::new();
    // The commands that read the weights whole (not a dry run, a scan or an inspection).
    let streams = match cmd {
        Command::Convert(a) => !a.dry_run,
        Command::Verify(_) => true,
        _ => false,
    };
    if streams {
        weightport_remote::set_read_ahead(read_ahead_of(max_memory));
    }
    match cmd {
        Command::Convert(a) => {
            // A dry run reads headers only: in small pieces, not the conversion's blocks.
            let open = match a.dry_run {
                true => weightport_remote::open_for_plan,
                false => weightport_remote::open,
            };
            for p in &mut a.inputs {
                localize_as(p, &mut held, open)?;
            }
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
        Command::Delta(a) => {
            if let Some(r) = [&a.old, &a.new].into_iter().find(|p| is_remote(p)) {
                return Err(Error::Usage(format!(
                    "{}: delta compares and hashes its two inputs whole, as local files \
                     (the patch records both files' sha256); convert the remote one to a \
                     local file first",
                    weightport_remote::answers::shown_url(&r.to_string_lossy())
                )));
            }
        }
        Command::Slice(a) => localize_one(&mut a.input, &mut held)?,
        Command::Edit(a) => edit_is_local(a)?,
        Command::Plan(a) => {
            if let Some(r) = a.convert.inputs.iter().find(|p| is_remote(p)) {
                return Err(Error::Usage(format!(
                    "plan: {}: a plan's units read local inputs only in this build (a plan \
                     file would have to pin the commit every unit reads); convert it with \
                     `weightport convert`",
                    weightport_remote::answers::shown_url(&r.to_string_lossy())
                )));
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
