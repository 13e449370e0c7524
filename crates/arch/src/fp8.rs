//! FP8 releases: which weights are stored scaled, by which scale tensor and block shape, as the
//! reference's `ModelBase.dequant_model` (`conversion/base.py`, `dequant_simple`) reads them.
//!
//! * `quantization_config.quant_method == "fp8"` (DeepSeek-V3, the Qwen3 FP8 releases): each
//!   `NAME_scale_inv` scales `NAME`, blocks of `weight_block_size` (per-tensor or per-channel
//!   without it); `*.activation_scale`, `*_activation_scale` and `*.qscale_act` are not used;
//!   the Mistral layout's `*.qscale_weight` scales `*.weight`.
//! * `quant_method == "compressed-tensors"` with `format == "float-quantized"` (one config group,
//!   strategy `channel` or `block`): each `*.weight_scale` scales `*.weight`, blocks of the
//!   group's `block_structure`.
//!
//! The reference multiplies `weight.float()` by the scale repeated over each block, cropped to
//! the weight's shape, in float32; the weight then goes through the architecture's rules as an
//! F32 tensor of its own shape. Nothing here reads tensor bytes: the engine's
//! `transform::fp8` computes the values. Where the reference would silently crop a scale larger
//! than the weight's blocks or fail deep in torch, this refuses, naming the tensor.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;
use weightport_core::{DType, Error, Location, Result};

use crate::config::HParams;
use crate::origin::SourceTensor;

/// The largest block edge accepted (real releases use 128).
pub const MAX_BLOCK: u64 = 1 << 16;

/// One weight stored scaled: the engine reads it as F32 `weight · scale`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dequant {
    /// The weight's index in the slice given to [`plan`](fn@crate::plan).
    pub weight: usize,
    /// The scale tensor's index.
    pub scale: usize,
    /// Per weight dimension, outermost first: `(scale size, block)`: element `i` of that
    /// dimension takes scale index `i / block` (`(1, huge)` for a broadcast dimension).
    pub dims: Vec<(u64, u64)>,
}

/// What a release's quantization config makes of its tensors.
#[derive(Debug, Default)]
pub struct Fp8 {
    /// The weights read scaled.
    pub dequant: Vec<Dequant>,
    /// Names of the tensors consumed or unused (scales, activation scales), with the reason.
    pub dropped: HashMap<String, &'static str>,
}

/// How a quantization method names its scales.
struct Layout {
    /// `(scale suffix, the weight's name is the scale's with the suffix replaced by this)`.
    scales: &'static [(&'static str, &'static str)],
    /// Suffixes of tensors the reference removes unused.
    unused: &'static [&'static str],
    block: Option<Vec<u64>>,
}

const FP8_SCALES: &[(&str, &str)] = &[("_scale_inv", ""), (".qscale_weight", ".weight")];
const FP8_UNUSED: &[&str] = &[".activation_scale", "_activation_scale", ".qscale_act"];
const CT_SCALES: &[(&str, &str)] = &[(".weight_scale", ".weight")];

impl Fp8 {
    /// The scaled weights of a release with config `hp` and `tensors` (`dir` names it in
    /// errors); empty when its quantization method stores none.
    pub fn of(hp: &HParams, tensors: &[SourceTensor], dir: &Path) -> Result<Fp8> {
        let Some(layout) = layout(hp, dir)? else {
            if let Some(t) = tensors.iter().find(|t| is_fp8(t.dtype)) {
                return Err(bad(
                    dir,
                    &t.name,
                    format!(
                        "{} tensor in a release whose quantization_config does not scale it \
                         (quant_method fp8 or compressed-tensors float-quantized)",
                        t.dtype.name()
                    ),
                ));
            }
            return Ok(Fp8::default());
        };
        let by_name: HashMap<&str, usize> = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.as_str(), i))
            .collect();
        let mut fp8 = Fp8::default();
        let mut scaled = vec![false; tensors.len()];
        for (i, t) in tensors.iter().enumerate() {
            if layout.unused.iter().any(|s| t.name.ends_with(s)) {
                fp8.dropped
                    .insert(t.name.clone(), "activation scale, not used");
                continue;
            }
            let Some((suffix, with)) = layout.scales.iter().find(|(s, _)| t.name.ends_with(s))
            else {
                continue;
            };
            let weight_name = format!("{}{with}", &t.name[..t.name.len() - suffix.len()]);
            let Some(&w) = by_name.get(weight_name.as_str()) else {
                return Err(bad(
                    dir,
                    &t.name,
                    format!("scale of `{weight_name}`, which the release does not hold"),
                ));
            };
            let dims = scale_dims(&tensors[w], t, layout.block.as_deref())
                .map_err(|why| bad(dir, &t.name, why))?;
            scaled[w] = true;
            fp8.dequant.push(Dequant {
                weight: w,
                scale: i,
                dims,
            });
            fp8.dropped
                .insert(t.name.clone(), "FP8 scale, applied to its weight");
        }
        for (t, _) in tensors.iter().zip(&scaled).filter(|(_, s)| !**s) {
            if is_fp8(t.dtype) {
                return Err(bad(
                    dir,
                    &t.name,
                    format!("{} tensor without a scale tensor", t.dtype.name()),
                ));
            }
        }
        Ok(fp8)
    }
}

