//! f32 ↔ f16 ↔ bf16 conversions over slices, with the rounding of each reference.
//!
//! | conversion | torch 2.15 CPU (`.to()`) | ggml / gguf-py | this module |
//! |---|---|---|---|
//! | f32→f16, finite | IEEE round-to-nearest-even (RNE), overflow → ±inf, subnormals kept | same | [`f32_to_f16`] |
//! | f32→f16, NaN | sign and top 10 mantissa bits kept, quiet bit forced (F16C `vcvtps2ph`) | C: `sign \| 0x7E00` (`GGML_FP32_TO_FP16`); gguf-py (numpy `astype(float16)`): sign and top 10 mantissa bits, quiet bit *not* forced, `0x7C01` if they are all zero | [`F16Nan`] picks |
//! | f32→bf16, finite | RNE: `(u + 0x7FFF + lsb) >> 16` | same | [`f32_to_bf16`] |
//! | f32→bf16, NaN | `0xFFFF` on contiguous tensors (AVX2/AVX-512 kernels); `0x7FC0` for 0-dim and strided tensors (c10 scalar `round_to_nearest_even`) | `(u >> 16) \| 0x40` (`ggml_compute_fp32_to_bf16`), = `half::bf16::from_f32` | [`Bf16Rounding`] picks |
//! | f16→f32 | exact; NaN gets the quiet bit (long contiguous and strided tensors) | C: exact, NaN gets the quiet bit; numpy: signalling NaNs stay signalling | [`f16_to_f32`] (quiet bit set) |
//! | bf16→f32 | `u << 16`, NaN payload untouched | same | [`bf16_to_f32`] |
//!
//! The torch and numpy behaviour was measured (fixtures/good/quant/torch_* and numpy_*, see
//! the README there; the tests compare against them). One more torch quirk not reproduced here: f16→f32 of *short* tensors (5 elements)
//! returned `0x7FFFFFFF` for every NaN.

use crate::QuantError;
use half::{bf16, f16, slice::HalfFloatSliceExt};

/// How NaN inputs map to f16 (finite values and ±inf round identically in all three).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum F16Nan {
    /// Keep the sign and the top 10 mantissa bits, force the quiet bit: torch's `.to(float16)`,
    /// x86 F16C, `half::f16::from_f32`.
    KeepPayload,
    /// `sign | 0x7E00`: ggml's `GGML_FP32_TO_FP16` (ggml's C F16 conversion, and every f16
    /// scale inside quantized blocks).
    Canonical,
    /// numpy's `astype(np.float16)` (numpy 2.4.6 on x86-64), which convert_hf_to_gguf.py /
    /// gguf-py use for F16 output: `sign | 0x7C00 | top 10 mantissa bits`, quiet bit not forced,
    /// `| 1` if those bits are all zero.
    Numpy,
}

/// Which reference an f32 → bf16 conversion reproduces. Both round to nearest even and
/// differ only for NaN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bf16Rounding {
    /// torch 2.15's `.to(torch.bfloat16)` on a contiguous CPU tensor: every NaN becomes `0xFFFF`.
    Torch,
    /// ggml's `ggml_compute_fp32_to_bf16` (and gguf-py's numpy port): NaN becomes
    /// `(bits >> 16) | 0x0040` (sign and top payload bits kept, quiet bit forced).
    Ggml,
}

/// What a narrowing cast lost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CastStats {
    /// Finite inputs that became ±inf.
    pub overflow: u64,
    /// Non-zero finite inputs that became ±0.
    pub underflow: u64,
}

impl CastStats {
    /// Adds another chunk's counts.
    pub fn merge(&mut self, other: CastStats) {
        self.overflow += other.overflow;
        self.underflow += other.underflow;
    }
}

/// f32 → f16 bits, IEEE round-to-nearest-even, with the given NaN rule.
#[inline]
pub fn f32_to_f16(x: f32, nan: F16Nan) -> u16 {
    match nan {
        F16Nan::KeepPayload => f16::from_f32(x).to_bits(),
        F16Nan::Canonical => crate::util::f16_bits_ggml(x),
        F16Nan::Numpy => {
            if x.is_nan() {
                numpy_nan(x)
            } else {
                f16::from_f32(x).to_bits()
            }
        }
    }
}

