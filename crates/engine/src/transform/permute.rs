//! A row permutation (Llama's q/k layout for GGUF).

use std::ops::Range;

use weightport_core::Result;

use super::{concatenate, Transform};

/// Output row `r` is input row `rows[r]`; rows are `row_bytes` long. Any element-aligned range
/// can be computed: it needs the matching pieces of the input rows, and `apply` concatenates them.
pub(crate) struct PermuteRows {
    rows: Vec<u32>,
    row_bytes: u64,
    elem: u64,
}

impl PermuteRows {
    /// A permutation of `rows.len()` rows of `row_bytes` bytes, computed in `elem`-byte units.
    pub(crate) fn new(rows: Vec<u32>, row_bytes: u64, elem: u64) -> PermuteRows {
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
