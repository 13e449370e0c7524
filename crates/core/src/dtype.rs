//! Element types.
//!
//! One enum covers every type a supported container can hold: the 22 safetensors dtypes
//! (including the sub-byte `F4`/`F6_*` types and the FP8 family), and the ggml block-quantized
//! types of GGUF. Byte lengths are computed from a [`Layout`]: a fixed number of bits per
//! element for plain types, or `bytes` per block of `elems` elements (along the innermost
//! dimension) for block types. All arithmetic is checked.
//!
//! Names follow safetensors where a type exists there (`F32`, `BF16`, `F8_E4M3`, …) and ggml's
//! upper-case names otherwise (`Q4_0`, `Q4_K`, `IQ2_XXS`, …).

use std::fmt;

/// How a dtype's elements are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Every element occupies this many bits; a tensor's bit count must be a multiple of 8.
    Bits(u32),
    /// Elements are grouped along the innermost dimension into blocks of `elems`, each
    /// stored in `bytes` bytes. The innermost dimension must be a multiple of `elems`.
    Block {
        /// Elements per block.
        elems: u32,
        /// Bytes per block.
        bytes: u32,
    },
}

macro_rules! dtypes {
    ($( $(#[$doc:meta])* $v:ident = $name:literal, $layout:expr; )*) => {
        /// An element type (see the module docs for naming).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[allow(non_camel_case_types)]
        #[non_exhaustive]
        pub enum DType {
            $( $(#[$doc])* $v, )*
        }

        impl DType {
            /// Every dtype, in declaration order.
            pub const ALL: &'static [DType] = &[ $( DType::$v, )* ];

            /// The canonical name (`F32`, `Q4_K`, …).
            pub fn name(self) -> &'static str {
                match self { $( DType::$v => $name, )* }
            }

            /// Storage layout.
            pub fn layout(self) -> Layout {
                match self { $( DType::$v => $layout, )* }
            }
        }
    };
}

const fn bits(n: u32) -> Layout {
    Layout::Bits(n)
}
const fn block(elems: u32, bytes: u32) -> Layout {
    Layout::Block { elems, bytes }
}

dtypes! {
    /// Boolean, one byte.
    BOOL = "BOOL", bits(8);
    /// OCP MXFP4 E2M1, two per byte.
    F4 = "F4", bits(4);
    /// MXFP6 E2M3.
    F6_E2M3 = "F6_E2M3", bits(6);
    /// MXFP6 E3M2.
    F6_E3M2 = "F6_E3M2", bits(6);
    /// Unsigned 8-bit integer.
    U8 = "U8", bits(8);
    /// Signed 8-bit integer.
    I8 = "I8", bits(8);
    /// FP8 E5M2.
    F8_E5M2 = "F8_E5M2", bits(8);
    /// FP8 E4M3 (torch `float8_e4m3fn`).
    F8_E4M3 = "F8_E4M3", bits(8);
    /// FP8 E8M0 (MX scale).
    F8_E8M0 = "F8_E8M0", bits(8);
    /// FP8 E4M3 FNUZ.
    F8_E4M3FNUZ = "F8_E4M3FNUZ", bits(8);
    /// FP8 E5M2 FNUZ.
    F8_E5M2FNUZ = "F8_E5M2FNUZ", bits(8);
    /// Signed 16-bit integer.
    I16 = "I16", bits(16);
    /// Unsigned 16-bit integer.
    U16 = "U16", bits(16);
    /// IEEE binary16.
    F16 = "F16", bits(16);
    /// bfloat16.
    BF16 = "BF16", bits(16);
    /// Signed 32-bit integer.
    I32 = "I32", bits(32);
    /// Unsigned 32-bit integer.
    U32 = "U32", bits(32);
    /// IEEE binary32.
    F32 = "F32", bits(32);
    /// Complex of two binary32.
    C64 = "C64", bits(64);
    /// IEEE binary64.
    F64 = "F64", bits(64);
    /// Signed 64-bit integer.
    I64 = "I64", bits(64);
    /// Unsigned 64-bit integer.
    U64 = "U64", bits(64);
    /// ggml Q4_0.
    Q4_0 = "Q4_0", block(32, 18);
    /// ggml Q4_1.
    Q4_1 = "Q4_1", block(32, 20);
    /// ggml Q5_0.
    Q5_0 = "Q5_0", block(32, 22);
    /// ggml Q5_1.
    Q5_1 = "Q5_1", block(32, 24);
    /// ggml Q8_0.
    Q8_0 = "Q8_0", block(32, 34);
    /// ggml Q8_1.
    Q8_1 = "Q8_1", block(32, 36);
    /// ggml Q2_K.
    Q2_K = "Q2_K", block(256, 84);
    /// ggml Q3_K.
    Q3_K = "Q3_K", block(256, 110);
    /// ggml Q4_K.
    Q4_K = "Q4_K", block(256, 144);
    /// ggml Q5_K.
    Q5_K = "Q5_K", block(256, 176);
    /// ggml Q6_K.
    Q6_K = "Q6_K", block(256, 210);
    /// ggml Q8_K.
    Q8_K = "Q8_K", block(256, 292);
    /// ggml IQ2_XXS.
    IQ2_XXS = "IQ2_XXS", block(256, 66);
    /// ggml IQ2_XS.
    IQ2_XS = "IQ2_XS", block(256, 74);
    /// ggml IQ3_XXS.
    IQ3_XXS = "IQ3_XXS", block(256, 98);
    /// ggml IQ1_S.
    IQ1_S = "IQ1_S", block(256, 50);
    /// ggml IQ4_NL.
    IQ4_NL = "IQ4_NL", block(32, 18);
    /// ggml IQ3_S.
    IQ3_S = "IQ3_S", block(256, 110);
    /// ggml IQ2_S.
    IQ2_S = "IQ2_S", block(256, 82);
    /// ggml IQ4_XS.
    IQ4_XS = "IQ4_XS", block(256, 136);
    /// ggml IQ1_M.
    IQ1_M = "IQ1_M", block(256, 56);
    /// ggml TQ1_0.
    TQ1_0 = "TQ1_0", block(256, 54);
    /// ggml TQ2_0.
    TQ2_0 = "TQ2_0", block(256, 66);
    /// ggml MXFP4.
    MXFP4 = "MXFP4", block(32, 17);
    /// ggml NVFP4.
    NVFP4 = "NVFP4", block(64, 36);
    /// ggml Q1_0.
    Q1_0 = "Q1_0", block(128, 18);
    /// ggml Q2_0.
    Q2_0 = "Q2_0", block(64, 18);
}

const fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Why a shape cannot be stored in a dtype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeError {
    /// Element or byte count overflowed u64.
    Overflow,
    /// Sub-byte elements do not end on a byte boundary.
    Misaligned,
    /// The innermost dimension is not a multiple of the block size.
    Block {
        /// Innermost dimension.
        inner: u64,
        /// Elements per block.
        elems: u32,
    },
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeError::Overflow => {
                f.write_str("overflow computing the byte size from shape and dtype")
            }
            SizeError::Misaligned => f.write_str("sub-byte elements do not end on a byte boundary"),
            SizeError::Block { inner, elems } => write!(
                f,
                "innermost dimension {inner} is not a multiple of the block size {elems}"
            ),
        }
    }
}

impl DType {
    /// Parses a canonical name (case-sensitive).
    pub fn from_name(s: &str) -> Option<DType> {
        DType::ALL.iter().copied().find(|d| d.name() == s)
    }

    /// True for ggml block-quantized types.
    pub fn is_block(self) -> bool {
        matches!(self.layout(), Layout::Block { .. })
    }

    /// Size in bytes of one element, for whole-byte plain types.
    pub fn elem_bytes(self) -> Option<u32> {
        match self.layout() {
            Layout::Bits(b) if b % 8 == 0 => Some(b / 8),
            _ => None,
        }
    }

    /// The smallest run of bytes that holds whole elements (1 for sub-byte types, the block
    /// size for block types): chunk boundaries must fall on multiples of this.
    pub fn granule(self) -> u64 {
        match self.layout() {
            Layout::Bits(b) if b % 8 == 0 => u64::from(b / 8),
            // The smallest whole number of bytes holding whole elements: lcm(bits, 8) / 8
            // (F4: 1 byte per 2 elements; F6: 3 bytes per 4 elements).
            Layout::Bits(b) => u64::from(b * 8 / gcd(b, 8) / 8),
            Layout::Block { bytes, .. } => u64::from(bytes),
        }
    }

    /// Element count of `shape` (1 for a scalar), with checked multiplication left to right
    /// as the safetensors reference does.
    pub fn numel(shape: &[u64]) -> Result<u64, SizeError> {
        shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or(SizeError::Overflow)
    }

    /// Bytes needed to store a tensor of `shape`.
    pub fn byte_len(self, shape: &[u64]) -> Result<u64, SizeError> {
        let n = DType::numel(shape)?;
        match self.layout() {
            Layout::Bits(b) => {
                let nbits = n.checked_mul(u64::from(b)).ok_or(SizeError::Overflow)?;
                if nbits % 8 != 0 {
                    return Err(SizeError::Misaligned);
                }
                Ok(nbits / 8)
            }
            Layout::Block { elems, bytes } => {
                let inner = shape.last().copied().unwrap_or(1);
                if inner % u64::from(elems) != 0 {
                    return Err(SizeError::Block { inner, elems });
                }
                (n / u64::from(elems))
                    .checked_mul(u64::from(bytes))
                    .ok_or(SizeError::Overflow)
            }
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whose floating-point conversions a cast reproduces. All three round finite values to nearest
/// even and keep ±inf and subnormals; they differ only in the bits a NaN becomes (the table is
/// in `weightport_quant::cast`). An output format names the rule of the tool it reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CastRule {
    /// torch's CPU `.to(dtype)`: what safetensors outputs (`save_file`, `save_pretrained`) hold.
    #[default]
    Torch,
    /// ggml's C conversions (`ggml_fp32_to_fp16`, `ggml_compute_fp32_to_bf16`): what
    /// llama-quantize writes (`--quant F16`, its F16 fallbacks).
    Ggml,
    /// numpy's `astype` (f32 ↔ f16) and gguf-py's numpy port of ggml's BF16 rounding: what
    /// convert_hf_to_gguf.py writes.
    Numpy,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        for &d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        let mut names: Vec<_> = DType::ALL.iter().map(|d| d.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DType::ALL.len());
        assert_eq!(DType::from_name("f32"), None);
    }

    #[test]
    fn sub_byte_rules_match_the_reference() {
        // docs/specs/safetensors.md §1.4: F4 [3] is misaligned, F4 [4] is 2 bytes, F6 [4] is 3 bytes, F6 [2] fails.
        assert_eq!(DType::F4.byte_len(&[3]), Err(SizeError::Misaligned));
        assert_eq!(DType::F4.byte_len(&[4]), Ok(2));
        assert_eq!(DType::F6_E2M3.byte_len(&[4]), Ok(3));
        assert_eq!(DType::F6_E3M2.byte_len(&[2]), Err(SizeError::Misaligned));
        assert_eq!(DType::F4.byte_len(&[1, 2]), Ok(1));
    }

    #[test]
    fn overflow_is_order_dependent_like_the_reference() {
        assert_eq!(DType::F32.byte_len(&[0, u64::MAX]), Ok(0));
        assert_eq!(DType::F32.byte_len(&[u64::MAX, 0]), Ok(0));
        assert_eq!(
            DType::F32.byte_len(&[u64::MAX, 2, 0]),
            Err(SizeError::Overflow)
        );
        assert_eq!(
            DType::I32.byte_len(&[2, (1 << 63) - 1]),
            Err(SizeError::Overflow)
        );
        assert_eq!(DType::F32.byte_len(&[]), Ok(4));
    }

    #[test]
    fn block_types_count_bytes_per_block() {
        assert_eq!(DType::Q4_0.byte_len(&[2, 64]), Ok(2 * 2 * 18));
        assert_eq!(DType::Q4_K.byte_len(&[3, 512]), Ok(3 * 2 * 144));
        assert!(matches!(
            DType::Q4_K.byte_len(&[4, 100]),
            Err(SizeError::Block { .. })
        ));
        assert_eq!(DType::Q8_0.granule(), 34);
    }
}
