//! ggml's 2-bit grid quantizers with an importance matrix: `quantize_iq2_xxs`,
//! `quantize_iq2_xs` and `quantize_iq2_s` (`quantize_row_iq2_*_impl` in ggml-quants.c).
//!
//! Each group of 8 values is folded to magnitudes (the signs are stored apart), quantized to
//! levels `l ∈ {0, 1, 2}` meaning `2l + 1`, and snapped to the type's grid: a level pattern on
//! the grid is kept, one off it is replaced by its nearest neighbour in the weighted sense.
//! A sub-block scale is searched over 13 (IQ2_XXS) or 19 trial scales; the sub-block scales
//! are then stored as 4-bit multiples of the block's f16 scale.
//!
//! All arithmetic is f32 in the C code's order (see the crate docs). Where ggml aborts (a
//! neighbour search that finds nothing because every distance is NaN or infinite, a NaN
//! scale), the kernel stops and records the super-block for [`crate::quantize_rows`] to
//! report as an error instead.

#![allow(clippy::needless_range_loop)] // index loops mirror the C reference, for auditability

use crate::blocks::{as_blocks_mut, BlockIq2S, BlockIq2Xs, BlockIq2Xxs};
use crate::iq_init::{key_of, nearest, tables, Grid, GridTables, Lookup};
use crate::search::GROUP_MAX_EPS;
use crate::util::{c_max, nearest_int, put_f16, sum_sq};

const GROUP_MAX_EPS_IQ2_S: f32 = 1e-8;
/// Levels 0..kMaxQ−1 stand for the odd values 1, 3, 5.
const K_MAX_Q: i32 = 3;

/// Magnitudes of 8 values and their sign bits. With `even_parity` (IQ2_XXS, IQ2_XS, which
/// store 7 sign bits) an odd number of negatives is made even by keeping the sign of the
/// value with the smallest `w·x²` as is, i.e. folding it to `-|x|`.
/// A sub-block's values folded 8 at a time ([`fold_signs`]) into magnitudes `xval` and sign
/// bits `signs` (7 bits each with `even_parity`), and the largest magnitude (ggml's running
/// max, in index order).
#[inline(always)]
fn fold_sub_block(
    xb: &[f32],
    weight: &[f32],
    xval: &mut [f32],
    signs: &mut [u8],
    even_parity: bool,
) -> f32 {
    for (k, s) in signs.iter_mut().enumerate() {
        let g = 8 * k..8 * k + 8;
        let bits = fold_signs(
            &xb[g.clone()],
            &weight[g.clone()],
            &mut xval[g],
            even_parity,
        );
        *s = if even_parity { bits & 127 } else { bits };
    }
    let n = xb.len();
    xval[1..n].iter().fold(xval[0], |m, &v| c_max(m, v))
}

#[inline(always)]
fn fold_signs(xb: &[f32], w: &[f32], xval: &mut [f32], even_parity: bool) -> u8 {
    let mut s = 0u8;
    let mut nflip = 0;
    for i in 0..8 {
        if xb[i] >= 0.0 {
            xval[i] = xb[i];
        } else {
            xval[i] = -xb[i];
            nflip += 1;
            s |= 1 << i;
        }
    }
    if even_parity && nflip % 2 == 1 {
        let mut imin = 0;
        let mut min = w[0] * xb[0] * xb[0];
        for i in 1..8 {
            let ax = w[i] * xb[i] * xb[i];
            if ax < min {
                min = ax;
                imin = i;
            }
        }
        xval[imin] = -xval[imin];
        s ^= 1 << imin;
    }
    s
}

/// Levels of 8 magnitudes at inverse scale `id`.
#[inline(always)]
fn levels(xval: &[f32], id: f32) -> [i8; 8] {
    std::array::from_fn(|i| nearest_int(0.5 * (id * xval[i] - 1.0)).clamp(0, K_MAX_Q - 1) as i8)
}

