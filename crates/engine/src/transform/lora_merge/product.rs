//! The product of a LoRA term's factors for a block of weight rows, `out = S · V`: `S` holds
//! one scalar per (row, rank step), `V` one row of values per rank step. Every output element
//! is its sum over the rank **in order from zero, one fused multiply-add per step** (what the
//! parent module's bits rest on), whichever loop computes it: the tiled loop below only
//! changes which elements are computed together, never one element's order, so it gives the
//! bits of the plain row loop. Tiles of 4 rows × 16 columns (8 × 32 with AVX-512) keep their
//! sums in registers and read each `V` value once per tile instead of once per row; `V`'s
//! columns are packed in strips of the tile's width so a tile reads contiguous memory.

use std::ops::Range;

/// Columns of a strip (two 8-lane AVX registers of f32).
const STRIP: usize = 16;
/// The strip width with AVX-512.
#[cfg(target_arch = "x86_64")]
const WIDE: usize = 32;
/// Rows of a tile (two registers per row with AVX2: 8 sums of 16 registers).
const TILE: usize = 4;
/// Rows of a tile with AVX-512 (16 sums of 32 registers).
#[cfg(target_arch = "x86_64")]
const TALL: usize = 8;
/// Rows a caller's blocks are best cut in: a multiple of every tile's.
pub(super) const BLOCK_ROWS: usize = 8;

/// A `V` (`rank × stride`) packed once in strips over all its columns, for the calls whose
/// columns are whole rows (all but a chunk's edge inside one row): the strips of a call
/// would otherwise be packed again for every few rows, as much copying as the sums' work.
pub(super) struct Packed {
    width: usize,
    panels: Vec<f32>,
}

/// `v`'s strips at the width [`product`] uses on this CPU.
pub(super) fn pack_whole(v: &[f32], rank: usize, stride: usize) -> Packed {
    let width = strip_width();
    let strips = stride / width;
    let panels = match width {
        #[cfg(target_arch = "x86_64")]
        WIDE => pack::<WIDE>(v, rank, stride, 0, strips),
        _ => pack::<STRIP>(v, rank, stride, 0, strips),
    };
    Packed { width, panels }
}

/// The strip width of the code path this CPU runs.
fn strip_width() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use std::is_x86_feature_detected as has;
        if has!("avx512f") && has!("fma") {
            return WIDE;
        }
    }
    STRIP
}

/// `$name`: [`blocks`] of strip width `$w` compiled with the instruction sets `$features`
/// (callable only where the CPU has them).
#[cfg(target_arch = "x86_64")]
macro_rules! compiled_for {
    ($name:ident, $features:literal, $w:expr, $r:expr) => {
        #[target_feature(enable = $features)]
        fn $name(op: Operand<'_>, cols: Range<usize>, out: &mut [f32]) {
            blocks::<$w, $r>(op, cols, out)
        }
    };
}

/// What [`product`] multiplies: `s` (`rows × rank`, row-major) by `v` (`rank × stride`), with
/// `v` packed whole when the caller has it.
#[derive(Clone, Copy)]
pub(super) struct Operand<'a> {
    pub s: &'a [f32],
    pub rank: usize,
    pub v: &'a [f32],
    pub stride: usize,
    pub packed: Option<&'a Packed>,
}

/// `out[i][j - cols.start] = Σ_k s[i][k] · v[k][j]` for the `rows` rows of `s` and the columns
/// `cols` of `v`; `out` is `rows × cols.len()`.
pub(super) fn product(op: Operand<'_>, cols: Range<usize>, out: &mut [f32]) {
    let (rank, stride) = (op.rank, op.stride);
    let rows = out.len() / cols.len().max(1);
    if rank == 0 {
        // No rank step: every sum is empty (the configuration refuses such a LoRA first).
        out.fill(0.0);
        return;
    }
    assert!(
        op.s.len() >= rows * rank
            && cols.end <= stride
            && op.v.len() >= (rank - 1) * stride + cols.end
            && out.len() == rows * cols.len(),
        "LoRA product shapes disagree"
    );
    #[cfg(target_arch = "x86_64")]
    {
        use std::is_x86_feature_detected as has;
        if has!("avx512f") && has!("fma") {
            // Two 16-lane registers per row of a tile (8 accumulators), each broadcast of a
            // value of `s` feeding two fused multiply-adds: the same sums in the same order.
            compiled_for!(fused512, "avx512f,fma", WIDE, TALL);
            // SAFETY: the CPU has AVX-512F and FMA (checked just above).
            return unsafe { fused512(op, cols, out) };
        }
        if has!("avx2") && has!("fma") {
            compiled_for!(fused, "avx2,fma", STRIP, TILE);
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { fused(op, cols, out) };
        }
    }
    blocks::<STRIP, TILE>(op, cols, out)
}

