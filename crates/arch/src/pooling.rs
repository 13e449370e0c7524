//! Sentence-transformers releases: the pooling KVs the reference writes from `modules.json`.
//!
//! The named hook behind [`crate::table::ExtraKv::Pooling`], after the reference's
//! `TextModel._try_set_pooling_type` (`conversion/base.py`; called by its BERT, Qwen2 and Qwen3
//! converters):
//! * the first entry of `modules.json` whose `type` ends with `Pooling` names a directory;
//!   its `config.json` gives `{arch}.pooling_type` (u32): `pooling_mode_mean_tokens` → MEAN (1),
//!   else `pooling_mode_cls_token` → CLS (2), else `pooling_mode_lasttoken` → LAST (3), else a
//!   `pooling_mode` string `mean`/`cls`/`lasttoken` (flags are tested for Python truthiness);
//!   anything else the reference refuses, and so do we;
//! * without a Pooling module (or without `modules.json`) no pooling key is written;
//! * a config.json `classifier_pooling` of `cls`/`mean` writes `{arch}.classifier.pooling_type`
//!   (any other value is refused, as the reference does).
//!
//! Where the reference writes a file whose embeddings are not the release's, we refuse instead,
//! naming the file: a module it drops that changes the vectors (`Dense`, `LayerNorm`, `CNN`,
//! ..., anything but `Transformer`, `Pooling` and `Normalize`), and a Pooling config that
//! concatenates several modes (mean + max is twice as wide) or uses one llama.cpp has no type
//! for (max, mean_sqrt_len, weightedmean). `Normalize` is accepted as the reference accepts it:
//! it has no weights, and llama.cpp's embedding tools L2-normalise by default. Module paths
//! that leave the release directory (absolute, `..`) are refused before anything is opened.

use std::path::{Component, Path};

use serde_json::Value;
use weightport_core::{Error, Format, Location, MetaValue, Result};

use crate::config::{read_json, HParams};

/// llama.cpp's `enum llama_pooling_type` values that a sentence-transformers release maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolingType {
    /// Mean of the token vectors (1).
    Mean = 1,
    /// The first (`[CLS]`) token's vector (2).
    Cls = 2,
    /// The last token's vector (3).
    Last = 3,
}

/// The pooling keys of a release, in the reference's order (`pooling_type`, then
/// `classifier.pooling_type`), without the `{arch}.` prefix.
pub(crate) fn pooling_kvs(dir: &Path, hp: &HParams) -> Result<Vec<(&'static str, MetaValue)>> {
    let mut out = Vec::new();
    if let Some(t) = from_modules(dir)? {
        out.push(("pooling_type", MetaValue::U32(t as u32)));
    }
    if let Some(v) = hp.raw.get("classifier_pooling").filter(|v| !v.is_null()) {
        let t = match v.as_str() {
            Some("cls") => PoolingType::Cls,
            Some("mean") => PoolingType::Mean,
            _ => {
                return Err(unsupported(
                    &hp.path,
                    format!("classifier_pooling {v} (the reference accepts \"cls\" and \"mean\")"),
                ))
            }
        };
        out.push(("classifier.pooling_type", MetaValue::U32(t as u32)));
    }
    Ok(out)
}

fn unsupported(path: &Path, what: String) -> Error {
    Error::Unsupported {
        at: Location::file(path),
        format: Some(Format::HfRelease),
        what,
    }
}

/// Python's truthiness of a JSON value.
fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// Module types whose weights the GGUF holds or that do not change the vector's direction.
const KEPT_MODULES: &[&str] = &["Transformer", "Pooling", "Normalize"];

/// The pooling type of the release's sentence-transformers Pooling module, if it has one.
pub(crate) fn from_modules(dir: &Path) -> Result<Option<PoolingType>> {
    let path = dir.join("modules.json");
    if !path.is_file() {
        return Ok(None);
    }
    let modules = read_json(&path)?;
    let Some(sub) = pooling_module(&path, &modules)? else {
        return Ok(None);
    };
    let rel = Path::new(sub);
    if !rel
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(crate::config::bad(
            &path,
            format!(
                "the Pooling module's path `{}` leaves the release directory",
                weightport_core::sanitize(sub)
            ),
        ));
    }
    let cfg_path = dir.join(rel).join("config.json");
    let cfg = read_json(&cfg_path)?;
    pooling_type(&cfg, &cfg_path).map(Some)
}

/// The path of the first Pooling module of modules.json (`path`, read as `modules`); a module
/// the GGUF does not hold is refused.
fn pooling_module<'m>(path: &Path, modules: &'m Value) -> Result<Option<&'m str>> {
    let list = modules.as_array().ok_or_else(|| {
        crate::config::bad(
            path,
            "not a list of modules (sentence-transformers writes one)",
        )
    })?;
    let mut pooling: Option<&str> = None;
    for (i, m) in list.iter().enumerate() {
        let field = |k: &str| {
            m.get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| crate::config::bad(path, format!("module {i} has no string `{k}`")))
        };
        let ty = field("type")?;
        let class = ty.rsplit('.').next().unwrap_or(ty);
        if !KEPT_MODULES.contains(&class) {
            return Err(unsupported(
                path,
                format!(
                    "sentence-transformers module `{}` ({}) is not converted: llama.cpp's \
                     converter drops it, so the GGUF's embeddings would not be the release's",
                    weightport_core::sanitize(m.get("path").and_then(Value::as_str).unwrap_or("")),
                    weightport_core::sanitize(ty),
                ),
            ));
        }
        if pooling.is_none() && ty.ends_with("Pooling") {
            pooling = Some(field("path")?);
        }
    }
    Ok(pooling)
}