/// Levels of 8 magnitudes at inverse scale `id` snapped to the grid (off-grid patterns are
/// replaced by the best neighbour at `scale`), and whether the pattern was on the grid.
#[inline(always)]
fn snap(
    t: &GridTables,
    xval: &[f32],
    waux: &[f32],
    id: f32,
    scale: f32,
) -> Result<([i8; 8], bool), ()> {
    let l = levels(xval, id);
    match t.lookup(key_of(l) as u16) {
        Lookup::OnGrid => Ok((l, true)),
        Lookup::Near(near) => {
            // iq2_find_best_neighbour: q = p
            let j = nearest(&near, xval, waux, scale, |p| p).ok_or(())?;
            Ok((t.points[j].map(|p| (p - 1) / 2), false))
        }
    }
}

/// `(Σ w·x·q, Σ w·q²)` with `q = 2l + 1`.
#[inline(always)]
fn sums(weight: &[f32], xval: &[f32], l: &[i8]) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for i in 0..l.len() {
        let w = weight[i];
        let q = f32::from(2 * l[i] + 1);
        sumqx += w * xval[i] * q;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// The grid index of the levels of group `k`, which must be on the grid (ggml aborts if not).
#[inline(always)]
fn grid_index(t: &GridTables, l: &[i8]) -> Result<usize, ()> {
    let u = (0..8).fold(0i32, |u, i| u | (i32::from(l[i]) << (2 * i))) as u16;
    if usize::from(u) >= t.map_len() {
        return Err(());
    }
    t.index_of(u).ok_or(())
}

/// `make_qp_quants(n, nmax, x, L, w)` (the k-quants' weighted search, C's `uint8_t` levels
/// wrapping negatives), giving the levels as the caller's `int8_t` view of them.
#[inline(always)]
fn make_qp_quants(nmax: i32, x: &[f32], qw: &[f32], out: &mut [i8]) -> f32 {
    let n = x.len();
    let mut l = [0u8; 32];
    let scale = crate::search::make_qp_quants(nmax, x, &mut l[..n], qw);
    for (o, &v) in out[..n].iter_mut().zip(&l[..n]) {
        *o = v as i8;
    }
    scale
}

/// Weights of a sub-block: `qw·√(σ² + x²)`.
#[inline(always)]
fn imatrix_weights(xb: &[f32], qw: &[f32], sigma2: f32, weight: &mut [f32], waux: &mut [f32]) {
    for i in 0..xb.len() {
        weight[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
    }
    for i in 0..xb.len() {
        waux[i] = weight[i].sqrt();
    }
}

/// One 32-value sub-block of IQ2_XXS: its scale (`None` if it has none), levels in `l`.
#[inline(always)]
fn xxs_sub_block(
    t: &GridTables,
    xval: &[f32; 32],
    weight: &[f32; 32],
    waux: &[f32; 32],
    l: &mut [i8; 32],
) -> Result<Option<f32>, ()> {
    let mut scale = make_qp_quants(K_MAX_Q + 1, xval, weight, l);
    let eff_max = scale * K_MAX_Q as f32;
    if eff_max <= 0.0 {
        return Ok(None);
    }
    let mut best = 0f32;
    let mut laux = [0i8; 32];
    for is in -6..=6 {
        let id = (2.0 * K_MAX_Q as f32 - 1.0 + is as f32 * 0.1) / eff_max;
        let this_scale = 1.0 / id;
        for k in 0..4 {
            let g = 8 * k..8 * k + 8;
            laux[g.clone()]
                .copy_from_slice(&snap(t, &xval[g.clone()], &waux[g], id, this_scale)?.0);
        }
        let (sumqx, sumq2) = sums(weight, xval, &laux);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            *l = laux;
        }
    }
    if scale > 0.0 {
        let id = 1.0 / scale;
        for k in 0..4 {
            let g = 8 * k..8 * k + 8;
            l[g.clone()].copy_from_slice(&snap(t, &xval[g.clone()], &waux[g], id, scale)?.0);
        }
        let (sumqx, sumq2) = sums(weight, xval, l);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    Ok(Some(scale))
}

#[inline(always)]
fn iq2_xxs_block(t: &GridTables, xbl: &[f32], qwb: &[f32], y: &mut BlockIq2Xxs) -> Result<(), ()> {
    y.d = put_f16(0.0);
    let mut q2 = [0u32; 16];
    let mut scales = [0f32; 8];
    let mut max_scale = 0f32;
    let sigma2 = sum_sq(xbl) / 256.0;
    let (mut weight, mut waux, mut xval) = ([0f32; 32], [0f32; 32], [0f32; 32]);
    for ib in 0..8 {
        let xb = &xbl[32 * ib..32 * ib + 32];
        imatrix_weights(
            xb,
            &qwb[32 * ib..32 * ib + 32],
            sigma2,
            &mut weight,
            &mut waux,
        );
        let mut signs = [0u8; 4];
        let max = fold_sub_block(xb, &weight, &mut xval, &mut signs, true);
        if max < GROUP_MAX_EPS {
            continue;
        }
        let mut l = [0i8; 32];
        let Some(mut scale) = xxs_sub_block(t, &xval, &weight, &waux, &mut l)? else {
            continue; // no usable scale: ggml leaves the sub-block's indices and signs at 0
        };
        if scale < 0.0 {
            scale = -scale;
            signs.iter_mut().for_each(|s| *s = !*s & 127);
        }
        for k in 0..4 {
            let gi = grid_index(t, &l[8 * k..8 * k + 8])?;
            q2[2 * ib] |= (gi as u32) << (8 * k);
            q2[2 * ib + 1] |= u32::from(signs[k]) << (7 * k);
        }
        if scale.is_nan() {
            return Err(()); // ggml: GGML_ASSERT(scale >= 0)
        }
        scales[ib] = scale;
        max_scale = c_max(max_scale, scale);
    }
    if max_scale == 0.0 {
        y.qs = [0; 64];
        return Ok(());
    }
    let d = max_scale / 31.0;
    y.d = put_f16(d);
    let id = 1.0 / d;
    for ib in 0..8 {
        let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 15);
        q2[2 * ib + 1] |= (l as u32) << 28;
    }
    for (o, v) in y.qs.chunks_exact_mut(4).zip(q2) {
        o.copy_from_slice(&v.to_le_bytes());
    }
    Ok(())
}

/// The scale search of IQ2_XS and IQ2_S over one 16-value sub-block with maximum magnitude
/// `max`: returns the scale, levels in `l`.
#[inline(always)]
fn search16(
    t: &GridTables,
    xval: &[f32; 16],
    weight: &[f32; 16],
    waux: &[f32; 16],
    max: f32,
    l: &mut [i8; 16],
) -> Result<f32, ()> {
    let mut best = 0f32;
    let mut scale = max / (2.0 * K_MAX_Q as f32 - 1.0);
    let mut on_grid = [true; 2];
    let mut laux = [0i8; 16];
    let mut on_grid_aux = [true; 2];
    for is in -9..=9 {
        let id = (2.0 * K_MAX_Q as f32 - 1.0 + is as f32 * 0.1) / max;
        let this_scale = 1.0 / id;
        for k in 0..2 {
            let g = 8 * k..8 * k + 8;
            let (lk, on) = snap(t, &xval[g.clone()], &waux[g.clone()], id, this_scale)?;
            laux[g].copy_from_slice(&lk);
            on_grid_aux[k] = on;
        }
        let (sumqx, sumq2) = sums(weight, xval, &laux);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            *l = laux;
            on_grid = on_grid_aux;
        }
    }
    if on_grid.contains(&false) && scale > 0.0 {
        let id = 1.0 / scale;
        for k in 0..2 {
            if on_grid[k] {
                continue;
            }
            let g = 8 * k..8 * k + 8;
            l[g.clone()].copy_from_slice(&snap(t, &xval[g.clone()], &waux[g], id, scale)?.0);
        }
        let (sumqx, sumq2) = sums(weight, xval, l);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    Ok(scale)
}

#[inline(always)]
fn iq2_xs_block(
    t: &GridTables,
    xbl: &[f32],
    qwb: Option<&[f32]>,
    y: &mut BlockIq2Xs,
) -> Result<(), ()> {
    let qwb = qwb.ok_or(())?;
    y.d = put_f16(0.0);
    y.scales = [0; 8];
    let mut q2 = [0u16; 32];
    let mut scales = [0f32; 16];
    let mut max_scale = 0f32;
    let sigma2 = sum_sq(xbl) / 256.0;
    let (mut weight, mut waux, mut xval) = ([0f32; 16], [0f32; 16], [0f32; 16]);
    for ib in 0..16 {
        let xb = &xbl[16 * ib..16 * ib + 16];
        imatrix_weights(
            xb,
            &qwb[16 * ib..16 * ib + 16],
            sigma2,
            &mut weight,
            &mut waux,
        );
        let mut signs = [0u8; 2];
        let max = fold_sub_block(xb, &weight, &mut xval, &mut signs, true);
        if max < GROUP_MAX_EPS {
            continue;
        }
        let mut l = [0i8; 16];
        let mut scale = search16(t, &xval, &weight, &waux, max, &mut l)?;
        if scale < 0.0 {
            scale = -scale;
            signs.iter_mut().for_each(|s| *s = !*s & 127);
        }
        for k in 0..2 {
            let gi = grid_index(t, &l[8 * k..8 * k + 8])?;
            q2[2 * ib + k] = gi as u16 | (u16::from(signs[k]) << 9);
        }
        if scale.is_nan() {
            return Err(()); // ggml: GGML_ASSERT(scale >= 0)
        }
        scales[ib] = scale;
        max_scale = c_max(max_scale, scale);
    }
    if max_scale == 0.0 {
        y.qs = [0; 64];
        return Ok(());
    }
    let d = max_scale / 31.0;
    y.d = put_f16(d);
    let id = 1.0 / d;
    for ib in 0..16 {
        let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 15) as u8;
        y.scales[ib / 2] |= l << (4 * (ib % 2));
    }
    for (o, v) in y.qs.chunks_exact_mut(2).zip(q2) {
        o.copy_from_slice(&v.to_le_bytes());
    }
    Ok(())
}

