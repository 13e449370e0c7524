//! IQ3_XXS and IQ3_S quantizers: ggml's `quantize_iq3_xxs` / `quantize_iq3_s` (the D4-lattice
//! grid search), with or without an importance matrix.
//!
//! Per 32 values: the signs are split off (IQ3_XXS keeps an even number of them per 8 by
//! flipping the least important value), then 31 (IQ3_XXS) or 19 (IQ3_S) trial scales map each
//! 4-tuple of magnitudes to levels; a tuple off the grid takes its best neighbour (see
//! `iq3_init.rs`); the trial with the best weighted fit wins. The sub-block scales are then
//! stored as 4-bit multiples of the super-block's f16 scale.
//!
//! ggml aborts (`GGML_ASSERT`) where no neighbour has a finite weighted distance or the final
//! scale is NaN, which non-finite or huge (|x|² overflowing) inputs cause. These kernels
//! return `Err(index of that super-block in the row)` there instead.

#![allow(clippy::needless_range_loop)] // index loops mirror the C reference, for auditability

use crate::blocks::*;
use crate::iq3_init::{self, Iq3Grid, Lookup};
use crate::util::{c_max, nearest_int, put_f16};

/// The two variants' differences.
struct Variant {
    grid: &'static Iq3Grid,
    /// Trial scales `is ∈ -steps..=steps`.
    steps: i32,
    /// IQ3_XXS: an even number of sign flips per 8, 1e-8 "all zero" bound, only off-grid
    /// groups redone at the final scale. IQ3_S: free signs, exact-zero bound, all redone.
    xxs: bool,
}

/// The result of one 32-value sub-block.
struct SubBlock {
    scale: f32,
    /// Grid index per 4 values.
    index: [u16; 8],
    /// Sign bits per 8 values (7 bits for IQ3_XXS).
    signs: [u8; 4],
}

/// `iq3_find_best_neighbour`: the neighbour with the smallest weighted squared distance to
/// `xval` at `scale` (first one on ties), or `None` where ggml asserts (no distance < FLT_MAX).
#[inline(always)]
fn best_neighbour(g: &Iq3Grid, nb: &[u16], xval: &[f32], w: &[f32], scale: f32) -> Option<u16> {
    let mut best_d2 = f32::MAX;
    let mut best = None;
    for &j in nb {
        let q = &g.values[j as usize];
        let mut d2 = 0f32;
        for i in 0..4 {
            let diff = scale * q[i] - xval[i];
            d2 += w[i] * diff * diff;
        }
        if d2 < best_d2 {
            best_d2 = d2;
            best = Some(j);
        }
    }
    best
}

/// Levels of 4 values at inverse scale `id`, clamped to 0..8, and their key.
#[inline(always)]
fn round_levels(xval: &[f32], id: f32) -> ([i8; 4], usize) {
    let mut l = [0i8; 4];
    for i in 0..4 {
        l[i] = nearest_int(0.5 * (id * xval[i] - 1.0)).clamp(0, 7) as i8;
    }
    (l, iq3_init::key_of(&l))
}

/// Maps 4 values to grid levels at inverse scale `id` (neighbour search at `scale` when off
/// the grid): `(levels, grid index, on grid)`.
#[inline(always)]
fn group_levels(
    g: &Iq3Grid,
    xval: &[f32],
    waux: &[f32],
    id: f32,
    scale: f32,
) -> Option<([i8; 4], u16, bool)> {
    let (l, key) = round_levels(xval, id);
    match g.lookup(key) {
        Lookup::OnGrid(i) => Some((l, i, true)),
        Lookup::Off(nb) => {
            let j = best_neighbour(g, nb, xval, waux, scale)?;
            Some((g.levels[j as usize], j, false))
        }
    }
}

