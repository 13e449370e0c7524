//! `scan`: an audit of a pickle-based checkpoint without converting it.
//!
//! The VM runs in scan mode, where a refused global or call is recorded (with its byte offset)
//! and replaced by an inert placeholder so every later global is listed too; nothing becomes
//! accepted that way. Data after `STOP` is scanned as further pickles. The report lists every
//! global (allowed or not), opcode counts, the ZIP records and whether the pickle references
//! them, ZIP anomalies, the non-tensor entries, and the verdict of the strict reader.

use std::collections::HashSet;
use std::sync::Arc;

use memmap2::Mmap;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

use weightport_core::mapped::LocalFile;
use weightport_core::{ByteSource, Format, MetaValue, ReadOptions, Result};

use crate::container;
use crate::legacy;
use crate::vm::{GlobalRef, Parsed, PidStyle, Vm, VmErrorKind, VmLimits};
use crate::walk::{self, HazardKind, Walk};

/// Safe or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No finding that the safety policy refuses, and the strict reader opens the file.
    Safe,
    /// At least one refused construct (or the strict reader refuses the file).
    Unsafe,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanFinding {
    /// Absolute byte offset in the file, when known.
    pub offset: Option<u64>,
    /// What was found.
    pub what: String,
    /// True when the safety policy refuses it (false: a note, e.g. an unreferenced record).
    pub unsafe_: bool,
    /// A stable id of the kind of finding ([`rules`]), for SARIF and `--json`.
    pub rule: &'static str,
}

/// The kinds of findings, as stable ids with a one-line description each.
pub mod rules {
    /// A global outside the allowlist.
    pub const GLOBAL: &str = "non-allowlisted-global";
    /// A call whose callable is not provably allowlisted.
    pub const CALL: &str = "unsafe-call";
    /// A global the walk cannot resolve (`STACK_GLOBAL` of non-constants, `EXT*`).
    pub const UNRESOLVED: &str = "unresolved-global";
    /// Bytes that cannot be read as a pickle to its end.
    pub const UNREADABLE: &str = "unreadable-pickle";
    /// A construct the interpreter's policy refuses (argument schemas, SETITEM on a tensor, ...).
    pub const POLICY: &str = "policy-violation";
    /// A size or count over a cap.
    pub const LIMIT: &str = "limit-exceeded";
    /// A container anomaly (ZIP records, tar format, duplicate or hidden pickles).
    pub const CONTAINER: &str = "container-anomaly";
    /// The strict reader refuses the file, so nothing vouches for it.
    pub const NOT_VERIFIED: &str = "not-verified";
    /// A NumPy object array: its data is a pickle.
    pub const OBJECT_ARRAY: &str = "numpy-object-array";
    /// Information only.
    pub const NOTE: &str = "note";

    /// Every rule with its description.
    pub const ALL: &[(&str, &str)] = &[
        (GLOBAL, "The pickle names a global outside weightport's allowlist; torch.load (weights_only=False) imports it."),
        (CALL, "The pickle calls something that is not provably an allowlisted, data-only function."),
        (UNRESOLVED, "A global whose name cannot be known without running the pickle (STACK_GLOBAL of computed values, EXT codes)."),
        (UNREADABLE, "The pickle cannot be read to its end; whatever follows the break is not proven harmless."),
        (POLICY, "A construct the restricted interpreter refuses (argument schema, container type, persistent id)."),
        (LIMIT, "A size or count over weightport's caps."),
        (CONTAINER, "A container anomaly: ZIP record mismatch, duplicate or hidden pickle, legacy tar format."),
        (NOT_VERIFIED, "The strict reader refuses the file, so no check vouches for it."),
        (OBJECT_ARRAY, "A NumPy object array, whose data is a pickle that numpy.load(allow_pickle=True) runs."),
        (NOTE, "Information, not a risk."),
    ];
}

/// A ZIP record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanRecord {
    /// Entry name.
    pub name: String,
    /// Uncompressed size.
    pub size: u64,
    /// 0 stored, 8 deflate.
    pub method: u16,
    /// For `data/<key>` records: whether the pickle references the key.
    pub referenced: Option<bool>,
}