/// [`product`] by tiles of `R` rows over the full strips (a short last tile padded with zero
/// rows), then the column tail one row at a time. Inlined into the caller so its instruction
/// set applies (`mul_add` is one instruction with FMA, a library call without).
#[inline(always)]
fn blocks<const W: usize, const R: usize>(op: Operand<'_>, cols: Range<usize>, out: &mut [f32]) {
    let (rank, n) = (op.rank, cols.len());
    let rows = out.len() / n.max(1);
    let strips = n / W;
    let whole = cols == (0..op.stride);
    let packed;
    let panels = match op.packed {
        Some(p) if whole && p.width == W => &p.panels[..strips * rank * W],
        _ => {
            packed = pack::<W>(op.v, rank, op.stride, cols.start, strips);
            &packed[..]
        }
    };
    let tiles = by_step::<R>(op.s, rank, rows);
    for (q, panel) in panels.chunks_exact(rank * W).enumerate() {
        for (t, ts) in tiles.chunks_exact(rank * R).enumerate() {
            let sums = tile_of::<W, R>(ts, panel);
            let i = t * R;
            for (r, sum) in sums.iter().take(rows - i).enumerate() {
                out[(i + r) * n + q * W..][..W].copy_from_slice(sum);
            }
        }
    }
    let done = strips * W;
    if done < n {
        for i in 0..rows {
            let part = cols.start + done..cols.end;
            let o = &mut out[i * n + done..][..part.len()];
            row_sums(&op.s[i * rank..][..rank], op.v, op.stride, part, o);
        }
    }
}

/// `s`'s `rows` rows in tiles of `R`, each rank step's `R` scalars together (`[tile][k][r]`),
/// so a tile reads them in order; rows past the last are zeros (their sums are dropped, and
/// each real element's sum is the same whatever its neighbours).
#[inline(always)]
fn by_step<const R: usize>(s: &[f32], rank: usize, rows: usize) -> Vec<f32> {
    let tiles = rows.div_ceil(R);
    let mut t = vec![0f32; tiles * rank * R];
    for (i, row) in s.chunks_exact(rank).take(rows).enumerate() {
        let tile = &mut t[(i / R) * rank * R..][..rank * R];
        for (k, &v) in row.iter().enumerate() {
            tile[k * R + i % R] = v;
        }
    }
    t
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

/// [`tile`], by [`tall`] for the AVX-512 shape (the compiler spills the generic loop's 16
/// accumulators of that shape to memory).
#[inline(always)]
fn tile_of<const W: usize, const R: usize>(s: &[f32], panel: &[f32]) -> [[f32; W]; R] {
    #[cfg(target_arch = "x86_64")]
    if W == WIDE && R == TALL {
        let mut acc = [[0f32; W]; R];
        // SAFETY: the AVX-512 shape is only compiled into `product`'s `fused512`, which runs
        // only where the CPU has AVX-512F and FMA; `acc` is `R` rows of `W` = 32 f32s.
        unsafe { tall(s, panel, acc.as_mut_ptr().cast()) };
        return acc;
    }
    tile::<W, R>(s, panel)
}

/// [`tile`] for 8 rows × 32 columns in AVX-512 registers: 16 accumulators, each rank step two
/// loads of the strip, then per row one broadcast and two fused multiply-adds (one rounding,
/// as `mul_add`): the same sums in the same order. Writes the 8 × 32 sums at `out`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn tall(s: &[f32], panel: &[f32], out: *mut f32) {
    use std::arch::x86_64::{
        __m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_setzero_ps,
        _mm512_storeu_ps,
    };
    let mut acc: [[__m512; 2]; TALL] = [[_mm512_setzero_ps(); 2]; TALL];
    for (sk, p) in s.chunks_exact(TALL).zip(panel.chunks_exact(WIDE)) {
        // SAFETY: `p` holds 32 f32s (two registers' worth).
        let (lo, hi) = unsafe {
            (
                _mm512_loadu_ps(p.as_ptr()),
                _mm512_loadu_ps(p[16..].as_ptr()),
            )
        };
        for (a, &x) in acc.iter_mut().zip(sk) {
            let b = _mm512_set1_ps(x);
            a[0] = _mm512_fmadd_ps(b, lo, a[0]);
            a[1] = _mm512_fmadd_ps(b, hi, a[1]);
        }
    }
    for (r, a) in acc.iter().enumerate() {
        // SAFETY: the caller's `out` holds 8 rows of 32 f32s.
        unsafe {
            _mm512_storeu_ps(out.add(r * WIDE), a[0]);
            _mm512_storeu_ps(out.add(r * WIDE + 16), a[1]);
        }
    }
}

