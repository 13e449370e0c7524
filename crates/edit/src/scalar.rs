//! Values and element casts, exactly as torch 2.15 does them (measured; see the tests and
//! fixtures/gen/gen_edit.py).
//!
//! **`t[...] = VALUE`** ([`Scalar::to_bytes`]): a Python int or float stored into a tensor. torch
//! checks the value against the dtype's range first and refuses it ("value cannot be converted
//! to type … without overflow") rather than rounding to ±inf or wrapping:
//!
//! | dtype | a float `v` | an int `i` |
//! |---|---|---|
//! | F64 | as is | RNE |
//! | F32 | refused if finite and `\|v\| > FLT_MAX`; RNE | RNE, `i64 → f32` directly |
//! | F16 | refused if finite and `\|v\| > 65504`; `f64 → f32 → f16`, both RNE (double rounding) | refused if `\|i\| > 65504`; `i64 → f32 → f16` |
//! | BF16 | refused if finite and `\|v\| > 3.3895e38`; `f64 → f32 → bf16`; every NaN is `0x7FC0` | `i64 → f32 → bf16` |
//! | signed ints | refused if NaN, ±inf, `v < MIN` or `v ≥ MAX + 1`; truncated toward 0 | refused outside `[MIN, MAX]` |
//! | U8/U16/U32 | as signed, with `MIN = 0` | refused above MAX; a negative `i` with `-i ≤ MAX` wraps (`-1 → 255`) |
//! | U64 | as signed | refused if negative |
//! | BOOL | `v != 0` (NaN is true) | `i != 0` |
//!
//! NaN keeps its sign in F16, F32 and F64 (`0x7E00`/`0xFE00`, quiet). Python's `True`/`False` are
//! the ints 1 and 0.
//!
//! **`.to(dtype)` of a float32 tensor** ([`from_f32_as_torch`], used by `--add`): RNE to F16/BF16
//! (F16 NaN keeps its payload; BF16 NaN is `0xFFFF`, torch's vectorised kernel); to an int type
//! through `cvttss2si` to i32 (i64 for I64: NaN and out-of-range give `MIN`) and then the low
//! bytes (`200.0 → I8` is `-56`); to BOOL `x != 0`.

use weightport_core::DType;
use weightport_quant::cast::{f32_to_bf16, f32_to_f16, f64_to_f32, Bf16Rounding, F16Nan};

/// A value as Python would have it after reading the literal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// An int (Python ints beyond 64 bits are refused, as torch refuses them).
    Int(i64),
    /// A float.
    Float(f64),
}

/// The dtypes `--set` and `--add` know torch's rules for.
pub fn is_elementwise(d: DType) -> bool {
    matches!(
        d,
        DType::F64
            | DType::F32
            | DType::F16
            | DType::BF16
            | DType::I64
            | DType::I32
            | DType::I16
            | DType::I8
            | DType::U64
            | DType::U32
            | DType::U16
            | DType::U8
            | DType::BOOL
    )
}

/// The largest finite BF16.
const BF16_MAX: f64 = 3.389_531_389_251_535_5e38;

impl Scalar {
    /// Parses a literal: an int (`0`, `-3`, `1_000`), a float (`1e-3`, `-inf`, `nan`), or
    /// `True`/`False`.
    pub fn parse(s: &str) -> Result<Scalar, String> {
        let t = s.trim();
        match t {
            "True" | "true" => return Ok(Scalar::Int(1)),
            "False" | "false" => return Ok(Scalar::Int(0)),
            _ => {}
        }
        let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
            return t
                .replace('_', "")
                .parse::<i64>()
                .map(Scalar::Int)
                .map_err(|_| {
                    format!("`{t}` does not fit a 64-bit integer (torch refuses it too)")
                });
        }
        t.parse::<f64>().map(Scalar::Float).map_err(|_| {
            format!("`{t}` is not a number (an int, a float, inf, nan, True or False)")
        })
    }

    /// The element bytes (little-endian) of this value stored into a tensor of `d`, or why torch
    /// refuses it.
    pub fn to_bytes(self, d: DType) -> Result<Vec<u8>, String> {
        match self {
            Scalar::Float(v) => float_bytes(v, d),
            Scalar::Int(i) => int_bytes(i, d),
        }
    }
}

