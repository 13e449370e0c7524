//! `weightport scan`: the security audit of a file or of every file under a directory.
//!
//! Files are told apart by content, never by name: every regular file is sniffed, and the ones
//! that can carry code — pickles of any protocol (torch ZIP, legacy, TorchScript, raw), NumPy
//! `.npy`/`.npz` (object arrays are pickles) — are audited; the rest are listed as skipped
//! with the reason. Symlinks are followed under `convert`'s rule (their target must lie inside
//! the scanned directory or its Hugging Face cache entry's `blobs/`), so an HF cache snapshot,
//! which is all symlinks, is scanned. Fail-closed: a file that could not be read, or a symlink
//! that was not followed, is *unverified*, and a scan with an unverified file is not a pass.

use std::path::{Path, PathBuf};

use weightport_core::{Format, ReadOptions, Result, Sniffed};
use weightport_pickle::scan::{rules, ScanFinding};
pub use weightport_pickle::scan::{ScanReport, Verdict};

use crate::registry::head_of;

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

/// What a file is, for the scan.
enum Kind {
    /// Audit as a pickle-bearing checkpoint.
    Pickle,
    /// Audit as NumPy.
    Numpy,
    /// Holds no code (the reason says what it is).
    NoCode(String),
}

fn skipped(path: &Path, reason: impl Into<String>, unverified: bool) -> Skipped {
    Skipped {
        path: path.to_path_buf(),
        reason: reason.into(),
        unverified,
    }
}

/// Sniffs `path` by content.
fn classify(path: &Path, head: &[u8]) -> Kind {
    match weightport_core::sniff(head) {
        Sniffed::Zip | Sniffed::Format(Format::PytorchZip) | Sniffed::Format(Format::Npz) => {
            if weightport_npz::probe_npz(path, head) {
                Kind::Numpy
            } else if weightport_pickle::zip_has_pickle(path) == Some(false) {
                Kind::NoCode("a ZIP archive with no pickle in it".into())
            } else {
                Kind::Pickle
            }
        }
        Sniffed::Format(Format::Npy) => Kind::Numpy,
        Sniffed::Format(Format::PytorchLegacy) => Kind::Pickle,
        Sniffed::Format(f) => Kind::NoCode(format!("{f}: holds no code")),
        Sniffed::LfsPointer => Kind::NoCode("a Git LFS pointer (the weights are not here)".into()),
        Sniffed::Html => Kind::NoCode("an HTML page".into()),
        Sniffed::Empty => Kind::NoCode("empty".into()),
        // A pickle can open with a byte that also opens these formats: walk it to be sure.
        l @ Sniffed::Lookalike(_) if !looks_like_pickle(path) => {
            Kind::NoCode(l.describe().trim_start_matches("is ").to_string())
        }
        Sniffed::Lookalike(_) => Kind::Pickle,
        Sniffed::Unknown if weightport_pickle::probe(path, head) || looks_like_pickle(path) => {
            Kind::Pickle
        }
        Sniffed::Unknown => Kind::NoCode("not a pickle (text or another format)".into()),
    }
}

/// How much of a file of unknown content is walked to tell a text pickle from other bytes: a
/// pickle names its first global or call long before this.
const SNIFF_WALK_BYTES: u64 = 64 << 20;

/// A protocol 0/1 pickle (no `PROTO` header) is told from text by walking its start.
fn looks_like_pickle(path: &Path) -> bool {
    use std::io::Read;
    let mut bytes = Vec::new();
    let read =
        std::fs::File::open(path).and_then(|f| f.take(SNIFF_WALK_BYTES).read_to_end(&mut bytes));
    if read.is_err() {
        return true; // unreadable here: let the audit report it
    }
    weightport_pickle::walk::walk(&bytes, 1 << 28).looks_like_pickle()
}

/// Audits one file by its kind.
fn audit(path: &Path, kind: &Kind) -> Result<ScanReport> {
    match kind {
        Kind::Pickle => weightport_pickle::scan(path),
        Kind::Numpy => Ok(audit_numpy(path)),
        Kind::NoCode(what) => Ok(ScanReport::single(
            path,
            None,
            ScanFinding {
                offset: None,
                what: what.clone(),
                unsafe_: false,
                rule: rules::NOTE,
            },
        )),
    }
}

/// `.npy`/`.npz`: the reader that `convert` uses decides; an object array (a pickle) is
/// unsafe, as `convert` refuses it, and so is anything else it cannot read.
fn audit_numpy(path: &Path) -> ScanReport {
    let head = head_of(path).unwrap_or_default();
    let npz = !head.starts_with(b"\x93NUMPY");
    let opened = if npz {
        weightport_npz::open_npz(path, &ReadOptions::default()).map(|s| s.tensors().len())
    } else {
        weightport_npz::open_npy(path, &ReadOptions::default()).map(|s| s.tensors().len())
    };
    let format = Some(if npz { Format::Npz } else { Format::Npy });
    match opened {
        Ok(n) => {
            let what = format!("NumPy arrays of numeric dtypes only ({n}): no pickle");
            let mut r = ScanReport::single(path, format, note(what));
            r.tensors = n;
            r
        }
        Err(e) => {
            let object = e.to_string().contains("object array");
            let rule = if object {
                rules::OBJECT_ARRAY
            } else {
                rules::NOT_VERIFIED
            };
            let mut r = ScanReport::single(
                path,
                format,
                ScanFinding {
                    offset: e.location().and_then(|l| l.offset),
                    what: e.to_string(),
                    unsafe_: true,
                    rule,
                },
            );
            r.error = Some(e.to_string());
            r
        }
    }
}

fn note(what: String) -> ScanFinding {
    ScanFinding {
        offset: None,
        what,
        unsafe_: false,
        rule: rules::NOTE,
    }
}

use weightport_core::TensorSource;

/// The walk over a directory tree.
struct Walker {
    root: PathBuf,
    /// Every file found: the path walked and its canonical path.
    files: Vec<(PathBuf, PathBuf)>,
    out: ScanOutcome,
}

impl Walker {
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
            match scan_one(p) {
                Ok(Ok(report)) => self.out.reports.push(report),
                Ok(Err(skip)) => self.out.skipped.push(skip),
                Err(e) => self.out.skipped.push(skipped(p, e.to_string(), true)),
            }
        }
    }
}

/// One file: its report, or why it was skipped.
fn scan_one(p: &Path) -> Result<std::result::Result<ScanReport, Skipped>> {
    let head = match head_of(p) {
        Ok(h) => h,
        Err(weightport_core::Error::Usage(m)) => return Ok(Err(skipped(p, m, false))),
        Err(e) => return Err(e),
    };
    match classify(p, &head) {
        Kind::NoCode(what) => Ok(Err(skipped(p, what, false))),
        kind => audit(p, &kind).map(Ok),
    }
}

/// Scans `path`: a file (audited whatever it is; a file with no code gets a report that says
/// so), or every file under a directory.
pub fn scan(path: &Path) -> Result<ScanOutcome> {
    let meta = std::fs::metadata(path).map_err(|e| weightport_core::Error::io(path, "open", e))?;
    if !meta.is_dir() {
        let head = head_of(path)?;
        let kind = classify(path, &head);
        return Ok(ScanOutcome {
            reports: vec![audit(path, &kind)?],
            skipped: Vec::new(),
        });
    }
    let root = path
        .canonicalize()
        .map_err(|e| weightport_core::Error::io(path, "resolve", e))?;
    let mut w = Walker {
        root,
        files: Vec::new(),
        out: ScanOutcome::default(),
    };
    w.dir(path, 0);
    w.audit_all();
    Ok(w.out)
}
