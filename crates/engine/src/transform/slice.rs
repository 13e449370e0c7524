//! One contiguous byte range of an input as the whole output (a part of a fused tensor, an
//! embedding cut to the vocabulary).

use std::ops::Range;

use weightport_core::Result;

use super::Transform;

/// Bytes `offset..offset + len` of one input, as the whole output: rows `a..b` of a tensor (one
/// part of a fused tensor, an embedding cut to the vocabulary). An output range needs the same
/// range of the input shifted by `offset`, so the slice is written range by range like any
/// tensor, never by holding the input.
pub(crate) struct Slice {
    offset: u64,
    elem: u64,
}

impl Slice {
    /// The input's bytes from `offset` on (`offset` a multiple of `elem`), computed in
    /// `elem`-byte units.
    pub(crate) fn new(offset: u64, elem: u64) -> Slice {
        Slice {
            offset,
            elem: elem.max(1),
        }
    }

    /// Rows `rows` of a tensor whose rows are `row_bytes` long.
    pub(crate) fn rows(rows: Range<u64>, row_bytes: u64, elem: u64) -> Slice {
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

/// One input followed by zeros: the output's bytes `0..len` are the input's, the rest zeros (an
/// embedding padded with zero rows, Gemma 3n). An output range needs only the part of it
/// inside the input, which may be empty.
pub(crate) struct PadRows {
    len: u64,
    elem: u64,
}

impl PadRows {
    /// The input's `len` bytes, then zeros, computed in `elem`-byte units.
    pub(crate) fn new(len: u64, elem: u64) -> PadRows {
        PadRows {
            len,
            elem: elem.max(1),
        }
    }
}

impl Transform for PadRows {
    fn describe(&self) -> String {
        format!("{} bytes, then zeros", self.len)
    }

    fn unit(&self) -> u64 {
        self.elem
    }

    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        let start = out.start.min(self.len);
        vec![(0, start..out.end.min(self.len))]
    }

    fn apply(&self, _out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        let n = inputs[0].len();
        dst[..n].copy_from_slice(inputs[0]);
        dst[n..].fill(0);
        Ok(())
    }
}
