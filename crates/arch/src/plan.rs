//! The HF release → GGUF plan: every KV in the reference's order and every output tensor.
//!
//! Key order (what `convert_hf_to_gguf.py` writes, docs/specs/gguf.md §5.5):
//! 1. `general.architecture`, `general.type` = "model", `general.name` (only when
//!    [`PlanOptions::name`] is given: the reference derives it from the model card or the
//!    directory name), `general.size_label` (from the total element count of the output tensors);
//! 2. the common `{arch}.*` keys, each only when its hparam exists: `block_count`,
//!    `context_length`, `embedding_length`, `feed_forward_length`, `attention.head_count`,
//!    `attention.head_count_kv`, `attention.causal` (only when `is_causal` is false),
//!    `rope.scaling.*`, `rope.freq_base`, `attention.layer_norm_rms_epsilon`,
//!    `attention.layer_norm_epsilon`, `attention.key_length`/`value_length`;
//! 3. `general.file_type`;
//! 4. the architecture's extra keys ([`ExtraKv`]; the pooling keys of a sentence-transformers
//!    release, [`crate::pooling`]);
//! 5. `general.quantization_version` = 2;
//! 6. the tokenizer keys ([`crate::tokenizer`]).
//!
//! Tensors come out in the reference's order: safetensors parts by file name, and within a part
//! by HF tensor name.

use std::path::Path;

use serde_json::Value;
use weightport_core::{DType, Error, Format, Location, MetaValue, Result};

use crate::config::{bad, hf_architecture, HParams};
use crate::origin::{Origin, SourceTensor};
use crate::permute::QkPermute;
use crate::table::{
    self, ArchSpec, ExpertStack, ExtraKv, Hook, KvLayout, SplitRule, FORCE_F32, SKIPPED_SUFFIXES,
};
use crate::tokenizer;

mod adapter;
mod kvs;
mod mmproj;
mod tensors;

pub use crate::naming::OutType;
pub use adapter::plan_adapter;
pub use mmproj::plan_mmproj;

/// Options of [`plan`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PlanOptions {
    /// Output type (decides `general.file_type` and each tensor's dtype).
    pub outtype: OutType,
    /// Where `general.name` and the other authorship keys come from besides the release
    /// (`--name`, `--metadata`, the directory's id): [`crate::card`].
    pub card: crate::card::CardOptions,
    /// Pre-tokenizer name to use when the check hash is not in the known table (BPE only).
    pub pre_tokenizer: Option<String>,
    /// Export the tokenizer (`tokenizer.*` keys). Default true.
    pub vocab: bool,
    /// Order tensors within a file by name (the reference's order for safetensors parts);
    /// `false` keeps the given order within a file (its order for `.bin` parts: the state
    /// dict's). Default true.
    pub sort_names: bool,
    /// Caps on what the plan reads: [`weightport_core::Limits::max_side_file`] bounds every side file
    /// (config.json, tokenizer files, chat template, model card).
    pub limits: weightport_core::Limits,
    /// The values of the one-element tensors [`crate::plan::value_tensors`] names, by index in
    /// the plan's tensor slice, read by the caller ([`crate::xielu::value_of`]): the plan itself
    /// never reads tensor data. Empty for every architecture but Apertus.
    pub tensor_values: std::collections::BTreeMap<usize, f32>,
    /// Leave the multi-token-prediction (NextN) layers out, as the reference's `--no-mtp`:
    /// the block count is the main layers', no `nextn_predict_layers` key, no MTP tensor.
    /// Refused for an architecture whose reference converter cannot (see [`exclude_mtp`]).
    pub no_mtp: bool,
    /// Write only the multi-token-prediction layers with the embedding, the final norm and the
    /// head (a speculative draft), as the reference's `--mtp`; the keys stay the whole model's.
    pub mtp_only: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            outtype: OutType::F16,
            card: Default::default(),
            pre_tokenizer: None,
            vocab: true,
            sort_names: true,
            limits: weightport_core::Limits::default(),
            tensor_values: Default::default(),
            no_mtp: false,
            mtp_only: false,
        }
    }
}

