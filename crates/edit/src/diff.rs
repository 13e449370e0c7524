//! `diff A B`: tensor by tensor, across formats and sharding (any two sources the registry
//! opens), reading each source once.
//!
//! Tensors pair by name. A pair of one dtype and shape is read leaf by leaf (the content hash's
//! 8 MiB leaves, `core::hash`): both leaves are hashed, and only where the hashes differ are the
//! elements compared. Equal leaves cost one read and one hash each, so a diff of two files that
//! differ in one tensor reads each file once and compares elements of that tensor only; the
//! content hashes of both tensors are reported. A pair whose dtypes differ (F32 against BF16, a
//! quantized GGUF tensor against F16) is compared by value, element by element, in f64 (block
//! types dequantized as ggml does).
//!
//! Per pair, in f64, with `x` from A and `y` from B:
//! * **changed**: without a tolerance, elements whose bytes differ (same dtype) or whose values
//!   differ (across dtypes; NaN equals NaN); with `--atol`/`--rtol`, elements that are not
//!   `x == y`, both NaN, or `|x − y| ≤ atol + rtol·|y|` (numpy's `isclose`, `equal_nan=True`);
//! * **max_abs**: the largest `|x − y|` over pairs where both are finite;
//! * **max_rel**: the largest `|x − y| / |y|` over pairs where both are finite and `y ≠ 0`;
//! * **nonfinite**: changed elements where `x` or `y` is NaN or ±inf;
//! * **rows**: the ranges of axis-0 indices holding a changed element.

use weightport_core::hash::{leaf, leaf_bytes, root, HASH_CHUNK};
use weightport_core::{ContentHash, DType, Layout, Result, TensorSource};

/// Tolerances (`None`: exact).
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct DiffOptions {
    /// Absolute tolerance.
    pub atol: Option<f64>,
    /// Relative tolerance.
    pub rtol: Option<f64>,
}

/// Most row ranges listed per tensor.
pub const MAX_ROW_RANGES: usize = 1000;

/// How a pair compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Equal (within the tolerance).
    Same,
    /// Same dtype and shape, some elements changed.
    Changed,
    /// Same shape, another dtype (values still compared).
    DtypeChanged,
    /// Another shape (not compared).
    ShapeChanged,
    /// Only in A.
    OnlyInA,
    /// Only in B.
    OnlyInB,
}

impl Status {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Status::Same => "same",
            Status::Changed => "changed",
            Status::DtypeChanged => "dtype_changed",
            Status::ShapeChanged => "shape_changed",
            Status::OnlyInA => "only_in_a",
            Status::OnlyInB => "only_in_b",
        }
    }
}

/// One tensor's comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorDiff {
    /// Name.
    pub name: String,
    /// Outcome.
    pub status: Status,
    /// Dtype and shape in A.
    pub a: Option<(DType, Vec<u64>)>,
    /// Dtype and shape in B.
    pub b: Option<(DType, Vec<u64>)>,
    /// Elements compared.
    pub elements: u64,
    /// Elements changed (module docs).
    pub changed: u64,
    /// Largest absolute difference (module docs); `None` when values were not compared.
    pub max_abs: Option<f64>,
    /// Largest relative difference.
    pub max_rel: Option<f64>,
    /// Changed elements where either value is not finite.
    pub nonfinite: u64,
    /// Axis-0 ranges `[a, b)` holding a changed element (at most [`MAX_ROW_RANGES`]).
    pub rows: Vec<(u64, u64)>,
    /// True when more row ranges changed than are listed.
    pub rows_truncated: bool,
    /// Content hashes (same-dtype pairs).
    pub hash_a: Option<ContentHash>,
    /// Content hash in B.
    pub hash_b: Option<ContentHash>,
}

/// The whole comparison.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct DiffReport {
    /// Every tensor: A's order, then those only in B.
    pub tensors: Vec<TensorDiff>,
    /// Bytes read from A.
    pub read_a: u64,
    /// Bytes read from B.
    pub read_b: u64,
}