/// The one pooling mode the Pooling module's config (`cfg`, read from `cfg_path`) turns on, as
/// llama.cpp names it; a mode llama.cpp lacks, or several at once, is refused.
fn pooling_type(cfg: &Value, cfg_path: &Path) -> Result<PoolingType> {
    let flags = [
        ("pooling_mode_mean_tokens", Some(PoolingType::Mean)),
        ("pooling_mode_cls_token", Some(PoolingType::Cls)),
        ("pooling_mode_lasttoken", Some(PoolingType::Last)),
        ("pooling_mode_max_tokens", None),
        ("pooling_mode_mean_sqrt_len_tokens", None),
        ("pooling_mode_weightedmean_tokens", None),
    ];
    let on: Vec<_> = flags
        .iter()
        .filter(|(k, _)| truthy(cfg.get(*k)))
        .copied()
        .collect();
    match on.as_slice() {
        [(_, Some(t))] => Ok(*t),
        [] => match cfg.get("pooling_mode").and_then(Value::as_str) {
            Some("mean") => Ok(PoolingType::Mean),
            Some("cls") => Ok(PoolingType::Cls),
            Some("lasttoken") => Ok(PoolingType::Last),
            _ => {
                let mode = cfg
                    .get("pooling_mode")
                    .map_or("none".into(), Value::to_string);
                Err(unsupported(
                    cfg_path,
                    format!(
                        "pooling mode {}: llama.cpp pools by mean, cls or lasttoken",
                        weightport_core::sanitize(&mode)
                    ),
                ))
            }
        },
        [(k, None)] => Err(unsupported(
            cfg_path,
            format!("`{k}`: llama.cpp has no such pooling (mean, cls or lasttoken)"),
        )),
        several => {
            let names: Vec<&str> = several.iter().map(|(k, _)| *k).collect();
            Err(unsupported(
                cfg_path,
                format!(
                    "{} together (their vectors are concatenated): llama.cpp pools one way",
                    names.join(" and ")
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(modules: &str, pooling: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("modules.json"), modules).unwrap();
        std::fs::create_dir(d.path().join("1_Pooling")).unwrap();
        std::fs::write(d.path().join("1_Pooling/config.json"), pooling).unwrap();
        d
    }

    const MODULES: &str = r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
        {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
        {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]"#;

    #[test]
    fn modes_map_like_the_reference() {
        for (cfg, want) in [
            (
                r#"{"pooling_mode_cls_token": false, "pooling_mode_mean_tokens": true}"#,
                PoolingType::Mean,
            ),
            (r#"{"pooling_mode_cls_token": 1}"#, PoolingType::Cls),
            (r#"{"pooling_mode_lasttoken": true}"#, PoolingType::Last),
            (r#"{"pooling_mode": "lasttoken"}"#, PoolingType::Last),
            (
                r#"{"pooling_mode": "cls", "pooling_mode_max_tokens": false}"#,
                PoolingType::Cls,
            ),
        ] {
            let d = release(MODULES, cfg);
            assert_eq!(from_modules(d.path()).unwrap(), Some(want), "{cfg}");
        }
    }

    #[test]
    fn what_the_gguf_cannot_hold_is_refused_naming_the_file() {
        for (modules, cfg, names) in [
            (MODULES, r#"{"pooling_mode_max_tokens": true}"#, "1_Pooling"),
            (
                MODULES,
                r#"{"pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": true}"#,
                "together",
            ),
            (MODULES, r#"{"pooling_mode": "max"}"#, "\"max\""),
            (MODULES, r#"{"pooling_mode": ["mean", "max"]}"#, "1_Pooling"),
            (
                r#"[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
                   {"path":"2_Dense","type":"sentence_transformers.models.Dense"}]"#,
                r#"{"pooling_mode_mean_tokens": true}"#,
                "2_Dense",
            ),
            (
                r#"[{"path":"../x","type":"sentence_transformers.models.Pooling"}]"#,
                "{}",
                "leaves",
            ),
            (r#"{"a": 1}"#, "{}", "modules.json"),
            (r#"[{"path": "1_Pooling"}]"#, "{}", "type"),
        ] {
            let d = release(modules, cfg);
            let e = from_modules(d.path()).unwrap_err().to_string();
            assert!(e.contains(names), "{modules} {cfg}: {e}");
        }
    }

    #[test]
    fn no_pooling_module_no_key() {
        let d = release(
            r#"[{"path":"","type":"sentence_transformers.models.Transformer"}]"#,
            "{}",
        );
        assert_eq!(from_modules(d.path()).unwrap(), None);
        let e = tempfile::tempdir().unwrap();
        assert_eq!(from_modules(e.path()).unwrap(), None);
    }
}
