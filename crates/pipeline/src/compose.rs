//! Transforms built from others: a row permutation (Llama's q/k layout for GGUF), a stack of
//! several inputs along a new leading axis (the experts of a Mixture-of-Experts layer) and the
//! composition of two transforms (stack or permute, then cast, then quantize), so HF tensors
//! become their GGUF form in one pass over the bytes.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::Arc;

use weightport_core::{CastRule, DType, Result};
use weightport_quant::cast::{bf16_to_f32, f16_to_f32_by, f32_to_f16};

use crate::transform::Transform;

/// The output of a concatenating transform ([`Transform::concatenates`]): the input pieces its
/// `needs` named, one after another.
fn concatenate(inputs: &[&[u8]], dst: &mut [u8]) {
    let mut at = 0;
    for s in inputs {
        dst[at..at + s.len()].copy_from_slice(s);
        at += s.len();
    }
}

/// Output row `r` is input row `rows[r]`; rows are `row_bytes` long. Any element-aligned range
/// can be computed: it needs the matching pieces of the input rows, and `apply` concatenates them.
pub struct PermuteRows {
    rows: Vec<u32>,
    row_bytes: u64,
    elem: u64,
}

impl PermuteRows {
    /// A permutation of `rows.len()` rows of `row_bytes` bytes, computed in `elem`-byte units.
    pub fn new(rows: Vec<u32>, row_bytes: u64, elem: u64) -> PermuteRows {
        PermuteRows {
            rows,
            row_bytes: row_bytes.max(1),
            elem: elem.max(1),
        }
    }
}

impl Transform for PermuteRows {
    fn describe(&self) -> String {
        "q/k row permutation".into()
    }

    fn unit(&self) -> u64 {
        self.elem
    }

    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        let mut v: Vec<(usize, Range<u64>)> = Vec::new();
        let mut pos = out.start;
        while pos < out.end {
            let (r, c) = (pos / self.row_bytes, pos % self.row_bytes);
            let len = (self.row_bytes - c).min(out.end - pos);
            let from = u64::from(self.rows[r as usize]) * self.row_bytes + c;
            match v.last_mut() {
                Some((_, last)) if last.end == from => last.end += len,
                _ => v.push((0, from..from + len)),
            }
            pos += len;
        }
        v
    }

    fn apply(&self, _out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        concatenate(inputs, dst);
        Ok(())
    }

    fn concatenates(&self) -> bool {
        true
    }

    // Not `lossless`: verification maps outputs back leaf by leaf, and a permuted leaf's source
    // bytes are not one contiguous leaf of the input. The written bytes are still verified
    // against the hashes computed while writing.
}

/// Inputs `0..n`, each `part` bytes long, one after another: the output range a chunk covers
/// reads only the pieces of the inputs under it (input `k` fills bytes `k·part..(k+1)·part`), so
/// a stacked tensor is written range by range whatever files its inputs lie in, never by
/// holding a whole stack. Any `elem`-aligned range can be computed.
pub struct Stack {
    n: usize,
    part: u64,
    elem: u64,
}

impl Stack {
    /// `n` inputs of `part` bytes each, computed in `elem`-byte units.
    pub fn new(n: usize, part: u64, elem: u64) -> Stack {
        Stack {
            n,
            part: part.max(1),
            elem: elem.max(1),
        }
    }
}

impl Transform for Stack {
    fn describe(&self) -> String {
        format!("stack of {}", self.n)
    }

    fn unit(&self) -> u64 {
        self.elem
    }

    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        let mut v = Vec::new();
        let mut pos = out.start;
        while pos < out.end {
            let (k, off) = (pos / self.part, pos % self.part);
            let len = (self.part - off).min(out.end - pos);
            v.push((k as usize, off..off + len));
            pos += len;
        }
        v
    }

    fn apply(&self, _out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        concatenate(inputs, dst);
        Ok(())
    }

    fn concatenates(&self) -> bool {
        true
    }

    // Not `lossless`: its inverse would need several outputs. The written bytes are verified
    // against the hashes computed while writing.
}

/// Bytes `offset..offset + len` of one input, as the whole output: rows `a..b` of a tensor (one
/// part of a fused tensor, an embedding cut to the vocabulary). An output range needs the same
/// range of the input shifted by `offset`, so the slice is written range by range like any
/// tensor, never by holding the input.
pub struct Slice {
    offset: u64,
    elem: u64,
}

