//! A release's authorship metadata as the reference converter derives it (gguf-py's
//! `Metadata.load` and `set_gguf_meta_model`, with `prepare_metadata`'s fallbacks): the
//! README's YAML front matter (the model card), `config.json`'s `_name_or_path`, the directory
//! name, `generation_config.json`'s sampling parameters, a `--metadata FILE.json` of
//! `general.*` overrides and `--name`, in the reference's precedence.
//!
//! The values stay JSON values until written, as they are Python objects in the reference: a
//! value the reference would fail to write (a number where a string goes, a list of mixed
//! types) is refused here with the key and the file, and a value it skips (an empty string or
//! list) is skipped.

mod ids;
mod yaml;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use weightport_core::{Error, Format, Location, MetaType, MetaValue, Result};

pub use ids::{components, IdParts};

use crate::naming::id_to_title;

/// Where the authorship metadata comes from, besides the release directory.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct CardOptions {
    /// `--name`: `general.name`, over everything else (the reference's `--model-name`).
    pub name: Option<String>,
    /// `--metadata FILE.json`: `general.*` keys over what the release says.
    pub overrides: Option<PathBuf>,
    /// The id the directory heuristics read (the directory's name; for an HF cache snapshot,
    /// the repo's name). `None`: the release directory's name.
    pub dir_id: Option<String>,
}

/// Sampling parameters of `generation_config.json` and the overrides: GGUF key suffix, the
/// generation_config keys tried in order, whether it is an integer (`int32`) or a float.
const SAMPLING: &[(&str, &[&str], Kind)] = &[
    ("sequence", &["sequence"], Kind::Str),
    ("top_k", &["top_k"], Kind::Int),
    ("top_p", &["top_p"], Kind::Float),
    ("min_p", &["min_p"], Kind::Float),
    ("xtc_probability", &["xtc_probability"], Kind::Float),
    ("xtc_threshold", &["xtc_threshold"], Kind::Float),
    ("temp", &["temperature"], Kind::Float),
    ("penalty_last_n", &["penalty_last_n"], Kind::Int),
    (
        "penalty_repeat",
        &["penalty_repeat", "repetition_penalty"],
        Kind::Float,
    ),
    ("mirostat", &["mirostat"], Kind::Int),
    ("mirostat_tau", &["mirostat_tau"], Kind::Float),
    ("mirostat_eta", &["mirostat_eta"], Kind::Float),
];

#[derive(Debug, Clone, Copy)]
enum Kind {
    Str,
    Int,
    Float,
}

/// The single-valued authorship fields, in the order they are written (`general.{key}`), with
/// the model-card keys that fill them (first the llama.cpp names, then the `model_*` ones).
const FIELDS: &[(&str, &[&str])] = &[
    ("name", &["name", "model_name"]),
    ("author", &["author", "model_author", "model_creator"]),
    ("version", &["version", "model_version"]),
    ("organization", &["organization", "model_organization"]),
    ("finetune", &["finetune", "model_finetune"]),
    ("basename", &["basename", "model_basename", "model_type"]),
    ("description", &["description", "model_description"]),
    ("quantized_by", &[]),
    ("size_label", &["size_label", "model_size_label"]),
    ("license", &["license"]),
    ("license.name", &["license_name"]),
    ("license.link", &["license_link"]),
    ("url", &[]),
    ("doi", &[]),
    ("uuid", &[]),
    ("repo_url", &[]),
    ("source.url", &["url", "model_url"]),
    ("source.doi", &["doi", "model_doi"]),
    ("source.uuid", &["uuid", "model_uuid"]),
    ("source.repo_url", &["repo_url", "model_repo_url"]),
];

/// The keys of a base model or dataset entry, in the order they are written.
const ENTRY_KEYS: &[&str] = &[
    "name",
    "author",
    "version",
    "organization",
    "description",
    "url",
    "doi",
    "uuid",
    "repo_url",
];

/// The derived metadata: JSON values by GGUF key suffix (as the reference holds Python values).
#[derive(Debug, Clone, Default)]
pub struct Authorship {
    sampling: Map<String, Value>,
    fields: Map<String, Value>,
    base_models: Option<Vec<Value>>,
    datasets: Option<Vec<Value>>,
    tags: Option<Vec<Value>>,
    languages: Option<Vec<Value>>,
    /// Where the values came from (for messages).
    dir: PathBuf,
}

/// Where a refused value came from.
fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::malformed(Location::file(path), Format::HfRelease, reason)
}

