//! A LoRA merged into its base weight as the weight streams: `W + scale · (B · A)`, element by
//! element, the product never held whole (issue 31 item 2). A chunk of `W` (any element range)
//! needs the rows of `B` it covers and all of `A` (an embedding's, or a `fan_in_fan_out` weight's,
//! product is transposed: then all of `B` and `A`), so memory is the chunk plus the factors.
//!
//! The arithmetic is PEFT's `merge` (`peft/tuners/lora/layer.py`, 0.21) after
//! `PeftModel.from_pretrained`, which loads F16/BF16 factors as float32: `delta = (B @ A) *
//! scale` in float32, each dot product over the rank accumulated in order with fused
//! multiply-adds (what torch's CPU matrix product does at these shapes: with a separate multiply
//! and add, 23 of 145,728 F16 values of the llama_rs fixture differed), an embedding's delta
//! rounded to the weight's type before the add, then the weight widened, the delta added in
//! float32 and the sum rounded to the weight's type (torch's in-place `+=`), once per adapter
//! in order.

mod factors;
mod product;

use std::ops::Range;

use weightport_core::{DType, Error, Result};
use weightport_quant::cast::{
    bf16_to_f32, decode_f32, f16_to_f32, f32_to_bf16, f32_to_f16, store_f32, Bf16Rounding,
    CastRule, F16Nan,
};

use super::Transform;
use factors::{factors_of, Factors};
use product::{product, Operand};

/// One adapter's term of a merge.
#[derive(Debug, Clone)]
pub(crate) struct LoraTerm {
    /// `A`'s type (`[rank, cols]`; an embedding's `[rank, rows]`).
    pub a: DType,
    /// `B`'s type (`[rows, rank]`; an embedding's `[cols, rank]`).
    pub b: DType,
    /// The rank.
    pub rank: u64,
    /// PEFT's scale times the user's (`alpha / r`, `alpha / sqrt(r)` with rsLoRA).
    pub scale: f64,
    /// The product is the weight's transpose (an embedding, a `fan_in_fan_out` weight).
    pub transposed: bool,
    /// Round the delta to the weight's type before adding it (PEFT's embedding merge).
    pub round_to_weight: bool,
}

/// `W + Σ scale_k · (B_k · A_k)` for a weight of type `w`, `[rows, cols]`; inputs: `W`, then
/// `A_k`, `B_k` per term.
pub(crate) struct LoraMerge {
    w: DType,
    rows: u64,
    cols: u64,
    terms: Vec<LoraTerm>,
    /// Elements merged at a time ([`BLOCK`]; smaller in tests).
    block: u64,
    /// Unique in the process: the key of the widened factors a thread keeps.
    id: u64,
}

fn size(d: DType) -> u64 {
    u64::from(d.elem_bytes().unwrap_or(4))
}

/// `x` rounded to `d` (torch's conversions) and widened back.
fn round(d: DType, x: f32) -> f32 {
    match d {
        DType::F16 => f16_to_f32(f32_to_f16(x, F16Nan::KeepPayload)),
        DType::BF16 => bf16_to_f32(f32_to_bf16(x, Bf16Rounding::Torch)),
        _ => x,
    }
}

impl LoraMerge {
    /// The merge of `terms` into a `[rows, cols]` weight of type `w` (F32, F16 or BF16).
    pub(crate) fn new(w: DType, rows: u64, cols: u64, terms: Vec<LoraTerm>) -> Result<LoraMerge> {
        let float = |d: DType| matches!(d, DType::F32 | DType::F16 | DType::BF16);
        if !float(w) || terms.iter().any(|t| !float(t.a) || !float(t.b)) {
            return Err(Error::Usage(format!(
                "a LoRA merges only into F32, F16 or BF16 weights (this one is {w})"
            )));
        }
        Ok(LoraMerge {
            w,
            rows,
            cols,
            terms,
            block: BLOCK,
            id: factors::next_id(),
        })
    }

    /// The input ranges of term `t` for weight rows `rows`.
    fn factor_ranges(&self, t: &LoraTerm, rows: Range<u64>) -> [Range<u64>; 2] {
        let a_len = t.rank * if t.transposed { self.rows } else { self.cols } * size(t.a);
        let b_row = t.rank * size(t.b);
        let b = if t.transposed {
            0..self.cols * b_row
        } else {
            rows.start * b_row..rows.end * b_row
        };
        [0..a_len, b]
    }

    /// The weight rows element range `out` (bytes) touches.
    fn rows_of(&self, out: &Range<u64>) -> Range<u64> {
        let el = size(self.w);
        let (e0, e1) = (out.start / el, out.end / el);
        e0 / self.cols..e1.div_ceil(self.cols)
    }

