//! Ternary (TQ1_0, TQ2_0), microscaling FP4 (MXFP4, NVFP4) and the 1/2-bit Q1_0, Q2_0:
//! quantize (`_ref` algorithms) and dequantize.

#![allow(clippy::needless_range_loop)] // index loops mirror the C reference, for auditability

use crate::blocks::*;
use crate::grids::KVALUES_FP4;
use crate::legacy::amax_macro;
use crate::util::{cvtt_i32, get_f16, lroundf, put_f16, roundf_cvtt};

/// `(int)lroundf(v) + 1` truncated to C `int`, as the TQ quantizers compute it.
#[inline(always)]
fn trit(v: f32) -> i32 {
    (lroundf(v) as i32).wrapping_add(1)
}

pub(crate) fn quantize_tq1_0(x: &[f32], y: &mut [BlockTq1_0]) {
    for (x, b) in x.chunks_exact(256).zip(y) {
        let d = amax_macro(x);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = put_f16(d);
        // 5 trits per byte: 32 bytes over x[0..160], 16 bytes over x[160..240]
        let pack5 = |x: &[f32], stride: usize, m: usize| -> u8 {
            let mut q = 0u8;
            for n in 0..5 {
                q = q
                    .wrapping_mul(3)
                    .wrapping_add(trit(x[m + n * stride] * id) as u8);
            }
            (q as u32 * 256).div_ceil(243) as u8
        };
        for m in 0..32 {
            b.qs[m] = pack5(&x[..160], 32, m);
        }
        for m in 0..16 {
            b.qs[32 + m] = pack5(&x[160..240], 16, m);
        }
        let x = &x[240..];
        for j in 0..4 {
            let mut q = 0u8;
            for m in 0..4 {
                q = q
                    .wrapping_mul(3)
                    .wrapping_add(trit(x[j + 4 * m] * id) as u8);
            }
            q = q.wrapping_mul(3);
            b.qh[j] = (q as u32 * 256).div_ceil(243) as u8;
        }
    }
}

#[inline(always)]
fn tq1_trit(byte: u8, pow3: u8) -> f32 {
    let q = byte.wrapping_mul(pow3);
    (((q as u16 * 3) >> 8) as i32 - 1) as f32
}

pub(crate) fn dequantize_tq1_0(x: &[BlockTq1_0], y: &mut [f32]) {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let d = get_f16(b.d);
        let mut o = 0;
        for (start, len) in [(0usize, 32usize), (32, 16)] {
            for p in POW3 {
                for m in 0..len {
                    y[o] = tq1_trit(b.qs[start + m], p) * d;
                    o += 1;
                }
            }
        }
        for p in &POW3[..4] {
            for &q in &b.qh {
                y[o] = tq1_trit(q, *p) * d;
                o += 1;
            }
        }
    }
}

pub(crate) fn quantize_tq2_0(x: &[f32], y: &mut [BlockTq2_0]) {
    for (x, b) in x.chunks_exact(256).zip(y) {
        let d = amax_macro(x);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = put_f16(d);
        for j in 0..2 {
            let x = &x[128 * j..128 * j + 128];
            for m in 0..32 {
                let mut q = 0u8;
                for n in 0..4 {
                    q = q.wrapping_add(((trit(x[m + 32 * n] * id) & 3) << (2 * n)) as u8);
                }
                b.qs[32 * j + m] = q;
            }
        }
    }
}

pub(crate) fn dequantize_tq2_0(x: &[BlockTq2_0], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let d = get_f16(b.d);
        for j in 0..2 {
            for l in 0..4 {
                for m in 0..32 {
                    let q = ((b.qs[32 * j + m] >> (2 * l)) & 3) as i32;
                    y[128 * j + 32 * l + m] = (q - 1) as f32 * d;
                }
            }
        }
    }
}

/// `GGML_E8M0_TO_FP32_HALF`: 2^(e-128), with the two subnormal cases.
#[inline(always)]
fn e8m0_half(e: u8) -> f32 {
    f32::from_bits(if e < 2 {
        0x0020_0000 << e
    } else {
        ((e as u32) - 1) << 23
    })
}

/// `best_index_mxfp4`: the first code minimising `|kvalue*e - x|`.
#[inline(always)]
fn best_index_fp4(x: f32, e: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = (KVALUES_FP4[0] as f32 * e - x).abs();
    for i in 1..16 {
        let err = (KVALUES_FP4[i] as f32 * e - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

pub(crate) fn quantize_mxfp4(x: &[f32], y: &mut [BlockMxfp4]) {
    for (x, b) in x.chunks_exact(32).zip(y) {
        let mut amax = 0.0f32;
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
            }
        }
        // (uint8_t)(floorf(log2f(amax)) - 2 + 127), via glibc's log2f like the C code
        let e = if amax > 0.0 {
            cvtt_i32(amax.log2().floor() - 2.0 + 127.0) as u8
        } else {
            0
        };
        let d = e8m0_half(e);
        b.e = [e];
        for j in 0..16 {
            b.qs[j] = best_index_fp4(x[j], d) | (best_index_fp4(x[j + 16], d) << 4);
        }
    }
}

pub(crate) fn dequantize_mxfp4(x: &[BlockMxfp4], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(32)) {
        let d = e8m0_half(b.e[0]);
        for j in 0..16 {
            y[j] = KVALUES_FP4[(b.qs[j] & 15) as usize] as f32 * d;
            y[j + 16] = KVALUES_FP4[(b.qs[j] >> 4) as usize] as f32 * d;
        }
    }
}

