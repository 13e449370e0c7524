//! What gets converted: the dict of tensors inside an unpickled checkpoint, and everything else
//! described as inert metadata.
//!
//! Rules (issues #7, #14.7, #14.17), without `--key`:
//! * a single `state_dict`-like child holding tensors (`state_dict`, `model_state_dict`,
//!   `model`, `module`) is converted even when the top level holds a few stray tensors
//!   (`rng_state`, `best_acc`), unless the top level holds more tensors than the child;
//! * else the top level, when it is the only dict holding tensors;
//! * else a refusal listing every candidate dict with its tensor count, bytes and `--key`.
//!
//! `--key a.b.0` follows str keys, int keys and list indices (`.` is the top level). A file
//! holding one tensor (`torch.save(t)`) converts it, named after the file. Every tensor or
//! numpy array outside the converted dict is listed in [`Selected::dropped`], so nothing is
//! dropped silently. Dict semantics follow Python: a repeated key overwrites the earlier value
//! but keeps its position. Metadata conversion is bounded by a depth cap and an expansion
//! budget, because memo references shared in the VM are expanded here.

use std::collections::HashMap;

use weightport_core::MetaValue;

use crate::allow::Sym;
use crate::census::{candidates, census, children, direct_tensors, Child};
use crate::torch::TensorDesc;
use crate::value::{Arena, Id, Node};

pub use crate::census::dict_items;
use crate::vm::{VmErrorKind, VmLimits};

/// The child keys that hold a state dict in common checkpoint layouts.
pub const STATE_KEYS: &[&str] = &["state_dict", "model_state_dict", "model", "module"];

/// The outcome of selection.
#[derive(Debug, Default)]
pub struct Selected {
    /// The key path of the converted dict (empty: the top level).
    pub path: Vec<String>,
    /// Tensors, in dict order.
    pub tensors: Vec<(String, TensorDesc)>,
    /// Every other entry (dotted path → inert value).
    pub entries: Vec<(String, MetaValue)>,
    /// Tensors and numpy arrays outside the converted dict (dotted path, what and why).
    pub dropped: Vec<(String, String)>,
}

type R<T> = Result<T, VmErrorKind>;

fn unsupported<T>(msg: impl Into<String>) -> R<T> {
    Err(VmErrorKind::Unsupported(msg.into()))
}

fn has_tensors(arena: &Arena, id: Id) -> bool {
    dict_items(arena, id).is_some_and(|items| {
        items
            .iter()
            .any(|&(_, v)| matches!(arena.get(v), Node::Tensor(_) | Node::Unconvertible { .. }))
    })
}

/// The tensor name for a file that holds a single tensor: the file name without its extension,
/// as a lone `.npy` array is named after its file without `.npy` (`None`: not UTF-8).
pub fn lone_name(path: &std::path::Path) -> Option<String> {
    path.file_stem()
        .and_then(|s| s.to_str())
        .map(str::to_string)
}

/// Picks the dict of tensors and describes the rest: the non-tensor entries as inert metadata,
/// and every tensor or numpy array outside the converted dict in `dropped`. A file holding a
/// single tensor converts it under `lone` (see [`lone_name`]).
pub fn select(
    arena: &Arena,
    root: Id,
    key: Option<&str>,
    lone: Option<&str>,
    limits: &VmLimits,
) -> R<Selected> {
    let key = key.filter(|k| !k.is_empty());
    if let Node::Tensor(t) = arena.get(root) {
        return lone_tensor(t, key, lone);
    }
    if dict_items(arena, root).is_none() {
        return unsupported(format!(
            "the top-level object is a {}, not a dict of tensors",
            arena.get(root).type_name()
        ));
    }
    let walked = match key {
        Some(k) => resolve_key(arena, root, k)?,
        None => default_path(arena, root)?,
    };
    let target = walked.last().map_or(root, |(_, c)| c.value);
    if dict_items(arena, target).is_none() {
        return unsupported(format!(
            "key `{}` is a {}, not a dict of tensors",
            weightport_core::sanitize(key.unwrap_or_default()),
            arena.get(target).type_name()
        ));
    }
    if let (Some(k), false) = (key, has_tensors(arena, target)) {
        return Err(no_tensors_at(arena, target, k));
    }
    let mut out = Selected {
        path: walked
            .iter()
            .map(|(_, c)| c.label(arena).unwrap_or_default())
            .collect(),
        ..Default::default()
    };
    let mut budget = limits.max_expanded;
    if let Some((path, kind, rebuild)) = crate::census::first_unconvertible(arena, target) {
        return unsupported(unconvertible_message(&path, kind, &rebuild));
    }
    collect_target(arena, target, limits, &mut budget, &mut out)?;
    collect_siblings(arena, &walked, limits, &mut budget, &mut out)?;
    out.dropped = census(arena, root, target)
        .into_iter()
        .map(|(p, what)| (p, format!("{what}: not in the converted dict")))
        .collect();
    Ok(out)
}