impl Authorship {
    /// `Metadata.load(overrides, dir, name, total_params)` then `prepare_metadata`'s fallbacks:
    /// the directory's name when nothing named the model, the size label from
    /// `size_label` (the output's parameter count) when nothing gave one.
    pub fn load(
        dir: &Path,
        opts: &CardOptions,
        total_params: i64,
        size_label: impl FnOnce() -> String,
    ) -> Result<Authorship> {
        let mut a = Authorship {
            dir: dir.to_path_buf(),
            ..Authorship::default()
        };
        let card = yaml::front_matter(&dir.join("README.md"))?;
        a.apply_card(&card, total_params);
        let dir_id = match &opts.dir_id {
            Some(id) => id.clone(),
            None => dir_name(dir),
        };
        a.apply_name_or_path(dir, total_params)?;
        a.apply_id(&dir_id, total_params);
        a.apply_generation_config(dir)?;
        if let Some(path) = &opts.overrides {
            a.apply_overrides(path)?;
        }
        if let Some(name) = &opts.name {
            a.fields.insert("name".into(), Value::String(name.clone()));
        }
        if is_none(a.fields.get("name")) {
            a.fields.insert("name".into(), Value::String(dir_id));
        }
        if is_none(a.fields.get("size_label")) && total_params > 0 {
            a.fields
                .insert("size_label".into(), Value::String(size_label()));
        }
        Ok(a)
    }

    /// Model-card keys: a field takes the first card key present while it is unset.
    fn apply_card(&mut self, card: &Map<String, Value>, total_params: i64) {
        for (field, keys) in FIELDS {
            for key in *keys {
                if let Some(v) = card.get(*key) {
                    if is_none(self.fields.get(*field)) {
                        self.fields.insert((*field).into(), v.clone());
                    }
                }
            }
        }
        if let Some(v) = first_present(card, &["base_model", "base_models", "base_model_sources"]) {
            self.base_models = Some(sources(v, total_params));
        }
        if let Some(v) = first_present(card, &["datasets", "dataset", "dataset_sources"]) {
            self.datasets = Some(sources(v, total_params));
        }
        for key in ["tags", "pipeline_tag"] {
            extend(&mut self.tags, card.get(key));
        }
        for key in ["languages", "language"] {
            extend(&mut self.languages, card.get(key));
        }
    }

    /// `config.json`'s `_name_or_path` when it names a Hub model (at most one `/`). Read from
    /// the file as written, not from the normalized hyper-parameters, which merge a VLM's
    /// `text_config` (its own `_name_or_path` included) over the top level.
    fn apply_name_or_path(&mut self, dir: &Path, total_params: i64) -> Result<()> {
        let path = dir.join("config.json");
        if !path.exists() {
            // An adapter directory has none (gguf-py's `load_hf_parameters` gives `{}`).
            return Ok(());
        }
        let config = crate::config::read_json(&path)?;
        if let Some(Value::String(id)) = config.get("_name_or_path") {
            if id.matches('/').count() <= 1 {
                self.apply_id(id, total_params);
            }
        }
        Ok(())
    }

    /// The id heuristics: each unset field from the id's components.
    fn apply_id(&mut self, id: &str, total_params: i64) {
        let p = components(id, total_params);
        let titled = |s: Option<String>| s.map(|s| id_to_title(&s));
        for (field, value) in [
            ("name", titled(p.full_name)),
            ("organization", titled(p.org)),
            ("basename", p.basename),
            ("finetune", p.finetune),
            ("version", p.version),
            ("size_label", p.size_label),
        ] {
            if let Some(v) = value {
                if is_none(self.fields.get(field)) {
                    self.fields.insert(field.into(), Value::String(v));
                }
            }
        }
    }

    /// `generation_config.json`'s sampling parameters (a file that is not valid JSON is
    /// ignored, as the reference ignores it).
    fn apply_generation_config(&mut self, dir: &Path) -> Result<()> {
        let path = dir.join("generation_config.json");
        if !path.is_file() {
            return Ok(());
        }
        let Ok(value) = crate::config::read_json(&path) else {
            return Ok(());
        };
        let Value::Object(gen) = value else {
            return Ok(());
        };
        for (key, sources, _) in SAMPLING {
            if let Some(v) = sources.iter().find_map(|s| gen.get(*s)) {
                self.sampling.insert((*key).into(), v.clone());
            }
        }
        Ok(())
    }

