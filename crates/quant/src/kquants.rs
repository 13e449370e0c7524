//! The K-quants (256-element super-blocks): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (quantize with the
//! `_ref` algorithms, no importance matrix, and dequantize), Q8_K. Spec §3.2–§3.4.
//!
//! All arithmetic is f32, in the C order of evaluation; sums run sequentially in index order.

#![allow(clippy::needless_range_loop)] // index loops mirror the C reference, for auditability

use crate::blocks::*;
use crate::search::{
    abs_max, make_qkx_quants, make_qx_quants_w, transpose, untranspose, Qkx, GROUP_MAX_EPS,
};
use crate::util::{get_f16, nearest_int, put_f16};

/// `make_q3_quants(n, nmax, x, L, do_rmse=true)`; `l` receives values in `0..2*nmax`.
/// (Scalar: its data-dependent refinement loop usually stops after a pass or two, which
/// lockstep lanes cannot exploit.)
#[inline(always)]
fn make_q3_quants(nmax: i32, x: &[f32; 16], l: &mut [i8; 16]) -> f32 {
    let n = 16;
    let (amax, max) = abs_max(x);
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..n {
        let q = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l[i] = q as i8;
        let w = x[i] * x[i];
        sumlx += w * x[i] * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..n {
            let w = x[i] * x[i];
            let li = l[i] as f32;
            let mut slx = sumlx - w * x[i] * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != l[i] as i32 {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for v in l.iter_mut() {
        *v += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// `make_qx_quants(n, nmax, x, L, rmse_type=1, qw=NULL)` on `M` sub-blocks in lockstep lanes
/// (see [`make_qkx_quants`]); `l[i][m]` receives values in `0..2*nmax`. Without weights ggml
/// weighs each element by `x*x`: this is the weighted search with those weights (computed as
/// ggml computes them, so every product and sum is the same float operation).
#[inline(always)]
fn make_qx_quants<const N: usize, const M: usize>(
    nmax: i32,
    x: &[[f32; M]; N],
    l: &mut [[i8; M]; N],
) -> [f32; M] {
    let w: [[f32; M]; N] = std::array::from_fn(|i| std::array::from_fn(|m| x[i][m] * x[i][m]));
    make_qx_quants_w(nmax, x, &w, l)
}

/// `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` of Q4_K/Q5_K.
#[inline(always)]
pub(crate) fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

// ---------------------------------------------------------------- dispatch

multiversion! {
    pub(crate) fn quantize_q2_k(x: &[f32], y: &mut [BlockQ2K]) {
        quantize_q2_k_portable(x, y)
    }
}

multiversion! {
    pub(crate) fn quantize_q3_k(x: &[f32], y: &mut [BlockQ3K]) {
        quantize_q3_k_portable(x, y)
    }
}

multiversion! {
    pub(crate) fn quantize_q4_k(x: &[f32], y: &mut [BlockQ4K]) {
        quantize_q4_k_portable(x, y)
    }
}

multiversion! {
    pub(crate) fn quantize_q5_k(x: &[f32], y: &mut [BlockQ5K]) {
        quantize_q5_k_portable(x, y)
    }
}

multiversion! {
    pub(crate) fn quantize_q6_k(x: &[f32], y: &mut [BlockQ6K]) {
        quantize_q6_k_portable(x, y)
    }
}

// ---------------------------------------------------------------- Q2_K

/// Q2_K first pass over `M` consecutive 16-element sub-blocks in lockstep lanes.
#[inline(always)]
fn q2k_first<const M: usize>(x: &[f32], l: &mut [u8]) -> ([f32; M], [f32; M]) {
    let xt: [[f32; M]; 16] = transpose(x);
    let mut wt = [[0f32; M]; 16];
    for i in 0..16 {
        for m in 0..M {
            wt[i][m] = xt[i][m].abs();
        }
    }
    let mut lt = [[0u8; M]; 16];
    let res = make_qkx_quants(
        Qkx::Two { use_mad: true },
        3,
        &xt,
        &wt,
        &mut lt,
        -0.5,
        0.1,
        15,
    );
    untranspose(&lt, &mut l[..16 * M]);
    res
}

/// Q2_K per super-block: scales, super-scales, requantization, packing.
#[inline(always)]
fn q2k_finish(x: &[f32], scales: &[f32], mins: &[f32], l: &mut [u8], b: &mut BlockQ2K) {
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..16 {
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    if max_scale > 0.0 {
        let iscale = 15.0 / max_scale;
        for j in 0..16 {
            b.scales[j] = nearest_int(iscale * scales[j]) as u8;
        }
        b.d = put_f16(max_scale / 15.0);
    } else {
        b.scales = [0; 16];
        b.d = put_f16(0.0);
    }
    if max_min > 0.0 {
        let iscale = 15.0 / max_min;
        for j in 0..16 {
            b.scales[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
        }
        b.dmin = put_f16(max_min / 15.0);
    } else {
        b.dmin = put_f16(0.0);
    }
    q2k_requantize_pack(x, l, b);
}

/// The end of ggml's Q2_K quantizers, with an importance matrix or without: each element
/// requantized with its sub-block's stored scale and min (`b.d`, `b.dmin` and `b.scales` are
/// set; a sub-block whose scale is zero keeps the levels of the search), then the 2-bit levels
/// packed.
#[inline(always)]
pub(crate) fn q2k_requantize_pack(x: &[f32], l: &mut [u8], b: &mut BlockQ2K) {
    let (dd, dm) = (get_f16(b.d), get_f16(b.dmin));
    for j in 0..16 {
        let d = dd * (b.scales[j] & 0xF) as f32;
        if d == 0.0 {
            continue;
        }
        let m = dm * (b.scales[j] >> 4) as f32;
        for ii in 0..16 {
            l[16 * j + ii] = nearest_int((x[16 * j + ii] + m) / d).clamp(0, 3) as u8;
        }
    }
    for h in 0..2 {
        for k in 0..32 {
            let e = 128 * h + k;
            b.qs[32 * h + k] = l[e] | (l[e + 32] << 2) | (l[e + 64] << 4) | (l[e + 96] << 6);
        }
    }
}

/// Q2_K, two super-blocks (32 lanes) per first pass.
#[inline(always)]
fn quantize_q2_k_portable(x: &[f32], y: &mut [BlockQ2K]) {
    let mut xc = x.chunks_exact(512);
    let mut yc = y.chunks_exact_mut(2);
    for (x2, y2) in (&mut xc).zip(&mut yc) {
        let mut l = [0u8; 512];
        let (s, m) = q2k_first::<32>(x2, &mut l);
        for (k, b) in y2.iter_mut().enumerate() {
            let r = 256 * k..256 * k + 256;
            q2k_finish(&x2[r.clone()], &s[16 * k..], &m[16 * k..], &mut l[r], b);
        }
    }
    for (x1, b) in xc.remainder().chunks_exact(256).zip(yc.into_remainder()) {
        let mut l = [0u8; 256];
        let (s, m) = q2k_first::<16>(x1, &mut l);
        q2k_finish(x1, &s, &m, &mut l, b);
    }
}

pub(crate) fn dequantize_q2_k(x: &[BlockQ2K], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let (d, min) = (get_f16(b.d), get_f16(b.dmin));
        for e in 0..256 {
            let (h, s, l) = (e / 128, (e / 32) % 4, e % 32);
            let sc = b.scales[e / 16];
            let dl = d * (sc & 0xF) as f32;
            let ml = min * (sc >> 4) as f32;
            let q = (b.qs[32 * h + l] >> (2 * s)) & 3;
            y[e] = dl * q as f32 - ml;
        }
    }
}

// ---------------------------------------------------------------- Q3_K

/// The 16 signed 6-bit scales of a Q3_K block (still biased by 32).
#[inline(always)]
pub(crate) fn q3k_scales(s: &[u8; 12]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let low = if j < 8 { s[j] & 0xF } else { s[j - 8] >> 4 };
        let hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = low | (hi << 4);
    }
    out
}

#[inline(always)]
fn quantize_q3_k_portable(x: &[f32], y: &mut [BlockQ3K]) {
    for (x, b) in x.chunks_exact(256).zip(y) {
        let mut l = [0i8; 256];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
        for j in 0..16 {
            let xs: &[f32; 16] = x[16 * j..16 * j + 16].try_into().unwrap();
            let ls: &mut [i8; 16] = (&mut l[16 * j..16 * j + 16]).try_into().unwrap();
            scales[j] = make_q3_quants(4, xs, ls);
            let s = scales[j].abs();
            if s > amax {
                amax = s;
                max_scale = scales[j];
            }
        }
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            let mut v = [0u8; 16];
            for j in 0..16 {
                let q = nearest_int(iscale * scales[j]) as i8; // int8_t l = nearest_int(..)
                v[j] = (q.clamp(-32, 31) + 32) as u8;
            }
            b.scales = q3k_pack_scales(&v);
            b.d = put_f16(1.0 / iscale);
        } else {
            b.scales = [0; 12];
            b.d = put_f16(0.0);
        }
        q3k_requantize_pack(x, &mut l, b);
    }
}

/// The 16 6-bit scales `v` (biased by 32) of a Q3_K block packed as ggml stores them: the
/// inverse of [`q3k_scales`].
#[inline(always)]
pub(crate) fn q3k_pack_scales(v: &[u8; 16]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for (j, &v) in v.iter().enumerate() {
        if j < 8 {
            s[j] = v & 0xF;
        } else {
            s[j - 8] |= (v & 0xF) << 4;
        }
        s[j % 4 + 8] |= (v >> 4) << (2 * (j / 4));
    }
    s
}

/// The end of ggml's Q3_K quantizers, with an importance matrix or without: each element
/// requantized with its sub-block's stored scale (`b.d` and `b.scales` are set; a sub-block
/// whose scale is zero keeps the levels of the search), then the high bits into `hmask` and
/// the low 2 bits packed.
#[inline(always)]
pub(crate) fn q3k_requantize_pack(x: &[f32], l: &mut [i8], b: &mut BlockQ3K) {
    let dd = get_f16(b.d);
    let sc = q3k_scales(&b.scales);
    for j in 0..16 {
        let d = dd * (sc[j] as i32 - 32) as f32;
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            l[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-4, 3) + 4) as i8;
        }
    }
    b.hmask = [0; 32];
    for (j, v) in l.iter_mut().enumerate() {
        if *v > 3 {
            b.hmask[j % 32] |= 1 << (j / 32);
            *v -= 4;
        }
    }
    for h in 0..2 {
        for k in 0..32 {
            let e = 128 * h + k;
            b.qs[32 * h + k] =
                (l[e] | (l[e + 32] << 2) | (l[e + 64] << 4) | (l[e + 96] << 6)) as u8;
        }
    }
}

pub(crate) fn dequantize_q3_k(x: &[BlockQ3K], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let d_all = get_f16(b.d);
        let sc = q3k_scales(&b.scales);
        for e in 0..256 {
            let (h, s, l) = (e / 128, (e / 32) % 4, e % 32);
            let dl = d_all * (sc[e / 16] as i32 - 32) as f32;
            let low = ((b.qs[32 * h + l] >> (2 * s)) & 3) as i32;
            let hbit = (b.hmask[l] >> (e / 32)) & 1;
            let q = low - if hbit != 0 { 0 } else { 4 };
            y[e] = dl * q as f32;
        }
    }
}

// ---------------------------------------------------------------- Q4_K / Q5_K

/// First pass shared by Q4_K and Q5_K over `M` consecutive 32-element sub-blocks (`M/8`
/// super-blocks; more lanes give the CPU more independent work): per-sub-block scale and min
/// from `make_qkx2_quants` ([`make_qkx_quants`]), levels in `l`.
#[inline(always)]
fn q45k_first_pass<const M: usize>(
    x: &[f32],
    nmax: i32,
    rmin: f32,
    nstep: usize,
    l: &mut [u8],
) -> ([f32; M], [f32; M]) {
    let xt: [[f32; M]; 32] = transpose(x);
    let mut sum_x2 = [0f32; M];
    for row in &xt {
        for m in 0..M {
            sum_x2[m] += row[m] * row[m];
        }
    }
    let mut av_x = [0f32; M];
    for m in 0..M {
        av_x[m] = (sum_x2[m] / 32.0).sqrt();
    }
    let mut wt = [[0f32; M]; 32];
    for i in 0..32 {
        for m in 0..M {
            wt[i][m] = av_x[m] + xt[i][m].abs();
        }
    }
    let mut lt = [[0u8; M]; 32];
    let res = make_qkx_quants(
        Qkx::Two { use_mad: false },
        nmax,
        &xt,
        &wt,
        &mut lt,
        rmin,
        0.1,
        nstep,
    );
    untranspose(&lt, &mut l[..32 * M]);
    res
}

/// Second part shared by Q4_K and Q5_K, per super-block: 6-bit scales, f16 super-scales,
/// requantized levels in `l`.
#[inline(always)]
fn q45k_finish(
    x: &[f32],
    scales: &[f32],
    mins: &[f32],
    nmax: i32,
    l: &mut [u8],
) -> ([u8; 2], [u8; 2], [u8; 12]) {
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..8 {
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    for j in 0..8 {
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    let sc = pack_scale_min_k4(&ls, &lm);
    let d = put_f16(max_scale / 63.0);
    let dmin = put_f16(max_min / 63.0);
    q45k_requantize(x, (d, dmin), &sc, nmax, l);
    (d, dmin, sc)
}

/// The 8 6-bit scales `ls` and mins `lm` of a Q4_K/Q5_K block packed as ggml stores them: the
/// inverse of [`scale_min_k4`].
#[inline(always)]
pub(crate) fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; 12] {
    let mut sc = [0u8; 12];
    for j in 0..8 {
        let (ls, lm) = (ls[j], lm[j]);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    sc
}

/// The end of ggml's Q4_K/Q5_K quantizers, with an importance matrix or without: each element
/// requantized to `0..=nmax` with its sub-block's stored scale and min (the f16 `(d, dmin)` and
/// the packed `sc`; a sub-block whose scale is zero keeps the levels of the search).
#[inline(always)]
pub(crate) fn q45k_requantize(
    x: &[f32],
    (d, dmin): ([u8; 2], [u8; 2]),
    sc: &[u8; 12],
    nmax: i32,
    l: &mut [u8],
) {
    let (dd, dm) = (get_f16(d), get_f16(dmin));
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, sc);
        let d = dd * s as f32;
        if d == 0.0 {
            continue;
        }
        let m = dm * m as f32;
        for ii in 0..32 {
            l[32 * j + ii] = nearest_int((x[32 * j + ii] + m) / d).clamp(0, nmax) as u8;
        }
    }
}

/// Super-blocks per lane batch in [`q45k_quantize`] (measured on Q4_K: 1 → 30 MB/s,
/// 2 → 61 MB/s, 4 → 70 MB/s).
const BATCH: usize = 4;

/// Runs the Q4_K/Q5_K scheme over `x`, [`BATCH`] super-blocks per lane batch (one at a time
/// for the tail), calling `pack(block, levels)` for each block.
#[inline(always)]
fn q45k_quantize<B>(
    x: &[f32],
    y: &mut [B],
    nmax: i32,
    rmin: f32,
    nstep: usize,
    head: impl Fn(&mut B) -> (&mut [u8; 2], &mut [u8; 2], &mut [u8; 12]),
    pack: impl Fn(&mut B, &[u8]),
) {
    let mut xc = x.chunks_exact(256 * BATCH);
    let mut yc = y.chunks_exact_mut(BATCH);
    for (x2, y2) in (&mut xc).zip(&mut yc) {
        let mut l = [0u8; 256 * BATCH];
        let (s, m) = q45k_first_pass::<{ 8 * BATCH }>(x2, nmax, rmin, nstep, &mut l);
        for (k, blk) in y2.iter_mut().enumerate() {
            let lb = &mut l[256 * k..256 * k + 256];
            let r = q45k_finish(&x2[256 * k..], &s[8 * k..], &m[8 * k..], nmax, lb);
            let (d, dmin, sc) = head(blk);
            (*d, *dmin, *sc) = r;
            pack(blk, lb);
        }
    }
    let (xr, yr) = (xc.remainder(), yc.into_remainder());
    for (x1, blk) in xr.chunks_exact(256).zip(yr) {
        let mut l = [0u8; 256];
        let (s, m) = q45k_first_pass::<8>(x1, nmax, rmin, nstep, &mut l);
        let r = q45k_finish(x1, &s, &m, nmax, &mut l);
        let (d, dmin, sc) = head(blk);
        (*d, *dmin, *sc) = r;
        pack(blk, &l);
    }
}

#[inline(always)]
fn quantize_q4_k_portable(x: &[f32], y: &mut [BlockQ4K]) {
    q45k_quantize(
        x,
        y,
        15,
        -1.0,
        20,
        |b| (&mut b.d, &mut b.dmin, &mut b.scales),
        pack_q4_k,
    );
}

/// Packs the 256 levels `l` (`0..16`) of a Q4_K block into its nibbles.
#[inline(always)]
pub(crate) fn pack_q4_k(b: &mut BlockQ4K, l: &[u8]) {
    for c in 0..4 {
        for k in 0..32 {
            b.qs[32 * c + k] = l[64 * c + k] | (l[64 * c + 32 + k] << 4);
        }
    }
}

pub(crate) fn dequantize_q4_k(x: &[BlockQ4K], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let (d, min) = (get_f16(b.d), get_f16(b.dmin));
        for c in 0..4 {
            let (s1, m1) = scale_min_k4(2 * c, &b.scales);
            let (s2, m2) = scale_min_k4(2 * c + 1, &b.scales);
            let (d1, m1) = (d * s1 as f32, min * m1 as f32);
            let (d2, m2) = (d * s2 as f32, min * m2 as f32);
            let q = &b.qs[32 * c..32 * c + 32];
            let (lo, hi) = y[64 * c..64 * c + 64].split_at_mut(32);
            for k in 0..32 {
                lo[k] = d1 * (q[k] & 0xF) as f32 - m1;
                hi[k] = d2 * (q[k] >> 4) as f32 - m2;
            }
        }
    }
}

