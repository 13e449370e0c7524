//! PEFT LoRA adapters: `adapter_config.json`, the factor pairs of `adapter_model.*`, and the
//! checks made before anything is planned (what `convert_lora_to_gguf.py` refuses, and what it
//! writes without a word: factors whose rank or shape does not fit, an adapter for another base).
//!
//! A LoRA module adds `scale · (B · A)` to a base weight `W [out, in]`: `A` is `[r, in]`
//! (`lora_A.weight`), `B` is `[out, r]` (`lora_B.weight`); an embedding's factors are
//! `lora_embedding_A [r, vocab]` and `lora_embedding_B [hidden, r]`, whose product is the
//! transpose of the embedding. PEFT's scale is `alpha / r`, `alpha / sqrt(r)` with rsLoRA, with
//! `r` and `alpha` per module from `rank_pattern` and `alpha_pattern`.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use weightport_core::{sanitize, DType, Error, Format, Location, Result};

use crate::config::{read_json, HParams};
use crate::origin::SourceTensor;

/// The adapter's configuration file.
pub const CONFIG: &str = "adapter_config.json";

/// Prefix PEFT gives every tensor of a saved adapter.
const PREFIX: &str = "base_model.model.";

/// The end of the usage error given when an adapter's base model is not found (a caller may
/// say how to name it).
pub const NEEDS_BASE: &str = "name the base model's directory (only its config.json is read)";

/// True when `dir` is a PEFT adapter directory: `adapter_config.json` and PEFT's weights file
/// (a copy of the base's config.json beside them does not make it a release).
pub fn is_adapter(dir: &Path) -> bool {
    dir.join(CONFIG).is_file()
        && ["adapter_model.safetensors", "adapter_model.bin"]
            .iter()
            .any(|w| dir.join(w).is_file())
}
/// The largest rank a `rank_pattern` may give (2^53: larger floats are no exact integers).
const MAX_RANK: f64 = 9_007_199_254_740_992.0;

/// What `adapter_config.json` says, as far as conversion and merging need it.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterConfig {
    /// `r`: the default rank.
    pub r: u64,
    /// `lora_alpha`: the default alpha.
    pub alpha: f64,
    /// `use_rslora`: scale `alpha / sqrt(r)` instead of `alpha / r`.
    pub rslora: bool,
    /// `fan_in_fan_out`: the base stores its weights as `[in, out]` (GPT-2's `Conv1D`).
    pub fan_in_fan_out: bool,
    /// `rank_pattern`: per-module ranks, by key (a module name or its suffix, a regex in PEFT).
    pub rank_pattern: Vec<(String, u64)>,
    /// `alpha_pattern`: per-module alphas, as `rank_pattern`.
    pub alpha_pattern: Vec<(String, f64)>,
    /// `base_model_name_or_path`.
    pub base_model: Option<String>,
    /// `alora_invocation_tokens` (an activated LoRA's invocation tokens).
    pub alora_tokens: Option<Vec<u32>>,
    /// Where it was read.
    pub path: PathBuf,
}

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::malformed(Location::file(path), Format::HfRelease, reason)
}

fn unsupported(at: Location, what: impl Into<String>) -> Error {
    Error::Unsupported {
        at,
        format: Some(Format::Gguf),
        what: what.into(),
    }
}

/// The patterns of `key` in `cfg` (an object of numbers), in the file's order.
fn patterns(cfg: &Map<String, Value>, key: &str, path: &Path) -> Result<Vec<(String, f64)>> {
    match cfg.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| {
                v.as_f64()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .map(|x| (k.clone(), x))
                    .ok_or_else(|| {
                        bad(
                            path,
                            format!("{key}[{:?}] is {v}, not a positive number", sanitize(k)),
                        )
                    })
            })
            .collect(),
        Some(v) => Err(bad(path, format!("{key} is {v}, not an object"))),
    }
}

