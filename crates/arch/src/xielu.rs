//! Apertus' xIELU activation parameters ([`crate::table::Hook::XieluValues`],
//! `ApertusModel.modify_tensors`): tensor values that become keys.
//!
//! Each layer holds four one-element tensors `model.layers.{bid}.mlp.act_fn.{alpha_n, alpha_p,
//! beta, eps}`. The reference reads each with `.float().item()`, writes no tensor for it, and once
//! it has one per layer writes the F32 array `xielu.<param>` (values by block). It does so while
//! preparing tensors, so the four keys follow `general.architecture`, each at the moment its last
//! tensor is read (the reference's tensor order). The plan never reads tensor data: the caller
//! reads the values of the tensors [`value_tensors`] names (four bytes at most each, a few per
//! layer) and hands them over in [`crate::PlanOptions::tensor_values`].

use std::collections::BTreeMap;
use std::path::Path;

use weightport_core::{DType, Error, Format, Location, MetaType, MetaValue, Result};

use crate::config::bad;
use crate::origin::SourceTensor;
use crate::table::{ArchSpec, Hook};

/// The parameters, as the tensor names end and the keys are named.
const PARAMS: [&str; 4] = ["alpha_n", "alpha_p", "beta", "eps"];

/// What the plan records for a dropped xIELU tensor.
pub(crate) const DROPPED: &str = "xIELU parameter, written as a xielu.* key";

/// `(param, bid)` when `name` is `model.layers.{bid}.mlp.act_fn.{param}`.
fn parse(name: &str) -> Option<(usize, u32)> {
    let rest = name.strip_prefix("model.layers.")?;
    let (bid, rest) = rest.split_once('.')?;
    let param = rest.strip_prefix("mlp.act_fn.")?;
    let p = PARAMS.iter().position(|q| *q == param)?;
    let ok = !bid.is_empty() && bid.len() <= 9 && bid.bytes().all(|b| b.is_ascii_digit());
    Some((p, if ok { bid.parse().ok()? } else { return None }))
}

/// Whether the reference drops `name` as an xIELU parameter (its suffix alone decides).
pub(crate) fn is_param(name: &str) -> bool {
    PARAMS
        .iter()
        .any(|p| name.ends_with(&format!(".act_fn.{p}")))
}

/// The indices of the tensors whose values the plan of a release of architecture `spec` (its
/// config.json in `config_dir`) needs (none unless `spec` has [`Hook::XieluValues`]), in
/// `tensors`' order. Refuses, naming it, a parameter tensor that is not one float element (the
/// reference's `.item()` fails on it) or is not named `model.layers.{bid}.mlp.act_fn.*`.
/// Callers go through [`crate::plan::value_tensors`], which resolves `spec`.
pub(crate) fn value_tensors_of(
    spec: &ArchSpec,
    config_dir: &Path,
    tensors: &[SourceTensor],
) -> Result<Vec<usize>> {
    if !spec.hooks.contains(&Hook::XieluValues) {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (i, t) in tensors.iter().enumerate() {
        if !is_param(&t.name) {
            continue;
        }
        let refuse = |what: String| Error::Unsupported {
            at: Location::file(config_dir).tensor(&t.name),
            format: Some(Format::Gguf),
            what,
        };
        if parse(&t.name).is_none() {
            return Err(refuse(
                "an xIELU parameter outside `model.layers.{bid}.mlp.act_fn`".into(),
            ));
        }
        if t.shape.iter().product::<u64>() != 1 {
            return Err(refuse(format!(
                "an xIELU parameter of shape {:?} (one value expected)",
                t.shape
            )));
        }
        if !matches!(t.dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(refuse(format!(
                "an xIELU parameter of type {} (F32, F16 or BF16 expected)",
                t.dtype
            )));
        }
        out.push(i);
    }
    Ok(out)
}

/// The `xielu.*` keys of a release of `n_layers` layers whose tensors, in the reference's
/// `order`, are `tensors` and whose parameter values are `values` (by tensor index): each key
/// when its last tensor comes. Refuses a parameter missing for some layer, given twice, of a
/// layer past `n_layers`, or whose value was not read.
pub(crate) fn kvs(
    dir: &Path,
    tensors: &[SourceTensor],
    order: &[usize],
    values: &BTreeMap<usize, f32>,
    n_layers: u32,
) -> Result<Vec<(String, MetaValue)>> {
    let mut seen: [BTreeMap<u32, f32>; 4] = Default::default();
    let mut done: Vec<(usize, usize)> = Vec::new();
    for (pos, &i) in order.iter().enumerate() {
        let Some((p, bid)) = parse(&tensors[i].name) else {
            continue;
        };
        let at = || Location::file(dir).tensor(&tensors[i].name);
        if bid >= n_layers {
            return Err(bad(
                dir,
                format!("`{}`: layer {bid} of {n_layers}", tensors[i].name),
            ));
        }
        let v = *values.get(&i).ok_or_else(|| Error::Unsupported {
            at: at(),
            format: Some(Format::Gguf),
            what: "the xIELU parameter's value was not read".into(),
        })?;
        if seen[p].insert(bid, v).is_some() {
            return Err(bad(dir, format!("`{}` is given twice", tensors[i].name)));
        }
        if seen[p].len() == n_layers as usize {
            done.push((pos, p));
        }
    }
    for (p, got) in seen.iter().enumerate() {
        if let Some(b) = (0..n_layers).find(|b| !got.contains_key(b)) {
            return Err(bad(
                dir,
                format!(
                    "tensor `model.layers.{b}.mlp.act_fn.{}` is missing",
                    PARAMS[p]
                ),
            ));
        }
    }
    done.sort();
    Ok(done
        .into_iter()
        .map(|(_, p)| {
            let items = seen[p].values().map(|&v| MetaValue::F32(v)).collect();
            (
                format!("xielu.{}", PARAMS[p]),
                MetaValue::TypedArray {
                    elem: MetaType::F32,
                    items,
                },
            )
        })
        .collect())
}

/// The value of a one-element tensor of `dtype` from its little-endian `bytes`, as torch's
/// `.float().item()` gives it (`None`: not one F32/F16/BF16 element).
pub fn value_of(dtype: DType, bytes: &[u8]) -> Option<f32> {
    match (dtype, bytes.len()) {
        (DType::F32, 4) => Some(f32::from_le_bytes(bytes.try_into().ok()?)),
        (DType::F16, 2) => Some(half::f16::from_le_bytes([bytes[0], bytes[1]]).to_f32()),
        (DType::BF16, 2) => Some(half::bf16::from_le_bytes([bytes[0], bytes[1]]).to_f32()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        assert_eq!(parse("model.layers.12.mlp.act_fn.eps"), Some((3, 12)));
        assert_eq!(parse("model.layers.x.mlp.act_fn.eps"), None);
        assert_eq!(parse("model.layers.1.mlp.act_fn.gamma"), None);
        assert!(is_param("foo.act_fn.beta"));
        assert_eq!(value_of(DType::BF16, &[0x80, 0x3f]), Some(1.0));
        assert_eq!(value_of(DType::F16, &[0, 0x3c]), Some(1.0));
        assert_eq!(value_of(DType::F32, &[0, 0]), None);
    }
}
