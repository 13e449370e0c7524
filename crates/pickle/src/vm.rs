//! A symbolic pickle interpreter: opcodes of protocols 0–5 build an inert value tree.
//!
//! Byte layout (CPython `Lib/pickletools.py`): a pickle is a sequence of one-byte opcodes, each
//! followed by its fixed or length-prefixed argument, ending with `STOP` (`.`). A stack, a
//! metastack of marks and a memo (int → value) hold the state. See docs/specs/pickle.md §2.2 for the policy on
//! each opcode and §2.3 for the allowlist.
//!
//! Security model: `GLOBAL`/`STACK_GLOBAL` resolve to an allowlisted [`Sym`] or are refused with
//! the symbol and its byte offset; `REDUCE`/`BUILD` on an allowed symbol build a description
//! (never a call); `INST`, `OBJ`, `NEWOBJ*`, `EXT*`, `PERSID`, out-of-band buffers and unknown
//! opcodes are refused. Every length is checked against the remaining input before anything is
//! allocated, and the opcode count, stack, metastack, memo, nesting depth and big-int length are
//! capped ([`VmLimits`]). The code is one loop: nothing recurses on attacker data.

use std::collections::HashMap;

use crate::allow::{self, Sym};
use crate::torch::{StorageKind, StorageRef, TensorDesc, TorchDType};
use crate::value::{Arena, DictKind, Id, Node};

mod torch_layer;
use torch_layer::Applied;

/// Caps the VM applies: [`weightport_core::PickleLimits`], set through
/// [`weightport_core::Limits::pickle`].
pub type VmLimits = weightport_core::PickleLimits;

/// What a persistent id must look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PidStyle {
    /// Torch ZIP: `('storage', cls, key, location, numel)`.
    Zip,
    /// Legacy stacked format: `('storage', cls, key, location, numel, view_metadata)`.
    Legacy,
    /// No persistent ids allowed (the legacy format's constant pickles).
    Forbidden,
}

/// Why the VM stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmErrorKind {
    /// The safety policy refused something.
    Refused(String),
    /// A cap was exceeded.
    Limit {
        /// What.
        what: &'static str,
        /// Found.
        needed: u64,
        /// Cap.
        limit: u64,
    },
    /// The bytes are not a valid pickle.
    Malformed(String),
    /// A valid construct weightport does not convert.
    Unsupported(String),
}

/// A VM error at a byte offset of the pickle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmError {
    /// Offset of the opcode in the pickle.
    pub offset: u64,
    /// What happened.
    pub kind: VmErrorKind,
}

/// A refused construct seen in scan mode (where the VM keeps going).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Offset in the pickle.
    pub offset: u64,
    /// What was refused.
    pub what: String,
}

/// A `GLOBAL`/`STACK_GLOBAL`/`INST` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalRef {
    /// Offset of the opcode.
    pub offset: u64,
    /// Module as written.
    pub module: String,
    /// Name as written.
    pub name: String,
    /// Whether the allowlist accepts it.
    pub allowed: bool,
}

/// The result of running a pickle.
#[derive(Debug)]
pub struct Parsed {
    /// Every node.
    pub arena: Arena,
    /// The unpickled value.
    pub root: Id,
    /// Offset just past `STOP`.
    pub end: usize,
    /// Distinct storages in first-seen order.
    pub storages: Vec<StorageRef>,
    /// Opcode counts by byte.
    pub op_counts: Vec<(u8, u64)>,
    /// Every global referenced.
    pub globals: Vec<GlobalRef>,
    /// Refused constructs (scan mode only; strict mode errors on the first).
    pub findings: Vec<Finding>,
    /// Highest protocol announced.
    pub protocol: u8,
}

/// Most globals recorded in a report (all are still checked).
const MAX_RECORDED_GLOBALS: usize = 10_000;

type R<T> = Result<T, VmError>;

/// The interpreter.
pub struct Vm<'a> {
    data: &'a [u8],
    pos: usize,
    at: usize,
    limits: VmLimits,
    pid: PidStyle,
    scan: bool,
    /// Foreign objects (globals off the allowlist, and what is built from them) are kept as
    /// inert records and listed, instead of refused (`--allow-inert-objects`).
    inert: bool,
    arena: Arena,
    stack: Vec<Id>,
    marks: Vec<usize>,
    memo: HashMap<u32, Id>,
    opcodes: u64,
    counts: [u64; 256],
    globals: Vec<GlobalRef>,
    findings: Vec<Finding>,
    storages: Vec<StorageRef>,
    storage_index: HashMap<String, usize>,
    key_dtype: HashMap<String, TorchDType>,
    protocol: u8,
}

fn malformed<T>(at: usize, msg: impl Into<String>) -> R<T> {
    Err(VmError {
        offset: at as u64,
        kind: VmErrorKind::Malformed(msg.into()),
    })
}

fn refused<T>(at: usize, msg: impl Into<String>) -> R<T> {
    Err(VmError {
        offset: at as u64,
        kind: VmErrorKind::Refused(msg.into()),
    })
}

fn limit<T>(at: usize, what: &'static str, needed: u64, limit: u64) -> R<T> {
    Err(VmError {
        offset: at as u64,
        kind: VmErrorKind::Limit {
            what,
            needed,
            limit,
        },
    })
}

