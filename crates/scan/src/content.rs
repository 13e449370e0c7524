//! One scanned object (a file, or a stream or archive member unpacked from one) audited by its
//! content, as each loader that could take it would see it.
//!
//! - A compressed stream or a tar archive ([`super::unpack`]) is unpacked and what it holds is
//!   audited in turn, under the same name (a stream) or `OUTER!MEMBER` (an archive member).
//! - A ZIP is read as torch reads it when it holds `<prefix>/data.pkl` in any letter case (the
//!   pickle audit), as numpy reads it when it holds `.npy` members, and otherwise member by
//!   member by content (pandas unpickles the one member of a ZIP whatever its name).
//! - Pickles of any protocol and NumPy files are audited; everything else is named and skipped.
//!
//! Fail-closed: a layer that cannot be read (an archive format weightport does not read, a
//! corrupt stream, a cap reached, nesting too deep) is an unsafe finding that says why.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::borrow::Cow;

use memmap2::Mmap;
use weightport_core::archive;
use weightport_core::mapped::LocalFile;
use weightport_core::{ByteSource, Format, Limits, ReadOptions, Sniffed, TensorSource};
use weightport_pickle::scan::{rules, ScanFinding, ScanReport};

use super::unpack::{self, Budget, Codec, Member, Unpacked, Wrapping};
use super::{ScanOutcome, Skipped};

/// How much of a blob of unknown content is walked to tell a text pickle from other bytes: a
/// pickle names its first global or call long before this.
const SNIFF_WALK_BYTES: usize = 64 << 20;

/// Largest object read whole without a map (a compressed stream, a tar or a ZIP of other
/// members, a raw pickle read by ranges): a larger one is an unsafe finding, not a pass.
const MAX_WHOLE_UNMAPPED: u64 = 1 << 30;

/// Where a scanned object's bytes are.
#[derive(Clone)]
pub(crate) enum Bytes {
    Empty,
    /// A local file or an unpacked member, mapped: read whole for free.
    Mapped(Arc<Mmap>),
    /// An object read by ranges (a remote file): only what the audit asks is read.
    Source(Arc<dyn ByteSource>),
}

/// The bytes of one scanned object and the name it is reported under.
pub(crate) struct Blob {
    pub(crate) shown: PathBuf,
    pub(crate) bytes: Bytes,
}

impl Blob {
    pub(crate) fn mapped(shown: PathBuf, map: Option<Arc<Mmap>>) -> Blob {
        let bytes = map.map_or(Bytes::Empty, Bytes::Mapped);
        Blob { shown, bytes }
    }

    fn len(&self) -> u64 {
        match &self.bytes {
            Bytes::Empty => 0,
            Bytes::Mapped(m) => m.len() as u64,
            Bytes::Source(s) => s.len(),
        }
    }

    /// The first `n` bytes (fewer when it is shorter).
    fn head(&self, n: u64) -> weightport_core::Result<Cow<'_, [u8]>> {
        let n = n.min(self.len());
        match &self.bytes {
            Bytes::Empty => Ok(Cow::Borrowed(&[])),
            Bytes::Mapped(m) => Ok(Cow::Borrowed(&m[..n as usize])),
            Bytes::Source(s) => s.range(0, n),
        }
    }

    /// Every byte: what unpacking a stream or an archive needs (capped without a map).
    fn whole(&self) -> weightport_core::Result<Cow<'_, [u8]>> {
        let unmapped = matches!(&self.bytes, Bytes::Source(s) if s.map().is_none());
        if unmapped && self.len() > MAX_WHOLE_UNMAPPED {
            return Err(weightport_core::Error::Limit {
                at: weightport_core::Location::file(&self.shown),
                what: "object read whole without a map",
                needed: self.len(),
                limit: MAX_WHOLE_UNMAPPED,
            });
        }
        self.head(self.len())
    }

    /// The object as a source named `name` (`None`: empty).
    fn source(&self, name: &Path) -> Option<Arc<dyn ByteSource>> {
        match &self.bytes {
            Bytes::Empty => None,
            Bytes::Mapped(m) => Some(Arc::new(LocalFile::from_map(name, m.clone()))),
            Bytes::Source(s) => Some(s.clone()),
        }
    }
}

/// What a blob that is neither wrapped nor a ZIP is, for the audit.
enum Kind {
    Pickle,
    Npy,
    NoCode(String),
}

/// Audits blobs into one [`ScanOutcome`], within one unpacking budget per scanned file.
pub(crate) struct Auditor<'a> {
    pub(crate) out: &'a mut ScanOutcome,
    pub(crate) limits: Limits,
    pub(crate) budget: Budget,
}