/// `Σ w·x·q` and `Σ w·q·q` with `q = 2l + 1`, in element order.
#[inline(always)]
fn fit(weight: &[f32; 32], xval: &[f32; 32], l: &[i8; 32]) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for i in 0..32 {
        let w = weight[i];
        let q = (2 * l[i] as i32 + 1) as f32;
        sumqx += w * xval[i] * q;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// The magnitudes and sign bits of 32 values (IQ3_XXS: even flips per 8, by flipping back
/// the value with the smallest `w·x²`).
#[inline(always)]
fn split_signs(v: &Variant, xb: &[f32], weight: &[f32; 32]) -> ([f32; 32], [u8; 4]) {
    let mut xval = [0f32; 32];
    let mut signs = [0u8; 4];
    for k in 0..4 {
        let mut s = 0u8;
        for i in 0..8 {
            let x = xb[8 * k + i];
            if x >= 0.0 {
                xval[8 * k + i] = x;
            } else {
                xval[8 * k + i] = -x;
                s |= 1 << i;
            }
        }
        if v.xxs && s.count_ones() % 2 == 1 {
            let mut imin = 0;
            let mut min = weight[8 * k] * xb[8 * k] * xb[8 * k];
            for i in 1..8 {
                let ax = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                if ax < min {
                    min = ax;
                    imin = i;
                }
            }
            xval[8 * k + imin] = -xval[8 * k + imin];
            s ^= 1 << imin;
        }
        signs[k] = if v.xxs { s & 127 } else { s };
    }
    (xval, signs)
}

/// ggml aborts on this input.
struct Abort;

/// Trial scales: at most 31 (IQ3_XXS), lanes padded to 32.
const TRIALS: usize = 32;

/// Every trial scale's levels, which groups were on the grid, and the values `2l + 1`
/// transposed (`q[i][t]`) for [`trial_fits`].
struct Trials {
    levels: [[i8; 32]; TRIALS],
    on_grid: [[bool; 8]; TRIALS],
    q: [[f32; TRIALS]; 32],
}

/// Maps the sub-block to the grid at each trial scale `is ∈ -steps..=steps` (inverse scale
/// `(15 + 0.2·is)/max`; off-grid groups take their best neighbour at its reciprocal).
#[inline(always)]
fn trials(v: &Variant, xval: &[f32; 32], waux: &[f32; 32], max: f32) -> Result<Trials, Abort> {
    let mut tr = Trials {
        levels: [[0; 32]; TRIALS],
        on_grid: [[true; 8]; TRIALS],
        q: [[1.0; TRIALS]; 32],
    };
    let n = (2 * v.steps + 1) as usize;
    let ids: [f32; TRIALS] =
        std::array::from_fn(|t| (15.0 + (t as i32 - v.steps) as f32 * 0.2) / max);
    // the rounding of every trial at once (vectorizes), then the grid lookups
    for t in 0..n {
        for i in 0..32 {
            tr.levels[t][i] = nearest_int(0.5 * (ids[t] * xval[i] - 1.0)).clamp(0, 7) as i8;
        }
    }
    let mut keys = [[0u16; 8]; TRIALS];
    for t in 0..n {
        for k in 0..8 {
            let l = &tr.levels[t][4 * k..4 * k + 4];
            keys[t][k] =
                (l[0] as u16) | (l[1] as u16) << 3 | (l[2] as u16) << 6 | (l[3] as u16) << 9;
        }
    }
    for t in 0..n {
        let this_scale = 1.0 / ids[t];
        let laux = &mut tr.levels[t];
        for k in 0..8 {
            if let Lookup::Off(nb) = v.grid.lookup(keys[t][k] as usize) {
                let j = best_neighbour(v.grid, nb, &xval[4 * k..], &waux[4 * k..], this_scale)
                    .ok_or(Abort)?;
                laux[4 * k..4 * k + 4].copy_from_slice(&v.grid.levels[j as usize]);
                tr.on_grid[t][k] = false;
            }
        }
        for i in 0..32 {
            tr.q[i][t] = (2 * laux[i] as i32 + 1) as f32;
        }
    }
    Ok(tr)
}

/// [`fit`] of every trial: each trial's sums run in element order as in ggml; the trials only
/// run side by side (independent chains, one SIMD lane each).
#[inline(always)]
fn trial_fits(
    weight: &[f32; 32],
    xval: &[f32; 32],
    q: &[[f32; TRIALS]; 32],
) -> ([f32; TRIALS], [f32; TRIALS]) {
    let (mut sumqx, mut sumq2) = ([0f32; TRIALS], [0f32; TRIALS]);
    for i in 0..32 {
        let (w, wx) = (weight[i], weight[i] * xval[i]);
        for t in 0..TRIALS {
            sumqx[t] += wx * q[i][t];
            sumq2[t] += w * q[i][t] * q[i][t];
        }
    }
    (sumqx, sumq2)
}

/// One 32-value sub-block with its weights: `Ok(None)` for an all-(near-)zero one (ggml
/// skips it), `Err` where ggml aborts.
#[inline(always)]
fn sub_block(v: &Variant, xb: &[f32], weight: &[f32; 32]) -> Result<Option<SubBlock>, Abort> {
    let g = v.grid;
    let mut waux = [0f32; 32];
    for i in 0..32 {
        waux[i] = weight[i].sqrt();
    }
    let (xval, mut signs) = split_signs(v, xb, weight);
    let mut max = xval[0];
    for &x in &xval[1..] {
        max = c_max(max, x);
    }
    if (v.xxs && max < 1e-8) || (!v.xxs && max == 0.0) {
        return Ok(None);
    }
    let (mut scale, mut best) = (max / 15.0, 0f32);
    let mut l = [0i8; 32];
    let mut on_grid = [v.xxs; 8];
    let tr = trials(v, &xval, &waux, max)?;
    let (sumqx, sumq2) = trial_fits(weight, &xval, &tr.q);
    for t in 0..(2 * v.steps + 1) as usize {
        if sumq2[t] > 0.0 && sumqx[t] * sumqx[t] > best * sumq2[t] {
            scale = sumqx[t] / sumq2[t];
            best = scale * sumqx[t];
            l = tr.levels[t];
            on_grid = tr.on_grid[t];
        }
    }
    if on_grid.contains(&false) && scale > 0.0 {
        let id = 1.0 / scale;
        for k in 0..8 {
            if v.xxs && on_grid[k] {
                continue;
            }
            let (lv, _, _) =
                group_levels(g, &xval[4 * k..], &waux[4 * k..], id, scale).ok_or(Abort)?;
            l[4 * k..4 * k + 4].copy_from_slice(&lv);
        }
        let (sumqx, sumq2) = fit(weight, &xval, &l);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    if scale < 0.0 {
        scale = -scale;
        let mask = if v.xxs { 127 } else { 255 };
        signs = signs.map(|s| !s & mask);
    }
    let mut index = [0u16; 8];
    for k in 0..8 {
        let lk: [i8; 4] = l[4 * k..4 * k + 4].try_into().unwrap();
        index[k] = g.index_of(iq3_init::key_of(&lk)).ok_or(Abort)?;
    }
    // ggml's `GGML_ASSERT(scale >= 0)`: after the flip above only NaN fails it
    if scale.is_nan() {
        return Err(Abort);
    }
    Ok(Some(SubBlock {
        scale,
        index,
        signs,
    }))
}

/// The weights of sub-block `ib`: `qw·sqrt(sigma2 + x²)` with an importance matrix, else `x²`.
#[inline(always)]
fn weights(x: &[f32], qw: Option<&[f32]>, sigma2: f32, ib: usize) -> [f32; 32] {
    let xb = &x[32 * ib..32 * ib + 32];
    let mut w = [0f32; 32];
    match qw {
        Some(qw) => {
            let qw = &qw[32 * ib..32 * ib + 32];
            for i in 0..32 {
                w[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
            }
        }
        None => {
            for i in 0..32 {
                w[i] = xb[i] * xb[i];
            }
        }
    }
    w
}

/// `sigma2 = 2·Σx²/256` of a super-block, summed in order.
#[inline(always)]
fn sigma2(x: &[f32]) -> f32 {
    let mut s = 0f32;
    for &v in x {
        s += v * v;
    }
    2.0 * s / 256.0
}

/// The 4-bit sub-scale `l` of `scale` for super-block inverse scale `id`.
#[inline(always)]
fn sub_scale(id: f32, scale: f32) -> u32 {
    nearest_int(0.5 * (id * scale - 1.0)).clamp(0, 15) as u32
}

#[inline(always)]
fn iq3_xxs_block(x: &[f32], qw: Option<&[f32]>, b: &mut BlockIq3Xxs) -> Result<(), Abort> {
    let v = Variant {
        grid: iq3_init::iq3xxs(),
        steps: 15,
        xxs: true,
    };
    b.d = put_f16(0.0);
    let s2 = sigma2(x);
    let mut q3 = [0u8; 96];
    let mut sas = [0u32; 8];
    let mut scales = [0f32; 8];
    let mut max_scale = 0f32;
    for ib in 0..8 {
        let w = weights(x, qw, s2, ib);
        let Some(sb) = sub_block(&v, &x[32 * ib..32 * ib + 32], &w)? else {
            continue;
        };
        for k in 0..8 {
            q3[8 * ib + k] = sb.index[k] as u8;
        }
        let s = sb.signs.map(u32::from);
        sas[ib] = s[0] | s[1] << 7 | s[2] << 14 | s[3] << 21;
        scales[ib] = sb.scale;
        max_scale = c_max(max_scale, sb.scale);
    }
    if max_scale == 0.0 {
        b.qs = [0; 96];
        return Ok(());
    }
    let d = max_scale / 31.0;
    b.d = put_f16(d * 1.0125);
    let id = 1.0 / d;
    for ib in 0..8 {
        sas[ib] |= sub_scale(id, scales[ib]) << 28;
        q3[64 + 4 * ib..68 + 4 * ib].copy_from_slice(&sas[ib].to_le_bytes());
    }
    b.qs = q3;
    Ok(())
}

#[inline(always)]
fn iq3_s_block(x: &[f32], qw: Option<&[f32]>, b: &mut BlockIq3S) -> Result<(), Abort> {
    let v = Variant {
        grid: iq3_init::iq3s(),
        steps: 9,
        xxs: false,
    };
    *b = BlockIq3S {
        d: put_f16(0.0),
        qs: [0; 64],
        qh: [0; 8],
        signs: [0; 32],
        scales: [0; 4],
    };
    let s2 = sigma2(x);
    let mut scales = [0f32; 8];
    let mut max_scale = 0f32;
    // ggml advances its qs/signs cursors only past non-zero sub-blocks (qh is indexed by ib)
    let mut slot = 0;
    for ib in 0..8 {
        let w = weights(x, qw, s2, ib);
        let Some(sb) = sub_block(&v, &x[32 * ib..32 * ib + 32], &w)? else {
            continue;
        };
        for k in 0..8 {
            b.qs[8 * slot + k] = sb.index[k] as u8;
            b.qh[ib] |= ((sb.index[k] >> 8) as u8) << k;
        }
        b.signs[4 * slot..4 * slot + 4].copy_from_slice(&sb.signs);
        slot += 1;
        scales[ib] = sb.scale;
        max_scale = c_max(max_scale, sb.scale);
    }
    if max_scale == 0.0 {
        return Ok(());
    }
    let d = max_scale / 31.0;
    b.d = put_f16(d * 1.033);
    let id = 1.0 / d;
    for ib in (0..8).step_by(2) {
        b.scales[ib / 2] = (sub_scale(id, scales[ib]) | sub_scale(id, scales[ib + 1]) << 4) as u8;
    }
    Ok(())
}

/// Defines the row kernel `$name` over the super-blocks of one row, built for the baseline CPU
/// and with AVX2 ([`multiversion!`]). The hot path is `#[inline(always)]` down to the
/// neighbour search so that it is compiled inside the AVX2 build.
macro_rules! row_kernel {
    ($(#[$doc:meta])* $name:ident, $blk:ty, $block_fn:ident) => {
        multiversion! {
            $(#[$doc])*
            pub(crate) fn $name(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) -> Result<(), usize> {
                // The loop in a function of its own: its closures, written in the AVX2 build,
                // would take its target feature, and `Option::map` could no longer inline them.
                #[inline(always)]
                fn rows(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) -> Result<(), usize> {
                    let y = as_blocks_mut::<$blk>(y);
                    for (i, (xb, b)) in x.chunks_exact(256).zip(y).enumerate() {
                        let w = qw.map(|w| &w[256 * i..256 * i + 256]);
                        $block_fn(xb, w, b).map_err(|Abort| i)?;
                    }
                    Ok(())
                }
                rows(x, y, qw)
            }
        }
    };
}

row_kernel!(
    /// IQ3_XXS row kernel (`quantize_iq3_xxs` on one row, optional importance weights):
    /// `Err(block)` names the super-block (within the row) where ggml aborts.
    quantize_row_iq3_xxs, BlockIq3Xxs, iq3_xxs_block
);

row_kernel!(
    /// IQ3_S row kernel (`quantize_iq3_s` on one row, optional importance weights):
    /// `Err(block)` names the super-block (within the row) where ggml aborts.
    quantize_row_iq3_s, BlockIq3S, iq3_s_block
);
