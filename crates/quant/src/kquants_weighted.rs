//! The imatrix-weighted K-quant row kernels: ggml's `quantize_row_q{2,3,4,5,6}_K_impl` (what
//! `quantize_q*_K` runs per row when `quant_weights != NULL`). Without weights each row
//! kernel is the unweighted block kernel of `kquants.rs`, as in ggml.
//!
//! Several super-blocks' sub-blocks share one lane batch of the scale searches (see
//! `search.rs`); everything else runs per super-block in the C order.

#![allow(clippy::needless_range_loop)] // index loops mirror the C reference, for auditability

use crate::blocks::*;
use crate::kquants::{
    self, pack_q4_k, pack_q5_k, pack_scale_min_k4, q2k_requantize_pack, q3k_pack_scales,
    q3k_requantize_pack, q45k_requantize, q6k_finish,
};
use crate::search::{
    lane_weights, make_qkx_quants, make_qp_quants, make_qx_quants_w, transpose, untranspose, Qkx,
};
use crate::util::{put_f16, sum_sq};

/// `σ²` of each super-block of `x`, spread over its `per_sb` sub-block lanes:
/// `factor · Σx² / 256` (factor 1 for Q2_K, 2 for the others).
#[inline(always)]
fn sigma2_lanes<const M: usize>(x: &[f32], per_sb: usize, factor: f32) -> [f32; M] {
    let mut s = [0f32; M];
    for (k, sb) in x.chunks_exact(256).enumerate() {
        let v = factor * sum_sq(sb) / 256.0;
        s[k * per_sb..(k + 1) * per_sb].fill(v);
    }
    s
}

// ---------------------------------------------------------------- Q2_K

/// ggml's `quantize_q2_K` for one row.
pub(crate) fn q2_k_row(x: &[f32], y: &mut [u8], w: Option<&[f32]>) {
    let y = as_blocks_mut::<BlockQ2K>(y);
    match w {
        Some(w) => q2_k_weighted(x, y, w),
        None => kquants::quantize_q2_k(x, y),
    }
}

multiversion! {
    fn q2_k_weighted(x: &[f32], y: &mut [BlockQ2K], qw: &[f32]) {
        in_batches!(x, y, qw, 256; 2 => q2k_batch::<32>, 1 => q2k_batch::<16>);
    }
}

/// `M / 16` Q2_K super-blocks: the weighted `make_qkx3_quants` over all their 16-element
/// sub-blocks in lanes, then each block's `make_qp_quants` scales and requantization.
#[inline(always)]
fn q2k_batch<const M: usize>(x: &[f32], y: &mut [BlockQ2K], qw: &[f32]) {
    let xt: [[f32; M]; 16] = transpose(x);
    let sigma2 = sigma2_lanes::<M>(x, 16, 1.0);
    let mut sw = [0f32; M];
    let wt = lane_weights(&xt, qw, &sigma2, &mut sw);
    let mut lt = [[0u8; M]; 16];
    let (scales, mins) = make_qkx_quants(Qkx::Three, 3, &xt, &wt, &mut lt, -0.9, 0.05, 36);
    let mut l = [0u8; 1024];
    untranspose(&lt, &mut l[..16 * M]);
    for (k, b) in y.iter_mut().enumerate() {
        let r = 16 * k..16 * k + 16;
        let e = 256 * k..256 * k + 256;
        q2k_finish_w(
            &x[e.clone()],
            &scales[r.clone()],
            &mins[r.clone()],
            &sw[r],
            &mut l[e],
            b,
        );
    }
}

/// The per-super-block tail of `quantize_row_q2_K_impl`.
#[inline(always)]
fn q2k_finish_w(
    x: &[f32],
    scales: &[f32],
    mins: &[f32],
    sw: &[f32],
    l: &mut [u8],
    b: &mut BlockQ2K,
) {
    let (mut ls, mut lm) = ([0u8; 16], [0u8; 16]);
    let dm = make_qp_quants(15, scales, &mut ls, sw);
    let mm = make_qp_quants(15, mins, &mut lm, sw);
    b.d = put_f16(dm);
    b.dmin = put_f16(mm);
    for j in 0..16 {
        b.scales[j] = ls[j] | (lm[j] << 4);
    }
    q2k_requantize_pack(x, l, b);
}

// ---------------------------------------------------------------- Q3_K