#[inline(always)]
fn numpy_nan(x: f32) -> u16 {
    let u = x.to_bits();
    let h = 0x7C00 | ((u & 0x007F_FFFF) >> 13) as u16;
    ((u >> 16) as u16 & 0x8000) | if h == 0x7C00 { 0x7C01 } else { h }
}

/// f32 → bf16 bits, round-to-nearest-even, with the given reference's NaN rule.
#[inline]
pub fn f32_to_bf16(x: f32, r: Bf16Rounding) -> u16 {
    let u = x.to_bits();
    if u & 0x7FFF_FFFF > 0x7F80_0000 {
        return match r {
            Bf16Rounding::Torch => 0xFFFF,
            Bf16Rounding::Ggml => ((u >> 16) | 0x40) as u16,
        };
    }
    (u.wrapping_add(0x7FFF + ((u >> 16) & 1)) >> 16) as u16
}

/// f16 bits → f32 (exact; a NaN keeps its payload and gets the quiet bit).
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    f16::from_bits(h).to_f32()
}

/// bf16 bits → f32 (exact: the bits shifted left by 16, NaN payload untouched).
#[inline]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

fn check_len(src: usize, dst: usize) -> Result<(), QuantError> {
    if src == dst {
        Ok(())
    } else {
        Err(QuantError::Length {
            what: "cast destination",
            expected: src,
            got: dst,
        })
    }
}

#[inline(always)]
fn account(x: f32, y_is_inf: bool, y_is_zero: bool, s: &mut CastStats) {
    let finite = x.is_finite();
    s.overflow += (finite && y_is_inf) as u64;
    s.underflow += (finite && x != 0.0 && y_is_zero) as u64;
}

/// Casts f32 to f16 bits (`dst.len()` must equal `src.len()`), counting overflow/underflow.
pub fn cast_f32_to_f16(src: &[f32], dst: &mut [u16], nan: F16Nan) -> Result<CastStats, QuantError> {
    check_len(src.len(), dst.len())?;
    // half's slice conversion uses F16C when the CPU has it: same results as the scalar path.
    bytemuck_f16_mut(dst).convert_from_f32_slice(src);
    let mut s = CastStats::default();
    for (&x, y) in src.iter().zip(dst.iter_mut()) {
        let a = *y & 0x7FFF;
        account(x, a == 0x7C00, a == 0, &mut s);
        if nan != F16Nan::KeepPayload && x.is_nan() {
            *y = f32_to_f16(x, nan);
        }
    }
    Ok(s)
}

/// Casts f32 to bf16 bits (`dst.len()` must equal `src.len()`), counting overflow/underflow.
pub fn cast_f32_to_bf16(
    src: &[f32],
    dst: &mut [u16],
    r: Bf16Rounding,
) -> Result<CastStats, QuantError> {
    check_len(src.len(), dst.len())?;
    let mut s = CastStats::default();
    for (&x, y) in src.iter().zip(dst.iter_mut()) {
        *y = f32_to_bf16(x, r);
        let a = *y & 0x7FFF;
        account(x, a == 0x7F80, a == 0, &mut s);
    }
    Ok(s)
}

/// Widens f16 bits to f32 (exact).
pub fn cast_f16_to_f32(src: &[u16], dst: &mut [f32]) -> Result<(), QuantError> {
    check_len(src.len(), dst.len())?;
    let src: &[f16] = bytemuck_f16(src);
    src.convert_to_f32_slice(dst);
    Ok(())
}

/// Widens bf16 bits to f32 (exact).
pub fn cast_bf16_to_f32(src: &[u16], dst: &mut [f32]) -> Result<(), QuantError> {
    check_len(src.len(), dst.len())?;
    for (&h, y) in src.iter().zip(dst.iter_mut()) {
        *y = bf16_to_f32(h);
    }
    Ok(())
}

