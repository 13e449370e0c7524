//! The output plan: each output tensor, the input tensor(s) it reads, and one operation.
//!
//! Identity (`op: None`) keeps the zero-copy path. Every other operation is a [`Transform`]:
//! it declares its unit (output bytes that must be computed together: one element, one quant
//! block, one row) and the input byte ranges an output range needs, so the executor can cut a
//! tensor into chunks aligned to the unit and compute them in parallel. Casts arrive here;
//! row permutations, (de)quantization and row split/concat plug into the same interface.

use std::sync::Arc;

use regex::Regex;
use weightport_core::{
    sanitize, CastRule, DType, Error, Knob, MetaValue, Metadata, Result, TensorInfo, TensorSource,
};

use crate::transform::cast::{is_float, Cast, Measured};
use crate::transform::quality::narrowing;
use crate::transform::quantize::{Dequantize, Quantize, Requantize};
use weightport_arch::mix::{self, TypedTensor};

pub(crate) use crate::transform::Transform;

/// One output tensor.
#[derive(Clone)]
pub(crate) struct TensorRecipe {
    /// Name, dtype, shape and byte length as written.
    pub info: TensorInfo,
    /// Source tensor indices it reads.
    pub inputs: Vec<usize>,
    /// `None`: the input's bytes unchanged (zero-copy where the source is mapped).
    pub op: Option<Arc<dyn Transform>>,
    /// Why the tensor's type is not the one asked for (a `--quant` fallback), if it is not.
    pub note: Option<String>,
}

/// `--dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DtypeChoice {
    /// Keep every tensor's dtype.
    #[default]
    Keep,
    /// Cast floating-point tensors to this dtype.
    To(DType),
}

/// A `--rename` rule in sed syntax (`s/^params\//model./`; `g` flag for every match).
#[derive(Debug, Clone)]
pub struct Rename {
    re: Regex,
    with: String,
    global: bool,
}

impl Rename {
    /// Parses `s<d>pattern<d>replacement<d>[g]` (any delimiter; `\<d>` escapes it).
    pub fn parse(rule: &str) -> std::result::Result<Rename, String> {
        let mut chars = rule.chars();
        if chars.next() != Some('s') {
            return Err(format!(
                "{} `{rule}`: expected s/PATTERN/REPLACEMENT/",
                Knob::Rename
            ));
        }
        let d = chars
            .next()
            .ok_or_else(|| format!("{} `{rule}`: missing delimiter", Knob::Rename))?;
        let mut parts = vec![String::new()];
        let mut esc = false;
        for c in chars {
            match (esc, c) {
                (true, c) if c == d => {
                    parts.last_mut().expect("a part").push(c);
                    esc = false
                }
                (true, c) => {
                    let p = parts.last_mut().expect("a part");
                    p.push('\\');
                    p.push(c);
                    esc = false
                }
                (false, '\\') => esc = true,
                (false, c) if c == d => parts.push(String::new()),
                (false, c) => parts.last_mut().expect("a part").push(c),
            }
        }
        if parts.len() != 3 || !(parts[2].is_empty() || parts[2] == "g") {
            return Err(format!(
                "{} `{rule}`: expected s{d}PATTERN{d}REPLACEMENT{d} with optional g",
                Knob::Rename
            ));
        }
        let re = Regex::new(&parts[0]).map_err(|e| format!("{} `{rule}`: {e}", Knob::Rename))?;
        // sed's \1 is regex's ${1}.
        let with = Regex::new(r"\\(\d)")
            .expect("valid")
            .replace_all(&parts[1], "$${$1}")
            .into_owned();
        Ok(Rename {
            re,
            with,
            global: parts[2] == "g",
        })
    }

    fn apply(&self, name: &str) -> String {
        if self.global {
            self.re.replace_all(name, self.with.as_str()).into_owned()
        } else {
            self.re.replace(name, self.with.as_str()).into_owned()
        }
    }
}