impl AdapterConfig {
    /// Reads `dir/adapter_config.json` (within the side-file cap) and refuses what no GGUF
    /// adapter or merge can hold: another PEFT method, DoRA, `modules_to_save`, LoRA biases.
    pub fn read(dir: &Path, limits: &weightport_core::Limits) -> Result<AdapterConfig> {
        crate::config::with_limits(limits, || Self::read_file(&dir.join(CONFIG)))
    }

    fn read_file(path: &Path) -> Result<AdapterConfig> {
        let Value::Object(cfg) = read_json(path)? else {
            return Err(bad(path, "not a JSON object"));
        };
        let at = || Location::file(path);
        match cfg.get("peft_type").and_then(Value::as_str) {
            Some("LORA") | None => {}
            Some(other) => {
                return Err(unsupported(
                    at(),
                    format!("a {} adapter (only LoRA adapters are)", sanitize(other)),
                ))
            }
        }
        if cfg.get("use_dora").and_then(Value::as_bool) == Some(true) {
            return Err(unsupported(
                at(),
                "a DoRA adapter (use_dora: its magnitude vectors have no GGUF form)",
            ));
        }
        if cfg.get("lora_bias").and_then(Value::as_bool) == Some(true) {
            return Err(unsupported(at(), "LoRA biases (lora_bias)"));
        }
        if let Some(m) = cfg.get("modules_to_save").and_then(Value::as_array) {
            if !m.is_empty() {
                let names: Vec<String> = m
                    .iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), sanitize))
                    .collect();
                return Err(unsupported(
                    at(),
                    format!(
                        "whole layers saved beside the factors (modules_to_save: {}): a LoRA \
                         adapter holds only factors; merge it instead",
                        names.join(", ")
                    ),
                ));
            }
        }
        let r = cfg
            .get("r")
            .and_then(Value::as_u64)
            .filter(|&r| r > 0)
            .ok_or_else(|| bad(path, "`r` is missing or not a positive integer"))?;
        let alpha = cfg
            .get("lora_alpha")
            .and_then(Value::as_f64)
            .filter(|a| a.is_finite())
            .ok_or_else(|| bad(path, "`lora_alpha` is missing or not a number"))?;
        let rank_pattern = patterns(&cfg, "rank_pattern", path)?
            .into_iter()
            .map(|(k, v)| {
                // (`patterns` refused 0 and below.) Past 2^53 a float is no exact integer, and
                // `as` would saturate it to u64::MAX.
                (v.fract() == 0.0 && (1.0..=MAX_RANK).contains(&v))
                    .then_some((k.clone(), v as u64))
                    .ok_or_else(|| {
                        bad(
                            path,
                            format!("rank_pattern[{:?}] is not a positive integer", sanitize(&k)),
                        )
                    })
            })
            .collect::<Result<_>>()?;
        let alora_tokens = match cfg.get("alora_invocation_tokens") {
            None | Some(Value::Null) => None,
            Some(Value::Array(v)) => Some(
                v.iter()
                    .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
                    .collect::<Option<Vec<u32>>>()
                    .ok_or_else(|| bad(path, "alora_invocation_tokens holds a non-token"))?,
            ),
            Some(v) => return Err(bad(path, format!("alora_invocation_tokens is {v}"))),
        };
        if alora_tokens.is_none() && cfg.get("invocation_string").is_some_and(|v| !v.is_null()) {
            return Err(unsupported(
                at(),
                "an activated LoRA given by invocation_string (its tokens need the base's \
                 tokenizer; give alora_invocation_tokens)",
            ));
        }
        Ok(AdapterConfig {
            r,
            alpha,
            rslora: cfg.get("use_rslora").and_then(Value::as_bool) == Some(true),
            fan_in_fan_out: cfg.get("fan_in_fan_out").and_then(Value::as_bool) == Some(true),
            rank_pattern,
            alpha_pattern: patterns(&cfg, "alpha_pattern", path)?,
            base_model: cfg
                .get("base_model_name_or_path")
                .and_then(Value::as_str)
                .map(str::to_owned),
            alora_tokens,
            path: path.to_path_buf(),
        })
    }

    /// The rank and alpha of `module` (a module path, `model.layers.0.self_attn.q_proj`):
    /// PEFT's `get_pattern_key` — the first pattern key that is the module's name or a dotted
    /// suffix of it (PEFT matches keys as regexes; the keys it writes are names).
    pub fn rank_alpha(&self, module: &str) -> (u64, f64) {
        let hit = |k: &str| module == k || module.ends_with(&format!(".{k}"));
        let r = self
            .rank_pattern
            .iter()
            .find(|(k, _)| hit(k))
            .map_or(self.r, |p| p.1);
        let a = self
            .alpha_pattern
            .iter()
            .find(|(k, _)| hit(k))
            .map_or(self.alpha, |p| p.1);
        (r, a)
    }

    /// PEFT's scale of `module`: `alpha / r`, or `alpha / sqrt(r)` with rsLoRA (an f64, as
    /// Python computes it).
    pub fn scale(&self, module: &str) -> f64 {
        let (r, a) = self.rank_alpha(module);
        if self.rslora {
            a / (r as f64).sqrt()
        } else {
            a / r as f64
        }
    }

    /// Why llama.cpp's scale (`adapter.lora.alpha` / the rank of each `lora_a`) cannot be
    /// PEFT's for this adapter, if it cannot: rsLoRA, or an alpha pattern that differs.
    pub fn gguf_scale_problem(&self) -> Option<String> {
        if self.rslora && self.r > 1 {
            return Some(
                "rsLoRA scaling (use_rslora: alpha/sqrt(r), llama.cpp applies alpha/r)".into(),
            );
        }
        self.alpha_pattern
            .iter()
            .find(|(_, a)| *a != self.alpha)
            .map(|(k, a)| {
                format!(
                    "a per-module alpha (alpha_pattern[{:?}] = {a}; a GGUF adapter holds one alpha)",
                    sanitize(k)
                )
            })
    }

    /// The base directory: `given`, else `base_model_name_or_path` when it is a local
    /// directory holding a `config.json`.
    pub fn base_dir(&self, given: Option<&Path>) -> Result<PathBuf> {
        if let Some(d) = given {
            return Ok(d.to_path_buf());
        }
        match &self.base_model {
            Some(p) if Path::new(p).join("config.json").is_file() => Ok(PathBuf::from(p)),
            other => Err(Error::Usage(format!(
                "{}: the adapter's base model ({}) is not a local directory with a config.json; \
                 {NEEDS_BASE}",
                weightport_core::shown(&self.path),
                other.as_deref().map_or("not named".into(), sanitize)
            ))),
        }
    }
}

