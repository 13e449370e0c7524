//! `config.json` (+ `generation_config.json`) → typed hyper-parameters.
//!
//! The reference converter does not read `config.json` raw: it reads
//! `AutoConfig.from_pretrained(dir).to_dict()`, which fills the config class's defaults and
//! (transformers ≥ 5) folds `rope_theta` / `rope_scaling` into `rope_parameters`. The GGUF keys
//! written depend on that (a Llama `config.json` without `head_dim` still gets
//! `llama.attention.key_length`, because `LlamaConfig` derives it). [`HParams::load`] reproduces
//! that normalization for the architectures in the table, from the per-architecture defaults
//! recorded there ([`crate::table::ConfigDefaults`]).
//!
//! See: docs/specs/gguf.md §5.1, §5.5.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use weightport_core::{Error, Format, Location, Result};

use crate::table::{ConfigDefaults, HeadDimDefault, KvHeadsDefault};

/// The hyper-parameters of an HF release, normalized like transformers' `AutoConfig`.
#[derive(Debug, Clone)]
pub struct HParams {
    /// `architectures[0]` of `config.json`.
    pub hf_arch: String,
    /// The normalized config (defaults filled in, `rope_parameters` built).
    pub raw: Map<String, Value>,
    /// `generation_config.json`, when present (informational: the reference does not use it
    /// for GGUF keys).
    pub generation: Option<Map<String, Value>>,
    /// Where `config.json` was read from (for messages).
    pub path: PathBuf,
}

pub(crate) fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::malformed(Location::file(path), Format::HfRelease, reason)
}

/// Default of the largest release side file read (config, tokenizer files, chat template, model
/// card): the largest real `tokenizer.json` files are tens of MB. [`crate::PlanOptions::limits`]
/// sets it per plan.
pub(crate) const MAX_SIDE_FILE: u64 = weightport_core::Limits::DEFAULT_MAX_SIDE_FILE;

thread_local! {
    /// The side-file cap of the plan running on this thread ([`with_limits`]).
    static SIDE_FILE_CAP: std::cell::Cell<u64> = const { std::cell::Cell::new(MAX_SIDE_FILE) };
}

/// Runs `f` with `limits` applied to every side file it reads. The crate reads side files only
/// on the thread that called [`crate::plan`] or [`crate::check_supported_within`] (it starts no
/// threads), so the caps are scoped to that call and restored after it, even on a panic.
pub(crate) fn with_limits<T>(limits: &weightport_core::Limits, f: impl FnOnce() -> T) -> T {
    struct Restore(u64);
    impl Drop for Restore {
        fn drop(&mut self) {
            SIDE_FILE_CAP.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(SIDE_FILE_CAP.with(|c| c.replace(limits.max_side_file)));
    f()
}

/// Reads a release's side file, refusing one larger than the side-file cap
/// ([`weightport_core::Limits::max_side_file`], [`MAX_SIDE_FILE`] by default) before reading it.
pub(crate) fn read_capped(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let cap = SIDE_FILE_CAP.with(|c| c.get());
    // A FIFO or device would block or never end: only regular files (after symlinks) are read,
    // and the type is checked before opening, since opening a FIFO blocks.
    let kind = std::fs::metadata(path).map_err(|e| Error::io(path, "stat", e))?;
    if !kind.is_file() {
        return Err(bad(path, "not a regular file"));
    }
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let len = f.metadata().map_err(|e| Error::io(path, "stat", e))?.len();
    if len > cap {
        return Err(bad(
            path,
            format!("{len} bytes: larger than the {cap}-byte limit for a side file"),
        ));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    f.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, "read", e))?;
    if bytes.len() as u64 > cap {
        return Err(bad(path, "grew past the side-file limit while read"));
    }
    Ok(bytes)
}

/// [`read_capped`] as UTF-8 text.
pub(crate) fn read_text(path: &Path) -> Result<String> {
    String::from_utf8(read_capped(path)?).map_err(|_| bad(path, "not UTF-8 text"))
}

pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let bytes = read_capped(path)?;
    serde_json::from_slice(&bytes).map_err(|e| bad(path, format!("not valid JSON: {e}")))
}

/// Reads `config.json` and returns `architectures[0]` only (to refuse an unsupported
/// architecture before anything else is read).
pub fn hf_architecture(config_dir: &Path) -> Result<String> {
    let path = config_dir.join("config.json");
    let v = read_json(&path)?;
    arch_of(&path, &v)
}

