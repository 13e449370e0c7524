//! The imatrix-weighted legacy row kernels: ggml's `quantize_row_q{4_0,4_1,5_0,5_1}_impl`.
//! Unlike the K-quants, σ² is taken over the whole row (`Σx² / n_per_row`). Without weights
//! each row kernel is the unweighted block kernel of `legacy.rs`, as in ggml.

#![allow(clippy::needless_range_loop)] // index loops mirror the C reference, for auditability

use crate::blocks::*;
use crate::legacy;
use crate::search::{lane_weights, make_qkx_quants, make_qx_quants_w, transpose, Qkx};
use crate::util::{put_f16, sum_sq};

/// The row's `σ² = Σx² / n_per_row`.
#[inline(always)]
fn row_sigma2(x: &[f32]) -> f32 {
    sum_sq(x) / x.len() as f32
}

/// Weights and levels of `M` blocks by the symmetric search (`make_qx_quants`, Q4_0/Q5_0):
/// `(d per block, levels in 0..2·nmax)`.
#[inline(always)]
fn qx_blocks<const M: usize>(
    x: &[f32],
    qw: &[f32],
    sigma2: f32,
    nmax: i32,
) -> ([f32; M], [[i8; M]; 32]) {
    let xt: [[f32; M]; 32] = transpose(x);
    let mut sw = [0f32; M];
    let wt = lane_weights(&xt, qw, &[sigma2; M], &mut sw);
    let mut lt = [[0i8; M]; 32];
    let d = make_qx_quants_w(nmax, &xt, &wt, &mut lt);
    (d, lt)
}

/// Weights and levels of `M` blocks by the scale-and-min search (`make_qkx3_quants`,
/// Q4_1/Q5_1): `(d, the_min, levels in 0..=nmax)`.
#[inline(always)]
fn qkx3_blocks<const M: usize>(
    x: &[f32],
    qw: &[f32],
    sigma2: f32,
    nmax: i32,
) -> ([f32; M], [f32; M], [[u8; M]; 32]) {
    let xt: [[f32; M]; 32] = transpose(x);
    let mut sw = [0f32; M];
    let wt = lane_weights(&xt, qw, &[sigma2; M], &mut sw);
    let mut lt = [[0u8; M]; 32];
    let (d, the_min) = make_qkx_quants(Qkx::Three, nmax, &xt, &wt, &mut lt, -0.9, 0.05, 36);
    (d, the_min, lt)
}

/// Q5_0/Q5_1 packing: low nibbles in `qs`, bit 4 of element `j` in bit `j` of `qh`.
#[inline(always)]
fn pack5(lo: impl Fn(usize) -> u8) -> ([u8; 16], [u8; 4]) {
    let (mut qs, mut qh) = ([0u8; 16], 0u32);
    for j in 0..16 {
        let (a, b) = (lo(j), lo(j + 16));
        qs[j] = (a & 0x0F) | ((b & 0x0F) << 4);
        qh |= (((a & 0x10) >> 4) as u32) << j;
        qh |= (((b & 0x10) >> 4) as u32) << (j + 16);
    }
    (qs, qh.to_le_bytes())
}

macro_rules! row_entry {
    ($row:ident, $blk:ty, $weighted:ident, $plain:path) => {
        /// ggml's `quantize_<type>` for one row.
        pub(crate) fn $row(x: &[f32], y: &mut [u8], w: Option<&[f32]>) {
            let y = as_blocks_mut::<$blk>(y);
            match w {
                Some(w) => $weighted(x, y, w),
                None => $plain(x, y),
            }
        }
    };
}

row_entry!(q4_0_row, BlockQ4_0, q4_0_weighted, legacy::quantize_q4_0);
row_entry!(q4_1_row, BlockQ4_1, q4_1_weighted, legacy::quantize_q4_1);
row_entry!(q5_0_row, BlockQ5_0, q5_0_weighted, legacy::quantize_q5_0);
row_entry!(q5_1_row, BlockQ5_1, q5_1_weighted, legacy::quantize_q5_1);

multiversion! {
    fn q4_0_weighted(x: &[f32], y: &mut [BlockQ4_0], qw: &[f32]) {
        let s2 = row_sigma2(x);
        in_batches!(x, y, qw, 32, ctx = s2;
            32 => q4_0_batch::<32>, 8 => q4_0_batch::<8>, 1 => q4_0_batch::<1>);
    }
}

#[inline(always)]
fn q4_0_batch<const M: usize>(x: &[f32], y: &mut [BlockQ4_0], qw: &[f32], sigma2: f32) {
    let (d, l) = qx_blocks::<M>(x, qw, sigma2, 8);
    for (m, b) in y.iter_mut().enumerate() {
        b.d = put_f16(d[m]);
        for j in 0..16 {
            b.qs[j] = l[j][m] as u8 | ((l[j + 16][m] as u8) << 4);
        }
    }
}

multiversion! {
    fn q5_0_weighted(x: &[f32], y: &mut [BlockQ5_0], qw: &[f32]) {
        let s2 = row_sigma2(x);
        in_batches!(x, y, qw, 32, ctx = s2;
            32 => q5_0_batch::<32>, 8 => q5_0_batch::<8>, 1 => q5_0_batch::<1>);
    }
}

#[inline(always)]
fn q5_0_batch<const M: usize>(x: &[f32], y: &mut [BlockQ5_0], qw: &[f32], sigma2: f32) {
    let (d, l) = qx_blocks::<M>(x, qw, sigma2, 16);
    for (m, b) in y.iter_mut().enumerate() {
        b.d = put_f16(d[m]);
        (b.qs, b.qh) = pack5(|j| l[j][m] as u8);
    }
}

multiversion! {
    fn q4_1_weighted(x: &[f32], y: &mut [BlockQ4_1], qw: &[f32]) {
        let s2 = row_sigma2(x);
        in_batches!(x, y, qw, 32, ctx = s2;
            16 => q4_1_batch::<16>, 8 => q4_1_batch::<8>, 1 => q4_1_batch::<1>);
    }
}

#[inline(always)]
fn q4_1_batch<const M: usize>(x: &[f32], y: &mut [BlockQ4_1], qw: &[f32], sigma2: f32) {
    let (d, the_min, l) = qkx3_blocks::<M>(x, qw, sigma2, 15);
    for (m, b) in y.iter_mut().enumerate() {
        b.d = put_f16(d[m]);
        b.m = put_f16(-the_min[m]);
        for j in 0..16 {
            b.qs[j] = l[j][m] | (l[j + 16][m] << 4);
        }
    }
}

multiversion! {
    fn q5_1_weighted(x: &[f32], y: &mut [BlockQ5_1], qw: &[f32]) {
        let s2 = row_sigma2(x);
        in_batches!(x, y, qw, 32, ctx = s2;
            16 => q5_1_batch::<16>, 8 => q5_1_batch::<8>, 1 => q5_1_batch::<1>);
    }
}

#[inline(always)]
fn q5_1_batch<const M: usize>(x: &[f32], y: &mut [BlockQ5_1], qw: &[f32], sigma2: f32) {
    let (d, the_min, l) = qkx3_blocks::<M>(x, qw, sigma2, 31);
    for (m, b) in y.iter_mut().enumerate() {
        b.d = put_f16(d[m]);
        b.m = put_f16(-the_min[m]);
        (b.qs, b.qh) = pack5(|j| l[j][m]);
    }
}