fn is_fp8(d: DType) -> bool {
    matches!(
        d,
        DType::F8_E4M3 | DType::F8_E5M2 | DType::F8_E4M3FNUZ | DType::F8_E5M2FNUZ | DType::F8_E8M0
    )
}

/// The scale layout of the release's `quantization_config`, `None` when it stores no FP8
/// scales (no config, or a method handled elsewhere).
fn layout(hp: &HParams, dir: &Path) -> Result<Option<Layout>> {
    let Some(q) = hp.raw.get("quantization_config").filter(|q| q.is_object()) else {
        return Ok(None);
    };
    match q.get("quant_method").and_then(Value::as_str) {
        Some("fp8") => Ok(Some(Layout {
            scales: FP8_SCALES,
            unused: FP8_UNUSED,
            block: block_of(q.get("weight_block_size"), dir, "weight_block_size")?,
        })),
        Some("compressed-tensors")
            if q.get("format").and_then(Value::as_str) == Some("float-quantized") =>
        {
            let groups = q.get("config_groups").and_then(Value::as_object);
            let weights = match groups.map(|g| g.values().collect::<Vec<_>>()).as_deref() {
                Some([g]) => g.get("weights").cloned().unwrap_or(Value::Null),
                _ => {
                    return Err(unsupported(
                        dir,
                        "compressed-tensors with other than one config group".into(),
                    ))
                }
            };
            let strategy = weights.get("strategy").and_then(Value::as_str);
            if !matches!(strategy, Some("channel" | "block"))
                || weights.get("group_size").is_some_and(|g| !g.is_null())
            {
                return Err(unsupported(
                    dir,
                    format!("compressed-tensors strategy {strategy:?} with a group size"),
                ));
            }
            Ok(Some(Layout {
                scales: CT_SCALES,
                unused: &[],
                block: block_of(weights.get("block_structure"), dir, "block_structure")?,
            }))
        }
        _ => Ok(None),
    }
}

/// A block shape: absent or null, or a list of 1 to 4 positive integers up to [`MAX_BLOCK`].
fn block_of(v: Option<&Value>, dir: &Path, key: &str) -> Result<Option<Vec<u64>>> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let sizes: Option<Vec<u64>> = v
        .as_array()
        .filter(|a| (1..=4).contains(&a.len()))
        .and_then(|a| a.iter().map(Value::as_u64).collect());
    match sizes {
        Some(s) if s.iter().all(|&b| (1..=MAX_BLOCK).contains(&b)) => Ok(Some(s)),
        _ => Err(Error::Malformed {
            at: Location::file(dir.join("config.json")),
            format: None,
            reason: format!(
                "quantization_config {key} {v} is not a list of 1 to 4 block sizes in 1..={MAX_BLOCK}"
            ),
        }),
    }
}

