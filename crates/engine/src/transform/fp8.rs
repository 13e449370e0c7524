//! The F32 values of a scaled weight of an FP8 release: element `e` is `weight[e] · scale[s(e)]`
//! in float32, `s` taking each dimension's index divided by its block (the reference's
//! `dequant_simple`: the scale repeated over each block, cropped at the weight's edges, and
//! multiplied). Inputs: 0 the weight's bytes (F8_E4M3, F8_E5M2, F16, BF16 or F32), 1 the scale's
//! (F32, BF16 or F16); output F32. Any element range is computed from the weight bytes under it
//! and the run of the scale between the first and the last scale value those elements' rows
//! take.

use std::ops::Range;

use half::{bf16, f16};
use weightport_core::{DType, Error, Result};

use super::Transform;

/// `weight · scale` per element, as F32.
pub(crate) struct Fp8Dequant {
    weight: DType,
    scale: DType,
    /// Per weight dimension: its size, the scale's size on it, and the block.
    dims: Vec<Dim>,
    /// F32 of each byte value, for one-byte weights.
    table: Option<Box<[f32; 256]>>,
}

#[derive(Clone, Copy)]
struct Dim {
    size: u64,
    scale_size: u64,
    block: u64,
}

impl Fp8Dequant {
    /// The dequantization of a `weight`-typed tensor of `shape` by a `scale`-typed tensor, with
    /// `dims` per dimension `(scale size, block)` (`weightport_arch::fp8::Dequant::dims`).
    pub(crate) fn new(
        weight: DType,
        scale: DType,
        shape: &[u64],
        dims: &[(u64, u64)],
    ) -> Result<Self> {
        let table = match weight {
            DType::F8_E4M3 => Some(table_of(|b| float8::F8E4M3::from_bits(b).to_f32(), 3)),
            DType::F8_E5M2 => Some(table_of(|b| float8::F8E5M2::from_bits(b).to_f32(), 2)),
            DType::F16 | DType::BF16 | DType::F32 => None,
            d => {
                return Err(Error::Internal(format!(
                    "no FP8 dequantization from {}",
                    d.name()
                )))
            }
        };
        if !matches!(scale, DType::F32 | DType::BF16 | DType::F16) || shape.len() != dims.len() {
            return Err(Error::Internal("FP8 scale type or shape".into()));
        }
        let dims = shape
            .iter()
            .zip(dims)
            .map(|(&size, &(scale_size, block))| Dim {
                size: size.max(1),
                scale_size,
                block: block.max(1),
            })
            .collect();
        Ok(Fp8Dequant {
            weight,
            scale,
            dims,
            table,
        })
    }

    /// The scale's flat index for the weight's flat element index `e`.
    fn scale_index(&self, mut e: u64) -> u64 {
        let (mut flat, mut stride) = (0, 1);
        for d in self.dims.iter().rev() {
            let i = e % d.size;
            e /= d.size;
            if d.scale_size > 1 {
                flat += (i / d.block) * stride;
                stride *= d.scale_size;
            }
        }
        flat
    }

    fn weight_value(&self, bytes: &[u8], i: usize) -> f32 {
        match (&self.table, self.weight) {
            (Some(t), _) => t[bytes[i] as usize],
            (None, DType::F16) => f16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32(),
            (None, DType::BF16) => bf16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32(),
            _ => f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap_or([0; 4])),
        }
    }

    fn scale_value(&self, bytes: &[u8], i: usize) -> f32 {
        match self.scale {
            DType::F16 => f16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32(),
            DType::BF16 => bf16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32(),
            _ => f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap_or([0; 4])),
        }
    }

    fn elements(out: &Range<u64>) -> Range<u64> {
        out.start / 4..out.end / 4
    }

    /// The scale indices elements `e` (not empty) take lie in `lo..=hi`: `lo` the index of the
    /// start of `e.start`'s row (of the last dimension), `hi` that of the end of the last
    /// element's row. (The index is not monotonic over rows: row `r + 1` starts again at the
    /// first block column; over whole rows it is bounded by these.)
    fn scale_span(&self, e: &Range<u64>) -> (u64, u64) {
        let cols = self.dims.last().map_or(1, |d| d.size);
        let first_row = e.start - e.start % cols;
        let last = e.end - 1;
        let last_row_end = last - last % cols + cols - 1;
        (self.scale_index(first_row), self.scale_index(last_row_end))
    }
}

/// `f` of each byte value, with torch's NaN bits: the `mantissa_bits` of a NaN byte kept at the
/// top of the float32 mantissa, quiet bit set (`float8_e4m3fn` 0x7f → 0x7ff00000), where the
/// `float8` crate returns another NaN. The values are otherwise the crate's (exact: every FP8
/// value is an f16 and an f32).
fn table_of(f: impl Fn(u8) -> f32, mantissa_bits: u32) -> Box<[f32; 256]> {
    let mut t = Box::new([0f32; 256]);
    for (b, v) in t.iter_mut().enumerate() {
        let x = f(b as u8);
        *v = if x.is_nan() {
            let sign = ((b as u32) >> 7) << 31;
            let mantissa = (b as u32) & ((1 << mantissa_bits) - 1);
            f32::from_bits(sign | 0x7fc0_0000 | (mantissa << (23 - mantissa_bits)))
        } else {
            x
        };
    }
    t
}

