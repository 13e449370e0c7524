//! ggml block layouts (`ggml/src/ggml-common.h`), byte for byte.
//!
//! Every field is a byte array, so each struct has alignment 1, no padding, and every bit
//! pattern is valid (`bytemuck::Pod`, which its derive checks): a `&[u8]` of whole blocks can be
//! viewed as a block slice with [`as_blocks`]/[`as_blocks_mut`]. Multi-byte fields are little-endian: `ggml_half` (IEEE
//! binary16) as `[u8; 2]`, Q8_K's `float d` as `[u8; 4]`, `uint16_t`/`int16_t` arrays as byte
//! arrays of twice the length.

use std::mem::{align_of, size_of};

use bytemuck::{Pod, Zeroable};

/// A ggml block: `#[repr(C)]`, alignment 1, every bit pattern valid.
pub(crate) trait Block: Pod {}

macro_rules! block {
    ($(#[$doc:meta])* $name:ident, $elems:expr, $size:expr, { $($(#[$fdoc:meta])* $f:ident : [u8; $n:expr]),* $(,)? }) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
        pub(crate) struct $name { $($(#[$fdoc])* pub(crate) $f: [u8; $n],)* }
        const _: () = assert!(size_of::<$name>() == $size);
        const _: () = assert!(align_of::<$name>() == 1);
        // ggml blocks hold a power of two of elements: 32 for most, 256 for the k-quants.
        const _: () = assert!(($elems as usize).is_power_of_two() && $elems >= 32);
        impl Block for $name {}
    };
}

block!(/// Q4_0: 32 elements, `((q & 15) - 8) * d`.
    BlockQ4_0, 32, 18, { /// scale (f16)
    d: [u8; 2], /// element j in the low nibble of byte j, element j+16 in the high nibble
    qs: [u8; 16] });
block!(/// Q4_1: 32 elements, `q * d + m`.
    BlockQ4_1, 32, 20, { /// scale (f16)
    d: [u8; 2], /// minimum (f16)
    m: [u8; 2], /// nibbles as in Q4_0
    qs: [u8; 16] });
block!(/// Q5_0: 32 elements, `(q5 - 16) * d`.
    BlockQ5_0, 32, 22, { /// scale (f16)
    d: [u8; 2], /// bit 4 of element i is bit i of this LE u32
    qh: [u8; 4], /// low nibbles as in Q4_0
    qs: [u8; 16] });
block!(/// Q5_1: 32 elements, `q5 * d + m`.
    BlockQ5_1, 32, 24, { /// scale (f16)
    d: [u8; 2], /// minimum (f16)
    m: [u8; 2], /// bit 4 of element i is bit i of this LE u32
    qh: [u8; 4], /// low nibbles as in Q4_0
    qs: [u8; 16] });
block!(/// Q8_0: 32 elements, `qs * d`.
    BlockQ8_0, 32, 34, { /// scale (f16)
    d: [u8; 2], /// signed quants (i8)
    qs: [u8; 32] });
block!(/// Q8_1: 32 elements, `qs * d`, plus `s = d * Σqs` (used by ggml's dot products only).
    BlockQ8_1, 32, 36, { /// scale (f16)
    d: [u8; 2], /// `d * sum(qs)` (f16)
    s: [u8; 2], /// signed quants (i8)
    qs: [u8; 32] });
block!(/// Q2_K: 256 elements in 16 sub-blocks of 16.
    BlockQ2K, 256, 84, { /// per sub-block: scale (low nibble) | min (high nibble)
    scales: [u8; 16], /// 2-bit quants
    qs: [u8; 64], /// super-block scale for scales (f16)
    d: [u8; 2], /// super-block scale for mins (f16)
    dmin: [u8; 2] });
block!(/// Q3_K: 256 elements in 16 sub-blocks of 16.
    BlockQ3K, 256, 110, { /// high bit of each quant
    hmask: [u8; 32], /// low 2 bits of each quant
    qs: [u8; 64], /// 16 six-bit scales
    scales: [u8; 12], /// super-block scale (f16)
    d: [u8; 2] });
block!(/// Q4_K: 256 elements in 8 sub-blocks of 32.
    BlockQ4K, 256, 144, { /// super-block scale for scales (f16)
    d: [u8; 2], /// super-block scale for mins (f16)
    dmin: [u8; 2], /// 8 six-bit scales and 8 six-bit mins
    scales: [u8; 12], /// 4-bit quants
    qs: [u8; 128] });
block!(/// Q5_K: 256 elements in 8 sub-blocks of 32.
    BlockQ5K, 256, 176, { /// super-block scale for scales (f16)
    d: [u8; 2], /// super-block scale for mins (f16)
    dmin: [u8; 2], /// 8 six-bit scales and 8 six-bit mins
    scales: [u8; 12], /// bit 4 of each quant
    qh: [u8; 32], /// low 4 bits of each quant
    qs: [u8; 128] });
block!(/// Q6_K: 256 elements in 16 sub-blocks of 16.
    BlockQ6K, 256, 210, { /// low 4 bits of each quant
    ql: [u8; 128], /// high 2 bits of each quant
    qh: [u8; 64], /// signed 8-bit sub-block scales (i8)
    scales: [u8; 16], /// super-block scale (f16)
    d: [u8; 2] });
block!(/// Q8_K: 256 elements, `d * qs` (d is f32).
    BlockQ8K, 256, 292, { /// scale (f32)
    d: [u8; 4], /// signed quants (i8)
    qs: [u8; 256], /// per 16 elements: sum of the quants (LE i16)
    bsums: [u8; 32] });
block!(/// TQ1_0: 256 ternary elements, base-3 packed.
    BlockTq1_0, 256, 54, { /// 5 trits per byte
    qs: [u8; 48], /// 4 trits per byte
    qh: [u8; 4], /// scale (f16)
    d: [u8; 2] });
block!(/// TQ2_0: 256 ternary elements, 2 bits each.
    BlockTq2_0, 256, 66, { /// 2-bit quants
    qs: [u8; 64], /// scale (f16)
    d: [u8; 2] });
block!(/// MXFP4: 32 E2M1 elements with an E8M0 scale.
    BlockMxfp4, 32, 17, { /// E8M0 exponent
    e: [u8; 1], /// 4-bit E2M1 codes
    qs: [u8; 16] });
block!(/// NVFP4: 64 E2M1 elements, one UE4M3 scale per 16.
    BlockNvfp4, 64, 36, { /// UE4M3 scales
    d: [u8; 4], /// 4-bit E2M1 codes
    qs: [u8; 32] });
block!(/// Q1_0: 128 elements, sign bits times a scale.
    BlockQ1_0, 128, 18, { /// scale (f16)
    d: [u8; 2], /// one bit per element (1 = +d)
    qs: [u8; 16] });
block!(/// Q2_0: 64 elements, `(q - 1) * d`, q in 0..=3.
    BlockQ2_0, 64, 18, { /// scale (f16)
    d: [u8; 2], /// 2 bits per element
    qs: [u8; 16] });
block!(/// IQ2_XXS: 256 elements.
    BlockIq2Xxs, 256, 66, { /// scale (f16)
    d: [u8; 2], /// 32 LE u16: grid indices, signs and scales
    qs: [u8; 64] });
block!(/// IQ2_XS: 256 elements.
    BlockIq2Xs, 256, 74, { /// scale (f16)
    d: [u8; 2], /// 32 LE u16: 9-bit grid index | 7-bit sign index
    qs: [u8; 64], /// 4-bit scales
    scales: [u8; 8] });
block!(/// IQ2_S: 256 elements.
    BlockIq2S, 256, 82, { /// scale (f16)
    d: [u8; 2], /// grid indices (low 8 bits), then sign bytes
    qs: [u8; 64], /// grid index high bits
    qh: [u8; 8], /// 4-bit scales
    scales: [u8; 8] });
block!(/// IQ3_XXS: 256 elements.
    BlockIq3Xxs, 256, 98, { /// scale (f16)
    d: [u8; 2], /// 64 grid indices, then 8 LE u32 of signs and scales
    qs: [u8; 96] });
block!(/// IQ3_S: 256 elements.
    BlockIq3S, 256, 110, { /// scale (f16)
    d: [u8; 2], /// grid indices (low 8 bits)
    qs: [u8; 64], /// grid index bit 8
    qh: [u8; 8], /// sign bits
    signs: [u8; 32], /// 4-bit scales
    scales: [u8; 4] });
block!(/// IQ1_S: 256 elements.
    BlockIq1S, 256, 50, { /// scale (f16)
    d: [u8; 2], /// grid indices (low 8 bits)
    qs: [u8; 32], /// 8 LE u16: index high bits, scale, delta sign
    qh: [u8; 16] });
block!(/// IQ1_M: 256 elements; the f16 scale is spread over the top nibbles of `scales`.
    BlockIq1M, 256, 56, { /// grid indices (low 8 bits)
    qs: [u8; 32], /// index high bits and delta signs
    qh: [u8; 16], /// 4 LE u16: 3-bit sub-block scales and the f16 scale nibbles
    scales: [u8; 8] });
block!(/// IQ4_NL: 32 elements, `d * KVALUES[q]`.
    BlockIq4Nl, 32, 18, { /// scale (f16)
    d: [u8; 2], /// nibbles as in Q4_0
    qs: [u8; 16] });
block!(/// IQ4_XS: 256 elements in 8 sub-blocks of 32.
    BlockIq4Xs, 256, 136, { /// scale (f16)
    d: [u8; 2], /// high 2 bits of the 6-bit sub-block scales (LE u16)
    scales_h: [u8; 2], /// low 4 bits of the sub-block scales
    scales_l: [u8; 4], /// nibbles, 16 bytes per sub-block as in Q4_0
    qs: [u8; 128] });

/// Views whole blocks. Panics if `bytes.len()` is not a multiple of the block size (callers
/// check lengths first and report a [`crate::QuantError`]).
pub(crate) fn as_blocks<B: Block>(bytes: &[u8]) -> &[B] {
    bytemuck::cast_slice(bytes)
}

/// Mutable counterpart of [`as_blocks`].
pub(crate) fn as_blocks_mut<B: Block>(bytes: &mut [u8]) -> &mut [B] {
    bytemuck::cast_slice_mut(bytes)
}