/// How source tensors become output tensors.
#[non_exhaustive]
#[derive(Debug, Clone, Default)]
pub struct TransformOptions {
    /// `--dtype`.
    pub dtype: DtypeChoice,
    /// `--dtype-filter`: cast only tensors whose (output) name matches.
    pub dtype_filter: Option<Regex>,
    /// `--allow-lossy`: narrowing casts that overflow are done (and counted) instead of refused.
    pub allow_lossy: bool,
    /// `--rename` rules, applied in order.
    pub renames: Vec<Rename>,
    /// `--quant` (GGUF outputs).
    pub quant: Option<QuantOptions>,
    /// `--arch`: `general.architecture` of a GGUF output. Given, an HF release is converted
    /// with its tensor names kept instead of through its architecture's table.
    pub arch: Option<String>,
    /// HF release → GGUF: `general.name`, over the model card, `_name_or_path` and the
    /// directory name (the reference's `--model-name`).
    pub name: Option<String>,
    /// HF release → GGUF: `--metadata FILE.json`, `general.*` keys over what the release's
    /// model card, config and directory name say (the reference's `--metadata`).
    pub metadata: Option<std::path::PathBuf>,
    /// HF release → GGUF: the pre-tokenizer when the check hash is not a known one.
    pub pre_tokenizer: Option<String>,
    /// HF release → GGUF: leave the multi-token-prediction (NextN) layers out, as the
    /// reference's `--no-mtp` ([`weightport_arch::PlanOptions::no_mtp`]).
    pub no_mtp: bool,
    /// HF release → GGUF: only the multi-token-prediction layers with the embedding, the final
    /// norm and the head (a speculative draft), as the reference's `--mtp`.
    pub mtp_only: bool,
    /// Measure the quality figures of narrowing float casts and quantizations
    /// ([`crate::transform::quality`]): costs a decode of both sides of every cast chunk and a per-block
    /// pass over quantized ones, so only when a report asks (quantizations otherwise keep their
    /// plain RMSE and max abs error).
    pub measure_quality: bool,
    /// PEFT LoRA adapter directories merged into the weights, in order.
    pub merge_lora: Vec<std::path::PathBuf>,
    /// A factor on every merged adapter's PEFT scale (`None`: 1).
    pub lora_scale: Option<f64>,
}

pub use weightport_arch::mix::QuantOptions;

fn renamed(source: &dyn TensorSource, opts: &TransformOptions) -> Result<Vec<String>> {
    let mut seen = std::collections::HashMap::new();
    let mut names = Vec::with_capacity(source.tensors().len());
    for (i, t) in source.tensors().iter().enumerate() {
        let name = opts.renames.iter().fold(t.name.clone(), |n, r| r.apply(&n));
        if let Some(prev) = seen.insert(name.clone(), i) {
            return Err(Error::Usage(format!(
                "{} maps both `{}` and `{}` to `{}`",
                Knob::Rename,
                sanitize(&source.tensors()[prev].name),
                sanitize(&t.name),
                sanitize(&name)
            )));
        }
        names.push(name);
    }
    Ok(names)
}

/// Each tensor's target dtype, and the output order (llama-quantize's for `--quant`).
fn targets(
    source: &dyn TensorSource,
    names: &[String],
    opts: &TransformOptions,
) -> (Vec<usize>, Vec<DType>, Vec<Option<String>>) {
    let ts = source.tensors();
    let mut dtypes: Vec<DType> = ts.iter().map(|t| t.dtype).collect();
    let notes = vec![None; ts.len()];
    if let Some(q) = &opts.quant {
        let typed: Vec<TypedTensor> = ts
            .iter()
            .zip(names)
            .map(|(t, name)| TypedTensor {
                name,
                shape: &t.shape,
                dtype: t.dtype,
            })
            .collect();
        let p = mix::plan_types(&typed, source.metadata(), q);
        return (p.order, p.types, p.notes);
    }
    if let DtypeChoice::To(d) = opts.dtype {
        for (i, t) in ts.iter().enumerate() {
            if is_float(t.dtype)
                && opts
                    .dtype_filter
                    .as_ref()
                    .is_none_or(|f| f.is_match(&names[i]))
            {
                dtypes[i] = d;
            }
        }
    }
    ((0..ts.len()).collect(), dtypes, notes)
}

/// Whose conversions an operation reproduces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stage {
    /// The float conversions' NaN rule.
    pub rule: CastRule,
    /// llama-quantize's stage: a cast refuses to write a NaN or ±inf, as it does.
    pub validates: bool,
}

/// The operation turning `from` into `to` for tensor `name`, as `stage` converts.
pub(crate) fn op_for(
    from: DType,
    to: DType,
    name: &str,
    shape: &[u64],
    opts: &TransformOptions,
    stage: Stage,
) -> Result<Option<Arc<dyn Transform>>> {
    if from == to {
        return Ok(None);
    }
    let op: Arc<dyn Transform> = match (from.is_block(), to.is_block()) {
        (false, false) if opts.measure_quality && narrowing(from, to) => Arc::new(Measured::new(
            Arc::new(
                Cast::new(from, to, name, opts.allow_lossy)?
                    .rule(stage.rule)
                    .finite_only(stage.validates),
            ),
            from,
            to,
        )),
        (false, false) => Arc::new(
            Cast::new(from, to, name, opts.allow_lossy)?
                .rule(stage.rule)
                .finite_only(stage.validates),
        ),
        (false, true) => Arc::new(quantize_op(from, to, name, shape, opts)?),
        (true, false) => Arc::new(Dequantize::new(from, to)?.rule(stage.rule)),
        (true, true) => {
            if !opts.quant.as_ref().is_some_and(|q| q.allow_requantize) {
                return Err(Error::Refused {
                    at: weightport_core::Location::default().tensor(name.to_string()),
                    reason: format!(
                        "already quantized ({from}); requantizing to {to} loses quality twice: \
                         pass {}, or start from an F32/F16/BF16 model",
                        Knob::AllowRequantize
                    ),
                });
            }
            Arc::new(Requantize::new(from, to)?)
        }
    };
    Ok(Some(op))
}