/// 2^k for small k (exact).
#[inline(always)]
fn pow2(k: i32) -> f32 {
    f32::from_bits(((127 + k) as u32) << 23)
}

/// `ggml_ue4m3_to_fp32`: an unsigned E4M3 scale, halved (0 and 0x7F give 0).
#[inline(always)]
fn ue4m3_to_f32(x: u8) -> f32 {
    if x == 0 || x == 0x7F {
        return 0.0;
    }
    let exp = ((x >> 3) & 0xF) as i32;
    let man = (x & 7) as f32;
    let raw = if exp == 0 {
        man * pow2(-9)
    } else {
        (1.0 + man / 8.0) * pow2(exp - 7)
    };
    raw * 0.5
}

/// `ggml_fp32_to_ue4m3`.
fn f32_to_ue4m3(mut x: f32) -> u8 {
    if x.is_nan() || x <= 0.0 {
        return 0;
    }
    if x > 448.0 {
        x = 448.0;
    }
    let bits = x.to_bits();
    let fp32_exp = ((bits >> 23) & 0xFF) as i32 - 127;
    let fp32_man = ((bits >> 20) & 7) as i32;
    let mut exp = fp32_exp + 7;
    if exp <= 0 {
        let man = cvtt_i32(x * 512.0 + 0.5).min(7);
        return if man < 1 { 0 } else { man as u8 };
    }
    if exp >= 15 {
        return 0x7E;
    }
    let mut man = fp32_man + ((bits >> 19) & 1) as i32;
    if man > 7 {
        man = 0;
        exp += 1;
        if exp >= 15 {
            return 0x7E;
        }
    }
    ((exp << 3) | man) as u8
}

pub(crate) fn quantize_nvfp4(x: &[f32], y: &mut [BlockNvfp4]) {
    for (x, b) in x.chunks_exact(64).zip(y) {
        for s in 0..4 {
            let xb = &x[16 * s..16 * s + 16];
            let mut amax = 0.0f32;
            for &v in xb {
                if amax < v.abs() {
                    amax = v.abs();
                }
            }
            let ue = f32_to_ue4m3(amax / 6.0);
            b.d[s] = ue;
            let d = ue4m3_to_f32(ue);
            for j in 0..8 {
                b.qs[8 * s + j] = best_index_fp4(xb[j], d) | (best_index_fp4(xb[j + 8], d) << 4);
            }
        }
    }
}

pub(crate) fn dequantize_nvfp4(x: &[BlockNvfp4], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(64)) {
        for s in 0..4 {
            let d = ue4m3_to_f32(b.d[s]);
            let yb = &mut y[16 * s..16 * s + 16];
            for j in 0..8 {
                let q = b.qs[8 * s + j];
                yb[j] = KVALUES_FP4[(q & 15) as usize] as f32 * d;
                yb[j + 8] = KVALUES_FP4[(q >> 4) as usize] as f32 * d;
            }
        }
    }
}

pub(crate) fn quantize_q1_0(x: &[f32], y: &mut [BlockQ1_0]) {
    for (x, b) in x.chunks_exact(128).zip(y) {
        let mut sum_abs = 0.0f32;
        for &v in x {
            sum_abs += v.abs();
        }
        b.d = put_f16(sum_abs / 128.0);
        b.qs = [0; 16];
        for (j, &v) in x.iter().enumerate() {
            if v >= 0.0 {
                b.qs[j / 8] |= 1 << (j % 8);
            }
        }
    }
}

pub(crate) fn dequantize_q1_0(x: &[BlockQ1_0], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(128)) {
        let d = get_f16(b.d);
        for (j, o) in y.iter_mut().enumerate() {
            *o = if (b.qs[j / 8] >> (j % 8)) & 1 != 0 {
                d
            } else {
                -d
            };
        }
    }
}

pub(crate) fn quantize_q2_0(x: &[f32], y: &mut [BlockQ2_0]) {
    for (x, b) in x.chunks_exact(64).zip(y) {
        let mut amax = 0.0f32;
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
            }
        }
        let d = amax;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        b.d = put_f16(d);
        b.qs = [0; 16];
        for (j, &v) in x.iter().enumerate() {
            let q = roundf_cvtt(v * id).wrapping_add(1).clamp(0, 3);
            b.qs[j / 4] |= (q as u8) << ((j % 4) * 2);
        }
    }
}

pub(crate) fn dequantize_q2_0(x: &[BlockQ2_0], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(64)) {
        let d = get_f16(b.d);
        for (j, o) in y.iter_mut().enumerate() {
            let q = (b.qs[j / 4] >> ((j % 4) * 2)) & 3;
            *o = (q as i32 - 1) as f32 * d;
        }
    }
}
