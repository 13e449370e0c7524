//! ggml's 1-bit grid quantizers: `quantize_iq1_s` (importance matrix required) and
//! `quantize_iq1_m` (optional), `quantize_row_iq1_*_impl` in ggml-quants.c.
//!
//! Each sub-block's values are sorted; every split of the sorted values into three runs
//! (levels −1, 0, +1, shifted by ±δ) is scored exactly from prefix sums, the best split's
//! levels are snapped to the 2048-point grid (off-grid groups of 8 take their best
//! neighbour), and the sub-block scales are stored as 3-bit multiples of the block scale.
//! f32 arithmetic in the C code's order; where ggml aborts the kernel stops (see
//! `crate::iq2_quant::quantize_row`).

#![allow(clippy::needless_range_loop)] // index loops mirror the C reference, for auditability

use crate::blocks::{BlockIq1M, BlockIq1S};
use crate::iq2_quant::row_kernel;
use crate::iq_init::{key_of, nearest, Grid, GridTables, Lookup, Near};
use crate::util::{c_max, nearest_int, put_f16, sum_sq};

const GROUP_MAX_EPS_IQ1_S: f32 = 1e-12;
const GROUP_MAX_EPS_IQ1_M: f32 = 1e-7;
const DELTA: f32 = 0.125;
/// The three levels shifted up (`x_p`) or down (`x_m`) by δ.
const X_P: [f32; 3] = [-1.0 + DELTA, DELTA, 1.0 + DELTA];
const X_M: [f32; 3] = [-1.0 - DELTA, -DELTA, 1.0 - DELTA];

/// Indices of `xb` sorted by value, stably (glibc's `qsort` is a merge sort at these sizes;
/// the comparator is `<`/`>`, so ±0 tie and keep their order). NaN never reaches a result
/// (it makes every split's score NaN), so its order does not matter; this never panics.
#[inline(always)]
fn sorted_indices<const N: usize>(xb: &[f32]) -> [usize; N] {
    let mut idx: [usize; N] = std::array::from_fn(|i| i);
    for j in 1..N {
        let cur = idx[j];
        let mut k = j;
        while k > 0 && xb[idx[k - 1]] > xb[cur] {
            idx[k] = idx[k - 1];
            k -= 1;
        }
        idx[k] = cur;
    }
    idx
}

/// `iq1_find_best_neighbour2`: the neighbour whose levels, as the values `xg`, at `scale` are
/// nearest to `xval`, weighted by `w` (first of equals). `None` where ggml falls back to a
/// loop that reads out of bounds and then aborts (every distance NaN or ≥ `f32::MAX`).
/// `xg[l]` is `l − 1 + xg[1]`, computed from the point `p = 2l + 1` as `(p − 3)/2 + xg[1]`,
/// which is exact for these values.
#[inline(always)]
fn best_neighbour(
    near: &Near,
    xval: &[f32],
    w: &[f32],
    scale: f32,
    xg: &[f32; 3],
) -> Option<usize> {
    debug_assert!(xg[0] == -1.0 + xg[1] && xg[2] == 1.0 + xg[1]);
    let shift = xg[1];
    nearest(near, xval, w, scale, |p| (p - 3.0) * 0.5 + shift)
}

/// Grid indices of the groups of 8 levels in `l` (off-grid groups take their best
/// neighbour, using the values `xx(k)` for group `k`), and whether all were on the grid.
#[inline(always)]
fn snap_groups<const G: usize>(
    t: &GridTables,
    l: &[i8],
    xb: &[f32],
    weight: &[f32],
    scale: f32,
    xx: impl Fn(usize) -> &'static [f32; 3],
) -> Result<([usize; G], bool), ()> {
    let mut index = [0usize; G];
    let mut all_on_grid = true;
    for k in 0..G {
        let g = 8 * k..8 * k + 8;
        let levels: [i8; 8] = l[g.clone()].try_into().unwrap();
        index[k] = match t.lookup(key_of(levels) as u16) {
            Lookup::OnGrid => t.index_of(key_of(levels) as u16).ok_or(())?,
            Lookup::Near(near) => {
                all_on_grid = false;
                best_neighbour(&near, &xb[g.clone()], &weight[g], scale, xx(k)).ok_or(())?
            }
        };
    }
    Ok((index, all_on_grid))
}

/// The weighted least-squares scale of the snapped groups (`Σ w·q·x`, `Σ w·q²`).
#[inline(always)]
fn grid_sums(
    t: &GridTables,
    index: &[usize],
    xb: &[f32],
    weight: &[f32],
    xx: impl Fn(usize) -> &'static [f32; 3],
) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for (k, &gi) in index.iter().enumerate() {
        let pg = &t.points[gi];
        for j in 0..8 {
            let w = weight[8 * k + j];
            let q = xx(k)[((pg[j] - 1) / 2) as usize];
            sumqx += w * q * xb[8 * k + j];
            sumq2 += w * q * q;
        }
    }
    (sumqx, sumq2)
}