fn lone_tensor(t: &TensorDesc, key: Option<&str>, lone: Option<&str>) -> R<Selected> {
    if let Some(k) = key.filter(|k| *k != ".") {
        return unsupported(format!(
            "{} `{}`: the file holds a single tensor, not a dict",
            weightport_core::Knob::Key,
            weightport_core::sanitize(k)
        ));
    }
    let Some(name) = lone else {
        return unsupported(
            "the file holds a single tensor, named after the file, but the file name is not UTF-8",
        );
    };
    Ok(Selected {
        tensors: vec![(name.to_string(), t.clone())],
        ..Default::default()
    })
}

/// Follows a dotted `--key` (`.` alone: the top level). At each level the whole remaining
/// string is tried as one key first (names may contain dots); a segment matches a str key, an
/// int key (`optimizer.state.0`) or a list/tuple index.
fn resolve_key(arena: &Arena, root: Id, key: &str) -> R<Vec<(Id, Child)>> {
    let mut walked: Vec<(Id, Child)> = Vec::new();
    let (mut node, mut rest) = (root, if key == "." { "" } else { key });
    while !rest.is_empty() {
        let Some(kids) = children(arena, node) else {
            return unsupported(format!(
                "key `{}`: `{}` is a {}, not a dict or list",
                weightport_core::sanitize(key),
                path_text(arena, &walked),
                arena.get(node).type_name()
            ));
        };
        let (seg, tail) = if kids.iter().any(|c| c.is(arena, rest)) {
            (rest, "")
        } else {
            rest.split_once('.').unwrap_or((rest, ""))
        };
        let Some(c) = kids.iter().find(|c| c.is(arena, seg)) else {
            return Err(not_found(arena, key, &walked, &kids));
        };
        walked.push((node, *c));
        (node, rest) = (c.value, tail);
    }
    Ok(walked)
}

/// A `--key` dict without tensors of its own: the dicts of tensors under it, with their keys.
fn no_tensors_at(arena: &Arena, target: Id, key: &str) -> VmErrorKind {
    let key = weightport_core::sanitize(key);
    let under: Vec<String> = candidates(arena, target)
        .into_iter()
        .map(|mut c| {
            if key != "." {
                c.key = format!("{key}.{}", c.key);
            }
            c.to_string()
        })
        .collect();
    VmErrorKind::Unsupported(if under.is_empty() {
        format!("key `{key}` holds no tensors and no dict of tensors; nothing to convert")
    } else {
        format!(
            "key `{key}` holds no tensors directly; dicts of tensors under it: {}",
            under.join(", ")
        )
    })
}

fn path_text(arena: &Arena, walked: &[(Id, Child)]) -> String {
    let segs: Vec<String> = walked.iter().map(|(_, c)| c.segment(arena)).collect();
    if segs.is_empty() {
        "the top level".into()
    } else {
        segs.join(".")
    }
}

