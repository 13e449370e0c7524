//! `weightport scan`: the security audit of a file or of every file under a directory.
//!
//! Files are told apart by content, never by name: every regular file is sniffed, and the ones
//! that can carry code — pickles of any protocol (torch ZIP, legacy, TorchScript, raw), NumPy
//! `.npy`/`.npz` (object arrays are pickles) — are audited; the rest are listed as skipped
//! with the reason. Symlinks are followed under `convert`'s rule (their target must lie inside
//! the scanned directory or its Hugging Face cache entry's `blobs/`), so an HF cache snapshot,
//! which is all symlinks, is scanned. Fail-closed: a file that could not be read, or a symlink
//! that was not followed, is *unverified*, and a scan with an unverified file is not a pass.
//!
//! Its own crate beside the pickle audit it drives: it drives the pickle and the npz readers
//! both, so inside either format crate it would make one format crate depend on another.
#![deny(missing_docs)]

use std::path::{Path, PathBuf};

use std::sync::Arc;

use memmap2::Mmap;
use weightport_core::{Limits, Result, Storage};
use weightport_pickle::scan::{rules, ScanFinding};
pub use weightport_pickle::scan::{AuditedPickle, ScanReport, Verdict};

use weightport_core::mapped::head_of;

mod content;
mod unpack;

/// Deepest directory nesting walked.
const MAX_DEPTH: usize = 32;

/// A file the scan did not audit, and why.
#[derive(Debug, Clone)]
pub struct Skipped {
    /// The file.
    pub path: PathBuf,
    /// Why it was not audited.
    pub reason: String,
    /// True when it could hold code and was not read (the scan then fails).
    pub unverified: bool,
}

/// Everything a scan found.
#[derive(Debug, Default)]
pub struct ScanOutcome {
    /// One report per audited file, in path order.
    pub reports: Vec<ScanReport>,
    /// Files not audited.
    pub skipped: Vec<Skipped>,
}

impl ScanOutcome {
    /// Files whose verdict is unsafe.
    pub fn unsafe_count(&self) -> usize {
        self.reports
            .iter()
            .filter(|r| r.verdict == Verdict::Unsafe)
            .count()
    }

    /// Files that could hold code and were not read.
    pub fn unverified_count(&self) -> usize {
        self.skipped.iter().filter(|s| s.unverified).count()
    }

    /// A pass: nothing unsafe and nothing unverified.
    pub fn passed(&self) -> bool {
        self.unsafe_count() == 0 && self.unverified_count() == 0
    }
}

fn skipped(path: &Path, reason: impl Into<String>, unverified: bool) -> Skipped {
    Skipped {
        path: path.to_path_buf(),
        reason: reason.into(),
        unverified,
    }
}

/// The walk over a directory tree.
struct Walker<'s> {
    root: PathBuf,
    storage: Option<&'s dyn Storage>,
    /// Every file found: the path walked and its canonical path.
    files: Vec<(PathBuf, PathBuf)>,
    out: ScanOutcome,
}

impl Walker<'_> {
    fn dir(&mut self, dir: &Path, depth: usize) {
        if depth > MAX_DEPTH {
            let why = format!("nested more than {MAX_DEPTH} directories deep: not scanned");
            self.out.skipped.push(skipped(dir, why, true));
            return;
        }
        let entries = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) => {
                let why = format!("cannot read the directory: {e}");
                self.out.skipped.push(skipped(dir, why, true));
                return;
            }
        };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            self.entry(&p, depth);
        }
    }

    fn entry(&mut self, p: &Path, depth: usize) {
        let Ok(meta) = std::fs::symlink_metadata(p) else {
            self.out
                .skipped
                .push(skipped(p, "vanished while scanning", false));
            return;
        };
        if meta.file_type().is_symlink() {
            return self.symlink(p);
        }
        if meta.is_dir() {
            return self.dir(p, depth + 1);
        }
        self.file(p);
    }

    fn symlink(&mut self, p: &Path) {
        let Ok(target) = p.canonicalize() else {
            self.out
                .skipped
                .push(skipped(p, "a broken symlink (nothing to load)", false));
            return;
        };
        if !self.followed(p, &target) {
            let why = format!(
                "a symlink to {} outside the scanned directory (and its Hugging Face cache \
                 entry's blobs/): not followed, so not scanned",
                weightport_core::shown(&target)
            );
            self.out.skipped.push(skipped(p, why, true));
        } else if target.is_dir() {
            let why = "a symlink to a directory inside the scanned tree (scanned where it lies)";
            self.out.skipped.push(skipped(p, why, false));
        } else {
            self.file(p);
        }
    }

    /// `convert`'s rule: inside the root, or inside the `blobs/` of the HF cache entry that
    /// the link's directory is a snapshot of.
    fn followed(&self, link: &Path, target: &Path) -> bool {
        if target.starts_with(&self.root) {
            return true;
        }
        let Some(parent) = link.parent() else {
            return false;
        };
        let name = link.file_name().and_then(|n| n.to_str()).unwrap_or("");
        weightport_hf::resolve_in_repo(parent, name).is_ok()
    }

    /// Files are gathered first and audited once each by [`Walker::audit_all`].
    fn file(&mut self, p: &Path) {
        let canonical = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        self.files.push((p.to_path_buf(), canonical));
    }

    /// Audits each distinct file once, under the name a user knows it by: of several paths to
    /// one file (an HF cache's `snapshots/<rev>/model.bin` and its `blobs/<hash>`), a path
    /// outside a `blobs/` directory, else the first in path order.
    fn audit_all(&mut self) {
        let files = std::mem::take(&mut self.files);
        let in_blobs = |p: &Path| p.components().any(|c| c.as_os_str() == "blobs");
        let mut shown: std::collections::HashMap<&Path, &Path> = std::collections::HashMap::new();
        for (p, c) in &files {
            let best = shown.entry(c.as_path()).or_insert(p.as_path());
            if in_blobs(best) && !in_blobs(p) {
                *best = p.as_path();
            }
        }
        for (p, c) in &files {
            let name = shown[c.as_path()];
            if name != p.as_path() {
                let why = format!(
                    "the same file as {} (scanned once)",
                    weightport_core::shown(name)
                );
                self.out.skipped.push(skipped(p, why, false));
                continue;
            }
            if let Err(e) = scan_one(p, self.storage, &mut self.out) {
                self.out.skipped.push(skipped(p, e.to_string(), true));
            }
        }
    }
}

