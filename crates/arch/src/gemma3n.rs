//! Gemma 3n's text model (`conversion/gemma.py` `Gemma3NModel`, the named hook
//! [`crate::table::Hook::Gemma3n`]).
//!
//! What differs from Gemma 3's converter, which it extends:
//! - norms are written as stored (no `1 + w`), the `_scale` tensor as `_scale.weight`;
//! - `embed_tokens` and `embed_tokens_per_layer` keep every row, padded with zero rows up to
//!   `vocab_size` (the release's per-layer table has `vocab_size_per_layer_input` rows);
//! - `altup_projections.{0,1,2}` and `altup_unembed_projections.{0,1,2}` are stacked into
//!   `altup_proj` / `altup_unembd_proj` `[3, n, n]` when the third is read;
//! - `feed_forward_length` is one entry per layer (transformers makes a list of it), then the
//!   altup, per-layer-input and shared-KV keys, `activation_sparsity_scale` (torch's float32
//!   `Normal(0, 1).icdf(p)` per layer, [`sparsity_scale`]) and the sliding-window pattern of
//!   `layer_types`.

use serde_json::Value;
use weightport_core::{Error, Format, Location, MetaType, MetaValue, Result};

use crate::config::{bad, HParams};

/// The stacked tensors: HF name prefix of a part (`…{k}.weight`, k = 0, 1, 2) and GGUF name.
pub(crate) const STACKS: [(&str, &str); 2] = [
    ("model.altup_projections.", "altup_proj.weight"),
    (
        "model.altup_unembed_projections.",
        "altup_unembd_proj.weight",
    ),
];

/// Parts per stack (`altup_num_inputs - 1`; the reference asserts 4 inputs).
pub(crate) const PARTS: usize = 3;

/// The stack and part an HF name (after the name rules) belongs to: `Ok(None)` for any other
/// tensor, an error for a name of a stack whose part is not 0, 1 or 2 (the reference's
/// `ValueError`).
pub(crate) fn stack_part(hf: &str, hp: &HParams) -> Result<Option<(usize, usize)>> {
    for (s, (prefix, _)) in STACKS.iter().enumerate() {
        let Some(rest) = hf.strip_prefix(prefix) else {
            continue;
        };
        return match rest {
            "0.weight" => Ok(Some((s, 0))),
            "1.weight" => Ok(Some((s, 1))),
            "2.weight" => Ok(Some((s, 2))),
            _ => Err(bad(
                &hp.path,
                format!("tensor `{hf}`: Gemma 3n stacks exactly 3 altup projections (0, 1, 2)"),
            )),
        };
    }
    Ok(None)
}

/// Refuses what the reference refuses before reading a weight: `altup_num_inputs` other than 4.
pub(crate) fn check_config(hp: &HParams) -> Result<()> {
    let n = hp.need_u32(&["altup_num_inputs"])?;
    if n != 4 {
        return Err(Error::Unsupported {
            at: Location::file(&hp.path),
            format: Some(Format::Gguf),
            what: format!(
                "altup_num_inputs = {n}: the Gemma 3n converter supports 4 altup inputs only"
            ),
        });
    }
    Ok(())
}

/// The rows `embed_tokens` / `embed_tokens_per_layer` are padded to: `vocab_size`.
pub(crate) fn padded_rows(hp: &HParams) -> Result<u64> {
    hp.uint(&["vocab_size"])?
        .ok_or_else(|| bad(&hp.path, "config.json lacks `vocab_size`"))
}

/// `{arch}.feed_forward_length` as transformers' `Gemma3nTextConfig` holds it: a list with one
/// width per layer (an integer is repeated), written as an i32 array.
pub(crate) fn feed_forward_lengths(hp: &HParams, block_count: u32) -> Result<MetaValue> {
    let key = "intermediate_size";
    let v = hp
        .raw
        .get(key)
        .ok_or_else(|| bad(&hp.path, format!("config.json lacks `{key}`")))?;
    let widths: Vec<u64> = match v {
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_u64().filter(|&n| n <= i32::MAX as u64))
            .collect::<Option<_>>()
            .ok_or_else(|| bad(&hp.path, format!("`{key}` is not a list of i32: {v}")))?,
        _ => {
            let n = hp.need_u32(&[key])?;
            vec![u64::from(n); block_count as usize]
        }
    };
    if widths.len() != block_count as usize {
        return Err(bad(
            &hp.path,
            format!(
                "`{key}` lists {} widths for {block_count} layers",
                widths.len()
            ),
        ));
    }
    let items = widths
        .into_iter()
        .map(|n| MetaValue::I32(n as i32))
        .collect();
    Ok(MetaValue::TypedArray {
        elem: MetaType::I32,
        items,
    })
}

/// `activation_sparsity_pattern`, or transformers' default (0.95 for the first 10 layers of a
/// model of more than 10, else 0), one entry per layer.
fn sparsity_pattern(hp: &HParams, block_count: u32) -> Result<Vec<f64>> {
    let key = "activation_sparsity_pattern";
    let pattern: Vec<f64> = match hp.raw.get(key).filter(|v| !v.is_null()) {
        Some(Value::Array(items)) => items
            .iter()
            .map(Value::as_f64)
            .collect::<Option<_>>()
            .ok_or_else(|| bad(&hp.path, format!("`{key}` is not a list of numbers")))?,
        Some(v) => {
            let p = v
                .as_f64()
                .ok_or_else(|| bad(&hp.path, format!("`{key}` is not a number: {v}")))?;
            vec![p; block_count as usize]
        }
        None => {
            let sparse = if block_count > 10 { 10 } else { 0 };
            (0..block_count)
                .map(|i| if i < sparse { 0.95 } else { 0.0 })
                .collect()
        }
    };
    if pattern.len() != block_count as usize {
        return Err(bad(
            &hp.path,
            format!(
                "`{key}` has {} values for {block_count} layers",
                pattern.len()
            ),
        ));
    }
    Ok(pattern)
}

