//! gguf-py's `Metadata.get_model_id_components`: a Hub id (`org/Name-Parts`) read into its
//! name, organization, basename, finetune, version and size label, with the reference's
//! heuristics word for word (its regexes, its order, its context-length test).

use std::sync::LazyLock;

use regex::Regex;

/// What an id says about a model (`None` where the reference returns `None`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IdParts {
    /// The id after `org/` (the whole id when it has no `/`, or holds a space).
    pub full_name: Option<String>,
    /// The part before the first `/` (not one starting with `.`: a path like `./x`).
    pub org: Option<String>,
    /// The leading name parts (`Mistral` of `Mistral-7B-Instruct-v0.2`), when the id has a
    /// size, finetune or version besides.
    pub basename: Option<String>,
    /// Finetune words and unrecognized parts after the basename (`Instruct`).
    pub finetune: Option<String>,
    /// Version parts after the basename (`v0.2`).
    pub version: Option<String>,
    /// Size parts (`7B`, `8x7B`, `A3B`), deduplicated.
    pub size_label: Option<String>,
}

/// The annotations a part can carry (a part can carry several).
#[derive(Debug, Clone, Copy, Default)]
struct Kinds {
    basename: bool,
    size_label: bool,
    finetune: bool,
    version: bool,
    kind: bool,
}

impl Kinds {
    fn is_empty(self) -> bool {
        !(self.basename || self.size_label || self.finetune || self.version || self.kind)
    }
    fn count(self) -> usize {
        [
            self.basename,
            self.size_label,
            self.finetune,
            self.version,
            self.kind,
        ]
        .iter()
        .filter(|b| **b)
        .count()
    }
}

fn full(re: &str) -> Regex {
    Regex::new(&format!("(?i)^(?:{re})$")).expect("a fixed pattern")
}

static VERSION: LazyLock<Regex> = LazyLock::new(|| full(r"(v|iter)?\d+([.]\d+)*"));
static QUANT_TYPE: LazyLock<Regex> = LazyLock::new(|| full(r"i?q\d(_\w)*|b?fp?(16|32)"));
static SIZE: LazyLock<Regex> =
    LazyLock::new(|| full(r"(([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl)"));
static FINETUNE_WORD: LazyLock<Regex> = LazyLock::new(|| full(r"chat|instruct|vision|lora"));
static DECIMAL: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\p{Nd}$").expect("fixed"));

/// Python's `str.isdecimal` for one character.
fn is_decimal(c: char) -> bool {
    let mut b = [0u8; 4];
    DECIMAL.is_match(c.encode_utf8(&mut b))
}

static HUB_URL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^https?://huggingface.co/([^/]+/[^/]+)$").expect("fixed"));

/// The `org/name` of a Hub URL (`https://huggingface.co/org/name`), as the reference matches it.
pub(super) fn hub_id_of_url(url: &str) -> Option<String> {
    if !url.contains("huggingface.co") {
        return None;
    }
    HUB_URL.captures(url).map(|c| c[1].to_string())
}

/// `get_model_id_components(model_id, total_params)`: `total_params` is the model's size, 0 when
/// unknown, and (as gguf-py counts a LoRA adapter) minus the size of the products for an adapter.
pub fn components(model_id: &str, total_params: i64) -> IdParts {
    if model_id.contains(' ') {
        return IdParts {
            full_name: Some(model_id.to_string()),
            ..IdParts::default()
        };
    }
    let (org, full_name) = match model_id.split_once('/') {
        Some((o, n)) => (Some(o.to_string()).filter(|o| !o.starts_with('.')), n),
        None => (None, model_id),
    };
    let mut parts: Vec<String> = full_name
        .split('-')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    let mut kinds = vec![Kinds::default(); parts.len()];
    for i in 0..parts.len() {
        annotate(i, &mut parts[i], &mut kinds[i], total_params);
    }
    drop_word_sizes(&parts, &mut kinds);
    mark_basename(&parts, &mut kinds);
    let pick = |f: fn(&Kinds) -> bool| -> Option<String> {
        let v: Vec<&str> = parts
            .iter()
            .zip(&kinds)
            .filter(|(_, k)| f(k))
            .map(|(p, _)| p.as_str())
            .collect();
        Some(v.join("-")).filter(|s| !s.is_empty())
    };
    let mut basename = pick(|k| k.basename);
    let finetune = pick(|k| k.finetune);
    let version = pick(|k| k.version && !k.basename);
    let mut sizes: Vec<&str> = Vec::new();
    for (p, k) in parts.iter().zip(&kinds) {
        if k.size_label && !sizes.contains(&p.as_str()) {
            sizes.push(p);
        }
    }
    let size_label = Some(sizes.join("-")).filter(|s| !s.is_empty());
    if size_label.is_none() && finetune.is_none() && version.is_none() {
        basename = None;
    }
    IdParts {
        full_name: Some(full_name.to_string()),
        org,
        basename,
        finetune,
        version,
        size_label,
    }
}