/// bf16 → f16 through f32 (exact widening, then RNE), counting overflow/underflow.
pub fn cast_bf16_to_f16(
    src: &[u16],
    dst: &mut [u16],
    nan: F16Nan,
) -> Result<CastStats, QuantError> {
    check_len(src.len(), dst.len())?;
    let mut s = CastStats::default();
    for (&h, y) in src.iter().zip(dst.iter_mut()) {
        let x = bf16_to_f32(h);
        *y = f32_to_f16(x, nan);
        let a = *y & 0x7FFF;
        account(x, a == 0x7C00, a == 0, &mut s);
    }
    Ok(s)
}

/// f16 → bf16 through f32 (exact widening, then RNE), counting overflow/underflow (f16
/// subnormals below 2⁻¹³³ cannot occur, so this only loses precision, never range).
pub fn cast_f16_to_bf16(
    src: &[u16],
    dst: &mut [u16],
    r: Bf16Rounding,
) -> Result<CastStats, QuantError> {
    check_len(src.len(), dst.len())?;
    let mut s = CastStats::default();
    for (&h, y) in src.iter().zip(dst.iter_mut()) {
        let x = f16_to_f32(h);
        *y = f32_to_bf16(x, r);
        let a = *y & 0x7FFF;
        account(x, a == 0x7F80, a == 0, &mut s);
    }
    Ok(s)
}

fn bytemuck_f16(s: &[u16]) -> &[f16] {
    // SAFETY: f16 is repr(transparent) over u16.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f16>(), s.len()) }
}

fn bytemuck_f16_mut(s: &mut [u16]) -> &mut [f16] {
    // SAFETY: f16 is repr(transparent) over u16; the borrow is exclusive.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<f16>(), s.len()) }
}

/// `half::bf16::from_f32` equals [`Bf16Rounding::Ggml`] bit for bit (checked in the tests).
#[doc(hidden)]
pub fn half_bf16_bits(x: f32) -> u16 {
    bf16::from_f32(x).to_bits()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_ggml_equals_half_for_every_exponent_and_rounding_case() {
        let mut n = 0u32;
        // all exponents, mantissa patterns around the rounding point, both signs, NaNs
        for hi in 0..=0x1FFu32 {
            for lo in [
                0u32, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1_7FFF, 0x1_8000, 0x7F_FFFF, 0x40_0000,
                0x3F_8000,
            ] {
                let u = (hi << 23) | lo;
                let x = f32::from_bits(u);
                assert_eq!(
                    f32_to_bf16(x, Bf16Rounding::Ggml),
                    half_bf16_bits(x),
                    "{u:#x}"
                );
                n += 1;
            }
        }
        assert!(n > 5000);
    }

    #[test]
    fn stats_count_overflow_and_underflow() {
        let src = [
            65504.0f32,
            65520.0,
            1e-8,
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NAN,
            -1e-30,
            3e38,
        ];
        let mut h = [0u16; 9];
        let s = cast_f32_to_f16(&src, &mut h, F16Nan::Canonical).unwrap();
        assert_eq!(
            s,
            CastStats {
                overflow: 2,
                underflow: 2
            }
        );
        assert_eq!(h[6], 0x7E00);
        assert_eq!(
            f32_to_f16(f32::from_bits(0x7F80_0001), F16Nan::Numpy),
            0x7C01
        );
        assert_eq!(
            f32_to_f16(f32::from_bits(0xFF81_2345), F16Nan::Numpy),
            0xFC09
        );
        let mut b = [0u16; 9];
        let s = cast_f32_to_bf16(&src, &mut b, Bf16Rounding::Torch).unwrap();
        assert_eq!(
            s,
            CastStats {
                overflow: 0,
                underflow: 0
            }
        );
        assert_eq!(b[6], 0xFFFF);
        assert_eq!(f32_to_bf16(f32::MAX, Bf16Rounding::Ggml), 0x7F80);
        assert!(cast_f32_to_f16(&src, &mut [0u16; 3], F16Nan::Canonical).is_err());
    }
}
