//! The quality report of a lossy output tensor (a quantization, a narrowing float cast): its
//! error against the source values, accumulated while the bytes pass through.
//!
//! Definitions (the numpy check in `tests/quality_check.py` computes the same from the files):
//! * over the values whose source and reconstruction are both finite (the compared values):
//!   RMSE `sqrt(mean((x - y)²))`, max abs error `max |x - y|`, relative error
//!   `sqrt(Σ(x - y)² / Σx²)` (0 when `Σx² = 0`);
//! * clipped: finite source values whose reconstruction is not finite (a cast's overflow to
//!   ±inf), or, for block types, that lie outside the range `[min y, max y]` of their block's
//!   reconstruction by more than half the gap between that end and the next distinct
//!   reconstructed value inside (the last step of the block's grid in use): more than rounding
//!   explains, so the kernel chose a scale that cuts the value off (Q4_0's −8..7 grid cuts the side opposite the largest
//!   value; k-quant scale searches trade outliers for the rest). The block is ggml's (32
//!   values, or the 256-value super-block of k-quants). Reported as a share of all values.
//! * with importance weights (`--imatrix`: one weight `w_j` per column of a row, per expert),
//!   also the error the weighted quantizers minimise, on the scale of the plain figures: with
//!   `v_j = w_j / mean(w)` (1 when the weights are all 0), weighted RMSE
//!   `sqrt(Σ v_j (x - y)² / Σ v_j)` and weighted max abs error `max sqrt(v_j) |x - y|`, over
//!   the compared values. Equal weights give the plain figures.

use weightport_core::DType;

/// Running sums of one tensor's error.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Accum {
    sum_sq_err: f64,
    sum_sq_src: f64,
    max_abs: f32,
    clipped: u64,
    compared: u64,
    n: u64,
    /// Every figure was measured ([`Accum::add`]), not only RMSE and max ([`Accum::add_plain`]).
    detailed: bool,
    /// Importance-weighted sums ([`Accum::add_weighted`]): `Σ v (x - y)²`, `Σ v`, the largest
    /// `sqrt(v) |x - y|`.
    w_sq_err: f64,
    w_sum: f64,
    w_max: f64,
}

/// A tensor's error figures, once the job has run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quality {
    /// Values compared.
    pub values: u64,
    /// Root mean squared error.
    pub rmse: f64,
    /// Largest absolute error.
    pub max_abs: f64,
    /// `‖x − y‖₂ / ‖x‖₂`.
    pub relative: f64,
    /// Share of values clipped (0..=1).
    pub clipped: f64,
    /// Importance-weighted RMSE (`--imatrix`; see the module documentation).
    pub weighted_rmse: Option<f64>,
    /// Importance-weighted max abs error.
    pub weighted_max_abs: Option<f64>,
}

/// The gaps between the extreme values of `y` and the next distinct ones inside:
/// `(hi − next below hi, next above lo − lo)`, infinite when `y` holds one value.
fn end_gaps(y: &[f32], lo: f32, hi: f32) -> (f32, f32) {
    let (mut below, mut above) = ([f32::NEG_INFINITY; LANES], [f32::INFINITY; LANES]);
    let mut step = |i: usize, v: f32| {
        below[i] = if (v < hi) & (v > below[i]) {
            v
        } else {
            below[i]
        };
        above[i] = if (v > lo) & (v < above[i]) {
            v
        } else {
            above[i]
        };
    };
    let c = y.chunks_exact(LANES);
    let r = c.remainder();
    for v in c {
        v.iter().enumerate().for_each(|(i, &a)| step(i, a));
    }
    r.iter().enumerate().for_each(|(i, &v)| step(i, v));
    (hi - fold(&below, f32::max), fold(&above, f32::min) - lo)
}

/// Values of `x` beyond `[lo, hi]` by more than half the gap at that end (see the module
/// documentation).
fn clipped_in(x: &[f32], y: &[f32], lo: f32, hi: f32) -> u64 {
    let (top, bottom) = end_gaps(y, lo, hi);
    beyond(x, lo, hi, top, bottom)
}

/// Values of `x` above `hi` by more than `top / 2` or below `lo` by more than `bottom / 2`.
fn beyond(x: &[f32], lo: f32, hi: f32, top: f32, bottom: f32) -> u64 {
    let (half_top, half_bottom) = (top / 2.0, bottom / 2.0);
    let mut n = [0u32; LANES];
    let mut step = |i: usize, a: f32| {
        n[i] += u32::from((a - hi > half_top) | (lo - a > half_bottom));
    };
    let c = x.chunks_exact(LANES);
    let r = c.remainder();
    for v in c {
        v.iter().enumerate().for_each(|(i, &a)| step(i, a));
    }
    r.iter().enumerate().for_each(|(i, &a)| step(i, a));
    n.iter().map(|&k| u64::from(k)).sum()
}

