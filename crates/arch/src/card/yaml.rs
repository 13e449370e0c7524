//! The model card: a README's YAML front matter as gguf-py's `Metadata.load_model_card` reads
//! it (its line splitting, its two text fixes, PyYAML's `safe_load`), as JSON values.
//!
//! The parser is yaml-rust2's event parser; plain scalars are resolved with YAML 1.1's rules as
//! PyYAML resolves them (`yes`/`no`/`on`/`off` are booleans, `0o`-less octal, `~` is null, a date
//! is a timestamp), since that decides whether the reference writes a value, skips it (a falsy
//! one) or fails on it (a number or date where a string goes).

use std::collections::HashMap;
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Number, Value};
use weightport_core::Result;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use super::bad;

/// The README's front matter as a mapping; empty when there is no README, no front matter, or
/// the front matter is not a mapping (as the reference reads it).
pub(super) fn front_matter(path: &Path) -> Result<Map<String, Value>> {
    if !path.is_file() {
        return Ok(Map::new());
    }
    let text = crate::config::read_text(path)?;
    let Some(yaml) = front_matter_text(&text) else {
        return Ok(Map::new());
    };
    match parse(&yaml).map_err(|e| bad(path, format!("the model card (YAML front matter): {e}")))? {
        Some(Value::Object(m)) => Ok(m),
        _ => Ok(Map::new()),
    }
}

/// The lines between a first line `---` and the next `---` (Python's `str.splitlines`), joined
/// by newlines, with the reference's fixes for `- no` (Norway) and tabs.
fn front_matter_text(text: &str) -> Option<String> {
    let lines = python_splitlines(text);
    if lines.first() != Some(&"---") {
        return None;
    }
    let body: Vec<&str> = lines[1..]
        .iter()
        .copied()
        .take_while(|l| *l != "---")
        .collect();
    let yaml = body.join("\n") + "\n";
    Some(yaml.replace("- no\n", "- \"no\"\n").replace('\t', "  "))
}

/// Python's `str.splitlines()`: every line boundary Python knows, `\r\n` as one.
fn python_splitlines(text: &str) -> Vec<&str> {
    const BREAKS: &[char] = &[
        '\n', '\r', '\x0b', '\x0c', '\x1c', '\x1d', '\x1e', '\u{85}', '\u{2028}', '\u{2029}',
    ];
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        match rest.find(BREAKS) {
            Some(i) => {
                out.push(&rest[..i]);
                let skip = if rest[i..].starts_with("\r\n") {
                    2
                } else {
                    rest[i..].chars().next().map_or(1, char::len_utf8)
                };
                rest = &rest[i + skip..];
            }
            None => {
                out.push(rest);
                rest = "";
            }
        }
    }
    out
}

/// The most values a front matter may build, aliases expanded: a real card has a few hundred;
/// PyYAML shares an aliased object where this builder copies it, so without a cap a "billion
/// laughs" card (aliases of aliases) would take exponential memory here.
const MAX_NODES: u64 = 100_000;
/// The deepest nesting of sequences and mappings (a JSON value is dropped recursively).
const MAX_DEPTH: usize = 64;

/// PyYAML's `safe_load`: the one document's value (`None` for an empty stream); more than one
/// document is an error, as in PyYAML.
fn parse(yaml: &str) -> std::result::Result<Option<Value>, String> {
    let mut b = Builder::default();
    Parser::new_from_str(yaml)
        .load(&mut b, true)
        .map_err(|e| e.to_string())?;
    if b.over {
        return Err(format!(
            "more than {MAX_NODES} values (aliases expanded) or nesting deeper than {MAX_DEPTH}"
        ));
    }
    match b.docs.len() {
        0 => Ok(None),
        1 => Ok(b.docs.pop()),
        n => Err(format!("{n} YAML documents, expected one")),
    }
}

/// A node still open: a sequence or a mapping (with the key awaiting its value: `None` for a
/// key that is not a string, whose entry is dropped as no string lookup can reach it).
/// Each with its anchor id and the node count when it opened.
enum Open {
    Seq(Vec<Value>, usize, u64),
    Map(Map<String, Value>, Option<Option<String>>, usize, u64),
}