impl<'a> Vm<'a> {
    /// A VM over `data`. `scan` keeps going past refused globals and calls (recording them as
    /// findings) so a report can list everything; it never makes anything accepted.
    pub fn new(data: &'a [u8], limits: VmLimits, pid: PidStyle, scan: bool) -> Self {
        Vm {
            data,
            pos: 0,
            at: 0,
            limits,
            pid,
            scan,
            inert: false,
            arena: Arena::default(),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
            opcodes: 0,
            counts: [0; 256],
            globals: Vec::new(),
            findings: Vec::new(),
            storages: Vec::new(),
            storage_index: HashMap::new(),
            key_dtype: HashMap::new(),
            protocol: 0,
        }
    }

    /// Keeps foreign objects as inert, listed records instead of refusing them. Nothing is
    /// ever called either way; what this changes is that a checkpoint whose metadata holds
    /// such objects (a Lightning `hyper_parameters` DictConfig) can still have its tensors
    /// converted. Everything else the policy refuses stays refused.
    pub fn inert_foreign(mut self, on: bool) -> Self {
        self.inert = on;
        self
    }

    /// Whether unknown objects may flow through containers (scan or inert mode).
    fn lenient(&self) -> bool {
        self.scan || self.inert
    }

    /// A foreign object: recorded (scan, inert) or refused.
    fn foreign(&mut self, msg: String) -> R<()> {
        self.record_or_refuse(self.lenient(), msg)
    }

    /// Records `msg` as a finding and goes on when `record`, else refuses with it.
    fn record_or_refuse(&mut self, record: bool, msg: String) -> R<()> {
        if !record {
            return refused(self.at, msg);
        }
        self.findings.push(Finding {
            offset: self.at as u64,
            what: msg,
        });
        Ok(())
    }

    // ---- input -------------------------------------------------------------------------

