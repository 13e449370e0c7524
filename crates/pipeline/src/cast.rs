//! `--dtype` casts between F64, F32, F16 and BF16, bit for bit as torch's `.to(dtype)`:
//! round-to-nearest-even (the `half` crate's conversions, vectorised with F16C where the CPU has
//! it), subnormals kept, ±inf kept, NaN stays NaN. F64 narrows through f32 as torch does
//! (`half`'s `from_f64` drops the low 32 mantissa bits before rounding, so it rounded
//! 21.3125+2⁻¹⁷ to 21.25 in BF16, and F16 likewise on CPUs without F16C). Narrowing casts count the finite values that
//! became ±inf (overflow) and the non-zero values that became ±0 (underflow); BF16→F16 that
//! overflows is refused unless `--allow-lossy`. Integer, bool and quantized tensors are never
//! cast (the plan does not ask).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use half::{bf16, f16};
use weightport_core::{sanitize, DType, Error, Location, Result};
use weightport_quant::cast::{f32_to_bf16, Bf16Rounding};

use crate::transform::Transform;

/// True for the dtypes `--dtype` casts.
pub fn is_float(d: DType) -> bool {
    matches!(d, DType::F64 | DType::F32 | DType::F16 | DType::BF16)
}

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
pub struct Cast {
    from: DType,
    to: DType,
    name: String,
    allow_lossy: bool,
    overflow: AtomicU64,
    underflow: AtomicU64,
}

impl Cast {
    /// A cast of tensor `name` from `from` to `to` (both floating point).
    pub fn new(from: DType, to: DType, name: &str, allow_lossy: bool) -> Result<Cast> {
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
            overflow: AtomicU64::new(0),
            underflow: AtomicU64::new(0),
        })
    }
}

fn read_f32(d: DType, src: &[u8], out: &mut Vec<f32>) {
    out.clear();
    match d {
        DType::F32 => out.extend(
            src.chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))),
        ),
        DType::F16 | DType::BF16 => {
            let bits: Vec<u16> = src
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect();
            out.resize(bits.len(), 0.0);
            if d == DType::F16 {
                bits.reinterpret_cast::<f16>().convert_to_f32_slice(out);
            } else {
                bits.reinterpret_cast::<bf16>().convert_to_f32_slice(out);
            }
        }
        _ => out.extend(
            src.chunks_exact(8)
                .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32),
        ),
    }
}

/// The common cases without intermediate buffers, when both slices are aligned for their
/// element types (mapped inputs and the executor's buffers are, in practice) on a little-endian
/// host: `half`'s slice conversions straight between them (F16C where the CPU has it).
fn cast_aligned(from: DType, to: DType, src: &[u8], dst: &mut [u8]) -> Option<(u64, u64)> {
    if cfg!(target_endian = "big") {
        return None;
    }
    match (from, to) {
        (DType::F16 | DType::BF16, DType::F32) => {
            let s: &[u16] = bytemuck::try_cast_slice(src).ok()?;
            let d: &mut [f32] = bytemuck::try_cast_slice_mut(dst).ok()?;
            if from == DType::F16 {
                s.reinterpret_cast::<f16>().convert_to_f32_slice(d);
            } else {
                s.reinterpret_cast::<bf16>().convert_to_f32_slice(d);
            }
            Some((0, 0))
        }
        (DType::F32, DType::F16 | DType::BF16) => {
            let s: &[f32] = bytemuck::try_cast_slice(src).ok()?;
            let d: &mut [u16] = bytemuck::try_cast_slice_mut(dst).ok()?;
            let exp = if to == DType::F16 {
                d.reinterpret_cast_mut::<f16>().convert_from_f32_slice(s);
                0x7c00u16
            } else {
                d.reinterpret_cast_mut::<bf16>().convert_from_f32_slice(s);
                0x7f80
            };
            Some(count_lossy(s, d, exp))
        }
        (DType::F16, DType::BF16) | (DType::BF16, DType::F16) => {
            let s: &[u16] = bytemuck::try_cast_slice(src).ok()?;
            let d: &mut [u16] = bytemuck::try_cast_slice_mut(dst).ok()?;
            // Through f32 in cache-sized pieces (exact: f32 holds every f16 and bf16 value).
            let mut tmp = vec![0f32; 16 << 10];
            let (mut over, mut under) = (0, 0);
            for (si, di) in s.chunks(16 << 10).zip(d.chunks_mut(16 << 10)) {
                let t = &mut tmp[..si.len()];
                let exp = if from == DType::F16 {
                    si.reinterpret_cast::<f16>().convert_to_f32_slice(t);
                    di.reinterpret_cast_mut::<bf16>().convert_from_f32_slice(t);
                    0x7f80
                } else {
                    si.reinterpret_cast::<bf16>().convert_to_f32_slice(t);
                    di.reinterpret_cast_mut::<f16>().convert_from_f32_slice(t);
                    0x7c00
                };
                let (o, u) = count_lossy(t, di, exp);
                over += o;
                under += u;
            }
            Some((over, under))
        }
        _ => None,
    }
}