/// Lane count of the vectorised pass.
const LANES: usize = 8;

/// Sums of one group of values, in `LANES` independent f32 lanes so the loop vectorises.
#[derive(Default)]
struct Lanes {
    sq: [f32; LANES],
    sx: [f32; LANES],
    max: [f32; LANES],
}

impl Lanes {
    fn of(x: &[f32], y: &[f32]) -> Lanes {
        let mut l = Lanes::default();
        let (cx, cy) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
        let (rx, ry) = (cx.remainder(), cy.remainder());
        for (a, b) in cx.zip(cy) {
            for i in 0..LANES {
                l.step(i, a[i], b[i]);
            }
        }
        for (i, (&a, &b)) in rx.iter().zip(ry).enumerate() {
            l.step(i, a, b);
        }
        l
    }

    #[inline(always)]
    fn step(&mut self, i: usize, a: f32, b: f32) {
        let d = a - b;
        self.sq[i] += d * d;
        self.sx[i] += a * a;
        let ad = d.abs();
        self.max[i] = if ad > self.max[i] { ad } else { self.max[i] };
    }
}

/// The ranges of one block: `(min x, max x, min y, max y)`, in `LANES` lanes.
fn ranges(x: &[f32], y: &[f32]) -> (f32, f32, f32, f32) {
    let (mut x_lo, mut y_lo) = ([f32::INFINITY; LANES], [f32::INFINITY; LANES]);
    let (mut x_hi, mut y_hi) = ([f32::NEG_INFINITY; LANES], [f32::NEG_INFINITY; LANES]);
    let mut step = |i: usize, a: f32, b: f32| {
        x_lo[i] = if a < x_lo[i] { a } else { x_lo[i] };
        x_hi[i] = if a > x_hi[i] { a } else { x_hi[i] };
        y_lo[i] = if b < y_lo[i] { b } else { y_lo[i] };
        y_hi[i] = if b > y_hi[i] { b } else { y_hi[i] };
    };
    let (cx, cy) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let (rx, ry) = (cx.remainder(), cy.remainder());
    for (a, b) in cx.zip(cy) {
        for i in 0..LANES {
            step(i, a[i], b[i]);
        }
    }
    for (i, (&a, &b)) in rx.iter().zip(ry).enumerate() {
        step(i, a, b);
    }
    (
        fold(&x_lo, f32::min),
        fold(&x_hi, f32::max),
        fold(&y_lo, f32::min),
        fold(&y_hi, f32::max),
    )
}

fn fold(v: &[f32; LANES], f: fn(f32, f32) -> f32) -> f32 {
    v[1..].iter().fold(v[0], |m, &x| f(m, x))
}

impl Accum {
    /// Adds the source values `x` and their reconstruction `y`, in blocks of `block` values
    /// (1 for elementwise casts).
    pub(crate) fn add(&mut self, x: &[f32], y: &[f32], block: usize) {
        self.detailed = true;
        // Sums in groups of whole blocks, at least 256 values: the lanes' f32 partial sums are
        // flushed to f64 once per group.
        let group = block.max(1) * 256usize.div_ceil(block.max(1));
        for (xg, yg) in x.chunks(group).zip(y.chunks(group)) {
            if !self.add_finite(xg, yg, block) {
                for (xb, yb) in xg.chunks(block.max(1)).zip(yg.chunks(block.max(1))) {
                    self.add_exact(xb, yb, block > 1);
                }
            }
        }
        self.n += x.len() as u64;
    }