/// `{arch}.activation_sparsity_scale`: [`sparsity_scale`] of each layer's pattern value.
pub(crate) fn sparsity_scales(hp: &HParams, block_count: u32) -> Result<MetaValue> {
    let items = sparsity_pattern(hp, block_count)?
        .into_iter()
        .map(|p| MetaValue::F32(sparsity_scale(p as f32)))
        .collect();
    Ok(MetaValue::TypedArray {
        elem: MetaType::F32,
        items,
    })
}

/// `{arch}.attention.sliding_window_pattern`: `layer_types[i] == "sliding_attention"`, with
/// transformers' default (every 5th layer full) when config.json has none.
pub(crate) fn sliding_pattern(hp: &HParams, block_count: u32) -> Result<MetaValue> {
    let items = match hp.raw.get("layer_types").filter(|v| !v.is_null()) {
        Some(Value::Array(types)) => types
            .iter()
            .map(|t| MetaValue::Bool(t.as_str() == Some("sliding_attention")))
            .collect(),
        Some(v) => return Err(bad(&hp.path, format!("`layer_types` is not a list: {v}"))),
        None => (0..block_count)
            .map(|i| MetaValue::Bool(!(i + 1).is_multiple_of(5)))
            .collect(),
    };
    Ok(MetaValue::TypedArray {
        elem: MetaType::Bool,
        items,
    })
}

/// torch's float32 `Normal(0, 1).icdf(p)`: `erfinv(2p − 1) · √2`, each step rounded to f32 as
/// torch's CPU kernels round it (`p` 0 gives −∞, 1 gives +∞, outside [0, 1] NaN).
pub fn sparsity_scale(p: f32) -> f32 {
    let y = 2.0f32 * p - 1.0;
    erfinv(y) * std::f64::consts::SQRT_2 as f32
}

/// The inverse error function as torch 2.15's float32 CPU kernel computes it (measured against
/// it, fixtures/expected/arch/altup.json): a rational first approximation in f32 (Pavlis'
/// coefficients, central range |y| ≤ 0.7), then two Newton steps whose correction is computed
/// in f64 and rounded to f32.
fn erfinv(y: f32) -> f32 {
    let y_abs = y.abs();
    if y_abs > 1.0 || y.is_nan() {
        return f32::NAN;
    }
    if y_abs == 1.0 {
        return f32::INFINITY.copysign(y);
    }
    let mut x = if y_abs <= 0.7 {
        central(y)
    } else {
        tail(y, y_abs)
    };
    let k = 2.0 / std::f64::consts::PI.sqrt();
    for _ in 0..2 {
        let xd = f64::from(x);
        let corr = (libm::erf(xd) - f64::from(y)) / (k * (-xd * xd).exp());
        x -= corr as f32;
    }
    x
}

/// The first approximation for |y| ≤ 0.7.
fn central(y: f32) -> f32 {
    // The coefficients are C++ double literals converted to float, as torch's `T(…)`.
    const A: [f64; 4] = [0.886226899, -1.645349621, 0.914624893, -0.140543331];
    const B: [f64; 4] = [-2.118377725, 1.442710462, -0.329097515, 0.012229801];
    let (a, b) = (A.map(|v| v as f32), B.map(|v| v as f32));
    let z = y * y;
    let num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0];
    let dem = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + 1.0;
    y * num / dem
}

/// The first approximation for 0.7 < |y| < 1.
fn tail(y: f32, y_abs: f32) -> f32 {
    const C: [f64; 4] = [-1.970840454, -1.624906493, 3.429567803, 1.641345311];
    const D: [f64; 2] = [3.543889200, 1.637067800];
    let (c, d) = (C.map(|v| v as f32), D.map(|v| v as f32));
    let z = (-((1.0 - y_abs) / 2.0).ln()).sqrt();
    let num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];
    let dem = (d[1] * z + d[0]) * z + 1.0;
    num.copysign(y) / dem
}

#[cfg(test)]
mod tests {
    use super::sparsity_scale;

    /// The values torch 2.15 gave for `Normal(0, 1).icdf(p)` in float32, recorded by
    /// fixtures/gen/gen_arch_gemma3n.py (the releases' 0.95 and 0.0 among them), bit for bit.
    #[test]
    fn sparsity_scales_are_torch_s_float32_bits() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/expected/arch/altup.json"
        );
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let rows = doc["gemma3n"]["sparsity_scale"].as_array().unwrap();
        assert!(rows.len() >= 20);
        for row in rows {
            let p = row[0].as_f64().unwrap() as f32;
            let want = u32::from_str_radix(row[1].as_str().unwrap(), 16).unwrap();
            let got = sparsity_scale(p);
            assert_eq!(
                got.to_bits(),
                want,
                "p = {p}: {got} vs {}",
                f32::from_bits(want)
            );
        }
    }

    /// Outside [0, 1] torch gives NaN; the ends give infinities.
    #[test]
    fn sparsity_scale_ends_and_out_of_range() {
        assert_eq!(sparsity_scale(0.0), f32::NEG_INFINITY);
        assert_eq!(sparsity_scale(1.0), f32::INFINITY);
        assert!(sparsity_scale(1.5).is_nan());
        assert!(sparsity_scale(-0.1).is_nan());
        assert!(sparsity_scale(f32::NAN).is_nan());
    }
}