fn not_found(arena: &Arena, key: &str, walked: &[(Id, Child)], kids: &[Child]) -> VmErrorKind {
    let mut shown: Vec<String> = kids.iter().take(20).map(|c| c.segment(arena)).collect();
    if kids.len() > 20 {
        shown.push(format!("and {} more", kids.len() - 20));
    }
    VmErrorKind::Unsupported(format!(
        "key `{}` not found (keys at {}: {})",
        weightport_core::sanitize(key),
        path_text(arena, walked),
        shown.join(", ")
    ))
}

/// The dict converted without `--key`: the single `state_dict`-like child (unless the top level
/// holds more tensors itself), else the top level when it is the only dict of tensors; anything
/// else is refused with the candidates, their sizes and the `--key` for each.
fn default_path(arena: &Arena, root: Id) -> R<Vec<(Id, Child)>> {
    let kids = children(arena, root).unwrap_or_default();
    let named: Vec<Child> = STATE_KEYS
        .iter()
        .filter_map(|k| {
            kids.iter()
                .find(|c| c.key.and_then(|k| arena.str(k)) == Some(*k))
                .filter(|c| has_tensors(arena, c.value))
                .copied()
        })
        .collect();
    let direct = direct_tensors(arena, root).0;
    let cands = candidates(arena, root);
    match named.as_slice() {
        [one] if direct <= direct_tensors(arena, one.value).0 => return Ok(vec![(root, *one)]),
        [] if direct > 0 && cands.len() == 1 => return Ok(Vec::new()),
        _ => {}
    }
    if cands.is_empty() {
        return unsupported(
            "no tensors at the top level or under state_dict/model_state_dict/model/module, \
             and no nested dict of tensors; nothing to convert",
        );
    }
    let why = match (named.len(), direct) {
        (0, 0) => "no tensors at the top level and no state_dict-like child",
        (0, _) => "tensors at the top level and in nested dicts",
        (1, _) => "more tensors at the top level than in the state_dict-like child",
        _ => "several state_dict-like children",
    };
    let list: Vec<String> = cands.iter().map(|c| c.to_string()).collect();
    unsupported(format!(
        "{why}; dicts of tensors found: {}; choose one with {}",
        list.join(", "),
        weightport_core::Knob::Key
    ))
}

/// The target dict's tensors, and its other entries as metadata under the selected path.
fn collect_target(
    arena: &Arena,
    target: Id,
    limits: &VmLimits,
    budget: &mut u64,
    out: &mut Selected,
) -> R<()> {
    let mut sizes = HashMap::new();
    let prefix = if out.path.is_empty() {
        String::new()
    } else {
        format!("{}.", out.path.join("."))
    };
    for (k, v) in dict_items(arena, target).expect("a dict") {
        match (arena.get(k), arena.get(v)) {
            (Node::Str(name), Node::Tensor(t)) => out.tensors.push((name.clone(), (**t).clone())),
            (_, Node::Unconvertible { kind, rebuild }) => {
                return unsupported(unconvertible_message(
                    &key_text(arena, k, limits, budget)?,
                    kind,
                    rebuild,
                ))
            }
            (_, Node::Tensor(_)) => {
                return unsupported(format!(
                    "a tensor is stored under the non-string key {}",
                    to_meta(arena, k, limits.max_depth, budget)?.to_text()
                ))
            }
            _ => {
                charge(
                    arena,
                    v,
                    &mut sizes,
                    &mut budget.clone(),
                    limits.max_expanded,
                )?;
                let name = key_text(arena, k, limits, budget)?;
                let val = to_meta(arena, v, limits.max_depth, budget)?;
                out.entries.push((format!("{prefix}{name}"), val));
            }
        }
    }
    Ok(())
}

