//! A strided view of one input (torch's `as_strided`): transposes, every other row, per-head
//! parts of fused tensors, written chunk by chunk.

use std::ops::Range;

use weightport_core::Result;

use super::{concatenate, Transform};

/// A strided view of one input (torch's `as_strided`, in elements of `elem` bytes): output
/// element `(i_0, …, i_n)` is input element `offset + Σ i_k · stride_k` (a transpose, every
/// other row, a per-head part of a fused tensor). Any element-aligned output range is computed
/// from the input under it: when the innermost stride is 1, the contiguous runs it names
/// (concatenated, as a stack's pieces); otherwise the input span between the lowest and highest
/// element the range reads, gathered element by element. So a transposed tensor is written chunk
/// by chunk from the part of its source each chunk reads, never by holding the whole input.
pub(crate) struct Gather {
    offset: u64,
    dims: Vec<(u64, u64)>,
    elem: u64,
}

impl Gather {
    /// The view `dims` (`(size, stride)`, outermost first) from element `offset` of an input
    /// whose elements are `elem` bytes.
    pub(crate) fn new(offset: u64, dims: Vec<(u64, u64)>, elem: u64) -> Gather {
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