fn note(what: String) -> ScanFinding {
    ScanFinding {
        offset: None,
        what,
        unsafe_: false,
        rule: rules::NOTE,
    }
}

fn unsafe_finding(what: String, rule: &'static str) -> ScanFinding {
    ScanFinding {
        offset: None,
        what,
        unsafe_: true,
        rule,
    }
}

impl Auditor<'_> {
    /// Audits `blob`; `top` is true for a file the user named or the walk found (a file with
    /// no code then still gets a report when it is the only thing scanned).
    pub(crate) fn audit(&mut self, blob: Blob) {
        let head = match blob.head(4096) {
            Ok(h) => h.into_owned(),
            Err(e) => return self.unread(&blob.shown, &e),
        };
        match unpack::wrapping(&head) {
            Some(Wrapping::Stream(codec)) => self.stream(&blob, codec),
            Some(Wrapping::Tar) => self.tar(&blob),
            Some(Wrapping::Unreadable(what)) => self.fail(
                &blob.shown,
                format!(
                    "{what}, which weightport cannot unpack: its content is not proven free of \
                     pickles"
                ),
                rules::CONTAINER,
            ),
            None if is_zip(&head) => self.zip(&blob),
            None => self.plain(&blob),
        }
    }

    /// Bytes that could not be read: an unsafe report saying why (never a pass).
    fn unread(&mut self, shown: &Path, e: &weightport_core::Error) {
        let what = format!("cannot be read, so not proven free of pickles: {e}");
        self.fail(shown, what, rules::UNREADABLE);
    }

    /// An unsafe report for `shown` with one finding.
    fn fail(&mut self, shown: &Path, what: String, rule: &'static str) {
        let r = ScanReport::single(shown, None, unsafe_finding(what, rule));
        self.out.reports.push(r);
    }

    fn skip(&mut self, shown: &Path, reason: String) {
        self.out.skipped.push(Skipped {
            path: shown.to_path_buf(),
            reason,
            unverified: false,
        });
    }

    /// One more layer, unless the nesting cap is reached (then an unsafe report).
    fn enter(&mut self, shown: &Path) -> bool {
        if self.budget.depth_left == 0 {
            let what = format!(
                "nested more than {} streams and archives deep (Limits::max_unpack_depth): the \
                 rest is not unpacked, so not proven free of pickles",
                self.limits.max_unpack_depth
            );
            self.fail(shown, what, rules::LIMIT);
            return false;
        }
        self.budget.depth_left -= 1;
        true
    }

    fn leave(&mut self) {
        self.budget.depth_left += 1;
    }

    /// A compressed stream: what it unpacks to is audited under the same name, with a note
    /// naming the codec; a stream broken before its end is an unsafe finding of its own.
    fn stream(&mut self, blob: &Blob, codec: Codec) {
        if !self.enter(&blob.shown) {
            return;
        }
        let bytes = match blob.whole() {
            Ok(b) => b,
            Err(e) => {
                self.unread(&blob.shown, &e);
                return self.leave();
            }
        };
        match unpack::decode(codec, &bytes, &mut self.budget) {
            Ok(u) => self.unpacked(&blob.shown, codec.name(), u),
            Err(e) => self.fail(
                &blob.shown,
                format!("{} stream: {e}", codec.name()),
                rules::UNREADABLE,
            ),
        }
        self.leave();
    }

    /// Audits what a stream unpacked to; the reports it makes say which stream they came from.
    fn unpacked(&mut self, shown: &Path, codec: &str, u: Unpacked) {
        let first = self.out.reports.len();
        let skipped = self.out.skipped.len();
        let inner = Blob::mapped(shown.to_path_buf(), u.map);
        self.audit(inner);
        let layer = format!(
            "{codec}-compressed: the {} bytes it unpacks to were audited (offsets count in those \
             bytes)",
            u.len
        );
        for r in &mut self.out.reports[first..] {
            r.findings.insert(0, note(layer.clone()));
        }
        for s in &mut self.out.skipped[skipped..] {
            s.reason = format!("{codec}-compressed {}", s.reason);
        }
        if let Some(why) = u.broken {
            let what = format!("{codec} stream: {why}; what follows is not proven harmless");
            self.fail_first(first, shown, what, stop_rule(u.capped));
        }
    }

    /// Adds an unsafe finding to the first report made since `first` (the content it is
    /// about), or makes a report for `shown` when there is none.
    fn fail_first(&mut self, first: usize, shown: &Path, what: String, rule: &'static str) {
        match self.out.reports.get_mut(first) {
            Some(r) => {
                r.findings.push(unsafe_finding(what, rule));
                r.settle();
            }
            None => self.fail(shown, what, rule),
        }
    }

    /// A tar archive: every regular member audited as `OUTER!MEMBER` (pandas unpickles the
    /// one member; torch's legacy tar checkpoints unpickle their `pickle` member).
    fn tar(&mut self, blob: &Blob) {
        if !self.enter(&blob.shown) {
            return;
        }
        let bytes = match blob.whole() {
            Ok(b) => b,
            Err(e) => {
                self.unread(&blob.shown, &e);
                return self.leave();
            }
        };
        let (members, broken) = unpack::tar_members(&bytes, &mut self.budget);
        if members
            .iter()
            .any(|m| m.name == "pickle" || m.name == "storages")
        {
            let what = "legacy tar-format PyTorch checkpoint (torch <= 0.1.9): torch.load \
                        unpickles its `pickle` member, and weightport does not convert it"
                .to_string();
            self.fail(&blob.shown, what, rules::CONTAINER);
        }
        self.members(&blob.shown, "tar archive", members);
        if let Some(why) = broken {
            self.fail(
                &blob.shown,
                format!("{why}: the rest is not proven free of pickles"),
                rules::UNREADABLE,
            );
        }
        self.leave();
    }

    /// Audits archive members as `OUTER!NAME`.
    fn members(&mut self, outer: &Path, what: &str, members: Vec<Member>) {
        if members.is_empty() {
            self.skip(outer, format!("a {what} with no files in it"));
        }
        for m in members {
            let shown = member_path(outer, &m.name);
            match m.body {
                Ok(u) => {
                    let first = self.out.reports.len();
                    self.audit(Blob::mapped(shown.clone(), u.map));
                    if let Some(why) = u.broken {
                        let what = format!("{why}; what follows is not proven harmless");
                        self.fail_first(first, &shown, what, stop_rule(u.capped));
                    }
                }
                Err(e) => self.fail(
                    &shown,
                    format!("cannot unpack this member: {e}"),
                    rules::UNREADABLE,
                ),
            }
        }
    }

    /// A ZIP, as its loader reads it.
    fn zip(&mut self, blob: &Blob) {
        let Some(src) = blob.source(&blob.shown) else {
            return self.skip(&blob.shown, "empty".into());
        };
        let table = match archive::entries(&*src, &self.limits) {
            Ok(t) => t,
            // The pickle audit reports why the archive cannot be read (fail closed).
            Err(_) => return self.torch(blob),
        };
        let names: Vec<&str> = table.entries.iter().map(|e| e.name.as_str()).collect();
        if names.iter().any(|n| weightport_pickle::is_data_pkl(n)) {
            self.torch(blob);
        } else if names.iter().any(|n| n.ends_with(".npy")) {
            self.numpy(blob, true);
        } else if names.iter().any(|n| has_pkl_suffix(n)) {
            // Pickles under any other layout (TorchScript, a second prefix): the pickle audit
            // scans every `.pkl` entry and refuses the layout.
            self.torch(blob);
        } else {
            self.zip_members(blob);
        }
    }

    /// A ZIP that is neither a torch checkpoint nor an `.npz`: every member audited by content.
    fn zip_members(&mut self, blob: &Blob) {
        if !self.enter(&blob.shown) {
            return;
        }
        let bytes = match blob.whole() {
            Ok(b) => b,
            Err(e) => {
                self.unread(&blob.shown, &e);
                return self.leave();
            }
        };
        match unpack::zip_members(&bytes, &self.limits, &mut self.budget) {
            Ok(members) => self.members(&blob.shown, "ZIP archive", members),
            Err(e) => self.fail(
                &blob.shown,
                format!("not a readable ZIP archive: {e}"),
                rules::CONTAINER,
            ),
        }
        self.leave();
    }

    fn torch(&mut self, blob: &Blob) {
        let r = match &blob.bytes {
            Bytes::Empty => return self.skip(&blob.shown, "empty".into()),
            Bytes::Mapped(map) => weightport_pickle::scan::scan_mapped(&blob.shown, map.clone()),
            Bytes::Source(src) => {
                match weightport_pickle::scan::scan_source(&blob.shown, src.clone()) {
                    Ok(r) => r,
                    Err(e) => return self.unread(&blob.shown, &e),
                }
            }
        };
        self.out.reports.push(r);
    }

    /// Neither wrapped nor a ZIP: a pickle, an `.npy`, or something that holds no code.
    fn plain(&mut self, blob: &Blob) {
        match kind(blob) {
            Ok(Kind::Pickle) => self.torch(blob),
            Ok(Kind::Npy) => self.numpy(blob, false),
            Ok(Kind::NoCode(why)) => self.skip(&blob.shown, why),
            Err(e) => self.unread(&blob.shown, &e),
        }
    }

    /// `.npy`/`.npz`: the reader that `convert` uses decides; an object array (a pickle) is
    /// unsafe, as `convert` refuses it, and so is anything else it cannot read.
    fn numpy(&mut self, blob: &Blob, npz: bool) {
        let name = if npz {
            blob.shown.clone()
        } else {
            npy_label(&blob.shown)
        };
        let Some(src) = blob.source(&name) else {
            return self.skip(&blob.shown, "empty".into());
        };
        let opts = ReadOptions::default();
        let opened = if npz {
            weightport_npz::NpzSource::from_source(src, &opts).map(|s| s.tensors().len())
        } else {
            weightport_npz::NpySource::from_source(src, &opts).map(|s| s.tensors().len())
        };
        let format = Some(if npz { Format::Npz } else { Format::Npy });
        let r = match opened {
            Ok(n) => {
                let what = format!("NumPy arrays of numeric dtypes only ({n}): no pickle");
                let mut r = ScanReport::single(&blob.shown, format, note(what));
                r.tensors = n;
                r
            }
            Err(e) => numpy_refused(&blob.shown, format, &e),
        };
        self.out.reports.push(r);
    }
}

