//! What gets converted: the dict of tensors inside an unpickled checkpoint, and everything else
//! described as inert metadata.
//!
//! Rules (issue #7): a top-level dict of tensors; else the single child dict of tensors under
//! `state_dict`, `model_state_dict`, `model` or `module`; or the dict named by a dotted key
//! (`ReadOptions::key`). Dict semantics follow Python: a repeated key overwrites the earlier
//! value but keeps its position. Metadata conversion is bounded by a depth cap and an expansion
//! budget, because memo references shared in the VM are expanded here.

use std::collections::HashMap;

use weightport_core::MetaValue;

use crate::allow::Sym;
use crate::torch::TensorDesc;
use crate::value::{Arena, Id, Node};
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
}

type R<T> = Result<T, VmErrorKind>;

fn unsupported<T>(msg: impl Into<String>) -> R<T> {
    Err(VmErrorKind::Unsupported(msg.into()))
}

/// Dict items with Python semantics for repeated str/int keys.
pub fn dict_items(arena: &Arena, id: Id) -> Option<Vec<(Id, Id)>> {
    let Node::Dict { items, .. } = arena.get(id) else {
        return None;
    };
    let mut out: Vec<(Id, Id)> = Vec::with_capacity(items.len());
    let mut seen: HashMap<String, usize> = HashMap::new();
    for &(k, v) in items {
        let repr = match arena.get(k) {
            Node::Str(s) => Some(format!("s{s}")),
            Node::Int(i) => Some(format!("i{i}")),
            _ => None,
        };
        match repr.map(|r| match seen.get(&r) {
            Some(&i) => Ok(i),
            None => Err(r),
        }) {
            Some(Ok(i)) => out[i].1 = v,
            Some(Err(r)) => {
                seen.insert(r, out.len());
                out.push((k, v));
            }
            None => out.push((k, v)),
        }
    }
    Some(out)
}

fn str_key(arena: &Arena, items: &[(Id, Id)], key: &str) -> Option<Id> {
    items
        .iter()
        .find(|(k, _)| arena.str(*k) == Some(key))
        .map(|&(_, v)| v)
}

fn has_tensors(arena: &Arena, id: Id) -> bool {
    dict_items(arena, id).is_some_and(|items| {
        items
            .iter()
            .any(|&(_, v)| matches!(arena.get(v), Node::Tensor(_) | Node::Unconvertible { .. }))
    })
}

