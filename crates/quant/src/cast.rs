//! f32 ↔ f16 ↔ bf16 conversions over slices, with the rounding of each reference.
//!
//! | conversion | torch 2.15 CPU (`.to()`) | ggml / gguf-py | this module |
//! |---|---|---|---|
//! | f32→f16, finite | IEEE round-to-nearest-even (RNE), overflow → ±inf, subnormals kept | same | [`f32_to_f16`] |
//! | f32→f16, NaN | sign and top 10 mantissa bits kept, quiet bit forced (F16C `vcvtps2ph`) | C: `sign \| 0x7E00` (`GGML_FP32_TO_FP16`); gguf-py (numpy `astype(float16)`): sign and top 10 mantissa bits, quiet bit *not* forced, `0x7C01` if they are all zero | [`F16Nan`] picks |
//! | f32→bf16, finite | RNE: `(u + 0x7FFF + lsb) >> 16` | same | [`f32_to_bf16`] |
//! | f32→bf16, NaN | `0xFFFF` on contiguous tensors (AVX2/AVX-512 kernels); `0x7FC0` for 0-dim and strided tensors (c10 scalar `round_to_nearest_even`) | `(u >> 16) \| 0x40` (`ggml_compute_fp32_to_bf16`), = `half::bf16::from_f32` | [`Bf16Rounding`] picks |
//! | f16→f32 | exact; NaN gets the quiet bit (long contiguous and strided tensors) | C: exact, NaN gets the quiet bit; numpy: signalling NaNs stay signalling | [`f16_to_f32`] (quiet bit set), [`f16_to_f32_by`] (numpy's) |
//! | bf16→f32 | `u << 16`, NaN payload untouched | same | [`bf16_to_f32`] |
//!
//! Which column a cast follows is a [`CastRule`], named by the output format (torch for
//! safetensors outputs, ggml for llama-quantize's, numpy for convert_hf_to_gguf.py's):
//! [`cast_bytes`], [`decode_f32`] and [`encode_f32`] take one. numpy also widens f16 its own
//! way: a signalling NaN stays signalling ([`f16_to_f32_by`]).
//!
//! The torch and numpy behaviour was measured (fixtures/good/quant/torch_* and numpy_*, see
//! the README there; the tests compare against them). One more torch quirk not reproduced here: f16→f32 of *short* tensors (5 elements)
//! returned `0x7FFFFFFF` for every NaN.

use crate::QuantError;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use half::{bf16, f16};
pub use weightport_core::CastRule;
use weightport_core::DType;

/// How NaN inputs map to f16 (finite values and ±inf round identically in all three).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum F16Nan {
    /// Keep the sign and the top 10 mantissa bits, force the quiet bit: torch's `.to(float16)`,
    /// x86 F16C, `half::f16::from_f32`.
    KeepPayload,
    /// `sign | 0x7E00`: ggml's `GGML_FP32_TO_FP16` (ggml's C F16 conversion, and every f16
    /// scale inside quantized blocks).
    Canonical,
    /// numpy's `astype(np.float16)` (numpy 2.4.6 on x86-64), which convert_hf_to_gguf.py /
    /// gguf-py use for F16 output: `sign | 0x7C00 | top 10 mantissa bits`, quiet bit not forced,
    /// `| 1` if those bits are all zero.
    Numpy,
}

/// Which reference an f32 → bf16 conversion reproduces. Both round to nearest even and
/// differ only for NaN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bf16Rounding {
    /// torch 2.15's `.to(torch.bfloat16)` on a contiguous CPU tensor: every NaN becomes `0xFFFF`.
    Torch,
    /// ggml's `ggml_compute_fp32_to_bf16` (and gguf-py's numpy port): NaN becomes
    /// `(bits >> 16) | 0x0040` (sign and top payload bits kept, quiet bit forced).
    Ggml,
}

