//! The 32-element "legacy" types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (quantize + dequantize) and
//! Q8_1 (quantize only: ggml has no Q8_1 dequantizer). Spec §3.1.

#![allow(clippy::needless_range_loop)] // index loops mirror the C reference, for auditability

use crate::blocks::*;
use crate::util::{cvtt_i32, get_f16, put_f16, roundf_cvtt};

/// `(amax, signed max)`: the first element with the largest |x| wins ties (strict `<`).
#[inline(always)]
fn signed_max(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// `min`/`max` seeded with ±FLT_MAX, strict comparisons.
#[inline(always)]
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `MAX(amax, fabsf(v))` as the C macro evaluates it (`a > b ? a : b`).
#[inline(always)]
pub(crate) fn amax_macro(x: &[f32]) -> f32 {
    let mut amax = 0.0f32;
    for &v in x {
        let a = v.abs();
        amax = if amax > a { amax } else { a };
    }
    amax
}

multiversion! {
    pub(crate) fn quantize_q4_0(x: &[f32], y: &mut [BlockQ4_0]) {
        quantize_q4_0_portable(x, y)
    }
}

#[inline(always)]
fn quantize_q4_0_portable(x: &[f32], y: &mut [BlockQ4_0]) {
    for (x, b) in x.chunks_exact(32).zip(y) {
        let d = signed_max(x) / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = put_f16(d);
        for j in 0..16 {
            let q0 = (cvtt_i32(x[j] * id + 8.5) as i8).min(15) as u8;
            let q1 = (cvtt_i32(x[j + 16] * id + 8.5) as i8).min(15) as u8;
            b.qs[j] = q0 | (q1 << 4);
        }
    }
}

pub(crate) fn dequantize_q4_0(x: &[BlockQ4_0], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(32)) {
        let d = get_f16(b.d);
        for j in 0..16 {
            y[j] = ((b.qs[j] & 15) as i32 - 8) as f32 * d;
            y[j + 16] = ((b.qs[j] >> 4) as i32 - 8) as f32 * d;
        }
    }
}

multiversion! {
    pub(crate) fn quantize_q4_1(x: &[f32], y: &mut [BlockQ4_1]) {
        quantize_q4_1_portable(x, y)
    }
}

#[inline(always)]
fn quantize_q4_1_portable(x: &[f32], y: &mut [BlockQ4_1]) {
    for (x, b) in x.chunks_exact(32).zip(y) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = put_f16(d);
        b.m = put_f16(min);
        for j in 0..16 {
            let q0 = (cvtt_i32((x[j] - min) * id + 0.5) as i8).min(15) as u8;
            let q1 = (cvtt_i32((x[j + 16] - min) * id + 0.5) as i8).min(15) as u8;
            b.qs[j] = q0 | (q1 << 4);
        }
    }
}

pub(crate) fn dequantize_q4_1(x: &[BlockQ4_1], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(32)) {
        let (d, m) = (get_f16(b.d), get_f16(b.m));
        for j in 0..16 {
            y[j] = (b.qs[j] & 15) as f32 * d + m;
            y[j + 16] = (b.qs[j] >> 4) as f32 * d + m;
        }
    }
}

multiversion! {
    pub(crate) fn quantize_q5_0(x: &[f32], y: &mut [BlockQ5_0]) {
        quantize_q5_0_portable(x, y)
    }
}

#[inline(always)]
fn quantize_q5_0_portable(x: &[f32], y: &mut [BlockQ5_0]) {
    for (x, b) in x.chunks_exact(32).zip(y) {
        let d = signed_max(x) / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = put_f16(d);
        let mut qh = 0u32;
        for j in 0..16 {
            let q0 = (cvtt_i32(x[j] * id + 16.5) as i8).min(31) as u8;
            let q1 = (cvtt_i32(x[j + 16] * id + 16.5) as i8).min(31) as u8;
            b.qs[j] = (q0 & 15) | ((q1 & 15) << 4);
            qh |= (((q0 & 0x10) >> 4) as u32) << j;
            qh |= (((q1 & 0x10) >> 4) as u32) << (j + 16);
        }
        b.qh = qh.to_le_bytes();
    }
}

