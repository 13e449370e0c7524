//! `A = -exp(A_log)`, the SSM families' state matrix, as the reference converter computes it
//! (`-torch.exp(data_torch)` in `conversion/mamba.py` and its hybrids).
//!
//! The reference computes in the tensor's own type after widening BF16 to F32: F32 for a BF16
//! or F32 tensor, F16 for an F16 one. torch 2.15's float32 exp on x86-64 is MKL's vector exp,
//! which is within one unit in the last place but not correctly rounded: for 45 of the 65,536
//! BF16 inputs it differs from `exp` rounded to nearest. [`exp_f32`] is libm's f64 exp rounded
//! to f32 with those 45 results replaced by torch's ([`TORCH_EXP_BF16`], listed by
//! `fixtures/gen/gen_neg_exp.py`); its results equal torch's for every BF16 input and, rounded
//! to F16, for every F16 input (the exhaustive tests below, against the digests of
//! `fixtures/expected/neg_exp.json`). An F32 input off the BF16 grid may differ from torch's by
//! one unit in the last place (about 1% of such inputs: docs/design-notes.md, "`A_log`").

use std::ops::Range;

use weightport_core::{CastRule, DType, Result};
use weightport_quant::cast::{bf16_to_f32, f16_to_f32_by, f32_to_f16};

use super::Transform;

/// The BF16 inputs (bit patterns) whose torch float32 exp is not libm's f64 exp rounded to f32,
/// with torch's result bits (`fixtures/gen/gen_neg_exp.py`), sorted by input.
const TORCH_EXP_BF16: &[(u16, u32)] = &[
    (0x3380, 0x3F800000), // exp(5.9604645e-08) = 1.0
    (0x3AD9, 0x3F80364B), // exp(0.0016555786) = 1.0016569
    (0x3B49, 0x3F8064A8), // exp(0.0030670166) = 1.0030718
    (0x3B4E, 0x3F80672A), // exp(0.0031433105) = 1.0031483
    (0x3B61, 0x3F8070B2), // exp(0.0034332275) = 1.0034392
    (0x3DF0, 0x3F8FEA0E), // exp(0.1171875) = 1.1243303
    (0x3E43, 0x3F9AD9B8), // exp(0.19042969) = 1.2097692
    (0x3EC1, 0x3FBA9A5F), // exp(0.37695312) = 1.457836
    (0x3ED7, 0x3FC2CBBE), // exp(0.41992188) = 1.5218427
    (0x3F7A, 0x4029F0A5), // exp(0.9765625) = 2.6553128
    (0x3FB6, 0x4084A2E6), // exp(1.421875) = 4.144885
    (0x404C, 0x41C1D280), // exp(3.1875) = 24.227783
    (0x4070, 0x422A1596), // exp(3.75) = 42.52108
    (0x4079, 0x4243C40F), // exp(3.890625) = 48.941463
    (0x407F, 0x425701BA), // exp(3.984375) = 53.751686
    (0x40AC, 0x4357F09C), // exp(5.375) = 215.93988
    (0x40E1, 0x448D6E35), // exp(7.03125) = 1131.444
    (0x40E5, 0x44A04303), // exp(7.15625) = 1282.0941
    (0x4226, 0x5D6A3D77), // exp(41.5) = 1.0549236e+18
    (0x425D, 0x67513937), // exp(55.25) = 9.8803e+23
    (0x4279, 0x6C60105A), // exp(62.25) = 1.0835064e+27
    (0x428F, 0x730E4A5E), // exp(71.5) = 1.1273415e+31
    (0xBAE9, 0x3F7F8B9B), // exp(-0.0017776489) = 0.99822396
    (0xBAFA, 0x3F7F831F), // exp(-0.0019073486) = 0.9980945
    (0xBAFE, 0x3F7F8120), // exp(-0.0019378662) = 0.99806404
    (0xBB03, 0x3F7F7D22), // exp(-0.0019989014) = 0.9980031
    (0xBB17, 0x3F7F692D), // exp(-0.0023040771) = 0.9976986
    (0xBB1C, 0x3F7F6430), // exp(-0.002380371) = 0.9976225
    (0xBB24, 0x3F7F5C35), // exp(-0.0025024414) = 0.9975007
    (0xBB33, 0x3F7F4D3E), // exp(-0.0027313232) = 0.9972724
    (0xBB3A, 0x3F7F4643), // exp(-0.0028381348) = 0.99716586
    (0xBB55, 0x3F7F2B58), // exp(-0.003250122) = 0.9967551
    (0xBC0D, 0x3F7DCE6B), // exp(-0.008605957) = 0.99143094
    (0xBC42, 0x3F7CFC94), // exp(-0.01184082) = 0.98822904
    (0xBC69, 0x3F7C6298), // exp(-0.014221191) = 0.9858794
    (0xBC9D, 0x3F7B23F5), // exp(-0.019165039) = 0.9810174
    (0xBC9E, 0x3F7B1C1C), // exp(-0.01928711) = 0.98089767
    (0xBCC5, 0x3F79EACD), // exp(-0.024047852) = 0.976239
    (0xBD0E, 0x3F7746EF), // exp(-0.03466797) = 0.9659261
    (0xBD11, 0x3F771895), // exp(-0.03540039) = 0.96521884
    (0xBD95, 0x3F6E0951), // exp(-0.072753906) = 0.92982966
    (0xBDC2, 0x3F68DCF7), // exp(-0.09472656) = 0.90962166
    (0xBE0D, 0x3F5F11B9), // exp(-0.13769531) = 0.8713642
    (0xBF52, 0x3EE16E39), // exp(-0.8203125) = 0.44029406
    (0xBF67, 0x3ECFAD25), // exp(-0.90234375) = 0.40561786
];