/// One output tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct OutTensor {
    /// GGUF name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Where the data comes from.
    pub origin: Origin,
    /// Shape, outermost first (same as the source; GGUF `ne` is its reverse, see [`Self::ne`]).
    pub shape: Vec<u64>,
    /// Row permutation to apply (q/k of `llama`-arch models), see [`crate::permute_rows`].
    pub permute: Option<QkPermute>,
    /// The tensor must stay F32 whatever the output type (1-D, `*_norm.weight`, biases, …).
    pub force_f32: bool,
    /// A value transform before the output cast ([`ValueOp`]), in F16 when the source is F16
    /// and in F32 otherwise, as the reference computes it.
    pub value: Option<ValueOp>,
    /// The output element type for the plan's [`OutType`].
    pub dtype: DType,
}

impl OutTensor {
    /// GGUF `ne` (innermost first).
    pub fn ne(&self) -> Vec<u64> {
        self.shape.iter().rev().copied().collect()
    }
}

pub use crate::value_op::{RowScale, ValueOp};

/// What the reference converter would write, minus the tensor data.
#[derive(Debug, Clone)]
pub struct ArchPlan {
    /// HF `architectures[0]`.
    pub hf_arch: String,
    /// `general.architecture`.
    pub arch: String,
    /// Every KV, in the reference's order, with its exact GGUF type.
    pub kv: Vec<(String, MetaValue)>,
    /// Output tensors, in the reference's order.
    pub tensors: Vec<OutTensor>,
    /// HF tensors not written, with the reason.
    pub dropped: Vec<(String, &'static str)>,
    /// The pre-tokenizer check hash, when the vocabulary is BPE.
    pub chkhsh: Option<String>,
    /// The normalized hyper-parameters.
    pub hparams: HParams,
    /// The weights of an FP8 release read as F32 `weight · scale` ([`crate::fp8`]): the plan's
    /// tensors treat each as an F32 tensor of the weight's shape.
    pub dequant: Vec<crate::fp8::Dequant>,
}

/// Refuses an unsupported architecture, reading nothing but `config.json` (and, for an
/// architecture that reads a sentence-transformers pooling module, `modules.json` and that
/// module's config: a release the GGUF cannot hold is refused before a weight is opened).
pub fn check_supported(config_dir: &Path) -> Result<&'static ArchSpec> {
    let hf_arch = hf_architecture(config_dir)?;
    let spec = table::lookup(&hf_arch).ok_or_else(|| Error::Unsupported {
        at: Location::file(config_dir.join("config.json")),
        format: Some(Format::Gguf),
        what: format!(
            "architecture `{}` cannot be converted to GGUF (nearest supported: `{}`; supported: {})",
            weightport_core::sanitize(&hf_arch),
            table::nearest(&hf_arch),
            table::supported().join(", ")
        ),
    })?;
    if spec.extra_kv.contains(&ExtraKv::Pooling) {
        crate::pooling::from_modules(config_dir)?;
    }
    if spec.hooks.contains(&Hook::MiniMaxM2) {
        crate::minimax::check_config(&HParams::load(config_dir, &spec.config)?)?;
    }
    Ok(spec)
}

/// Plans the conversion of the HF release in `config_dir` whose tensors are `tensors`.
///
/// Reads `config.json` first and refuses an unsupported architecture before anything else;
/// then the tokenizer files (when [`PlanOptions::vocab`]). Never reads tensor data.
pub fn plan(config_dir: &Path, tensors: &[SourceTensor], opts: &PlanOptions) -> Result<ArchPlan> {
    crate::config::with_limits(&opts.limits, || plan_release(config_dir, tensors, opts))
}

/// The indices of the tensors whose values the plan of the release in `config_dir` needs before
/// it is made (the xIELU parameters of an Apertus release; none for other architectures), in
/// `tensors`' order; refused naming the tensor where one is not a single float. Reads
/// config.json only.
pub fn value_tensors(
    config_dir: &Path,
    tensors: &[SourceTensor],
    limits: &weightport_core::Limits,
) -> Result<Vec<usize>> {
    let spec = check_supported_within(config_dir, limits)?;
    crate::xielu::value_tensors_of(spec, config_dir, tensors)
}

/// [`check_supported`] reading the side files within `limits`.
pub fn check_supported_within(
    config_dir: &Path,
    limits: &weightport_core::Limits,
) -> Result<&'static ArchSpec> {
    crate::config::with_limits(limits, || check_supported(config_dir))
}

