//! ggml's scale searches (`ggml-quants.c`) that the K-quant and legacy kernels share, with and
//! without an importance matrix: `make_qkx2_quants` and `make_qkx3_quants` (one search,
//! [`make_qkx_quants`]), `make_qx_quants` with explicit weights, `make_qp_quants`, the
//! per-element importance `qw[i] · sqrt(σ² + x[i]²)` of the imatrix paths, and the lane
//! layout they run in.
//!
//! The searches over many sub-blocks run in lockstep lanes (`x[i][m]` is element `i` of
//! sub-block `m`): every lane performs exactly the C sequence of f32 operations, so each
//! lane's result equals the scalar C function's.

#![allow(clippy::needless_range_loop)] // index loops mirror the C reference, for auditability

use crate::util::nearest_int;

/// ggml's `GROUP_MAX_EPS`.
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// `t[i][m] = x[N*m + i]`: sub-block `m` of `x` in lane `m`.
#[inline(always)]
pub(crate) fn transpose<const N: usize, const M: usize>(x: &[f32]) -> [[f32; M]; N] {
    let mut t = [[0f32; M]; N];
    for m in 0..M {
        for i in 0..N {
            t[i][m] = x[N * m + i];
        }
    }
    t
}

/// `l[N·m + i] = lt[i][m]`: lane `m` back to sub-block `m` of the row.
#[inline(always)]
pub(crate) fn untranspose<T: Copy, const N: usize, const M: usize>(lt: &[[T; M]; N], l: &mut [T]) {
    for i in 0..N {
        for m in 0..M {
            l[N * m + i] = lt[i][m];
        }
    }
}

/// `(amax, signed max)` with strict `>`: the first element with the largest |x| wins.
#[inline(always)]
pub(crate) fn abs_max(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        let a = v.abs();
        if a > amax {
            amax = a;
            max = v;
        }
    }
    (amax, max)
}

/// Per-lane `(amax, signed max)` over `x[i][m]` with strict `>` (first element wins ties).
#[inline(always)]
pub(crate) fn abs_max_lanes<const N: usize, const M: usize>(
    x: &[[f32; M]; N],
) -> ([f32; M], [f32; M]) {
    let (mut amax, mut max) = ([0f32; M], [0f32; M]);
    for row in x {
        for m in 0..M {
            let a = row[m].abs();
            let gt = a > amax[m];
            amax[m] = if gt { a } else { amax[m] };
            max[m] = if gt { row[m] } else { max[m] };
        }
    }
    (amax, max)
}

/// The importance of element `i` of sub-block `m` as the k-quant and legacy imatrix paths
/// compute it: `qw · sqrtf(sigma2 + x·x)`, written transposed into `w[i][m]` for the `N`
/// elements of each of the `M` sub-blocks of `x`, whose per-sub-block sums (in element order)
/// go to `sw`. `sigma2[m]` is sub-block `m`'s σ².
#[inline(always)]
pub(crate) fn lane_weights<const N: usize, const M: usize>(
    x: &[[f32; M]; N],
    qw: &[f32],
    sigma2: &[f32; M],
    sw: &mut [f32],
) -> [[f32; M]; N] {
    let mut w = [[0f32; M]; N];
    for i in 0..N {
        for m in 0..M {
            w[i][m] = qw[N * m + i] * (sigma2[m] + x[i][m] * x[i][m]).sqrt();
        }
    }
    for m in 0..M {
        let mut s = 0.0f32;
        for i in 0..N {
            s += w[i][m];
        }
        sw[m] = s;
    }
    w
}

/// Which of ggml's two scale-and-min searches [`make_qkx_quants`] runs: they differ only in
/// when a lane is left at zero and in how a candidate's error is weighed.
#[derive(Clone, Copy)]
pub(crate) enum Qkx {
    /// `make_qkx2_quants`: a lane is zero when `max == min`; errors `|d|` with `use_mad`, else
    /// `d²`.
    Two {
        /// ggml's `use_mad`.
        use_mad: bool,
    },
    /// `make_qkx3_quants` (every caller passes explicit weights, `nstep ≥ 1` and `use_mad =
    /// false`): a lane is zero when `max <= min`; errors `d²`.
    Three,
}