/// What a narrowing cast lost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CastStats {
    /// Finite inputs that became ±inf.
    pub overflow: u64,
    /// Non-zero finite inputs that became ±0.
    pub underflow: u64,
}

impl CastStats {
    /// Adds another chunk's counts.
    pub fn merge(&mut self, other: CastStats) {
        self.overflow += other.overflow;
        self.underflow += other.underflow;
    }
}

/// f32 → f16 bits, IEEE round-to-nearest-even, with the given NaN rule.
#[inline]
pub fn f32_to_f16(x: f32, nan: F16Nan) -> u16 {
    match nan {
        F16Nan::KeepPayload => f16::from_f32(x).to_bits(),
        F16Nan::Canonical => crate::util::f16_bits_ggml(x),
        F16Nan::Numpy => {
            if x.is_nan() {
                numpy_nan(x)
            } else {
                f16::from_f32(x).to_bits()
            }
        }
    }
}

#[inline(always)]
fn numpy_nan(x: f32) -> u16 {
    let u = x.to_bits();
    let h = 0x7C00 | ((u & 0x007F_FFFF) >> 13) as u16;
    ((u >> 16) as u16 & 0x8000) | if h == 0x7C00 { 0x7C01 } else { h }
}

/// f32 → bf16 bits, round-to-nearest-even, with the given reference's NaN rule.
#[inline]
pub fn f32_to_bf16(x: f32, r: Bf16Rounding) -> u16 {
    let u = x.to_bits();
    if u & 0x7FFF_FFFF > 0x7F80_0000 {
        return match r {
            Bf16Rounding::Torch => 0xFFFF,
            Bf16Rounding::Ggml => ((u >> 16) | 0x40) as u16,
        };
    }
    (u.wrapping_add(0x7FFF + ((u >> 16) & 1)) >> 16) as u16
}

/// f16 bits → f32 (exact; a NaN keeps its payload and gets the quiet bit).
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    f16::from_bits(h).to_f32()
}

/// bf16 bits → f32 (exact: the bits shifted left by 16, NaN payload untouched).
#[inline]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

fn check_len(src: usize, dst: usize) -> Result<(), QuantError> {
    if src == dst {
        Ok(())
    } else {
        Err(QuantError::Length {
            what: "cast destination",
            expected: src,
            got: dst,
        })
    }
}

#[inline(always)]
fn account(x: f32, y_is_inf: bool, y_is_zero: bool, s: &mut CastStats) {
    let finite = x.is_finite();
    s.overflow += (finite && y_is_inf) as u64;
    s.underflow += (finite && x != 0.0 && y_is_zero) as u64;
}

/// Casts f32 to f16 bits (`dst.len()` must equal `src.len()`), counting overflow/underflow.
pub fn cast_f32_to_f16(src: &[f32], dst: &mut [u16], nan: F16Nan) -> Result<CastStats, QuantError> {
    narrow_to_f16(src, dst, nan, true)
}

/// [`cast_f32_to_f16`], counting only when `count` (else the stats are zeros).
fn narrow_to_f16(
    src: &[f32],
    dst: &mut [u16],
    nan: F16Nan,
    count: bool,
) -> Result<CastStats, QuantError> {
    check_len(src.len(), dst.len())?;
    // half's slice conversion uses F16C when the CPU has it: same results as the scalar path.
    dst.reinterpret_cast_mut::<f16>()
        .convert_from_f32_slice(src);
    let s = match count {
        true => f16_stats(src, dst),
        false => CastStats::default(),
    };
    if nan != F16Nan::KeepPayload {
        for (&x, y) in src.iter().zip(dst.iter_mut()) {
            if x.is_nan() {
                *y = f32_to_f16(x, nan);
            }
        }
    }
    Ok(s)
}

