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
    if !is_remote(p) {
        return Ok(());
    }
    weightport_remote::install();
    let r = weightport_remote::open(&p.to_string_lossy())?;
    for n in &r.notes {
        eprintln!("weightport: {}: {n}", r.shown);
    }
    *p = r.path.clone();
    held.push(r);
    Ok(())
}

fn refuse(what: &str) -> Error {
    Error::Usage(format!(
        "{what} is not available for a remote input in this build"
    ))
}

/// Lays out every remote input of `cmd` (convert, inspect, verify) and points the command at
/// the views; the returned inputs must live until the command is done. Other commands given a
/// remote input are refused. `convert` and `verify`, which read the weights whole, read them
/// ahead within `max_memory` (see [`read_ahead_of`]), with a bar of the bytes fetched.
pub(crate) fn localize(
    cmd: &mut Command,
    max_memory: Option<u64>,
) -> Result<Vec<RemoteInput>, Error> {
    let mut held = Vec::new();
    if matches!(cmd, Command::Convert(_) | Command::Verify(_)) {
        weightport_remote::set_read_ahead(read_ahead_of(max_memory));
    }
    match cmd {
        Command::Convert(a) => {
            if a.inputs.iter().any(|p| is_remote(p)) {
                if a.attest.is_some() {
                    return Err(refuse("an attestation"));
                }
                if a.report.is_some() {
                    return Err(refuse("a quality report"));
                }
            }
            for p in &mut a.inputs {
                localize_one(p, &mut held)?;
            }
        }
        Command::Inspect(a) => localize_one(&mut a.input, &mut held)?,
        Command::Verify(a) => {
            localize_one(&mut a.path, &mut held)?;
            if let Some(p) = &mut a.against {
                localize_one(p, &mut held)?;
            }
        }
        Command::Scan(a) if is_remote(&a.input) => return Err(refuse("scan")),
        _ => {}
    }
    let weights: u64 = held.iter().map(|r| r.weights_bytes).sum();
    if weights > 0 && !matches!(cmd, Command::Inspect(_)) {
        crate::progress::fetching(weights);
    }
    Ok(held)
}