/// Refuses [`PlanOptions::no_mtp`] and [`PlanOptions::mtp_only`] where the reference does: its
/// `supports_mtp_export` classes among ours are GLM-4.5 ([`Hook::NextnLayers`]) and Qwen3-Next /
/// Qwen3.5 ([`Hook::QwenLinearAttention`]); for any other it stops ("not supported").
fn mtp_export_supported(release: &Release) -> Result<()> {
    let supported = [Hook::NextnLayers, Hook::QwenLinearAttention];
    if release.spec.hooks.iter().any(|h| supported.contains(h)) {
        return Ok(());
    }
    Err(Error::Unsupported {
        at: Location::file(release.hp.path.clone()),
        format: Some(Format::Gguf),
        what: format!(
            "leaving out or writing alone the multi-token-prediction layers of {} (the \
             reference's converter cannot either)",
            release.hp.hf_arch
        ),
    })
}

/// The release without its multi-token-prediction layers ([`PlanOptions::no_mtp`]).
fn exclude_mtp(release: &mut Release) {
    release.block_count = release.main_layers;
    release.no_mtp = true;
    // GLM-4.5 writes `nextn_predict_layers` from config.json (`ExtraKv::U32IfPresent`); the
    // reference does not with `--no-mtp`.
    release.hp.raw.remove("num_nextn_predict_layers");
}

/// [`plan`] within its limits: the release's configuration, its tensors, its keys, then its
/// vocabulary, each phase refusing what it cannot plan before the next one reads anything.
fn plan_release(
    config_dir: &Path,
    tensors: &[SourceTensor],
    opts: &PlanOptions,
) -> Result<ArchPlan> {
    let spec = check_supported(config_dir)?;
    let mut release = Release::read(config_dir, spec)?;
    if opts.no_mtp || opts.mtp_only {
        mtp_export_supported(&release)?;
    }
    if opts.no_mtp {
        exclude_mtp(&mut release);
    } else if spec.hooks.contains(&Hook::QwenLinearAttention) {
        let mtp = crate::qwen_next::mtp_layers(&release.hp, tensors, config_dir)?;
        release.block_count = release.main_layers + mtp;
    }
    release.mtp_only = opts.mtp_only;
    if spec.hooks.contains(&Hook::CheckShapes) {
        crate::shapes::check_sizes(&release.hp)?;
    }
    let (generated, longrope) = generated_tensors(spec, &release.hp)?;
    let fp8 = crate::fp8::Fp8::of(&release.hp, tensors, config_dir)?;
    let planned = tensors::plan_tensors(&release, tensors, opts, generated, &fp8, true)?;
    if spec.hooks.contains(&Hook::XieluValues) {
        let order = tensors::source_order(tensors, opts.sort_names);
        release.early_kv = crate::xielu::kvs(
            config_dir,
            tensors,
            &order,
            &opts.tensor_values,
            release.main_layers,
        )?;
    }
    let mut kv = kvs::plan_kvs(&release, opts, &planned, longrope.as_ref())?;
    let chkhsh = if opts.vocab {
        vocab_kvs(&release, opts, &mut kv)?
    } else {
        None
    };
    let Release { hp, .. } = release;
    Ok(ArchPlan {
        hf_arch: hp.hf_arch.clone(),
        arch: spec.arch.into(),
        kv,
        tensors: planned.out,
        dropped: planned.dropped,
        chkhsh,
        hparams: hp,
        dequant: fp8.dequant,
    })
}

/// What the plan reads of a release before its tensors: its table entry and the normalized
/// hyper-parameters, with what they decide for every tensor and key.
struct Release<'a> {
    /// The release directory (config.json and the side files).
    dir: &'a Path,
    spec: &'static ArchSpec,
    hp: HParams,
    /// XLM-RoBERTa's position offset ([`Hook::PositionOffsetFromPad`]).
    position_offset: Option<u64>,
    /// The sentence-transformers pooling keys ([`ExtraKv::Pooling`]).
    pooling: Vec<(&'static str, MetaValue)>,
    /// `{arch}.block_count`: the layers the names map, multi-token-prediction ones included
    /// ([`Hook::NextnLayers`]).
    block_count: u32,
    /// The layers the weights must hold (`num_hidden_layers`).
    main_layers: u32,
    /// Keys the reference writes while preparing tensors, right after `general.architecture`
    /// (Apertus' `xielu.*`, [`Hook::XieluValues`]).
    early_kv: Vec<(String, MetaValue)>,
    /// The multi-token-prediction layers are left out ([`exclude_mtp`]).
    no_mtp: bool,
    /// Only the multi-token-prediction layers (and the embedding, final norm, head) are written
    /// ([`PlanOptions::mtp_only`]).
    mtp_only: bool,
}

