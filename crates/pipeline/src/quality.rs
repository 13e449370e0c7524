//! The quality report of a lossy output tensor (a quantization, a narrowing float cast): its
//! error against the source values, accumulated while the bytes pass through.
//!
//! Definitions (the numpy check in `tests/quality_check.py` computes the same from the files):
//! * over the values whose source and reconstruction are both finite (the compared values):
//!   RMSE `sqrt(mean((x - y)²))`, max abs error `max |x - y|`, relative error
//!   `sqrt(Σ(x - y)² / Σx²)` (0 when `Σx² = 0`);
//! * clipped: finite source values whose reconstruction is not finite (a cast's overflow to
//!   ±inf), or, for block types, that lie outside the range `[min y, max y]` of their block's
//!   reconstruction by more than half the block's smallest step (the smallest positive gap
//!   between its reconstructed values): more than rounding explains, so the kernel chose a
//!   scale that cuts the value off (Q4_0's −8..7 grid cuts the side opposite the largest
//!   value; k-quant scale searches trade outliers for the rest). The block is ggml's (32
//!   values, or the 256-value super-block of k-quants). Reported as a share of all values.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use weightport_core::{DType, Result};

use crate::quantize::to_f32;
use crate::transform::Transform;

/// Running sums of one tensor's error.
#[derive(Debug, Default, Clone, Copy)]
pub struct Accum {
    sum_sq_err: f64,
    sum_sq_src: f64,
    max_abs: f32,
    clipped: u64,
    compared: u64,
    n: u64,
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
}

/// Half the smallest positive gap between the sorted values of `y` (infinite when all equal).
fn half_step(y: &[f32]) -> f32 {
    let mut v = y.to_vec();
    v.sort_by(f32::total_cmp);
    let gap = v
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|&d| d > 0.0)
        .fold(f32::INFINITY, f32::min);
    gap / 2.0
}

impl Accum {
    /// Adds the source values `x` and their reconstruction `y`, in blocks of `block` values
    /// (1 for elementwise casts).
    pub fn add(&mut self, x: &[f32], y: &[f32], block: usize) {
        for (xb, yb) in x.chunks(block.max(1)).zip(y.chunks(block.max(1))) {
            let (lo, hi) = yb
                .iter()
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), &v| {
                    (l.min(v), h.max(v))
                });
            let outside = block > 1 && xb.iter().any(|&a| a > hi || a < lo);
            let half = if outside {
                half_step(yb)
            } else {
                f32::INFINITY
            };
            let (mut sq, mut sx) = (0f64, 0f64);
            for (&a, &b) in xb.iter().zip(yb) {
                if !a.is_finite() {
                    continue;
                }
                if !b.is_finite() {
                    self.clipped += 1;
                    continue;
                }
                if a - hi > half || lo - a > half {
                    self.clipped += 1;
                }
                let d = (a - b).abs();
                self.compared += 1;
                sq += f64::from(d) * f64::from(d);
                sx += f64::from(a) * f64::from(a);
                self.max_abs = self.max_abs.max(d);
            }
            self.sum_sq_err += sq;
            self.sum_sq_src += sx;
        }
        self.n += x.len() as u64;
    }

    /// Adds another accumulator's sums.
    pub fn merge(&mut self, o: &Accum) {
        self.sum_sq_err += o.sum_sq_err;
        self.sum_sq_src += o.sum_sq_src;
        self.max_abs = self.max_abs.max(o.max_abs);
        self.clipped += o.clipped;
        self.compared += o.compared;
        self.n += o.n;
    }

    /// The figures, or `None` before any value was seen.
    pub fn quality(&self) -> Option<Quality> {
        (self.n > 0).then(|| Quality {
            values: self.n,
            rmse: (self.sum_sq_err / self.compared.max(1) as f64).sqrt(),
            max_abs: f64::from(self.max_abs),
            relative: if self.sum_sq_src > 0.0 {
                (self.sum_sq_err / self.sum_sq_src).sqrt()
            } else {
                0.0
            },
            clipped: self.clipped as f64 / self.n as f64,
        })
    }
}

/// True for a float cast that loses precision (F32 → F16/BF16, F16 ↔ BF16).
pub fn narrowing(from: DType, to: DType) -> bool {
    matches!(
        (from, to),
        (DType::F32, DType::F16 | DType::BF16)
            | (DType::F16, DType::BF16)
            | (DType::BF16, DType::F16)
    )
}

thread_local! {
    static DECODED: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// A narrowing elementwise cast with its error measured: the source and written values are
/// decoded to f32 after each chunk and compared.
pub struct Measured {
    inner: Arc<dyn Transform>,
    from: DType,
    to: DType,
    acc: Mutex<Accum>,
}

impl Measured {
    /// Wraps `inner`, an elementwise cast `from` → `to` (both F32, F16 or BF16).
    pub fn new(inner: Arc<dyn Transform>, from: DType, to: DType) -> Measured {
        Measured {
            inner,
            from,
            to,
            acc: Mutex::new(Accum::default()),
        }
    }
}

impl Transform for Measured {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn unit(&self) -> u64 {
        self.inner.unit()
    }
    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        self.inner.needs(out)
    }
    fn apply(&self, out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        self.inner.apply(out, inputs, dst)?;
        let mut a = Accum::default();
        DECODED.with(|cell| {
            let (x, y) = &mut *cell.borrow_mut();
            to_f32(self.from, inputs[0], x);
            to_f32(self.to, dst, y);
            a.add(x, y, 1);
        });
        self.acc.lock().expect("quality lock").merge(&a);
        Ok(())
    }
    fn lossless(&self) -> bool {
        self.inner.lossless()
    }
    fn inverse(&self) -> Option<Arc<dyn Transform>> {
        self.inner.inverse()
    }
    fn outcome(&self) -> Option<String> {
        self.inner.outcome()
    }
    fn quality(&self) -> Option<Quality> {
        self.acc.lock().ok()?.quality()
    }
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
