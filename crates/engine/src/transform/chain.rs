//! The composition of two transforms (stack or permute, then cast, then quantize), so HF
//! tensors become their GGUF form in one pass over the bytes.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::Arc;

use weightport_core::Result;

use super::Transform;

/// `second ∘ first`: `first`'s output is `second`'s input.
pub(crate) struct Chain {
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
    pub(crate) fn of(
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

    /// [`Transform::apply`] when the second transform concatenates: each intermediate piece
    /// computed straight into its place in `dst`.
    fn apply_in_place(&self, middle: &[Middle], inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        let (mut at, mut used) = (0usize, 0usize);
        for (m, n) in middle {
            let len = (m.end - m.start) as usize;
            self.first.apply(
                m.clone(),
                &inputs[used..used + n.len()],
                &mut dst[at..at + len],
            )?;
            at += len;
            used += n.len();
        }
        Ok(())
    }

    /// [`Transform::apply`] when the first transform concatenates and the second is
    /// elementwise (stacked experts, then a cast): the second applied to each input piece
    /// straight into its share of `dst`, with no intermediate buffer and no copy. `None` when
    /// the pieces do not fall on the second's input units (then the general path runs).
    fn apply_per_piece(
        &self,
        out: &Range<u64>,
        middle: &[Middle],
        inputs: &[&[u8]],
        dst: &mut [u8],
    ) -> Option<Result<()>> {
        let [(m, pieces)] = middle else {
            return None;
        };
        let (m_len, out_len) = (m.end - m.start, out.end - out.start);
        let unit = self.second.unit();
        let in_unit = self.second.needs(0..unit).first()?.1.end;
        let whole = |len: u64| {
            in_unit > 0 && len.is_multiple_of(in_unit) && (len * out_len).is_multiple_of(m_len)
        };
        if m_len == 0
            || pieces.len() != inputs.len()
            || !inputs.iter().all(|i| whole(i.len() as u64))
        {
            return None;
        }
        let (mut at, mut from) = (0usize, out.start);
        for piece in inputs {
            let n = (piece.len() as u64 * out_len / m_len) as usize;
            let r = self
                .second
                .apply(from..from + n as u64, &[piece], &mut dst[at..at + n]);
            if r.is_err() {
                return Some(r);
            }
            (at, from) = (at + n, from + n as u64);
        }
        Some(Ok(()))
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
        if self.second.concatenates() && total == dst.len() as u64 {
            // The second only lays the intermediate pieces one after another (stacked experts,
            // permuted rows): the first writes them in place, with no buffer and no copy.
            return self.apply_in_place(&middle, inputs, dst);
        }
        if self.first.concatenates() && self.second.elementwise() {
            if let Some(r) = self.apply_per_piece(&out, &middle, inputs, dst) {
                return r;
            }
        }
        let mut buf = MIDDLE
            .with(|pool| pool.borrow_mut().pop())
            .unwrap_or_default();
        buf.resize(total as usize, 0);
        let r = self.apply_through(out, &middle, inputs, &mut buf, dst);
        MIDDLE.with(|pool| pool.borrow_mut().push(buf));
        r
    }

    fn piecewise(&self) -> bool {
        self.first.piecewise() && self.second.piecewise()
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

    fn quality(&self) -> Option<super::quality::Quality> {
        self.second.quality().or_else(|| self.first.quality())
    }

    fn cost_ns(&self) -> f64 {
        self.first.cost_ns() + self.second.cost_ns()
    }
}