pub(crate) fn dequantize_q5_0(x: &[BlockQ5_0], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(32)) {
        let d = get_f16(b.d);
        let qh = u32::from_le_bytes(b.qh);
        for j in 0..16 {
            let h0 = ((qh >> j) << 4) as u8 & 0x10;
            let h1 = (qh >> (j + 12)) as u8 & 0x10;
            y[j] = (((b.qs[j] & 15) | h0) as i32 - 16) as f32 * d;
            y[j + 16] = (((b.qs[j] >> 4) | h1) as i32 - 16) as f32 * d;
        }
    }
}

multiversion! {
    pub(crate) fn quantize_q5_1(x: &[f32], y: &mut [BlockQ5_1]) {
        quantize_q5_1_portable(x, y)
    }
}

#[inline(always)]
fn quantize_q5_1_portable(x: &[f32], y: &mut [BlockQ5_1]) {
    for (x, b) in x.chunks_exact(32).zip(y) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = put_f16(d);
        b.m = put_f16(min);
        let mut qh = 0u32;
        for j in 0..16 {
            // (uint8_t) cast, no clamp (docs/specs/gguf.md §3.1)
            let q0 = cvtt_i32((x[j] - min) * id + 0.5) as u8;
            let q1 = cvtt_i32((x[j + 16] - min) * id + 0.5) as u8;
            b.qs[j] = (q0 & 15) | ((q1 & 15) << 4);
            qh |= (((q0 & 0x10) >> 4) as u32) << j;
            qh |= (((q1 & 0x10) >> 4) as u32) << (j + 16);
        }
        b.qh = qh.to_le_bytes();
    }
}

pub(crate) fn dequantize_q5_1(x: &[BlockQ5_1], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(32)) {
        let (d, m) = (get_f16(b.d), get_f16(b.m));
        let qh = u32::from_le_bytes(b.qh);
        for j in 0..16 {
            let h0 = ((qh >> j) << 4) as u8 & 0x10;
            let h1 = (qh >> (j + 12)) as u8 & 0x10;
            y[j] = ((b.qs[j] & 15) | h0) as f32 * d + m;
            y[j + 16] = ((b.qs[j] >> 4) | h1) as f32 * d + m;
        }
    }
}

multiversion! {
    pub(crate) fn quantize_q8_0(x: &[f32], y: &mut [BlockQ8_0]) {
        quantize_q8_0_portable(x, y)
    }
}

#[inline(always)]
fn quantize_q8_0_portable(x: &[f32], y: &mut [BlockQ8_0]) {
    for (x, b) in x.chunks_exact(32).zip(y) {
        let d = amax_macro(x) / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = put_f16(d);
        for (q, &v) in b.qs.iter_mut().zip(x) {
            // roundf: half away from zero
            *q = roundf_cvtt(v * id) as u8;
        }
    }
}

pub(crate) fn dequantize_q8_0(x: &[BlockQ8_0], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(32)) {
        let d = get_f16(b.d);
        for (o, &q) in y.iter_mut().zip(&b.qs) {
            *o = q as i8 as f32 * d;
        }
    }
}

pub(crate) fn quantize_q8_1(x: &[f32], y: &mut [BlockQ8_1]) {
    for (x, b) in x.chunks_exact(32).zip(y) {
        let d = amax_macro(x) / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = put_f16(d);
        let mut sum = 0i32;
        for j in 0..16 {
            let q0 = roundf_cvtt(x[j] * id) as i8;
            let q1 = roundf_cvtt(x[j + 16] * id) as i8;
            b.qs[j] = q0 as u8;
            b.qs[j + 16] = q1 as u8;
            sum += q0 as i32 + q1 as i32;
        }
        b.s = put_f16(sum as f32 * d);
    }
}