/// [`account`] over a cast to f16, in blocks with 32-bit counts and no branch, which the
/// compiler turns into vector code (a value at a time it cost as much as the cast).
fn f16_stats(src: &[f32], dst: &[u16]) -> CastStats {
    let mut s = CastStats::default();
    for (xs, ys) in src.chunks(1 << 16).zip(dst.chunks(1 << 16)) {
        let (mut over, mut under) = (0u32, 0u32);
        for (&x, &y) in xs.iter().zip(ys) {
            let a = y & 0x7FFF;
            let finite = x.abs() < f32::INFINITY;
            over += u32::from(finite & (a == 0x7C00));
            under += u32::from(finite & (x != 0.0) & (a == 0));
        }
        s.overflow += u64::from(over);
        s.underflow += u64::from(under);
    }
    s
}

/// Casts f32 to bf16 bits (`dst.len()` must equal `src.len()`), counting overflow/underflow.
pub fn cast_f32_to_bf16(
    src: &[f32],
    dst: &mut [u16],
    r: Bf16Rounding,
) -> Result<CastStats, QuantError> {
    check_len(src.len(), dst.len())?;
    let torch = r == Bf16Rounding::Torch;
    let mut s = CastStats::default();
    for (xs, ys) in src.chunks(1 << 16).zip(dst.chunks_mut(1 << 16)) {
        let (overflow, underflow) = bf16_block(xs, ys, torch);
        s.overflow += u64::from(overflow);
        s.underflow += u64::from(underflow);
    }
    Ok(s)
}

multiversion! {
    /// At most 2^16 values of [`cast_f32_to_bf16`], branch-free so that it vectorizes: the same
    /// bits as [`f32_to_bf16`] and the same counts as [`account`] (a finite input that became
    /// ±inf; a finite non-zero one that became ±0).
    fn bf16_block(xs: &[f32], ys: &mut [u16], torch: bool) -> (u32, u32) {
        let (mut overflow, mut underflow) = (0u32, 0u32);
        for (&x, y) in xs.iter().zip(ys.iter_mut()) {
            let u = x.to_bits();
            let nan = u & 0x7FFF_FFFF > 0x7F80_0000;
            let rounded = (u.wrapping_add(0x7FFF + ((u >> 16) & 1)) >> 16) as u16;
            let quiet = if torch { 0xFFFF } else { ((u >> 16) | 0x40) as u16 };
            let v = if nan { quiet } else { rounded };
            *y = v;
            let finite = u & 0x7F80_0000 != 0x7F80_0000;
            let a = v & 0x7FFF;
            overflow += (finite & (a == 0x7F80)) as u32;
            underflow += (finite & (u & 0x7FFF_FFFF != 0) & (a == 0)) as u32;
        }
        (overflow, underflow)
    }
}

/// Widens f16 bits to f32 (exact).
pub fn cast_f16_to_f32(src: &[u16], dst: &mut [f32]) -> Result<(), QuantError> {
    check_len(src.len(), dst.len())?;
    let src: &[f16] = src.reinterpret_cast();
    src.convert_to_f32_slice(dst);
    Ok(())
}

/// Widens bf16 bits to f32 (exact).
pub fn cast_bf16_to_f32(src: &[u16], dst: &mut [f32]) -> Result<(), QuantError> {
    check_len(src.len(), dst.len())?;
    for (&h, y) in src.iter().zip(dst.iter_mut()) {
        *y = bf16_to_f32(h);
    }
    Ok(())
}

/// bf16 → f16 through f32 (exact widening, then RNE), counting overflow/underflow.
pub fn cast_bf16_to_f16(
    src: &[u16],
    dst: &mut [u16],
    nan: F16Nan,
) -> Result<CastStats, QuantError> {
    check_len(src.len(), dst.len())?;
    let mut s = CastStats::default();
    for (&h, y) in src.iter().zip(dst.iter_mut()) {
        let x = bf16_to_f32(h);
        *y = f32_to_f16(x, nan);
        let a = *y & 0x7FFF;
        account(x, a == 0x7C00, a == 0, &mut s);
    }
    Ok(s)
}