/// Maps one regular file (a file that cannot be read is returned as the error).
fn map_file(p: &Path) -> Result<Option<Arc<Mmap>>> {
    let head = head_of(p)?;
    if head.is_empty() {
        return Ok(None);
    }
    let (file, _) = weightport_core::mapped::open_input(p, "")?;
    Ok(Some(Arc::new(weightport_core::mapped::map(&file, p)?)))
}

/// The bytes of the file `p`: mapped, or opened through `storage` when one is given.
fn blob_of(p: &Path, storage: Option<&dyn Storage>) -> Result<content::Blob> {
    let Some(storage) = storage else {
        return Ok(content::Blob::mapped(p.to_path_buf(), map_file(p)?));
    };
    let src = storage.open(p, ", expected a file")?;
    let bytes = if src.is_empty() {
        content::Bytes::Empty
    } else {
        content::Bytes::Source(src)
    };
    Ok(content::Blob {
        shown: p.to_path_buf(),
        bytes,
    })
}

/// Audits the file `p` by its content into `out`, unpacking what wraps it.
fn scan_one(p: &Path, storage: Option<&dyn Storage>, out: &mut ScanOutcome) -> Result<()> {
    let blob = match blob_of(p, storage) {
        Ok(b) => b,
        Err(weightport_core::Error::Usage(m)) => {
            out.skipped.push(skipped(p, m, false));
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let limits = Limits::default();
    let mut auditor = content::Auditor {
        out,
        budget: unpack::Budget::new(&limits),
        limits,
    };
    auditor.audit(blob);
    Ok(())
}

/// Scans `path`: a file (audited whatever it is; a file with no code gets a report that says
/// so), or every file under a directory. Files are mapped.
pub fn scan(path: &Path) -> Result<ScanOutcome> {
    scan_with(path, None)
}

/// [`scan`], opening every file through `storage` when one is given (a remote input's view:
/// its stand-ins are read by ranges, and only what the audit needs is read: a ZIP's central
/// directory, local headers and pickles, never a tensor's data).
pub fn scan_with(path: &Path, storage: Option<&dyn Storage>) -> Result<ScanOutcome> {
    let meta = std::fs::metadata(path).map_err(|e| weightport_core::Error::io(path, "open", e))?;
    if !meta.is_dir() {
        head_of(path)?;
        let mut out = ScanOutcome::default();
        scan_one(path, storage, &mut out)?;
        return Ok(single_file(out));
    }
    let root = path
        .canonicalize()
        .map_err(|e| weightport_core::Error::io(path, "resolve", e))?;
    let mut w = Walker {
        root,
        storage,
        files: Vec::new(),
        out: ScanOutcome::default(),
    };
    w.dir(path, 0);
    w.audit_all();
    Ok(w.out)
}

/// A file named on its own gets a report even when it holds no code: the note says what it is.
fn single_file(mut out: ScanOutcome) -> ScanOutcome {
    if out.reports.is_empty() && out.skipped.len() == 1 && !out.skipped[0].unverified {
        let s = out.skipped.remove(0);
        let f = ScanFinding {
            offset: None,
            what: s.reason,
            unsafe_: false,
            rule: rules::NOTE,
        };
        out.reports.push(ScanReport::single(&s.path, None, f));
    }
    out
}
