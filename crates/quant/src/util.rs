//! Scalar helpers that reproduce ggml's C arithmetic exactly.

use half::f16;

/// ggml's `nearest_int`: adds 1.5·2²³ and reads the low mantissa bits back, which rounds
/// half to even for |x| ≤ 2²². Outside that range (and for NaN) it returns the same garbage
/// as the C code, which runs with its `assert` compiled out.
#[inline(always)]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// C's float → 32-bit int conversion as x86-64 executes it (`cvttss2si`): truncation toward
/// zero, and `i32::MIN` for NaN and out-of-range values (Rust's `as` saturates instead).
/// The ggml `_ref` quantizers narrow this further with `(int8_t)`/`(uint8_t)` casts.
#[inline(always)]
pub(crate) fn cvtt_i32(x: f32) -> i32 {
    if (-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        x as i32
    } else {
        i32::MIN
    }
}

/// `(int)roundf(x)` as x86-64 executes it: round half away from zero, then [`cvtt_i32`].
/// Written without a libm call so that loops over it vectorize.
#[inline(always)]
pub(crate) fn roundf_cvtt(x: f32) -> i32 {
    if x.abs() < 8_388_608.0 {
        // |x| < 2^23: the truncation and the fraction are exact
        let t = x as i32;
        let f = x - t as f32;
        t + (f >= 0.5) as i32 - (f <= -0.5) as i32
    } else {
        // already an integer (or inf/NaN): roundf(x) == x
        cvtt_i32(x)
    }
}

/// `lroundf` as glibc on x86-64 computes it: round half away from zero; NaN and values out of
/// the `long` range give `i64::MIN`.
#[inline(always)]
pub(crate) fn lroundf(x: f32) -> i64 {
    let r = x.round();
    if (-9.223_372e18..9.223_372e18).contains(&r) {
        r as i64
    } else {
        i64::MIN
    }
}

/// C's `MAX(a, b)`: `a > b ? a : b` (so `b` when either is NaN).
#[inline(always)]
pub(crate) fn c_max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// `Σ x[i]²` in index order.
#[inline(always)]
pub(crate) fn sum_sq(x: &[f32]) -> f32 {
    let mut s = 0.0f32;
    for &v in x {
        s += v * v;
    }
    s
}

/// `GGML_FP32_TO_FP16`: IEEE round-to-nearest-even; NaN becomes `sign | 0x7E00`.
#[inline(always)]
pub(crate) fn f16_bits_ggml(x: f32) -> u16 {
    if x.is_nan() {
        ((x.to_bits() >> 16) as u16 & 0x8000) | 0x7E00
    } else {
        f16::from_f32(x).to_bits()
    }
}

/// Stores `GGML_FP32_TO_FP16(x)` little-endian.
#[inline(always)]
pub(crate) fn put_f16(x: f32) -> [u8; 2] {
    f16_bits_ggml(x).to_le_bytes()
}

/// `GGML_FP16_TO_FP32` of a little-endian half (exact; NaN gets its quiet bit set).
#[inline(always)]
pub(crate) fn get_f16(b: [u8; 2]) -> f32 {
    f16::from_bits(u16::from_le_bytes(b)).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-3.7), -4);
        assert_eq!(nearest_int(4_194_303.0), 4_194_303);
    }

    #[test]
    fn cvtt_matches_x86() {
        assert_eq!(cvtt_i32(16.9), 16);
        assert_eq!(cvtt_i32(-0.9), 0);
        assert_eq!(cvtt_i32(f32::NAN), i32::MIN);
        assert_eq!(cvtt_i32(f32::INFINITY), i32::MIN);
        assert_eq!(cvtt_i32(-2_147_483_648.0), i32::MIN);
        assert_eq!(cvtt_i32(3e9), i32::MIN);
        for v in [
            0.5f32,
            1.5,
            2.5,
            -0.5,
            -2.5,
            0.49999997,
            -0.49999997,
            126.5,
            8388607.5,
            1e10,
            -1e10,
        ] {
            assert_eq!(roundf_cvtt(v), cvtt_i32(v.round()), "{v}");
        }
        assert_eq!(roundf_cvtt(f32::NAN), i32::MIN);
        assert_eq!(lroundf(2.5), 3);
        assert_eq!(lroundf(-2.5), -3);
        assert_eq!(lroundf(f32::NAN), i64::MIN);
    }

    #[test]
    fn ggml_f16_nan_is_canonical() {
        assert_eq!(f16_bits_ggml(f32::from_bits(0xFF81_2345)), 0xFE00);
        assert_eq!(f16_bits_ggml(65520.0), 0x7C00);
        assert_eq!(f16_bits_ggml(65519.0), 0x7BFF);
    }
}
