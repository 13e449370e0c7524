//! Special token ids, `add_*_token` flags, chat template and normalizer flags
//! (gguf-py's `SpecialVocab`, docs/specs/gguf.md §5.6).
//!
//! Sources, in order:
//! 1. `tokenizer.json`: merges (when asked), the normalizer (lowercase / strip accents), the
//!    post-processor (ByteLevel: add_bos/eos default false; RobertaProcessing: all true;
//!    TemplateProcessing: the leading/trailing special tokens decide add_bos / add_eos);
//! 2. `tokenizer_config.json` (only when `tokenizer.json` exists for the token strings):
//!    `chat_template` (else `chat_template.jinja` / `chat_template.json`), `add_{typ}_token`
//!    (the post-processor wins), `{typ}_token` strings matched against `tokenizer.json`'s
//!    `added_tokens`;
//! 3. `config.json` `{typ}_token_id` (first source wins per type).
//!
//! Types are bos, eos, unk, sep, pad, cls, mask (+ eot / eom when TemplateProcessing's trailing
//! token is not the eos). `cls` has no GGUF key, so the writer skips it, like the reference.

use std::path::Path;

use serde_json::{Map, Value};
use weightport_core::{MetaValue, Result};

use super::merges_from_tokenizer_json;
use crate::config::{bad, read_json};

/// What `SpecialVocab` collected, in insertion order.
#[derive(Debug, Default)]
pub struct Special {
    /// BPE merges (when asked for).
    pub merges: Vec<String>,
    /// `(type, id)`, in the order found.
    pub ids: Vec<(String, u32)>,
    /// `(type, flag)`, in the order found.
    pub add: Vec<(String, bool)>,
    /// The chat template.
    pub chat_template: Option<String>,
    /// Normalizer lowercases.
    pub lowercase: Option<bool>,
    /// Normalizer strips accents.
    pub strip_accents: Option<bool>,
}

impl Special {
    fn set_id(&mut self, typ: &str, id: Option<&Value>, n_vocab: Option<usize>) -> Result<()> {
        let Some(id) = id else { return Ok(()) };
        // Python `isinstance(tid, int)`: JSON integers only (bool is not accepted in JSON form).
        let Some(id) = id.as_i64() else { return Ok(()) };
        if id < 0 {
            return Err(weightport_core::Error::Usage(format!(
                "invalid value for special token type {typ}: {id}"
            )));
        }
        if n_vocab.is_none_or(|n| (id as u64) < n as u64) {
            if self.ids.iter().any(|(t, _)| t == typ) {
                return Ok(());
            }
            if let Ok(id) = u32::try_from(id) {
                self.ids.push((typ.to_owned(), id));
            }
        }
        Ok(())
    }

    fn set_add(&mut self, typ: &str, v: bool, overwrite: bool) {
        match self.add.iter_mut().find(|(t, _)| t == typ) {
            Some(slot) if overwrite => slot.1 = v,
            Some(_) => {}
            None => self.add.push((typ.to_owned(), v)),
        }
    }

    fn parse_normalizer(&mut self, n: &Value) {
        match n.get("type").and_then(Value::as_str) {
            Some("Lowercase") => self.lowercase = Some(true),
            Some("StripAccents") => self.strip_accents = Some(true),
            Some("BertNormalizer") => {
                if let Some(v) = n.get("lowercase") {
                    self.lowercase = v.as_bool();
                }
                if let Some(v) = n.get("strip_accents") {
                    self.strip_accents = v.as_bool();
                }
            }
            Some("Sequence") => {
                for m in n
                    .get("normalizers")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    self.parse_normalizer(m);
                }
            }
            _ => {}
        }
    }

    /// The KVs in the order gguf-py's `SpecialVocab.add_to_gguf` writes them.
    pub fn to_kv(&self) -> Vec<(String, MetaValue)> {
        let mut kv = Vec::new();
        if !self.merges.is_empty() {
            kv.push((
                "tokenizer.ggml.merges".to_owned(),
                super::str_array(self.merges.iter().cloned()),
            ));
        }
        for (typ, id) in &self.ids {
            let key = match typ.as_str() {
                "bos" => "bos_token_id",
                "eos" => "eos_token_id",
                "unk" => "unknown_token_id",
                "sep" => "seperator_token_id",
                "pad" => "padding_token_id",
                "mask" => "mask_token_id",
                "eot" => "eot_token_id",
                "eom" => "eom_token_id",
                _ => continue, // cls: no handler in gguf-py's writer
            };
            kv.push((format!("tokenizer.ggml.{key}"), MetaValue::U32(*id)));
        }
        for (typ, v) in &self.add {
            if matches!(typ.as_str(), "bos" | "eos" | "sep") {
                kv.push((
                    format!("tokenizer.ggml.add_{typ}_token"),
                    MetaValue::Bool(*v),
                ));
            }
        }
        if let Some(t) = self.chat_template.as_ref().filter(|t| !t.is_empty()) {
            kv.push((
                "tokenizer.chat_template".to_owned(),
                MetaValue::Str(t.clone()),
            ));
        }
        if let Some(v) = self.lowercase {
            kv.push((
                "tokenizer.ggml.normalizer.lowercase".to_owned(),
                MetaValue::Bool(v),
            ));
        }
        if let Some(v) = self.strip_accents {
            kv.push((
                "tokenizer.ggml.normalizer.strip_accents".to_owned(),
                MetaValue::Bool(v),
            ));
        }
        kv
    }
}