    fn take(&mut self, n: u64) -> R<&'a [u8]> {
        let remaining = (self.data.len() - self.pos) as u64;
        if n > remaining {
            return limit(
                self.at,
                "length prefix (bytes remaining in the pickle)",
                n,
                remaining,
            );
        }
        let s = &self.data[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn u8(&mut self) -> R<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> R<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> R<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn i32(&mut self) -> R<i32> {
        Ok(i32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> R<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }

    fn line(&mut self) -> R<&'a [u8]> {
        let rest = &self.data[self.pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(i) => {
                self.pos += i + 1;
                Ok(&rest[..i])
            }
            None => malformed(self.at, "truncated: text argument without a newline"),
        }
    }

    /// UTF-8 as CPython's unpickler decodes it (`surrogatepass`): an encoded lone surrogate
    /// (`ED A0..BF 80..BF`) is accepted and kept as U+FFFD; any other invalid byte is refused.
    fn utf8(&self, b: &[u8], what: &str) -> R<String> {
        let mut out = String::with_capacity(b.len());
        let mut rest = b;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    return Ok(out);
                }
                Err(e) => {
                    let (ok, bad) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(ok).expect("valid prefix"));
                    match bad {
                        [0xED, 0xA0..=0xBF, 0x80..=0xBF, ..] => {
                            out.push('\u{FFFD}');
                            rest = &bad[3..];
                        }
                        _ => return malformed(self.at, format!("{what} is not valid UTF-8")),
                    }
                }
            }
        }
    }

    // ---- stack -------------------------------------------------------------------------

    fn fence(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn push_id(&mut self, id: Id) -> R<()> {
        if self.stack.len() >= self.limits.max_stack {
            return limit(
                self.at,
                "pickle stack depth",
                self.stack.len() as u64 + 1,
                self.limits.max_stack as u64,
            );
        }
        self.stack.push(id);
        Ok(())
    }

    fn new_node(&mut self, node: Node, depth: u32) -> R<Id> {
        if depth > self.limits.max_depth {
            return limit(
                self.at,
                "pickle nesting depth",
                u64::from(depth),
                u64::from(self.limits.max_depth),
            );
        }
        if self.arena.len() >= u32::MAX as usize {
            return limit(
                self.at,
                "pickle values",
                self.arena.len() as u64,
                u32::MAX as u64,
            );
        }
        Ok(self.arena.push(node, depth))
    }

    fn push(&mut self, node: Node) -> R<()> {
        let id = self.new_node(node, 1)?;
        self.push_id(id)
    }

    fn push_container(&mut self, node: Node, children: &[Id]) -> R<()> {
        let d = children
            .iter()
            .map(|&c| self.arena.depth(c))
            .max()
            .unwrap_or(0)
            + 1;
        let id = self.new_node(node, d)?;
        self.push_id(id)
    }

    fn pop(&mut self) -> R<Id> {
        if self.stack.len() <= self.fence() {
            return malformed(self.at, "stack underflow (value expected)");
        }
        Ok(self.stack.pop().expect("non-empty"))
    }

    fn top(&self) -> R<Id> {
        if self.stack.len() <= self.fence() {
            return malformed(self.at, "stack underflow (value expected)");
        }
        Ok(*self.stack.last().expect("non-empty"))
    }

    fn pop_mark(&mut self) -> R<Vec<Id>> {
        match self.marks.pop() {
            Some(m) => Ok(self.stack.split_off(m)),
            None => malformed(self.at, "MARK expected on the stack"),
        }
    }

    fn grow(&mut self, target: Id, children: &[Id]) -> R<()> {
        let d = children
            .iter()
            .map(|&c| self.arena.depth(c))
            .max()
            .unwrap_or(0)
            + 1;
        if d > self.limits.max_depth {
            return limit(
                self.at,
                "pickle nesting depth",
                u64::from(d),
                u64::from(self.limits.max_depth),
            );
        }
        self.arena.raise_depth(target, d);
        Ok(())
    }

    /// Refuses (strict) or records a finding (scan).
    fn refuse(&mut self, msg: String) -> R<()> {
        self.record_or_refuse(self.scan, msg)
    }

    fn record_global(&mut self, module: &str, name: &str, allowed: bool) {
        if self.globals.len() < MAX_RECORDED_GLOBALS {
            self.globals.push(GlobalRef {
                offset: self.at as u64,
                module: module.to_string(),
                name: name.to_string(),
                allowed,
            });
        }
    }

    fn resolve(&mut self, module: &str, name: &str) -> R<()> {
        let entry = allow::lookup(module, name);
        self.record_global(module, name, entry.is_some());
        match entry {
            Some(e) => self.push(Node::Global(e.sym)),
            None => {
                let why = if name.contains('.') {
                    "dotted names are refused (attribute walk under protocol 4+)".to_string()
                } else {
                    "it is not on the allowlist of weightport's restricted unpickler".to_string()
                };
                let msg = format!(
                    "global `{module}.{name}` refused: {why}{}",
                    allow::module_hint(module)
                );
                if self.inert && !self.scan && allow::never_inert(module) {
                    return refused(
                        self.at,
                        msg + " (never kept inert: a module only malicious files name)",
                    );
                }
                self.foreign(msg)?;
                self.push(Node::Unknown(format!("{module}.{name}")))
            }
        }
    }

    // ---- main loop ---------------------------------------------------------------------

    /// Runs to `STOP`. With `allow_trailing`, bytes after `STOP` are left for the caller
    /// (the legacy format stacks pickles); otherwise they are refused.
    pub fn run(mut self, allow_trailing: bool) -> R<Parsed> {
        if self.data.len() as u64 > self.limits.max_pickle_bytes {
            return limit(
                0,
                "pickle size",
                self.data.len() as u64,
                self.limits.max_pickle_bytes,
            );
        }
        loop {
            self.at = self.pos;
            if self.pos >= self.data.len() {
                return malformed(self.at, "truncated: the pickle ends without STOP");
            }
            let op = self.data[self.pos];
            self.pos += 1;
            self.opcodes += 1;
            if self.opcodes > self.limits.max_opcodes {
                return limit(
                    self.at,
                    "pickle opcode count",
                    self.opcodes,
                    self.limits.max_opcodes,
                );
            }
            self.counts[op as usize] += 1;
            if op == b'.' {
                break;
            }
            self.step(op)?;
        }
        let end = self.pos;
        if !self.marks.is_empty() || self.stack.len() != 1 {
            return malformed(
                self.at,
                format!(
                    "STOP with {} values and {} marks on the stack (expected exactly one value)",
                    self.stack.len(),
                    self.marks.len()
                ),
            );
        }
        if !allow_trailing && end < self.data.len() {
            let msg = format!(
                "{} bytes of data after STOP (a second pickle hidden behind the first)",
                self.data.len() - end
            );
            self.at = end;
            self.refuse(msg)?;
        }
        let root = self.stack[0];
        let op_counts = self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(op, &c)| (op as u8, c))
            .collect();
        Ok(Parsed {
            arena: self.arena,
            root,
            end,
            storages: self.storages,
            op_counts,
            globals: self.globals,
            findings: self.findings,
            protocol: self.protocol,
        })
    }

    fn step(&mut self, op: u8) -> R<()> {
        match op {
            0x80 | 0x95 | b'(' | b'0' | b'1' | b'2' | b'N' | 0x88 | 0x89 => self.op_stack(op),
            b'I' | b'J' | b'K' | b'M' | b'L' | 0x8a | 0x8b | b'F' | b'G' => self.op_number(op),
            b'S' | b'T' | b'U' | b'V' | b'X' | 0x8c | 0x8d | b'B' | b'C' | 0x8e | 0x96 => {
                self.op_text(op)
            }
            b')'
            | b't'
            | 0x85..=0x87
            | b']'
            | b'l'
            | b'a'
            | b'e'
            | b'}'
            | b'd'
            | b's'
            | b'u'
            | 0x8f
            | 0x90
            | 0x91 => self.op_container(op),
            b'p' | b'q' | b'r' | 0x94 | b'g' | b'h' | b'j' => self.op_memo(op),
            b'c' | 0x93 | b'R' | b'b' => self.op_global(op),
            0x81 | 0x92 | b'i' | b'o' | 0x82..=0x84 | b'P' | b'Q' | 0x97 | 0x98 => {
                self.op_object(op)
            }
            _ => malformed(
                self.at,
                format!("unknown opcode 0x{op:02x} at offset {}", self.at),
            ),
        }
    }

    /// Framing, marks, stack shuffles and the constants `None`, `True`, `False`.
    fn op_stack(&mut self, op: u8) -> R<()> {
        match op {
            0x80 => {
                let p = self.u8()?;
                if p > 5 {
                    return malformed(self.at, format!("unsupported pickle protocol {p}"));
                }
                self.protocol = self.protocol.max(p);
            }
            0x95 => {
                let n = self.u64()?;
                let remaining = (self.data.len() - self.pos) as u64;
                if n > remaining {
                    return limit(self.at, "FRAME length", n, remaining);
                }
            }
            b'(' => {
                if self.marks.len() >= self.limits.max_depth as usize {
                    return limit(
                        self.at,
                        "MARK nesting",
                        self.marks.len() as u64 + 1,
                        u64::from(self.limits.max_depth),
                    );
                }
                self.marks.push(self.stack.len());
            }
            b'0' => {
                if self.stack.len() > self.fence() {
                    self.stack.pop();
                } else if self.marks.pop().is_none() {
                    return malformed(self.at, "POP on an empty stack");
                }
            }
            b'1' => {
                self.pop_mark()?;
            }
            b'2' => {
                let t = self.top()?;
                self.push_id(t)?;
            }
            b'N' => self.push(Node::None)?,
            0x88 => self.push(Node::Bool(true))?,
            0x89 => self.push(Node::Bool(false))?,
            _ => return malformed(self.at, format!("unknown opcode 0x{op:02x}")),
        }
        Ok(())
    }

    /// Integers and floats (binary and text).
    fn op_number(&mut self, op: u8) -> R<()> {
        match op {
            b'I' => {
                let l = self.line()?;
                let node = match l {
                    b"00" => Node::Bool(false),
                    b"01" => Node::Bool(true),
                    _ => self.parse_int_text(l)?,
                };
                self.push(node)?;
            }
            b'J' => {
                let v = self.i32()?;
                self.push(Node::Int(i64::from(v)))?;
            }
            b'K' => {
                let v = self.u8()?;
                self.push(Node::Int(i64::from(v)))?;
            }
            b'M' => {
                let v = self.u16()?;
                self.push(Node::Int(i64::from(v)))?;
            }
            b'L' => {
                let l = self.line()?;
                let l = l.strip_suffix(b"L").unwrap_or(l);
                let node = self.parse_int_text(l)?;
                self.push(node)?;
            }
            0x8a => {
                let n = u64::from(self.u8()?);
                let b = self.take(n)?;
                let node = self.long_bytes(b)?;
                self.push(node)?;
            }
            0x8b => {
                let n = self.i32()?;
                if n < 0 {
                    return malformed(self.at, "LONG4 with a negative length");
                }
                if n as usize > self.limits.max_long_bytes {
                    return limit(
                        self.at,
                        "LONG4 integer length",
                        n as u64,
                        self.limits.max_long_bytes as u64,
                    );
                }
                let b = self.take(n as u64)?;
                let node = self.long_bytes(b)?;
                self.push(node)?;
            }
            b'F' => {
                let l = self.line()?;
                let s = self.utf8(l, "FLOAT")?;
                match s.trim().parse::<f64>() {
                    Ok(v) => self.push(Node::Float(v))?,
                    Err(_) => return malformed(self.at, "FLOAT is not a number"),
                }
            }
            b'G' => {
                let b = self.take(8)?;
                self.push(Node::Float(f64::from_be_bytes(b.try_into().expect("8"))))?;
            }
            _ => return malformed(self.at, format!("unknown opcode 0x{op:02x}")),
        }
        Ok(())
    }

    /// Strings and bytes.
    fn op_text(&mut self, op: u8) -> R<()> {
        match op {
            b'S' => {
                let l = self.line()?;
                let raw = self.parse_quoted(l)?;
                self.push(Node::Str(py2_str(raw)))?;
            }
            b'T' => {
                let n = self.i32()?;
                if n < 0 {
                    return malformed(self.at, "BINSTRING with a negative length");
                }
                let b = self.take(n as u64)?;
                self.push(Node::Str(py2_str(b.to_vec())))?;
            }
            b'U' => {
                let n = u64::from(self.u8()?);
                let b = self.take(n)?;
                self.push(Node::Str(py2_str(b.to_vec())))?;
            }
            b'V' => {
                let l = self.line()?;
                let s = self.raw_unicode_escape(l)?;
                self.push(Node::Str(s))?;
            }
            b'X' | 0x8c | 0x8d => {
                let n = match op {
                    b'X' => u64::from(self.u32()?),
                    0x8c => u64::from(self.u8()?),
                    _ => self.u64()?,
                };
                let b = self.take(n)?;
                let s = self.utf8(b, "string")?;
                self.push(Node::Str(s))?;
            }
            b'B' | b'C' | 0x8e | 0x96 => {
                let n = match op {
                    b'B' => u64::from(self.u32()?),
                    b'C' => u64::from(self.u8()?),
                    _ => self.u64()?,
                };
                let b = self.take(n)?;
                self.push(Node::Bytes(b.to_vec()))?;
            }
            _ => return malformed(self.at, format!("unknown opcode 0x{op:02x}")),
        }
        Ok(())
    }

    /// Tuples, lists, dicts and sets.
    fn op_container(&mut self, op: u8) -> R<()> {
        match op {
            b'}' | b'd' | b's' | b'u' => self.op_dict(op)?,
            0x8f..=0x91 => self.op_set(op)?,
            b')' => self.push(Node::Tuple(Vec::new()))?,
            b't' => {
                let items = self.pop_mark()?;
                self.push_container(Node::Tuple(items.clone()), &items)?;
            }
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.pop()?);
                }
                items.reverse();
                self.push_container(Node::Tuple(items.clone()), &items)?;
            }
            b']' => self.push(Node::List(Vec::new()))?,
            b'l' => {
                let items = self.pop_mark()?;
                self.push_container(Node::List(items.clone()), &items)?;
            }
            b'a' => {
                let v = self.pop()?;
                let list = self.top()?;
                self.extend_list(list, vec![v])?;
            }
            b'e' => {
                let items = self.pop_mark()?;
                let list = self.top()?;
                self.extend_list(list, items)?;
            }
            _ => return malformed(self.at, format!("unknown opcode 0x{op:02x}")),
        }
        Ok(())
    }

    /// Dicts: `EMPTY_DICT`, `DICT`, `SETITEM`, `SETITEMS`.
    fn op_dict(&mut self, op: u8) -> R<()> {
        match op {
            b'}' => self.push(Node::Dict {
                kind: DictKind::Plain,
                items: Vec::new(),
                attrs: None,
            })?,
            b'd' => {
                let items = self.pop_mark()?;
                if items.len() % 2 != 0 {
                    return malformed(self.at, "DICT with an odd number of items");
                }
                let pairs: Vec<(Id, Id)> = items.chunks(2).map(|c| (c[0], c[1])).collect();
                self.check_keys(&pairs)?;
                self.push_container(
                    Node::Dict {
                        kind: DictKind::Plain,
                        items: pairs,
                        attrs: None,
                    },
                    &items,
                )?;
            }
            b's' => {
                let v = self.pop()?;
                let k = self.pop()?;
                let d = self.top()?;
                self.extend_dict(d, vec![k, v])?;
            }
            b'u' => {
                let items = self.pop_mark()?;
                if items.len() % 2 != 0 {
                    return malformed(self.at, "SETITEMS with an odd number of items");
                }
                let d = self.top()?;
                self.extend_dict(d, items)?;
            }
            _ => return malformed(self.at, format!("unknown opcode 0x{op:02x}")),
        }
        Ok(())
    }

    /// Sets: `EMPTY_SET`, `ADDITEMS`, `FROZENSET`.
    fn op_set(&mut self, op: u8) -> R<()> {
        let lenient = self.lenient();
        match op {
            0x8f => self.push(Node::Set(Vec::new()))?,
            0x90 => {
                let items = self.pop_mark()?;
                let s = self.top()?;
                self.grow(s, &items)?;
                match self.arena.get_mut(s) {
                    Node::Set(v) => v.extend(items),
                    Node::Unknown(_) if lenient => {}
                    other => {
                        let t = other.type_name();
                        return refused(self.at, format!("ADDITEMS on a {t} (only sets)"));
                    }
                }
            }
            0x91 => {
                let items = self.pop_mark()?;
                self.push_container(Node::Set(items.clone()), &items)?;
            }
            _ => return malformed(self.at, format!("unknown opcode 0x{op:02x}")),
        }
        Ok(())
    }

    /// The memo.
    fn op_memo(&mut self, op: u8) -> R<()> {
        match op {
            b'p' => {
                let l = self.line()?;
                let idx = self.parse_memo_index(l)?;
                self.memo_put(idx)?;
            }
            b'q' => {
                let idx = u32::from(self.u8()?);
                self.memo_put(idx)?;
            }
            b'r' => {
                let idx = self.u32()?;
                self.memo_put(idx)?;
            }
            0x94 => {
                let idx = self.memo.len() as u32;
                self.memo_put(idx)?;
            }
            b'g' => {
                let l = self.line()?;
                let idx = self.parse_memo_index(l)?;
                self.memo_get(idx)?;
            }
            b'h' => {
                let idx = u32::from(self.u8()?);
                self.memo_get(idx)?;
            }
            b'j' => {
                let idx = self.u32()?;
                self.memo_get(idx)?;
            }
            _ => return malformed(self.at, format!("unknown opcode 0x{op:02x}")),
        }
        Ok(())
    }

    /// Globals and calls.
    fn op_global(&mut self, op: u8) -> R<()> {
        match op {
            b'c' => {
                let m = self.line()?;
                let n = self.line()?;
                let m = self.utf8(m, "GLOBAL module")?;
                let n = self.utf8(n, "GLOBAL name")?;
                self.resolve(&m, &n)?;
            }
            0x93 => {
                let n = self.pop()?;
                let m = self.pop()?;
                match (self.arena.get(m), self.arena.get(n)) {
                    (Node::Str(m), Node::Str(n)) => {
                        let (m, n) = (m.clone(), n.clone());
                        self.resolve(&m, &n)?;
                    }
                    _ => {
                        self.refuse("STACK_GLOBAL operands are not two strings".into())?;
                        self.push(Node::Unknown("<STACK_GLOBAL of non-strings>".into()))?;
                    }
                }
            }
            b'R' => {
                let args = self.pop()?;
                let callable = self.pop()?;
                self.reduce(callable, args)?;
            }
            b'b' => {
                let state = self.pop()?;
                let target = self.top()?;
                self.build(target, state)?;
            }
            _ => return malformed(self.at, format!("unknown opcode 0x{op:02x}")),
        }
        Ok(())
    }

    /// Object construction, persistent ids, and the refused extension and out-of-band buffer
    /// opcodes.
    fn op_object(&mut self, op: u8) -> R<()> {
        match op {
            0x81 | 0x92 => {
                if op == 0x92 {
                    self.pop()?;
                }
                self.pop()?;
                let cls = self.pop()?;
                let name = self.arena.get(cls).type_name();
                let opname = if op == 0x81 { "NEWOBJ" } else { "NEWOBJ_EX" };
                let hint = match self.arena.get(cls) {
                    Node::Unknown(s) => allow::module_hint(s.split('.').next().unwrap_or("")),
                    _ => "",
                };
                self.foreign(format!(
                    "{opname} of {name} refused: instantiating classes is not allowed{hint}"
                ))?;
                self.push(Node::Unknown(format!("{opname} of {name}")))?;
            }
            b'i' => {
                let m = self.line()?;
                let n = self.line()?;
                let m = self.utf8(m, "INST module")?;
                let n = self.utf8(n, "INST name")?;
                self.record_global(&m, &n, false);
                if self.inert && !self.scan && allow::never_inert(&m) {
                    return refused(self.at, format!("INST `{m}.{n}` refused: never kept inert"));
                }
                self.pop_mark()?;
                self.foreign(format!(
                    "INST `{m}.{n}` refused: the INST opcode looks a class up and calls it{}",
                    allow::module_hint(&m)
                ))?;
                self.push(Node::Unknown(format!("{m}.{n}")))?;
            }
            b'o' => {
                let items = self.pop_mark()?;
                let name = match items.first() {
                    Some(&c) => self.arena.get(c).type_name(),
                    None => return malformed(self.at, "OBJ without a class"),
                };
                self.foreign(format!(
                    "OBJ of {name} refused: the OBJ opcode calls a class with arguments"
                ))?;
                self.push(Node::Unknown(format!("OBJ of {name}")))?;
            }
            0x82..=0x84 => {
                let code = match op {
                    0x82 => u32::from(self.u8()?),
                    0x83 => u32::from(self.u16()?),
                    _ => self.u32()?,
                };
                self.refuse(format!(
                    "EXT{} extension code {code} refused: the copyreg extension registry resolves arbitrary globals",
                    match op { 0x82 => 1, 0x83 => 2, _ => 4 }
                ))?;
                self.push(Node::Unknown(format!("extension code {code}")))?;
            }
            b'P' => {
                self.line()?;
                self.refuse("PERSID (protocol-0 text persistent id) refused".into())?;
                self.push(Node::Unknown("PERSID".into()))?;
            }
            b'Q' => {
                let pid = self.pop()?;
                self.persistent_load(pid)?;
            }
            0x97 | 0x98 => {
                return refused(
                    self.at,
                    format!(
                        "out-of-band buffer opcode 0x{op:02x} refused (pickle protocol 5 buffers)"
                    ),
                )
            }
            _ => return malformed(self.at, format!("unknown opcode 0x{op:02x}")),
        }
        Ok(())
    }

    // ---- opcode helpers ----------------------------------------------------------------

    /// A text `INT`/`LONG` argument as CPython's unpickler reads it: C `strtol` with base 0
    /// (`0x10`, `010` octal, a sign, surrounding blanks), else Python's `int(s, 0)` (`0o17`,
    /// `0b101`, `1_000`).
    fn parse_int_text(&self, l: &[u8]) -> R<Node> {
        let s = self.utf8(l, "INT")?;
        if let Some(v) = crate::intlit::parse(&s) {
            return Ok(Node::Int(v));
        }
        let t = s.trim();
        let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
        if !digits.is_empty()
            && digits.len() <= self.limits.max_long_bytes * 3
            && digits.bytes().all(|b| b.is_ascii_digit())
        {
            let sign = if t.starts_with('-') { "-" } else { "" };
            let digits = digits.trim_start_matches('0');
            return Ok(Node::BigInt(format!("{sign}{digits}")));
        }
        malformed(self.at, "INT/LONG is not an integer literal")
    }

    fn long_bytes(&self, b: &[u8]) -> R<Node> {
        if b.len() > self.limits.max_long_bytes {
            return limit(
                self.at,
                "LONG integer length",
                b.len() as u64,
                self.limits.max_long_bytes as u64,
            );
        }
        if b.is_empty() {
            return Ok(Node::Int(0));
        }
        let neg = b[b.len() - 1] & 0x80 != 0;
        if b.len() <= 8 {
            let mut buf = if neg { [0xffu8; 8] } else { [0u8; 8] };
            buf[..b.len()].copy_from_slice(b);
            return Ok(Node::Int(i64::from_le_bytes(buf)));
        }
        // Two's complement magnitude, then decimal by repeated division (≤ 1 KiB: cheap).
        let mut mag: Vec<u8> = b.to_vec();
        if neg {
            let mut carry = 1u16;
            for byte in mag.iter_mut() {
                let v = u16::from(!*byte) + carry;
                *byte = v as u8;
                carry = v >> 8;
            }
        }
        let mut digits = Vec::new();
        while mag.iter().any(|&x| x != 0) {
            let mut rem = 0u32;
            for byte in mag.iter_mut().rev() {
                let cur = (rem << 8) | u32::from(*byte);
                *byte = (cur / 10) as u8;
                rem = cur % 10;
            }
            digits.push(b'0' + rem as u8);
        }
        if digits.is_empty() {
            digits.push(b'0');
        }
        if neg {
            digits.push(b'-');
        }
        digits.reverse();
        let s = String::from_utf8(digits).expect("ascii digits");
        match s.parse::<i64>() {
            Ok(v) => Ok(Node::Int(v)),
            Err(_) => Ok(Node::BigInt(s)),
        }
    }

    fn parse_quoted(&self, l: &[u8]) -> R<Vec<u8>> {
        if l.len() < 2 || l[0] != l[l.len() - 1] || !(l[0] == b'\'' || l[0] == b'"') {
            return malformed(self.at, "STRING argument is not quoted");
        }
        let inner = &l[1..l.len() - 1];
        let mut out = Vec::with_capacity(inner.len());
        let mut i = 0;
        while i < inner.len() {
            let c = inner[i];
            i += 1;
            if c != b'\\' {
                out.push(c);
                continue;
            }
            let Some(&e) = inner.get(i) else {
                return malformed(self.at, "STRING ends with a backslash");
            };
            i += 1;
            match e {
                b'\\' => out.push(b'\\'),
                b'\'' => out.push(b'\''),
                b'"' => out.push(b'"'),
                b'a' => out.push(7),
                b'b' => out.push(8),
                b'f' => out.push(12),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b't' => out.push(b'\t'),
                b'v' => out.push(11),
                b'x' => {
                    let h = inner.get(i..i + 2).and_then(|h| {
                        std::str::from_utf8(h)
                            .ok()
                            .and_then(|h| u8::from_str_radix(h, 16).ok())
                    });
                    match h {
                        Some(v) => {
                            out.push(v);
                            i += 2;
                        }
                        None => return malformed(self.at, "bad \\x escape in STRING"),
                    }
                }
                b'0'..=b'7' => {
                    let mut v = u32::from(e - b'0');
                    let mut k = 0;
                    while k < 2 && i < inner.len() && (b'0'..=b'7').contains(&inner[i]) {
                        v = v * 8 + u32::from(inner[i] - b'0');
                        i += 1;
                        k += 1;
                    }
                    out.push(v as u8);
                }
                other => {
                    out.push(b'\\');
                    out.push(other);
                }
            }
        }
        Ok(out)
    }

    fn raw_unicode_escape(&self, l: &[u8]) -> R<String> {
        let mut out = String::with_capacity(l.len());
        let mut i = 0;
        while i < l.len() {
            if l[i] == b'\\' && i + 1 < l.len() && (l[i + 1] == b'u' || l[i + 1] == b'U') {
                let n = if l[i + 1] == b'u' { 4 } else { 8 };
                let hex = l
                    .get(i + 2..i + 2 + n)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .and_then(char::from_u32);
                match hex {
                    Some(c) => {
                        out.push(c);
                        i += 2 + n;
                        continue;
                    }
                    None => return malformed(self.at, "bad \\u escape in UNICODE"),
                }
            }
            out.push(char::from(l[i]));
            i += 1;
        }
        Ok(out)
    }

    fn parse_memo_index(&self, l: &[u8]) -> R<u32> {
        match std::str::from_utf8(l)
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
        {
            Some(v) => Ok(v),
            None => malformed(self.at, "memo index is not a decimal u32"),
        }
    }

    fn memo_put(&mut self, idx: u32) -> R<()> {
        let v = self.top()?;
        // Picklers number memo slots from 0 up; a huge index only serves to make array-backed
        // memos (CPython's C unpickler) allocate gigabytes.
        if idx as usize >= self.limits.max_memo {
            return limit(
                self.at,
                "pickle memo index",
                u64::from(idx),
                self.limits.max_memo as u64,
            );
        }
        if !self.memo.contains_key(&idx) && self.memo.len() >= self.limits.max_memo {
            return limit(
                self.at,
                "pickle memo entries",
                self.memo.len() as u64 + 1,
                self.limits.max_memo as u64,
            );
        }
        self.memo.insert(idx, v);
        Ok(())
    }

    fn memo_get(&mut self, idx: u32) -> R<()> {
        match self.memo.get(&idx) {
            Some(&v) => self.push_id(v),
            None => malformed(self.at, format!("memo key {idx} is not defined")),
        }
    }

    fn extend_list(&mut self, list: Id, items: Vec<Id>) -> R<()> {
        let lenient = self.lenient();
        self.grow(list, &items)?;
        match self.arena.get_mut(list) {
            Node::List(v) => {
                v.extend(items);
                Ok(())
            }
            Node::Unknown(_) if lenient => Ok(()),
            other => {
                let t = other.type_name();
                refused(self.at, format!("APPEND on a {t} (only lists)"))
            }
        }
    }

    fn check_keys(&self, pairs: &[(Id, Id)]) -> R<()> {
        let lenient = self.lenient();
        for &(k, _) in pairs {
            match self.arena.get(k) {
                Node::Str(_)
                | Node::Int(_)
                | Node::BigInt(_)
                | Node::Bool(_)
                | Node::None
                | Node::Float(_)
                | Node::Bytes(_)
                | Node::Tuple(_)
                | Node::Global(Sym::DType(_)) => {}
                Node::Unknown(_) if lenient => {}
                other => {
                    let t = other.type_name();
                    return refused(
                        self.at,
                        format!("dict key of type {t} (unhashable or not a constant)"),
                    );
                }
            }
        }
        Ok(())
    }

    fn extend_dict(&mut self, d: Id, items: Vec<Id>) -> R<()> {
        let lenient = self.lenient();
        let pairs: Vec<(Id, Id)> = items.chunks(2).map(|c| (c[0], c[1])).collect();
        self.check_keys(&pairs)?;
        self.grow(d, &items)?;
        match self.arena.get_mut(d) {
            Node::Dict { items: v, .. } => {
                v.extend(pairs);
                Ok(())
            }
            Node::Unknown(_) if lenient => Ok(()),
            other => {
                let t = other.type_name();
                refused(
                    self.at,
                    format!("SETITEM on a {t} (only dict, OrderedDict and Counter)"),
                )
            }
        }
    }

    // ---- REDUCE / BUILD ----------------------------------------------------------------

    fn reduce(&mut self, callable: Id, args: Id) -> R<()> {
        let sym = match self.arena.get(callable) {
            Node::Global(s) => *s,
            Node::Unknown(s) => {
                let s = s.clone();
                self.foreign(format!("call of `{s}` refused"))?;
                return self.push(Node::Unknown(format!("call of {s}")));
            }
            other => {
                let t = other.type_name();
                return refused(self.at, format!("REDUCE on a {t}, not a callable symbol"));
            }
        };
        let args = match self.arena.get(args) {
            Node::Tuple(a) => a.clone(),
            other => {
                let t = other.type_name();
                return refused(
                    self.at,
                    format!(
                        "REDUCE of `{}` with {t} arguments, not a tuple",
                        sym.qualname()
                    ),
                );
            }
        };
        let node = self.apply(sym, &args)?;
        match node {
            Applied::Node(n, children) => self.push_container(n, &children),
            Applied::Same(id) => self.push_id(id),
        }
    }
}

