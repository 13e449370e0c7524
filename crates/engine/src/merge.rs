//! `--merge-lora`: PEFT LoRA adapters merged into the base's weights as they stream. Each
//! adapter is opened (its factors are read into memory: they are the adapter's whole content),
//! paired and checked against the base's tensors; every output tensor read from a weight an
//! adapter targets gets [`LoraMerge`] first in its chain (before a permutation, cut, cast or
//! quantization), with the factors as further inputs appended after the source's tensors.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use weightport_arch::lora::{factors, AdapterConfig};
use weightport_arch::SourceTensor;
use weightport_core::registry::OpenRequest;
use weightport_core::{Error, Location, Result, TensorInfo, TensorSource};

use crate::by_options::{TensorRecipe, Transform};
use crate::transform::chain::Chain;
use crate::transform::lora_merge::{LoraMerge, LoraTerm};

/// An adapter to merge, as the route read it.
#[derive(Debug, Clone)]
pub(crate) struct MergeAdapter {
    /// Its directory.
    pub(crate) dir: PathBuf,
    /// Its configuration.
    pub(crate) config: AdapterConfig,
}

/// Tensors held in memory (the factors), appended after the source's.
pub(crate) type Appended = Vec<(TensorInfo, Vec<u8>)>;

/// One term waiting for its weight: the term and the indices of its `A` and `B`.
type Pending = BTreeMap<usize, Vec<(LoraTerm, usize, usize)>>;

/// Adds the merges of `adapters` (scaled by `scale` on top of PEFT's) to `outs`, whose inputs
/// index `source`; the factors become tensors numbered from `first`. Returns them.
pub(crate) fn add(
    outs: &mut [TensorRecipe],
    source: &dyn TensorSource,
    first: usize,
    adapters: &[MergeAdapter],
    scale: f64,
) -> Result<Appended> {
    if !scale.is_finite() {
        return Err(Error::Usage(format!(
            "a LoRA scale of {scale} would make every merged weight infinite or NaN"
        )));
    }
    let mut appended = Appended::new();
    let mut pending = Pending::new();
    for adapter in adapters {
        read_adapter(adapter, source, first, scale, &mut appended, &mut pending)?;
    }
    for (&w, terms) in &pending {
        let users: Vec<usize> = (0..outs.len())
            .filter(|&o| outs[o].inputs.contains(&w))
            .collect();
        if users.is_empty() {
            return Err(refused(
                source,
                w,
                "the conversion does not write this weight, so its LoRA cannot be merged",
            ));
        }
        for o in users {
            if outs[o].inputs.len() != 1 {
                return Err(refused(
                    source,
                    w,
                    "a LoRA on a weight stacked with others (an expert) is not supported",
                ));
            }
            let info = &source.tensors()[w];
            let rows = info.shape.first().copied().unwrap_or(1);
            let cols = info.shape.iter().skip(1).product::<u64>();
            let merge = LoraMerge::new(
                info.dtype,
                rows,
                cols,
                terms.iter().map(|t| t.0.clone()).collect(),
            )
            .map_err(|e| in_tensor(e, source, w))?;
            let r = &mut outs[o];
            for (_, a, b) in terms {
                r.inputs.extend([*a, *b]);
            }
            r.op = Chain::of(Some(Arc::new(merge) as Arc<dyn Transform>), r.op.take());
        }
    }
    Ok(appended)
}

fn refused(source: &dyn TensorSource, w: usize, reason: &str) -> Error {
    Error::Refused {
        at: Location::file(source.file_of(w)).tensor(&source.tensors()[w].name),
        reason: reason.into(),
    }
}

fn in_tensor(e: Error, source: &dyn TensorSource, w: usize) -> Error {
    match e {
        Error::Usage(m) => Error::Unsupported {
            at: Location::file(source.file_of(w)).tensor(&source.tensors()[w].name),
            format: None,
            what: m,
        },
        e => e,
    }
}

/// Opens `adapter`, pairs its factors against the base's weights and records one term per pair.
fn read_adapter(
    adapter: &MergeAdapter,
    source: &dyn TensorSource,
    first: usize,
    scale: f64,
    appended: &mut Appended,
    pending: &mut Pending,
) -> Result<()> {
    let input = crate::input::open_input(&adapter.dir, &OpenRequest::default())?;
    let src = input.source.as_ref();
    let file = src
        .files()
        .first()
        .cloned()
        .unwrap_or_else(|| adapter.dir.clone());
    let tensors: Vec<SourceTensor> = src
        .tensors()
        .iter()
        .map(|t| SourceTensor {
            name: t.name.clone(),
            shape: t.shape.clone(),
            dtype: t.dtype,
            file: String::new(),
        })
        .collect();
    let f = factors(&tensors, &adapter.config, &file)?;
    if let Some((name, _)) = f.norms.first() {
        return Err(Error::Unsupported {
            at: Location::file(&file).tensor(name),
            format: None,
            what: "a norm saved beside the factors cannot be merged".into(),
        });
    }
    let by_name: BTreeMap<&str, usize> = source
        .tensors()
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    for p in &f.pairs {
        let Some(&w) = by_name.get(p.weight.as_str()) else {
            return Err(Error::Refused {
                at: Location::file(&file).tensor(&p.weight),
                reason: "the base model has no such weight: an adapter for another base model?"
                    .into(),
            });
        };
        let cfg = &adapter.config;
        let transposed = p.embedding || cfg.fan_in_fan_out;
        let want = if cfg.fan_in_fan_out && !p.embedding {
            vec![p.shape[1], p.shape[0]]
        } else {
            p.shape.to_vec()
        };
        if source.tensors()[w].shape != want {
            return Err(Error::Refused {
                at: Location::file(&file).tensor(&p.weight),
                reason: format!(
                    "the factors make a {want:?} update, the base model's weight is {:?}: an \
                     adapter for another base model?",
                    source.tensors()[w].shape
                ),
            });
        }
        let mut index = |i: usize| -> Result<usize> {
            let info = src.tensors()[i].clone();
            let mut bytes = vec![0u8; info.byte_len as usize];
            src.read_into(i, 0, &mut bytes)?;
            let name = format!("{}#{}", adapter.dir.display(), info.name);
            appended.push((TensorInfo { name, ..info }, bytes));
            Ok(first + appended.len() - 1)
        };
        let (a, b) = (index(p.a)?, index(p.b)?);
        let term = LoraTerm {
            a: tensors[p.a].dtype,
            b: tensors[p.b].dtype,
            rank: p.rank,
            scale: cfg.scale(p.module()) * scale,
            transposed,
            round_to_weight: p.embedding,
        };
        pending.entry(w).or_default().push((term, a, b));
    }
    Ok(())
}

/// Reads and checks each adapter's configuration (before any input is opened).
pub(crate) fn read_configs(
    dirs: &[PathBuf],
    limits: &weightport_core::Limits,
) -> Result<Vec<MergeAdapter>> {
    dirs.iter()
        .map(|d| {
            if !weightport_arch::lora::is_adapter(d) {
                return Err(Error::Usage(format!(
                    "{}: not a PEFT LoRA adapter directory (no {})",
                    weightport_core::shown(d),
                    weightport_arch::lora::CONFIG
                )));
            }
            Ok(MergeAdapter {
                dir: d.clone(),
                config: AdapterConfig::read(d, limits)?,
            })
        })
        .collect()
}
