//! Dequantizers of the importance-matrix ("IQ") types: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
//! IQ3_S, IQ1_S, IQ1_M, IQ4_NL, IQ4_XS, and the IQ4_NL/IQ4_XS quantizers (with and without an
//! importance matrix). Their grids are ggml's tables (see `grids.rs`). The grid quantizers
//! are in `iq2_quant.rs`, `iq1_quant.rs` (2- and 1-bit) and `iq3_quant.rs` (3-bit).

#![allow(clippy::needless_range_loop)] // index loops mirror the C reference, for auditability

use crate::blocks::*;
use crate::grids::*;
use crate::util::get_f16;

const IQ1S_DELTA: f32 = 0.125;

#[inline(always)]
fn byte_of(v: u64, j: usize) -> u8 {
    (v >> (8 * j)) as u8
}

#[inline(always)]
fn sign(signs: u8, j: usize) -> f32 {
    if signs & (1 << j) != 0 {
        -1.0
    } else {
        1.0
    }
}

#[inline(always)]
fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[2 * i], b[2 * i + 1]])
}

#[inline(always)]
fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

pub(crate) fn dequantize_iq2_xxs(x: &[BlockIq2Xxs], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let d = get_f16(b.d);
        for ib in 0..8 {
            let a0 = u32_at(&b.qs, 8 * ib);
            let a1 = u32_at(&b.qs, 8 * ib + 4);
            let db = d * (0.5 + (a1 >> 28) as f32) * 0.25;
            for l in 0..4 {
                let grid = IQ2XXS_GRID[(a0 >> (8 * l)) as u8 as usize];
                let signs = KSIGNS_IQ2XS[((a1 >> (7 * l)) & 127) as usize];
                for j in 0..8 {
                    y[32 * ib + 8 * l + j] = db * byte_of(grid, j) as f32 * sign(signs, j);
                }
            }
        }
    }
}

pub(crate) fn dequantize_iq2_xs(x: &[BlockIq2Xs], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let d = get_f16(b.d);
        for ib in 0..8 {
            let db = [
                d * (0.5 + (b.scales[ib] & 0xF) as f32) * 0.25,
                d * (0.5 + (b.scales[ib] >> 4) as f32) * 0.25,
            ];
            for l in 0..4 {
                let q = u16_at(&b.qs, 4 * ib + l);
                let grid = IQ2XS_GRID[(q & 511) as usize];
                let signs = KSIGNS_IQ2XS[(q >> 9) as usize];
                for j in 0..8 {
                    y[32 * ib + 8 * l + j] = db[l / 2] * byte_of(grid, j) as f32 * sign(signs, j);
                }
            }
        }
    }
}

pub(crate) fn dequantize_iq2_s(x: &[BlockIq2S], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let d = get_f16(b.d);
        for ib in 0..8 {
            let db = [
                d * (0.5 + (b.scales[ib] & 0xF) as f32) * 0.25,
                d * (0.5 + (b.scales[ib] >> 4) as f32) * 0.25,
            ];
            for l in 0..4 {
                let idx =
                    b.qs[4 * ib + l] as usize | (((b.qh[ib] as usize) << (8 - 2 * l)) & 0x300);
                let grid = IQ2S_GRID[idx];
                let signs = b.qs[32 + 4 * ib + l];
                for j in 0..8 {
                    y[32 * ib + 8 * l + j] = db[l / 2] * byte_of(grid, j) as f32 * sign(signs, j);
                }
            }
        }
    }
}

pub(crate) fn dequantize_iq3_xxs(x: &[BlockIq3Xxs], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let d = get_f16(b.d);
        for ib in 0..8 {
            let aux = u32_at(&b.qs, 64 + 4 * ib);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            let qs = &b.qs[8 * ib..8 * ib + 8];
            for l in 0..4 {
                let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
                let g1 = IQ3XXS_GRID[qs[2 * l] as usize] as u64;
                let g2 = IQ3XXS_GRID[qs[2 * l + 1] as usize] as u64;
                let o = 32 * ib + 8 * l;
                for j in 0..4 {
                    y[o + j] = db * byte_of(g1, j) as f32 * sign(signs, j);
                    y[o + j + 4] = db * byte_of(g2, j) as f32 * sign(signs, j + 4);
                }
            }
        }
    }
}

