//! Transforms built from others: a row permutation (Llama's q/k layout for GGUF), a stack of
//! several inputs along a new leading axis (the experts of a Mixture-of-Experts layer) and the
//! composition of two transforms (stack or permute, then cast, then quantize), so HF tensors
//! become their GGUF form in one pass over the bytes.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::Arc;

use half::{bf16, f16};
use weightport_core::{DType, Result};

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

/// The transpose of a `[rows, cols]` matrix of `elem`-byte elements: output element `(c, r)` is
/// input element `(r, c)`. An output range covering output rows `c0..c1` needs columns `c0..c1`
/// of every input row (one piece per input row), so a transposed tensor is written range by
/// range like any other; `apply` gathers the elements from those pieces.
pub struct Transpose {
    rows: u64,
    cols: u64,
    elem: u64,
}

impl Transpose {
    /// The transpose of `rows × cols` elements of `elem` bytes each.
    pub fn new(rows: u64, cols: u64, elem: u64) -> Transpose {
        Transpose {
            rows: rows.max(1),
            cols: cols.max(1),
            elem: elem.max(1),
        }
    }

    /// The output rows (input columns) an output byte range touches.
    fn columns(&self, out: &Range<u64>) -> Range<u64> {
        let (first, end) = (out.start / self.elem, out.end.div_ceil(self.elem));
        first / self.rows..end.div_ceil(self.rows).min(self.cols)
    }
}

impl Transform for Transpose {
    fn describe(&self) -> String {
        format!("transpose {}×{}", self.rows, self.cols)
    }

    fn unit(&self) -> u64 {
        self.elem
    }

    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        if out.is_empty() {
            return Vec::new();
        }
        let c = self.columns(&out);
        (0..self.rows)
            .map(|r| {
                let at = (r * self.cols + c.start) * self.elem;
                (0, at..at + (c.end - c.start) * self.elem)
            })
            .collect()
    }

    fn apply(&self, out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        let c0 = self.columns(&out).start;
        let e = self.elem as usize;
        for (k, o) in dst.chunks_exact_mut(e).enumerate() {
            let at = out.start / self.elem + k as u64;
            let (c, r) = (at / self.rows, at % self.rows);
            let from = ((c - c0) * self.elem) as usize;
            o.copy_from_slice(&inputs[r as usize][from..from + e]);
        }
        Ok(())
    }

    // Not `lossless`: an output leaf's source bytes are spread over every input row. The written
    // bytes are verified against the hashes computed while writing, as for the other moves.
}

/// Adds 1 to every value (Gemma's norm weights, stored as `w` and used as `1 + w`), the way the
/// reference converter does: an F16 tensor in F16 (the sum rounded to nearest even), anything
/// else in F32 (BF16 widened first).
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
                    let v = f16::from_le_bytes([b[0], b[1]]).to_f32() + 1.0;
                    o.copy_from_slice(&f16::from_f32(v).to_le_bytes());
                }
            }
            (DType::BF16, _) => {
                for (o, b) in dst.chunks_exact_mut(4).zip(src.chunks_exact(2)) {
                    let v = bf16::from_le_bytes([b[0], b[1]]).to_f32() + 1.0;
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cast::Cast;

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
    fn transpose_gathers_columns_for_any_chunking() {
        // 3 rows of 5 u16 values (value = r·5 + c); output row c holds column c of the input.
        let input: Vec<u8> = (0u16..15).flat_map(|v| v.to_le_bytes()).collect();
        let t = Transpose::new(3, 5, 2);
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