/// The quantization of tensor `name` (of shape `shape`) from `from` to `to`: by rows with its
/// importance weights under `--imatrix`, or when the type's kernel only works by rows.
fn quantize_op(
    from: DType,
    to: DType,
    name: &str,
    shape: &[u64],
    opts: &TransformOptions,
) -> Result<Quantize> {
    let weights = match &opts.quant {
        Some(quant) => crate::importance::weights_for(quant, name, shape, to)?,
        None => None,
    };
    let q = Quantize::new(from, to)?.measured(opts.measure_quality);
    if weights.is_some() || !weightport_quant::can_quantize(to) {
        return Ok(q.by_rows(shape, weights));
    }
    Ok(q)
}

/// Builds the output plan for `source`: renames, each tensor's target type (`--quant` mix,
/// `--dtype`, and what the output format can store: block types are dequantized to F32, or to
/// `--dtype`, for formats that cannot hold them), the operation (its float conversions under
/// the output format's `rule`), and the order.
pub(crate) fn build(
    source: &dyn TensorSource,
    opts: &TransformOptions,
    stores: fn(DType) -> bool,
    rule: CastRule,
) -> Result<Vec<TensorRecipe>> {
    let names = renamed(source, opts)?;
    if let DtypeChoice::To(d) = opts.dtype {
        if d.is_block() {
            return Err(Error::Usage(format!(
                "{} {d} applies to an HF release converted to GGUF; use {} {d}",
                Knob::Dtype,
                Knob::Quant
            )));
        }
    }
    let (order, mut dtypes, mut notes) = targets(source, &names, opts);
    if let Some(q) = &opts.quant {
        let ts = source.tensors();
        for &i in &order {
            let one = [(
                names[i].as_str(),
                ts[i].shape.as_slice(),
                ts[i].dtype,
                dtypes[i],
            )];
            crate::importance::check_plan(q, one).map_err(|e| in_file(e, source, i))?;
        }
    }
    let stage = Stage {
        rule,
        validates: opts.quant.is_some(),
    };
    let mut outs = Vec::with_capacity(order.len());
    for i in order {
        let t = &source.tensors()[i];
        if !stores(dtypes[i]) && dtypes[i].is_block() {
            dtypes[i] = match opts.dtype {
                DtypeChoice::To(d) => d,
                DtypeChoice::Keep => DType::F32,
            };
        }
        let to = dtypes[i];
        if !stores(to) {
            return Err(Error::Unsupported {
                at: weightport_core::Location::file(source.file_of(i)).tensor(t.name.clone()),
                format: None,
                what: format!(
                    "tensor `{}` is {to}, which the output format cannot store",
                    sanitize(&names[i])
                ),
            });
        }
        let byte_len = to
            .byte_len(&t.shape)
            .map_err(|e| Error::Usage(format!("tensor `{}`: {e}", sanitize(&names[i]))))?;
        outs.push(TensorRecipe {
            op: op_for(t.dtype, to, &names[i], &t.shape, opts, stage)
                .map_err(|e| in_file(e, source, i))?,
            info: TensorInfo {
                name: names[i].clone(),
                dtype: to,
                shape: t.shape.clone(),
                byte_len,
            },
            inputs: vec![i],
            note: notes[i].take(),
        });
    }
    Ok(outs)
}

fn in_file(e: Error, source: &dyn TensorSource, i: usize) -> Error {
    match e {
        Error::Refused { mut at, reason } => {
            at.path = source.file_of(i);
            Error::Refused { at, reason }
        }
        other => other,
    }
}

/// The metadata an output carries: the source's, and for `--quant` llama-quantize's edits
/// (`split.*` removed, `general.quantization_version` and `general.file_type` set last); a
/// model-file output (`OutputFormat::by_architecture`) always names an architecture (`--arch`,
/// else the source's, else `generic`).
pub(crate) fn output_metadata(
    source: &dyn TensorSource,
    opts: &TransformOptions,
    names_architecture: bool,
) -> Metadata {
    let mut m = source.metadata().clone();
    if let Some(q) = &opts.quant {
        mix::quantized_metadata(&mut m, q);
    }
    if names_architecture {
        if let Some(a) = &opts.arch {
            m.insert("general.architecture", MetaValue::Str(a.clone()));
        } else if m.get("general.architecture").is_none() {
            m.insert("general.architecture", MetaValue::Str("generic".into()));
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sed_style_renames() {
        let r = Rename::parse(r"s/^params\//model./").unwrap();
        assert_eq!(r.apply("params/dense/kernel"), "model.dense/kernel");
        let r = Rename::parse("s|/|.|g").unwrap();
        assert_eq!(r.apply("a/b/c"), "a.b.c");
        let r = Rename::parse(r"s/^module\.(.*)$/\1/").unwrap();
        assert_eq!(r.apply("module.x.weight"), "x.weight");
        assert!(Rename::parse("x/a/b/").is_err());
        assert!(Rename::parse("s/a/b").is_err());
        assert!(Rename::parse("s/(/b/").is_err());
    }
}