pub(crate) fn dequantize_iq3_s(x: &[BlockIq3S], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let d = get_f16(b.d);
        for ib in 0..8 {
            let sc = b.scales[ib / 2];
            let db = d * (1 + 2 * (if ib % 2 == 0 { sc & 0xF } else { sc >> 4 }) as i32) as f32;
            let qs = &b.qs[8 * ib..8 * ib + 8];
            let qh = b.qh[ib] as usize;
            let signs = &b.signs[4 * ib..4 * ib + 4];
            for l in 0..4 {
                let g1 = IQ3S_GRID[qs[2 * l] as usize | ((qh << (8 - 2 * l)) & 256)] as u64;
                let g2 = IQ3S_GRID[qs[2 * l + 1] as usize | ((qh << (7 - 2 * l)) & 256)] as u64;
                let o = 32 * ib + 8 * l;
                for j in 0..4 {
                    y[o + j] = db * byte_of(g1, j) as f32 * sign(signs[l], j);
                    y[o + j + 4] = db * byte_of(g2, j) as f32 * sign(signs[l], j + 4);
                }
            }
        }
    }
}

pub(crate) fn dequantize_iq1_s(x: &[BlockIq1S], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let d = get_f16(b.d);
        for ib in 0..8 {
            let qh = u16_at(&b.qh, ib);
            let dl = d * (2 * ((qh >> 12) & 7) as i32 + 1) as f32;
            let delta = if qh & 0x8000 != 0 {
                -IQ1S_DELTA
            } else {
                IQ1S_DELTA
            };
            for l in 0..4 {
                let idx = b.qs[4 * ib + l] as usize | ((((qh >> (3 * l)) & 7) as usize) << 8);
                let grid = IQ1S_GRID[idx];
                for j in 0..8 {
                    y[32 * ib + 8 * l + j] = dl * (byte_of(grid, j) as i8 as f32 + delta);
                }
            }
        }
    }
}

pub(crate) fn dequantize_iq1_m(x: &[BlockIq1M], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let sc = [
            u16_at(&b.scales, 0),
            u16_at(&b.scales, 1),
            u16_at(&b.scales, 2),
            u16_at(&b.scales, 3),
        ];
        let bits =
            (sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000);
        let d = half::f16::from_bits(bits).to_f32();
        for ib in 0..8 {
            let s = sc[ib / 2] >> (6 * (ib % 2));
            let dl1 = d * (2 * (s & 7) as i32 + 1) as f32;
            let dl2 = d * (2 * ((s >> 3) & 7) as i32 + 1) as f32;
            let qs = &b.qs[4 * ib..4 * ib + 4];
            let (h0, h1) = (b.qh[2 * ib] as usize, b.qh[2 * ib + 1] as usize);
            let idx = [
                qs[0] as usize | ((h0 << 8) & 0x700),
                qs[1] as usize | ((h0 << 4) & 0x700),
                qs[2] as usize | ((h1 << 8) & 0x700),
                qs[3] as usize | ((h1 << 4) & 0x700),
            ];
            let delta = |h: usize, m: usize| if h & m != 0 { -IQ1S_DELTA } else { IQ1S_DELTA };
            let deltas = [
                delta(h0, 0x08),
                delta(h0, 0x80),
                delta(h1, 0x08),
                delta(h1, 0x80),
            ];
            for l in 0..4 {
                let dl = if l < 2 { dl1 } else { dl2 };
                let grid = IQ1S_GRID[idx[l]];
                for j in 0..8 {
                    y[32 * ib + 8 * l + j] = dl * (byte_of(grid, j) as i8 as f32 + deltas[l]);
                }
            }
        }
    }
}