/// Siblings along the selected path (epoch, optimizer, hyper_parameters, …) as metadata.
fn collect_siblings(
    arena: &Arena,
    walked: &[(Id, Child)],
    limits: &VmLimits,
    budget: &mut u64,
    out: &mut Selected,
) -> R<()> {
    let mut sizes = HashMap::new();
    for (depth, (node, chosen)) in walked.iter().enumerate() {
        let pre = out.path[..depth].join(".");
        for c in children(arena, *node).expect("walked") {
            if c.key == chosen.key && c.index == chosen.index {
                continue;
            }
            charge(
                arena,
                c.value,
                &mut sizes,
                &mut budget.clone(),
                limits.max_expanded,
            )?;
            let name = match c.key {
                Some(k) => key_text(arena, k, limits, budget)?,
                None => c.index.to_string(),
            };
            let val = to_meta(arena, c.value, limits.max_depth, budget)?;
            let full = if pre.is_empty() {
                name
            } else {
                format!("{pre}.{name}")
            };
            out.entries.push((full, val));
        }
    }
    Ok(())
}

/// Why a tensor of `kind` is refused, and what to do instead.
fn unconvertible_message(name: &str, kind: &str, rebuild: &str) -> String {
    let what = match kind {
        "quantized tensor" => {
            "safetensors and GGUF hold plain arrays, not torch's quantized tensors (integer values \
             with a scale and zero point); dequantize in Python (`t.dequantize()`) and save that"
        }
        "sparse tensor" => {
            "safetensors holds dense arrays only; save `t.to_dense()`, or its indices and values \
             as separate tensors"
        }
        _ => "the file holds no values for it that weightport can convert",
    };
    format!(
        "tensor `{}` is a {kind} (`{rebuild}`): {what}",
        weightport_core::sanitize(name)
    )
}

/// How many values converting `id` to metadata would produce (memo references counted at
/// every use), saturating; computed over the shared DAG in linear time without building
/// anything, so a "billion laughs" is refused in microseconds. A cycle counts as unbounded.
pub fn expanded_size(arena: &Arena, id: Id, memo: &mut HashMap<Id, u64>) -> u64 {
    const UNSEEN: u64 = 0;
    const ACTIVE: u64 = u64::MAX - 1;
    let children = |i: Id| -> Vec<Id> {
        match arena.get(i) {
            Node::Tuple(v) | Node::List(v) | Node::Set(v) => v.clone(),
            Node::Dict { items, .. } => items.iter().flat_map(|&(k, v)| [k, v]).collect(),
            _ => Vec::new(),
        }
    };
    let mut stack: Vec<(Id, Vec<Id>, usize, u64)> = Vec::new();
    match memo.get(&id).copied().unwrap_or(UNSEEN) {
        UNSEEN => {}
        ACTIVE => return u64::MAX,
        n => return n,
    }
    memo.insert(id, ACTIVE);
    stack.push((id, children(id), 0, 1));
    loop {
        let top = stack.last_mut().expect("non-empty");
        if top.2 < top.1.len() {
            let c = top.1[top.2];
            top.2 += 1;
            match memo.get(&c).copied().unwrap_or(UNSEEN) {
                UNSEEN => {
                    memo.insert(c, ACTIVE);
                    let ch = children(c);
                    stack.push((c, ch, 0, 1));
                }
                ACTIVE => top.3 = u64::MAX,
                n => top.3 = top.3.saturating_add(n),
            }
            continue;
        }
        let (done, _, _, total) = stack.pop().expect("non-empty");
        memo.insert(done, total.clamp(1, ACTIVE - 1));
        match stack.last_mut() {
            Some(parent) => parent.3 = parent.3.saturating_add(total),
            None => return total,
        }
    }
}

fn charge(
    arena: &Arena,
    id: Id,
    memo: &mut HashMap<Id, u64>,
    budget: &mut u64,
    limit: u64,
) -> R<()> {
    let n = expanded_size(arena, id, memo);
    if n > *budget {
        return Err(VmErrorKind::Limit {
            what: "expanded metadata values (memo references expand here)",
            needed: (limit - *budget).saturating_add(n),
            limit,
        });
    }
    *budget -= n;
    Ok(())
}

fn key_text(arena: &Arena, k: Id, limits: &VmLimits, budget: &mut u64) -> R<String> {
    Ok(match arena.get(k) {
        Node::Str(s) => s.clone(),
        _ => to_meta(arena, k, limits.max_depth, budget)?.to_text(),
    })
}