/// The reference's annotation of part `i` (it may rewrite the part: upper-cased quant types,
/// normalized sizes).
fn annotate(i: usize, part: &mut String, k: &mut Kinds, total_params: i64) {
    if VERSION.is_match(part) {
        k.version = true;
    } else if QUANT_TYPE.is_match(part) {
        k.kind = true;
        *part = part.to_uppercase();
    } else if i > 0 && SIZE.is_match(part) {
        *part = size_part(part, k, total_params);
        if k.is_empty() {
            k.size_label = true;
        }
    } else if i > 0 && FINETUNE_WORD.is_match(part) {
        if total_params < 0 && part.eq_ignore_ascii_case("lora") {
            // A redundant "lora" in an adapter's name is its type, not a finetune.
            k.kind = true;
        } else {
            k.finetune = true;
        }
    }
}

/// A size part normalized (`7b1` → `7.1B`, `0_5b` → `0.5B`); marked a finetune and lower-cased
/// when it is far from the model's size (a context length like `128k`).
fn size_part(part: &str, k: &mut Kinds, total_params: i64) -> String {
    let mut p: Vec<char> = part.replace('_', ".").chars().collect();
    let n = p.len();
    if p[n - 1].is_ascii_digit() || is_decimal(p[n - 1]) {
        // bloom-7b1: "7b1" → "7.1b"
        let (a, b) = (p[n - 2], p[n - 1]);
        p.truncate(n - 2);
        p.extend(['.', b, a]);
    }
    let n = p.len();
    if n > 1 && is_decimal(p[n - 2]) && "kmbt".contains(p[n - 1]) {
        p[n - 1] = p[n - 1].to_ascii_uppercase();
    }
    let s: String = p.iter().collect();
    if total_params == 0 {
        return s;
    }
    let last = p[p.len() - 1];
    let head: String = p[..p.len() - 1].iter().collect();
    let Ok(number) = head.parse::<f64>() else {
        return s;
    };
    let scale = match " KMBT".find(last) {
        Some(e) => 1000f64.powi(e as i32),
        None => 0.001,
    };
    let label = number * scale;
    let total = total_params as f64;
    // An adapter need not hold every layer: only a label under an eighth of its size is far.
    let far = if total_params < 0 {
        label < (total_params.unsigned_abs() / 8) as f64
    } else {
        (label - total).abs() > (7 * total_params / 8) as f64
    };
    if far {
        k.finetune = true;
        let mut low: String = p[..p.len() - 1].iter().collect();
        low.extend(last.to_lowercase());
        return low;
    }
    s
}

/// Word sizes (`small`, `xl`) are dropped when a numeric size is present.
fn drop_word_sizes(parts: &[String], kinds: &mut [Kinds]) {
    let numeric = parts
        .iter()
        .zip(kinds.iter())
        .any(|(p, k)| k.size_label && p.chars().any(is_decimal));
    if numeric {
        for (p, k) in parts.iter().zip(kinds.iter_mut()) {
            if k.size_label && p.chars().all(char::is_alphabetic) {
                k.size_label = false;
            }
        }
    }
}

/// Leading alphabetic or version parts are the basename; unannotated parts after it are the
/// finetune; a trailing version is not part of the basename.
fn mark_basename(parts: &[String], kinds: &mut [Kinds]) {
    let mut at_start = true;
    for (p, k) in parts.iter().zip(kinds.iter_mut()) {
        let alpha_start = p.chars().next().is_some_and(char::is_alphabetic);
        if at_start && ((k.is_empty() && alpha_start) || k.version) {
            k.basename = true;
        } else {
            at_start = false;
            if k.is_empty() {
                k.finetune = true;
            }
        }
    }
    for k in kinds.iter_mut().rev() {
        if k.basename && k.count() > 1 {
            k.basename = false;
        } else {
            break;
        }
    }
}