pub(crate) fn arch_of(path: &Path, v: &Value) -> Result<String> {
    v.get("architectures")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| bad(path, "config.json has no `architectures` list"))
}

impl HParams {
    /// Loads and normalizes `config_dir/config.json` with the defaults of its architecture.
    pub fn load(config_dir: &Path, defaults: &ConfigDefaults) -> Result<HParams> {
        let path = config_dir.join("config.json");
        let v = read_json(&path)?;
        let hf_arch = arch_of(&path, &v)?;
        let Value::Object(mut raw) = v else {
            return Err(bad(&path, "config.json is not a JSON object"));
        };
        normalize(&mut raw, defaults);
        let gpath = config_dir.join("generation_config.json");
        let generation = if gpath.is_file() {
            match read_json(&gpath)? {
                Value::Object(m) => Some(m),
                _ => return Err(bad(&gpath, "generation_config.json is not a JSON object")),
            }
        } else {
            None
        };
        Ok(HParams {
            hf_arch,
            raw,
            generation,
            path,
        })
    }

    /// The first of `keys` present (and not null), like the reference's `find_hparam`.
    pub fn find(&self, keys: &[&str]) -> Option<&Value> {
        keys.iter()
            .find_map(|k| self.raw.get(*k))
            .filter(|v| !v.is_null())
    }

    /// An unsigned integer hyper-parameter (first of `keys`).
    pub fn uint(&self, keys: &[&str]) -> Result<Option<u64>> {
        match self.find(keys) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                bad(
                    &self.path,
                    format!("`{}` is not a non-negative integer: {v}", keys[0]),
                )
            }),
        }
    }

    /// A u32 hyper-parameter (first of `keys`).
    pub fn u32(&self, keys: &[&str]) -> Result<Option<u32>> {
        match self.uint(keys)? {
            None => Ok(None),
            Some(n) => u32::try_from(n)
                .map(Some)
                .map_err(|_| bad(&self.path, format!("`{}` = {n} does not fit u32", keys[0]))),
        }
    }

    /// A required u32 hyper-parameter.
    pub fn need_u32(&self, keys: &[&str]) -> Result<u32> {
        self.u32(keys)?
            .ok_or_else(|| bad(&self.path, format!("config.json lacks `{}`", keys[0])))
    }

    /// A float hyper-parameter (first of `keys`).
    pub fn float(&self, keys: &[&str]) -> Result<Option<f64>> {
        match self.find(keys) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| bad(&self.path, format!("`{}` is not a number: {v}", keys[0]))),
        }
    }

    /// A boolean hyper-parameter.
    pub fn bool(&self, key: &str) -> Option<bool> {
        self.raw.get(key).and_then(Value::as_bool)
    }

    /// The rope parameters the reference uses (`rope_parameters["full_attention"]` when the
    /// config splits them per layer type, else `rope_parameters`).
    pub fn rope(&self) -> Map<String, Value> {
        let rp = self
            .raw
            .get("rope_parameters")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        match rp.get("full_attention").and_then(Value::as_object) {
            Some(full) => full.clone(),
            None => rp,
        }
    }

    /// `tie_word_embeddings` (default false).
    pub fn tied_embeddings(&self) -> bool {
        self.bool("tie_word_embeddings").unwrap_or(false)
    }
}

/// Fills what transformers' config class would, for the keys the GGUF export reads.
fn normalize(raw: &mut Map<String, Value>, d: &ConfigDefaults) {
    if let Some(Value::Object(text)) = raw.get("text_config").cloned() {
        for (k, v) in text {
            raw.insert(k, v);
        }
    }
    for (k, v) in d.values {
        if raw.get(*k).is_none_or(Value::is_null) {
            let v: Value = serde_json::from_str(v).expect("table default is JSON");
            raw.insert((*k).to_owned(), v);
        }
    }
    let heads = raw.get("num_attention_heads").and_then(Value::as_u64);
    if raw.get("num_key_value_heads").is_none_or(Value::is_null) {
        let kv = match d.kv_heads {
            KvHeadsDefault::Absent => None,
            KvHeadsDefault::Heads => heads,
            KvHeadsDefault::Const(n) => Some(n),
        };
        if let Some(kv) = kv {
            raw.insert("num_key_value_heads".into(), kv.into());
        }
    }
    normalize_head_dim(raw, d.head_dim, heads);
    let rp = rope_parameters(raw, d);
    raw.insert("rope_parameters".into(), Value::Object(rp));
}

