//! A stack of several inputs along a new leading axis (the experts of a Mixture-of-Experts
//! layer), written range by range.

use std::ops::Range;

use weightport_core::Result;

use super::{concatenate, Transform};

/// Inputs `0..n`, each `part` bytes long, one after another: the output range a chunk covers
/// reads only the pieces of the inputs under it (input `k` fills bytes `k·part..(k+1)·part`), so
/// a stacked tensor is written range by range whatever files its inputs lie in, never by
/// holding a whole stack. Any `elem`-aligned range can be computed.
pub(crate) struct Stack {
    n: usize,
    part: u64,
    elem: u64,
}

impl Stack {
    /// `n` inputs of `part` bytes each, computed in `elem`-byte units.
    pub(crate) fn new(n: usize, part: u64, elem: u64) -> Stack {
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

    fn piecewise(&self) -> bool {
        true
    }

    // Not `lossless`: its inverse would need several outputs. The written bytes are verified
    // against the hashes computed while writing.
}