fn overflow(v: impl std::fmt::Display, d: DType) -> String {
    format!("value {v} cannot be converted to {d} without overflow (torch refuses it too)")
}

fn bf16_bits(x: f32) -> u16 {
    if x.is_nan() {
        0x7FC0
    } else {
        f32_to_bf16(x, Bf16Rounding::Ggml)
    }
}

fn float_bytes(v: f64, d: DType) -> Result<Vec<u8>, String> {
    let too_big = |max: f64| v.is_finite() && v.abs() > max;
    Ok(match d {
        DType::F64 => v.to_le_bytes().to_vec(),
        DType::F32 if too_big(f64::from(f32::MAX)) => return Err(overflow(v, d)),
        DType::F32 => f64_to_f32(v).to_le_bytes().to_vec(),
        DType::F16 if too_big(65504.0) => return Err(overflow(v, d)),
        DType::F16 => f32_to_f16(f64_to_f32(v), F16Nan::KeepPayload)
            .to_le_bytes()
            .to_vec(),
        DType::BF16 if too_big(BF16_MAX) => return Err(overflow(v, d)),
        DType::BF16 => bf16_bits(f64_to_f32(v)).to_le_bytes().to_vec(),
        DType::BOOL => vec![u8::from(v != 0.0)],
        _ => {
            let (lo, hi, bytes) = int_range(d).ok_or_else(|| unsupported(d))?;
            // MIN and MAX + 1 are powers of two, exact in f64.
            let (lo_f, hi_f) = (lo as f64, hi as f64 + 1.0);
            if !v.is_finite() || v < lo_f || v >= hi_f {
                return Err(overflow(v, d));
            }
            (v.trunc() as i128).to_le_bytes()[..bytes].to_vec()
        }
    })
}

fn int_bytes(i: i64, d: DType) -> Result<Vec<u8>, String> {
    Ok(match d {
        DType::F64 => (i as f64).to_le_bytes().to_vec(),
        DType::F32 => (i as f32).to_le_bytes().to_vec(),
        DType::F16 if i.unsigned_abs() > 65504 => return Err(overflow(i, d)),
        DType::F16 => f32_to_f16(i as f32, F16Nan::KeepPayload)
            .to_le_bytes()
            .to_vec(),
        DType::BF16 => bf16_bits(i as f32).to_le_bytes().to_vec(),
        DType::BOOL => vec![u8::from(i != 0)],
        _ => {
            let (lo, hi, bytes) = int_range(d).ok_or_else(|| unsupported(d))?;
            let v = i128::from(i);
            let ok = if lo == 0 && d != DType::U64 {
                v <= hi && -v <= hi
            } else {
                v >= lo && v <= hi
            };
            if !ok {
                return Err(if d == DType::U64 && v < 0 {
                    format!(
                        "value {i}: a negative int cannot be stored in U64 (torch refuses it too)"
                    )
                } else {
                    overflow(i, d)
                });
            }
            // Two's complement low bytes: wraps a negative int into an unsigned type.
            v.to_le_bytes()[..bytes].to_vec()
        }
    })
}

/// `(MIN, MAX, bytes)` of an int dtype.
fn int_range(d: DType) -> Option<(i128, i128, usize)> {
    Some(match d {
        DType::I8 => (i8::MIN.into(), i8::MAX.into(), 1),
        DType::I16 => (i16::MIN.into(), i16::MAX.into(), 2),
        DType::I32 => (i32::MIN.into(), i32::MAX.into(), 4),
        DType::I64 => (i64::MIN.into(), i64::MAX.into(), 8),
        DType::U8 => (0, u8::MAX.into(), 1),
        DType::U16 => (0, u16::MAX.into(), 2),
        DType::U32 => (0, u32::MAX.into(), 4),
        DType::U64 => (0, u64::MAX.into(), 8),
        _ => return None,
    })
}