pub(crate) fn dequantize_iq4_nl(x: &[BlockIq4Nl], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(32)) {
        let d = get_f16(b.d);
        for j in 0..16 {
            y[j] = d * KVALUES_IQ4NL[(b.qs[j] & 15) as usize] as f32;
            y[j + 16] = d * KVALUES_IQ4NL[(b.qs[j] >> 4) as usize] as f32;
        }
    }
}

pub(crate) fn dequantize_iq4_xs(x: &[BlockIq4Xs], y: &mut [f32]) {
    for (b, y) in x.iter().zip(y.chunks_exact_mut(256)) {
        let d = get_f16(b.d);
        let sh = u16::from_le_bytes(b.scales_h);
        for ib in 0..8 {
            let ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) as i32
                | ((((sh >> (2 * ib)) & 3) as i32) << 4);
            let dl = d * (ls - 32) as f32;
            let qs = &b.qs[16 * ib..16 * ib + 16];
            for j in 0..16 {
                y[32 * ib + j] = dl * KVALUES_IQ4NL[(qs[j] & 15) as usize] as f32;
                y[32 * ib + j + 16] = dl * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as f32;
            }
        }
    }
}

// ---------------------------------------------------------------- IQ4_NL / IQ4_XS quantize

const IQ4_V: [i32; 16] = {
    let mut v = [0i32; 16];
    let mut i = 0;
    while i < 16 {
        v[i] = KVALUES_IQ4NL[i] as i32;
        i += 1;
    }
    v
};

/// `best_index_int8(16, kvalues_iq4nl, x)` → `(index, level)`: nearest non-linear level,
/// ties go up.
///
/// ggml binary-searches for the bracketing pair `v[ml] <= x < v[ml+1]`; the levels are
/// strictly increasing integers, so `ml`, `v[ml]` and `v[ml+1]` are sums over the 14 inner
/// comparisons (exact integer arithmetic, no branches, vectorizable). NaN, for which every
/// comparison fails, ends at index 15 in ggml's search.
#[inline(always)]
fn best_iq4(x: f32) -> (u8, i32) {
    let mut ml = 0i32;
    let mut lo = IQ4_V[0];
    let mut hi = IQ4_V[1];
    for k in 1..15 {
        let ge = (x >= IQ4_V[k] as f32) as i32;
        ml += ge;
        lo += ge * (IQ4_V[k] - IQ4_V[k - 1]);
        hi += ge * (IQ4_V[k + 1] - IQ4_V[k]);
    }
    let down = x - (lo as f32) < (hi as f32) - x;
    let (mut idx, mut q) = if down { (ml, lo) } else { (ml + 1, hi) };
    if x <= IQ4_V[0] as f32 {
        (idx, q) = (0, IQ4_V[0]);
    }
    if x >= IQ4_V[15] as f32 || x.is_nan() {
        (idx, q) = (15, IQ4_V[15]);
    }
    (idx as u8, q)
}

#[inline(always)]
fn best_index_iq4(x: f32) -> u8 {
    best_iq4(x).0
}

/// `weight[j] = x[j]²`, the weights `quantize_row_iq4_nl_impl` uses without an importance
/// matrix.
#[inline(always)]
fn iq4_plain_weights(xb: &[f32]) -> [f32; 32] {
    let mut w = [0f32; 32];
    for (w, &x) in w.iter_mut().zip(xb) {
        *w = x * x;
    }
    w
}

/// `sigma2` of `quantize_row_iq4_nl_impl`: `2/n · Σ x²` over the super-block, summed in order.
#[inline(always)]
fn iq4_sigma2(x: &[f32]) -> f32 {
    let mut s = 0f32;
    for &v in x {
        s += v * v;
    }
    s * (2.0 / x.len() as f32)
}

/// The weights with an importance matrix: `qw[j] · sqrt(sigma2 + x[j]²)`.
#[inline(always)]
fn iq4_imatrix_weights(xb: &[f32], qw: &[f32], sigma2: f32) -> [f32; 32] {
    let mut w = [0f32; 32];
    for j in 0..32 {
        w[j] = qw[j] * (sigma2 + xb[j] * xb[j]).sqrt();
    }
    w
}