#[inline(always)]
fn quantize_q5_k_portable(x: &[f32], y: &mut [BlockQ5K]) {
    q45k_quantize(
        x,
        y,
        31,
        -0.5,
        15,
        |b| (&mut b.d, &mut b.dmin, &mut b.scales),
        pack_q5_k,
    );
}

/// Packs the 256 levels `l` (`0..32`) of a Q5_K block into its nibbles and high bits.
#[inline(always)]
pub(crate) fn pack_q5_k(b: &mut BlockQ5K, l: &[u8]) {
    b.qh = [0; 32];
    for c in 0..4 {
        for k in 0..32 {
            let mut l1 = l[64 * c + k];
            if l1 > 15 {
                l1 -= 16;
                b.qh[k] |= 1 << (2 * c);
            }
            let mut l2 = l[64 * c + 32 + k];
            if l2 > 15 {
                l2 -= 16;
                b.qh[k] |= 2 << (2 * c);
            }
            b.qs[32 * c + k] = l1 | (l2 << 4);
        }
    }
}

pub(crate) fn dequantize_q5_k(x: &[BlockQ5K], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let (d, min) = (get_f16(b.d), get_f16(b.dmin));
        for c in 0..4 {
            let (s1, m1) = scale_min_k4(2 * c, &b.scales);
            let (s2, m2) = scale_min_k4(2 * c + 1, &b.scales);
            let (d1, m1) = (d * s1 as f32, min * m1 as f32);
            let (d2, m2) = (d * s2 as f32, min * m2 as f32);
            let q = &b.qs[32 * c..32 * c + 32];
            let (lo, hi) = y[64 * c..64 * c + 64].split_at_mut(32);
            for k in 0..32 {
                let h1 = if b.qh[k] & (1 << (2 * c)) != 0 { 16 } else { 0 };
                let h2 = if b.qh[k] & (2 << (2 * c)) != 0 { 16 } else { 0 };
                lo[k] = d1 * ((q[k] & 0xF) as i32 + h1) as f32 - m1;
                hi[k] = d2 * ((q[k] >> 4) as i32 + h2) as f32 - m2;
            }
        }
    }
}

