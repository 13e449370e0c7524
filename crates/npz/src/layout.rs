//! From stored elements to logical (little-endian, row-major) bytes: byte swapping and the
//! Fortran-order transposition, one element at a time or by runs.
//!
//! A Fortran-ordered array of shape `(d0, …, dn-1)` stores element `(i0, …, in-1)` at element
//! offset `i0 + d0·(i1 + d1·(i2 + …))`: the first index varies fastest. Row-major output wants
//! the last index fastest. [`Walker`] steps a multi-index in one order while tracking the
//! element offset in the other, so any output range can be gathered without materialising
//! anything larger than the caller's buffer.

use crate::header::ByteOrder;

/// Steps through `dims` with the last index fastest, tracking `off = Σ idx[k]·strides[k]`.
pub(crate) struct Walker {
    dims: Vec<u64>,
    strides: Vec<u64>,
    idx: Vec<u64>,
    /// The current element offset in the other order.
    pub(crate) off: u64,
}

impl Walker {
    /// A walker positioned at linear (last-fastest) element `start`. `dims` must have a
    /// non-zero product and `Σ (dims[k]-1)·strides[k]` must fit in u64 (true when both describe
    /// one array whose byte length fits).
    pub(crate) fn new(dims: Vec<u64>, strides: Vec<u64>, start: u64) -> Self {
        let mut idx = vec![0u64; dims.len()];
        let mut rem = start;
        let mut off = 0u64;
        for k in (0..dims.len()).rev() {
            let d = dims[k].max(1);
            idx[k] = rem % d;
            rem /= d;
            off += idx[k] * strides[k];
        }
        Walker {
            dims,
            strides,
            idx,
            off,
        }
    }

    /// Moves to the next element.
    pub(crate) fn advance(&mut self) {
        for k in (0..self.dims.len()).rev() {
            self.idx[k] += 1;
            self.off += self.strides[k];
            if self.idx[k] < self.dims[k] {
                return;
            }
            self.off -= self.strides[k] * self.dims[k];
            self.idx[k] = 0;
        }
    }
}

/// Element strides of a row-major array (last dimension 1).
pub(crate) fn c_strides(dims: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * dims[k + 1];
    }
    s
}

/// Element strides of a column-major array (first dimension 1).
pub(crate) fn f_strides(dims: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; dims.len()];
    for k in 1..dims.len() {
        s[k] = s[k - 1] * dims[k - 1];
    }
    s
}

/// Converts stored bytes in place to little-endian.
pub(crate) fn to_little(buf: &mut [u8], order: ByteOrder) {
    if let ByteOrder::Big { unit } = order {
        for c in buf.chunks_exact_mut(unit) {
            c.reverse();
        }
    }
}

/// A walker over a Fortran array's storage that yields, for stored elements 0, 1, 2, …, their
/// row-major element index.
pub(crate) fn fortran_to_c(dims: &[u64]) -> Walker {
    let rev: Vec<u64> = dims.iter().rev().copied().collect();
    let strides: Vec<u64> = c_strides(dims).into_iter().rev().collect();
    Walker::new(rev, strides, 0)
}

/// A walker over row-major elements from `start` that yields each one's Fortran storage index.
pub(crate) fn c_to_fortran(dims: &[u64], start: u64) -> Walker {
    Walker::new(dims.to_vec(), f_strides(dims), start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walkers_agree_with_index_arithmetic() {
        let dims = [3u64, 4, 2];
        let n = 24u64;
        // element (i, j, k): C index i*8 + j*2 + k, F index i + 3*j + 12*k.
        let mut f_of_c = [0u64; 24];
        for i in 0..3 {
            for j in 0..4 {
                for k in 0..2 {
                    f_of_c[(i * 8 + j * 2 + k) as usize] = i + 3 * j + 12 * k;
                }
            }
        }
        for start in 0..n {
            let mut w = c_to_fortran(&dims, start);
            for c in start..n {
                assert_eq!(w.off, f_of_c[c as usize]);
                w.advance();
            }
        }
        let mut w = fortran_to_c(&dims);
        for f in 0..n {
            assert_eq!(f_of_c[w.off as usize], f);
            w.advance();
        }
    }

    #[test]
    fn swaps_components() {
        let mut b = [1, 2, 3, 4, 5, 6, 7, 8];
        to_little(&mut b, ByteOrder::Big { unit: 4 });
        assert_eq!(b, [4, 3, 2, 1, 8, 7, 6, 5]);
    }
}
