//! `--dtype` casts between F64, F32, F16 and BF16 as a transform of the output plan. The
//! conversions are weightport-quant's [`cast`](weightport_quant::cast) module, under the
//! [`CastRule`] of the tool the output reproduces (torch's `.to()` for safetensors, ggml's for
//! llama-quantize, numpy's for convert_hf_to_gguf.py): round-to-nearest-even, subnormals kept,
//! ±inf kept, NaN stays NaN with that tool's bits; F64 narrows through f32 as torch does.
//! Narrowing casts count the finite values that became ±inf (overflow) and the non-zero values
//! that became ±0 (underflow); BF16→F16 that overflows is refused unless `--allow-lossy`.
//! Integer, bool and quantized tensors are never cast (the plan does not ask).

use std::cell::RefCell;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use weightport_core::{sanitize, CastRule, DType, Error, Knob, Location, Result};
pub(crate) use weightport_quant::cast::is_float;
use weightport_quant::cast::{cast_bytes, decode_f32};

use super::quality::{Accum, Quality};
use super::Transform;

fn size(d: DType) -> u64 {
    u64::from(d.elem_bytes().unwrap_or(1))
}

fn widening(from: DType, to: DType) -> bool {
    matches!(
        (from, to),
        (DType::F16 | DType::BF16, DType::F32 | DType::F64) | (DType::F32, DType::F64)
    )
}

/// A cast of one tensor.
pub(crate) struct Cast {
    from: DType,
    to: DType,
    name: String,
    allow_lossy: bool,
    rule: CastRule,
    finite_only: bool,
    overflow: AtomicU64,
    underflow: AtomicU64,
}

impl Cast {
    /// A cast of tensor `name` from `from` to `to` (both floating point), with torch's rule.
    pub(crate) fn new(from: DType, to: DType, name: &str, allow_lossy: bool) -> Result<Cast> {
        if !is_float(from) || !is_float(to) {
            return Err(Error::Internal(format!(
                "cast {from}→{to} is not a float cast"
            )));
        }
        Ok(Cast {
            from,
            to,
            name: name.to_string(),
            allow_lossy,
            rule: CastRule::Torch,
            finite_only: false,
            overflow: AtomicU64::new(0),
            underflow: AtomicU64::new(0),
        })
    }

    /// The same cast with `rule`'s NaN bits.
    pub(crate) fn rule(mut self, rule: CastRule) -> Cast {
        self.rule = rule;
        self
    }

    /// The same cast refusing a NaN or ±inf in its output, as llama-quantize refuses a tensor
    /// it converted to one (`ggml_validate_row_data`: "tensor … has invalid data").
    pub(crate) fn finite_only(mut self, on: bool) -> Cast {
        self.finite_only = on;
        self
    }
}

/// Output elements that are NaN or ±inf.
fn non_finite(to: DType, dst: &[u8]) -> usize {
    let exp: u16 = match to {
        DType::F16 => 0x7C00,
        DType::BF16 => 0x7F80,
        DType::F32 => {
            return dst
                .chunks_exact(4)
                .filter(|b| !f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite())
                .count()
        }
        _ => return 0,
    };
    dst.chunks_exact(2)
        .filter(|b| u16::from_le_bytes([b[0], b[1]]) & exp == exp)
        .count()
}