/// A pickle the scan read whole (its interpreter and static walk ran over these bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditedPickle {
    /// The ZIP entry it is (`None`: the file itself).
    pub entry: Option<String>,
    /// Its length in bytes (inflated).
    pub size: u64,
    /// SHA-256 of those bytes.
    pub sha256: [u8; 32],
    /// True for the pickle the loader unpickles: `torch.load` takes `<prefix>/data.pkl` of a
    /// torch ZIP, looked up ignoring letter case, or the whole file of a legacy checkpoint.
    pub loaded: bool,
}

impl AuditedPickle {
    /// The SHA-256 in lowercase hexadecimal.
    pub fn sha256_hex(&self) -> String {
        self.sha256.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The audit of one file.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScanReport {
    /// The file.
    pub path: PathBuf,
    /// The container, if recognised.
    pub format: Option<Format>,
    /// The verdict.
    pub verdict: Verdict,
    /// Findings, in file order per pickle.
    pub findings: Vec<ScanFinding>,
    /// Every global referenced (absolute offsets).
    pub globals: Vec<GlobalRef>,
    /// Opcode name → count, summed over every pickle in the file.
    pub opcodes: Vec<(&'static str, u64)>,
    /// ZIP records.
    pub records: Vec<ScanRecord>,
    /// Non-tensor entries of the checkpoint (when the strict reader opens it).
    pub entries: Vec<(String, MetaValue)>,
    /// Tensors the strict reader would convert.
    pub tensors: usize,
    /// The strict reader's error, if it refuses the file.
    pub error: Option<String>,
    /// Every pickle read whole, in file order.
    pub pickles: Vec<AuditedPickle>,
}

/// The pickletools name of an opcode.
pub fn op_name(op: u8) -> &'static str {
    match op {
        b'(' => "MARK",
        b'.' => "STOP",
        b'0' => "POP",
        b'1' => "POP_MARK",
        b'2' => "DUP",
        b'F' => "FLOAT",
        b'I' => "INT",
        b'J' => "BININT",
        b'K' => "BININT1",
        b'L' => "LONG",
        b'M' => "BININT2",
        b'N' => "NONE",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        b'R' => "REDUCE",
        b'S' => "STRING",
        b'T' => "BINSTRING",
        b'U' => "SHORT_BINSTRING",
        b'V' => "UNICODE",
        b'X' => "BINUNICODE",
        b'a' => "APPEND",
        b'b' => "BUILD",
        b'c' => "GLOBAL",
        b'd' => "DICT",
        b'}' => "EMPTY_DICT",
        b'e' => "APPENDS",
        b'g' => "GET",
        b'h' => "BINGET",
        b'i' => "INST",
        b'j' => "LONG_BINGET",
        b'l' => "LIST",
        b']' => "EMPTY_LIST",
        b'o' => "OBJ",
        b'p' => "PUT",
        b'q' => "BINPUT",
        b'r' => "LONG_BINPUT",
        b's' => "SETITEM",
        b't' => "TUPLE",
        b')' => "EMPTY_TUPLE",
        b'u' => "SETITEMS",
        b'G' => "BINFLOAT",
        b'B' => "BINBYTES",
        b'C' => "SHORT_BINBYTES",
        0x80 => "PROTO",
        0x81 => "NEWOBJ",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x85 => "TUPLE1",
        0x86 => "TUPLE2",
        0x87 => "TUPLE3",
        0x88 => "NEWTRUE",
        0x89 => "NEWFALSE",
        0x8a => "LONG1",
        0x8b => "LONG4",
        0x8c => "SHORT_BINUNICODE",
        0x8d => "BINUNICODE8",
        0x8e => "BINBYTES8",
        0x8f => "EMPTY_SET",
        0x90 => "ADDITEMS",
        0x91 => "FROZENSET",
        0x92 => "NEWOBJ_EX",
        0x93 => "STACK_GLOBAL",
        0x94 => "MEMOIZE",
        0x95 => "FRAME",
        0x96 => "BYTEARRAY8",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => "UNKNOWN",
    }
}

struct Acc {
    findings: Vec<ScanFinding>,
    globals: Vec<GlobalRef>,
    counts: Vec<(&'static str, u64)>,
    storages: HashSet<String>,
    calls: u64,
    /// Offsets the interpreter reported on: the walk's hazards there are the same constructs.
    vm_offsets: HashSet<u64>,
    pickles: Vec<AuditedPickle>,
}

fn finding(offset: Option<u64>, what: String, unsafe_: bool, rule: &'static str) -> ScanFinding {
    ScanFinding {
        offset,
        what,
        unsafe_,
        rule,
    }
}

fn hazard_rule(kind: HazardKind) -> &'static str {
    match kind {
        HazardKind::Global => rules::GLOBAL,
        HazardKind::Call => rules::CALL,
        HazardKind::Unresolved => rules::UNRESOLVED,
        HazardKind::Unreadable => rules::UNREADABLE,
    }
}

impl Acc {
    fn new() -> Self {
        Acc {
            findings: Vec::new(),
            globals: Vec::new(),
            counts: Vec::new(),
            storages: HashSet::new(),
            calls: 0,
            vm_offsets: HashSet::new(),
            pickles: Vec::new(),
        }
    }

    fn push(&mut self, f: ScanFinding) {
        self.findings.push(f);
    }

    fn count_ops(&mut self, op_counts: &[(u8, u64)]) {
        for &(op, c) in op_counts {
            let n = op_name(op);
            match self.counts.iter_mut().find(|(m, _)| *m == n) {
                Some(slot) => slot.1 += c,
                None => self.counts.push((n, c)),
            }
        }
    }

    /// The interpreter's findings; where the walk saw the same opcode, its rule id.
    fn add_parsed(&mut self, p: &Parsed, base: u64, walk: &Walk) {
        for f in &p.findings {
            let rule = walk
                .hazards
                .iter()
                .find(|h| h.offset == f.offset)
                .map_or(rules::POLICY, |h| hazard_rule(h.kind));
            self.vm_offsets.insert(base + f.offset);
            self.push(finding(Some(base + f.offset), f.what.clone(), true, rule));
        }
        for s in &p.storages {
            self.storages.insert(s.key.clone());
        }
    }

    /// The walk's globals and counts, and its hazards at opcodes the interpreter did not
    /// already report.
    fn add_walk(&mut self, walk: &Walk, base: u64) {
        for g in &walk.globals {
            let mut g = g.clone();
            g.offset += base;
            self.globals.push(g);
        }
        self.count_ops(&walk.op_counts);
        self.calls += walk.calls.len() as u64;
        for h in &walk.hazards {
            let at = base + h.offset;
            if !self.vm_offsets.contains(&at) {
                self.push(finding(Some(at), h.what.clone(), true, hazard_rule(h.kind)));
            }
        }
    }

    /// The interpreter stopped before `STOP`: never a pass, whatever the reason. The walk,
    /// which goes on past the stop, says what remains.
    fn vm_stopped(&mut self, base: u64, e: crate::vm::VmError, walk: &Walk) {
        let (what, rule) = match e.kind {
            VmErrorKind::Refused(m) => (format!("refused: {m}"), rules::POLICY),
            VmErrorKind::Limit {
                what,
                needed,
                limit,
            } => (
                format!("{what} is {needed}, over the limit of {limit}"),
                rules::LIMIT,
            ),
            VmErrorKind::Malformed(m) => (format!("malformed pickle: {m}"), rules::UNREADABLE),
            VmErrorKind::Unsupported(m) => (format!("unsupported: {m}"), rules::UNREADABLE),
        };
        let after: Vec<&GlobalRef> = walk
            .globals
            .iter()
            .filter(|g| g.offset > e.offset)
            .collect();
        let calls = walk.calls.iter().filter(|c| c.offset > e.offset).count();
        let rest = format!(
            "; the interpreter stopped here, so the rest of the pickle is not proven harmless \
             (the static walk found {} globals and {calls} calls after this point)",
            after.len()
        );
        self.vm_offsets.insert(base + e.offset);
        self.push(finding(Some(base + e.offset), what + &rest, true, rule));
    }

    /// Scans `data` as one or more pickles (everything after a STOP is scanned too). Each
    /// pickle is walked statically over its whole length and run by the interpreter.
    /// Returns whether the audit reached the end of `data` (a pickle not ended within it, an
    /// interpreter stopped at its last byte, or every byte consumed): only an audit that did
    /// not is the same over a prefix of the file as over the whole file.
    fn pickles(
        &mut self,
        data: &[u8],
        base: u64,
        pid: PidStyle,
        limits: &VmLimits,
        max: usize,
    ) -> bool {
        let mut pos = 0usize;
        let mut at_end = false;
        for i in 0..max {
            if pos >= data.len() {
                break;
            }
            let at = base + pos as u64;
            if i > 0 && pid != PidStyle::Legacy {
                let what = format!(
                    "{} bytes after STOP: scanned as a further pickle",
                    data.len() - pos
                );
                self.push(finding(Some(at), what, true, rules::CONTAINER));
            }
            let rest = &data[pos..];
            let walk = walk::walk(rest, limits.max_opcodes);
            match Vm::new(rest, limits.clone(), pid, true).run(true) {
                Ok(p) => {
                    self.add_parsed(&p, at, &walk);
                    if walk.end != Some(p.end) {
                        let what = "the interpreter and the static walk disagree on where the \
                                    pickle ends"
                            .to_string();
                        self.push(finding(Some(at), what, true, rules::UNREADABLE));
                    }
                }
                Err(e) => {
                    at_end |= pos as u64 + e.offset + 1 >= data.len() as u64;
                    self.vm_stopped(at, e, &walk);
                }
            }
            self.add_walk(&walk, at);
            match walk.end {
                Some(end) => pos += end,
                None => return true,
            }
        }
        at_end || pos >= data.len()
    }

    fn zip(&mut self, path: &Path, src: &dyn ByteSource, limits: &VmLimits) -> Vec<ScanRecord> {
        let layout = match container::layout(path, src, &weightport_core::Limits::default()) {
            Ok(l) => l,
            Err(e) => {
                self.push(finding(None, e.to_string(), true, rules::CONTAINER));
                return Vec::new();
            }
        };
        for a in &layout.anomalies {
            self.push(finding(
                Some(a.offset),
                a.what.clone(),
                a.refused,
                rules::CONTAINER,
            ));
        }
        for x in &layout.extra {
            let what = format!(
                "entry `{x}` is not part of a state-dict checkpoint (TorchScript and other \
                 archives have such entries; every `.pkl` among them is scanned)"
            );
            self.push(finding(None, what, false, rules::NOTE));
        }
        // Every `.pkl` entry is scanned, in any letter case (a second prefix, or a name torch
        // finds ignoring case, may hide one); the one torch loads is marked.
        let loaded = layout.get("data.pkl").map(|e| e.header_start);
        for e in layout.entries.iter().filter(|e| is_pkl_name(&e.name)) {
            match container::entry_bytes(path, src, e, limits.max_pickle_bytes, "pickle size") {
                Ok(data) => {
                    let base = if e.method == 0 { e.data_start } else { 0 };
                    let is_loaded = loaded == Some(e.header_start);
                    self.audited(Some(e.name.clone()), &data, is_loaded);
                    self.pickles(&data, base, PidStyle::Zip, limits, 16);
                }
                Err(err) => {
                    let what = format!("{err}; this pickle was not scanned");
                    self.push(finding(Some(e.header_start), what, true, rules::UNREADABLE));
                }
            }
        }
        self.records(&layout)
    }

    fn audited(&mut self, entry: Option<String>, data: &[u8], loaded: bool) {
        self.pickles.push(AuditedPickle {
            entry,
            size: data.len() as u64,
            sha256: Sha256::digest(data).into(),
            loaded,
        });
    }

    fn records(&mut self, layout: &container::ZipLayout) -> Vec<ScanRecord> {
        let data_prefix = format!("{}/data/", layout.prefix);
        let mut records = Vec::new();
        for e in &layout.entries {
            let referenced = e
                .name
                .strip_prefix(&data_prefix)
                .map(|k| self.storages.contains(k));
            if referenced == Some(false) {
                let what = format!(
                    "record `{}` is never referenced by the pickle",
                    weightport_core::sanitize(&e.name)
                );
                self.push(finding(Some(e.header_start), what, false, rules::NOTE));
            }
            records.push(ScanRecord {
                name: e.name.clone(),
                size: e.usize,
                method: e.method,
                referenced,
            });
        }
        records
    }
}

/// Audits `path`. I/O errors are returned; everything about the content is in the report.
pub fn scan(path: &Path) -> Result<ScanReport> {
    Ok(scan_mapped(path, container::map_file(path)?))
}

/// Audits the file mapped in `map` (a file, or a member the directory scan unpacked); `path`
/// names it in the report and messages. (An audit reads every byte of a raw pickle, so it
/// works on a map; its strict read goes through the reader's [`ByteSource`] path.)
pub fn scan_mapped(path: &Path, map: Arc<Mmap>) -> ScanReport {
    let src: Arc<dyn ByteSource> = Arc::new(LocalFile::from_map(path, map));
    match scan_source(path, src) {
        Ok(r) => r,
        // A mapped source reads without I/O errors; kept fail-closed all the same.
        Err(e) => {
            let f = finding(None, e.to_string(), true, rules::UNREADABLE);
            ScanReport::single(path, None, f)
        }
    }
}

/// First bytes read of a legacy checkpoint that has no map: its five pickles usually end long
/// before; the prefix grows eightfold while an audit of it reaches its end.
const LEGACY_PREFIX: u64 = 1 << 20;

/// Audits the object `src` (a mapped file, or a remote object read by ranges); `path` names it
/// in the report. Without a map, only what the loader unpickles is read: a ZIP's central
/// directory, local headers and `.pkl` entries; a legacy checkpoint's stacked pickles (a
/// growing prefix, until an audit of it ends before its last byte, so it is the audit of the
/// whole file); a raw pickle whole (up to the pickle size cap). Read errors are returned.
pub fn scan_source(path: &Path, src: Arc<dyn ByteSource>) -> Result<ScanReport> {
    let limits = VmLimits::default();
    let head = src.head(container::HEAD)?;
    let mut acc = Acc::new();
    let mut records = Vec::new();
    let mut format = None;
    if head.starts_with(b"PK\x03\x04") {
        format = Some(Format::PytorchZip);
        records = acc.zip(path, &*src, &limits);
    } else if legacy::starts_with_magic(&head) {
        format = Some(Format::PytorchLegacy);
        acc = legacy_audit(&*src, &limits)?;
    } else if container::is_tar(&head) {
        let what = "legacy tar-format checkpoint (torch <= 0.1.9): refused".to_string();
        acc.push(finding(Some(257), what, true, rules::CONTAINER));
    } else {
        let what = "not a PyTorch checkpoint; scanned as a raw pickle".to_string();
        acc.push(finding(Some(0), what, true, rules::NOT_VERIFIED));
        let whole = whole_pickle(&*src, &limits)?;
        acc.audited(None, &whole, true);
        acc.pickles(&whole, 0, PidStyle::Zip, &limits, 16);
    }
    let mut report = ScanReport {
        path: path.to_path_buf(),
        format,
        verdict: Verdict::Safe,
        findings: acc.findings,
        globals: acc.globals,
        opcodes: acc.counts,
        records,
        entries: Vec::new(),
        tensors: 0,
        error: None,
        pickles: acc.pickles,
    };
    strict_read(&mut report, src);
    if let Some(note) = weights_only_note(&report) {
        report
            .findings
            .push(finding(None, note, false, rules::NOTE));
    }
    report.settle();
    Ok(report)
}

/// The whole object as a raw pickle: borrowed from a map, else read when within the pickle
/// size cap (a larger one without a map is an error: not audited, so not a pass).
fn whole_pickle<'a>(
    src: &'a dyn ByteSource,
    limits: &VmLimits,
) -> Result<std::borrow::Cow<'a, [u8]>> {
    if src.map().is_none() && src.len() > limits.max_pickle_bytes {
        return Err(weightport_core::Error::Limit {
            at: weightport_core::Location::file(src.name()),
            what: "pickle size",
            needed: src.len(),
            limit: limits.max_pickle_bytes,
        });
    }
    src.range(0, src.len())
}