fn unsupported(d: DType) -> String {
    format!("{d} elements cannot be set from a number (supported: F64, F32, F16, BF16, ints, BOOL)")
}

/// The value of one element of `d` (little-endian `b`) as torch's `.float()` gives it: exact
/// for F16/BF16 and ints up to 2^24, RNE beyond; F64 narrowed; BOOL 0 or 1. `None` for a dtype
/// it does not cover.
pub fn to_f32(d: DType, b: &[u8]) -> Option<f32> {
    Some(match d {
        DType::F32 => f32::from_le_bytes(b.try_into().ok()?),
        DType::F64 => f64_to_f32(f64::from_le_bytes(b.try_into().ok()?)),
        DType::F16 => half::f16::from_bits(u16::from_le_bytes(b.try_into().ok()?)).to_f32(),
        DType::BF16 => f32::from_bits(u32::from(u16::from_le_bytes(b.try_into().ok()?)) << 16),
        _ => to_f64(d, b)? as f32,
    })
}

/// The value of one element of `d` in f64 (exact for every dtype but I64/U64 beyond 2^53).
pub fn to_f64(d: DType, b: &[u8]) -> Option<f64> {
    Some(match d {
        DType::F64 => f64::from_le_bytes(b.try_into().ok()?),
        DType::F32 | DType::F16 | DType::BF16 => f64::from(to_f32(d, b)?),
        DType::BOOL => f64::from(u8::from(b[0] != 0)),
        DType::I8 => f64::from(b[0] as i8),
        DType::U8 => f64::from(b[0]),
        DType::I16 => f64::from(i16::from_le_bytes(b.try_into().ok()?)),
        DType::U16 => f64::from(u16::from_le_bytes(b.try_into().ok()?)),
        DType::I32 => f64::from(i32::from_le_bytes(b.try_into().ok()?)),
        DType::U32 => f64::from(u32::from_le_bytes(b.try_into().ok()?)),
        DType::I64 => i64::from_le_bytes(b.try_into().ok()?) as f64,
        DType::U64 => u64::from_le_bytes(b.try_into().ok()?) as f64,
        _ => return None,
    })
}

/// True where an element of `d` is `> 0` (a mask keeps it): NaN is not.
pub fn positive(d: DType, b: &[u8]) -> Option<bool> {
    Some(match d {
        DType::BOOL | DType::U8 | DType::U16 | DType::U32 | DType::U64 => b.iter().any(|&x| x != 0),
        DType::I64 => i64::from_le_bytes(b.try_into().ok()?) > 0,
        _ => to_f64(d, b)? > 0.0,
    })
}