/// torch's float32 `exp(x)` (see the module documentation): NaN stays the same NaN, made quiet.
pub(crate) fn exp_f32(x: f32) -> f32 {
    if x.is_nan() {
        return f32::from_bits(x.to_bits() | 0x0040_0000);
    }
    let bits = x.to_bits();
    if bits & 0xFFFF == 0 {
        let hi = (bits >> 16) as u16;
        if let Ok(i) = TORCH_EXP_BF16.binary_search_by_key(&hi, |&(k, _)| k) {
            return f32::from_bits(TORCH_EXP_BF16[i].1);
        }
    }
    libm::exp(f64::from(x)) as f32
}

/// `-exp(x)` of an F16 value in F16, as torch computes it: widened, [`exp_f32`], rounded to
/// nearest even (NaN made quiet).
pub(crate) fn neg_exp_f16(h: u16) -> u16 {
    let x = f16_to_f32_by(h, CastRule::Torch);
    if x.is_nan() {
        return (h | 0x0200) ^ 0x8000;
    }
    f32_to_f16(-exp_f32(x), CastRule::Torch.into())
}

/// `-exp(w)` of every value: an F16 tensor in F16, anything else in F32 (BF16 widened first).
pub(crate) struct NegExp {
    from: DType,
    /// F16 for an F16 input, else F32.
    pub out: DType,
}

impl NegExp {
    /// `-exp(w)` for a float tensor of type `from`.
    pub(crate) fn new(from: DType) -> Result<NegExp> {
        let out = match from {
            DType::F16 => DType::F16,
            DType::F32 | DType::BF16 => DType::F32,
            other => {
                return Err(weightport_core::Error::Usage(format!(
                    "cannot take -exp of a {other} tensor"
                )))
            }
        };
        Ok(NegExp { from, out })
    }

    fn size(d: DType) -> u64 {
        u64::from(d.elem_bytes().unwrap_or(4))
    }
}

impl Transform for NegExp {
    fn describe(&self) -> String {
        "-exp(w)".into()
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
        match self.from {
            DType::F16 => {
                for (o, b) in dst.chunks_exact_mut(2).zip(src.chunks_exact(2)) {
                    o.copy_from_slice(&neg_exp_f16(u16::from_le_bytes([b[0], b[1]])).to_le_bytes());
                }
            }
            DType::BF16 => {
                for (o, b) in dst.chunks_exact_mut(4).zip(src.chunks_exact(2)) {
                    let v = -exp_f32(bf16_to_f32(u16::from_le_bytes([b[0], b[1]])));
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            _ => {
                for (o, b) in dst.chunks_exact_mut(4).zip(src.chunks_exact(4)) {
                    let v = -exp_f32(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn expected(key: &str) -> String {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/expected/neg_exp.json"
        );
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        v[key].as_str().unwrap().to_owned()
    }

    /// Every BF16 input, widened to F32: the bytes torch's `-torch.exp` gave, all 65,536.
    #[test]
    fn every_bf16_input_matches_torch() {
        let src: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
        let t = NegExp::new(DType::BF16).unwrap();
        let mut dst = vec![0u8; src.len() * 2];
        t.apply(0..dst.len() as u64, &[&src], &mut dst).unwrap();
        assert_eq!(hex(&Sha256::digest(&dst)), expected("bf16_as_f32"));
    }

    /// Every F16 input, computed in F16: the bytes torch's `-torch.exp` gave, all 65,536.
    #[test]
    fn every_f16_input_matches_torch() {
        let src: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
        let t = NegExp::new(DType::F16).unwrap();
        let mut dst = vec![0u8; src.len()];
        t.apply(0..dst.len() as u64, &[&src], &mut dst).unwrap();
        assert_eq!(hex(&Sha256::digest(&dst)), expected("f16"));
    }

    /// The table is what makes the BF16 inputs match: without it, its entries differ.
    #[test]
    fn the_table_entries_are_not_libms() {
        for &(k, v) in TORCH_EXP_BF16 {
            let x = bf16_to_f32(k);
            assert_ne!((libm::exp(f64::from(x)) as f32).to_bits(), v, "{x}");
            assert_eq!(exp_f32(x).to_bits(), v);
        }
        assert!(TORCH_EXP_BF16.windows(2).all(|w| w[0].0 < w[1].0));
    }

    fn hex(d: &[u8]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }
}