/// Picks the dict of tensors and describes the rest.
pub fn select(arena: &Arena, root: Id, key: Option<&str>, limits: &VmLimits) -> R<Selected> {
    let Some(root_items) = dict_items(arena, root) else {
        return match arena.get(root) {
            Node::Tensor(_) => unsupported(
                "the file holds a single tensor, not a dict of tensors; save `{\"name\": tensor}` instead",
            ),
            other => unsupported(format!(
                "the top-level object is a {}, not a dict of tensors",
                other.type_name()
            )),
        };
    };
    let mut budget = limits.max_expanded;
    let mut sizes = HashMap::new();
    let mut path: Vec<String> = Vec::new();
    let mut target = root;
    if let Some(key) = key.filter(|k| !k.is_empty()) {
        let mut rest = key;
        while !rest.is_empty() {
            let items = dict_items(arena, target).ok_or_else(|| {
                VmErrorKind::Unsupported(format!("key `{key}`: `{}` is not a dict", path.join(".")))
            })?;
            // Prefer the whole remaining string as one key (names may contain dots).
            let (seg, tail) = match str_key(arena, &items, rest) {
                Some(_) => (rest, ""),
                None => match rest.split_once('.') {
                    Some((a, b)) => (a, b),
                    None => (rest, ""),
                },
            };
            match str_key(arena, &items, seg) {
                Some(v) => {
                    target = v;
                    path.push(seg.to_string());
                    rest = tail;
                }
                None => {
                    let avail: Vec<String> = items
                        .iter()
                        .filter_map(|(k, _)| arena.str(*k).map(weightport_core::sanitize))
                        .take(20)
                        .collect();
                    return unsupported(format!(
                        "key `{}` not found (keys there: {})",
                        weightport_core::sanitize(key),
                        avail.join(", ")
                    ));
                }
            }
        }
        if dict_items(arena, target).is_none() {
            return unsupported(format!(
                "key `{}` is a {}, not a dict of tensors",
                weightport_core::sanitize(key),
                arena.get(target).type_name()
            ));
        }
    } else if !has_tensors(arena, root) {
        let named: Vec<&str> = STATE_KEYS
            .iter()
            .copied()
            .filter(|k| str_key(arena, &root_items, k).is_some_and(|v| has_tensors(arena, v)))
            .collect();
        match named.as_slice() {
            [one] => {
                target = str_key(arena, &root_items, one).expect("present");
                path.push(one.to_string());
            }
            [] => {
                let cands = find_tensor_dicts(arena, root);
                if cands.is_empty() {
                    return unsupported(
                        "no tensors at the top level or under state_dict/model_state_dict/model/module, \
                         and no nested dict of tensors; nothing to convert",
                    );
                }
                return unsupported(format!(
                    "no tensors at the top level; dicts of tensors found under: {}; choose one with --key",
                    cands.join(", ")
                ));
            }
            many => {
                return unsupported(format!(
                    "several dicts of tensors ({}); choose one with --key",
                    many.join(", ")
                ))
            }
        }
    }
    let mut out = Selected {
        path: path.clone(),
        ..Default::default()
    };
    let prefix = if path.is_empty() {
        String::new()
    } else {
        format!("{}.", path.join("."))
    };
    for (k, v) in dict_items(arena, target).expect("a dict") {
        match (arena.get(k), arena.get(v)) {
            (Node::Str(name), Node::Tensor(t)) => out.tensors.push((name.clone(), (**t).clone())),
            (_, Node::Unconvertible { kind, rebuild }) => {
                return unsupported(unconvertible_message(
                    &key_text(arena, k, limits, &mut budget)?,
                    kind,
                    rebuild,
                ))
            }
            (_, Node::Tensor(_)) => {
                return unsupported(format!(
                    "a tensor is stored under the non-string key {}",
                    to_meta(arena, k, limits.max_depth, &mut budget)?.to_text()
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
                let name = key_text(arena, k, limits, &mut budget)?;
                let val = to_meta(arena, v, limits.max_depth, &mut budget)?;
                out.entries.push((format!("{prefix}{name}"), val));
            }
        }
    }
    // Siblings along the selected path (epoch, optimizer, hyper_parameters, …).
    let mut node = root;
    for (depth, seg) in path.iter().enumerate() {
        let items = dict_items(arena, node).expect("walked");
        let pre = path[..depth].join(".");
        for &(k, v) in &items {
            if arena.str(k) == Some(seg.as_str()) {
                continue;
            }
            charge(
                arena,
                v,
                &mut sizes,
                &mut budget.clone(),
                limits.max_expanded,
            )?;
            let name = key_text(arena, k, limits, &mut budget)?;
            let val = to_meta(arena, v, limits.max_depth, &mut budget)?;
            let full = if pre.is_empty() {
                name
            } else {
                format!("{pre}.{name}")
            };
            out.entries.push((full, val));
        }
        node = str_key(arena, &items, seg).expect("walked");
    }
    Ok(out)
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

/// Dotted paths of nested dicts that hold tensors (breadth-first, bounded: depth 4, 10,000
/// dicts visited, 10 paths reported), for the error that asks for `--key`.
fn find_tensor_dicts(arena: &Arena, root: Id) -> Vec<String> {
    let mut out = Vec::new();
    let mut queue = std::collections::VecDeque::from([(String::new(), root, 0u32)]);
    let mut visited = 0;
    while let Some((path, id, depth)) = queue.pop_front() {
        visited += 1;
        if visited > 10_000 || out.len() >= 10 {
            break;
        }
        let Some(items) = dict_items(arena, id) else {
            continue;
        };
        for (k, v) in items {
            let Some(name) = arena.str(k) else {
                continue;
            };
            let p = if path.is_empty() {
                name.to_string()
            } else {
                format!("{path}.{name}")
            };
            if has_tensors(arena, v) {
                out.push(weightport_core::sanitize(&p));
            } else if depth < 4 && matches!(arena.get(v), Node::Dict { .. }) {
                queue.push_back((p, v, depth + 1));
            }
        }
    }
    out
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
    let list = |v: &[Id], budget: &mut u64| -> R<Vec<MetaValue>> {
        v.iter()
            .map(|&i| to_meta(arena, i, depth - 1, budget))
            .collect()
    };
    Ok(match arena.get(id) {
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
        Node::Tuple(v) | Node::List(v) => MetaValue::Array(list(v, budget)?),
        Node::Set(v) => MetaValue::Object {
            class: "set".into(),
            state: Box::new(MetaValue::Array(list(v, budget)?)),
        },
        Node::Dict { .. } => {
            let items = dict_items(arena, id).expect("dict");
            if items.iter().all(|(k, _)| arena.str(*k).is_some()) {
                let mut m = Vec::with_capacity(items.len());
                for (k, v) in items {
                    m.push((
                        arena.str(k).expect("str").to_string(),
                        to_meta(arena, v, depth - 1, budget)?,
                    ));
                }
                MetaValue::Map(m)
            } else {
                let mut m = Vec::with_capacity(items.len());
                for (k, v) in items {
                    m.push((
                        to_meta(arena, k, depth - 1, budget)?,
                        to_meta(arena, v, depth - 1, budget)?,
                    ));
                }
                MetaValue::Dict(m)
            }
        }
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
    })
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