    /// `--metadata FILE.json`: every `general.*` key it holds replaces the derived value (a
    /// `null` clears it). `general.license` is not among them, as in the reference.
    fn apply_overrides(&mut self, path: &Path) -> Result<()> {
        let Value::Object(o) = crate::config::read_json(path)? else {
            return Err(bad(path, "the metadata overrides are not a JSON object"));
        };
        for (key, ..) in SAMPLING {
            if let Some(v) = o.get(&format!("general.sampling.{key}")) {
                self.sampling.insert((*key).into(), v.clone());
            }
        }
        for (field, _) in FIELDS.iter().filter(|(f, _)| *f != "license") {
            if let Some(v) = o.get(&format!("general.{field}")) {
                self.fields.insert((*field).into(), v.clone());
            }
        }
        let set = |slot: &mut Option<Vec<Value>>, k: &str| -> Result<()> {
            match o.get(k) {
                None => {}
                Some(Value::Null) => *slot = None,
                Some(Value::Array(items)) => *slot = Some(items.clone()),
                Some(v) => return Err(bad(path, format!("{k} is {v}, not a list"))),
            }
            Ok(())
        };
        set(&mut self.base_models, "general.base_models")?;
        set(&mut self.datasets, "general.datasets")?;
        set(&mut self.tags, "general.tags")?;
        set(&mut self.languages, "general.languages")?;
        Ok(())
    }

    /// The GGUF keys, in `set_gguf_meta_model`'s order.
    pub fn kvs(&self, put: &mut dyn FnMut(String, MetaValue)) -> Result<()> {
        let src = || self.dir.join("README.md");
        for (key, _, kind) in SAMPLING {
            let Some(v) = self.sampling.get(*key).filter(|v| !v.is_null()) else {
                continue;
            };
            let k = format!("general.sampling.{key}");
            let value = match kind {
                Kind::Str => string(&k, v, &src())?.map(MetaValue::Str),
                Kind::Int => Some(MetaValue::I32(int32(&k, v, &src())?)),
                Kind::Float => Some(MetaValue::F32(float32(&k, v, &src())?)),
            };
            if let Some(value) = value {
                put(k, value);
            }
        }
        for (field, _) in FIELDS {
            let k = format!("general.{field}");
            let v = self.fields.get(*field).filter(|v| !v.is_null());
            let s = match (v, *field) {
                (Some(Value::Array(items)), "license") => {
                    Some(joined(&k, items, &src())?).filter(|s| !s.is_empty())
                }
                (Some(v), _) => string(&k, v, &src())?,
                (None, _) => None,
            };
            if let Some(s) = s {
                put(k, MetaValue::Str(s));
            }
        }
        entries(
            put,
            "general.base_model",
            self.base_models.as_deref(),
            &src(),
        )?;
        entries(put, "general.dataset", self.datasets.as_deref(), &src())?;
        for (k, list) in [
            ("general.tags", &self.tags),
            ("general.languages", &self.languages),
        ] {
            if let Some(items) = list.as_deref().filter(|l| !l.is_empty()) {
                put(k.into(), array(k, items, &src())?);
            }
        }
        Ok(())
    }
}

/// The last component of `dir` (its canonical path, so `.` names the directory).
fn dir_name(dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn is_none(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null))
}

/// Python's `card.get(a, card.get(b, card.get(c)))`: the first key present, even when null.
fn first_present<'a>(card: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a Value> {
    if !keys.iter().any(|k| card.contains_key(*k)) {
        return None;
    }
    Some(
        keys.iter()
            .find_map(|k| card.get(*k))
            .unwrap_or(&Value::Null),
    )
}

/// `use_array_model_card_metadata`: a string is appended, a list extended.
fn extend(slot: &mut Option<Vec<Value>>, v: Option<&Value>) {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return;
    };
    let list = slot.get_or_insert_with(Vec::new);
    match v {
        Value::String(_) => list.push(v.clone()),
        Value::Array(items) => list.extend(items.iter().cloned()),
        _ => {}
    }
}

/// The base models (or datasets) a card lists: each id read into name, organization, version
/// and repo URL as the reference reads it; a mapping kept as written; anything else an empty
/// entry (the reference logs it and counts it).
fn sources(v: &Value, total_params: i64) -> Vec<Value> {
    let ids: Vec<&Value> = match v {
        Value::String(_) => vec![v],
        Value::Array(items) => items.iter().collect(),
        _ => Vec::new(),
    };
    ids.into_iter()
        .map(|id| match id {
            Value::String(s) => Value::Object(source_entry(s, total_params)),
            Value::Object(_) => id.clone(),
            _ => Value::Object(Map::new()),
        })
        .collect()
}