/// The per-32 scale search of `quantize_row_iq4_nl_impl` with `ntry = 7` (what
/// `quantize_iq4_nl`/`quantize_iq4_xs` use) and the given weights: returns the scale, or 0 for
/// an all-(near-)zero block.
fn iq4_block_scale(xb: &[f32], weight: &[f32; 32]) -> f32 {
    const NTRY: i32 = 7;
    let v0 = KVALUES_IQ4NL[0] as i32;
    let (mut amax, mut max) = (0f32, 0f32);
    for &x in xb {
        let ax = x.abs();
        if ax > amax {
            amax = ax;
            max = x;
        }
    }
    if amax < 1e-15 {
        return 0.0;
    }
    // candidate 0: the initial scale; candidate 1 + k: try `k - 7`. Each candidate's sums run
    // in element order; the candidates only run side by side (independent chains).
    let mut ids = [0f32; 16];
    ids[0] = 1.0 / (-max / v0 as f32);
    for (k, id) in ids[1..].iter_mut().enumerate() {
        *id = (k as i32 - NTRY + v0) as f32 / max;
    }
    let (mut sumqx, mut sumq2) = ([0f32; 16], [0f32; 16]);
    for (j, &x) in xb.iter().enumerate() {
        let w = weight[j];
        for c in 0..16 {
            let q = best_iq4(ids[c] * x).1 as f32;
            sumqx[c] += w * q * x;
            sumq2[c] += w * q * q;
        }
    }
    let mut d = if sumq2[0] > 0.0 {
        sumqx[0] / sumq2[0]
    } else {
        0.0
    };
    let mut best = d * sumqx[0];
    for c in 1..16 {
        if sumq2[c] > 0.0 && sumqx[c] * sumqx[c] > best * sumq2[c] {
            d = sumqx[c] / sumq2[c];
            best = d * sumqx[c];
        }
    }
    d
}

/// Nibble packing shared by IQ4_NL and IQ4_XS (as Q4_0, per 32 elements).
#[inline(always)]
fn iq4_pack(l: &[u8], qs: &mut [u8]) {
    for i in 0..l.len() / 32 {
        for j in 0..16 {
            qs[16 * i + j] = l[32 * i + j] | (l[32 * i + 16 + j] << 4);
        }
    }
}

/// One IQ4_NL block with the given weights (`quantize_row_iq4_nl_impl`, ntry = 7).
fn iq4_nl_block(xb: &[f32], weight: &[f32; 32], b: &mut BlockIq4Nl) {
    let s = iq4_block_scale(xb, weight);
    b.d = crate::util::put_f16(s);
    let id = if s != 0.0 { 1.0 / s } else { 0.0 };
    let mut l = [0u8; 32];
    for (o, &v) in l.iter_mut().zip(xb) {
        *o = best_index_iq4(id * v);
    }
    iq4_pack(&l, &mut b.qs);
}

/// IQ4_NL as llama-quantize writes it without an imatrix (`quantize_iq4_nl`, ntry = 7; note
/// `quantize_row_iq4_nl_ref` uses ntry = -1 and differs).
pub(crate) fn quantize_iq4_nl(x: &[f32], y: &mut [BlockIq4Nl]) {
    for (xb, b) in x.chunks_exact(32).zip(y) {
        iq4_nl_block(xb, &iq4_plain_weights(xb), b);
    }
}

/// IQ4_NL row kernel: `quantize_iq4_nl` with optional importance weights (one per column).
pub(crate) fn quantize_row_iq4_nl(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    let y = as_blocks_mut::<BlockIq4Nl>(y);
    let Some(qw) = qw else {
        return quantize_iq4_nl(x, y);
    };
    for ((xb, qw), b) in x.chunks_exact(32).zip(qw.chunks_exact(32)).zip(y) {
        iq4_nl_block(xb, &iq4_imatrix_weights(xb, qw, iq4_sigma2(xb)), b);
    }
}