/// The rule of a stream that stopped early: a cap, or bytes that cannot be decoded.
fn stop_rule(capped: bool) -> &'static str {
    if capped {
        rules::LIMIT
    } else {
        rules::UNREADABLE
    }
}

fn numpy_refused(shown: &Path, format: Option<Format>, e: &weightport_core::Error) -> ScanReport {
    let object = e.to_string().contains("object array");
    let rule = if object {
        rules::OBJECT_ARRAY
    } else {
        rules::NOT_VERIFIED
    };
    let f = ScanFinding {
        offset: e.location().and_then(|l| l.offset),
        what: e.to_string(),
        unsafe_: true,
        rule,
    };
    let mut r = ScanReport::single(shown, format, f);
    r.error = Some(e.to_string());
    r
}

/// An `.npy` reader names its tensor after the file: a member or stream name may not end in
/// `.npy` or be UTF-8, which must not stop the audit.
fn npy_label(shown: &Path) -> PathBuf {
    let name = shown
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| n.ends_with(".npy"))
        .unwrap_or("array.npy");
    shown.with_file_name(name)
}

fn member_path(outer: &Path, name: &str) -> PathBuf {
    PathBuf::from(format!("{}!{}", outer.display(), name))
}

fn is_zip(bytes: &[u8]) -> bool {
    bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(b"PK\x05\x06")
}

