//! Rows multiplied by factors (Falcon-H1's µP multipliers), as the reference converter does.

use std::ops::Range;

use weightport_arch::RowScale;
use weightport_core::{CastRule, DType, Result};
use weightport_quant::cast::{bf16_to_f32, f16_to_f32_by, f32_to_f16};

use super::Transform;

/// Multiplies the rows of each band by its factors, one after another, as torch's
/// `tensor * python_float` (and `tensor[a:b] *= python_float`) does: the factor rounded to f32,
/// one f32 multiply, the result stored in the tensor's type each time (an F16 tensor in F16,
/// anything else in F32: the reference widened BF16 first). Rows in no band keep their values.
pub(crate) struct Scale {
    from: DType,
    /// F16 for an F16 input, else F32.
    pub out: DType,
    /// Elements per row.
    row: u64,
    /// `(rows, factors as f32)`.
    bands: Vec<(Range<u64>, Vec<f32>)>,
}

impl Scale {
    /// The scaling of a float tensor of type `from` with `row` elements per row.
    pub(crate) fn new(from: DType, row: u64, bands: &[RowScale]) -> Result<Scale> {
        let out = match from {
            DType::F16 => DType::F16,
            DType::F32 | DType::BF16 => DType::F32,
            other => {
                return Err(weightport_core::Error::Usage(format!(
                    "cannot scale a {other} tensor"
                )))
            }
        };
        let bands = bands
            .iter()
            .map(|b| {
                (
                    b.rows.clone(),
                    b.factors.iter().map(|&f| f as f32).collect(),
                )
            })
            .collect();
        Ok(Scale {
            from,
            out,
            row: row.max(1),
            bands,
        })
    }

    fn size(d: DType) -> u64 {
        u64::from(d.elem_bytes().unwrap_or(4))
    }

    /// The factors of element `e`.
    fn factors(&self, e: u64) -> &[f32] {
        let r = e / self.row;
        self.bands
            .iter()
            .find(|(rows, _)| rows.contains(&r))
            .map_or(&[], |(_, f)| f.as_slice())
    }
}

impl Transform for Scale {
    fn describe(&self) -> String {
        "w × multipliers".into()
    }

    fn unit(&self) -> u64 {
        Self::size(self.out)
    }

    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        let (i, o) = (Self::size(self.from), Self::size(self.out));
        vec![(0, out.start / o * i..out.end / o * i)]
    }

    fn apply(&self, out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        let src = inputs[0];
        let first = out.start / Self::size(self.out);
        match self.from {
            DType::F16 => {
                for (k, (o, b)) in dst.chunks_exact_mut(2).zip(src.chunks_exact(2)).enumerate() {
                    let mut h = u16::from_le_bytes([b[0], b[1]]);
                    for &f in self.factors(first + k as u64) {
                        let v = f16_to_f32_by(h, CastRule::Torch) * f;
                        h = f32_to_f16(v, CastRule::Torch.into());
                    }
                    o.copy_from_slice(&h.to_le_bytes());
                }
            }
            DType::BF16 => {
                for (k, (o, b)) in dst.chunks_exact_mut(4).zip(src.chunks_exact(2)).enumerate() {
                    let mut v = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
                    for &f in self.factors(first + k as u64) {
                        v *= f;
                    }
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            _ => {
                for (k, (o, b)) in dst.chunks_exact_mut(4).zip(src.chunks_exact(4)).enumerate() {
                    let mut v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    for &f in self.factors(first + k as u64) {
                        v *= f;
                    }
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        Ok(())
    }
}