impl Transform for Fp8Dequant {
    fn describe(&self) -> String {
        format!("{}·scale→F32", self.weight.name())
    }
    fn unit(&self) -> u64 {
        4
    }
    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        let e = Self::elements(&out);
        let w = self.weight.byte_len(&[1]).unwrap_or(1);
        let s = self.scale.byte_len(&[1]).unwrap_or(4);
        if e.is_empty() {
            return vec![(0, 0..0), (1, 0..0)];
        }
        let (lo, hi) = self.scale_span(&e);
        vec![(0, e.start * w..e.end * w), (1, lo * s..(hi + 1) * s)]
    }
    fn apply(&self, out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        let e = Self::elements(&out);
        let (weight, scale) = (inputs[0], inputs[1]);
        if e.is_empty() {
            return Ok(());
        }
        let (base, _) = self.scale_span(&e);
        let width = self.scale.byte_len(&[1]).unwrap_or(4) as usize;
        let scales: Vec<f32> = (0..scale.len() / width)
            .map(|i| self.scale_value(scale, i))
            .collect();
        let last = self.dims.last().copied().unwrap_or(Dim {
            size: 1,
            scale_size: 1,
            block: 1,
        });
        let mut at = e.start;
        while at < e.end {
            // One row of the last dimension at a time, one block of it (one scale) at a time.
            let row = at - at % last.size;
            let row_end = (row + last.size).min(e.end);
            let row_scale = self.scale_index(row) - base;
            while at < row_end {
                let (k, seg_end) = if last.scale_size > 1 {
                    let b = (at - row) / last.block;
                    (row_scale + b, (row + (b + 1) * last.block).min(row_end))
                } else {
                    (row_scale, row_end)
                };
                let lo = (at - e.start) as usize;
                let hi = (seg_end - e.start) as usize;
                self.scale_run(weight, lo..hi, scales[k as usize], &mut dst[4 * lo..4 * hi]);
                at = seg_end;
            }
        }
        Ok(())
    }
}

impl Fp8Dequant {
    /// Weight elements `run` (indices into `weight`'s elements) times `s`, into `dst`.
    fn scale_run(&self, weight: &[u8], run: Range<usize>, s: f32, dst: &mut [u8]) {
        match &self.table {
            Some(t) => match bytemuck::try_cast_slice_mut::<u8, f32>(dst) {
                // Aligned (the executor's buffers are): stored as f32s, which vectorizes.
                Ok(out) if cfg!(target_endian = "little") => {
                    for (&b, o) in weight[run].iter().zip(out.iter_mut()) {
                        *o = t[b as usize] * s;
                    }
                }
                _ => {
                    for (&b, o) in weight[run].iter().zip(dst.chunks_exact_mut(4)) {
                        o.copy_from_slice(&(t[b as usize] * s).to_le_bytes());
                    }
                }
            },
            None => {
                for (i, o) in run.zip(dst.chunks_exact_mut(4)) {
                    o.copy_from_slice(&(self.weight_value(weight, i) * s).to_le_bytes());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// torch's float32 bits of each FP8 byte (fixtures/gen/gen_arch_fp8.py).
    fn torch_values(dtype: &str) -> Vec<u32> {
        let text = include_str!("../../../../fixtures/expected/arch/fp8_values.json");
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        v[dtype]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap() as u32)
            .collect()
    }

    #[test]
    fn fp8_tables_equal_torch_for_every_byte() {
        for (name, dtype) in [("F8_E4M3", DType::F8_E4M3), ("F8_E5M2", DType::F8_E5M2)] {
            let op = Fp8Dequant::new(dtype, DType::F32, &[1], &[(1, u64::MAX)]).unwrap();
            let table = op.table.unwrap();
            for (b, want) in torch_values(name).into_iter().enumerate() {
                let got = table[b];
                let same = got.to_bits() == want;
                assert!(
                    same,
                    "{name} byte {b:#04x}: {got} vs {}",
                    f32::from_bits(want)
                );
            }
        }
    }

    /// A [5, 7] E4M3 weight in 2×3 blocks (ragged on both axes): every sub-range computed from
    /// what `needs` names equals the same elements of the whole.
    #[test]
    fn every_range_equals_the_whole() {
        let (rows, cols) = (5u64, 7u64);
        let weight: Vec<u8> = (0..rows * cols).map(|i| (i * 37 % 120) as u8).collect();
        let scale: Vec<u8> = (0..3 * 3)
            .flat_map(|i| (1.0f32 + i as f32 * 0.25).to_le_bytes())
            .collect();
        let op =
            Fp8Dequant::new(DType::F8_E4M3, DType::F32, &[rows, cols], &[(3, 2), (3, 3)]).unwrap();
        let n = rows * cols * 4;
        let mut whole = vec![0u8; n as usize];
        op.apply(0..n, &[&weight, &scale], &mut whole).unwrap();
        for r in 0..rows {
            for c in 0..cols {
                let i = (r * cols + c) as usize;
                let s = 1.0 + ((r / 2) * 3 + c / 3) as f32 * 0.25;
                let want = float8::F8E4M3::from_bits(weight[i]).to_f32() * s;
                assert_eq!(whole[4 * i..4 * i + 4], want.to_le_bytes(), "({r}, {c})");
            }
        }
        for start in (0..n).step_by(4) {
            for end in (start + 4..=n).step_by(4) {
                let needs = op.needs(start..end);
                let ins: Vec<&[u8]> = needs
                    .iter()
                    .map(|(k, r)| {
                        let src = if *k == 0 { &weight } else { &scale };
                        &src[r.start as usize..r.end as usize]
                    })
                    .collect();
                let mut part = vec![0u8; (end - start) as usize];
                op.apply(start..end, &ins, &mut part).unwrap();
                assert_eq!(part, whole[start as usize..end as usize], "{start}..{end}");
            }
        }
    }
}