fn has_pkl_suffix(name: &str) -> bool {
    let n = name.as_bytes();
    n.len() >= 4 && n[n.len() - 4..].eq_ignore_ascii_case(b".pkl")
}

/// What a blob that is neither wrapped nor a ZIP is: decided by content only.
fn kind(blob: &Blob) -> weightport_core::Result<Kind> {
    let head = blob.head(4096)?;
    let walked = || -> weightport_core::Result<bool> {
        Ok(looks_like_pickle(&blob.head(SNIFF_WALK_BYTES as u64)?))
    };
    Ok(match weightport_core::sniff(&head) {
        Sniffed::Format(Format::Npy) => Kind::Npy,
        Sniffed::Format(Format::PytorchLegacy) => Kind::Pickle,
        Sniffed::Format(f) => Kind::NoCode(format!("{f}: holds no code")),
        Sniffed::LfsPointer => Kind::NoCode("a Git LFS pointer (the weights are not here)".into()),
        Sniffed::Html => Kind::NoCode("an HTML page".into()),
        Sniffed::Empty => Kind::NoCode("empty".into()),
        // A pickle can open with a byte that also opens these formats: walk it to be sure.
        l @ Sniffed::Lookalike(_) if !walked()? => {
            Kind::NoCode(l.describe().trim_start_matches("is ").to_string())
        }
        Sniffed::Lookalike(_) => Kind::Pickle,
        Sniffed::Unknown if weightport_pickle::probe_legacy(Path::new(""), &head) || walked()? => {
            Kind::Pickle
        }
        Sniffed::Unknown => Kind::NoCode("not a pickle (text or another format)".into()),
        Sniffed::Zip => Kind::Pickle,
    })
}

/// A protocol 0/1 pickle (no `PROTO` header) is told from text by walking its start.
fn looks_like_pickle(start: &[u8]) -> bool {
    weightport_pickle::walk::walk(start, 1 << 28).looks_like_pickle()
}