    /// The common case, vectorised: every value finite (false, adding nothing, otherwise).
    fn add_finite(&mut self, x: &[f32], y: &[f32], block: usize) -> bool {
        let l = Lanes::of(x, y);
        let sq: f64 = l.sq.iter().map(|&v| f64::from(v)).sum();
        let sx: f64 = l.sx.iter().map(|&v| f64::from(v)).sum();
        if !(sq.is_finite() && sx.is_finite()) {
            return false;
        }
        if block > 1 {
            for (xb, yb) in x.chunks(block).zip(y.chunks(block)) {
                let (x_lo, x_hi, lo, hi) = ranges(xb, yb);
                if x_hi > hi || x_lo < lo {
                    // Only when the farthest value is beyond half the end gap can any be.
                    let (top, bottom) = end_gaps(yb, lo, hi);
                    if x_hi - hi > top / 2.0 || lo - x_lo > bottom / 2.0 {
                        self.clipped += beyond(xb, lo, hi, top, bottom);
                    }
                }
            }
        }
        self.sum_sq_err += sq;
        self.sum_sq_src += sx;
        self.max_abs = self.max_abs.max(fold(&l.max, f32::max));
        self.compared += x.len() as u64;
        true
    }

    /// Value by value in f64, skipping non-finite sources and counting overflows.
    fn add_exact(&mut self, xb: &[f32], yb: &[f32], blocked: bool) {
        let finite = |v: &&f32| v.is_finite();
        let lo = yb
            .iter()
            .filter(finite)
            .fold(f32::INFINITY, |l, &v| l.min(v));
        let hi = yb
            .iter()
            .filter(finite)
            .fold(f32::NEG_INFINITY, |h, &v| h.max(v));
        if blocked {
            // Finite sources whose reconstruction is finite, against the finite range.
            let pairs = xb
                .iter()
                .zip(yb)
                .filter(|(a, b)| a.is_finite() && b.is_finite());
            let fx: Vec<f32> = pairs.map(|(a, _)| *a).collect();
            let fy: Vec<f32> = yb.iter().copied().filter(|v| v.is_finite()).collect();
            self.clipped += clipped_in(&fx, &fy, lo, hi);
        }
        for (&a, &b) in xb.iter().zip(yb) {
            if !a.is_finite() {
                continue;
            }
            if !b.is_finite() {
                self.clipped += 1;
                continue;
            }
            let d = f64::from(a) - f64::from(b);
            self.compared += 1;
            self.sum_sq_err += d * d;
            self.sum_sq_src += f64::from(a) * f64::from(a);
            self.max_abs = self.max_abs.max(d.abs() as f32);
        }
    }

    /// Adds squared errors and the largest error only, in one vectorised pass (what a
    /// quantization reports when no quality report is asked for).
    pub(crate) fn add_plain(&mut self, x: &[f32], y: &[f32]) {
        let (mut sq, mut mx) = ([0f32; LANES], [0f32; LANES]);
        let (cx, cy) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
        let (rx, ry) = (cx.remainder(), cy.remainder());
        for (a, b) in cx.zip(cy) {
            for i in 0..LANES {
                let d = (a[i] - b[i]).abs();
                sq[i] += d * d;
                mx[i] = if d > mx[i] { d } else { mx[i] };
            }
        }
        for (i, (&a, &b)) in rx.iter().zip(ry).enumerate() {
            let d = (a - b).abs();
            sq[i] += d * d;
            mx[i] = if d > mx[i] { d } else { mx[i] };
        }
        self.sum_sq_err += sq.iter().map(|&v| f64::from(v)).sum::<f64>();
        self.max_abs = self.max_abs.max(fold(&mx, f32::max));
        self.compared += x.len() as u64;
        self.n += x.len() as u64;
    }

    /// Adds rows of `w.len()` source values `x` and reconstructions `y` with the importance
    /// weights `w` of their columns (see the module documentation).
    pub(crate) fn add_weighted(&mut self, x: &[f32], y: &[f32], w: &[f32]) {
        let mean = w.iter().map(|&v| f64::from(v)).sum::<f64>() / w.len().max(1) as f64;
        let scale = |v: f32| if mean > 0.0 { f64::from(v) / mean } else { 1.0 };
        let v: Vec<f64> = w.iter().map(|&a| scale(a)).collect();
        for (xr, yr) in x.chunks_exact(w.len()).zip(y.chunks_exact(w.len())) {
            for ((&a, &b), &vj) in xr.iter().zip(yr).zip(&v) {
                if !(a.is_finite() && b.is_finite()) {
                    continue;
                }
                let d = f64::from(a) - f64::from(b);
                self.w_sq_err += vj * d * d;
                self.w_sum += vj;
                self.w_max = self.w_max.max(vj.sqrt() * d.abs());
            }
        }
    }

    /// The importance-weighted RMSE and max abs error, when weights were added.
    pub(crate) fn weighted(&self) -> Option<(f64, f64)> {
        (self.w_sum > 0.0).then(|| ((self.w_sq_err / self.w_sum).sqrt(), self.w_max))
    }