/// f16 → bf16 through f32 (exact widening, then RNE), counting overflow/underflow (f16
/// subnormals below 2⁻¹³³ cannot occur, so this only loses precision, never range).
pub fn cast_f16_to_bf16(
    src: &[u16],
    dst: &mut [u16],
    r: Bf16Rounding,
) -> Result<CastStats, QuantError> {
    check_len(src.len(), dst.len())?;
    let mut s = CastStats::default();
    for (&h, y) in src.iter().zip(dst.iter_mut()) {
        let x = f16_to_f32(h);
        *y = f32_to_bf16(x, r);
        let a = *y & 0x7FFF;
        account(x, a == 0x7F80, a == 0, &mut s);
    }
    Ok(s)
}

/// `half::bf16::from_f32` equals [`Bf16Rounding::Ggml`] bit for bit (checked in the tests).
#[doc(hidden)]
pub fn half_bf16_bits(x: f32) -> u16 {
    bf16::from_f32(x).to_bits()
}

// ---- whole tensors as little-endian bytes, by rule ----

impl From<CastRule> for F16Nan {
    fn from(r: CastRule) -> F16Nan {
        match r {
            CastRule::Torch => F16Nan::KeepPayload,
            CastRule::Ggml => F16Nan::Canonical,
            CastRule::Numpy => F16Nan::Numpy,
        }
    }
}

impl From<CastRule> for Bf16Rounding {
    fn from(r: CastRule) -> Bf16Rounding {
        match r {
            CastRule::Torch => Bf16Rounding::Torch,
            // gguf-py's BF16 is a numpy port of ggml's.
            CastRule::Ggml | CastRule::Numpy => Bf16Rounding::Ggml,
        }
    }
}

/// f16 bits → f32 under `rule`: exact; a NaN keeps its payload, and gets the quiet bit except
/// under numpy (whose `astype(float32)` keeps a signalling NaN signalling).
#[inline]
pub fn f16_to_f32_by(h: u16, rule: CastRule) -> f32 {
    if rule == CastRule::Numpy && h & 0x7C00 == 0x7C00 && h & 0x03FF != 0 {
        let sign = u32::from(h & 0x8000) << 16;
        f32::from_bits(sign | 0x7F80_0000 | (u32::from(h & 0x03FF) << 13))
    } else {
        f16_to_f32(h)
    }
}

/// f64 → f32 as torch's `.to(float32)` and numpy's `astype(float32)` (the hardware
/// conversion): round to nearest even; a NaN keeps its sign and top 22 payload bits and gets
/// the quiet bit. Written out rather than left to `as`, whose NaN bits Rust does not specify.
pub fn f64_to_f32(v: f64) -> f32 {
    if v.is_nan() {
        let u = v.to_bits();
        let sign = (u >> 32) as u32 & 0x8000_0000;
        return f32::from_bits(sign | 0x7FC0_0000 | ((u >> 29) as u32 & 0x003F_FFFF));
    }
    v as f32
}

/// True for the dtypes these functions convert between.
pub fn is_float(d: DType) -> bool {
    matches!(d, DType::F64 | DType::F32 | DType::F16 | DType::BF16)
}

/// `src` as `T`s without a copy when it is aligned for them on a little-endian host, else
/// decoded into `tmp`.
fn view<'a, T: bytemuck::Pod>(src: &'a [u8], tmp: &'a mut Vec<T>) -> &'a [T] {
    let n = std::mem::size_of::<T>();
    if cfg!(target_endian = "little") {
        if let Ok(v) = bytemuck::try_cast_slice(src) {
            return v;
        }
    }
    tmp.clear();
    tmp.extend(src.chunks_exact(n).map(|b| {
        let mut v = T::zeroed();
        let bytes = bytemuck::bytes_of_mut(&mut v);
        bytes.copy_from_slice(b);
        if cfg!(target_endian = "big") {
            bytes.reverse();
        }
        v
    }));
    tmp
}

