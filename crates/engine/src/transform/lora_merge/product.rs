//! The product of a LoRA term's factors for a block of weight rows, `out = S · V`: `S` holds
//! one scalar per (row, rank step), `V` one row of values per rank step. Every output element
//! is its sum over the rank **in order from zero, one fused multiply-add per step** (what the
//! parent module's bits rest on), whichever loop computes it: the tiled loop below only
//! changes which elements are computed together, never one element's order, so it gives the
//! bits of the plain row loop. Tiles of 4 rows × 16 columns keep their 64 sums in registers
//! and read each `V` value once per tile instead of once per row; `V`'s columns are packed in
//! strips of 16 so a tile reads contiguous memory.

use std::ops::Range;

/// Columns of a strip (two 8-lane AVX registers of f32).
const STRIP: usize = 16;
/// The strip width with AVX-512.
#[cfg(target_arch = "x86_64")]
const WIDE: usize = 32;
/// Rows of a tile.
const TILE: usize = 4;

/// `$name`: [`blocks`] of strip width `$w` compiled with the instruction sets `$features`
/// (callable only where the CPU has them).
#[cfg(target_arch = "x86_64")]
macro_rules! compiled_for {
    ($name:ident, $features:literal, $w:expr) => {
        #[target_feature(enable = $features)]
        fn $name(
            s: &[f32],
            rank: usize,
            v: &[f32],
            stride: usize,
            cols: Range<usize>,
            out: &mut [f32],
        ) {
            blocks::<$w>(s, rank, v, stride, cols, out)
        }
    };
}

/// `out[i][j - cols.start] = Σ_k s[i][k] · v[k][j]` for the `rows` rows of `s` (`rows × rank`,
/// row-major) and the columns `cols` of `v` (`rank × stride`); `out` is `rows × cols.len()`.
pub(super) fn product(
    s: &[f32],
    rank: usize,
    v: &[f32],
    stride: usize,
    cols: Range<usize>,
    out: &mut [f32],
) {
    let rows = out.len() / cols.len().max(1);
    if rank == 0 {
        // No rank step: every sum is empty (the configuration refuses such a LoRA first).
        out.fill(0.0);
        return;
    }
    assert!(
        s.len() >= rows * rank
            && cols.end <= stride
            && v.len() >= (rank - 1) * stride + cols.end
            && out.len() == rows * cols.len(),
        "LoRA product shapes disagree"
    );
    #[cfg(target_arch = "x86_64")]
    {
        use std::is_x86_feature_detected as has;
        if has!("avx512f") && has!("fma") {
            // Two 16-lane registers per row of a tile (8 accumulators), each broadcast of a
            // value of `s` feeding two fused multiply-adds: the same sums in the same order.
            compiled_for!(fused512, "avx512f,fma", WIDE);
            // SAFETY: the CPU has AVX-512F and FMA (checked just above).
            return unsafe { fused512(s, rank, v, stride, cols, out) };
        }
        if has!("avx2") && has!("fma") {
            compiled_for!(fused, "avx2,fma", STRIP);
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { fused(s, rank, v, stride, cols, out) };
        }
    }
    blocks::<STRIP>(s, rank, v, stride, cols, out)
}

/// [`product`] by tiles over the full strips, then the column tail and the row tail one row
/// at a time. Inlined into the caller so its instruction set applies (`mul_add` is one
/// instruction with FMA, a library call without).
#[inline(always)]
fn blocks<const W: usize>(
    s: &[f32],
    rank: usize,
    v: &[f32],
    stride: usize,
    cols: Range<usize>,
    out: &mut [f32],
) {
    let n = cols.len();
    let rows = out.len() / n.max(1);
    let (strips, tiled) = (n / W, rows - rows % TILE);
    let panels = pack::<W>(v, rank, stride, cols.start, strips);
    for (q, panel) in panels.chunks_exact(rank * W).enumerate() {
        for i in (0..tiled).step_by(TILE) {
            let sums = tile::<W>(&s[i * rank..][..TILE * rank], rank, panel);
            for (r, sum) in sums.iter().enumerate() {
                out[(i + r) * n + q * W..][..W].copy_from_slice(sum);
            }
        }
    }
    let done = strips * W;
    for i in 0..rows {
        // Tiled rows still lack the columns past the last strip; the other rows lack all.
        let from = if i < tiled { done } else { 0 };
        let part = cols.start + from..cols.end;
        let o = &mut out[i * n + from..][..part.len()];
        row_sums(&s[i * rank..][..rank], v, stride, part, o);
    }
}

/// `v`'s columns from `c0` in strips of [`W`]: strip `q` holds `v[k][c0 + W·q ..][..W]`
/// for each rank step `k`, contiguous.
#[inline(always)]
fn pack<const W: usize>(
    v: &[f32],
    rank: usize,
    stride: usize,
    c0: usize,
    strips: usize,
) -> Vec<f32> {
    let mut p = Vec::with_capacity(strips * rank * W);
    for q in 0..strips {
        for k in 0..rank {
            p.extend_from_slice(&v[k * stride + c0 + q * W..][..W]);
        }
    }
    p
}

/// One tile's sums: [`TILE`] rows of `s` (`TILE × rank`) times one packed strip.
#[inline(always)]
fn tile<const W: usize>(s: &[f32], rank: usize, panel: &[f32]) -> [[f32; W]; TILE] {
    let mut acc = [[0f32; W]; TILE];
    for (k, p) in panel.chunks_exact(W).enumerate() {
        for (r, sum) in acc.iter_mut().enumerate() {
            let sk = s[r * rank + k];
            for (x, &pv) in sum.iter_mut().zip(p) {
                *x = sk.mul_add(pv, *x);
            }
        }
    }
    acc
}

/// One row's sums over `cols`: rank step by rank step over the whole row.
#[inline(always)]
fn row_sums(s: &[f32], v: &[f32], stride: usize, cols: Range<usize>, out: &mut [f32]) {
    out.fill(0.0);
    for (k, &sk) in s.iter().enumerate() {
        let row = &v[k * stride + cols.start..][..cols.len()];
        for (x, &vv) in out.iter_mut().zip(row) {
            *x = sk.mul_add(vv, *x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank of 0 gives zeros (empty sums), not a panic.
    #[test]
    fn rank_zero_is_zeros() {
        let mut out = vec![f32::NAN; 6];
        product(&[], 0, &[], 3, 0..3, &mut out);
        assert_eq!(out, vec![0.0; 6]);
    }

    /// Every path (tiles, column tail, row tail, and the plain loop alone) gives each element
    /// its in-order fused sum, bit for bit, on shapes that reach all of them.
    #[test]
    fn tiles_and_tails_equal_the_in_order_sum() {
        let (rank, stride) = (7, 150);
        let v: Vec<f32> = (0..rank * stride)
            .map(|i| (i as f32 * 0.731).sin())
            .collect();
        for rows in [1, 4, 6, 9] {
            let s: Vec<f32> = (0..rows * rank).map(|i| (i as f32 * 1.37).cos()).collect();
            for cols in [0..150, 3..140, 5..20, 2..9, 10..75] {
                let mut out = vec![f32::NAN; rows * cols.len()];
                product(&s, rank, &v, stride, cols.clone(), &mut out);
                for i in 0..rows {
                    for (jj, j) in cols.clone().enumerate() {
                        let want = (0..rank).fold(0f32, |acc, k| {
                            s[i * rank + k].mul_add(v[k * stride + j], acc)
                        });
                        let got = out[i * cols.len() + jj];
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{rows} rows, {cols:?}: [{i}][{j}]"
                        );
                    }
                }
            }
        }
    }
}