#[derive(Default)]
struct Builder {
    stack: Vec<Open>,
    /// Anchored values and their node counts.
    anchors: HashMap<usize, (Value, u64)>,
    docs: Vec<Value>,
    /// Values built so far, aliases expanded.
    nodes: u64,
    /// Past [`MAX_NODES`] or [`MAX_DEPTH`]: every later event is ignored.
    over: bool,
}

impl Builder {
    /// Counts `n` more values; false (and `over`) past the cap.
    fn grow(&mut self, n: u64) -> bool {
        self.nodes = self.nodes.saturating_add(n);
        self.over |= self.nodes > MAX_NODES || self.stack.len() > MAX_DEPTH;
        !self.over
    }

    fn done(&mut self, v: Value, anchor: usize, size: u64) {
        if anchor > 0 {
            self.anchors.insert(anchor, (v.clone(), size));
        }
        match self.stack.last_mut() {
            None => self.docs.push(v),
            Some(Open::Seq(items, ..)) => items.push(v),
            Some(Open::Map(m, key, ..)) => match key.take() {
                None => *key = Some(v.as_str().map(String::from)),
                Some(Some(k)) => {
                    m.insert(k, v);
                }
                Some(None) => {}
            },
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, _: Marker) {
        if self.over {
            return;
        }
        match ev {
            Event::Scalar(s, style, anchor, tag) => {
                if !self.grow(1) {
                    return;
                }
                let is_str = tag.is_some_and(|t| t.suffix == "str");
                let v = if is_str || style != TScalarStyle::Plain {
                    Value::String(s)
                } else {
                    resolve_plain(&s)
                };
                self.done(v, anchor, 1);
            }
            Event::Alias(id) => {
                let size = self.anchors.get(&id).map_or(1, |(_, size)| *size);
                if !self.grow(size) {
                    return;
                }
                let v = self.anchors.get(&id).map(|(v, _)| v.clone());
                self.done(v.unwrap_or_else(|| odd("an unknown alias")), 0, size);
            }
            Event::SequenceStart(anchor, _) => {
                self.stack.push(Open::Seq(Vec::new(), anchor, self.nodes));
                self.grow(0);
            }
            Event::MappingStart(anchor, _) => {
                self.stack
                    .push(Open::Map(Map::new(), None, anchor, self.nodes));
                self.grow(0);
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (v, anchor, start) = match self.stack.pop() {
                    Some(Open::Seq(items, anchor, start)) => (Value::Array(items), anchor, start),
                    Some(Open::Map(m, _, anchor, start)) => (Value::Object(m), anchor, start),
                    None => return,
                };
                if self.grow(1) {
                    self.done(v, anchor, self.nodes - start);
                }
            }
            _ => {}
        }
    }
}

/// A value JSON cannot hold (a timestamp, an infinity): a one-key mapping naming it, which is
/// truthy and not a string, as the Python object is.
fn odd(what: &str) -> Value {
    let mut m = Map::new();
    m.insert("yaml".into(), Value::String(what.into()));
    Value::Object(m)
}

static BOOL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new("^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$")
        .expect("fixed")
});
static INT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$",
    )
    .expect("fixed")
});
static FLOAT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
    )
    .expect("fixed")
});
static TIMESTAMP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)$")
        .expect("fixed")
});

/// PyYAML's implicit resolution of a plain scalar (YAML 1.1).
fn resolve_plain(s: &str) -> Value {
    if matches!(s, "" | "~" | "null" | "Null" | "NULL") {
        return Value::Null;
    }
    if BOOL.is_match(s) {
        let yes = matches!(s.to_ascii_lowercase().as_str(), "yes" | "true" | "on");
        return Value::Bool(yes);
    }
    if INT.is_match(s) {
        return int_value(s);
    }
    if FLOAT.is_match(s) {
        return float_value(s);
    }
    if TIMESTAMP.is_match(s) {
        return odd("a timestamp");
    }
    Value::String(s.to_string())
}