/// Decodes F32, F16, BF16 or F64 little-endian bytes into `dst` (one f32 per element; F64
/// narrows as [`f64_to_f32`]), widening under `rule`.
pub fn decode_f32(d: DType, src: &[u8], dst: &mut [f32], rule: CastRule) -> Result<(), QuantError> {
    match d {
        DType::F16 | DType::BF16 => {
            let mut tmp = Vec::new();
            let bits: &[u16] = view(src, &mut tmp);
            if d == DType::F16 {
                cast_f16_to_f32(bits, dst)?;
                if rule == CastRule::Numpy {
                    for (&h, y) in bits.iter().zip(dst.iter_mut()) {
                        if h & 0x7C00 == 0x7C00 && h & 0x0200 == 0 && h & 0x03FF != 0 {
                            *y = f16_to_f32_by(h, rule);
                        }
                    }
                }
                Ok(())
            } else {
                cast_bf16_to_f32(bits, dst)
            }
        }
        DType::F64 => {
            let mut tmp = Vec::new();
            let wide: &[f64] = view(src, &mut tmp);
            check_len(wide.len(), dst.len())?;
            for (&v, y) in wide.iter().zip(dst.iter_mut()) {
                *y = f64_to_f32(v);
            }
            Ok(())
        }
        _ => {
            let mut tmp = Vec::new();
            let v: &[f32] = view(src, &mut tmp);
            check_len(v.len(), dst.len())?;
            dst.copy_from_slice(v);
            Ok(())
        }
    }
}

/// Encodes f32 values as F32, F16 or BF16 little-endian bytes into `dst` under `rule`,
/// counting overflow and underflow.
pub fn encode_f32(
    to: DType,
    vals: &[f32],
    dst: &mut [u8],
    rule: CastRule,
) -> Result<CastStats, QuantError> {
    encode(to, vals, dst, rule, true)
}

/// [`encode_f32`] without the overflow and underflow counts (the same bytes), for a caller
/// that has no use for them: counting costs about as much as an F16 cast itself.
pub fn store_f32(
    to: DType,
    vals: &[f32],
    dst: &mut [u8],
    rule: CastRule,
) -> Result<(), QuantError> {
    encode(to, vals, dst, rule, false).map(drop)
}

fn encode(
    to: DType,
    vals: &[f32],
    dst: &mut [u8],
    rule: CastRule,
    count: bool,
) -> Result<CastStats, QuantError> {
    match to {
        DType::F16 | DType::BF16 => {
            check_len(vals.len() * 2, dst.len())?;
            let mut tmp = Vec::new();
            let aligned = cfg!(target_endian = "little")
                && bytemuck::try_cast_slice_mut::<u8, u16>(dst).is_ok();
            let bits: &mut [u16] = if aligned {
                bytemuck::cast_slice_mut(dst)
            } else {
                tmp.resize(vals.len(), 0u16);
                &mut tmp
            };
            let s = if to == DType::F16 {
                narrow_to_f16(vals, bits, rule.into(), count)?
            } else {
                cast_f32_to_bf16(vals, bits, rule.into())?
            };
            if !aligned {
                for (o, b) in dst.chunks_exact_mut(2).zip(&tmp) {
                    o.copy_from_slice(&b.to_le_bytes());
                }
            }
            Ok(s)
        }
        DType::F32 => {
            check_len(vals.len() * 4, dst.len())?;
            for (o, v) in dst.chunks_exact_mut(4).zip(vals) {
                o.copy_from_slice(&v.to_le_bytes());
            }
            Ok(CastStats::default())
        }
        _ => Err(QuantError::Unsupported {
            dtype: to,
            op: "cast",
        }),
    }
}

/// Elements converted per step: the f32 values of one step stay in L2.
const STEP: usize = 16 << 10;