// ---------------------------------------------------------------- Q6_K

/// Q6_K first pass over `M` consecutive 16-element sub-blocks in lockstep lanes.
#[inline(always)]
fn q6k_first<const M: usize>(x: &[f32], l: &mut [i8]) -> [f32; M] {
    let xt: [[f32; M]; 16] = transpose(x);
    let mut lt = [[0i8; M]; 16];
    let scales = make_qx_quants(32, &xt, &mut lt);
    untranspose(&lt, &mut l[..16 * M]);
    scales
}

/// Q6_K per super-block: scales, super-scale, requantization, packing.
#[inline(always)]
pub(crate) fn q6k_finish(x: &[f32], scales: &[f32], l: &mut [i8], b: &mut BlockQ6K) {
    let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
    for &s in &scales[..16] {
        if s.abs() > max_abs_scale {
            max_abs_scale = s.abs();
            max_scale = s;
        }
    }
    if max_abs_scale < GROUP_MAX_EPS {
        *b = BlockQ6K {
            ql: [0; 128],
            qh: [0; 64],
            scales: [0; 16],
            d: put_f16(0.0),
        };
        return;
    }
    let iscale = -128.0 / max_scale;
    b.d = put_f16(1.0 / iscale);
    for ib in 0..16 {
        b.scales[ib] = nearest_int(iscale * scales[ib]).min(127) as i8 as u8;
    }
    let dd = get_f16(b.d);
    for j in 0..16 {
        let d = dd * b.scales[j] as i8 as f32;
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            l[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-32, 31) + 32) as i8;
        }
    }
    for h in 0..2 {
        let (ql, qh) = (
            &mut b.ql[64 * h..64 * h + 64],
            &mut b.qh[32 * h..32 * h + 32],
        );
        let l = &l[128 * h..128 * h + 128];
        for k in 0..32 {
            let (a, b_, c, d) = (
                l[k] as u8,
                l[k + 32] as u8,
                l[k + 64] as u8,
                l[k + 96] as u8,
            );
            ql[k] = (a & 0xF) | ((c & 0xF) << 4);
            ql[k + 32] = (b_ & 0xF) | ((d & 0xF) << 4);
            qh[k] = (a >> 4) | ((b_ >> 4) << 2) | ((c >> 4) << 4) | ((d >> 4) << 6);
        }
    }
}