/// Converts a value to inert metadata. Recursion is bounded by `depth` (the VM's nesting cap),
/// and the number of values produced by `budget`.
pub fn to_meta(arena: &Arena, id: Id, depth: u32, budget: &mut u64) -> R<MetaValue> {
    spend(depth, budget)?;
    let list = |v: &[Id], budget: &mut u64| -> R<Vec<MetaValue>> {
        v.iter()
            .map(|&i| to_meta(arena, i, depth - 1, budget))
            .collect()
    };
    Ok(match arena.get(id) {
        Node::Tuple(v) | Node::List(v) => MetaValue::Array(list(v, budget)?),
        Node::Set(v) => MetaValue::Object {
            class: "set".into(),
            state: Box::new(MetaValue::Array(list(v, budget)?)),
        },
        Node::Dict { .. } => dict_meta(arena, id, depth, budget)?,
        leaf => leaf_meta(leaf),
    })
}

/// One value of [`to_meta`]'s budget, refused past the nesting depth or the expansion cap.
fn spend(depth: u32, budget: &mut u64) -> R<()> {
    if depth == 0 {
        return Err(VmErrorKind::Limit {
            what: "metadata nesting depth",
            needed: 257,
            limit: 256,
        });
    }
    if *budget == 0 {
        return Err(VmErrorKind::Limit {
            what: "expanded metadata values (memo references expand here)",
            needed: VmLimits::default().max_expanded + 1,
            limit: VmLimits::default().max_expanded,
        });
    }
    *budget -= 1;
    Ok(())
}

/// A dict as metadata: a map when every key is a str, else a list of key/value pairs.
fn dict_meta(arena: &Arena, id: Id, depth: u32, budget: &mut u64) -> R<MetaValue> {
    let items = dict_items(arena, id).expect("dict");
    if items.iter().all(|(k, _)| arena.str(*k).is_some()) {
        let mut m = Vec::with_capacity(items.len());
        for (k, v) in items {
            m.push((
                arena.str(k).expect("str").to_string(),
                to_meta(arena, v, depth - 1, budget)?,
            ));
        }
        Ok(MetaValue::Map(m))
    } else {
        let mut m = Vec::with_capacity(items.len());
        for (k, v) in items {
            m.push((
                to_meta(arena, k, depth - 1, budget)?,
                to_meta(arena, v, depth - 1, budget)?,
            ));
        }
        Ok(MetaValue::Dict(m))
    }
}

/// A value holding no other value as metadata.
fn leaf_meta(node: &Node) -> MetaValue {
    match node {
        Node::None => MetaValue::Null,
        Node::Bool(b) => MetaValue::Bool(*b),
        Node::Int(i) => MetaValue::I64(*i),
        Node::BigInt(s) => MetaValue::BigInt(s.clone()),
        Node::Float(f) => MetaValue::F64(*f),
        Node::Complex(r, i) => MetaValue::Object {
            class: "complex".into(),
            state: Box::new(MetaValue::Array(vec![
                MetaValue::F64(*r),
                MetaValue::F64(*i),
            ])),
        },
        Node::Str(s) => MetaValue::Str(s.clone()),
        Node::Bytes(b) => MetaValue::Bytes(b.clone()),
        Node::Global(Sym::DType(d)) => MetaValue::Str(format!("torch.{}", d.name)),
        Node::Global(s) => MetaValue::Object {
            class: s.qualname(),
            state: Box::new(MetaValue::Null),
        },
        Node::Unknown(s) => MetaValue::Object {
            class: s.clone(),
            state: Box::new(MetaValue::Null),
        },
        Node::Unconvertible { kind, rebuild } => MetaValue::Object {
            class: rebuild.clone(),
            state: Box::new(MetaValue::Str((*kind).into())),
        },
        Node::Storage(s) => MetaValue::Object {
            class: "torch.storage".into(),
            state: Box::new(MetaValue::Str(s.key.clone())),
        },
        Node::Tensor(t) => MetaValue::Object {
            class: "torch.Tensor".into(),
            state: Box::new(MetaValue::Map(vec![
                ("dtype".into(), MetaValue::Str(t.dtype.name.into())),
                (
                    "shape".into(),
                    MetaValue::Array(t.shape.iter().map(|&d| MetaValue::U64(d)).collect()),
                ),
            ])),
        },
        Node::Device(d) => MetaValue::Object {
            class: "torch.device".into(),
            state: Box::new(MetaValue::Str(d.clone())),
        },
        Node::NpDtype { descr, order } => MetaValue::Object {
            class: "numpy.dtype".into(),
            state: Box::new(MetaValue::Str(format!("{order}{descr}"))),
        },
        Node::NpScalar { descr, order, raw } => np_scalar(descr, *order, raw),
        Node::NpArray {
            shape,
            descr,
            order,
            fortran,
            raw,
        } => MetaValue::Object {
            class: "numpy.ndarray".into(),
            state: Box::new(MetaValue::Map(vec![
                ("dtype".into(), MetaValue::Str(format!("{order}{descr}"))),
                (
                    "shape".into(),
                    MetaValue::Array(shape.iter().map(|&d| MetaValue::U64(d)).collect()),
                ),
                ("fortran_order".into(), MetaValue::Bool(*fortran)),
                ("data".into(), MetaValue::Bytes(raw.clone())),
            ])),
        },
        Node::Tuple(_) | Node::List(_) | Node::Set(_) | Node::Dict { .. } => {
            unreachable!("containers are converted by to_meta")
        }
    }
}

