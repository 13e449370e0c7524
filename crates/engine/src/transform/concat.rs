//! Strided views of one input one after another: Qwen3-Next's regrouped `in_proj_qkvz` rows,
//! written chunk by chunk.

use std::ops::Range;

use weightport_core::Result;

use super::gather::Gather;
use super::{concatenate, Transform};

/// The output is each [`Gather`]'s output in turn (`parts`: each view with its byte length);
/// any element-aligned output range is computed from the input ranges its parts' pieces read.
pub(crate) struct Concat {
    /// `(first output byte, byte length, view)` per part, in output order.
    parts: Vec<(u64, u64, Gather)>,
    elem: u64,
}

impl Concat {
    /// `views` (`(offset, dims)` in elements of `elem` bytes), one after another.
    pub(crate) fn new(views: &[(u64, Vec<(u64, u64)>)], elem: u64) -> Concat {
        let elem = elem.max(1);
        let mut at = 0;
        let parts = views
            .iter()
            .map(|(offset, dims)| {
                let len = dims.iter().map(|d| d.0).product::<u64>() * elem;
                let part = (at, len, Gather::new(*offset, dims.clone(), elem));
                at += len;
                part
            })
            .collect();
        Concat { parts, elem }
    }

    /// Each part overlapping `out`, with the part-local range it covers and where its output
    /// starts in `out`.
    fn overlapping(&self, out: Range<u64>) -> impl Iterator<Item = (&Gather, Range<u64>, u64)> {
        self.parts.iter().filter_map(move |(start, len, g)| {
            let (a, b) = (out.start.max(*start), out.end.min(start + len));
            (a < b).then(|| (g, a - start..b - start, a - out.start))
        })
    }
}

impl Transform for Concat {
    fn describe(&self) -> String {
        format!("{} strided views one after another", self.parts.len())
    }

    fn unit(&self) -> u64 {
        self.elem
    }

    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        self.overlapping(out)
            .flat_map(|(g, r, _)| g.needs(r))
            .collect()
    }

    fn apply(&self, out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        if self.concatenates() {
            concatenate(inputs, dst);
            return Ok(());
        }
        let mut k = 0;
        for (g, r, at) in self.overlapping(out) {
            let n = g.needs(r.clone()).len();
            let len = (r.end - r.start) as usize;
            let at = at as usize;
            g.apply(r, &inputs[k..k + n], &mut dst[at..at + len])?;
            k += n;
        }
        Ok(())
    }

    fn concatenates(&self) -> bool {
        self.parts.iter().all(|(_, _, g)| g.concatenates())
    }

    // Not `lossless`, as a Gather is not: the written bytes are verified against the hashes
    // computed while writing.
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows 0-1 and 4-5 of a 6×2 tensor of u16, then its column 1 (a non-contiguous view),
    /// computed whole and in chunks that straddle the parts.
    #[test]
    fn views_one_after_another_any_range() {
        let src: Vec<u8> = (0u16..12).flat_map(|v| v.to_le_bytes()).collect();
        let c = Concat::new(
            &[
                (0, vec![(2, 2), (2, 1)]),
                (8, vec![(2, 2), (2, 1)]),
                (1, vec![(6, 2)]),
            ],
            2,
        );
        let want: Vec<u16> = vec![0, 1, 2, 3, 8, 9, 10, 11, 1, 3, 5, 7, 9, 11];
        let total = want.len() as u64 * 2;
        for step in [2u64, 6, 10, total] {
            let mut got = vec![0u8; total as usize];
            let mut a = 0;
            while a < total {
                let b = (a + step).min(total);
                let needs = c.needs(a..b);
                let ins: Vec<&[u8]> = needs
                    .iter()
                    .map(|(_, r)| &src[r.start as usize..r.end as usize])
                    .collect();
                c.apply(a..b, &ins, &mut got[a as usize..b as usize])
                    .unwrap();
                a = b;
            }
            let got: Vec<u16> = got
                .chunks_exact(2)
                .map(|p| u16::from_le_bytes([p[0], p[1]]))
                .collect();
            assert_eq!(got, want, "step {step}");
        }
        assert!(!c.concatenates());
    }
}