/// ggml's `make_qkx2_quants` or `make_qkx3_quants` ([`Qkx`]) run on `M` independent sub-blocks
/// at once, one per lane: `x[i][m]` is element `i` of sub-block `m`, `w[i][m]` its weight.
/// Every lane performs exactly the C sequence of f32 operations (its sums in element order, its
/// candidate steps in order, the accept test as a per-lane select), so each lane's result
/// equals the scalar C function's; the lanes only let the independent dependency chains
/// overlap and vectorize. Returns `(scale, the_min)` per lane and fills `l[i][m]` with
/// `0..=nmax`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn make_qkx_quants<const N: usize, const M: usize>(
    kind: Qkx,
    nmax: i32,
    x: &[[f32; M]; N],
    weights: &[[f32; M]; N],
    l: &mut [[u8; M]; N],
    rmin: f32,
    rdelta: f32,
    nstep: usize,
) -> ([f32; M], [f32; M]) {
    let (mut min, max, sum_w, sum_x) = weighted_range(x, weights);
    let use_mad = matches!(kind, Qkx::Two { use_mad: true });
    let mut done = [false; M];
    let mut iscale = [0f32; M];
    let mut scale = [0f32; M];
    for m in 0..M {
        if min[m] > 0.0 {
            min[m] = 0.0;
        }
        done[m] = match kind {
            Qkx::Two { .. } => max[m] == min[m],
            Qkx::Three => max[m] <= min[m],
        };
        iscale[m] = nmax as f32 / (max[m] - min[m]);
        scale[m] = 1.0 / iscale[m];
    }
    let mut best_error = [0f32; M];
    for i in 0..N {
        for m in 0..M {
            let q = nearest_int(iscale[m] * (x[i][m] - min[m])).clamp(0, nmax);
            l[i][m] = q as u8;
            let diff = scale[m] * q as f32 + min[m] - x[i][m];
            best_error[m] += weights[i][m] * error(diff, use_mad);
        }
    }
    let mut laux = [[0f32; M]; N];
    for is in 0..=nstep {
        for m in 0..M {
            iscale[m] = (rmin + rdelta * is as f32 + nmax as f32) / (max[m] - min[m]);
        }
        let sums = (&sum_w, &sum_x);
        let (this_scale, this_min, d_pos) =
            fit_step(nmax, x, weights, &iscale, &min, sums, &mut laux);
        let mut cur_error = [0f32; M];
        for i in 0..N {
            for m in 0..M {
                let diff = this_scale[m] * laux[i][m] + this_min[m] - x[i][m];
                cur_error[m] += weights[i][m] * error(diff, use_mad);
            }
        }
        let mut accept = [false; M];
        let mut any = false;
        for m in 0..M {
            accept[m] = !done[m] && d_pos[m] && cur_error[m] < best_error[m];
            any |= accept[m];
            if accept[m] {
                best_error[m] = cur_error[m];
                scale[m] = this_scale[m];
                min[m] = this_min[m];
            }
        }
        if any {
            take_accepted(l, &laux, &accept);
        }
    }
    let mut the_min = [0f32; M];
    for m in 0..M {
        if done[m] {
            scale[m] = 0.0;
            for row in l.iter_mut() {
                row[m] = 0;
            }
        }
        the_min[m] = -min[m];
    }
    (scale, the_min)
}

/// A candidate's error at one element before its weight: `|d|` (`use_mad`) or `d²`.
#[inline(always)]
fn error(d: f32, use_mad: bool) -> f32 {
    if use_mad {
        d.abs()
    } else {
        d * d
    }
}

/// [`make_qkx_quants`]' first pass, per lane: min, max, Σw and Σw·x in element order.
#[inline(always)]
#[allow(clippy::type_complexity)]
fn weighted_range<const N: usize, const M: usize>(
    x: &[[f32; M]; N],
    weights: &[[f32; M]; N],
) -> ([f32; M], [f32; M], [f32; M], [f32; M]) {
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = [0f32; M];
    for m in 0..M {
        sum_x[m] = sum_w[m] * x[0][m];
    }
    for i in 1..N {
        for m in 0..M {
            let v = x[i][m];
            min[m] = if v < min[m] { v } else { min[m] };
            max[m] = if v > max[m] { v } else { max[m] };
            let w = weights[i][m];
            sum_w[m] += w;
            sum_x[m] += w * v;
        }
    }
    (min, max, sum_w, sum_x)
}