impl Slice {
    /// The input's bytes from `offset` on (`offset` a multiple of `elem`), computed in
    /// `elem`-byte units.
    pub fn new(offset: u64, elem: u64) -> Slice {
        Slice {
            offset,
            elem: elem.max(1),
        }
    }

    /// Rows `rows` of a tensor whose rows are `row_bytes` long.
    pub fn rows(rows: Range<u64>, row_bytes: u64, elem: u64) -> Slice {
        Slice::new(rows.start * row_bytes, elem)
    }
}

impl Transform for Slice {
    fn describe(&self) -> String {
        format!("bytes from {}", self.offset)
    }

    fn unit(&self) -> u64 {
        self.elem
    }

    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        vec![(0, self.offset + out.start..self.offset + out.end)]
    }

    fn apply(&self, _out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        dst.copy_from_slice(inputs[0]);
        Ok(())
    }

    // Not `lossless`: verification maps an output leaf back to one input leaf, and a slice's
    // leaves start `offset` bytes into the input. The written bytes are verified against the
    // hashes computed while writing, as stacked and permuted outputs are.
}

/// A strided view of one input (torch's `as_strided`, in elements of `elem` bytes): output
/// element `(i_0, …, i_n)` is input element `offset + Σ i_k · stride_k` (a transpose, every
/// other row, a per-head part of a fused tensor). Any element-aligned output range is computed
/// from the input under it: when the innermost stride is 1, the contiguous runs it names
/// (concatenated, as a stack's pieces); otherwise the input span between the lowest and highest
/// element the range reads, gathered element by element. So a transposed tensor is written chunk
/// by chunk from the part of its source each chunk reads, never by holding the whole input.
pub struct Gather {
    offset: u64,
    dims: Vec<(u64, u64)>,
    elem: u64,
}

impl Gather {
    /// The view `dims` (`(size, stride)`, outermost first) from element `offset` of an input
    /// whose elements are `elem` bytes.
    pub fn new(offset: u64, dims: Vec<(u64, u64)>, elem: u64) -> Gather {
        Gather {
            offset,
            dims,
            elem: elem.max(1),
        }
    }

    /// True when the innermost dimension is contiguous in the input.
    fn runs(&self) -> bool {
        self.dims.last().is_none_or(|&(_, stride)| stride == 1)
    }

    /// Input element of output element `i`.
    fn source(&self, mut i: u64) -> u64 {
        let mut at = self.offset;
        for &(size, stride) in self.dims.iter().rev() {
            let size = size.max(1);
            at += (i % size) * stride;
            i /= size;
        }
        at
    }

    /// Calls `f(output element, input element, length)` for each contiguous run of output
    /// elements `a..b` (runs of one element when the innermost stride is not 1).
    fn each_run(&self, a: u64, b: u64, mut f: impl FnMut(u64, u64, u64)) {
        let inner = match self.dims.last() {
            Some(&(size, 1)) => size.max(1),
            _ => 1,
        };
        let mut i = a;
        while i < b {
            let len = (inner - i % inner).min(b - i);
            f(i, self.source(i), len);
            i += len;
        }
    }

    /// The multi-index of output element `i`.
    fn index(&self, mut i: u64) -> Vec<u64> {
        let mut idx = vec![0; self.dims.len()];
        for (k, &(size, _)) in self.dims.iter().enumerate().rev() {
            let size = size.max(1);
            idx[k] = i % size;
            i /= size;
        }
        idx
    }

    /// An input span holding every element output elements `a..b` read, in `O(dims)`: the
    /// dimensions outside the first one where the range's first and last index differ are fixed,
    /// that one runs between the two, the ones inside it may take any value. Exact for whole
    /// heads, rows or experts; at most one inner block more otherwise.
    fn span(&self, a: u64, b: u64) -> (u64, u64) {
        if a >= b {
            return (0, 0);
        }
        let (ia, ib) = (self.index(a), self.index(b - 1));
        let Some(d) = (0..ia.len()).find(|&k| ia[k] != ib[k]) else {
            let at = self.source(a);
            return (at, at + 1);
        };
        let fixed: u64 = self.offset + (0..d).map(|k| ia[k] * self.dims[k].1).sum::<u64>();
        let inner: u64 = self.dims[d + 1..]
            .iter()
            .map(|&(size, stride)| size.saturating_sub(1) * stride)
            .sum();
        let stride = self.dims[d].1;
        (fixed + ia[d] * stride, fixed + ib[d] * stride + inner + 1)
    }
}

