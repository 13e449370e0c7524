//! Where the tensors of an unpickled checkpoint are: the children of a container, the dicts of
//! tensors a user can pick with `--key`, and every tensor or numpy array that a selection does
//! not convert (so a conversion never drops part of a checkpoint silently).
//!
//! Every walk is iterative and visits each container once, so its cost is linear in the arena
//! whatever the nesting or sharing; key texts in paths are shortened so a crafted key cannot
//! make the report large.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::torch::TensorDesc;
use crate::value::{Arena, Id, Node};

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

/// Longest key text kept in a reported path segment.
const MAX_SEG: usize = 120;
/// Most tensors/arrays listed one by one; the rest are counted.
pub(crate) const MAX_LISTED: usize = 20_000;

/// One child of a dict, list or tuple.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Child {
    /// The dict key node (`None` for a list/tuple item).
    pub key: Option<Id>,
    /// The item index (list/tuple).
    pub index: usize,
    /// The value.
    pub value: Id,
}

impl Child {
    /// The key as a path segment: a str key as is, an int key or an item index in decimal;
    /// `None` for keys of other types.
    pub(crate) fn label(&self, arena: &Arena) -> Option<String> {
        match self.key.map(|k| arena.get(k)) {
            None => Some(self.index.to_string()),
            Some(Node::Str(s)) => Some(s.clone()),
            Some(Node::Int(i)) => Some(i.to_string()),
            Some(_) => None,
        }
    }
    /// The key as a short, printable path segment.
    pub(crate) fn segment(&self, arena: &Arena) -> String {
        match self.key.map(|k| arena.get(k)) {
            Some(Node::Str(s)) => segment(Some(s)),
            Some(Node::Int(i)) => i.to_string(),
            None => self.index.to_string(),
            Some(_) => segment(None),
        }
    }
    /// True when the key is `seg`: a str key equal to it, an int key or item index equal to
    /// its decimal value.
    pub(crate) fn is(&self, arena: &Arena, seg: &str) -> bool {
        match self.key.map(|k| arena.get(k)) {
            None => seg.parse() == Ok(self.index),
            Some(Node::Str(s)) => s == seg,
            Some(Node::Int(i)) => seg.parse() == Ok(*i),
            Some(_) => false,
        }
    }
}

/// The first tensor weightport cannot convert (quantized, sparse, ...) anywhere under `id`,
/// as `(dotted path below id, kind, rebuild function)`: a dynamically quantized module keeps
/// its weights in a tuple (`_packed_params._packed_params`), not as a direct child. Each
/// container is visited once.
pub(crate) fn first_unconvertible(arena: &Arena, id: Id) -> Option<(String, &'static str, String)> {
    let mut seen = HashSet::from([id]);
    let mut queue = VecDeque::from([(id, String::new())]);
    while let Some((at, path)) = queue.pop_front() {
        for c in children(arena, at).unwrap_or_default() {
            let here = join(&path, &c.segment(arena));
            match arena.get(c.value) {
                Node::Unconvertible { kind, rebuild } => {
                    return Some((here, kind, rebuild.clone()))
                }
                _ if seen.insert(c.value) => queue.push_back((c.value, here)),
                _ => {}
            }
        }
    }
    None
}

/// The children of a dict (Python semantics for repeated keys), list or tuple.
pub(crate) fn children(arena: &Arena, id: Id) -> Option<Vec<Child>> {
    if let Some(items) = dict_items(arena, id) {
        return Some(
            items
                .into_iter()
                .map(|(k, v)| Child {
                    key: Some(k),
                    index: 0,
                    value: v,
                })
                .collect(),
        );
    }
    match arena.get(id) {
        Node::List(v) | Node::Tuple(v) => Some(
            v.iter()
                .enumerate()
                .map(|(index, &value)| Child {
                    key: None,
                    index,
                    value,
                })
                .collect(),
        ),
        _ => None,
    }
}

/// Bytes of a tensor's view (numel × itemsize), saturating.
pub(crate) fn tensor_bytes(t: &TensorDesc) -> u64 {
    t.shape
        .iter()
        .fold(1u64, |a, &d| a.saturating_mul(d))
        .saturating_mul(u64::from(t.dtype.itemsize))
}

/// A path segment made safe and short.
pub(crate) fn segment(label: Option<&str>) -> String {
    let s = label.unwrap_or("<non-str key>");
    match s.char_indices().nth(MAX_SEG) {
        Some((cut, _)) => format!("{}…", weightport_core::sanitize(&s[..cut])),
        None => weightport_core::sanitize(s),
    }
}

fn join(path: &str, seg: &str) -> String {
    if path.is_empty() {
        seg.to_string()
    } else {
        format!("{path}.{seg}")
    }
}

