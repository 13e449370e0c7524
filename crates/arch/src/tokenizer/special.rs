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
            // cls: no handler in gguf-py's writer.
            if let Some(key) = id_key(typ) {
                kv.push((key, MetaValue::U32(*id)));
            }
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

/// The GGUF key gguf-py's writer has for a special token type's id (`None`: no handler).
pub(crate) fn id_key(typ: &str) -> Option<String> {
    let key = match typ {
        "bos" => "bos_token_id",
        "eos" => "eos_token_id",
        "unk" => "unknown_token_id",
        "sep" => "seperator_token_id",
        "pad" => "padding_token_id",
        "mask" => "mask_token_id",
        "eot" => "eot_token_id",
        "eom" => "eom_token_id",
        _ => return None,
    };
    Some(format!("tokenizer.ggml.{key}"))
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
    let mut tc = tokenizer_config(dir)?;
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
        sp.chat_template = chat_template(dir, tc)?;
        sp.ids_from_tokenizer_config(tc, &types, &added_tokens, n_vocab)?;
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

/// tokenizer_config.json, when the release has one.
fn tokenizer_config(dir: &Path) -> Result<Option<Map<String, Value>>> {
    let tc_path = dir.join("tokenizer_config.json");
    if !tc_path.is_file() {
        return Ok(None);
    }
    match read_json(&tc_path)? {
        Value::Object(m) => Ok(Some(m)),
        _ => Err(bad(&tc_path, "not a JSON object")),
    }
}

/// The tokenizer config's `chat_template`, else `chat_template.jinja` or `chat_template.json`'s;
/// of a list of named templates, the `default` one.
fn chat_template(dir: &Path, tc: &Map<String, Value>) -> Result<Option<String>> {
    let jinja = dir.join("chat_template.jinja");
    let json = dir.join("chat_template.json");
    let alt = if jinja.is_file() {
        Some(Value::String(crate::config::read_text(&jinja)?))
    } else if json.is_file() {
        read_json(&json)?.get("chat_template").cloned()
    } else {
        None
    };
    Ok(match tc.get("chat_template").cloned().or(alt) {
        Some(Value::String(s)) => Some(s),
        // Named templates: only the `default` one is supported here.
        Some(Value::Array(list)) => list.iter().find_map(|c| {
            (c.get("name").and_then(Value::as_str) == Some("default"))
                .then(|| c.get("template").and_then(Value::as_str).map(str::to_owned))
                .flatten()
        }),
        _ => None,
    })
}

impl Special {
    /// The tokenizer config's `add_{typ}_token` flags and `{typ}_token`s (by content, among
    /// tokenizer.json's added tokens).
    fn ids_from_tokenizer_config(
        &mut self,
        tc: &Map<String, Value>,
        types: &[String],
        added_tokens: &[Value],
        n_vocab: Option<usize>,
    ) -> Result<()> {
        for typ in types {
            if let Some(Value::Bool(b)) = tc.get(&format!("add_{typ}_token")) {
                self.set_add(typ, *b, false);
            }
            let Some(content) = token_text(tc.get(&format!("{typ}_token"))) else {
                continue;
            };
            let id = added_tokens
                .iter()
                .find(|a| a.get("content").and_then(Value::as_str) == Some(&content))
                .and_then(|a| a.get("id"));
            self.set_id(typ, id, n_vocab)?;
        }
        Ok(())
    }
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

/// gguf-py's `SpecialVocab._set_special_token`s from tokenizer.json's post-processor: the
/// `add_*_token` flags, and the special tokens it names written back into the tokenizer config
/// `tc` (and `eot`/`eom` added to `types`) as the reference does.
fn post_processor(
    sp: &mut Special,
    tj: &Value,
    tc: &mut Option<Map<String, Value>>,
    types: &mut Vec<String>,
) {
    let mut post = PostProcessor::new(sp, tc, types);
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
                post.sp.set_add("bos", false, false);
                post.sp.set_add("eos", false, false);
            }
            Some("RobertaProcessing") => post.roberta(proc),
            Some("TemplateProcessing") => post.template(proc),
            _ => {}
        }
    }
}

/// The special tokens as the post-processor pass sees them, and what it writes to.
struct PostProcessor<'a> {
    sp: &'a mut Special,
    tc: &'a mut Option<Map<String, Value>>,
    types: &'a mut Vec<String>,
    bos: Option<String>,
    cls: Option<String>,
    eos: Option<String>,
    sep: Option<String>,
}