/// One tile's sums: `R` rows of `s` (`[k][r]`, [`by_step`]) times one packed strip.
#[inline(always)]
fn tile<const W: usize, const R: usize>(s: &[f32], panel: &[f32]) -> [[f32; W]; R] {
    let mut acc = [[0f32; W]; R];
    for (sk, p) in s.chunks_exact(R).zip(panel.chunks_exact(W)) {
        for (sum, &s) in acc.iter_mut().zip(sk) {
            for (x, &pv) in sum.iter_mut().zip(p) {
                *x = s.mul_add(pv, *x);
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
        let op = Operand {
            s: &[],
            rank: 0,
            v: &[],
            stride: 3,
            packed: None,
        };
        product(op, 0..3, &mut out);
        assert_eq!(out, vec![0.0; 6]);
    }

    /// Every path (tiles, padded last tiles, column tail, strips packed per call or once for
    /// whole rows) gives each element its in-order fused sum, bit for bit, on shapes that
    /// reach all of them.
    #[test]
    fn tiles_and_tails_equal_the_in_order_sum() {
        let (rank, stride) = (7, 150);
        let v: Vec<f32> = (0..rank * stride)
            .map(|i| (i as f32 * 0.731).sin())
            .collect();
        // Packed at this CPU's width, and at the portable path's.
        let whole = pack_whole(&v, rank, stride);
        let narrow = Packed {
            width: STRIP,
            panels: pack::<STRIP>(&v, rank, stride, 0, stride / STRIP),
        };
        let cases = [1, 4, 6, 9, 16, 17]
            .into_iter()
            .flat_map(|r| [(r, None), (r, Some(&whole)), (r, Some(&narrow))]);
        for (rows, packed) in cases {
            let s: Vec<f32> = (0..rows * rank).map(|i| (i as f32 * 1.37).cos()).collect();
            for (cols, portable) in [0..150, 3..140, 5..20, 2..9, 10..75]
                .into_iter()
                .flat_map(|c| [(c.clone(), false), (c, true)])
            {
                let mut out = vec![f32::NAN; rows * cols.len()];
                let op = Operand {
                    s: &s,
                    rank,
                    v: &v,
                    stride,
                    packed,
                };
                match portable {
                    // What a CPU without AVX-512 runs (AVX2 compiles the same code).
                    true => blocks::<STRIP, TILE>(op, cols.clone(), &mut out),
                    false => product(op, cols.clone(), &mut out),
                }
                for i in 0..rows {
                    for (jj, j) in cols.clone().enumerate() {
                        let want = (0..rank).fold(0f32, |acc, k| {
                            s[i * rank + k].mul_add(v[k * stride + j], acc)
                        });
                        let got = out[i * cols.len() + jj];
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{rows} rows, {cols:?}, portable {portable}: [{i}][{j}]"
                        );
                    }
                }
            }
        }
    }
}