/// One candidate step of [`make_qkx_quants`], per lane: the levels for `iscale` into `laux`,
/// then the least-squares scale and min over them (`(Σw, Σw·x)` = `sums`), with whether the
/// system's determinant is positive.
#[inline(always)]
#[allow(clippy::type_complexity)]
fn fit_step<const N: usize, const M: usize>(
    nmax: i32,
    x: &[[f32; M]; N],
    weights: &[[f32; M]; N],
    iscale: &[f32; M],
    min: &[f32; M],
    (sum_w, sum_x): (&[f32; M], &[f32; M]),
    laux: &mut [[f32; M]; N],
) -> ([f32; M], [f32; M], [bool; M]) {
    let (mut sum_l, mut sum_l2, mut sum_xl) = ([0f32; M], [0f32; M], [0f32; M]);
    for i in 0..N {
        for m in 0..M {
            let q = nearest_int(iscale[m] * (x[i][m] - min[m])).clamp(0, nmax) as f32;
            laux[i][m] = q;
            let w = weights[i][m];
            sum_l[m] += w * q;
            sum_l2[m] += w * q * q;
            sum_xl[m] += w * q * x[i][m];
        }
    }
    let (mut this_scale, mut this_min, mut d_pos) = ([0f32; M], [0f32; M], [false; M]);
    for m in 0..M {
        let d = sum_w[m] * sum_l2[m] - sum_l[m] * sum_l[m];
        d_pos[m] = d > 0.0;
        let mut s = (sum_w[m] * sum_xl[m] - sum_x[m] * sum_l[m]) / d;
        let mut mn = (sum_l2[m] * sum_x[m] - sum_l[m] * sum_xl[m]) / d;
        if mn > 0.0 {
            mn = 0.0;
            s = sum_xl[m] / sum_l2[m];
        }
        this_scale[m] = s;
        this_min[m] = mn;
    }
    (this_scale, this_min, d_pos)
}

/// The levels of the lanes whose step was accepted.
#[inline(always)]
fn take_accepted<const N: usize, const M: usize>(
    l: &mut [[u8; M]; N],
    laux: &[[f32; M]; N],
    accept: &[bool; M],
) {
    for i in 0..N {
        for m in 0..M {
            if accept[m] {
                l[i][m] = laux[i][m] as u8;
            }
        }
    }
}

/// `make_qx_quants(N, nmax, x, L, rmse_type = 1, qw)` with explicit weights `w[i][m]`, on `M`
/// sub-blocks in lockstep lanes; `l[i][m]` receives values in `0..2*nmax`.
#[inline(always)]
pub(crate) fn make_qx_quants_w<const N: usize, const M: usize>(
    nmax: i32,
    x: &[[f32; M]; N],
    w: &[[f32; M]; N],
    l: &mut [[i8; M]; N],
) -> [f32; M] {
    let (amax, max) = abs_max_lanes(x);
    let mut iscale = [0f32; M];
    for m in 0..M {
        iscale[m] = -(nmax as f32) / max[m];
    }
    let mut lbest = [[0f32; M]; N];
    let (sumlx, suml2) = qx_sums(nmax, x, w, &iscale, &mut lbest);
    let (mut scale, mut best) = ([0f32; M], [0f32; M]);
    for m in 0..M {
        scale[m] = if suml2[m] != 0.0 {
            sumlx[m] / suml2[m]
        } else {
            0.0
        };
        best[m] = scale[m] * sumlx[m];
    }
    let mut lq = [[0f32; M]; N];
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        for m in 0..M {
            iscale[m] = -(nmax as f32 + 0.1 * is as f32) / max[m];
        }
        let (sumlx, suml2) = qx_sums(nmax, x, w, &iscale, &mut lq);
        let mut take = [false; M];
        let mut any = false;
        for m in 0..M {
            take[m] = suml2[m] > 0.0 && sumlx[m] * sumlx[m] > best[m] * suml2[m];
            any |= take[m];
            if take[m] {
                scale[m] = sumlx[m] / suml2[m];
                best[m] = scale[m] * sumlx[m];
            }
        }
        if any {
            for i in 0..N {
                for m in 0..M {
                    if take[m] {
                        lbest[i][m] = lq[i][m];
                    }
                }
            }
        }
    }
    for m in 0..M {
        let zero = amax[m] < GROUP_MAX_EPS;
        for i in 0..N {
            l[i][m] = if zero {
                0
            } else {
                (lbest[i][m] as i32 + nmax) as i8
            };
        }
        if zero {
            scale[m] = 0.0;
        }
    }
    scale
}