/// (finite values that became ±inf, non-zero values that became ±0).
fn count_lossy(vals: &[f32], bits: &[u16], exp_mask: u16) -> (u64, u64) {
    let (mut over, mut under) = (0u64, 0u64);
    for (&b, &v) in bits.iter().zip(vals) {
        let mag = b & 0x7fff;
        over += u64::from(mag == exp_mask && v.is_finite());
        under += u64::from(mag == 0 && v != 0.0);
    }
    (over, under)
}

/// Casts `src` (dtype `from`) into `dst` (dtype `to`); returns (overflows, underflows).
pub fn cast_slice(from: DType, to: DType, src: &[u8], dst: &mut [u8]) -> (u64, u64) {
    if let Some(r) = cast_aligned(from, to, src, dst) {
        return r;
    }
    if from == DType::F64 || to == DType::F64 {
        return cast_via_f64(from, to, src, dst);
    }
    let mut vals = Vec::new();
    read_f32(from, src, &mut vals);
    match to {
        DType::F32 => {
            for (o, v) in dst.chunks_exact_mut(4).zip(&vals) {
                o.copy_from_slice(&v.to_le_bytes());
            }
            (0, 0)
        }
        _ => {
            let mut bits = vec![0u16; vals.len()];
            if to == DType::F16 {
                bits.reinterpret_cast_mut::<f16>()
                    .convert_from_f32_slice(&vals);
            } else {
                bits.reinterpret_cast_mut::<bf16>()
                    .convert_from_f32_slice(&vals);
            }
            for (o, &b) in dst.chunks_exact_mut(2).zip(&bits) {
                o.copy_from_slice(&b.to_le_bytes());
            }
            count_lossy(&vals, &bits, if to == DType::F16 { 0x7c00 } else { 0x7f80 })
        }
    }
}

fn cast_via_f64(from: DType, to: DType, src: &[u8], dst: &mut [u8]) -> (u64, u64) {
    if from == DType::F64 {
        return narrow_f64(to, src, dst);
    }
    let mut v = Vec::new();
    read_f32(from, src, &mut v);
    for (o, &x) in dst.chunks_exact_mut(8).zip(&v) {
        o.copy_from_slice(&f64::from(x).to_le_bytes());
    }
    (0, 0)
}

/// f64 → f32 as torch's `.to(float32)` (the hardware conversion): round to nearest even; a NaN
/// keeps its sign and top 22 payload bits and gets the quiet bit. Written out rather than left
/// to `as`, whose NaN bits Rust does not specify.
pub fn f64_to_f32(v: f64) -> f32 {
    if v.is_nan() {
        let u = v.to_bits();
        let sign = (u >> 32) as u32 & 0x8000_0000;
        return f32::from_bits(sign | 0x7FC0_0000 | ((u >> 29) as u32 & 0x003F_FFFF));
    }
    v as f32
}

/// F64 → F32/F16/BF16 exactly as torch 2.15's CPU `.to()`: through f32 (see [`f64_to_f32`]),
/// then f32's conversion, so a value that f32 rounds onto a tie of the target rounds twice, as
/// in torch. F16 NaNs keep their payload (F16C); BF16 NaNs become `0xFFFF` (torch's
/// vectorised kernel; its scalar tail of a tensor gives `0x7FC0`).
fn narrow_f64(to: DType, src: &[u8], dst: &mut [u8]) -> (u64, u64) {
    let wide: Vec<f64> = src
        .chunks_exact(8)
        .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
        .collect();
    let narrow: Vec<f32> = wide.iter().map(|&v| f64_to_f32(v)).collect();
    let got: Vec<f64> = match to {
        DType::F32 => {
            for (o, x) in dst.chunks_exact_mut(4).zip(&narrow) {
                o.copy_from_slice(&x.to_le_bytes());
            }
            narrow.iter().map(|&x| f64::from(x)).collect()
        }
        DType::F16 => {
            let mut bits = vec![0u16; narrow.len()];
            bits.reinterpret_cast_mut::<f16>()
                .convert_from_f32_slice(&narrow);
            put_u16(dst, &bits);
            bits.iter().map(|&b| f16::from_bits(b).to_f64()).collect()
        }
        _ => {
            let bits: Vec<u16> = narrow
                .iter()
                .map(|&x| f32_to_bf16(x, Bf16Rounding::Torch))
                .collect();
            put_u16(dst, &bits);
            bits.iter().map(|&b| bf16::from_bits(b).to_f64()).collect()
        }
    };
    let over = wide.iter().zip(&got);
    let under = wide.iter().zip(&got);
    (
        over.filter(|(v, r)| v.is_finite() && r.is_infinite())
            .count() as u64,
        under.filter(|(v, r)| **v != 0.0 && **r == 0.0).count() as u64,
    )
}