/// A non-empty string of the tokenizer config.
fn tc_str(tc: &Option<Map<String, Value>>, k: &str) -> Option<String> {
    tc.as_ref()
        .and_then(|m| m.get(k))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

impl<'a> PostProcessor<'a> {
    /// The tokenizer config's bos/cls/eos/sep, bos falling back on cls and eos on sep.
    fn new(
        sp: &'a mut Special,
        tc: &'a mut Option<Map<String, Value>>,
        types: &'a mut Vec<String>,
    ) -> Self {
        let mut post = PostProcessor {
            bos: tc_str(tc, "bos_token"),
            cls: tc_str(tc, "cls_token"),
            eos: tc_str(tc, "eos_token"),
            sep: tc_str(tc, "sep_token"),
            sp,
            tc,
            types,
        };
        if post.bos.is_none() && post.cls.is_some() && post.has_tc() {
            post.bos = post.cls.clone();
            post.set_tc("bos_token", post.bos.clone());
        }
        if post.eos.is_none() && post.sep.is_some() && post.has_tc() {
            post.eos = post.sep.clone();
            post.set_tc("eos_token", post.eos.clone());
        }
        post
    }

    /// A non-empty tokenizer config was given.
    fn has_tc(&self) -> bool {
        self.tc.as_ref().is_some_and(|m| !m.is_empty())
    }

    fn set_tc(&mut self, k: &str, v: Option<String>) {
        set_tc(self.tc, k, v);
    }

    /// `RobertaProcessing`: bos, eos and sep added; cls and sep from the processor when the
    /// config lacks them.
    fn roberta(&mut self, proc: &Value) {
        self.sp.set_add("bos", true, true);
        self.sp.set_add("eos", true, true);
        self.sp.set_add("sep", true, true);
        let first = |k: &str| {
            proc.get(k)
                .and_then(|c| c.get(0))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        if self.cls.is_none() && self.has_tc() {
            let cls = first("cls").or(self.bos.clone());
            self.cls = cls.clone();
            self.set_tc("cls_token", cls);
        }
        if self.sep.is_none() && self.has_tc() {
            let sep = first("sep").or(self.eos.clone());
            self.sep = sep.clone();
            self.set_tc("sep_token", sep);
        }
    }

    /// `TemplateProcessing`: the single sequence's first and last special tokens decide bos and
    /// eos; the pair's middle decides sep.
    fn template(&mut self, proc: &Value) {
        let list = |k: &str| {
            proc.get(k)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let single = list("single");
        let mut first = None;
        let mut last = None;
        if single.len() > 1 {
            first = special_id(&single[0]);
            if let Some(first) = first.clone() {
                self.template_first(first);
            }
            last = special_id(&single[single.len() - 1]);
            if let Some(last) = last.clone() {
                self.template_last(last);
            }
        }
        let pair = list("pair");
        if !pair.is_empty() {
            self.template_pair(&pair, &first, &last);
        }
    }

    /// The single sequence's first special token: bos (or cls) when the config says so.
    fn template_first(&mut self, first: String) {
        if !self.has_tc() {
            self.bos = Some(first.clone());
        } else if Some(&first) != self.bos.as_ref() && Some(&first) != self.cls.as_ref() {
            if self.bos.is_none() {
                self.bos = Some(first.clone());
                self.set_tc("bos_token", self.bos.clone());
            }
            if self.cls.is_none() {
                self.cls = Some(first.clone());
                self.set_tc("cls_token", self.cls.clone());
            }
        }
        let is = Some(&first) == self.bos.as_ref() || Some(&first) == self.cls.as_ref();
        self.sp.set_add("bos", is, true);
    }

    /// The single sequence's last special token: the eos; the config's own eos, when another,
    /// becomes eot (or eom).
    fn template_last(&mut self, last: String) {
        if !self.has_tc() {
            self.eos = Some(last.clone());
        } else if Some(&last) != self.eos.as_ref() {
            if !self.types.iter().any(|t| t == "eot") {
                self.types.push("eot".into());
                self.set_tc("eot_token", self.eos.clone());
            } else if !self.types.iter().any(|t| t == "eom") {
                self.types.push("eom".into());
                self.set_tc("eom_token", self.eos.clone());
            }
            self.eos = Some(last.clone());
            self.set_tc("eos_token", self.eos.clone());
        }
        self.sp
            .set_add("eos", Some(&last) == self.eos.as_ref(), true);
    }

    /// The pair template without the single's first and last tokens: `A … B` with a sep (or
    /// eos) between them adds sep.
    fn template_pair(&mut self, pair: &[Value], first: &Option<String>, last: &Option<String>) {
        let start = usize::from(first.is_some() && special_id(&pair[0]) == *first);
        let stop = if last.is_some() && special_id(&pair[pair.len() - 1]) == *last {
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
        if pair.is_empty()
            || seq(&pair[0]).as_deref() != Some("A")
            || seq(&pair[pair.len() - 1]).as_deref() != Some("B")
            || pair.len() <= 2
        {
            return;
        }
        let mid = &pair[1..pair.len() - 1];
        let is_sep_or_eos = |e: &Option<String>| e.is_some() && (*e == self.sep || *e == self.eos);
        let mut add_sep = false;
        if is_sep_or_eos(&special_id(&mid[0])) && last.is_none() {
            add_sep = true;
        }
        if mid.len() == 2 && is_sep_or_eos(&special_id(&mid[1])) {
            add_sep = true;
        }
        self.sp.set_add("sep", add_sep, true);
        if add_sep && self.sep.is_none() && self.has_tc() {
            self.set_tc("sep_token", self.eos.clone());
        }
    }
}

fn set_tc(tc: &mut Option<Map<String, Value>>, k: &str, v: Option<String>) {
    if let Some(m) = tc.as_mut() {
        m.insert(k.to_owned(), v.map_or(Value::Null, Value::String));
    }
}