/// An integer as PyYAML constructs it (binary, octal by a leading 0, hex, base 60); one too
/// large for JSON is kept as its nonzero-ness.
fn int_value(s: &str) -> Value {
    let t = s.replace('_', "");
    let (neg, digits) = match t.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, t.strip_prefix('+').unwrap_or(&t)),
    };
    let parsed = if let Some(b) = digits.strip_prefix("0b") {
        i64::from_str_radix(b, 2).ok()
    } else if let Some(h) = digits.strip_prefix("0x") {
        i64::from_str_radix(h, 16).ok()
    } else if digits.contains(':') {
        digits.split(':').try_fold(0i64, |acc, p| {
            acc.checked_mul(60)?.checked_add(p.parse().ok()?)
        })
    } else if digits.len() > 1 && digits.starts_with('0') {
        i64::from_str_radix(digits, 8).ok()
    } else {
        digits.parse().ok()
    };
    match parsed {
        Some(n) => Value::Number(Number::from(if neg { -n } else { n })),
        None => odd("a large integer"),
    }
}

/// A float as PyYAML constructs it; infinities, NaN and base 60 are kept as odd values.
fn float_value(s: &str) -> Value {
    let t = s.replace('_', "");
    t.parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map_or_else(|| odd("a float JSON cannot hold"), Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_is_the_lines_between_the_first_two_rulers() {
        let t = "---\r\nlicense: mit\r\ntags:\n- no\n---\n# Title\n";
        assert_eq!(
            front_matter_text(t).unwrap(),
            "license: mit\ntags:\n- \"no\"\n"
        );
        assert_eq!(front_matter_text("# no card\n---\n"), None);
        assert_eq!(front_matter_text(""), None);
    }

    #[test]
    fn plain_scalars_resolve_as_pyyaml_resolves_them() {
        assert_eq!(resolve_plain("yes"), Value::Bool(true));
        assert_eq!(resolve_plain("Off"), Value::Bool(false));
        assert_eq!(resolve_plain("010"), Value::from(8));
        assert_eq!(resolve_plain("0x1f"), Value::from(31));
        assert_eq!(resolve_plain("1:30"), Value::from(90));
        assert_eq!(resolve_plain("1_000"), Value::from(1000));
        assert_eq!(resolve_plain("1.5"), Value::from(1.5));
        assert_eq!(resolve_plain("~"), Value::Null);
        assert_eq!(resolve_plain("2024-01-02"), odd("a timestamp"));
        assert_eq!(resolve_plain("apache-2.0"), Value::from("apache-2.0"));
        assert_eq!(resolve_plain("1e3"), Value::from("1e3"));
    }

    #[test]
    fn quoted_and_tagged_scalars_stay_strings_and_aliases_resolve() {
        let v = parse("a: 'yes'\nb: !!str 10\nc: &x [1, two]\nd: *x\n7: seven\n").unwrap();
        let m = v.unwrap();
        assert_eq!(m["a"], "yes");
        assert_eq!(m["b"], "10");
        assert_eq!(m["d"], serde_json::json!([1, "two"]));
        assert!(
            m.get("7").is_none(),
            "an integer key is not the string \"7\""
        );
    }

    /// A "billion laughs" card (each level an alias list of the one before: 10^9 values if
    /// expanded) and a deeply nested one are refused quickly, in bounded memory.
    #[test]
    fn aliases_of_aliases_and_deep_nesting_are_refused() {
        let mut y = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let p = i - 1;
            y += &format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n");
        }
        let e = parse(&y).unwrap_err();
        assert!(e.contains("aliases expanded"), "{e}");
        let deep = format!("k: {}{}\n", "[".repeat(500), "]".repeat(500));
        assert!(parse(&deep).is_err());
        // A real card's size passes.
        assert!(parse("a: &a [1, 2]\nb: *a\n").is_ok());
    }

    #[test]
    fn splitlines_knows_pythons_boundaries() {
        assert_eq!(
            python_splitlines("a\r\nb\rc\u{2028}d\n"),
            ["a", "b", "c", "d"]
        );
        assert_eq!(python_splitlines("a\n\nb"), ["a", "", "b"]);
    }
}