impl DiffReport {
    /// True when every tensor is the same.
    pub fn equal(&self) -> bool {
        self.tensors.iter().all(|t| t.status == Status::Same)
    }
}

impl TensorDiff {
    fn new(name: &str, status: Status) -> Self {
        TensorDiff {
            name: name.to_string(),
            status,
            a: None,
            b: None,
            elements: 0,
            changed: 0,
            max_abs: None,
            max_rel: None,
            nonfinite: 0,
            rows: Vec::new(),
            rows_truncated: false,
            hash_a: None,
            hash_b: None,
        }
    }
}

/// Compares `a` and `b` (module docs).
pub fn diff(a: &dyn TensorSource, b: &dyn TensorSource, opts: DiffOptions) -> Result<DiffReport> {
    let mut report = DiffReport::default();
    let bt = b.tensors();
    let by_name: std::collections::HashMap<&str, usize> = bt
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let mut seen = vec![false; bt.len()];
    for (i, ta) in a.tensors().iter().enumerate() {
        let Some(&j) = by_name.get(ta.name.as_str()) else {
            let mut d = TensorDiff::new(&ta.name, Status::OnlyInA);
            d.a = Some((ta.dtype, ta.shape.clone()));
            report.tensors.push(d);
            continue;
        };
        seen[j] = true;
        let d = pair(a, i, b, j, opts, &mut report)?;
        report.tensors.push(d);
    }
    for (_, tb) in bt.iter().enumerate().filter(|(j, _)| !seen[*j]) {
        let mut d = TensorDiff::new(&tb.name, Status::OnlyInB);
        d.b = Some((tb.dtype, tb.shape.clone()));
        report.tensors.push(d);
    }
    Ok(report)
}

fn pair(
    a: &dyn TensorSource,
    i: usize,
    b: &dyn TensorSource,
    j: usize,
    opts: DiffOptions,
    r: &mut DiffReport,
) -> Result<TensorDiff> {
    let (ta, tb) = (&a.tensors()[i], &b.tensors()[j]);
    let mut d = TensorDiff::new(&ta.name, Status::Same);
    d.a = Some((ta.dtype, ta.shape.clone()));
    d.b = Some((tb.dtype, tb.shape.clone()));
    if ta.shape != tb.shape {
        d.status = Status::ShapeChanged;
        return Ok(d);
    }
    d.elements = ta.numel();
    let mut acc = Acc::new(opts, &ta.shape);
    if ta.dtype == tb.dtype {
        same_dtype(a, i, b, j, &mut acc, &mut d, r)?;
    } else if decodable(ta.dtype) && decodable(tb.dtype) {
        by_value(a, i, b, j, &mut acc, r)?;
    } else {
        d.status = Status::DtypeChanged;
        return Ok(d);
    }
    acc.finish(&mut d);
    d.status = match (ta.dtype == tb.dtype, d.changed) {
        (false, _) => Status::DtypeChanged,
        (true, 0) => Status::Same,
        (true, _) => Status::Changed,
    };
    Ok(d)
}

/// True for dtypes whose values this module reads.
fn decodable(d: DType) -> bool {
    crate::scalar::is_elementwise(d) || (d.is_block() && weightport_quant::can_dequantize(d))
}

/// Running figures of one pair.
struct Acc {
    opts: DiffOptions,
    row_elems: u64,
    changed: u64,
    nonfinite: u64,
    max_abs: f64,
    max_rel: f64,
    compared: bool,
    rows: Vec<(u64, u64)>,
    truncated: bool,
}

impl Acc {
    fn new(opts: DiffOptions, shape: &[u64]) -> Self {
        let numel: u64 = shape.iter().product();
        let row_elems = match shape.first() {
            Some(&n) if n > 0 => numel / n,
            _ => numel.max(1),
        };
        Acc {
            opts,
            row_elems: row_elems.max(1),
            changed: 0,
            nonfinite: 0,
            max_abs: 0.0,
            max_rel: 0.0,
            compared: false,
            rows: Vec::new(),
            truncated: false,
        }
    }

    fn tolerant(&self) -> bool {
        self.opts.atol.is_some() || self.opts.rtol.is_some()
    }

