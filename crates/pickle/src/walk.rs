//! A static opcode walk: reads a whole pickle without building any value, for `scan`.
//!
//! The [`crate::vm`] interprets a pickle and stops at the first construct it refuses, cannot
//! convert or cannot parse; whatever follows is then unchecked, and `torch.load` (which uses
//! CPython's unpickler) would still run it. The walk goes on from where the VM stops: it tracks
//! only what a security verdict needs — which stack values are string constants or globals —
//! so every `GLOBAL`/`STACK_GLOBAL`/`INST` operand and every call (`REDUCE`, `INST`, `OBJ`,
//! `NEWOBJ`, `NEWOBJ_EX`, `BUILD`) is listed with its offset.
//!
//! It fails closed: a construct it cannot prove harmless is a [`Hazard`]. That is a global off
//! the allowlist, a `STACK_GLOBAL` whose operands are not provably two string constants, a call
//! whose callable is not provably an allowlisted global, an `EXT*` code (the copyreg registry
//! resolves arbitrary globals), out-of-band buffers, and anything that stops the walk before
//! `STOP` (unknown opcode, truncation, a stack the opcodes do not fit). Memory is linear in the
//! input: strings on the walk's stack are shared, never copied per use.

use std::collections::HashMap;
use std::rc::Rc;

use crate::allow;
use crate::vm::GlobalRef;

/// A construct the walk cannot prove harmless.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hazard {
    /// Offset of the opcode in the walked bytes.
    pub offset: u64,
    /// What it is.
    pub what: String,
    /// What kind of hazard (a stable id for reports: `global`, `call`, `ext`, ...).
    pub kind: HazardKind,
}

/// Kinds of hazards (rule ids in SARIF).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HazardKind {
    /// A global outside the allowlist.
    Global,
    /// A global reference the walk cannot resolve (`STACK_GLOBAL` of non-constants, `EXT*`).
    Unresolved,
    /// A call of something that is not provably an allowlisted global.
    Call,
    /// The pickle cannot be read to its end (truncated, unknown opcode, broken stack).
    Unreadable,
}

/// A call opcode seen by the walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Offset of the opcode.
    pub offset: u64,
    /// `REDUCE`, `BUILD`, `INST`, `OBJ`, `NEWOBJ` or `NEWOBJ_EX`.
    pub op: &'static str,
    /// The callable as far as the walk knows it (`module.name`, or `?`).
    pub target: String,
}

/// The result of a walk.
#[derive(Debug, Default)]
pub struct Walk {
    /// Every global referenced (`GLOBAL`, `STACK_GLOBAL` with constant operands, `INST`).
    pub globals: Vec<GlobalRef>,
    /// Every call opcode.
    pub calls: Vec<Call>,
    /// Constructs that cannot be proven harmless.
    pub hazards: Vec<Hazard>,
    /// Offset just past `STOP`, when the walk reached it.
    pub end: Option<usize>,
    /// Opcode counts by byte.
    pub op_counts: Vec<(u8, u64)>,
    /// Globals with identifier-like names, and calls of known globals, seen before the first
    /// break (CPython stops at a break, so only these could have run).
    pub live_constructs: usize,
}

impl Walk {
    /// True when nothing the walk saw needs a closer look: it reached `STOP` and found no
    /// hazard.
    pub fn is_clean(&self) -> bool {
        self.end.is_some() && self.hazards.is_empty()
    }

    /// True when the bytes look like a pickle at all: the walk reached `STOP`, or it saw a
    /// global with identifier-like names or a call of a global before the first break (a
    /// broken pickle still runs what precedes the break under CPython's unpickler).
    pub fn looks_like_pickle(&self) -> bool {
        self.end.is_some() || self.live_constructs > 0
    }
}

/// Most entries recorded per list (all are still checked and counted in hazards).
const MAX_RECORDED: usize = 10_000;

/// Deepest stack (and metastack) walked; the interpreter's cap. Past it nothing is proven.
const MAX_STACK: usize = 1 << 20;

/// Most memo entries walked; the interpreter's cap.
const MAX_MEMO: usize = 1 << 24;

/// A value on the walk's stack: only what a verdict needs.
#[derive(Debug, Clone)]
enum V {
    /// A string constant (shared: memo gets do not copy it).
    Str(Rc<str>),
    /// A global, by name, and whether the allowlist accepts it.
    Global(Rc<str>, bool),
    /// Anything else.
    Other,
}