/// One candidate of [`make_qx_quants_w`]: the levels for `iscale` into `lq`, and `(Σw·x·l,
/// Σw·l²)` per lane. (A function, not a closure: a closure would be compiled without the
/// caller's AVX2 feature, see `dispatch.rs`.)
#[inline(always)]
fn qx_sums<const N: usize, const M: usize>(
    nmax: i32,
    x: &[[f32; M]; N],
    w: &[[f32; M]; N],
    iscale: &[f32; M],
    lq: &mut [[f32; M]; N],
) -> ([f32; M], [f32; M]) {
    let (mut sumlx, mut suml2) = ([0f32; M], [0f32; M]);
    for i in 0..N {
        for m in 0..M {
            let q = nearest_int(iscale[m] * x[i][m]).clamp(-nmax, nmax - 1) as f32;
            lq[i][m] = q;
            sumlx[m] += w[i][m] * x[i][m] * q;
            suml2[m] += w[i][m] * q * q;
        }
    }
    (sumlx, suml2)
}

/// `make_qp_quants(n, nmax, x, L, quant_weights)`: the weighted search for the 6-/4-bit
/// quantized sub-block scales and mins of Q2_K/Q4_K/Q5_K (`x ≥ 0` in practice). `L` is
/// `uint8_t` in C, so levels are stored truncated to 8 bits, exactly as there.
pub(crate) fn make_qp_quants(nmax: i32, x: &[f32], l: &mut [u8], qw: &[f32]) -> f32 {
    let n = x.len();
    let mut max = 0.0f32;
    for &v in x {
        max = if max > v { max } else { v };
    }
    if max < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let mut iscale = nmax as f32 / max;
    for i in 0..n {
        l[i] = nearest_int(iscale * x[i]) as u8;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0.0f32;
    for i in 0..n {
        let diff = x[i] - scale * l[i] as f32;
        best_mse += qw[i] * diff * diff;
    }
    for is in -4i32..=4 {
        if is == 0 {
            continue;
        }
        let iscale_is = (0.1 * is as f32 + nmax as f32) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0.0f32;
        for i in 0..n {
            let q = nearest_int(iscale_is * x[i]).min(nmax);
            let diff = x[i] - scale_is * q as f32;
            mse += qw[i] * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for i in 0..n {
        let q = nearest_int(iscale * x[i]).min(nmax);
        l[i] = q as u8;
        sumlx += qw[i] * x[i] * q as f32;
        suml2 += qw[i] * q as f32 * q as f32;
    }
    qp_refine(nmax, x, l, qw, &mut sumlx, &mut suml2);
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// The coordinate-descent passes (at most 5) that end `make_qp_quants`.
#[inline(always)]
fn qp_refine(nmax: i32, x: &[f32], l: &mut [u8], qw: &[f32], sumlx: &mut f32, suml2: &mut f32) {
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..x.len() {
            let (w, li) = (qw[i], l[i] as f32);
            let mut slx = *sumlx - w * x[i] * li;
            let mut sl2 = *suml2 - w * li * li;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(x[i] * sl2 / slx).min(nmax);
                if new_l != l[i] as i32 {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if slx * slx * *suml2 > *sumlx * *sumlx * sl2 {
                        l[i] = new_l as u8;
                        *sumlx = slx;
                        *suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
}