    /// Adds element `e` with values `x` (A), `y` (B); `bytes_differ` decides "changed" in exact
    /// same-dtype mode.
    fn add(&mut self, e: u64, x: f64, y: f64, bytes_differ: Option<bool>) {
        self.compared = true;
        let finite = x.is_finite() && y.is_finite();
        if finite {
            let d = (x - y).abs();
            self.max_abs = self.max_abs.max(d);
            if y != 0.0 {
                self.max_rel = self.max_rel.max(d / y.abs());
            }
        }
        let same_value = x == y || (x.is_nan() && y.is_nan());
        let changed = if self.tolerant() {
            let tol = self.opts.atol.unwrap_or(0.0) + self.opts.rtol.unwrap_or(0.0) * y.abs();
            !(same_value || (x - y).abs() <= tol)
        } else {
            bytes_differ.unwrap_or(!same_value)
        };
        if changed {
            self.changed += 1;
            self.nonfinite += u64::from(!finite);
            self.row(e / self.row_elems);
        }
    }

    fn row(&mut self, r: u64) {
        let full = self.rows.len() >= MAX_ROW_RANGES;
        match self.rows.last_mut() {
            Some(last) if last.1 == r || last.1 == r + 1 => last.1 = last.1.max(r + 1),
            _ if full => self.truncated = true,
            _ => self.rows.push((r, r + 1)),
        }
    }

    fn finish(self, d: &mut TensorDiff) {
        d.changed = self.changed;
        d.nonfinite = self.nonfinite;
        d.rows = self.rows;
        d.rows_truncated = self.truncated;
        if self.compared || d.elements == 0 || d.hash_a.is_some() {
            d.max_abs = Some(self.max_abs);
            d.max_rel = Some(self.max_rel);
        }
    }
}

/// Reads `[off, off + len)` of tensor `i` into `buf` (zero-copy when mapped) and returns it.
fn read<'s>(
    s: &'s dyn TensorSource,
    i: usize,
    off: u64,
    len: u64,
    buf: &'s mut Vec<u8>,
) -> Result<&'s [u8]> {
    if let Some(all) = s.bytes(i) {
        s.will_need(i, off, len);
        return Ok(&all[off as usize..(off + len) as usize]);
    }
    buf.resize(len as usize, 0);
    s.read_into(i, off, buf)?;
    Ok(buf)
}

/// Same dtype and shape: leaf hashes first, elements only where they differ.
fn same_dtype(
    a: &dyn TensorSource,
    i: usize,
    b: &dyn TensorSource,
    j: usize,
    acc: &mut Acc,
    d: &mut TensorDiff,
    r: &mut DiffReport,
) -> Result<()> {
    let t = &a.tensors()[i];
    let leaf_len = leaf_bytes(t.dtype, HASH_CHUNK);
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    let (mut ba, mut bb) = (Vec::new(), Vec::new());
    let mut off = 0;
    while off < t.byte_len || (off == 0 && t.byte_len == 0) {
        let n = leaf_len.min(t.byte_len - off);
        let xa = read(a, i, off, n, &mut ba)?;
        let xb = read(b, j, off, n, &mut bb)?;
        let (ha, hb) = (leaf(xa), leaf(xb));
        la.push(ha);
        lb.push(hb);
        if ha != hb {
            compare_bytes(t.dtype, off, xa, xb, acc);
        }
        a.release(i, off, n);
        b.release(j, off, n);
        r.read_a += n;
        r.read_b += n;
        off += n;
        if n == 0 {
            break;
        }
    }
    d.hash_a = Some(root(t.dtype, &t.shape, t.byte_len, &la));
    d.hash_b = Some(root(t.dtype, &t.shape, t.byte_len, &lb));
    Ok(())
}