impl<'a> Release<'a> {
    /// Reads config.json (and the pooling module), refusing the heads the GGUF cannot hold.
    fn read(dir: &'a Path, spec: &'static ArchSpec) -> Result<Release<'a>> {
        let mut hp = HParams::load(dir, &spec.config)?;
        if spec.hooks.contains(&Hook::QwenLinearAttention) {
            crate::qwen_next::normalize(&mut hp)?;
        }
        if spec.hooks.contains(&Hook::NemotronH) {
            crate::nemotron_h::normalize(&mut hp)?;
        }
        let position_offset = if spec.hooks.contains(&Hook::PositionOffsetFromPad) {
            crate::xlmr::position_offset(&mut hp)?
        } else {
            None
        };
        // Sentence-transformers pooling, read (and refused where unsupported) before any tensor.
        let pooling = if spec.extra_kv.contains(&ExtraKv::Pooling) {
            crate::pooling::pooling_kvs(dir, &hp)?
        } else {
            Vec::new()
        };
        refuse_heads(dir, spec, &hp)?;
        let main_layers =
            hp.need_u32(&["n_layers", "num_hidden_layers", "n_layer", "num_layers"])?;
        let block_count = if spec.hooks.contains(&Hook::NextnLayers) {
            let nextn = hp.u32(&["num_nextn_predict_layers"])?.unwrap_or(0);
            // Real releases have one; nothing is allocated per layer, but the block count is
            // written and llama.cpp sizes its layers by it.
            if nextn > MAX_NEXTN_LAYERS {
                return Err(bad(
                    &hp.path,
                    format!("`num_nextn_predict_layers` {nextn} (more than {MAX_NEXTN_LAYERS})"),
                ));
            }
            main_layers.checked_add(nextn).ok_or_else(|| {
                bad(
                    &hp.path,
                    format!("{main_layers} layers and {nextn} `num_nextn_predict_layers` overflow"),
                )
            })?
        } else {
            main_layers
        };
        Ok(Release {
            dir,
            spec,
            hp,
            position_offset,
            pooling,
            block_count,
            main_layers,
            early_kv: Vec::new(),
            no_mtp: false,
            mtp_only: false,
        })
    }
}

/// The most multi-token-prediction layers a config may announce ([`Hook::NextnLayers`]).
const MAX_NEXTN_LAYERS: u32 = 1 << 16;

/// Refuses a classifier head on an encoder and a Qwen3 reranker.
fn refuse_heads(dir: &Path, spec: &ArchSpec, hp: &HParams) -> Result<()> {
    if let Some(labels) = hp.raw.get("id2label").and_then(Value::as_object) {
        let dummy = labels.len() == 2 && labels.get("0").and_then(Value::as_str) == Some("LABEL_0");
        // The encoders' `BertModel.__init__` (a classifier head would add labels and tensors).
        if spec.extra_kv.contains(&ExtraKv::NonCausal) && !labels.is_empty() && !dummy {
            return Err(Error::Unsupported {
                at: Location::file(&hp.path),
                format: Some(Format::Gguf),
                what: "classifier labels (id2label) are not supported yet".into(),
            });
        }
    }
    if spec.arch == "qwen3" && is_qwen3_reranker(dir, hp) {
        return Err(Error::Unsupported {
            at: Location::file(&hp.path),
            format: Some(Format::Gguf),
            what: "Qwen3 rerankers (cls_out head, rank pooling) are not supported yet".into(),
        });
    }
    Ok(())
}

/// The tensors computed from the hyper-parameters, written before the release's: Llama 3's
/// `rope_freqs.weight`, Phi-3's long and short rope factors (returned too: their attention
/// factor is a key).
fn generated_tensors(
    spec: &ArchSpec,
    hp: &HParams,
) -> Result<(Vec<OutTensor>, Option<crate::phi3::LongRope>)> {
    let mut out = Vec::new();
    let llama3 = hp
        .rope()
        .get("rope_type")
        .and_then(Value::as_str)
        .is_some_and(|t| t.eq_ignore_ascii_case("llama3"));
    if spec.llama3_rope_freqs && llama3 {
        out.push(generated("rope_freqs.weight", llama3_rope_factors(hp)?));
    }
    let longrope = if spec.kv_layout == KvLayout::Phi3 {
        crate::phi3::longrope(hp)?
    } else {
        None
    };
    if let Some(lr) = &longrope {
        out.push(generated("rope_factors_long.weight", lr.long.clone()));
        out.push(generated("rope_factors_short.weight", lr.short.clone()));
    }
    Ok((out, longrope))
}

