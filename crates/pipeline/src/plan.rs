//! The output plan: each output tensor, the input tensor(s) it reads, and one operation.
//!
//! Identity (`op: None`) keeps the zero-copy path. Every other operation is a [`Transform`]:
//! it declares its unit (output bytes that must be computed together: one element, one quant
//! block, one row) and the input byte ranges an output range needs, so the executor can cut a
//! tensor into chunks aligned to the unit and compute them in parallel. Casts arrive here;
//! row permutations, (de)quantization and row split/concat plug into the same interface.

use std::ops::Range;
use std::sync::Arc;

use regex::Regex;
use weightport_core::{sanitize, DType, Error, Result, TensorInfo, TensorSource};

use crate::cast::{is_float, Cast};

/// An operation producing an output tensor from input bytes.
pub trait Transform: Send + Sync {
    /// A short description for plans and reports (`F16→F32`).
    fn describe(&self) -> String;
    /// Output bytes per indivisible unit; the executor's chunks are multiples of it.
    fn unit(&self) -> u64;
    /// The input byte ranges (`(k, range)`: `k` indexes the output tensor's `inputs`) that
    /// output range `out` needs.
    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)>;
    /// Computes output range `out` into `dst` from `inputs` (the ranges `needs` named, in order).
    fn apply(&self, out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()>;
    /// True when the output holds exactly the input's values (widening casts, permutations).
    fn lossless(&self) -> bool {
        false
    }
    /// For a lossless operation on one input: the operation mapping output bytes back to the
    /// input's bytes, which verification uses to prove the output equal to the source.
    fn inverse(&self) -> Option<Arc<dyn Transform>> {
        None
    }
    /// What happened while applying it (overflow counts…), once the job has run.
    fn outcome(&self) -> Option<String> {
        None
    }
}

/// One output tensor.
#[derive(Clone)]
pub struct OutTensor {
    /// Name, dtype, shape and byte length as written.
    pub info: TensorInfo,
    /// Source tensor indices it reads.
    pub inputs: Vec<usize>,
    /// `None`: the input's bytes unchanged (zero-copy where the source is mapped).
    pub op: Option<Arc<dyn Transform>>,
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
                "--rename `{rule}`: expected s/PATTERN/REPLACEMENT/"
            ));
        }
        let d = chars
            .next()
            .ok_or_else(|| format!("--rename `{rule}`: missing delimiter"))?;
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
                "--rename `{rule}`: expected s{d}PATTERN{d}REPLACEMENT{d} with optional g"
            ));
        }
        let re = Regex::new(&parts[0]).map_err(|e| format!("--rename `{rule}`: {e}"))?;
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
}

/// Builds the output plan for `source`.
pub fn build(source: &dyn TensorSource, opts: &TransformOptions) -> Result<Vec<OutTensor>> {
    let mut outs = Vec::with_capacity(source.tensors().len());
    let mut seen = std::collections::HashMap::new();
    for (i, t) in source.tensors().iter().enumerate() {
        let name = opts.renames.iter().fold(t.name.clone(), |n, r| r.apply(&n));
        if let Some(prev) = seen.insert(name.clone(), i) {
            return Err(Error::Usage(format!(
                "--rename maps both `{}` and `{}` to `{}`",
                sanitize(&source.tensors()[prev].name),
                sanitize(&t.name),
                sanitize(&name)
            )));
        }
        let target = match opts.dtype {
            DtypeChoice::To(d)
                if d != t.dtype
                    && is_float(t.dtype)
                    && opts.dtype_filter.as_ref().is_none_or(|f| f.is_match(&name)) =>
            {
                Some(d)
            }
            _ => None,
        };
        let (info, op): (TensorInfo, Option<Arc<dyn Transform>>) = match target {
            None => (TensorInfo { name, ..t.clone() }, None),
            Some(d) => {
                let cast = Cast::new(t.dtype, d, &name, opts.allow_lossy)?;
                let byte_len = d
                    .byte_len(&t.shape)
                    .map_err(|e| Error::Usage(format!("tensor `{}`: {e}", sanitize(&name))))?;
                (
                    TensorInfo {
                        name,
                        dtype: d,
                        shape: t.shape.clone(),
                        byte_len,
                    },
                    Some(Arc::new(cast)),
                )
            }
        };
        outs.push(OutTensor {
            info,
            inputs: vec![i],
            op,
        });
    }
    Ok(outs)
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
