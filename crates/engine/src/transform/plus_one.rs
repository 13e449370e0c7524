//! Adding 1 to every value (Gemma's norm weights), as the reference converter does.

use std::ops::Range;

use weightport_core::{CastRule, DType, Result};
use weightport_quant::cast::{bf16_to_f32, f16_to_f32_by, f32_to_f16};

use super::Transform;

/// Adds 1 to every value (Gemma's norm weights, stored as `w` and used as `1 + w`), the way the
/// reference converter does: an F16 tensor in F16 (the sum rounded to nearest even), anything
/// else in F32 (BF16 widened first). The conversions are torch's ([`PlusOne::RULE`]).
pub(crate) struct PlusOne {
    from: DType,
    /// F16 for an F16 input, else F32.
    pub out: DType,
}

impl PlusOne {
    /// `+1` for a float tensor of type `from`.
    pub(crate) fn new(from: DType) -> Result<PlusOne> {
        let out = match from {
            DType::F16 => DType::F16,
            DType::F32 | DType::BF16 => DType::F32,
            other => {
                return Err(weightport_core::Error::Usage(format!(
                    "cannot add 1 to a {other} tensor"
                )))
            }
        };
        Ok(PlusOne { from, out })
    }

    /// The reference adds in torch: its f16 ↔ f32 conversions, NaN payloads included.
    pub(crate) const RULE: CastRule = CastRule::Torch;

    fn size(d: DType) -> u64 {
        u64::from(d.elem_bytes().unwrap_or(4))
    }
}

impl Transform for PlusOne {
    fn describe(&self) -> String {
        "1 + w".into()
    }

    fn unit(&self) -> u64 {
        Self::size(self.out)
    }

    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        let (i, o) = (Self::size(self.from), Self::size(self.out));
        vec![(0, out.start / o * i..out.end / o * i)]
    }

    fn apply(&self, _out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        let src = inputs[0];
        match (self.from, self.out) {
            (DType::F16, _) => {
                for (o, b) in dst.chunks_exact_mut(2).zip(src.chunks_exact(2)) {
                    let v = f16_to_f32_by(u16::from_le_bytes([b[0], b[1]]), Self::RULE) + 1.0;
                    o.copy_from_slice(&f32_to_f16(v, Self::RULE.into()).to_le_bytes());
                }
            }
            (DType::BF16, _) => {
                for (o, b) in dst.chunks_exact_mut(4).zip(src.chunks_exact(2)) {
                    let v = bf16_to_f32(u16::from_le_bytes([b[0], b[1]])) + 1.0;
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            _ => {
                for (o, b) in dst.chunks_exact_mut(4).zip(src.chunks_exact(4)) {
                    let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]) + 1.0;
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        Ok(())
    }
}