/// A generated F32 tensor.
fn generated(name: &str, v: Vec<f32>) -> OutTensor {
    OutTensor {
        name: name.into(),
        shape: vec![v.len() as u64],
        origin: Origin::Generated(v),
        permute: None,
        force_f32: true,
        value: None,
        dtype: DType::F32,
    }
}

/// Appends the tokenizer keys to `kv`; returns the pre-tokenizer check hash of a BPE vocabulary.
fn vocab_kvs(
    release: &Release,
    opts: &PlanOptions,
    kv: &mut Vec<(String, MetaValue)>,
) -> Result<Option<String>> {
    let Release { dir, spec, hp, .. } = release;
    // The tokenizers crate runs on hostile files here: a panic in it is an error, not a crash.
    let vocab = weightport_core::contain_panic(|| {
        tokenizer::export(dir, spec.vocab, hp, opts.pre_tokenizer.as_deref())
    })
    .map_err(|p| bad(dir, format!("the tokenizer files could not be read: {p}")))??;
    kv.extend(vocab.kv);
    // The special vocabulary may write again a flag the architecture's vocabulary wrote
    // (ModernBERT's add_*_token).
    kvs::keep_first_position_last_value(kv);
    Ok(vocab.chkhsh)
}

/// `general.file_type` of a release with MXFP4 experts converted to F32, F16 or BF16 (gguf-py's
/// `LlamaFileType.MOSTLY_MXFP4_MOE`).
const MOSTLY_MXFP4_MOE: u32 = 38;

/// The F32 decision and output type of a tensor named `gguf_name` of `shape`
/// (`base.py` `prepare_tensors`).
fn out_dtype(gguf_name: &str, shape: &[u64], outtype: OutType) -> (bool, DType) {
    let base = gguf_name
        .strip_prefix("blk.")
        .and_then(|s| s.split_once('.'))
        .map_or(gguf_name, |(_, rest)| rest);
    let base_stem = base.rsplit_once('.').map_or(base, |(s, _)| s);
    let force_f32 = shape.len() <= 1
        || gguf_name.ends_with("_norm.weight")
        || !gguf_name.ends_with(".weight")
        || FORCE_F32.contains(&base_stem);
    let dtype = if force_f32 {
        DType::F32
    } else {
        match outtype {
            OutType::F32 => DType::F32,
            OutType::F16 => DType::F16,
            OutType::Bf16 => DType::BF16,
            OutType::Q8_0 => {
                if shape.last().is_some_and(|n| n % 32 == 0) {
                    DType::Q8_0
                } else {
                    DType::F16
                }
            }
        }
    };
    (force_f32, dtype)
}

/// The expert tensors read so far, per block, until a block's set is complete.
struct Experts {
    spec: &'static ExpertStack,
    n: u32,
    /// The blocks the config announces (a hostile config may claim 2^32: nothing is allocated
    /// per announced block).
    block_count: u32,
    /// Per block with expert tensors read: `(member, expert)` → index of the HF tensor.
    pending: std::collections::BTreeMap<u32, std::collections::BTreeMap<(usize, u32), usize>>,
}

/// The stacks of one block: `(GGUF name with {bid}, sources in expert order)` per member.
type Stacks = Vec<(String, Vec<(String, usize)>)>;

impl Experts {
    fn new(spec: &'static ExpertStack, hp: &HParams, block_count: u32) -> Result<Experts> {
        let n = hp
            .u32(spec.count)?
            .filter(|&n| n > 0)
            .ok_or_else(|| bad(&hp.path, format!("config.json lacks `{}`", spec.count[0])))?;
        Ok(Experts {
            spec,
            n,
            block_count,
            pending: Default::default(),
        })
    }