/// The direct tensor children of a dict: count and bytes.
pub(crate) fn direct_tensors(arena: &Arena, id: Id) -> (usize, u64) {
    let mut n = (0, 0u64);
    for c in children(arena, id).unwrap_or_default() {
        match arena.get(c.value) {
            Node::Tensor(t) => {
                n.0 += 1;
                n.1 = n.1.saturating_add(tensor_bytes(t));
            }
            // Counted so its dict is selected and the tensor refused by name.
            Node::Unconvertible { .. } => n.0 += 1,
            _ => {}
        }
    }
    n
}

fn describe(node: &Node) -> Option<String> {
    match node {
        Node::Tensor(t) => Some(format!(
            "{} tensor {:?} ({} bytes)",
            t.dtype.name,
            t.shape,
            tensor_bytes(t)
        )),
        Node::Unconvertible { kind, .. } => Some(format!("{kind} (not convertible)")),
        Node::NpArray {
            descr, shape, raw, ..
        } => Some(format!(
            "numpy array '{descr}' {shape:?} ({} bytes)",
            raw.len()
        )),
        _ => None,
    }
}

/// Every tensor and numpy array reachable from `root` except the direct tensor children of
/// `target` (the converted dict): `(dotted path, what it is)`, depth-first in key order. A
/// container shared under several paths is reported under the first. Past [`MAX_LISTED`]
/// entries the rest are counted in one last entry. Paths are built only for what is listed
/// (each step keeps its parent and key), so memory stays linear in the arena.
pub(crate) fn census(arena: &Arena, root: Id, target: Id) -> Vec<(String, String)> {
    let converted: HashMap<Id, Child> = children(arena, target)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| matches!(arena.get(c.value), Node::Tensor(_)))
        .map(|c| (c.value, c))
        .collect();
    let mut steps: Vec<(usize, Child)> = Vec::new();
    let mut out = Vec::new();
    let mut more = 0u64;
    let mut seen = HashSet::from([root]);
    let mut stack = vec![(usize::MAX, root)];
    while let Some((step, id)) = stack.pop() {
        if let Some(what) = describe(arena.get(id)) {
            if out.len() >= MAX_LISTED {
                more += 1;
                continue;
            }
            let what = match converted.get(&id) {
                Some(c) => format!(
                    "{what}, the same tensor as converted `{}`",
                    c.segment(arena)
                ),
                None => what,
            };
            out.push((path_of(arena, &steps, step), what));
            continue;
        }
        for c in children(arena, id).unwrap_or_default().into_iter().rev() {
            let node = arena.get(c.value);
            let leaf = describe(node).is_some();
            if (id == target && matches!(node, Node::Tensor(_))) || !(leaf || seen.insert(c.value))
            {
                continue;
            }
            steps.push((step, c));
            stack.push((steps.len() - 1, c.value));
        }
    }
    if more > 0 {
        out.push((
            "…".into(),
            format!("{more} more tensors/arrays not converted and not listed"),
        ));
    }
    out
}

/// The dotted path of `step` (its last 64 segments).
fn path_of(arena: &Arena, steps: &[(usize, Child)], mut step: usize) -> String {
    let mut segs = Vec::new();
    while step != usize::MAX && segs.len() < 64 {
        let (parent, c) = steps[step];
        segs.push(c.segment(arena));
        step = parent;
    }
    if step != usize::MAX {
        segs.push("…".into());
    }
    segs.reverse();
    segs.join(".")
}

/// A dict of tensors a user can pick: its `--key`, direct tensor count and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// The `--key` value (`.` for the top level).
    pub key: String,
    /// Tensors directly in it.
    pub tensors: usize,
    /// Their bytes.
    pub bytes: u64,
}

impl std::fmt::Display for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{} {}` ({} tensors, {} bytes)",
            weightport_core::Knob::Key,
            self.key,
            self.tensors,
            self.bytes
        )
    }
}

/// Dicts holding tensors, breadth-first from `root` (the top level itself first, as `.`),
/// through dicts, lists and tuples; bounded: depth 4, 10,000 containers, 10 candidates.
pub(crate) fn candidates(arena: &Arena, root: Id) -> Vec<Candidate> {
    let mut out = Vec::new();
    let mut seen = HashSet::from([root]);
    let mut queue = VecDeque::from([(String::new(), root, 0u32)]);
    let mut visited = 0;
    while let Some((path, id, depth)) = queue.pop_front() {
        visited += 1;
        if visited > 10_000 || out.len() >= 10 {
            break;
        }
        let (tensors, bytes) = direct_tensors(arena, id);
        if tensors > 0 && dict_items(arena, id).is_some() {
            let key = if path.is_empty() {
                ".".into()
            } else {
                path.clone()
            };
            out.push(Candidate {
                key,
                tensors,
                bytes,
            });
        }
        for c in children(arena, id).unwrap_or_default() {
            let container = matches!(
                arena.get(c.value),
                Node::Dict { .. } | Node::List(_) | Node::Tuple(_)
            );
            if container && depth < 4 && seen.insert(c.value) {
                queue.push_back((join(&path, &c.segment(arena)), c.value, depth + 1));
            }
        }
    }
    out
}