    /// RMSE and max abs error, however measured.
    pub(crate) fn rmse_max(&self) -> Option<(f64, f64)> {
        (self.n > 0).then(|| {
            let rmse = (self.sum_sq_err / self.compared.max(1) as f64).sqrt();
            (rmse, f64::from(self.max_abs))
        })
    }

    /// Adds another accumulator's sums.
    pub(crate) fn merge(&mut self, o: &Accum) {
        self.sum_sq_err += o.sum_sq_err;
        self.sum_sq_src += o.sum_sq_src;
        self.max_abs = self.max_abs.max(o.max_abs);
        self.clipped += o.clipped;
        self.compared += o.compared;
        self.n += o.n;
        self.detailed |= o.detailed;
        self.w_sq_err += o.w_sq_err;
        self.w_sum += o.w_sum;
        self.w_max = self.w_max.max(o.w_max);
    }

    /// The figures, or `None` before any value was seen or when only [`Accum::add_plain`] ran.
    pub(crate) fn quality(&self) -> Option<Quality> {
        (self.n > 0 && self.detailed).then(|| Quality {
            values: self.n,
            rmse: (self.sum_sq_err / self.compared.max(1) as f64).sqrt(),
            max_abs: f64::from(self.max_abs),
            relative: if self.sum_sq_src > 0.0 {
                (self.sum_sq_err / self.sum_sq_src).sqrt()
            } else {
                0.0
            },
            clipped: self.clipped as f64 / self.n as f64,
            weighted_rmse: self.weighted().map(|w| w.0),
            weighted_max_abs: self.weighted().map(|w| w.1),
        })
    }
}

/// True for a float cast that loses precision (F32 → F16/BF16, F16 ↔ BF16).
pub(crate) fn narrowing(from: DType, to: DType) -> bool {
    matches!(
        (from, to),
        (DType::F32, DType::F16 | DType::BF16)
            | (DType::F16, DType::BF16)
            | (DType::BF16, DType::F16)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_by_hand() {
        let mut a = Accum::default();
        // Block of 4 reconstructed within [-1, 1] in steps of 0.5; 3.0 lies beyond it by more
        // than half a step: clipped (1.2 would be rounding).
        a.add(&[1.0, -1.0, 0.5, 3.0], &[1.0, -1.0, 0.5, 1.0], 4);
        let q = a.quality().unwrap();
        assert_eq!(q.values, 4);
        assert_eq!(q.max_abs, 2.0);
        assert!((q.rmse - 1.0).abs() < 1e-12);
        assert!((q.relative - (4.0f64 / 11.25).sqrt()).abs() < 1e-12);
        assert_eq!(q.clipped, 0.25);
        // A cast's overflow to inf is clipped and left out of the error sums.
        let mut c = Accum::default();
        c.add(&[70000.0, 2.0], &[f32::INFINITY, 2.0], 1);
        let q = c.quality().unwrap();
        assert_eq!((q.clipped, q.rmse, q.values), (0.5, 0.0, 2));
        assert_eq!(q.weighted_rmse, None);
    }

    #[test]
    fn weighted_figures_by_hand() {
        // Two rows of 2 columns, weights 3 and 1 (mean 2: v = 1.5, 0.5).
        let mut a = Accum::default();
        a.add_weighted(&[1.0, 1.0, 0.0, 0.0], &[0.0, 1.0, 0.0, 2.0], &[3.0, 1.0]);
        let (rmse, max) = a.weighted().unwrap();
        // Σ v d² = 1.5·1 + 0.5·4 = 3.5 over Σ v = 4.
        assert!((rmse - (3.5f64 / 4.0).sqrt()).abs() < 1e-12);
        assert!((max - 0.5f64.sqrt() * 2.0).abs() < 1e-12);
        // Equal weights give the plain RMSE.
        let mut b = Accum::default();
        b.add_weighted(&[1.0, 1.0], &[0.0, 3.0], &[2.0, 2.0]);
        assert!((b.weighted().unwrap().0 - 2.5f64.sqrt()).abs() < 1e-12);
    }

    #[test]
    fn narrowing_casts() {
        assert!(narrowing(DType::F32, DType::F16));
        assert!(narrowing(DType::BF16, DType::F16));
        assert!(narrowing(DType::F16, DType::BF16));
        assert!(!narrowing(DType::F16, DType::F32));
        assert!(!narrowing(DType::F64, DType::F32));
        assert!(!narrowing(DType::BF16, DType::F32));
    }
}