/// Levels 0/1/2 of the sorted positions below `i1`, below `i2`, and the rest.
#[inline(always)]
fn split_levels<const N: usize>(idx: &[usize; N], i1: usize, i2: usize) -> [i8; N] {
    let mut l = [0i8; N];
    for (j, &i) in idx.iter().enumerate() {
        l[i] = if j < i1 {
            0
        } else if j < i2 {
            1
        } else {
            2
        };
    }
    l
}

#[inline(always)]
fn max_abs(xb: &[f32]) -> f32 {
    let mut max = xb[0].abs();
    for &v in &xb[1..] {
        max = c_max(max, v.abs());
    }
    max
}

/// IQ1_S's exhaustive split search over one sorted 32-value sub-block: `(scale, i1, i2,
/// shift)` of the best split, if any scores.
#[inline(always)]
fn iq1s_split(
    xb: &[f32],
    weight: &[f32],
    idx: &[usize; 32],
    max: f32,
) -> Option<(f32, usize, usize, i32)> {
    let (mut sumx, mut sumw) = ([0f32; 33], [0f32; 33]);
    for j in 0..32 {
        let i = idx[j];
        sumx[j + 1] = sumx[j] + weight[i] * xb[i];
        sumw[j + 1] = sumw[j] + weight[i];
    }
    let mut best_score = -f32::MAX;
    let mut scale = max;
    let mut best = None;
    for i1 in 0..=32 {
        // Every split's sums for this i1 at once (independent lanes, the C expressions as
        // written), then the C's scan over (i2, shift) in order.
        let (mut sumqx, mut sumq2) = ([[0f32; 33]; 2], [[0f32; 33]; 2]);
        for (s, x) in [&X_P, &X_M].into_iter().enumerate() {
            for i2 in 0..33 {
                sumqx[s][i2] = (sumx[i1] - sumx[0]) * x[0]
                    + (sumx[i2] - sumx[i1]) * x[1]
                    + (sumx[32] - sumx[i2]) * x[2];
                sumq2[s][i2] = (sumw[i1] - sumw[0]) * x[0] * x[0]
                    + (sumw[i2] - sumw[i1]) * x[1] * x[1]
                    + (sumw[32] - sumw[i2]) * x[2] * x[2];
            }
        }
        for i2 in i1..=32 {
            for (s, shift) in [(0, 1), (1, -1)] {
                let (qx, q2) = (sumqx[s][i2], sumq2[s][i2]);
                if q2 > 0.0 && qx * qx > best_score * q2 {
                    scale = qx / q2;
                    best_score = scale * qx;
                    best = Some((i1, i2, shift));
                }
            }
        }
    }
    best.map(|(i1, i2, s)| (scale, i1, i2, s))
}

#[inline(always)]
fn iq1_s_block(
    t: &GridTables,
    xbl: &[f32],
    qwb: Option<&[f32]>,
    y: &mut BlockIq1S,
) -> Result<(), ()> {
    let qwb = qwb.ok_or(())?;
    y.d = put_f16(0.0);
    y.qs = [0; 32];
    y.qh = [0; 16];
    let mut qh = [0u16; 8];
    let (mut scales, mut shifts) = ([0f32; 8], [1i32; 8]);
    let mut max_scale = 0f32;
    let sigma2 = 2.0 * sum_sq(xbl) / 256.0;
    let mut weight = [0f32; 32];
    for ib in 0..8 {
        let xb = &xbl[32 * ib..32 * ib + 32];
        let qw = &qwb[32 * ib..32 * ib + 32];
        for i in 0..32 {
            weight[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
        }
        let max = max_abs(xb);
        if max < GROUP_MAX_EPS_IQ1_S {
            continue;
        }
        let idx = sorted_indices::<32>(xb);
        let Some((mut scale, i1, i2, mut shift)) = iq1s_split(xb, &weight, &idx, max) else {
            continue;
        };
        let mut l = split_levels(&idx, i1, i2);
        if scale < 0.0 {
            l.iter_mut().for_each(|v| *v = 2 - *v);
            scale = -scale;
            shift = -shift;
        }
        let xx: &'static [f32; 3] = if shift == 1 { &X_P } else { &X_M };
        let (index, all_on_grid) = snap_groups::<4>(t, &l, xb, &weight, scale, |_| xx)?;
        if !all_on_grid {
            let (sumqx, sumq2) = grid_sums(t, &index, xb, &weight, |_| xx);
            if sumqx > 0.0 && sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        for k in 0..4 {
            y.qs[4 * ib + k] = index[k] as u8;
            qh[ib] |= ((index[k] >> 8) << (3 * k)) as u16;
        }
        if scale.is_nan() {
            return Err(()); // ggml: GGML_ASSERT(scale >= 0)
        }
        scales[ib] = scale;
        shifts[ib] = shift;
        max_scale = c_max(max_scale, scale);
    }
    if max_scale != 0.0 {
        let d = max_scale / 15.0;
        y.d = put_f16(d * 1.125);
        let id = 1.0 / d;
        for ib in 0..8 {
            let mut l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 7);
            if shifts[ib] == -1 {
                l |= 8;
            }
            qh[ib] |= (l << 12) as u16;
        }
    }
    for (o, v) in y.qh.chunks_exact_mut(2).zip(qh) {
        o.copy_from_slice(&v.to_le_bytes());
    }
    Ok(())
}

row_kernel!(
    /// Row kernel of IQ1_S (`quantize_iq1_s`; weights required).
    quantize_iq1_s, Grid::Iq1S, iq1_s_block
);

/// IQ1_M's values of half `k` of a sub-block with shift code `s` (bit 1: first half shifted
/// down, bit 0: second half).
#[inline(always)]
fn iq1m_xx(s: usize, k: usize) -> &'static [f32; 3] {
    let down = if k == 0 { s >= 2 } else { s % 2 == 1 };
    if down {
        &X_M
    } else {
        &X_P
    }
}