    /// The products of term `t` for weight rows `rows`, columns `cols`, into `out` (row-major):
    /// `(B @ A)[i, j]` (transposed: `[j, i]`) as [`product`] sums it. `f`'s rows of `B` start
    /// at weight row `row0`.
    fn delta(
        &self,
        t: &LoraTerm,
        f: &Factors,
        row0: u64,
        rows: Range<u64>,
        cols: Range<u64>,
        out: &mut Vec<f32>,
    ) {
        let r = t.rank as usize;
        let n = rows.end - rows.start;
        out.clear();
        out.resize((n * (cols.end - cols.start)) as usize, 0.0);
        let cols = cols.start as usize..cols.end as usize;
        if t.transposed {
            // (B @ A)[j, i] = Σ_k A[k, i] · B[j, k]: one scalar of A per (row, k), `f.b()` k-major.
            let s: Vec<f32> = (rows.start as usize..rows.end as usize)
                .flat_map(|i| (0..r).map(move |k| (k, i)))
                .map(|(k, i)| f.a()[k * self.rows as usize + i])
                .collect();
            let op = Operand {
                s: &s,
                rank: r,
                v: f.b(),
                stride: self.cols as usize,
                packed: Some(f.packed()),
            };
            product(op, cols, out);
        } else {
            let op = Operand {
                s: &f.b()[(rows.start - row0) as usize * r..][..n as usize * r],
                rank: r,
                v: f.a(),
                stride: self.cols as usize,
                packed: Some(f.packed()),
            };
            product(op, cols, out);
        }
    }

    /// The weight rows and columns whose deltas the elements `e0..e1` need: the columns of one
    /// row when the range stays in a row, else whole rows.
    fn block(&self, e0: u64, e1: u64) -> (Range<u64>, Range<u64>) {
        let rows = e0 / self.cols..e1.div_ceil(self.cols);
        if rows.end - rows.start == 1 {
            let j0 = e0 % self.cols;
            (rows, j0..j0 + (e1 - e0))
        } else {
            (rows, 0..self.cols)
        }
    }

    /// Adds term `t`'s deltas (its products times its scale) of the elements `elems` to their
    /// values `x`.
    fn add_delta(
        &self,
        t: &LoraTerm,
        f: &Factors,
        row0: u64,
        elems: Range<u64>,
        x: &mut [f32],
        delta: &mut Vec<f32>,
    ) {
        let (rows, cols) = self.block(elems.start, elems.end);
        self.delta(t, f, row0, rows.clone(), cols.clone(), delta);
        // The block is the columns of one row or whole rows, so element `e`'s delta sits at
        // `e - (rows.start · cols + cols.start)` either way: one contiguous run.
        let first = (elems.start - (rows.start * self.cols + cols.start)) as usize;
        // A delta is the product times the scale (rounded to the weight's type for an
        // embedding), then added: two roundings, as PEFT's separate `*` and `+=` (no fused
        // multiply-add here).
        let scale = t.scale as f32;
        let pairs = x.iter_mut().zip(&delta[first..]);
        match t.round_to_weight {
            true => pairs.for_each(|(x, d)| *x += round(self.w, d * scale)),
            false => pairs.for_each(|(x, d)| *x += d * scale),
        }
    }
}

/// Elements of a weight merged at a time (whole rows, at least one): 512 KiB of f32 values
/// and as much of deltas per worker.
const BLOCK: u64 = 128 << 10;

/// Rows the product computes together (a multiple of [`product`]'s tiles).
const TILE_ROWS: u64 = product::BLOCK_ROWS as u64;

fn cast_error(e: weightport_quant::QuantError) -> Error {
    Error::Internal(format!("LoRA merge: {e}"))
}

impl Transform for LoraMerge {
    fn describe(&self) -> String {
        let n = self.terms.len();
        format!("+ LoRA ({n} adapter{})", if n == 1 { "" } else { "s" })
    }