/// `head_dim` as the class defines it: removed, derived, a constant or another key.
fn normalize_head_dim(raw: &mut Map<String, Value>, d: HeadDimDefault, heads: Option<u64>) {
    if let HeadDimDefault::PoppedTo(key, default) = d {
        // The class's value (its default when absent or null), kept under `key`.
        let hd = raw
            .remove("head_dim")
            .filter(|v| !v.is_null())
            .unwrap_or_else(|| default.into());
        raw.insert(key.into(), hd);
        return;
    }
    if d == HeadDimDefault::Ignored {
        raw.remove("head_dim");
    } else if raw.get("head_dim").is_none_or(Value::is_null) {
        let hd = match d {
            HeadDimDefault::Absent | HeadDimDefault::Ignored | HeadDimDefault::PoppedTo(..) => None,
            HeadDimDefault::Derived => raw
                .get("hidden_size")
                .and_then(Value::as_u64)
                .zip(heads)
                .and_then(|(h, n)| h.checked_div(n)),
            HeadDimDefault::Const(n) => Some(n),
            HeadDimDefault::Key(_) => None,
        };
        match hd {
            Some(hd) => {
                raw.insert("head_dim".into(), hd.into());
            }
            None => {
                raw.remove("head_dim");
            }
        }
    }
    if let HeadDimDefault::Key(k) = d {
        match raw.get(k).cloned() {
            Some(v) => raw.insert("head_dim".into(), v),
            None => raw.remove("head_dim"),
        };
    }
}

/// `rope_parameters`: transformers 5 folds the legacy `rope_scaling` and `rope_theta` into it.
fn rope_parameters(raw: &Map<String, Value>, d: &ConfigDefaults) -> Map<String, Value> {
    let mut rp = match raw
        .get("rope_parameters")
        .or_else(|| raw.get("rope_scaling"))
    {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    let split = rp.contains_key("full_attention") || rp.contains_key("sliding_attention");
    if let (Some(local), false) = (d.local_rope_theta, split) {
        return per_layer_type_rope(raw, d, rp, local);
    }
    if split {
        return rp;
    }
    if !rp.contains_key("rope_theta") {
        let theta = raw
            .get("rope_theta")
            .filter(|v| !v.is_null())
            .cloned()
            .or_else(|| d.rope_theta.map(|t| serde_json::from_str(t).expect("JSON")));
        if let Some(theta) = theta {
            rp.insert("rope_theta".into(), theta);
        }
    }
    if d.rope_theta.is_some() && !rp.contains_key("rope_type") {
        let t = rp
            .get("type")
            .cloned()
            .unwrap_or_else(|| Value::String("default".into()));
        rp.insert("rope_type".into(), t);
    }
    rp
}

/// A legacy config of a class with per-layer-type rope parameters (Gemma 3): `rope_scaling`
/// (`rp`) and `rope_theta` are the full-attention layers', `rope_local_base_freq` (else the
/// class default `local`) the sliding ones' (ModernBERT's transformers-4 names:
/// `global_rope_theta` and `local_rope_theta`; no config has both spellings).
fn per_layer_type_rope(
    raw: &Map<String, Value>,
    d: &ConfigDefaults,
    mut full: Map<String, Value>,
    local: &str,
) -> Map<String, Value> {
    let theta = ["rope_theta", "global_rope_theta"]
        .iter()
        .find_map(|k| raw.get(*k).filter(|v| !v.is_null()))
        .cloned()
        .or_else(|| d.rope_theta.map(|t| serde_json::from_str(t).expect("JSON")));
    if let (false, Some(theta)) = (full.contains_key("rope_theta"), theta) {
        full.insert("rope_theta".into(), theta);
    }
    if !full.contains_key("rope_type") {
        let t = full
            .get("type")
            .cloned()
            .unwrap_or_else(|| Value::String("default".into()));
        full.insert("rope_type".into(), t);
    }
    let local = ["rope_local_base_freq", "local_rope_theta"]
        .iter()
        .find_map(|k| raw.get(*k).filter(|v| !v.is_null()))
        .cloned()
        .unwrap_or_else(|| serde_json::from_str(local).expect("table default is JSON"));
    let mut sliding = Map::new();
    sliding.insert("rope_type".into(), Value::String("default".into()));
    sliding.insert("rope_theta".into(), local);
    let mut rp = Map::new();
    rp.insert("sliding_attention".into(), Value::Object(sliding));
    rp.insert("full_attention".into(), Value::Object(full));
    rp
}