struct Walker<'a> {
    data: &'a [u8],
    pos: usize,
    at: usize,
    stack: Vec<V>,
    marks: Vec<usize>,
    memo: HashMap<u32, V>,
    counts: [u64; 256],
    out: Walk,
    max_ops: u64,
    /// Set at the first break CPython would stop at.
    broken: bool,
}

/// Walks `data` from its start to the first `STOP` (or to where it can no longer be read).
/// At most `max_ops` opcodes are walked; more is a hazard.
pub fn walk(data: &[u8], max_ops: u64) -> Walk {
    let mut w = Walker {
        data,
        pos: 0,
        at: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        counts: [0; 256],
        out: Walk::default(),
        max_ops,
        broken: false,
    };
    w.run();
    let counts = w.counts;
    let mut out = w.out;
    out.op_counts = counts
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(op, &c)| (op as u8, c))
        .collect();
    out
}

/// True for a dotted Python identifier (`torch._utils`, `os`).
fn identifier_path(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|part| {
            let mut c = part.chars();
            c.next()
                .is_some_and(|f| f == '_' || f.is_ascii_alphabetic())
                && c.all(|x| x == '_' || x.is_ascii_alphanumeric())
        })
}

impl Walker<'_> {
    fn run(&mut self) {
        let mut ops = 0u64;
        loop {
            self.at = self.pos;
            let Some(&op) = self.data.get(self.pos) else {
                self.unreadable("the pickle ends without STOP (truncated)".into());
                return;
            };
            self.pos += 1;
            ops += 1;
            if ops > self.max_ops {
                self.unreadable(format!(
                    "more than {} opcodes: not walked further",
                    self.max_ops
                ));
                return;
            }
            self.counts[op as usize] += 1;
            if op == b'.' {
                if self.stack.is_empty() {
                    self.unreadable("STOP on an empty stack".into());
                    return;
                }
                self.out.end = Some(self.pos);
                return;
            }
            if let Err(msg) = self.step(op) {
                self.unreadable(msg);
                return;
            }
            if self.stack.len() > MAX_STACK || self.marks.len() > MAX_STACK {
                self.unreadable(format!("a stack deeper than {MAX_STACK} values"));
                return;
            }
            if self.memo.len() > MAX_MEMO {
                self.unreadable(format!("more than {MAX_MEMO} memo entries"));
                return;
            }
        }
    }

    fn hazard(&mut self, kind: HazardKind, what: String) {
        if kind == HazardKind::Unreadable {
            self.broken = true;
        }
        if self.out.hazards.len() < MAX_RECORDED {
            self.out.hazards.push(Hazard {
                offset: self.at as u64,
                what,
                kind,
            });
        }
    }

    fn unreadable(&mut self, what: String) {
        self.hazard(
            HazardKind::Unreadable,
            format!("{what}; the pickle cannot be read past this point, so nothing after it is proven harmless"),
        );
    }

    fn take(&mut self, n: u64) -> Result<&[u8], String> {
        let rest = (self.data.len() - self.pos) as u64;
        if n > rest {
            return Err(format!(
                "an argument of {n} bytes where {rest} remain (truncated)"
            ));
        }
        let s = &self.data[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn len_prefix(&mut self, width: usize) -> Result<u64, String> {
        let b = self.take(width as u64)?;
        let mut buf = [0u8; 8];
        buf[..width].copy_from_slice(b);
        Ok(u64::from_le_bytes(buf))
    }

    fn line(&mut self) -> Result<&[u8], String> {
        let rest = &self.data[self.pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(i) => {
                self.pos += i + 1;
                Ok(&rest[..i])
            }
            None => Err("a text argument without a newline (truncated)".into()),
        }
    }

    fn push(&mut self, v: V) {
        self.stack.push(v);
    }

    fn pop(&mut self) -> V {
        let fence = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() > fence {
            return self.stack.pop().expect("above the fence");
        }
        self.hazard(
            HazardKind::Unreadable,
            "an opcode pops more values than the stack holds (CPython stops here)".into(),
        );
        V::Other
    }

    fn pop_mark(&mut self) -> Vec<V> {
        match self.marks.pop() {
            Some(m) => self.stack.split_off(m.min(self.stack.len())),
            None => {
                self.hazard(
                    HazardKind::Unreadable,
                    "an opcode needs a MARK and there is none (CPython stops here)".into(),
                );
                Vec::new()
            }
        }
    }

    fn top(&mut self) -> V {
        let v = self.pop();
        self.push(v.clone());
        v
    }

    fn global(&mut self, module: &str, name: &str) -> V {
        let allowed = allow::lookup(module, name).is_some();
        if identifier_path(module) && identifier_path(name) && !self.broken {
            self.out.live_constructs += 1;
        }
        if self.out.globals.len() < MAX_RECORDED {
            self.out.globals.push(GlobalRef {
                offset: self.at as u64,
                module: module.to_string(),
                name: name.to_string(),
                allowed,
            });
        }
        let m = weightport_core::sanitize(module);
        let n = weightport_core::sanitize(name);
        if !allowed {
            self.hazard(
                HazardKind::Global,
                format!(
                    "global `{m}.{n}` is not on the allowlist{}",
                    allow::module_hint(module)
                ),
            );
        }
        V::Global(format!("{m}.{n}").into(), allowed)
    }

    /// A call opcode applying `callable`.
    fn call(&mut self, op: &'static str, callable: &V) {
        let target = match callable {
            V::Global(name, _) => name.to_string(),
            _ => "?".to_string(),
        };
        if target != "?" && !self.broken {
            self.out.live_constructs += 1;
        }
        if self.out.calls.len() < MAX_RECORDED {
            self.out.calls.push(Call {
                offset: self.at as u64,
                op,
                target: target.clone(),
            });
        }
        match callable {
            V::Global(_, true) => {}
            V::Global(name, false) => {
                let what = format!("{op} calls `{name}`, which is not on the allowlist");
                self.hazard(HazardKind::Call, what);
            }
            _ => self.hazard(
                HazardKind::Call,
                format!("{op} calls a value that is not provably an allowlisted global"),
            ),
        }
    }

    fn text(&mut self, raw: &[u8]) -> V {
        match std::str::from_utf8(raw) {
            Ok(s) => V::Str(s.into()),
            Err(_) => V::Other,
        }
    }

    /// `S'...'`: the quoted form without escapes is a constant; anything with an escape is
    /// not decoded (fail closed: it cannot name a global then).
    fn quoted(&mut self, l: &[u8]) -> V {
        let q = l.first().copied();
        let ok = l.len() >= 2
            && matches!(q, Some(b'\'' | b'"'))
            && l.last().copied() == q
            && !l.contains(&b'\\');
        if ok {
            let inner = l[1..l.len() - 1].to_vec();
            self.text(&inner)
        } else {
            V::Other
        }
    }

    fn memo_put(&mut self, idx: u32) {
        let v = self.top();
        self.memo.insert(idx, v);
    }

    fn memo_get(&mut self, idx: u32) {
        match self.memo.get(&idx) {
            Some(v) => {
                let v = v.clone();
                self.push(v)
            }
            None => {
                self.hazard(
                    HazardKind::Unreadable,
                    format!("memo key {idx} is not defined (CPython stops here)"),
                );
                self.push(V::Other)
            }
        }
    }

    fn memo_index(l: &[u8]) -> Result<u32, String> {
        std::str::from_utf8(l)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .ok_or_else(|| "a memo index that is not a number".to_string())
    }

    /// Framing and stack opcodes; the others go on to [`Self::step_value`],
    /// [`Self::step_container`] and [`Self::step_call`].
    fn step(&mut self, op: u8) -> Result<(), String> {
        match op {
            0x80 => {
                self.take(1)?;
            }
            0x95 => {
                self.take(8)?;
            }
            b'(' => self.marks.push(self.stack.len()),
            b'0' => {
                let fence = self.marks.last().copied().unwrap_or(0);
                if self.stack.len() > fence {
                    self.stack.pop();
                } else if self.marks.pop().is_none() {
                    self.pop();
                }
            }
            b'1' => {
                self.pop_mark();
            }
            b'2' => {
                let v = self.top();
                self.push(v);
            }
            _ => return self.step_value(op),
        }
        Ok(())
    }

    /// Constants, numbers and strings: each pushes one value.
    fn step_value(&mut self, op: u8) -> Result<(), String> {
        match op {
            b'N' | 0x88 | 0x89 | b')' | b']' | b'}' | 0x8f => self.push(V::Other),
            b'I' | b'L' | b'F' => {
                self.line()?;
                self.push(V::Other);
            }
            b'J' => self.constant(4)?,
            b'K' => self.constant(1)?,
            b'M' => self.constant(2)?,
            b'G' => self.constant(8)?,
            0x8a => {
                let n = self.len_prefix(1)?;
                self.constant(n as usize)?;
            }
            0x8b | b'B' => {
                let n = self.len_prefix(4)?;
                if op == 0x8b && n >= 1 << 31 {
                    return Err("LONG4 with a negative length".into());
                }
                self.constant(n as usize)?;
            }
            b'C' => {
                let n = self.len_prefix(1)?;
                self.constant(n as usize)?;
            }
            0x8e | 0x96 => {
                let n = self.len_prefix(8)?;
                self.take(n)?;
                self.push(V::Other);
            }
            b'S' => {
                let l = self.line()?.to_vec();
                let v = self.quoted(&l);
                self.push(v);
            }
            b'V' => {
                let l = self.line()?.to_vec();
                let v = if l.contains(&b'\\') {
                    V::Other
                } else {
                    self.text(&l)
                };
                self.push(v);
            }
            b'T' | b'X' | b'U' | 0x8c | 0x8d => {
                let width = match op {
                    b'T' | b'X' => 4,
                    b'U' | 0x8c => 1,
                    _ => 8,
                };
                let n = self.len_prefix(width)?;
                if op == b'T' && n >= 1 << 31 {
                    return Err("BINSTRING with a negative length".into());
                }
                let raw = self.take(n)?.to_vec();
                let v = self.text(&raw);
                self.push(v);
            }
            _ => return self.step_container(op),
        }
        Ok(())
    }

    /// Building containers and the memo.
    fn step_container(&mut self, op: u8) -> Result<(), String> {
        match op {
            b't' | b'l' | b'd' | 0x91 => {
                self.pop_mark();
                self.push(V::Other);
            }
            0x85..=0x87 => {
                for _ in 0..(op - 0x84) {
                    self.pop();
                }
                self.push(V::Other);
            }
            b'a' => {
                self.pop();
                self.top();
            }
            b's' => {
                self.pop();
                self.pop();
                self.top();
            }
            b'e' | b'u' | 0x90 => {
                self.pop_mark();
                self.top();
            }
            b'p' => {
                let l = self.line()?.to_vec();
                let idx = Self::memo_index(&l)?;
                self.memo_put(idx);
            }
            b'q' => {
                let idx = self.len_prefix(1)? as u32;
                self.memo_put(idx);
            }
            b'r' => {
                let idx = self.len_prefix(4)? as u32;
                self.memo_put(idx);
            }
            0x94 => {
                let idx = self.memo.len() as u32;
                self.memo_put(idx);
            }
            b'g' => {
                let l = self.line()?.to_vec();
                let idx = Self::memo_index(&l)?;
                self.memo_get(idx);
            }
            b'h' => {
                let idx = self.len_prefix(1)? as u32;
                self.memo_get(idx);
            }
            b'j' => {
                let idx = self.len_prefix(4)? as u32;
                self.memo_get(idx);
            }
            _ => return self.step_call(op),
        }
        Ok(())
    }

    fn constant(&mut self, n: usize) -> Result<(), String> {
        self.take(n as u64)?;
        self.push(V::Other);
        Ok(())
    }

    /// Globals, calls, persistent ids, extension codes and buffers.
    fn step_call(&mut self, op: u8) -> Result<(), String> {
        match op {
            b'c' | 0x93 | 0x82..=0x84 => self.step_global(op)?,
            b'P' | b'Q' | 0x97 | 0x98 => self.step_persistent(op)?,
            b'i' => {
                let m = String::from_utf8_lossy(self.line()?).into_owned();
                let n = String::from_utf8_lossy(self.line()?).into_owned();
                let class = self.global(&m, &n);
                self.pop_mark();
                self.call("INST", &class);
                self.push(V::Other);
            }
            b'R' => {
                self.pop();
                let callable = self.pop();
                self.call("REDUCE", &callable);
                self.push(V::Other);
            }
            0x81 | 0x92 => {
                if op == 0x92 {
                    self.pop();
                }
                self.pop();
                let class = self.pop();
                self.call(if op == 0x81 { "NEWOBJ" } else { "NEWOBJ_EX" }, &class);
                self.push(V::Other);
            }
            b'o' => {
                let items = self.pop_mark();
                let class = items.first().cloned().unwrap_or(V::Other);
                self.call("OBJ", &class);
                self.push(V::Other);
            }
            b'b' => {
                self.pop();
                let target = self.top();
                self.record_build(&target);
            }
            _ => return Err(format!("unknown opcode 0x{op:02x}")),
        }
        Ok(())
    }

    /// The opcodes that name a global: `GLOBAL`, `STACK_GLOBAL` and the extension codes.
    fn step_global(&mut self, op: u8) -> Result<(), String> {
        match op {
            b'c' => {
                let m = String::from_utf8_lossy(self.line()?).into_owned();
                let n = String::from_utf8_lossy(self.line()?).into_owned();
                let v = self.global(&m, &n);
                self.push(v);
            }
            0x93 => {
                let n = self.pop();
                let m = self.pop();
                let v = match (m, n) {
                    (V::Str(m), V::Str(n)) => self.global(&m, &n),
                    _ => {
                        self.hazard(
                            HazardKind::Unresolved,
                            "STACK_GLOBAL whose operands are not provably two string constants"
                                .into(),
                        );
                        V::Global("?".into(), false)
                    }
                };
                self.push(v);
            }
            0x82..=0x84 => {
                let width = match op {
                    0x82 => 1,
                    0x83 => 2,
                    _ => 4,
                };
                let code = self.len_prefix(width)?;
                self.hazard(
                    HazardKind::Unresolved,
                    format!("EXT{width} extension code {code}: the copyreg registry resolves it to an arbitrary global"),
                );
                self.push(V::Global(format!("<extension {code}>").into(), false));
            }
            _ => return Err(format!("unknown opcode 0x{op:02x}")),
        }
        Ok(())
    }

    /// Persistent ids and out-of-band buffers.
    fn step_persistent(&mut self, op: u8) -> Result<(), String> {
        match op {
            b'P' => {
                self.line()?;
                self.push(V::Other);
            }
            b'Q' => {
                self.pop();
                self.push(V::Other);
            }
            0x97 => {
                self.hazard(
                    HazardKind::Unreadable,
                    "NEXT_BUFFER: out-of-band buffers cannot be checked".into(),
                );
                self.push(V::Other);
            }
            0x98 => {}
            _ => return Err(format!("unknown opcode 0x{op:02x}")),
        }
        Ok(())
    }

    /// `BUILD` sets state on an object through its class's `__setstate__` (or attribute
    /// writes): harmless when every class in the pickle is allowlisted, which the globals'
    /// hazards already decide. Listed, not a hazard of its own.
    fn record_build(&mut self, _target: &V) {
        if self.out.calls.len() < MAX_RECORDED {
            self.out.calls.push(Call {
                offset: self.at as u64,
                op: "BUILD",
                target: "setstate".to_string(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(w: &Walk) -> Vec<HazardKind> {
        w.hazards.iter().map(|h| h.kind).collect()
    }

    #[test]
    fn os_system_protocol_0() {
        let w = walk(b"cos\nsystem\n(S'echo hi'\ntR.", 100);
        assert_eq!(w.globals.len(), 1);
        assert_eq!(w.globals[0].offset, 0);
        assert_eq!(kinds(&w), vec![HazardKind::Global, HazardKind::Call]);
        assert_eq!(w.end, Some(26));
    }

    #[test]
    fn stack_global_through_memo_is_resolved() {
        // 'os' and 'system' memoized, then fetched back for STACK_GLOBAL.
        let p = b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94h\x00h\x01\x93)R.";
        let w = walk(p, 100);
        assert_eq!(w.globals[0].module, "os");
        assert_eq!(w.globals[0].name, "system");
        assert!(w.end.is_some());
    }

    #[test]
    fn stack_global_of_non_constants_is_a_hazard() {
        let w = walk(b"\x80\x04K\x01K\x02\x93.", 100);
        assert_eq!(kinds(&w), vec![HazardKind::Unresolved]);
    }

    #[test]
    fn truncation_and_unknown_opcodes_are_unreadable() {
        assert_eq!(
            kinds(&walk(b"\x80\x02}", 100)),
            vec![HazardKind::Unreadable]
        );
        assert_eq!(
            kinds(&walk(b"\x80\x02\xff.", 100)),
            vec![HazardKind::Unreadable]
        );
        assert_eq!(kinds(&walk(b"", 100)), vec![HazardKind::Unreadable]);
    }

    #[test]
    fn allowlisted_calls_are_clean() {
        let w = walk(b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01.", 100);
        assert!(w.is_clean(), "{:?}", w.hazards);
        assert_eq!(w.calls.len(), 1);
    }

    #[test]
    fn a_stack_past_the_cap_is_unreadable() {
        let mut p = vec![0x80, 2];
        p.extend(std::iter::repeat_n(b'N', MAX_STACK + 2));
        p.push(b'.');
        assert_eq!(kinds(&walk(&p, u64::MAX)), vec![HazardKind::Unreadable]);
    }

    #[test]
    fn escaped_strings_cannot_name_a_global() {
        let w = walk(b"\x80\x04S'o\\x73'\nS'system'\n\x93.", 100);
        assert_eq!(kinds(&w), vec![HazardKind::Unresolved]);
    }
}