    /// Records HF tensor `i` (named `hf`); when it completes its block, returns the block's
    /// stacks, in the reference's member order.
    fn add(
        &mut self,
        hf: &str,
        i: usize,
        tensors: &[SourceTensor],
        dir: &Path,
    ) -> Result<(u32, Stacks)> {
        let refuse = |what: String| Error::Unsupported {
            at: Location::file(dir).tensor(&tensors[i].name),
            format: Some(Format::Gguf),
            what,
        };
        let (bid, xid, w) = match_expert(self.spec.pattern, hf)
            .filter(|(b, _, _)| *b < self.block_count)
            .ok_or_else(|| refuse("an expert tensor the architecture does not name".into()))?;
        let member = self
            .spec
            .members
            .iter()
            .position(|(m, _)| *m == w)
            .ok_or_else(|| {
                refuse(format!(
                    "expert projection `{w}` is not one of the architecture's"
                ))
            })?;
        if xid >= self.n {
            return Err(refuse(format!(
                "expert {xid} of a model with {} experts",
                self.n
            )));
        }
        let block = self.pending.entry(bid).or_default();
        if block.insert((member, xid), i).is_some() {
            return Err(refuse("this expert tensor is given twice".into()));
        }
        if block.len() < self.n as usize * self.spec.members.len() {
            return Ok((bid, Vec::new()));
        }
        let block = self.pending.remove(&bid).unwrap_or_default();
        let mut stacks = Vec::with_capacity(self.spec.members.len());
        for (m, (_, gguf)) in self.spec.members.iter().enumerate() {
            let sources: Vec<(String, usize)> = (0..self.n)
                .map(|x| {
                    let j = block[&(m, x)];
                    (tensors[j].name.clone(), j)
                })
                .collect();
            let first = &tensors[sources[0].1];
            if let Some(&(_, j)) = sources
                .iter()
                .find(|&&(_, j)| tensors[j].shape != first.shape || tensors[j].dtype != first.dtype)
            {
                return Err(Error::Unsupported {
                    at: Location::file(dir).tensor(&tensors[j].name),
                    format: Some(Format::Gguf),
                    what: format!(
                        "experts of different shapes or types cannot be stacked (this one is \
                         {} {:?}, `{}` is {} {:?})",
                        tensors[j].dtype, tensors[j].shape, first.name, first.dtype, first.shape
                    ),
                });
            }
            stacks.push(((*gguf).to_owned(), sources));
        }
        Ok((bid, stacks))
    }

    /// Refuses a release in which some block's experts are incomplete (the reference fails with
    /// "Unprocessed experts"), naming the first missing tensor.
    fn finish(&self, dir: &Path) -> Result<()> {
        for (bid, block) in &self.pending {
            if block.is_empty() {
                continue;
            }
            let missing = (0..self.n)
                .flat_map(|x| (0..self.spec.members.len()).map(move |m| (m, x)))
                .find(|key| !block.contains_key(key))
                .map(|(m, x)| {
                    self.spec
                        .pattern
                        .replace("{bid}", &bid.to_string())
                        .replace("{xid}", &x.to_string())
                        .replace("{w}", self.spec.members[m].0)
                });
            let what = format!(
                "block {bid} holds {} of its {} expert tensors",
                block.len(),
                self.n as usize * self.spec.members.len()
            );
            return Err(match missing {
                Some(name) => Error::malformed(
                    Location::file(dir).tensor(&name),
                    Format::HfRelease,
                    format!("{what}: this one is missing"),
                ),
                None => bad(dir, what),
            });
        }
        Ok(())
    }
}

/// The reference's text converter skips this tensor of a multimodal release
/// ([`table::MULTIMODAL`]).
fn is_multimodal_part(name: &str) -> bool {
    let (prefixes, parts) = table::MULTIMODAL;
    prefixes.iter().any(|p| name.starts_with(p)) || parts.iter().any(|p| name.contains(p))
}