fn np_scalar(descr: &str, order: char, raw: &[u8]) -> MetaValue {
    let mut b = raw.to_vec();
    if order == '>' {
        b.reverse();
    }
    let arr = |n: usize| -> [u8; 8] {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(&b[..n]);
        a
    };
    let v = match descr {
        "f8" => MetaValue::F64(f64::from_le_bytes(arr(8))),
        "f4" => MetaValue::F32(f32::from_le_bytes(arr(4)[..4].try_into().expect("4"))),
        "b1" => MetaValue::Bool(b[0] != 0),
        "i1" => MetaValue::I8(b[0] as i8),
        "u1" => MetaValue::U8(b[0]),
        "i2" => MetaValue::I16(i16::from_le_bytes([b[0], b[1]])),
        "u2" => MetaValue::U16(u16::from_le_bytes([b[0], b[1]])),
        "i4" => MetaValue::I32(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        "u4" => MetaValue::U32(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        "i8" => MetaValue::I64(i64::from_le_bytes(arr(8))),
        "u8" => MetaValue::U64(u64::from_le_bytes(arr(8))),
        _ => MetaValue::Bytes(raw.to_vec()),
    };
    MetaValue::Object {
        class: format!("numpy.{descr}"),
        state: Box::new(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::{PidStyle, Vm};

    #[test]
    fn expanded_size_counts_shared_values_without_expanding() {
        // 64 levels of (x, x): 2^65 - 1 values if expanded.
        let mut p = b"\x80\x02X\x03\x00\x00\x00lolq\x000".to_vec();
        for k in 0..64u8 {
            p.extend_from_slice(&[b'h', k, b'h', k, 0x86, b'q', k + 1]);
            if k < 63 {
                p.push(b'0');
            }
        }
        p.push(b'.');
        let r = Vm::new(&p, VmLimits::default(), PidStyle::Zip, false)
            .run(false)
            .unwrap();
        let t = std::time::Instant::now();
        assert_eq!(
            expanded_size(&r.arena, r.root, &mut HashMap::new()),
            u64::MAX
        );
        assert!(t.elapsed().as_millis() < 100);
        // A list that contains itself is unbounded too.
        let r = Vm::new(
            b"\x80\x02]q\x00h\x00a.",
            VmLimits::default(),
            PidStyle::Zip,
            false,
        )
        .run(false)
        .unwrap();
        assert_eq!(
            expanded_size(&r.arena, r.root, &mut HashMap::new()),
            u64::MAX
        );
    }
}