/// Element figures of two same-dtype byte ranges starting at tensor byte `off`.
fn compare_bytes(dt: DType, off: u64, xa: &[u8], xb: &[u8], acc: &mut Acc) {
    match dt.layout() {
        Layout::Block { elems, bytes } => {
            let (e, bs) = (elems as usize, bytes as usize);
            let mut va = vec![0f32; e];
            let mut vb = vec![0f32; e];
            for (k, (ka, kb)) in xa.chunks_exact(bs).zip(xb.chunks_exact(bs)).enumerate() {
                let first = (off / bytes as u64 + k as u64) * elems as u64;
                if ka == kb {
                    continue;
                }
                if weightport_quant::dequantize(dt, ka, &mut va).is_ok()
                    && weightport_quant::dequantize(dt, kb, &mut vb).is_ok()
                {
                    for (m, (x, y)) in va.iter().zip(&vb).enumerate() {
                        acc.add(first + m as u64, f64::from(*x), f64::from(*y), None);
                    }
                } else {
                    (0..e).for_each(|m| acc.add(first + m as u64, 0.0, 0.0, Some(true)));
                }
            }
        }
        Layout::Bits(_) => {
            let es = dt.elem_bytes().unwrap_or(1) as usize;
            let first = off / es as u64;
            for (k, (ea, eb)) in xa.chunks_exact(es).zip(xb.chunks_exact(es)).enumerate() {
                let x = crate::scalar::to_f64(dt, ea);
                let y = crate::scalar::to_f64(dt, eb);
                match (x, y) {
                    (Some(x), Some(y)) => acc.add(first + k as u64, x, y, Some(ea != eb)),
                    _ if ea != eb => acc.add(first + k as u64, 0.0, 0.0, Some(true)),
                    _ => {}
                }
            }
        }
    }
}

/// Elements per step of a by-value comparison (a multiple of every block size).
const VALUE_STEP: u64 = 1 << 16;

fn bytes_for(d: DType, elems: u64) -> u64 {
    match d.layout() {
        Layout::Block { elems: e, bytes } => elems / u64::from(e) * u64::from(bytes),
        Layout::Bits(_) => elems * u64::from(d.elem_bytes().unwrap_or(1)),
    }
}

fn decode(d: DType, src: &[u8], out: &mut Vec<f64>) {
    out.clear();
    if d.is_block() {
        let n = bytes_elems(d, src.len() as u64);
        let mut v = vec![0f32; n as usize];
        if weightport_quant::dequantize(d, src, &mut v).is_ok() {
            out.extend(v.iter().map(|x| f64::from(*x)));
        } else {
            out.resize(n as usize, f64::NAN);
        }
        return;
    }
    let es = d.elem_bytes().unwrap_or(1) as usize;
    out.extend(
        src.chunks_exact(es)
            .map(|b| crate::scalar::to_f64(d, b).unwrap_or(f64::NAN)),
    );
}

fn bytes_elems(d: DType, bytes: u64) -> u64 {
    match d.layout() {
        Layout::Block { elems, bytes: b } => bytes / u64::from(b) * u64::from(elems),
        Layout::Bits(_) => bytes / u64::from(d.elem_bytes().unwrap_or(1)),
    }
}

/// Different dtypes, same shape: values in f64, a step of elements at a time.
fn by_value(
    a: &dyn TensorSource,
    i: usize,
    b: &dyn TensorSource,
    j: usize,
    acc: &mut Acc,
    r: &mut DiffReport,
) -> Result<()> {
    let (ta, tb) = (&a.tensors()[i], &b.tensors()[j]);
    let numel = ta.numel();
    let (mut ba, mut bb, mut va, mut vb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut e = 0;
    while e < numel {
        let n = VALUE_STEP.min(numel - e);
        let (oa, na) = (bytes_for(ta.dtype, e), bytes_for(ta.dtype, n));
        let (ob, nb) = (bytes_for(tb.dtype, e), bytes_for(tb.dtype, n));
        decode(ta.dtype, read(a, i, oa, na, &mut ba)?, &mut va);
        decode(tb.dtype, read(b, j, ob, nb, &mut bb)?, &mut vb);
        for (k, (x, y)) in va.iter().zip(&vb).enumerate() {
            acc.add(e + k as u64, *x, *y, None);
        }
        a.release(i, oa, na);
        b.release(j, ob, nb);
        r.read_a += na;
        r.read_b += nb;
        e += n;
    }
    Ok(())
}