/// Q6_K, two super-blocks (32 lanes) per first pass.
#[inline(always)]
fn quantize_q6_k_portable(x: &[f32], y: &mut [BlockQ6K]) {
    let mut xc = x.chunks_exact(512);
    let mut yc = y.chunks_exact_mut(2);
    for (x2, y2) in (&mut xc).zip(&mut yc) {
        let mut l = [0i8; 512];
        let s = q6k_first::<32>(x2, &mut l);
        for (k, b) in y2.iter_mut().enumerate() {
            let r = 256 * k..256 * k + 256;
            q6k_finish(&x2[r.clone()], &s[16 * k..], &mut l[r], b);
        }
    }
    for (x1, b) in xc.remainder().chunks_exact(256).zip(yc.into_remainder()) {
        let mut l = [0i8; 256];
        let s = q6k_first::<16>(x1, &mut l);
        q6k_finish(x1, &s, &mut l, b);
    }
}

pub(crate) fn dequantize_q6_k(x: &[BlockQ6K], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let d = get_f16(b.d);
        for h in 0..2 {
            let (ql, qh) = (&b.ql[64 * h..64 * h + 64], &b.qh[32 * h..32 * h + 32]);
            let sc = &b.scales[8 * h..8 * h + 8];
            let y = &mut y[128 * h..128 * h + 128];
            for k in 0..32 {
                let is = k / 16;
                let q1 = ((ql[k] & 0xF) | ((qh[k] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[k + 32] & 0xF) | (((qh[k] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[k] >> 4) | (((qh[k] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[k + 32] >> 4) | (((qh[k] >> 6) & 3) << 4)) as i32 - 32;
                y[k] = d * sc[is] as i8 as f32 * q1 as f32;
                y[k + 32] = d * sc[is + 2] as i8 as f32 * q2 as f32;
                y[k + 64] = d * sc[is + 4] as i8 as f32 * q3 as f32;
                y[k + 96] = d * sc[is + 6] as i8 as f32 * q4 as f32;
            }
        }
    }
}

// ---------------------------------------------------------------- Q8_K

pub(crate) fn quantize_q8_k(x: &[f32], y: &mut [BlockQ8K]) {
    for (x, b) in x.chunks_exact(256).zip(y) {
        let (amax, max) = abs_max(x);
        if amax == 0.0 {
            // ggml leaves bsums untouched here; we write zeros (what a zeroed buffer holds).
            *b = BlockQ8K {
                d: [0; 4],
                qs: [0; 256],
                bsums: [0; 32],
            };
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8 as u8;
        }
        for j in 0..16 {
            let mut sum = 0i32;
            for &q in &b.qs[16 * j..16 * j + 16] {
                sum += q as i8 as i32;
            }
            b.bsums[2 * j..2 * j + 2].copy_from_slice(&(sum as i16).to_le_bytes());
        }
        b.d = (1.0 / iscale).to_le_bytes();
    }
}

pub(crate) fn dequantize_q8_k(x: &[BlockQ8K], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let d = f32::from_le_bytes(b.d);
        for (o, &q) in y.iter_mut().zip(&b.qs) {
            *o = d * q as i8 as f32;
        }
    }
}