/// `(bid, xid, w)` when `name` matches an [`ExpertStack::pattern`].
fn match_expert<'a>(pattern: &str, name: &'a str) -> Option<(u32, u32, &'a str)> {
    let (pre, rest) = pattern.split_once("{bid}")?;
    let (mid, rest) = rest.split_once("{xid}")?;
    let (mid2, post) = rest.split_once("{w}")?;
    let name = name.strip_prefix(pre)?.strip_suffix(post)?;
    let number = |s: &str| -> Option<u32> {
        (!s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (b, name) = name.split_once(mid)?;
    let (x, w) = name.split_once(mid2)?;
    (!w.is_empty() && !w.contains('.')).then_some(())?;
    Some((number(b)?, number(x)?, w))
}

/// gguf-py's `size_label` of the output tensors: `{n_expert}x{size of one expert's share}` when
/// some tensor is an expert stack (`_exps.` in its name, ≥ 3 dims), else the total.
fn size_label_of(out: &[OutTensor]) -> String {
    let (mut total, mut shared, mut expert) = (0u64, 0u64, 0u64);
    let (mut expert_sum, mut n_stacks) = (0u64, 0u64);
    for t in out {
        let size: u64 = t.shape.iter().product();
        total += size;
        if t.name.contains("_exps.") && t.shape.len() >= 3 {
            let k = if t.name.contains(".bias") { 2 } else { 3 };
            let count = t.shape[t.shape.len() - k].max(1);
            expert += size / count;
            expert_sum += count;
            n_stacks += 1;
        } else {
            shared += size;
        }
    }
    match expert_sum.checked_div(n_stacks) {
        Some(count) => format!("{count}x{}", size_label(shared + expert)),
        None => size_label(total),
    }
}

/// Refuses a release whose weights do not hold every layer config.json announces (llama.cpp
/// would fail to load the file; the reference converter does not check). Not checked for a
/// vocabulary-only plan (no tensors given). Layers past `block_count` (GLM-4.5's optional
/// multi-token-prediction ones) are not counted.
fn check_layers(out: &[OutTensor], block_count: u32, hp: &HParams) -> Result<()> {
    let mut seen = vec![false; out.len().min(block_count as usize)];
    let mut held = 0usize;
    for t in out {
        let bid = t
            .name
            .strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|b| b.parse::<usize>().ok());
        if let Some(slot) = bid.and_then(|b| seen.get_mut(b)) {
            if !*slot {
                *slot = true;
                held += 1;
            }
        }
    }
    if held as u64 != u64::from(block_count) {
        return Err(bad(
            &hp.path,
            format!("announces {block_count} layers, the weights hold {held}"),
        ));
    }
    Ok(())
}

/// The reference's reranker detection for Qwen3 (README heading or name hints).
fn is_qwen3_reranker(dir: &Path, hp: &HParams) -> bool {
    let readme = crate::config::read_text(&dir.join("README.md"))
        .unwrap_or_default()
        .to_lowercase();
    if readme.contains("# qwen3-reranker") || readme.contains("# qwen3-vl-reranker") {
        return true;
    }
    let dir_name = dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let hints = [
        dir_name,
        hp.raw
            .get("_name_or_path")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        hp.raw
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        hp.hf_arch.clone(),
    ];
    hints.iter().any(|h| {
        let h = h.to_lowercase();
        h.contains("qwen3-reranker") || h.contains("qwen3-vl-reranker")
    }) || hp.hf_arch.to_lowercase().contains("sequenceclassification")
}

/// The largest head size whose llama3 rope factors are computed (real ones are 64 to 256).
const MAX_ROPE_DIM: u32 = 1 << 20;

/// Llama 3's rope scaling factors, computed with the reference's float32 tensor arithmetic
/// (`conversion/llama.py` `generate_extra_tensors`): every operation on a tensor value is an
/// f32 operation, Python scalars entering one are rounded to f32 first, and `scalar / tensor`
/// is torch's `__rtruediv__`, i.e. `tensor.reciprocal() * scalar` (this changes the last bit of
/// some factors compared with a plain division).
pub fn llama3_rope_factors(hp: &HParams) -> Result<Vec<f32>> {
    let rope = hp.rope();
    let get = |k: &str, d: f64| rope.get(k).and_then(Value::as_f64).unwrap_or(d);
    let base = get("rope_theta", 10000.0) as f32;
    let dim = match hp.u32(&["head_dim"])? {
        Some(d) => d,
        None => hp
            .need_u32(&["hidden_size"])?
            .checked_div(hp.need_u32(&["num_attention_heads"])?)
            .ok_or_else(|| bad(&hp.path, "`num_attention_heads` 0"))?,
    };
    // One factor per two dimensions is allocated: a hostile size is refused, not computed.
    if dim > MAX_ROPE_DIM {
        return Err(bad(
            &hp.path,
            format!("a head size of {dim} for the llama3 rope factors (at most {MAX_ROPE_DIM})"),
        ));
    }
    let factor = get("factor", 8.0);
    let low = get("low_freq_factor", 1.0);
    let high = get("high_freq_factor", 4.0);
    let old_ctx = get("original_max_position_embeddings", 8192.0);
    let low_wavelen = (old_ctx / low) as f32;
    let high_wavelen = (old_ctx / high) as f32;
    let two_pi = (2.0 * std::f64::consts::PI) as f32;
    let mut out = Vec::new();
    for i in (0..dim).step_by(2) {
        let freq = 1.0f32 / base.powf(i as f32 / dim as f32);
        let wavelen = (1.0f32 / freq) * two_pi;
        out.push(if wavelen < high_wavelen {
            1.0
        } else if wavelen > low_wavelen {
            factor as f32
        } else {
            let smooth = ((1.0f32 / wavelen) * old_ctx as f32 - low as f32) / ((high - low) as f32);
            1.0f32 / ((1.0f32 - smooth) / factor as f32 + smooth)
        });
    }
    Ok(out)
}

fn f32v(v: f64) -> MetaValue {
    MetaValue::F32(v as f32)
}

/// Maps an HF tensor name to its GGUF name (`None`: the architecture has no such tensor).
pub fn map_name(spec: &ArchSpec, hf: &str, block_count: u32) -> Option<String> {
    let rows = || spec.tensors.iter().flat_map(|g| g.iter());
    let (base, suffix) =
        match rows().find_map(|(h, g)| match_pattern(h, hf, block_count).map(|bid| (h, g, bid))) {
            Some((_, g, bid)) => return Some(fill(g, bid)),
            None => {
                let (base, suffix) = hf.rsplit_once('.')?;
                if suffix != "weight" && suffix != "bias" {
                    return None;
                }
                (base, suffix)
            }
        };
    rows().find_map(|(h, g)| {
        match_pattern(h, base, block_count).map(|bid| format!("{}.{suffix}", fill(g, bid)))
    })
}

/// `Some(bid)` (`None` inside when the pattern has no `{bid}`) when `name` matches `pattern`.
fn match_pattern(pattern: &str, name: &str, block_count: u32) -> Option<Option<u32>> {
    match pattern.split_once("{bid}") {
        None => (pattern == name).then_some(None),
        Some((pre, post)) => {
            let mid = name.strip_prefix(pre)?.strip_suffix(post)?;
            if mid.is_empty() || !mid.bytes().all(|b| b.is_ascii_digit()) || mid.len() > 9 {
                return None;
            }
            let bid: u32 = mid.parse().ok()?;
            (bid < block_count).then_some(Some(bid))
        }
    }
}

fn fill(g: &str, bid: Option<u32>) -> String {
    match bid {
        Some(b) => g.replace("{bid}", &b.to_string()),
        None => g.to_owned(),
    }
}

/// gguf-py's `size_label` for a model without experts: `146K`, `7.2B`, `13B`, ….
pub fn size_label(total: u64) -> String {
    let n = total as f64;
    let (scaled, suffix) = if n > 1e12 {
        (n * 1e-12, "T")
    } else if n > 1e9 {
        (n * 1e-9, "B")
    } else if n > 1e6 {
        (n * 1e-6, "M")
    } else {
        (n * 1e-3, "K")
    };
    // Python's round() (half to even) → str → lstrip('0') → number of digits.
    let r = scaled.round_ties_even();
    let digits = if r == 0.0 { 0 } else { format!("{r:.0}").len() };
    let fix = 2usize.saturating_sub(digits);
    format!("{scaled:.fix$}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_labels_like_gguf_py() {
        assert_eq!(size_label(145_728), "146K");
        assert_eq!(size_label(86_000), "86K");
        assert_eq!(size_label(7_241_732_096), "7.2B");
        assert_eq!(size_label(494_032_768), "494M");
        assert_eq!(size_label(1_500), "1.5K");
    }

    #[test]
    fn names_map_with_block_ids_and_suffixes() {
        let spec = table::lookup("LlamaForCausalLM").unwrap();
        assert_eq!(
            map_name(spec, "model.layers.1.self_attn.q_proj.weight", 2).as_deref(),
            Some("blk.1.attn_q.weight")
        );
        assert_eq!(
            map_name(spec, "model.layers.0.self_attn.k_proj.bias", 2).as_deref(),
            Some("blk.0.attn_k.bias")
        );
        assert_eq!(map_name(spec, "model.layers.2.mlp.up_proj.weight", 2), None);
        assert_eq!(
            map_name(spec, "lm_head.weight", 2).as_deref(),
            Some("output.weight")
        );
        assert_eq!(map_name(spec, "model.vision.weight", 2), None);
    }
}