fn py2_str(raw: Vec<u8>) -> String {
    match String::from_utf8(raw) {
        Ok(s) => s,
        Err(e) => e.into_bytes().iter().map(|&b| char::from(b)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(b: &[u8]) -> R<Parsed> {
        Vm::new(b, VmLimits::default(), PidStyle::Zip, false).run(false)
    }

    #[test]
    fn refuses_os_system_with_offset() {
        let p = b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03.";
        let e = run(p).unwrap_err();
        assert_eq!(e.offset, 2);
        assert!(matches!(e.kind, VmErrorKind::Refused(ref m) if m.contains("os.system")));
    }

    #[test]
    fn long1_sign_and_magic() {
        let mut p = b"\x80\x02\x8a\x0a".to_vec();
        p.extend_from_slice(&0x1950A86A20F9469CFC6Cu128.to_le_bytes()[..10]);
        p.push(b'.');
        let r = run(&p).unwrap();
        match r.arena.get(r.root) {
            Node::BigInt(s) => assert_eq!(s, &0x1950A86A20F9469CFC6Cu128.to_string()),
            n => panic!("{n:?}"),
        }
        let r = run(b"\x80\x02\x8a\x01\xff.").unwrap();
        assert!(matches!(r.arena.get(r.root), Node::Int(-1)));
        let r = run(b"\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xff.").unwrap();
        assert!(matches!(r.arena.get(r.root), Node::BigInt(s) if s == "-18446744073709551616"));
    }

    #[test]
    fn trailing_data_refused_and_length_lie_limited() {
        assert!(matches!(
            run(b"N.N.").unwrap_err().kind,
            VmErrorKind::Refused(_)
        ));
        let e = run(b"X\xf0\xff\xff\xffab").unwrap_err();
        assert!(matches!(e.kind, VmErrorKind::Limit { .. }));
    }

    #[test]
    fn billion_laughs_is_linear() {
        let mut p = b"\x80\x02]q\x00".to_vec();
        for i in 0..64u8 {
            p.extend_from_slice(&[b'h', i, b'h', i, 0x86, b'q', i + 1]);
        }
        p.push(b'.');
        // Leaves 64 tuples + a list: arena stays tiny; depth cap applies at 256.
        let r = Vm::new(&p, VmLimits::default(), PidStyle::Zip, false).run(false);
        // The final stack holds the list and the last tuple: malformed, but not a blow-up.
        assert!(r.is_err());
    }

    #[test]
    fn deep_nesting_limited() {
        let mut p = b"\x80\x02".to_vec();
        p.extend(std::iter::repeat_n(b']', 100_000));
        p.extend(std::iter::repeat_n(b'a', 99_999));
        p.push(b'.');
        let e = run(&p).unwrap_err();
        assert!(matches!(
            e.kind,
            VmErrorKind::Limit {
                what: "pickle nesting depth",
                ..
            }
        ));
    }
}