/// The legacy checkpoint's five stacked pickles audited: over the whole map when there is
/// one, else over a prefix that grows until the audit ends before its last byte.
fn legacy_audit(src: &dyn ByteSource, limits: &VmLimits) -> Result<Acc> {
    let mut n = match src.map() {
        Some(_) => src.len(),
        None => src.len().min(LEGACY_PREFIX),
    };
    loop {
        let data = src.range(0, n)?;
        let mut acc = Acc::new();
        acc.audited(None, &data, true);
        let at_end = acc.pickles(&data, 0, PidStyle::Legacy, limits, 5);
        // (Without a map, the audited pickle's size and hash are of the prefix read.)
        if !at_end || n == src.len() {
            return Ok(acc);
        }
        n = n.saturating_mul(8).min(src.len());
    }
}

/// Whether a ZIP entry is named like a pickle (`*.pkl`, in any letter case).
fn is_pkl_name(name: &str) -> bool {
    let n = name.as_bytes();
    n.len() >= 4 && n[n.len() - 4..].eq_ignore_ascii_case(b".pkl")
}

/// Why `torch.load(weights_only=True)` would refuse a file this scan finds data-only: globals
/// on weightport's allowlist but not torch's, or opcodes its unpickler does not take.
fn weights_only_note(r: &ScanReport) -> Option<String> {
    if r.format.is_none() || r.findings.iter().any(|f| f.unsafe_) {
        return None;
    }
    let mut globals: Vec<String> = r
        .globals
        .iter()
        .filter(|g| crate::allow::beyond_weights_only(&g.module, &g.name))
        .map(|g| format!("{}.{}", g.module, g.name))
        .collect();
    globals.sort();
    globals.dedup();
    let ops: Vec<&str> = r
        .opcodes
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !crate::allow::WEIGHTS_ONLY_OPCODES.contains(n))
        .collect();
    let mut why = Vec::new();
    if !globals.is_empty() {
        why.push(format!(
            "it names {} (not on torch's allowlist)",
            globals.join(", ")
        ));
    }
    if !ops.is_empty() {
        why.push(format!("it uses the opcodes {}", ops.join(", ")));
    }
    (!why.is_empty()).then(|| {
        format!(
            "torch.load(weights_only=True) refuses this file, though nothing in it runs code: {}",
            why.join("; ")
        )
    })
}