/// ggml's `quantize_q3_K` for one row.
pub(crate) fn q3_k_row(x: &[f32], y: &mut [u8], w: Option<&[f32]>) {
    let y = as_blocks_mut::<BlockQ3K>(y);
    match w {
        Some(w) => q3_k_weighted(x, y, w),
        None => kquants::quantize_q3_k(x, y),
    }
}

multiversion! {
    fn q3_k_weighted(x: &[f32], y: &mut [BlockQ3K], qw: &[f32]) {
        in_batches!(x, y, qw, 256; 4 => q3k_batch::<64>, 1 => q3k_batch::<16>);
    }
}

/// `M / 16` Q3_K super-blocks: weighted `make_qx_quants(nmax 4)` over the 16-element
/// sub-blocks in lanes, then each block's scale quantization and requantization.
#[inline(always)]
fn q3k_batch<const M: usize>(x: &[f32], y: &mut [BlockQ3K], qw: &[f32]) {
    let xt: [[f32; M]; 16] = transpose(x);
    let sigma2 = sigma2_lanes::<M>(x, 16, 2.0);
    let mut sw = [0f32; M];
    let wt = lane_weights(&xt, qw, &sigma2, &mut sw);
    let mut lt = [[0i8; M]; 16];
    let scales = make_qx_quants_w(4, &xt, &wt, &mut lt);
    let mut l = [0i8; 1024];
    untranspose(&lt, &mut l[..16 * M]);
    for (k, b) in y.iter_mut().enumerate() {
        let r = 16 * k..16 * k + 16;
        let e = 256 * k..256 * k + 256;
        q3k_finish_w(&x[e.clone()], &scales[r.clone()], &sw[r], &mut l[e], b);
    }
}

/// The per-super-block tail of `quantize_row_q3_K_impl`.
#[inline(always)]
fn q3k_finish_w(x: &[f32], scales: &[f32], sw: &[f32], l: &mut [i8], b: &mut BlockQ3K) {
    let mut st = [[0f32; 1]; 16];
    let mut wt = [[0f32; 1]; 16];
    for j in 0..16 {
        st[j][0] = scales[j];
        wt[j][0] = sw[j];
    }
    let mut ls = [[0i8; 1]; 16];
    let d_block = make_qx_quants_w(32, &st, &wt, &mut ls)[0];
    let mut v = [0u8; 16];
    for j in 0..16 {
        v[j] = ls[j][0] as u8;
    }
    b.scales = q3k_pack_scales(&v);
    b.d = put_f16(d_block);
    q3k_requantize_pack(x, l, b);
}

// ---------------------------------------------------------------- Q4_K / Q5_K

/// ggml's `quantize_q4_K` for one row.
pub(crate) fn q4_k_row(x: &[f32], y: &mut [u8], w: Option<&[f32]>) {
    let y = as_blocks_mut::<BlockQ4K>(y);
    match w {
        Some(w) => q4_k_weighted(x, y, w),
        None => kquants::quantize_q4_k(x, y),
    }
}

/// ggml's `quantize_q5_K` for one row.
pub(crate) fn q5_k_row(x: &[f32], y: &mut [u8], w: Option<&[f32]>) {
    let y = as_blocks_mut::<BlockQ5K>(y);
    match w {
        Some(w) => q5_k_weighted(x, y, w),
        None => kquants::quantize_q5_k(x, y),
    }
}

multiversion! {
    fn q4_k_weighted(x: &[f32], y: &mut [BlockQ4K], qw: &[f32]) {
        in_batches!(x, y, qw, 256; 2 => q4k_batch::<16>, 1 => q4k_batch::<8>);
    }
}

/// `M / 8` Q4_K super-blocks through [`q45k_batch`], headers stored and levels packed.
#[inline(always)]
fn q4k_batch<const M: usize>(x: &[f32], y: &mut [BlockQ4K], qw: &[f32]) {
    let (l, heads) = q45k_batch::<M>(x, qw, 15);
    for (k, b) in y.iter_mut().enumerate() {
        (b.d, b.dmin, b.scales) = heads[k];
        pack_q4_k(b, &l[256 * k..256 * k + 256]);
    }
}

multiversion! {
    fn q5_k_weighted(x: &[f32], y: &mut [BlockQ5K], qw: &[f32]) {
        in_batches!(x, y, qw, 256; 2 => q5k_batch::<16>, 1 => q5k_batch::<8>);
    }
}

/// `M / 8` Q5_K super-blocks through [`q45k_batch`], headers stored and levels packed.
#[inline(always)]
fn q5k_batch<const M: usize>(x: &[f32], y: &mut [BlockQ5K], qw: &[f32]) {
    let (l, heads) = q45k_batch::<M>(x, qw, 31);
    for (k, b) in y.iter_mut().enumerate() {
        (b.d, b.dmin, b.scales) = heads[k];
        pack_q5_k(b, &l[256 * k..256 * k + 256]);
    }
}