#[inline(always)]
fn iq2_s_block(
    t: &GridTables,
    xbl: &[f32],
    qwb: Option<&[f32]>,
    y: &mut BlockIq2S,
) -> Result<(), ()> {
    y.qs = [0; 64];
    y.qh = [0; 8];
    y.scales = [0; 8];
    y.d = put_f16(0.0);
    let mut scales = [0f32; 16];
    let mut max_scale = 0f32;
    let sigma2 = 2.0 * sum_sq(xbl) / 256.0;
    let (mut weight, mut waux, mut xval) = ([0f32; 16], [0f32; 16], [0f32; 16]);
    for ib in 0..16 {
        let xb = &xbl[16 * ib..16 * ib + 16];
        match qwb {
            Some(qw) => imatrix_weights(
                xb,
                &qw[16 * ib..16 * ib + 16],
                sigma2,
                &mut weight,
                &mut waux,
            ),
            None => {
                for i in 0..16 {
                    weight[i] = 0.25 * sigma2 + xb[i] * xb[i];
                }
                for i in 0..16 {
                    waux[i] = weight[i].sqrt();
                }
            }
        }
        let mut signs = [0u8; 2];
        let max = fold_sub_block(xb, &weight, &mut xval, &mut signs, false);
        if max < GROUP_MAX_EPS_IQ2_S {
            continue;
        }
        let mut l = [0i8; 16];
        let mut scale = search16(t, &xval, &weight, &waux, max, &mut l)?;
        if scale < 0.0 {
            scale = -scale;
            signs.iter_mut().for_each(|s| *s = !*s);
        }
        for k in 0..2 {
            let gi = grid_index(t, &l[8 * k..8 * k + 8])?;
            let i8 = 2 * ib + k;
            y.qs[i8] = gi as u8;
            y.qh[i8 / 4] |= ((gi >> 8) << (2 * (i8 % 4))) as u8;
            y.qs[32 + i8] = signs[k];
        }
        if scale.is_nan() {
            return Err(()); // ggml: GGML_ASSERT(scale >= 0)
        }
        scales[ib] = scale;
        max_scale = c_max(max_scale, scale);
    }
    if max_scale == 0.0 {
        return Ok(());
    }
    let d = max_scale / 31.0;
    y.d = put_f16(d * 0.9875);
    let id = 1.0 / d;
    for ib in 0..16 {
        let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 15) as u8;
        y.scales[ib / 2] |= l << (4 * (ib % 2));
    }
    Ok(())
}

