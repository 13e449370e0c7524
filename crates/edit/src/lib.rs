//! weightport-edit: weight surgery without loading the model.
//!
//! A safetensors or GGUF file is an addressable table: every tensor's bytes sit at an offset
//! its header gives. This crate changes those bytes in place, as safely as `convert` writes a
//! new file, and reads them the same way:
//!
//! * [`edit`]: `--set NAME[SLICE]=VALUE`, `--mask`, `--add`, `--replace` ([`ops`]) on a file or
//!   an HF repo, in place ([`txn`]): only the changed byte ranges are written, behind an undo
//!   journal of their pre-images made durable first ([`journal`]), under the locks `convert`
//!   takes ([`lock`]); the written ranges are read back and checked. A killed edit is rolled
//!   back by the next opener ([`lock::settle`], which the registry calls for every file it
//!   opens) or by [`recover`]; [`undo`] reverts the last edit made with `keep_undo`.
//! * [`patch`]: [`patch::delta`] writes the changed row blocks of NEW against OLD as a
//!   safetensors patch; [`patch::apply`] turns OLD into a byte-identical NEW through the same
//!   transaction, refusing a base whose sha256 differs.
//! * [`diff`] and [`slice`] read any [`weightport_core::TensorSource`] (the registry's readers,
//!   opened by the caller): a per-tensor comparison by content hash first, and the bytes of one
//!   selection.
//!
//! Values are cast exactly as torch casts a Python scalar into a tensor ([`scalar`]); quantized
//! GGUF rows are written as `convert --quant` writes them (weightport-quant's kernels).
#![deny(missing_docs)]

pub mod diff;
mod journal;
mod lock;
mod ops;
pub mod patch;
pub mod recover;
pub mod scalar;
mod select;
pub mod slice;
mod target;
mod txn;

use std::path::Path;

use weightport_core::staging::sync_dir;
use weightport_core::{shown, Error, Knob, Location, Result};
use xxhash_rust::xxh3::Xxh3;

pub use lock::{notices, settle, take_notices, ReadGuard};
pub use ops::Op;
pub use select::Selection;
pub use target::{Container, Target};
pub use txn::{EditOptions, EditReport};

/// The outcome of an edit: the target as opened and what changed.
#[derive(Debug)]
pub struct Edited {
    /// The target.
    pub target: Target,
    /// What changed (or would, dry).
    pub report: EditReport,
}

/// Rolls back any killed edit of `t`'s files; returns the texts saying what was restored.
fn settle_all(t: &Target) -> Result<(Vec<ReadGuard>, Vec<String>)> {
    let mut guards = Vec::new();
    let mut notes = Vec::new();
    for f in &t.files {
        let (g, n) = lock::settle_noting(&f.shown)?;
        guards.push(g);
        notes.extend(n);
    }
    Ok((guards, notes))
}

/// Takes the edit's locks and refuses to go on if a journal is (still, or again) pending.
fn lock_target(t: &Target) -> Result<lock::EditLock> {
    let l = lock::EditLock::acquire(t)?;
    for f in &t.files {
        if let Some(j) = recover::pending_for(&f.path)? {
            return Err(Error::Usage(format!(
                "{}: an interrupted edit's journal {} appeared; run {} first",
                shown(&f.shown),
                shown(&j),
                Knob::Recover
            )));
        }
    }
    Ok(l)
}

/// Edits `path` in place (module docs). The texts of rolled-back killed edits are recorded as
/// notices ([`take_notices`]).
pub fn edit(path: &Path, ops: &[Op], opts: EditOptions) -> Result<Edited> {
    if ops.is_empty() {
        return Err(Error::Usage(format!(
            "nothing to do: give {}, {}, {}, {} or {}",
            Knob::Set,
            Knob::Mask,
            Knob::Add,
            Knob::Replace,
            Knob::Apply
        )));
    }
    let target = Target::open(path)?;
    let (guards, notes) = settle_all(&target)?;
    notes.into_iter().for_each(lock::notice);
    let edits = ops::resolve(&target, ops)?;
    let lock = if opts.dry_run {
        None
    } else {
        drop(guards);
        Some(lock_target(&target)?)
    };
    let report = txn::run(&target, &edits, lock.as_ref(), opts)?;
    Ok(Edited { target, report })
}

/// `edit --recover`: rolls back a killed edit of `path`; the texts say what was restored (empty:
/// there was nothing to recover).
pub fn recover(path: &Path) -> Result<Vec<String>> {
    let target = Target::open(path)?;
    Ok(settle_all(&target)?.1)
}

/// `edit --undo`: reverts the last edit of `path` made with `keep_undo`, if the bytes it wrote
/// are still there; the text says what was restored.
pub fn undo(path: &Path) -> Result<String> {
    let t = Target::open(path)?;
    let (guards, notes) = settle_all(&t)?;
    notes.into_iter().for_each(lock::notice);
    drop(guards);
    let l = lock_target(&t)?;
    let upath = t.side("wp-undo");
    if std::fs::symlink_metadata(&upath).is_err() {
        return Err(Error::Usage(format!(
            "{}: no undo journal ({}): the last edit was not made with {}, was undone \
             already, or a later edit replaced it",
            shown(&t.given),
            shown(&upath),
            Knob::KeepUndo
        )));
    }
    let j = journal::Journal::open(&upath)?;
    check_undo(&t, &j, &l.files)?;
    let jpath = t.side("wp-journal");
    std::fs::rename(&upath, &jpath).map_err(|e| Error::io(&jpath, "start undo", e))?;
    sync_dir(&t.dir)?;
    drop(j);
    recover::roll_back_held(&jpath, &l.files)
}

/// An undo journal must name the target's files, and the bytes the edit wrote must still be
/// there (else undoing would lose a later change).
fn check_undo(t: &Target, j: &journal::Journal, files: &[std::fs::File]) -> Result<()> {
    let same = j.files.len() == t.files.len()
        && j.files.iter().zip(&t.files).all(|(a, b)| {
            a.name == target::file_name(&b.path) && (a.dev, a.ino, a.size) == (b.dev, b.ino, b.size)
        });
    let post = j.post.as_ref().ok_or_else(|| {
        Error::malformed(
            Location::file(&j.path),
            None,
            "undo journal without post-image hashes",
        )
    })?;
    if !same {
        return Err(Error::Refused {
            at: Location::file(&t.given),
            reason: format!("the undo journal {} was written for other files (replaced since?); nothing was changed", shown(&j.path)),
        });
    }
    let mut buf = vec![0u8; 1 << 20];
    for (r, want) in j.ranges.iter().zip(post) {
        let mut h = Xxh3::new();
        let mut at = 0;
        while at < r.len {
            let n = (r.len - at).min(buf.len() as u64) as usize;
            std::os::unix::fs::FileExt::read_exact_at(&files[r.file], &mut buf[..n], r.offset + at)
                .map_err(|e| Error::io(&t.files[r.file].shown, "read", e))?;
            h.update(&buf[..n]);
            at += n as u64;
        }
        if h.digest128() != *want {
            return Err(Error::Refused {
                at: Location::file(&t.files[r.file].shown)
                    .tensor(r.tensor.clone())
                    .at(r.offset),
                reason: format!(
                    "changed since the edit being undone (bytes {}..{}); undoing would lose that \
                     change, so nothing was changed",
                    r.offset,
                    r.offset + r.len
                ),
            });
        }
    }
    Ok(())
}
