//! `--imatrix`: which importance weights each quantized tensor gets, and llama-quantize's
//! refusals around them (`llama_model_quantize_impl` of the pinned llama.cpp).
//!
//! A tensor's weights are the entry of its own GGUF name, `ne[0] × ne[2]` values (one row of
//! `ne[0]` per expert of a 3-D tensor). Without any importance matrix, a tensor whose target type
//! llama-quantize will not write without one ([`mix::requires_imatrix`]) is refused ("this
//! quantization requires an importance matrix"); with one, such a tensor that has no entry is
//! refused too ("missing importance matrix for tensor … in a very low-bit quantization"). An
//! entry of the wrong size is refused, except for `token_embd.weight`, which is then quantized
//! without weights (llama-quantize's exception: that entry never fits).

use std::sync::Arc;

use weightport_arch::mix::{self, Importance, QuantOptions};
use weightport_core::{sanitize, DType, Error, Location, Result};

/// The importance weights tensor `name` of shape `shape` (outermost first) is quantized to
/// `to` with, or the refusal llama-quantize makes.
pub(crate) fn weights_for(
    q: &QuantOptions,
    name: &str,
    shape: &[u64],
    to: DType,
) -> Result<Option<Arc<[f32]>>> {
    let required = mix::requires_imatrix(name, to, q.ftype);
    let required = required && !q.dry_run;
    let Some(im) = q.imatrix.as_ref().filter(|m| !m.weights.is_empty()) else {
        if required {
            return Err(refused(
                name,
                format!(
                    "this quantization requires an importance matrix: llama-quantize does not \
                     write `{}` as {to} in a {} file without one (pass {} FILE; \
                     llama-imatrix computes it)",
                    sanitize(name),
                    q.ftype.name(),
                    weightport_core::Knob::Imatrix
                ),
            ));
        }
        return Ok(None);
    };
    let found = lookup(im, name, shape)?;
    if found.is_none() && required {
        return Err(refused(
            name,
            format!(
                "missing importance matrix for tensor `{}` in a very low-bit quantization ({to}): \
                 {} has no entry for it, and llama-quantize refuses to write it without one",
                sanitize(name),
                sanitize(&im.file)
            ),
        ));
    }
    Ok(found)
}

/// The entry of `name`, checked against the tensor's `ne[0] × ne[2]`.
fn lookup(im: &Importance, name: &str, shape: &[u64]) -> Result<Option<Arc<[f32]>>> {
    let Some(w) = im.weights.get(name) else {
        return Ok(None);
    };
    let (ne0, ne2) = row_and_experts(shape);
    let want = ne0.saturating_mul(ne2);
    if w.len() as u64 == want {
        return Ok(Some(w.clone()));
    }
    if matches!(name, "token_embd.weight" | "per_layer_token_embd.weight") {
        return Ok(None);
    }
    Err(refused(
        name,
        format!(
            "the importance matrix {} has {} values for this tensor, which needs {want} \
             (ne[0] {ne0} × {ne2} experts): it was computed for another model",
            sanitize(&im.file),
            w.len()
        ),
    ))
}

/// `ne[0]` and `ne[2]` of a tensor of shape `shape` (outermost first).
pub(crate) fn row_and_experts(shape: &[u64]) -> (u64, u64) {
    let ne0 = shape.last().copied().unwrap_or(1);
    let ne2 = if shape.len() >= 3 {
        shape[shape.len() - 3]
    } else {
        1
    };
    (ne0, ne2)
}

fn refused(name: &str, reason: String) -> Error {
    Error::Refused {
        at: Location::default().tensor(name.to_string()),
        reason,
    }
}

/// What an importance matrix covered in a plan: its entries that name no tensor of the output
/// (llama-quantize ignores them silently), and the quantized tensors that get no weights
/// (llama-quantize's "did not find weights for …").
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Entries naming no tensor of the output.
    pub unused: Vec<String>,
    /// Quantized tensors without importance data.
    pub uncovered: Vec<String>,
}

/// The coverage of `im` over `quantized` (the names of the tensors the plan quantizes) and
/// `all` (every output tensor name).
pub fn coverage<'a>(
    im: &Importance,
    all: impl IntoIterator<Item = &'a str>,
    quantized: impl IntoIterator<Item = &'a str>,
) -> Coverage {
    let all: std::collections::BTreeSet<&str> = all.into_iter().collect();
    Coverage {
        unused: im
            .weights
            .keys()
            .filter(|k| !all.contains(k.as_str()))
            .cloned()
            .collect(),
        uncovered: quantized
            .into_iter()
            .filter(|n| !im.weights.contains_key(*n))
            .map(str::to_string)
            .collect(),
    }
}

/// `--imatrix FILE` with `--include-weights`/`--exclude-weights` (each a regex searched in the
/// entry names; llama-quantize searches plain substrings, which a regex without special
/// characters is, `.` aside): the file read and normalised as llama-quantize reads it, the
/// entries kept, every kept value checked finite (llama-quantize refuses "non-finite" values).
/// `given` is the path as written on the command line (recorded in the output's metadata).
pub fn load(
    path: &std::path::Path,
    given: &str,
    include: &[regex::Regex],
    exclude: &[regex::Regex],
    limits: &weightport_core::Limits,
) -> Result<Importance> {
    let m = weightport_gguf::read_imatrix(path, limits)?;
    let mut weights = std::collections::BTreeMap::new();
    for e in &m.entries {
        if exclude.iter().any(|r| r.is_match(&e.name)) {
            continue;
        }
        if !include.is_empty() && !include.iter().any(|r| r.is_match(&e.name)) {
            continue;
        }
        let w = e.weights(m.legacy);
        if let Some(i) = w.iter().position(|v| !v.is_finite()) {
            return Err(Error::malformed(
                Location::file(path)
                    .tensor(e.name.clone())
                    .at(e.at + 4 * i as u64),
                None,
                format!(
                    "importance matrix value {i} is {} (llama-quantize refuses non-finite values)",
                    w[i]
                ),
            ));
        }
        weights.insert(e.name.clone(), Arc::from(w));
    }
    Ok(Importance {
        weights,
        file: given.to_string(),
        path: path.to_path_buf(),
        dataset: m.datasets.first().cloned(),
        chunks: m.chunk_count,
    })
}

/// llama-quantize's checks of every tensor it will quantize, in its order, before any is
/// written: `tensors` are (name, shape, type before, type after). The first refusal wins.
pub(crate) fn check_plan<'a>(
    q: &QuantOptions,
    tensors: impl IntoIterator<Item = (&'a str, &'a [u64], DType, DType)>,
) -> Result<()> {
    for (name, shape, from, to) in tensors {
        if from != to && to.is_block() && !from.is_block() {
            weights_for(q, name, shape, to)?;
        }
    }
    Ok(())
}