impl Transform for Gather {
    fn describe(&self) -> String {
        format!("strided view {:?} from {}", self.dims, self.offset)
    }

    fn unit(&self) -> u64 {
        self.elem
    }

    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        let (a, b, e) = (out.start / self.elem, out.end / self.elem, self.elem);
        if !self.runs() {
            let (lo, hi) = self.span(a, b);
            return vec![(0, lo * e..hi * e)];
        }
        let mut v: Vec<(usize, Range<u64>)> = Vec::new();
        self.each_run(a, b, |_, from, len| match v.last_mut() {
            Some((_, last)) if last.end == from * e => last.end += len * e,
            _ => v.push((0, from * e..(from + len) * e)),
        });
        v
    }

    fn apply(&self, out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        if self.runs() {
            concatenate(inputs, dst);
            return Ok(());
        }
        let (a, b, e) = (
            out.start / self.elem,
            out.end / self.elem,
            self.elem as usize,
        );
        if a >= b {
            return Ok(());
        }
        let (lo, _) = self.span(a, b);
        let src = inputs[0];
        // An odometer over the output's multi-index: no division per element.
        let mut idx = self.index(a);
        let mut at = self.source(a);
        for o in dst.chunks_exact_mut(e) {
            let s = (at - lo) as usize * e;
            o.copy_from_slice(&src[s..s + e]);
            let mut k = idx.len();
            while k > 0 {
                k -= 1;
                let (size, stride) = self.dims[k];
                idx[k] += 1;
                at += stride;
                if idx[k] < size || k == 0 {
                    break;
                }
                at -= size * stride;
                idx[k] = 0;
            }
        }
        Ok(())
    }

    fn concatenates(&self) -> bool {
        self.runs()
    }

    // Not `lossless`: its output leaves do not map back onto input leaves. The written bytes are
    // verified against the hashes computed while writing, as stacked and sliced outputs are.
}

/// A rewrite of one assembled block, in place.
pub type BlockFn = Arc<dyn Fn(&mut [u8]) + Send + Sync>;

/// Blocks of several inputs interleaved: output block `k` is `widths[p]` bytes of each part `p`
/// (block `k` of that part's [`Gather`]) one after another, then rewritten in place by `map`.
/// An output range of whole blocks needs the same blocks of every part, so the tensor is
/// written range by range from the pieces of its inputs under it.
pub struct Interleave {
    parts: Vec<Gather>,
    widths: Vec<u64>,
    map: BlockFn,
}

impl Interleave {
    /// `parts[p]` (a byte view of input `p`) gives `widths[p]` bytes to each block; `map`
    /// rewrites each assembled block.
    pub fn new(parts: Vec<Gather>, widths: Vec<u64>, map: BlockFn) -> Interleave {
        Interleave { parts, widths, map }
    }

    fn block(&self) -> u64 {
        self.widths.iter().sum::<u64>().max(1)
    }

    /// Each part's byte range for output range `out`.
    fn part_ranges(&self, out: &Range<u64>) -> impl Iterator<Item = Range<u64>> + '_ {
        let (a, b) = (out.start / self.block(), out.end / self.block());
        self.widths.iter().map(move |w| a * w..b * w)
    }
}

impl Transform for Interleave {
    fn describe(&self) -> String {
        format!("blocks of {} parts interleaved", self.parts.len())
    }

    fn unit(&self) -> u64 {
        self.block()
    }

    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        self.part_ranges(&out)
            .zip(&self.parts)
            .enumerate()
            .flat_map(|(p, (r, g))| g.needs(r).into_iter().map(move |(_, n)| (p, n)))
            .collect()
    }

    fn apply(&self, out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        let mut used = 0;
        let mut gathered = Vec::with_capacity(self.parts.len());
        for (r, g) in self.part_ranges(&out).zip(&self.parts) {
            let n = g.needs(r.clone()).len();
            let mut buf = vec![0u8; (r.end - r.start) as usize];
            g.apply(r, &inputs[used..used + n], &mut buf)?;
            used += n;
            gathered.push(buf);
        }
        let block = self.block() as usize;
        for (k, d) in dst.chunks_exact_mut(block).enumerate() {
            let mut at = 0;
            for (buf, &w) in gathered.iter().zip(&self.widths) {
                let w = w as usize;
                d[at..at + w].copy_from_slice(&buf[k * w..(k + 1) * w]);
                at += w;
            }
            (self.map)(d);
        }
        Ok(())
    }

    // Not `lossless`: verified against the hashes computed while writing.
}

