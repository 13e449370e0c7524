//! `scan`: an audit of a pickle-based checkpoint without converting it.
//!
//! The VM runs in scan mode, where a refused global or call is recorded (with its byte offset)
//! and replaced by an inert placeholder so every later global is listed too; nothing becomes
//! accepted that way. Data after `STOP` is scanned as further pickles. The report lists every
//! global (allowed or not), opcode counts, the ZIP records and whether the pickle references
//! them, ZIP anomalies, the non-tensor entries, and the verdict of the strict reader.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use weightport_core::{Format, MetaValue, ReadOptions, Result};

use crate::container;
use crate::legacy;
use crate::vm::{GlobalRef, Parsed, PidStyle, Vm, VmErrorKind, VmLimits};

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

/// The audit of one file.
#[derive(Debug, Clone)]
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
}

impl Acc {
    fn add_parsed(&mut self, p: &Parsed, base: u64) {
        for g in &p.globals {
            let mut g = g.clone();
            g.offset += base;
            self.globals.push(g);
        }
        for f in &p.findings {
            self.findings.push(ScanFinding {
                offset: Some(base + f.offset),
                what: f.what.clone(),
                unsafe_: true,
            });
        }
        for &(op, c) in &p.op_counts {
            let n = op_name(op);
            match self.counts.iter_mut().find(|(m, _)| *m == n) {
                Some(slot) => slot.1 += c,
                None => self.counts.push((n, c)),
            }
        }
        for s in &p.storages {
            self.storages.insert(s.key.clone());
        }
    }

    fn error(&mut self, base: u64, e: crate::vm::VmError) {
        let unsafe_ = matches!(e.kind, VmErrorKind::Refused(_) | VmErrorKind::Limit { .. });
        let what = match e.kind {
            VmErrorKind::Refused(m) => format!("refused: {m}"),
            VmErrorKind::Limit {
                what,
                needed,
                limit,
            } => {
                format!("{what} is {needed}, over the limit of {limit}")
            }
            VmErrorKind::Malformed(m) => format!("malformed pickle: {m}"),
            VmErrorKind::Unsupported(m) => format!("unsupported: {m}"),
        };
        self.findings.push(ScanFinding {
            offset: Some(base + e.offset),
            what,
            unsafe_,
        });
    }

    /// Scans `data` as one or more pickles (everything after a STOP is scanned too).
    fn pickles(&mut self, data: &[u8], base: u64, pid: PidStyle, limits: &VmLimits, max: usize) {
        let mut pos = 0usize;
        for i in 0..max {
            if pos >= data.len() {
                break;
            }
            if i > 0 && pid != PidStyle::Legacy {
                self.findings.push(ScanFinding {
                    offset: Some(base + pos as u64),
                    what: format!(
                        "{} bytes after STOP: scanned as a further pickle",
                        data.len() - pos
                    ),
                    unsafe_: true,
                });
            }
            match Vm::new(&data[pos..], limits.clone(), pid, true).run(true) {
                Ok(p) => {
                    self.add_parsed(&p, base + pos as u64);
                    pos += p.end;
                }
                Err(e) => {
                    self.error(base + pos as u64, e);
                    break;
                }
            }
        }
    }
}

/// Audits `path`. I/O errors are returned; everything about the content is in the report.
pub fn scan(path: &Path) -> Result<ScanReport> {
    let limits = VmLimits::default();
    let map = container::map_file(path)?;
    let mut acc = Acc {
        findings: Vec::new(),
        globals: Vec::new(),
        counts: Vec::new(),
        storages: HashSet::new(),
    };
    let mut records = Vec::new();
    let mut format = None;
    if map.starts_with(b"PK\x03\x04") {
        format = Some(Format::PytorchZip);
        match container::layout(path, &map) {
            Ok(layout) => {
                for a in &layout.anomalies {
                    acc.findings.push(ScanFinding {
                        offset: Some(a.offset),
                        what: a.what.clone(),
                        unsafe_: a.refused,
                    });
                }
                for x in &layout.extra {
                    acc.findings.push(ScanFinding {
                        offset: None,
                        what: format!("entry `{x}` is not one torch writes (ignored)"),
                        unsafe_: false,
                    });
                }
                // Every data.pkl-like entry is scanned (a duplicate or second prefix may hide one).
                for e in layout
                    .entries
                    .iter()
                    .filter(|e| e.name.ends_with("data.pkl") || e.name.ends_with(".pkl"))
                {
                    match container::entry_bytes(
                        path,
                        &map,
                        e,
                        limits.max_pickle_bytes,
                        "pickle size",
                    ) {
                        Ok(data) => {
                            let base = if e.method == 0 { e.data_start } else { 0 };
                            acc.pickles(&data, base, PidStyle::Zip, &limits, 16);
                        }
                        Err(err) => acc.findings.push(ScanFinding {
                            offset: Some(e.header_start),
                            what: err.to_string(),
                            unsafe_: err.exit_code() == 3,
                        }),
                    }
                }
                let data_prefix = format!("{}/data/", layout.prefix);
                for e in &layout.entries {
                    let referenced = e
                        .name
                        .strip_prefix(&data_prefix)
                        .map(|k| acc.storages.contains(k));
                    if referenced == Some(false) {
                        acc.findings.push(ScanFinding {
                            offset: Some(e.header_start),
                            what: format!(
                                "record `{}` is never referenced by the pickle",
                                weightport_core::sanitize(&e.name)
                            ),
                            unsafe_: false,
                        });
                    }
                    records.push(ScanRecord {
                        name: e.name.clone(),
                        size: e.usize,
                        method: e.method,
                        referenced,
                    });
                }
            }
            Err(e) => acc.findings.push(ScanFinding {
                offset: None,
                what: e.to_string(),
                unsafe_: e.exit_code() == 3,
            }),
        }
    } else if map.starts_with(&legacy::magic_prefix()) {
        format = Some(Format::PytorchLegacy);
        acc.pickles(&map, 0, PidStyle::Legacy, &limits, 5);
    } else if container::is_tar(&map) {
        acc.findings.push(ScanFinding {
            offset: Some(257),
            what: "legacy tar-format checkpoint (torch <= 0.1.9): refused".into(),
            unsafe_: true,
        });
    } else {
        acc.findings.push(ScanFinding {
            offset: Some(0),
            what: "not a PyTorch checkpoint; scanned as a raw pickle".into(),
            unsafe_: true,
        });
        acc.pickles(&map, 0, PidStyle::Zip, &limits, 16);
    }
    drop(map);
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
    };
    match crate::open_checkpoint(path, &ReadOptions::default()) {
        Ok(c) => {
            report.entries = c.report().entries.clone();
            report.tensors = weightport_core::TensorSource::tensors(&c).len();
        }
        Err(e) => {
            let refused = e.exit_code() == 3;
            if refused && !report.findings.iter().any(|f| f.unsafe_) {
                report.findings.push(ScanFinding {
                    offset: None,
                    what: e.to_string(),
                    unsafe_: true,
                });
            }
            report.error = Some(e.to_string());
        }
    }
    if report.findings.iter().any(|f| f.unsafe_) {
        report.verdict = Verdict::Unsafe;
    }
    Ok(report)
}
