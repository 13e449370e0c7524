//! Blocks of several inputs interleaved, each assembled block rewritten in place.

use std::ops::Range;
use std::sync::Arc;

use weightport_core::Result;

use super::gather::Gather;
use super::Transform;

/// A rewrite of one assembled block, in place.
pub(crate) type BlockFn = Arc<dyn Fn(&mut [u8]) + Send + Sync>;

/// Blocks of several inputs interleaved: output block `k` is `widths[p]` bytes of each part `p`
/// (block `k` of that part's [`Gather`]) one after another, then rewritten in place by `map`.
/// An output range of whole blocks needs the same blocks of every part, so the tensor is
/// written range by range from the pieces of its inputs under it.
pub(crate) struct Interleave {
    parts: Vec<Gather>,
    widths: Vec<u64>,
    map: BlockFn,
}

impl Interleave {
    /// `parts[p]` (a byte view of input `p`) gives `widths[p]` bytes to each block; `map`
    /// rewrites each assembled block.
    pub(crate) fn new(parts: Vec<Gather>, widths: Vec<u64>, map: BlockFn) -> Interleave {
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