/// Casts `src` (dtype `from`) into `dst` (dtype `to`), both little-endian F64, F32, F16 or
/// BF16, under `rule`, counting what a narrowing lost. Every cast goes through f32 (exact for
/// F16/BF16 inputs), F64 too, as torch's CPU `.to()` does: a value that f32 rounds onto a tie
/// of the target rounds twice there and here.
pub fn cast_bytes(
    from: DType,
    to: DType,
    src: &[u8],
    dst: &mut [u8],
    rule: CastRule,
) -> Result<CastStats, QuantError> {
    let (fs, ts) = (elem(from)?, elem(to)?);
    check_len(src.len() / fs * ts, dst.len())?;
    if from == DType::F64 {
        return narrow_f64(to, src, dst, rule);
    }
    if from == DType::F32 && to != DType::F64 && cfg!(target_endian = "little") {
        // Aligned F32 bytes are the values already: encoded in place of a copy first.
        if let Ok(vals) = bytemuck::try_cast_slice::<u8, f32>(src) {
            return encode_f32(to, vals, dst, rule);
        }
    }
    let mut vals = vec![0f32; STEP.min(src.len() / fs)];
    let mut stats = CastStats::default();
    for (si, di) in src.chunks(STEP * fs).zip(dst.chunks_mut(STEP * ts)) {
        let v = &mut vals[..si.len() / fs];
        decode_f32(from, si, v, rule)?;
        if to == DType::F64 {
            for (o, &x) in di.chunks_exact_mut(8).zip(v.iter()) {
                o.copy_from_slice(&f64::from(x).to_le_bytes());
            }
        } else {
            stats.merge(encode_f32(to, v, di, rule)?);
        }
    }
    Ok(stats)
}

fn elem(d: DType) -> Result<usize, QuantError> {
    match d {
        DType::F64 => Ok(8),
        DType::F32 => Ok(4),
        DType::F16 | DType::BF16 => Ok(2),
        _ => Err(QuantError::Unsupported {
            dtype: d,
            op: "cast",
        }),
    }
}