    fn unit(&self) -> u64 {
        size(self.w)
    }

    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        let rows = self.rows_of(&out);
        let mut v = vec![(0, out)];
        for (k, t) in self.terms.iter().enumerate() {
            let [a, b] = self.factor_ranges(t, rows.clone());
            v.push((1 + 2 * k, a));
            v.push((2 + 2 * k, b));
        }
        v
    }

    fn apply(&self, out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        let el = size(self.w);
        let (e0, e1) = (out.start / el, out.end / el);
        let row0 = self.rows_of(&out).start;
        let factors = factors_of(self.id, &self.terms, inputs, self.cols)?;
        // A few rows at a time, so the f32 values and deltas stay small (and in cache).
        // Whole tiles of rows (a short last tile is padded with zero rows).
        let tiles = (self.block / self.cols / TILE_ROWS).max(1);
        let step = tiles * TILE_ROWS * self.cols;
        let (mut x, mut delta) = (Vec::new(), Vec::new());
        let mut e = e0;
        while e < e1 {
            let end = e1.min((e / self.cols) * self.cols + step);
            let at = ((e - e0) * el) as usize..((end - e0) * el) as usize;
            x.resize((end - e) as usize, 0.0);
            decode_f32(self.w, &inputs[0][at.clone()], &mut x, CastRule::Torch)
                .map_err(cast_error)?;
            for (k, (t, f)) in self.terms.iter().zip(&factors).enumerate() {
                self.add_delta(t, f, row0, e..end, &mut x, &mut delta);
                // torch's in-place `+=` rounds to the weight's type after each adapter; the
                // last rounding is the store's.
                if k + 1 < self.terms.len() {
                    x.iter_mut().for_each(|v| *v = round(self.w, *v));
                }
            }
            store_f32(self.w, &x, &mut dst[at], CastRule::Torch).map_err(cast_error)?;
            e = end;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(d: DType, x: f32, out: &mut [u8]) {
        match d {
            DType::F16 => out.copy_from_slice(&f32_to_f16(x, F16Nan::KeepPayload).to_le_bytes()),
            DType::BF16 => out.copy_from_slice(&f32_to_bf16(x, Bf16Rounding::Torch).to_le_bytes()),
            _ => out.copy_from_slice(&x.to_le_bytes()),
        }
    }

    /// A 2×3 F32 weight plus a rank-1 product, by hand.
    #[test]
    fn merges_a_rank_one_product_by_rows() {
        let term = LoraTerm {
            a: DType::F32,
            b: DType::F32,
            rank: 1,
            scale: 2.0,
            transposed: false,
            round_to_weight: false,
        };
        let m = LoraMerge::new(DType::F32, 2, 3, vec![term]).unwrap();
        let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let (w, a, b) = (
            f(&[1., 2., 3., 4., 5., 6.]),
            f(&[1., 10., 100.]),
            f(&[1., -1.]),
        );
        // The second row only: elements 3..6.
        let needs = m.needs(12..24);
        assert_eq!(needs, vec![(0, 12..24), (1, 0..12), (2, 4..8)]);
        let mut out = vec![0u8; 12];
        m.apply(12..24, &[&w[12..24], &a, &b[4..8]], &mut out)
            .unwrap();
        assert_eq!(out, f(&[4. - 2., 5. - 20., 6. - 200.]));
    }

    /// Chunks that start and end inside rows give the bytes of one whole pass, for a product
    /// and a transposed one, F16 and BF16 weights, two adapters.
    #[test]
    fn chunks_cut_inside_rows_equal_one_pass() {
        let (rows, cols, r) = (3u64, 5u64, 2u64);
        let vals = |n: u64, s: f32| -> Vec<u8> {
            (0..n)
                .flat_map(|i| ((i as f32 * 0.37 + s).sin()).to_le_bytes())
                .collect()
        };
        for w in [DType::F16, DType::BF16] {
            let wb: Vec<u8> = (0..rows * cols)
                .flat_map(|i| {
                    let x = (i as f32 * 0.11).cos();
                    let mut o = [0u8; 2];
                    store(w, x, &mut o);
                    o
                })
                .collect();
            let term = |transposed| LoraTerm {
                a: DType::F32,
                b: DType::F32,
                rank: r,
                scale: 0.75,
                transposed,
                round_to_weight: transposed,
            };
            let mut m = LoraMerge::new(w, rows, cols, vec![term(false), term(true)]).unwrap();
            let (a1, b1) = (vals(r * cols, 1.0), vals(rows * r, 2.0));
            let (a2, b2) = (vals(r * rows, 3.0), vals(cols * r, 4.0));
            let all = [&wb[..], &a1[..], &b1[..], &a2[..], &b2[..]];
            let run = |m: &LoraMerge, range: Range<u64>| {
                let needs = m.needs(range.clone());
                let ins: Vec<&[u8]> = needs
                    .iter()
                    .map(|(k, rg)| &all[*k][rg.start as usize..rg.end as usize])
                    .collect();
                let mut out = vec![0u8; (range.end - range.start) as usize];
                m.apply(range, &ins, &mut out).unwrap();
                out
            };
            let whole = run(&m, 0..rows * cols * 2);
            let pieces: Vec<u8> = (0..rows * cols * 2)
                .step_by(6)
                .flat_map(|s| run(&m, s..(s + 6).min(rows * cols * 2)))
                .collect();
            assert_eq!(whole, pieces, "{w}");
            // A row (or two) at a time: the same bytes.
            for block in [1, 12] {
                m.block = block;
                assert_eq!(run(&m, 0..rows * cols * 2), whole, "{w}, block {block}");
                m.block = BLOCK;
            }
            assert_ne!(whole, wb);
        }
    }
}