/// Block header of Q4_K/Q5_K: `(d, dmin, scales)`.
type Head45 = ([u8; 2], [u8; 2], [u8; 12]);

/// `M / 8` Q4_K (`nmax` 15) or Q5_K (`nmax` 31) super-blocks: the weighted
/// `make_qkx3_quants` over their 32-element sub-blocks in lanes, then per block the
/// `make_qp_quants` scales and requantization. Returns the levels and block headers.
#[inline(always)]
fn q45k_batch<const M: usize>(x: &[f32], qw: &[f32], nmax: i32) -> ([u8; 1024], [Head45; 4]) {
    let xt: [[f32; M]; 32] = transpose(x);
    let sigma2 = sigma2_lanes::<M>(x, 8, 2.0);
    let mut sw = [0f32; M];
    let wt = lane_weights(&xt, qw, &sigma2, &mut sw);
    let mut lt = [[0u8; M]; 32];
    let (scales, mins) = make_qkx_quants(Qkx::Three, nmax, &xt, &wt, &mut lt, -0.9, 0.05, 36);
    let mut l = [0u8; 1024];
    untranspose(&lt, &mut l[..32 * M]);
    let mut heads = [([0u8; 2], [0u8; 2], [0u8; 12]); 4];
    for k in 0..M / 8 {
        let r = 8 * k..8 * k + 8;
        let e = 256 * k..256 * k + 256;
        let lb = &mut l[e.clone()];
        heads[k] = q45k_finish_w(
            &x[e],
            &scales[r.clone()],
            &mins[r.clone()],
            &sw[r],
            nmax,
            lb,
        );
    }
    (l, heads)
}

/// The per-super-block tail of `quantize_row_q4_K_impl`/`quantize_row_q5_K_impl`
/// (Q5_K caps the 6-bit levels at 63, Q4_K does not).
#[inline(always)]
fn q45k_finish_w(
    x: &[f32],
    scales: &[f32],
    mins: &[f32],
    sw: &[f32],
    nmax: i32,
    l: &mut [u8],
) -> Head45 {
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    let d_block = make_qp_quants(63, scales, &mut ls, sw);
    let m_block = make_qp_quants(63, mins, &mut lm, sw);
    if nmax == 31 {
        for j in 0..8 {
            (ls[j], lm[j]) = (ls[j].min(63), lm[j].min(63));
        }
    }
    let sc = pack_scale_min_k4(&ls, &lm);
    let (d, dmin) = (put_f16(d_block), put_f16(m_block));
    q45k_requantize(x, (d, dmin), &sc, nmax, l);
    (d, dmin, sc)
}

// ---------------------------------------------------------------- Q6_K

/// ggml's `quantize_q6_K` for one row.
pub(crate) fn q6_k_row(x: &[f32], y: &mut [u8], w: Option<&[f32]>) {
    let y = as_blocks_mut::<BlockQ6K>(y);
    match w {
        Some(w) => q6_k_weighted(x, y, w),
        None => kquants::quantize_q6_k(x, y),
    }
}

multiversion! {
    fn q6_k_weighted(x: &[f32], y: &mut [BlockQ6K], qw: &[f32]) {
        in_batches!(x, y, qw, 256; 4 => q6k_batch::<64>, 1 => q6k_batch::<16>);
    }
}

/// `M / 16` Q6_K super-blocks: `make_qx_quants(nmax 32)` weighted by the raw imatrix values
/// (ggml passes `qw` itself here, no σ² term) over the 16-element sub-blocks in lanes, then
/// the unweighted path's per-block tail.
#[inline(always)]
fn q6k_batch<const M: usize>(x: &[f32], y: &mut [BlockQ6K], qw: &[f32]) {
    let xt: [[f32; M]; 16] = transpose(x);
    let wt: [[f32; M]; 16] = transpose(qw);
    let mut lt = [[0i8; M]; 16];
    let scales = make_qx_quants_w(32, &xt, &wt, &mut lt);
    let mut l = [0i8; 1024];
    untranspose(&lt, &mut l[..16 * M]);
    for (k, b) in y.iter_mut().enumerate() {
        let e = 256 * k..256 * k + 256;
        q6k_finish(&x[e.clone()], &scales[16 * k..], &mut l[e], b);
    }
}