/// What the strict reader makes of the file. A refusal of what weightport does not convert
/// (a quantized tensor, a top-level list) is a note: the pickle was read whole by both the
/// interpreter and the walk. Any other failure means nothing vouches for the file.
fn strict_read(report: &mut ScanReport, src: Arc<dyn ByteSource>) {
    match crate::open_checkpoint_source(src, &ReadOptions::default()) {
        Ok(c) => {
            report.entries = c.report().entries.clone();
            report.tensors = weightport_core::TensorSource::tensors(&c).len();
        }
        Err(e) => {
            let convertible_only = matches!(e, weightport_core::Error::Unsupported { .. });
            if !convertible_only {
                let what = format!("the strict reader refuses the file: {e}");
                report
                    .findings
                    .push(finding(None, what, true, rules::NOT_VERIFIED));
            }
            report.error = Some(e.to_string());
        }
    }
}

impl ScanReport {
    /// A report for a file that was not read through the pickle paths (`format`, the finding
    /// that says why, and whether it is unsafe).
    pub fn single(path: &Path, format: Option<Format>, f: ScanFinding) -> ScanReport {
        let mut r = ScanReport {
            path: path.to_path_buf(),
            format,
            verdict: Verdict::Safe,
            findings: vec![f],
            globals: Vec::new(),
            opcodes: Vec::new(),
            records: Vec::new(),
            entries: Vec::new(),
            tensors: 0,
            error: None,
            pickles: Vec::new(),
        };
        r.settle();
        r
    }

    /// Sets the verdict from the findings: unsafe when any finding is.
    pub fn settle(&mut self) {
        self.verdict = if self.findings.iter().any(|f| f.unsafe_) {
            Verdict::Unsafe
        } else {
            Verdict::Safe
        };
    }
}