/// x86-64's `cvttss2si` to i32: truncation, NaN and out of range give `i32::MIN`.
fn cvtt_i32(x: f32) -> i32 {
    // NaN is in no range.
    if !(-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

fn cvtt_i64(x: f32) -> i64 {
    const TWO_63: f32 = 9_223_372_036_854_775_808.0;
    if !(-TWO_63..TWO_63).contains(&x) {
        i64::MIN
    } else {
        x as i64
    }
}

/// Writes `x` (an f32 result) into `out` as torch's `.to(d)` of a float32 tensor does (module
/// docs); `None` for a dtype without a measured rule (U16, U32, U64, block types).
pub fn from_f32_as_torch(x: f32, d: DType, out: &mut [u8]) -> Option<()> {
    match d {
        DType::F32 => out.copy_from_slice(&x.to_le_bytes()),
        DType::F16 => out.copy_from_slice(&f32_to_f16(x, F16Nan::KeepPayload).to_le_bytes()),
        DType::BF16 => out.copy_from_slice(&f32_to_bf16(x, Bf16Rounding::Torch).to_le_bytes()),
        DType::BOOL => out[0] = u8::from(x != 0.0),
        DType::I8 | DType::U8 => out[0] = cvtt_i32(x) as u8,
        DType::I16 => out.copy_from_slice(&(cvtt_i32(x) as i16).to_le_bytes()),
        DType::I32 => out.copy_from_slice(&cvtt_i32(x).to_le_bytes()),
        DType::I64 => out.copy_from_slice(&cvtt_i64(x).to_le_bytes()),
        _ => return None,
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(v: &str, d: DType) -> String {
        match Scalar::parse(v).unwrap().to_bytes(d) {
            Ok(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
            Err(_) => "ERR".into(),
        }
    }

    /// Expected values printed by torch 2.15 (`t = torch.zeros(4, dtype=d); t[1:3] = v`).
    #[test]
    fn set_matches_torch_scalar_stores() {
        let cases: &[(&str, DType, &str)] = &[
            ("1e-3", DType::F16, "1914"),
            ("65504", DType::F16, "ff7b"),
            ("65504.5", DType::F16, "ERR"),
            ("65505", DType::F16, "ERR"),
            ("nan", DType::F16, "007e"),
            ("-nan", DType::F16, "00fe"),
            ("-inf", DType::F16, "00fc"),
            ("2.980232238769532e-08", DType::F16, "0000"),
            ("5.96e-8", DType::F16, "0100"),
            ("1.0004882821813226", DType::F16, "003c"),
            ("1e-3", DType::BF16, "833a"),
            ("65520", DType::BF16, "8047"),
            ("3.39e38", DType::BF16, "ERR"),
            ("-nan", DType::BF16, "c07f"),
            ("1.0039062500009095", DType::BF16, "803f"),
            ("1077936129", DType::BF16, "804e"),
            ("1e-3", DType::F32, "6f12833a"),
            ("3.4028235677973366e38", DType::F32, "ERR"),
            ("-nan", DType::F32, "0000c0ff"),
            ("1152921573326323713", DType::F32, "0100805d"),
            ("1e40", DType::F64, "a55cc3f129633d48"),
            ("127.99999", DType::I8, "7f"),
            ("128.0", DType::I8, "ERR"),
            ("-128.0", DType::I8, "80"),
            ("-128.0001", DType::I8, "ERR"),
            ("300", DType::I8, "ERR"),
            ("-1", DType::I8, "ff"),
            ("-inf", DType::I8, "ERR"),
            ("nan", DType::I8, "ERR"),
            ("-1", DType::U8, "ff"),
            ("-255", DType::U8, "01"),
            ("-256", DType::U8, "ERR"),
            ("-0.1", DType::U8, "ERR"),
            ("-0.0", DType::U8, "00"),
            ("255.5", DType::U8, "ff"),
            ("-1", DType::U64, "ERR"),
            ("-65536", DType::U32, "0000ffff"),
            ("9.223372036854776e18", DType::I64, "ERR"),
            ("-9.223372036854776e18", DType::I64, "0000000000000080"),
            ("nan", DType::BOOL, "01"),
            ("-0.0", DType::BOOL, "00"),
            ("True", DType::F16, "003c"),
        ];
        for (v, d, want) in cases {
            assert_eq!(hex(v, *d), *want, "{v} as {d}");
        }
        assert!(Scalar::parse("9223372036854775808").is_err());
        assert!(Scalar::parse("zero").is_err());
    }

    #[test]
    fn to_matches_torch_tensor_casts() {
        let mut b = [0u8; 1];
        for (x, want) in [
            (200.0, -56i8),
            (-200.0, 56),
            (1e10, 0),
            (f32::NAN, 0),
            (-128.9, -128),
        ] {
            from_f32_as_torch(x, DType::I8, &mut b).unwrap();
            assert_eq!(b[0] as i8, want, "{x}");
        }
        from_f32_as_torch(-2.5, DType::U8, &mut b).unwrap();
        assert_eq!(b[0], 254);
        let mut h = [0u8; 2];
        from_f32_as_torch(f32::NAN, DType::BF16, &mut h).unwrap();
        assert_eq!(h, [0xff, 0xff]);
        assert!(positive(DType::F32, &f32::NAN.to_le_bytes()) == Some(false));
        assert!(positive(DType::BF16, &[0x80, 0x3f]) == Some(true));
    }
}