/// What one tensor of an adapter is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    A,
    B,
    /// A norm a merge tool saved beside the factors (kept by the reference).
    Norm,
    /// The base layer's own copy (`base_layer.weight`), skipped as the reference skips it.
    BaseCopy,
}

/// One LoRA module's factors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactorPair {
    /// The base weight's HF name (`model.layers.0.self_attn.q_proj.weight`).
    pub weight: String,
    /// Index of `A` among the adapter's tensors.
    pub a: usize,
    /// Index of `B`.
    pub b: usize,
    /// An embedding's factors (`lora_embedding_A`/`_B`: their product is `Wᵀ`).
    pub embedding: bool,
    /// The rank (rows of `A`, columns of `B`).
    pub rank: u64,
    /// The base weight's shape `[out, in]` (an embedding's `[vocab, hidden]`).
    pub shape: [u64; 2],
}

impl FactorPair {
    /// The module path (`model.layers.0.self_attn.q_proj`).
    pub fn module(&self) -> &str {
        self.weight.strip_suffix(".weight").unwrap_or(&self.weight)
    }
}

/// The factor pairs and saved norms of an adapter, in the order the reference meets them.
#[derive(Debug, Clone, Default)]
pub struct Factors {
    /// The pairs, in the order of each pair's first tensor.
    pub pairs: Vec<FactorPair>,
    /// Norms saved as they are: `(base HF name, index)`.
    pub norms: Vec<(String, usize)>,
    /// Tensors not written, with the reason.
    pub skipped: Vec<(String, &'static str)>,
}

/// The role and base-weight name of adapter tensor `name`.
fn role_of(name: &str) -> Option<(Role, String)> {
    let rest = name.strip_prefix(PREFIX).unwrap_or(name);
    for (suffix, role) in [
        (".lora_A.weight", Role::A),
        (".lora_B.weight", Role::B),
        (".lora_embedding_A", Role::A),
        (".lora_embedding_B", Role::B),
        (".base_layer.weight", Role::BaseCopy),
    ] {
        if let Some(stem) = rest.strip_suffix(suffix) {
            return Some((role, format!("{stem}.weight")));
        }
    }
    (rest.contains("_layernorm") || rest.contains(".norm")).then(|| (Role::Norm, rest.to_owned()))
}

/// Pairs the adapter's factors, checking each pair's rank against itself and against the
/// configuration: a tensor that is no factor (a whole layer, a DoRA magnitude) is refused with
/// every such name.
pub fn factors(tensors: &[SourceTensor], cfg: &AdapterConfig, file: &Path) -> Result<Factors> {
    let mut out = Factors::default();
    let mut open: Vec<(String, Option<usize>, Option<usize>, bool)> = Vec::new();
    let mut strangers = Vec::new();
    for (i, t) in tensors.iter().enumerate() {
        let Some((role, weight)) = role_of(&t.name) else {
            strangers.push(sanitize(&t.name));
            continue;
        };
        let embedding = t.name.contains(".lora_embedding_");
        let slot = match open.iter().position(|p| p.0 == weight) {
            Some(k) => k,
            None if matches!(role, Role::A | Role::B) => {
                open.push((weight.clone(), None, None, embedding));
                open.len() - 1
            }
            None => usize::MAX,
        };
        match role {
            Role::A | Role::B => {
                let p = &mut open[slot];
                let field = if role == Role::A { &mut p.1 } else { &mut p.2 };
                if field.replace(i).is_some() {
                    return Err(bad(file, format!("`{}` is given twice", sanitize(&t.name))));
                }
            }
            Role::Norm => out.norms.push((weight, i)),
            Role::BaseCopy => out
                .skipped
                .push((t.name.clone(), "the base layer's own weights")),
        }
    }
    refuse_strangers(&strangers, file)?;
    for (weight, a, b, embedding) in open {
        let (Some(a), Some(b)) = (a, b) else {
            let have = if a.is_some() { "A" } else { "B" };
            return Err(Error::Refused {
                at: Location::file(file).tensor(&weight),
                reason: format!("only the {have} factor of this module is in the adapter"),
            });
        };
        out.pairs
            .push(pair(weight, a, b, embedding, tensors, cfg, file)?);
    }
    Ok(out)
}

/// Refuses the tensors that are no LoRA factor, naming them.
fn refuse_strangers(strangers: &[String], file: &Path) -> Result<()> {
    if strangers.is_empty() {
        return Ok(());
    }
    let what = if strangers
        .iter()
        .any(|n| n.contains("lora_magnitude_vector"))
    {
        "DoRA magnitude vectors (they have no GGUF form)"
    } else {
        "whole layers saved beside the factors (modules_to_save, or new token embeddings); a \
         LoRA adapter holds only factors"
    };
    let shown: Vec<&str> = strangers.iter().take(8).map(String::as_str).collect();
    let more = strangers.len().saturating_sub(shown.len());
    Err(unsupported(
        Location::file(file),
        format!(
            "{what}: {}{}",
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ),
    ))
}

/// One pair, checked: 2-D factors of one rank, that of the configuration for its module.
fn pair(
    weight: String,
    a: usize,
    b: usize,
    embedding: bool,
    tensors: &[SourceTensor],
    cfg: &AdapterConfig,
    file: &Path,
) -> Result<FactorPair> {
    let (ta, tb) = (&tensors[a], &tensors[b]);
    let refuse = |reason: String| Error::Refused {
        at: Location::file(file).tensor(&weight),
        reason,
    };
    let (&[ra, cols], &[rows, rb]) = (&ta.shape[..], &tb.shape[..]) else {
        return Err(refuse(format!(
            "factors of shapes A {:?} and B {:?} are not two matrices",
            ta.shape, tb.shape
        )));
    };
    if ra != rb {
        return Err(refuse(format!(
            "the rank of A {:?} ({ra}) is not the rank of B {:?} ({rb})",
            ta.shape, tb.shape
        )));
    }
    let module = weight.strip_suffix(".weight").unwrap_or(&weight);
    let (r, _) = cfg.rank_alpha(module);
    if ra != r {
        return Err(refuse(format!(
            "the factors have rank {ra}, {} says {r} for this module",
            CONFIG
        )));
    }
    for t in [ta, tb] {
        if !matches!(t.dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(refuse(format!(
                "factor `{}` is {}, not a float type",
                sanitize(&t.name),
                t.dtype
            )));
        }
    }
    let shape = if embedding {
        [cols, rows]
    } else {
        [rows, cols]
    };
    Ok(FactorPair {
        weight,
        a,
        b,
        embedding,
        rank: ra,
        shape,
    })
}

/// The shape `[out, in]` config.json gives the base weight `weight`, for the projections of
/// the decoder families (q/k/v/o, gate/up/down, embeddings, head); `None` for other names.
pub fn base_shape(hp: &HParams, weight: &str) -> Result<Option<[u64; 2]>> {
    let module = weight.strip_suffix(".weight").unwrap_or(weight);
    let leaf = module.rsplit('.').next().unwrap_or(module);
    let u = |keys: &[&str]| -> Result<Option<u64>> { hp.uint(keys) };
    let (Some(hidden), Some(heads)) = (
        u(&["hidden_size", "n_embd", "d_model"])?,
        u(&["num_attention_heads", "n_head", "n_heads"])?,
    ) else {
        return Ok(None);
    };
    let kv = u(&["num_key_value_heads", "n_kv_heads"])?.unwrap_or(heads);
    let head_dim = match u(&["head_dim"])? {
        Some(d) => d,
        None => hidden / heads.max(1),
    };
    let inter = u(&["intermediate_size", "n_inner"])?;
    let vocab = u(&["vocab_size"])?;
    let (q, kv) = (heads.saturating_mul(head_dim), kv.saturating_mul(head_dim));
    Ok(match leaf {
        "q_proj" => Some([q, hidden]),
        "k_proj" | "v_proj" => Some([kv, hidden]),
        "o_proj" => Some([hidden, q]),
        "gate_proj" | "up_proj" if !module.contains("expert") => inter.map(|i| [i, hidden]),
        "down_proj" if !module.contains("expert") => inter.map(|i| [hidden, i]),
        "embed_tokens" | "lm_head" => vocab.map(|v| [v, hidden]),
        _ => None,
    })
}

/// Refuses a pair whose product does not have the base weight's shape (an adapter for another
/// base model, or a damaged one).
pub fn check_base_shapes(f: &Factors, hp: &HParams, file: &Path) -> Result<()> {
    for p in &f.pairs {
        if let Some(want) = base_shape(hp, &p.weight)? {
            if want != p.shape {
                return Err(Error::Refused {
                    at: Location::file(file).tensor(&p.weight),
                    reason: format!(
                        "the factors make a {:?} update, the base model's weight is {:?} \
                         (by {}): an adapter for another base model?",
                        p.shape,
                        want,
                        weightport_core::shown(&hp.path)
                    ),
                });
            }
        }
    }
    Ok(())
}