impl Transform for Cast {
    fn describe(&self) -> String {
        format!("{}→{}", self.from, self.to)
    }
    fn unit(&self) -> u64 {
        size(self.to)
    }
    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        let (i, o) = (size(self.from), size(self.to));
        vec![(0, out.start / o * i..out.end / o * i)]
    }
    fn apply(&self, _out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        let stats = cast_bytes(self.from, self.to, inputs[0], dst, self.rule)
            .map_err(|e| Error::Internal(format!("cast `{}`: {e}", sanitize(&self.name))))?;
        let (over, under) = (stats.overflow, stats.underflow);
        if over > 0 && self.from == DType::BF16 && self.to == DType::F16 && !self.allow_lossy {
            return Err(Error::Refused {
                at: Location::default(),
                reason: format!(
                    "casting `{}` from BF16 to F16 would turn {over} finite values into ±inf \
                     (F16's largest is 65504); pass {} to cast anyway, or keep BF16",
                    sanitize(&self.name),
                    Knob::AllowLossy
                ),
            });
        }
        if self.finite_only {
            let bad = non_finite(self.to, dst);
            if bad > 0 {
                return Err(Error::Refused {
                    at: Location::default().tensor(self.name.clone()),
                    reason: format!(
                        "converted to {}, it holds NaN or infinite values ({bad} in one chunk); \
                         llama-quantize refuses such a tensor (\"has invalid data\"), and so \
                         does {}",
                        self.to,
                        Knob::Quant
                    ),
                });
            }
        }
        self.overflow.fetch_add(over, Ordering::Relaxed);
        self.underflow.fetch_add(under, Ordering::Relaxed);
        Ok(())
    }
    fn elementwise(&self) -> bool {
        true
    }
    fn piecewise(&self) -> bool {
        true
    }
    fn lossless(&self) -> bool {
        widening(self.from, self.to)
    }
    fn inverse(&self) -> Option<Arc<dyn Transform>> {
        widening(self.from, self.to).then(|| {
            Arc::new(
                Cast::new(self.to, self.from, &self.name, true)
                    .expect("float cast")
                    .rule(self.rule),
            ) as Arc<dyn Transform>
        })
    }
    fn outcome(&self) -> Option<String> {
        let (o, u) = (
            self.overflow.load(Ordering::Relaxed),
            self.underflow.load(Ordering::Relaxed),
        );
        (o > 0 || u > 0).then(|| {
            format!(
                "{}: {o} values overflowed to ±inf, {u} underflowed to ±0",
                self.describe()
            )
        })
    }
}

thread_local! {
    static DECODED: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// A narrowing elementwise cast with its error measured: the source and written values are
/// decoded to f32 after each chunk and compared.
pub(crate) struct Measured {
    inner: Arc<dyn Transform>,
    from: DType,
    to: DType,
    acc: Mutex<Accum>,
}

impl Measured {
    /// Wraps `inner`, an elementwise cast `from` → `to` (both F32, F16 or BF16).
    pub(crate) fn new(inner: Arc<dyn Transform>, from: DType, to: DType) -> Measured {
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
    fn cost_ns(&self) -> f64 {
        self.inner.cost_ns()
    }
}

/// `src` (F64/F32/F16/BF16) widened to f32 into `out`; the widening is exact, so the rule only
/// picks NaN bits, which the figures ignore.
fn to_f32(d: DType, src: &[u8], out: &mut Vec<f32>) {
    let n = d.elem_bytes().map_or(0, |e| src.len() / e as usize);
    out.resize(n, 0.0);
    if decode_f32(d, src, out, CastRule::Ggml).is_err() {
        out.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_to_f16_overflow_is_refused_unless_lossy_allowed() {
        let big = half::bf16::from_f32(1e6).to_le_bytes();
        let mut dst = [0u8; 2];
        let strict = Cast::new(DType::BF16, DType::F16, "w", false).unwrap();
        assert!(matches!(
            strict.apply(0..2, &[&big], &mut dst),
            Err(Error::Refused { .. })
        ));
        let lossy = Cast::new(DType::BF16, DType::F16, "w", true).unwrap();
        lossy.apply(0..2, &[&big], &mut dst).unwrap();
        assert!(lossy.outcome().unwrap().contains("1 values overflowed"));
    }

    #[test]
    fn the_rule_picks_the_nan_bits_and_the_inverse_keeps_it() {
        let nan = f32::from_bits(0x7F80_0001).to_le_bytes();
        let mut dst = [0u8; 2];
        for (rule, want) in [
            (CastRule::Torch, 0x7E00u16),
            (CastRule::Ggml, 0x7E00),
            (CastRule::Numpy, 0x7C01),
        ] {
            let c = Cast::new(DType::F32, DType::F16, "w", false)
                .unwrap()
                .rule(rule);
            c.apply(0..2, &[&nan], &mut dst).unwrap();
            assert_eq!(u16::from_le_bytes(dst), want, "{rule:?}");
        }
        // numpy widens a signalling f16 NaN without the quiet bit, and narrows it back.
        let w = Cast::new(DType::F16, DType::F32, "w", false)
            .unwrap()
            .rule(CastRule::Numpy);
        let mut wide = [0u8; 4];
        w.apply(0..4, &[&0x7C01u16.to_le_bytes()], &mut wide)
            .unwrap();
        assert_eq!(u32::from_le_bytes(wide), 0x7F80_2000);
        w.inverse()
            .unwrap()
            .apply(0..2, &[&wide], &mut dst)
            .unwrap();
        assert_eq!(u16::from_le_bytes(dst), 0x7C01);
    }
}