/// Per weight dimension `(scale size, block)` for weight `w` scaled by `s` in blocks of
/// `block` (applied to the scale's last dimensions), as `dequant_simple` broadcasts them.
fn scale_dims(
    w: &SourceTensor,
    s: &SourceTensor,
    block: Option<&[u64]>,
) -> std::result::Result<Vec<(u64, u64)>, String> {
    if !matches!(s.dtype, DType::F32 | DType::BF16 | DType::F16) {
        return Err(format!(
            "scale stored as {}, not F32, BF16 or F16",
            s.dtype.name()
        ));
    }
    if !matches!(
        w.dtype,
        DType::F8_E4M3 | DType::F8_E5M2 | DType::F32 | DType::BF16 | DType::F16
    ) {
        return Err(format!("scales `{}` stored as {}", w.name, w.dtype.name()));
    }
    let block = block.unwrap_or(&[]);
    // A scalar scale counts as one value broadcast everywhere.
    let shape: &[u64] = if s.shape.is_empty() { &[1] } else { &s.shape };
    if shape.len() > w.shape.len().max(1) || block.len() > shape.len() {
        return Err(format!(
            "scale shape {:?} does not fit weight `{}` {:?} in blocks {block:?}",
            s.shape, w.name, w.shape
        ));
    }
    let first_block = shape.len() - block.len();
    let mut dims = Vec::with_capacity(w.shape.len());
    for (k, &wd) in w.shape.iter().enumerate() {
        let sd = shape.get(k).copied().unwrap_or(1);
        let b = if k >= first_block && k < shape.len() {
            block[k - first_block]
        } else {
            1
        };
        let fits = if b > 1 {
            sd == wd.div_ceil(b)
        } else {
            sd == wd
        };
        if sd == 1 && (b == 1 || wd <= b) {
            dims.push((1, u64::MAX));
        } else if fits {
            dims.push((sd, b));
        } else {
            return Err(format!(
                "scale shape {:?} does not match the blocks {block:?} of weight `{}` {:?}",
                s.shape, w.name, w.shape
            ));
        }
    }
    Ok(dims)
}

fn bad(dir: &Path, tensor: &str, reason: String) -> Error {
    Error::Malformed {
        at: Location::file(dir).tensor(tensor),
        format: None,
        reason,
    }
}

fn unsupported(dir: &Path, what: String) -> Error {
    Error::Unsupported {
        at: Location::file(dir.join("config.json")),
        format: None,
        what,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, dtype: DType, shape: &[u64]) -> SourceTensor {
        SourceTensor {
            name: name.into(),
            shape: shape.to_vec(),
            dtype,
            file: "m.safetensors".into(),
        }
    }

    #[test]
    fn block_scales_cover_ragged_edges_exactly() {
        let w = t("a.weight", DType::F8_E4M3, &[80, 112]);
        let s = t("a.weight_scale_inv", DType::F32, &[3, 4]);
        assert_eq!(
            scale_dims(&w, &s, Some(&[32, 32])).unwrap(),
            vec![(3, 32), (4, 32)]
        );
        let short = t("a.weight_scale_inv", DType::F32, &[2, 4]);
        assert!(scale_dims(&w, &short, Some(&[32, 32]))
            .unwrap_err()
            .contains("does not match"));
        let long = t("a.weight_scale_inv", DType::F32, &[4, 4]);
        assert!(scale_dims(&w, &long, Some(&[32, 32])).is_err());
    }

    #[test]
    fn per_tensor_and_per_channel_scales_broadcast() {
        let w = t("a.weight", DType::F8_E4M3, &[8, 16]);
        let scalar = t("a.weight_scale", DType::F32, &[]);
        assert_eq!(
            scale_dims(&w, &scalar, None).unwrap(),
            vec![(1, u64::MAX); 2]
        );
        let channel = t("a.weight_scale", DType::BF16, &[8, 1]);
        assert_eq!(
            scale_dims(&w, &channel, None).unwrap(),
            vec![(8, 1), (1, u64::MAX)]
        );
        let wrong = t("a.weight_scale", DType::F32, &[16]);
        assert!(scale_dims(&w, &wrong, None).is_err());
        let int = t("a.weight_scale", DType::I32, &[8, 1]);
        assert!(scale_dims(&w, &int, None).unwrap_err().contains("not F32"));
    }

    #[test]
    fn block_sizes_are_checked() {
        let dir = Path::new("r");
        for bad in [
            "[0, 128]",
            "[128, -1]",
            "[]",
            "128",
            "[1,1,1,1,1]",
            "[131072, 1]",
        ] {
            let v: Value = serde_json::from_str(bad).unwrap();
            assert!(
                block_of(Some(&v), dir, "weight_block_size").is_err(),
                "{bad}"
            );
        }
        let v: Value = serde_json::from_str("[128, 128]").unwrap();
        assert_eq!(block_of(Some(&v), dir, "k").unwrap(), Some(vec![128, 128]));
    }
}