/// Adds 1 to every value (Gemma's norm weights, stored as `w` and used as `1 + w`), the way the
/// reference converter does: an F16 tensor in F16 (the sum rounded to nearest even), anything
/// else in F32 (BF16 widened first). The conversions are torch's ([`PlusOne::RULE`]).
pub struct PlusOne {
    from: DType,
    /// F16 for an F16 input, else F32.
    pub out: DType,
}

impl PlusOne {
    /// `+1` for a float tensor of type `from`.
    pub fn new(from: DType) -> Result<PlusOne> {
        let out = match from {
            DType::F16 => DType::F16,
            DType::F32 | DType::BF16 => DType::F32,
            other => {
                return Err(weightport_core::Error::Usage(format!(
                    "cannot add 1 to a {other} tensor"
                )))
            }
        };
        Ok(PlusOne { from, out })
    }

    /// The reference adds in torch: its f16 ↔ f32 conversions, NaN payloads included.
    pub const RULE: CastRule = CastRule::Torch;

    fn size(d: DType) -> u64 {
        u64::from(d.elem_bytes().unwrap_or(4))
    }
}

impl Transform for PlusOne {
    fn describe(&self) -> String {
        "1 + w".into()
    }

    fn unit(&self) -> u64 {
        Self::size(self.out)
    }

    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        let (i, o) = (Self::size(self.from), Self::size(self.out));
        vec![(0, out.start / o * i..out.end / o * i)]
    }

    fn apply(&self, _out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        let src = inputs[0];
        match (self.from, self.out) {
            (DType::F16, _) => {
                for (o, b) in dst.chunks_exact_mut(2).zip(src.chunks_exact(2)) {
                    let v = f16_to_f32_by(u16::from_le_bytes([b[0], b[1]]), Self::RULE) + 1.0;
                    o.copy_from_slice(&f32_to_f16(v, Self::RULE.into()).to_le_bytes());
                }
            }
            (DType::BF16, _) => {
                for (o, b) in dst.chunks_exact_mut(4).zip(src.chunks_exact(2)) {
                    let v = bf16_to_f32(u16::from_le_bytes([b[0], b[1]])) + 1.0;
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            _ => {
                for (o, b) in dst.chunks_exact_mut(4).zip(src.chunks_exact(4)) {
                    let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]) + 1.0;
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        Ok(())
    }
}

/// `second ∘ first`: `first`'s output is `second`'s input.
pub struct Chain {
    first: Arc<dyn Transform>,
    second: Arc<dyn Transform>,
}

/// An intermediate range and the input ranges computing it needs.
type Middle = (Range<u64>, Vec<(usize, Range<u64>)>);

thread_local! {
    /// Intermediate buffers, reused across chunks: a pool because chains nest.
    static MIDDLE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

impl Chain {
    /// `first`, then `second`; `None` operations drop out.
    pub fn of(
        first: Option<Arc<dyn Transform>>,
        second: Option<Arc<dyn Transform>>,
    ) -> Option<Arc<dyn Transform>> {
        match (first, second) {
            (Some(first), Some(second)) => Some(Arc::new(Chain { first, second })),
            (a, b) => a.or(b),
        }
    }

    /// `first` into `buf` for every intermediate range, then `second` from `buf` into `dst`.
    fn apply_through(
        &self,
        out: Range<u64>,
        middle: &[Middle],
        inputs: &[&[u8]],
        buf: &mut [u8],
        dst: &mut [u8],
    ) -> Result<()> {
        let (mut at, mut used) = (0usize, 0usize);
        let mut spans = Vec::with_capacity(middle.len());
        for (m, n) in middle {
            let len = (m.end - m.start) as usize;
            self.first.apply(
                m.clone(),
                &inputs[used..used + n.len()],
                &mut buf[at..at + len],
            )?;
            spans.push(at..at + len);
            at += len;
            used += n.len();
        }
        let mids: Vec<&[u8]> = spans.into_iter().map(|s| &buf[s]).collect();
        self.second.apply(out, &mids, dst)
    }

    /// The intermediate ranges `out` needs, each with the number of input ranges it needs.
    fn middle(&self, out: Range<u64>) -> Vec<Middle> {
        self.second
            .needs(out)
            .into_iter()
            .map(|(_, m)| {
                let n = self.first.needs(m.clone());
                (m, n)
            })
            .collect()
    }
}

impl Transform for Chain {
    fn describe(&self) -> String {
        format!("{}, {}", self.first.describe(), self.second.describe())
    }

    fn unit(&self) -> u64 {
        self.second.unit()
    }

    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        self.middle(out).into_iter().flat_map(|(_, n)| n).collect()
    }

    fn apply(&self, out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        let middle = self.middle(out.clone());
        let total: u64 = middle.iter().map(|(m, _)| m.end - m.start).sum();
        let mut buf = MIDDLE
            .with(|pool| pool.borrow_mut().pop())
            .unwrap_or_default();
        buf.resize(total as usize, 0);
        let r = self.apply_through(out, &middle, inputs, &mut buf, dst);
        MIDDLE.with(|pool| pool.borrow_mut().push(buf));
        r
    }

    fn lossless(&self) -> bool {
        self.first.lossless() && self.second.lossless()
    }

    fn inverse(&self) -> Option<Arc<dyn Transform>> {
        Chain::of(Some(self.second.inverse()?), Some(self.first.inverse()?))
    }

    fn outcome(&self) -> Option<String> {
        match (self.first.outcome(), self.second.outcome()) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        }
    }

    fn quality(&self) -> Option<crate::quality::Quality> {
        self.second.quality().or_else(|| self.first.quality())
    }

    fn cost_ns(&self) -> f64 {
        self.first.cost_ns() + self.second.cost_ns()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cast::Cast;
    use half::f16;

    fn run(op: &dyn Transform, input: &[u8], out_len: u64, step: u64) -> Vec<u8> {
        let mut out = vec![0u8; out_len as usize];
        let mut s = 0;
        while s < out_len {
            let e = (s + step).min(out_len);
            let ins: Vec<&[u8]> = op
                .needs(s..e)
                .into_iter()
                .map(|(_, r)| &input[r.start as usize..r.end as usize])
                .collect();
            op.apply(s..e, &ins, &mut out[s as usize..e as usize])
                .unwrap();
            s = e;
        }
        out
    }

    #[test]
    fn permutation_gathers_rows_for_any_chunking() {
        // 4 rows of 3 u16 values; output row r = input row rows[r].
        let input: Vec<u8> = (0u16..12).flat_map(|v| v.to_le_bytes()).collect();
        let p = PermuteRows::new(vec![2, 0, 3, 1], 6, 2);
        let want: Vec<u8> = [2u16, 0, 3, 1]
            .iter()
            .flat_map(|&r| (r * 3..r * 3 + 3).flat_map(|v| v.to_le_bytes()))
            .collect();
        for step in [2, 4, 6, 10, 24] {
            assert_eq!(run(&p, &input, 24, step), want, "step {step}");
        }
    }

    #[test]
    fn a_transposing_gather_reads_columns_for_any_chunking() {
        // 3 rows of 5 u16 values (value = r·5 + c); output row c holds column c of the input.
        let input: Vec<u8> = (0u16..15).flat_map(|v| v.to_le_bytes()).collect();
        let t = Gather::new(0, vec![(5, 1), (3, 5)], 2);
        let want: Vec<u8> = (0u16..5)
            .flat_map(|c| (0u16..3).flat_map(move |r| (r * 5 + c).to_le_bytes()))
            .collect();
        // Chunks that end inside output rows, span several, or cover everything.
        for step in [2, 4, 6, 8, 14, 30] {
            assert_eq!(run(&t, &input, 30, step), want, "step {step}");
        }
        // Chained before a cast, as the plan uses it.
        let c = Chain::of(
            Some(Arc::new(t) as Arc<dyn Transform>),
            Some(
                Arc::new(Cast::new(DType::F16, DType::F32, "t", false).unwrap())
                    as Arc<dyn Transform>,
            ),
        )
        .unwrap();
        let f16s: Vec<u8> = (0u16..15)
            .flat_map(|v| f16::from_f32(f32::from(v)).to_le_bytes())
            .collect();
        let want32: Vec<u8> = (0u16..5)
            .flat_map(|c| (0u16..3).flat_map(move |r| f32::from(r * 5 + c).to_le_bytes()))
            .collect();
        for step in [4, 12, 20, 60] {
            assert_eq!(
                run(c.as_ref(), &f16s, 60, step),
                want32,
                "cast, step {step}"
            );
        }
    }

    /// `run` for a transform with several inputs.
    fn run_many(op: &dyn Transform, inputs: &[Vec<u8>], out_len: u64, step: u64) -> Vec<u8> {
        let mut out = vec![0u8; out_len as usize];
        let mut s = 0;
        while s < out_len {
            let e = (s + step).min(out_len);
            let ins: Vec<&[u8]> = op
                .needs(s..e)
                .into_iter()
                .map(|(k, r)| &inputs[k][r.start as usize..r.end as usize])
                .collect();
            op.apply(s..e, &ins, &mut out[s as usize..e as usize])
                .unwrap();
            s = e;
        }
        out
    }

    #[test]
    fn stack_concatenates_inputs_over_ragged_chunks() {
        // Three inputs of 5 u16 values (10 bytes): input k holds 100k, 100k+1, ….
        let inputs: Vec<Vec<u8>> = (0u16..3)
            .map(|k| (0..5).flat_map(|v| (100 * k + v).to_le_bytes()).collect())
            .collect();
        let want: Vec<u8> = [
            0u16, 1, 2, 3, 4, 100, 101, 102, 103, 104, 200, 201, 202, 203, 204,
        ]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
        let st = Stack::new(3, 10, 2);
        // Chunks that end inside a part, on a part boundary, and span all three parts.
        for step in [2, 4, 6, 8, 10, 14, 30] {
            assert_eq!(run_many(&st, &inputs, 30, step), want, "step {step}");
        }
        assert_eq!(st.needs(8..24), vec![(0, 8..10), (1, 0..10), (2, 0..4)]);
        // Stacked, then cast: the chain reads the same pieces, each value cast once.
        let f32s: Vec<Vec<u8>> = (0..3)
            .map(|k| {
                (0..4)
                    .flat_map(|v| (k as f32 * 10.0 + v as f32 + 0.25).to_le_bytes())
                    .collect()
            })
            .collect();
        let stack: Arc<dyn Transform> = Arc::new(Stack::new(3, 16, 4));
        let cast: Arc<dyn Transform> =
            Arc::new(Cast::new(DType::F32, DType::F16, "t", false).unwrap());
        let chain = Chain::of(Some(stack), Some(cast)).unwrap();
        let want: Vec<u8> = (0..3)
            .flat_map(|k| (0..4).map(move |v| k as f32 * 10.0 + v as f32 + 0.25))
            .flat_map(|v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        for step in [2, 6, 10, 24] {
            assert_eq!(
                run_many(chain.as_ref(), &f32s, 24, step),
                want,
                "step {step}"
            );
        }
    }

    #[test]
    fn row_slice_over_ragged_chunks() {
        // 6 rows of 3 u16 values (6 bytes a row), value = 10·row + column; keep rows 1..4.
        let input: Vec<u8> = (0u16..6)
            .flat_map(|r| (0..3).flat_map(move |c| (10 * r + c).to_le_bytes()))
            .collect();
        let want: Vec<u8> = [10u16, 11, 12, 20, 21, 22, 30, 31, 32]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let sl = Slice::rows(1..4, 6, 2);
        // Chunks ending inside a row, on a row boundary, and covering the whole slice.
        for step in [2, 4, 6, 8, 10, 18] {
            assert_eq!(run(&sl, &input, 18, step), want, "step {step}");
        }
        assert_eq!(sl.needs(4..14), vec![(0, 10..20)]);
        // Sliced, then cast F32 → F16: the same rows, each value cast once.
        let f32s: Vec<u8> = (0..5)
            .flat_map(|r| (0..2).map(move |c| r as f32 + 0.25 * c as f32))
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let slice: Arc<dyn Transform> = Arc::new(Slice::rows(2..5, 8, 4));
        let cast: Arc<dyn Transform> =
            Arc::new(Cast::new(DType::F32, DType::F16, "t", false).unwrap());
        let chain = Chain::of(Some(slice), Some(cast)).unwrap();
        let want: Vec<u8> = [2.0f32, 2.25, 3.0, 3.25, 4.0, 4.25]
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        for step in [2, 6, 10, 12] {
            assert_eq!(run(chain.as_ref(), &f32s, 12, step), want, "step {step}");
        }
        assert!(!chain.lossless());
    }

    #[test]
    fn gather_transposes_and_interleaves_over_ragged_chunks() {
        // A [2 heads, 3 rows, 4 cols] u16 tensor, value = 100·head + 10·row + col.
        let input: Vec<u8> = (0u16..2)
            .flat_map(|h| (0..3).flat_map(move |r| (0..4).map(move |c| 100 * h + 10 * r + c)))
            .flat_map(|v| v.to_le_bytes())
            .collect();
        // Each head's first two rows transposed: [2, 4, 2].
        let t = Gather::new(0, vec![(2, 12), (4, 1), (2, 4)], 2);
        let want: Vec<u8> = (0u16..2)
            .flat_map(|h| (0..4).flat_map(move |c| (0..2).map(move |r| 100 * h + 10 * r + c)))
            .flat_map(|v| v.to_le_bytes())
            .collect();
        for step in [2, 4, 6, 10, 32] {
            assert_eq!(run(&t, &input, 32, step), want, "step {step}");
        }
        assert!(!t.concatenates());
        assert_eq!(t.needs(16..20), vec![(0, 24..34)]);
        // Each head's last row: contiguous runs, concatenated.
        let v = Gather::new(8, vec![(2, 12), (1, 4), (4, 1)], 2);
        let want: Vec<u8> = [20u16, 21, 22, 23, 120, 121, 122, 123]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        for step in [2, 6, 8, 16] {
            assert_eq!(run(&v, &input, 16, step), want, "step {step}");
        }
        assert!(v.concatenates());
        assert_eq!(v.needs(4..12), vec![(0, 20..24), (0, 40..44)]);
        // Every other column (stride 2): [2·3 rows, 2 cols] from offset 1.
        let odd = Gather::new(1, vec![(6, 4), (2, 2)], 2);
        let want: Vec<u8> = (0u16..2)
            .flat_map(|h| (0..3).flat_map(move |r| [1, 3].map(|c| 100 * h + 10 * r + c)))
            .flat_map(|v| v.to_le_bytes())
            .collect();
        for step in [2, 6, 24] {
            assert_eq!(run(&odd, &input, 24, step), want, "step {step}");
        }
    }

    #[test]
    fn interleave_takes_one_block_of_each_part_over_ragged_chunks() {
        // Part 0: 1 byte a block (rows 0 and 2 of a [4, 2] byte tensor); part 1: 3 bytes a block
        // (all of a [4, 3] byte tensor); the map adds 1 to each block's first byte.
        let a: Vec<u8> = (0u8..8).collect();
        let b: Vec<u8> = (100u8..112).collect();
        let ga = Gather::new(0, vec![(2, 4), (2, 1)], 1);
        let gb = Gather::new(0, vec![(2, 6), (6, 1)], 1);
        let map = Arc::new(|blk: &mut [u8]| blk[0] += 1);
        let op = Interleave::new(vec![ga, gb], vec![1, 3], map);
        let want: Vec<u8> = vec![
            1, 100, 101, 102, 2, 103, 104, 105, 5, 106, 107, 108, 6, 109, 110, 111,
        ];
        let inputs = [a, b];
        for step in [4, 8, 12, 16] {
            assert_eq!(run_many(&op, &inputs, 16, step), want, "step {step}");
        }
    }

    #[test]
    fn chain_permutes_then_casts() {
        let vals: Vec<f32> = (0..8).map(|v| v as f32 + 0.5).collect();
        let input: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let p: Arc<dyn Transform> = Arc::new(PermuteRows::new(vec![1, 0], 16, 4));
        let c: Arc<dyn Transform> =
            Arc::new(Cast::new(DType::F32, DType::F16, "t", false).unwrap());
        let chain = Chain::of(Some(p), Some(c)).unwrap();
        let want: Vec<u8> = [4, 5, 6, 7, 0, 1, 2, 3]
            .iter()
            .flat_map(|&i| half::f16::from_f32(vals[i]).to_le_bytes())
            .collect();
        for step in [2, 6, 16] {
            assert_eq!(run(chain.as_ref(), &input, 16, step), want, "step {step}");
        }
        assert!(!chain.lossless());
    }
}