/// One base model or dataset named by a string: a URL (read as a Hub id when it is one) or a
/// Hub id.
fn source_entry(id: &str, total_params: i64) -> Map<String, Value> {
    let mut e = Map::new();
    let put = |e: &mut Map<String, Value>, k: &str, v: String| {
        e.insert(k.into(), Value::String(v));
    };
    if ["http://", "https://", "ssh://"]
        .iter()
        .any(|p| id.starts_with(p))
    {
        put(&mut e, "repo_url", id.to_string());
        if let Some(hub) = ids::hub_id_of_url(id) {
            let p = components(&hub, total_params);
            name_org_version(&mut e, &p);
        }
        return e;
    }
    let p = components(id, total_params);
    name_org_version(&mut e, &p);
    if let (Some(org), Some(name)) = (&p.org, &p.full_name) {
        put(
            &mut e,
            "repo_url",
            format!("https://huggingface.co/{org}/{name}"),
        );
    }
    e
}

fn name_org_version(e: &mut Map<String, Value>, p: &IdParts) {
    if let Some(n) = &p.full_name {
        e.insert("name".into(), Value::String(id_to_title(n)));
    }
    if let Some(o) = &p.org {
        e.insert("organization".into(), Value::String(id_to_title(o)));
    }
    if let Some(v) = &p.version {
        e.insert("version".into(), Value::String(v.clone()));
    }
}

/// `{prefix}.count` and each entry's keys (`{prefix}.{i}.{key}`).
fn entries(
    put: &mut dyn FnMut(String, MetaValue),
    prefix: &str,
    list: Option<&[Value]>,
    src: &Path,
) -> Result<()> {
    let Some(list) = list else {
        return Ok(());
    };
    let count = u32::try_from(list.len()).map_err(|_| bad(src, format!("{prefix}: too many")))?;
    put(format!("{prefix}.count"), MetaValue::U32(count));
    for (i, entry) in list.iter().enumerate() {
        let Value::Object(m) = entry else {
            return Err(bad(src, format!("{prefix}.{i} is not a mapping")));
        };
        for key in ENTRY_KEYS {
            if let Some(v) = m.get(*key) {
                let k = format!("{prefix}.{i}.{key}");
                if let Some(s) = string(&k, v, src)? {
                    put(k, MetaValue::Str(s));
                }
            }
        }
    }
    Ok(())
}

/// gguf-py's `add_string`: a falsy value is skipped; a string written; anything else is a
/// value the reference fails on.
fn string(key: &str, v: &Value, src: &Path) -> Result<Option<String>> {
    match v {
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        Value::Null | Value::Bool(false) => Ok(None),
        Value::Number(n) if n.as_f64() == Some(0.0) => Ok(None),
        Value::Array(a) if a.is_empty() => Ok(None),
        Value::Object(m) if m.is_empty() => Ok(None),
        _ => Err(bad(
            src,
            format!("{key} would be {v}, not a string (the reference converter fails on it)"),
        )),
    }
}

/// A license given as a list: its items joined by commas.
fn joined(key: &str, items: &[Value], src: &Path) -> Result<String> {
    let strs: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
    strs.map(|s| s.join(",")).ok_or_else(|| {
        bad(
            src,
            format!("{key}: a list with an item that is not a string"),
        )
    })
}

fn int32(key: &str, v: &Value, src: &Path) -> Result<i32> {
    v.as_i64()
        .and_then(|n| i32::try_from(n).ok())
        .or_else(|| v.as_bool().map(i32::from))
        .ok_or_else(|| bad(src, format!("{key} would be {v}, not a 32-bit integer")))
}

fn float32(key: &str, v: &Value, src: &Path) -> Result<f32> {
    let f = match v {
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => v.as_f64(),
    };
    f.map(|f| f as f32)
        .filter(|f| f.is_finite() || !v.as_f64().is_some_and(f64::is_finite))
        .ok_or_else(|| bad(src, format!("{key} would be {v}, not a 32-bit float")))
}

/// gguf-py's `add_array` of tags or languages: every item of the first item's type.
fn array(key: &str, items: &[Value], src: &Path) -> Result<MetaValue> {
    let strs: Option<Vec<String>> = items.iter().map(|v| v.as_str().map(String::from)).collect();
    match strs {
        Some(s) => Ok(MetaValue::TypedArray {
            elem: MetaType::Str,
            items: s.into_iter().map(MetaValue::Str).collect(),
        }),
        None => Err(bad(
            src,
            format!("{key}: an item that is not a string (weightport writes string lists only)"),
        )),
    }
}