/// F64 → F32/F16/BF16 through f32 ([`f64_to_f32`]); overflow and underflow are counted
/// against the f64 values.
fn narrow_f64(
    to: DType,
    src: &[u8],
    dst: &mut [u8],
    rule: CastRule,
) -> Result<CastStats, QuantError> {
    let mut tmp = Vec::new();
    let wide: &[f64] = view(src, &mut tmp);
    let narrow: Vec<f32> = wide.iter().map(|&v| f64_to_f32(v)).collect();
    encode_f32(to, &narrow, dst, rule)?;
    let mut back = vec![0f32; narrow.len()];
    decode_f32(to, dst, &mut back, rule)?;
    let mut s = CastStats::default();
    for (&v, &r) in wide.iter().zip(&back) {
        s.overflow += u64::from(v.is_finite() && r.is_infinite());
        s.underflow += u64::from(v != 0.0 && r == 0.0);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The branch-free BF16 slice cast gives [`f32_to_bf16`]'s bits and [`account`]'s counts
    /// for the edges (largest finite, rounding to inf, infinities, NaNs with payloads, zeros,
    /// subnormals that round to zero or not) and for 2^20 pseudo-random bit patterns, in both
    /// roundings, across more than one counting block, in the AVX2 and the portable builds.
    #[test]
    fn bf16_slice_cast_equals_one_value_at_a_time() {
        let edges: [u32; 14] = [
            0x7F7F_FFFF,
            0x7F7F_8000,
            0x7F7F_7FFF,
            0xFF7F_8000,
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0001,
            0xFFA0_1234,
            0x0000_0000,
            0x8000_0000,
            0x0000_0001,
            0x0000_8000,
            0x8000_8001,
            0x3F80_0000,
        ];
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let src: Vec<f32> = (0..(1usize << 20) + 77)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                f32::from_bits(match i % 4 {
                    0 => edges[(i / 4) % edges.len()],
                    _ => state as u32,
                })
            })
            .collect();
        for (r, portable) in [
            (Bf16Rounding::Torch, false),
            (Bf16Rounding::Ggml, false),
            (Bf16Rounding::Torch, true),
            (Bf16Rounding::Ggml, true),
        ] {
            crate::dispatch::set_portable_only(portable);
            let mut dst = vec![0u16; src.len()];
            let got = cast_f32_to_bf16(&src, &mut dst, r).unwrap();
            let mut want = CastStats::default();
            for (&x, &y) in src.iter().zip(&dst) {
                assert_eq!(y, f32_to_bf16(x, r), "{:#010x}", x.to_bits());
                let a = y & 0x7FFF;
                account(x, a == 0x7F80, a == 0, &mut want);
            }
            assert_eq!(got, want);
            assert!(got.overflow > 0 && got.underflow > 0);
        }
        crate::dispatch::set_portable_only(false);
    }

    #[test]
    fn f16_stats_count_as_one_value_at_a_time() {
        let edges = [
            65504.0,
            65519.996,
            65520.0,
            -65520.0,
            1e9,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            0.0,
            -0.0,
            2f32.powi(-25),
            -(2f32.powi(-25)),
            2f32.powi(-25) * 1.0001,
            2f32.powi(-24),
            1e-30,
            1.0,
        ];
        // Long enough to cross a block of the counting loop, every edge at many offsets.
        let src: Vec<f32> = (0..(1 << 16) + 123)
            .map(|i| edges[i % edges.len()])
            .collect();
        let mut dst = vec![0u16; src.len()];
        let got = cast_f32_to_f16(&src, &mut dst, F16Nan::KeepPayload).unwrap();
        let mut want = CastStats::default();
        for (&x, &y) in src.iter().zip(&dst) {
            account(x, y & 0x7FFF == 0x7C00, y & 0x7FFF == 0, &mut want);
        }
        assert_eq!(
            (got.overflow, got.underflow),
            (want.overflow, want.underflow)
        );
        assert!(got.overflow > 0 && got.underflow > 0);
    }

    #[test]
    fn bf16_ggml_equals_half_for_every_exponent_and_rounding_case() {
        let mut n = 0u32;
        // all exponents, mantissa patterns around the rounding point, both signs, NaNs
        for hi in 0..=0x1FFu32 {
            for lo in [
                0u32, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1_7FFF, 0x1_8000, 0x7F_FFFF, 0x40_0000,
                0x3F_8000,
            ] {
                let u = (hi << 23) | lo;
                let x = f32::from_bits(u);
                assert_eq!(
                    f32_to_bf16(x, Bf16Rounding::Ggml),
                    half_bf16_bits(x),
                    "{u:#x}"
                );
                n += 1;
            }
        }
        assert!(n > 5000);
    }

    #[test]
    fn stats_count_overflow_and_underflow() {
        let src = [
            65504.0f32,
            65520.0,
            1e-8,
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NAN,
            -1e-30,
            3e38,
        ];
        let mut h = [0u16; 9];
        let s = cast_f32_to_f16(&src, &mut h, F16Nan::Canonical).unwrap();
        assert_eq!(
            s,
            CastStats {
                overflow: 2,
                underflow: 2
            }
        );
        assert_eq!(h[6], 0x7E00);
        assert_eq!(
            f32_to_f16(f32::from_bits(0x7F80_0001), F16Nan::Numpy),
            0x7C01
        );
        assert_eq!(
            f32_to_f16(f32::from_bits(0xFF81_2345), F16Nan::Numpy),
            0xFC09
        );
        let mut b = [0u16; 9];
        let s = cast_f32_to_bf16(&src, &mut b, Bf16Rounding::Torch).unwrap();
        assert_eq!(
            s,
            CastStats {
                overflow: 0,
                underflow: 0
            }
        );
        assert_eq!(b[6], 0xFFFF);
        assert_eq!(f32_to_bf16(f32::MAX, Bf16Rounding::Ggml), 0x7F80);
        assert!(cast_f32_to_f16(&src, &mut [0u16; 3], F16Nan::Canonical).is_err());
    }
    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn cast_bytes_counts_overflow_and_underflow() {
        let src = f32s(&[1.0, 65504.0, 65520.0, 1e-9, -0.0, f32::NAN, f32::INFINITY]);
        let mut dst = vec![0u8; 14];
        let s = cast_bytes(DType::F32, DType::F16, &src, &mut dst, CastRule::Torch).unwrap();
        assert_eq!((s.overflow, s.underflow), (1, 1));
        let bits: Vec<u16> = dst
            .chunks(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(bits[1], 0x7bff);
        assert_eq!(bits[2], 0x7c00);
        assert!(f16::from_bits(bits[5]).is_nan());
        assert!(cast_bytes(DType::F32, DType::F16, &src, &mut dst[2..], CastRule::Torch).is_err());
    }

    #[test]
    fn aligned_and_unaligned_bytes_agree() {
        let vals: Vec<f32> = (0..40000).map(|i| (i as f32 - 500.0) * 131.7).collect();
        let src = f32s(&vals);
        let mut padded = vec![0u8; src.len() + 1];
        padded[1..].copy_from_slice(&src);
        let n = vals.len();
        for rule in [CastRule::Torch, CastRule::Ggml, CastRule::Numpy] {
            for to in [DType::F16, DType::BF16] {
                let (mut a, mut b) = (vec![0u8; 2 * n], vec![0u8; 2 * n + 1]);
                let ra = cast_bytes(DType::F32, to, &src, &mut a, rule).unwrap();
                let rb = cast_bytes(DType::F32, to, &padded[1..], &mut b[1..], rule).unwrap();
                assert_eq!((a.as_slice(), ra), (&b[1..], rb), "{to}");
                let (mut w1, mut w2) = (vec![0u8; 4 * n], vec![0u8; 4 * n + 1]);
                cast_bytes(to, DType::F32, &a, &mut w1, rule).unwrap();
                cast_bytes(to, DType::F32, &b[1..], &mut w2[1..], rule).unwrap();
                assert_eq!(w1.as_slice(), &w2[1..]);
            }
        }
    }

    #[test]
    fn f64_narrows_through_f32_as_torch() {
        let v = [
            21.3125 + 2f64.powi(-17),
            1.0 + 2f64.powi(-8) + 2f64.powi(-40),
            1e39,
        ];
        let src: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut dst = [0u8; 6];
        // half's bf16::from_f64 drops the low 32 mantissa bits: 21.3125+2⁻¹⁷ became 21.25.
        let s = cast_bytes(DType::F64, DType::BF16, &src, &mut dst, CastRule::Torch).unwrap();
        assert_eq!((s.overflow, s.underflow), (1, 0));
        assert_eq!(dst, [0xab, 0x41, 0x80, 0x3f, 0x80, 0x7f]);
        let nan = f64::from_bits(0xFFF4_0000_0000_0001);
        assert_eq!(f64_to_f32(nan).to_bits(), 0xFFE0_0000);
    }

    #[test]
    fn rules_differ_only_in_nan_bits() {
        let x = [
            f32::from_bits(0xFF81_2345),
            1.5,
            f32::from_bits(0x7FC0_0000),
        ];
        let src = f32s(&x);
        let mut out = [[0u8; 6]; 3];
        for (k, rule) in [CastRule::Torch, CastRule::Ggml, CastRule::Numpy]
            .into_iter()
            .enumerate()
        {
            cast_bytes(DType::F32, DType::F16, &src, &mut out[k], rule).unwrap();
        }
        let first = |o: &[u8; 6]| u16::from_le_bytes([o[0], o[1]]);
        assert_eq!(
            [first(&out[0]), first(&out[1]), first(&out[2])],
            [0xFE09, 0xFE00, 0xFC09]
        );
        assert!(out.iter().all(|o| o[2..] == out[0][2..]));
    }
}