/// IQ4_XS as llama-quantize writes it without an imatrix (`quantize_iq4_xs`, ntry = 7).
pub(crate) fn quantize_iq4_xs(x: &[f32], y: &mut [BlockIq4Xs]) {
    for (x, b) in x.chunks_exact(256).zip(y) {
        iq4_xs_block(x, None, b);
    }
}

/// IQ4_XS row kernel: `quantize_iq4_xs` with optional importance weights (one per column).
pub(crate) fn quantize_row_iq4_xs(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    let y = as_blocks_mut::<BlockIq4Xs>(y);
    for (i, (x, b)) in x.chunks_exact(256).zip(y).enumerate() {
        iq4_xs_block(x, qw.map(|w| &w[256 * i..256 * i + 256]), b);
    }
}

/// One IQ4_XS super-block: a scale per 32 with [`iq4_block_scale`], then 6-bit sub-scales
/// relative to the largest.
fn iq4_xs_block(x: &[f32], qw: Option<&[f32]>, b: &mut BlockIq4Xs) {
    let sigma2 = qw.map(|_| iq4_sigma2(x));
    let mut scales = [0f32; 8];
    let (mut max_scale, mut amax_scale) = (0f32, 0f32);
    for ib in 0..8 {
        let xb = &x[32 * ib..32 * ib + 32];
        let weight = match (qw, sigma2) {
            (Some(qw), Some(s2)) => iq4_imatrix_weights(xb, &qw[32 * ib..32 * ib + 32], s2),
            _ => iq4_plain_weights(xb),
        };
        scales[ib] = iq4_block_scale(xb, &weight);
        let a = scales[ib].abs();
        if a > amax_scale {
            amax_scale = a;
            max_scale = scales[ib];
        }
    }
    let d = -max_scale / 32.0;
    b.d = crate::util::put_f16(d);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut sh = 0u16;
    b.scales_l = [0; 4];
    let mut l = [0u8; 256];
    for ib in 0..8 {
        let ls = crate::util::nearest_int(id * scales[ib]).clamp(-32, 31);
        let dl = d * ls as f32; // the unrounded f32 d, not the stored f16
        let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
        for j in 0..32 {
            l[32 * ib + j] = best_index_iq4(idl * x[32 * ib + j]);
        }
        let ls = (ls + 32) as u8;
        if ib % 2 == 0 {
            b.scales_l[ib / 2] = ls & 0xF;
        } else {
            b.scales_l[ib / 2] |= (ls & 0xF) << 4;
        }
        sh |= ((ls >> 4) as u16) << (2 * ib);
    }
    b.scales_h = sh.to_le_bytes();
    iq4_pack(&l, &mut b.qs);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ggml's `best_index_int8`, literally.
    fn binary_search(x: f32) -> u8 {
        let v = |i: usize| KVALUES_IQ4NL[i] as f32;
        if x <= v(0) {
            return 0;
        }
        if x >= v(15) {
            return 15;
        }
        let (mut ml, mut mu) = (0usize, 15usize);
        while mu - ml > 1 {
            let mav = (ml + mu) / 2;
            if x < v(mav) {
                mu = mav;
            } else {
                ml = mav;
            }
        }
        if x - v(mu - 1) < v(mu) - x {
            (mu - 1) as u8
        } else {
            mu as u8
        }
    }

    #[test]
    fn branch_free_index_equals_binary_search() {
        let mut xs: Vec<f32> = (-600..=600).map(|i| i as f32 * 0.25).collect();
        xs.extend([
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            1e-30,
            12.999999,
            13.000001,
        ]);
        for x in xs {
            let (i, q) = best_iq4(x);
            assert_eq!(i, binary_search(x), "{x}");
            assert_eq!(q, KVALUES_IQ4NL[i as usize] as i32, "{x}");
        }
    }
}