fn token_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

fn special_id(tok: &Value) -> Option<String> {
    tok.get("SpecialToken")
        .and_then(|s| s.get("id"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Collects the special vocabulary of the release in `dir`.
pub fn load(dir: &Path, load_merges: bool, n_vocab: Option<usize>) -> Result<Special> {
    let mut sp = Special::default();
    let mut types: Vec<String> = ["bos", "eos", "unk", "sep", "pad", "cls", "mask"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let tj_path = dir.join("tokenizer.json");
    let tj = if tj_path.is_file() {
        Some(read_json(&tj_path)?)
    } else {
        None
    };
    let tc_path = dir.join("tokenizer_config.json");
    let mut tc: Option<Map<String, Value>> = if tc_path.is_file() {
        match read_json(&tc_path)? {
            Value::Object(m) => Some(m),
            _ => return Err(bad(&tc_path, "not a JSON object")),
        }
    } else {
        None
    };
    let mut added_tokens: Vec<Value> = Vec::new();
    if let Some(tj) = &tj {
        if load_merges {
            sp.merges = merges_from_tokenizer_json(&tj_path, tj)?;
        }
        if let Some(n) = tj.get("normalizer").filter(|n| !is_falsy(n)) {
            sp.parse_normalizer(n);
        }
        added_tokens = tj
            .get("added_tokens")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        post_processor(&mut sp, tj, &mut tc, &mut types);
    }
    if let Some(tc) = tc.as_ref().filter(|m| !m.is_empty()) {
        let jinja = dir.join("chat_template.jinja");
        let json = dir.join("chat_template.json");
        let alt = if jinja.is_file() {
            Some(Value::String(crate::config::read_text(&jinja)?))
        } else if json.is_file() {
            read_json(&json)?.get("chat_template").cloned()
        } else {
            None
        };
        match tc.get("chat_template").cloned().or(alt) {
            Some(Value::String(s)) => sp.chat_template = Some(s),
            Some(Value::Array(list)) => {
                // Named templates: only the `default` one is supported here.
                sp.chat_template = list.iter().find_map(|c| {
                    (c.get("name").and_then(Value::as_str) == Some("default"))
                        .then(|| c.get("template").and_then(Value::as_str).map(str::to_owned))
                        .flatten()
                });
            }
            _ => {}
        }
        for typ in &types {
            if let Some(Value::Bool(b)) = tc.get(&format!("add_{typ}_token")) {
                sp.set_add(typ, *b, false);
            }
            let Some(content) = token_text(tc.get(&format!("{typ}_token"))) else {
                continue;
            };
            let id = added_tokens
                .iter()
                .find(|a| a.get("content").and_then(Value::as_str) == Some(&content))
                .and_then(|a| a.get("id"));
            sp.set_id(typ, id, n_vocab)?;
        }
    }
    let cfg_path = dir.join("config.json");
    if cfg_path.is_file() {
        let cfg = read_json(&cfg_path)?;
        for typ in &types {
            let key = format!("{typ}_token_id");
            let id = cfg
                .get(&key)
                .filter(|v| !v.is_null())
                .or_else(|| cfg.get("text_config").and_then(|t| t.get(&key)));
            sp.set_id(typ, id, n_vocab)?;
        }
    }
    Ok(sp)
}

fn is_falsy(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(_) => false,
    }
}

fn post_processor(
    sp: &mut Special,
    tj: &Value,
    tc: &mut Option<Map<String, Value>>,
    types: &mut Vec<String>,
) {
    let has_tc = |tc: &Option<Map<String, Value>>| tc.as_ref().is_some_and(|m| !m.is_empty());
    let get = |tc: &Option<Map<String, Value>>, k: &str| -> Option<String> {
        tc.as_ref()
            .and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let mut special_bos = get(tc, "bos_token");
    let mut special_cls = get(tc, "cls_token");
    let mut special_eos = get(tc, "eos_token");
    let mut special_sep = get(tc, "sep_token");
    if special_bos.is_none() && special_cls.is_some() && has_tc(tc) {
        special_bos = special_cls.clone();
        set_tc(tc, "bos_token", special_bos.clone());
    }
    if special_eos.is_none() && special_sep.is_some() && has_tc(tc) {
        special_eos = special_sep.clone();
        set_tc(tc, "eos_token", special_eos.clone());
    }
    let Some(pp) = tj.get("post_processor").filter(|p| !is_falsy(p)) else {
        return;
    };
    let procs: Vec<Value> = match pp.get("processors").and_then(Value::as_array) {
        Some(list) => list.clone(),
        None => vec![pp.clone()],
    };
    for proc in &procs {
        match proc.get("type").and_then(Value::as_str) {
            Some("ByteLevel") => {
                sp.set_add("bos", false, false);
                sp.set_add("eos", false, false);
            }
            Some("RobertaProcessing") => {
                sp.set_add("bos", true, true);
                sp.set_add("eos", true, true);
                sp.set_add("sep", true, true);
                if special_cls.is_none() && has_tc(tc) {
                    let cls = proc
                        .get("cls")
                        .and_then(|c| c.get(0))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .or(special_bos.clone());
                    special_cls = cls.clone();
                    set_tc(tc, "cls_token", cls);
                }
                if special_sep.is_none() && has_tc(tc) {
                    let sep = proc
                        .get("sep")
                        .and_then(|c| c.get(0))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .or(special_eos.clone());
                    special_sep = sep.clone();
                    set_tc(tc, "sep_token", sep);
                }
            }
            Some("TemplateProcessing") => {
                let single = proc
                    .get("single")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let mut special_first = None;
                let mut special_last = None;
                if single.len() > 1 {
                    special_first = special_id(&single[0]);
                    if let Some(first) = special_first.clone() {
                        if !has_tc(tc) {
                            special_bos = Some(first.clone());
                        } else if Some(&first) != special_bos.as_ref()
                            && Some(&first) != special_cls.as_ref()
                        {
                            if special_bos.is_none() {
                                special_bos = Some(first.clone());
                                set_tc(tc, "bos_token", special_bos.clone());
                            }
                            if special_cls.is_none() {
                                special_cls = Some(first.clone());
                                set_tc(tc, "cls_token", special_cls.clone());
                            }
                        }
                        let is = Some(&first) == special_bos.as_ref()
                            || Some(&first) == special_cls.as_ref();
                        sp.set_add("bos", is, true);
                    }
                    special_last = special_id(&single[single.len() - 1]);
                    if let Some(last) = special_last.clone() {
                        if !has_tc(tc) {
                            special_eos = Some(last.clone());
                        } else if Some(&last) != special_eos.as_ref() {
                            if !types.iter().any(|t| t == "eot") {
                                types.push("eot".into());
                                set_tc(tc, "eot_token", special_eos.clone());
                            } else if !types.iter().any(|t| t == "eom") {
                                types.push("eom".into());
                                set_tc(tc, "eom_token", special_eos.clone());
                            }
                            special_eos = Some(last.clone());
                            set_tc(tc, "eos_token", special_eos.clone());
                        }
                        sp.set_add("eos", Some(&last) == special_eos.as_ref(), true);
                    }
                }
                let pair = proc
                    .get("pair")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if !pair.is_empty() {
                    let start = usize::from(
                        special_first.is_some() && special_id(&pair[0]) == special_first,
                    );
                    let stop = if special_last.is_some()
                        && special_id(&pair[pair.len() - 1]) == special_last
                    {
                        pair.len() - 1
                    } else {
                        pair.len()
                    };
                    let pair = if start < stop {
                        &pair[start..stop]
                    } else {
                        &[][..]
                    };
                    let seq = |v: &Value| {
                        v.get("Sequence")
                            .and_then(|s| s.get("id"))
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    };
                    if !pair.is_empty()
                        && seq(&pair[0]).as_deref() == Some("A")
                        && seq(&pair[pair.len() - 1]).as_deref() == Some("B")
                        && pair.len() > 2
                    {
                        let mid = &pair[1..pair.len() - 1];
                        let is_sep_or_eos = |e: &Option<String>| {
                            e.is_some() && (*e == special_sep || *e == special_eos)
                        };
                        let mut add_sep = false;
                        let e0 = special_id(&mid[0]);
                        if is_sep_or_eos(&e0) && special_last.is_none() {
                            add_sep = true;
                        }
                        if mid.len() == 2 && is_sep_or_eos(&special_id(&mid[1])) {
                            add_sep = true;
                        }
                        sp.set_add("sep", add_sep, true);
                        if add_sep && special_sep.is_none() && has_tc(tc) {
                            set_tc(tc, "sep_token", special_eos.clone());
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

fn set_tc(tc: &mut Option<Map<String, Value>>, k: &str, v: Option<String>) {
    if let Some(m) = tc.as_mut() {
        m.insert(k.to_owned(), v.map_or(Value::Null, Value::String));
    }
}