fn put_u16(dst: &mut [u8], bits: &[u16]) {
    for (o, b) in dst.chunks_exact_mut(2).zip(bits) {
        o.copy_from_slice(&b.to_le_bytes());
    }
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
        let (over, under) = cast_slice(self.from, self.to, inputs[0], dst);
        if over > 0 && self.from == DType::BF16 && self.to == DType::F16 && !self.allow_lossy {
            return Err(Error::Refused {
                at: Location::default(),
                reason: format!(
                    "casting `{}` from BF16 to F16 would turn {over} finite values into ±inf \
                     (F16's largest is 65504); pass --allow-lossy to cast anyway, or keep BF16",
                    sanitize(&self.name)
                ),
            });
        }
        self.overflow.fetch_add(over, Ordering::Relaxed);
        self.underflow.fetch_add(under, Ordering::Relaxed);
        Ok(())
    }
    fn lossless(&self) -> bool {
        widening(self.from, self.to)
    }
    fn inverse(&self) -> Option<Arc<dyn Transform>> {
        widening(self.from, self.to).then(|| {
            Arc::new(Cast::new(self.to, self.from, &self.name, true).expect("float cast"))
                as Arc<dyn Transform>
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

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn narrowing_counts_overflow_and_underflow() {
        let src = f32s(&[1.0, 65504.0, 65520.0, 1e-9, -0.0, f32::NAN, f32::INFINITY]);
        let mut dst = vec![0u8; 14];
        let (o, u) = cast_slice(DType::F32, DType::F16, &src, &mut dst);
        assert_eq!((o, u), (1, 1));
        let bits: Vec<u16> = dst
            .chunks(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(bits[1], 0x7bff);
        assert_eq!(bits[2], 0x7c00);
        assert!(f16::from_bits(bits[5]).is_nan());
    }

    #[test]
    fn aligned_and_unaligned_paths_agree() {
        let vals: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 131.7).collect();
        let src = f32s(&vals);
        let mut padded = vec![0u8; src.len() + 1];
        padded[1..].copy_from_slice(&src);
        for to in [DType::F16, DType::BF16] {
            let (mut a, mut b) = (vec![0u8; 2000], vec![0u8; 2001]);
            let ra = cast_slice(DType::F32, to, &src, &mut a);
            let rb = cast_slice(DType::F32, to, &padded[1..], &mut b[1..]);
            assert_eq!((a.as_slice(), ra), (&b[1..], rb), "{to}");
            let (mut w1, mut w2) = (vec![0u8; 4000], vec![0u8; 4001]);
            cast_slice(to, DType::F32, &a, &mut w1);
            cast_slice(to, DType::F32, &b[1..], &mut w2[1..]);
            assert_eq!(w1.as_slice(), &w2[1..]);
        }
    }

    #[test]
    fn f64_narrows_through_f32_as_torch() {
        let v = [
            21.3125 + 2f64.powi(-17),
            1.0 + 2f64.powi(-8) + 2f64.powi(-40),
            1e39,
        ];
        let src: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut dst = [0u8; 6];
        // half's bf16::from_f64 drops the low 32 mantissa bits: 21.3125+2⁻¹⁷ became 21.25.
        assert_eq!(cast_slice(DType::F64, DType::BF16, &src, &mut dst), (1, 0));
        assert_eq!(dst, [0xab, 0x41, 0x80, 0x3f, 0x80, 0x7f]);
        let nan = f64::from_bits(0xFFF4_0000_0000_0001);
        assert_eq!(f64_to_f32(nan).to_bits(), 0xFFE0_0000);
    }

    #[test]
    fn bf16_to_f16_overflow_is_refused_unless_lossy_allowed() {
        let big = bf16::from_f32(1e6).to_le_bytes();
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
}