/// Sub-block weights of IQ1_M: `qw·√(σ² + x²)`, or `x²` without an importance matrix.
#[inline(always)]
fn iq1m_weights(xb: &[f32], qw: Option<&[f32]>, sigma2: f32, weight: &mut [f32; 16]) {
    match qw {
        Some(qw) => {
            for i in 0..16 {
                weight[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
            }
        }
        None => {
            for i in 0..16 {
                weight[i] = xb[i] * xb[i];
            }
        }
    }
}

/// IQ1_M's split search over one sorted 16-value sub-block, each half with its own shift:
/// `(scale, i1, i2, shift code)` of the best split, if any scores.
#[inline(always)]
fn iq1m_split(
    xb: &[f32],
    weight: &[f32],
    idx: &[usize; 16],
    max: f32,
) -> Option<(f32, usize, usize, usize)> {
    let (mut px, mut pw) = ([[0f32; 17]; 2], [[0f32; 17]; 2]);
    for j in 0..16 {
        let i = idx[j];
        let h = usize::from(i >= 8);
        px[h][j + 1] = px[h][j] + weight[i] * xb[i];
        px[1 - h][j + 1] = px[1 - h][j];
        pw[h][j + 1] = pw[h][j] + weight[i];
        pw[1 - h][j + 1] = pw[1 - h][j];
    }
    let txs = [px[0][16], px[1][16]];
    let tws = [pw[0][16], pw[1][16]];
    let (p2, m2) = (X_P[2], X_M[2]);
    let cp1 = X_P[0] * X_P[0] - X_P[1] * X_P[1];
    let cp2 = X_P[1] * X_P[1] - X_P[2] * X_P[2];
    let cm1 = X_M[0] * X_M[0] - X_M[1] * X_M[1];
    let cm2 = X_M[1] * X_M[1] - X_M[2] * X_M[2];
    let mut best_score = -f32::MAX;
    let mut scale = max;
    let mut best = None;
    for i1 in 0..=16 {
        // Every split's sums for this i1 at once (independent lanes, the C expressions as
        // written), then the C's scan over (i2, k) in order.
        let (mut sumqx, mut sumq2) = ([[0f32; 17]; 4], [[0f32; 17]; 4]);
        for i2 in 0..17 {
            let (mut qx_p, mut qx_m, mut q2_p, mut q2_m) =
                ([0f32; 2], [0f32; 2], [0f32; 2], [0f32; 2]);
            for h in 0..2 {
                let sx = px[h][i1] + px[h][i2];
                qx_p[h] = txs[h] * p2 - sx;
                qx_m[h] = txs[h] * m2 - sx;
                q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
            }
            sumqx[0][i2] = qx_p[0] + qx_p[1];
            sumqx[1][i2] = qx_p[0] + qx_m[1];
            sumqx[2][i2] = qx_m[0] + qx_p[1];
            sumqx[3][i2] = qx_m[0] + qx_m[1];
            sumq2[0][i2] = q2_p[0] + q2_p[1];
            sumq2[1][i2] = q2_p[0] + q2_m[1];
            sumq2[2][i2] = q2_m[0] + q2_p[1];
            sumq2[3][i2] = q2_m[0] + q2_m[1];
        }
        for i2 in i1..=16 {
            for k in 0..4 {
                let (qx, q2) = (sumqx[k][i2], sumq2[k][i2]);
                if q2 > 0.0 && qx * qx > best_score * q2 {
                    scale = qx / q2;
                    best_score = scale * qx;
                    best = Some((i1, i2, k));
                }
            }
        }
    }
    best.map(|(i1, i2, k)| (scale, i1, i2, k))
}

/// One IQ1_M sub-block: its scale and shift code, grid indices written to `qs`/`qh`.
/// `Ok(None)` if it has no scale (ggml leaves it at scale 0, shift 0).
#[inline(always)]
fn iq1m_sub_block(
    t: &GridTables,
    xb: &[f32],
    weight: &[f32; 16],
    qs: &mut [u8],
    qh: &mut u8,
) -> Result<Option<(f32, usize)>, ()> {
    let max = max_abs(xb);
    if max < GROUP_MAX_EPS_IQ1_M {
        return Ok(None);
    }
    let idx = sorted_indices::<16>(xb);
    let Some((mut scale, i1, i2, mut best_k)) = iq1m_split(xb, weight, &idx, max) else {
        return Ok(None);
    };
    let mut l = split_levels(&idx, i1, i2);
    if scale < 0.0 {
        l.iter_mut().for_each(|v| *v = 2 - *v);
        scale = -scale;
        best_k = 3 - best_k;
    }
    let xx = |k| iq1m_xx(best_k, k);
    let (index, all_on_grid) = snap_groups::<2>(t, &l, xb, weight, scale, xx)?;
    if !all_on_grid {
        let (sumqx, sumq2) = grid_sums(t, &index, xb, weight, xx);
        if sumqx > 0.0 && sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    qs[0] = index[0] as u8;
    qs[1] = index[1] as u8;
    *qh = ((index[0] >> 8) | ((index[1] >> 8) << 4)) as u8;
    if scale.is_nan() {
        return Err(()); // ggml: GGML_ASSERT(scale >= 0)
    }
    Ok(Some((scale, best_k)))
}

#[inline(always)]
fn iq1_m_block(
    t: &GridTables,
    xbl: &[f32],
    qwb: Option<&[f32]>,
    y: &mut BlockIq1M,
) -> Result<(), ()> {
    const MASKS: [u8; 4] = [0x00, 0x80, 0x08, 0x88];
    y.qs = [0; 32];
    y.qh = [0; 16];
    y.scales = [0; 8];
    let (mut scales, mut shifts) = ([0f32; 16], [0usize; 16]);
    let mut max_scale = 0f32;
    let sigma2 = 2.0 * sum_sq(xbl) / 256.0;
    let mut weight = [0f32; 16];
    for ib in 0..16 {
        let xb = &xbl[16 * ib..16 * ib + 16];
        iq1m_weights(
            xb,
            qwb.map(|w| &w[16 * ib..16 * ib + 16]),
            sigma2,
            &mut weight,
        );
        if let Some((scale, k)) =
            iq1m_sub_block(t, xb, &weight, &mut y.qs[2 * ib..2 * ib + 2], &mut y.qh[ib])?
        {
            scales[ib] = scale;
            shifts[ib] = k;
            max_scale = c_max(max_scale, scale);
        }
    }
    if max_scale == 0.0 {
        return Ok(());
    }
    let mut sc = [0u16; 4];
    let mut d = max_scale / 15.0;
    let id = 1.0 / d;
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for ib in 0..16 {
        let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 7);
        sc[ib / 4] |= (l << (3 * (ib % 4))) as u16;
        y.qh[ib] |= MASKS[shifts[ib]];
        let xb = &xbl[16 * ib..16 * ib + 16];
        iq1m_weights(
            xb,
            qwb.map(|w| &w[16 * ib..16 * ib + 16]),
            sigma2,
            &mut weight,
        );
        for k in 0..2 {
            let xx = iq1m_xx(shifts[ib], k);
            let gi =
                usize::from(y.qs[2 * ib + k]) + ((usize::from(y.qh[ib]) << (8 - 4 * k)) & 0x700);
            let pg = &t.points[gi];
            for j in 0..8 {
                let w = weight[8 * k + j];
                let q = xx[((pg[j] - 1) / 2) as usize] * (2 * l + 1) as f32;
                sumqx += w * q * xb[8 * k + j];
                sumq2 += w * q * q;
            }
        }
    }
    if sumq2 > 0.0 {
        d = sumqx / sumq2;
    }
    let s = crate::util::f16_bits_ggml(d * 1.1125);
    sc[0] |= (s & 0x000f) << 12;
    sc[1] |= (s & 0x00f0) << 8;
    sc[2] |= (s & 0x0f00) << 4;
    sc[3] |= s & 0xf000;
    for (o, v) in y.scales.chunks_exact_mut(2).zip(sc) {
        o.copy_from_slice(&v.to_le_bytes());
    }
    Ok(())
}

row_kernel!(
    /// Row kernel of IQ1_M (`quantize_iq1_m`; weights optional).
    quantize_iq1_m, Grid::Iq1S, iq1_m_block
);