/// Runs `block` over the super-blocks of one row; stops at the first block ggml aborts on and
/// returns its index.
#[inline(always)]
pub(crate) fn quantize_row<B, F>(
    grid: Grid,
    x: &[f32],
    y: &mut [u8],
    w: Option<&[f32]>,
    block: F,
) -> Result<(), usize>
where
    B: crate::blocks::Block,
    F: Fn(&GridTables, &[f32], Option<&[f32]>, &mut B) -> Result<(), ()>,
{
    run_blocks(tables(grid), x, as_blocks_mut::<B>(y), w, block)
}

/// Defines a row kernel `$name` running [`quantize_row`] over `$grid` with `$block`, built
/// for the baseline CPU and with AVX2 ([`multiversion!`]; AVX2 only widens the neighbour
/// search's lanes).
macro_rules! row_kernel {
    ($(#[$doc:meta])* $name:ident, $grid:expr, $block:path) => {
        multiversion! {
            $(#[$doc])*
            pub(crate) fn $name(x: &[f32], y: &mut [u8], w: Option<&[f32]>) -> Result<(), usize> {
                $crate::iq2_quant::quantize_row($grid, x, y, w, |t, x, w, b| $block(t, x, w, b))
            }
        }
    };
}
pub(crate) use row_kernel;

#[inline(always)]
fn run_blocks<B, F>(
    t: &GridTables,
    x: &[f32],
    y: &mut [B],
    w: Option<&[f32]>,
    block: F,
) -> Result<(), usize>
where
    F: Fn(&GridTables, &[f32], Option<&[f32]>, &mut B) -> Result<(), ()>,
{
    for (i, (xb, b)) in x.chunks_exact(256).zip(y).enumerate() {
        let wb = w.map(|w| &w[256 * i..256 * i + 256]);
        block(t, xb, wb, b).map_err(|()| i)?;
    }
    Ok(())
}

#[inline(always)]
fn iq2_xxs_block_opt(
    t: &GridTables,
    xbl: &[f32],
    qwb: Option<&[f32]>,
    y: &mut BlockIq2Xxs,
) -> Result<(), ()> {
    iq2_xxs_block(t, xbl, qwb.ok_or(())?, y)
}

row_kernel!(
    /// Row kernel of IQ2_XXS (`quantize_iq2_xxs`; weights required).
    quantize_iq2_xxs, Grid::Iq2Xxs, iq2_xxs_block_opt
);
row_kernel!(
    /// Row kernel of IQ2_XS (`quantize_iq2_xs`; weights required).
    quantize_iq2_xs, Grid::Iq2Xs, iq2_xs_block
);
row_kernel!(
    /// Row kernel of IQ2_S (`quantize_iq2_s`; weights optional).
    quantize_iq2_s, Grid::Iq2S, iq2_s_block
);
