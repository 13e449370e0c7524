//! The inert value tree the VM builds.
//!
//! Values live in an arena ([`Arena`]) and refer to each other by index ([`Id`]), so a memo
//! reference (`BINGET`) shares a value instead of copying it: a "billion laughs" pickle costs one
//! node per opcode, never an exponential expansion. The arena is flat, so dropping a
//! million-deep nesting is a plain `Vec` drop, not a recursive one.
//!
//! Nothing here can run code: a node is data, a [`Sym`] is a name from the allowlist, and a
//! call to an allowed symbol has already been turned into a description ([`TensorDesc`],
//! [`Node::Device`], …) by the VM.

use crate::allow::Sym;
use crate::torch::{StorageRef, TensorDesc};

/// Index of a node in the [`Arena`].
pub(crate) type Id = u32;

/// What kind of mapping a [`Node::Dict`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DictKind {
    /// `dict`.
    Plain,
    /// `collections.OrderedDict`.
    Ordered,
    /// `collections.Counter`.
    Counter,
}

/// One inert value.
#[derive(Debug, Clone)]
pub enum Node {
    /// `None`.
    None,
    /// `True`/`False`.
    Bool(bool),
    /// An int that fits i64.
    Int(i64),
    /// An int outside i64, as a decimal string.
    BigInt(String),
    /// A float.
    Float(f64),
    /// A complex number (`builtins.complex`).
    Complex(f64, f64),
    /// A str.
    Str(String),
    /// bytes / bytearray.
    Bytes(Vec<u8>),
    /// A tuple.
    Tuple(Vec<Id>),
    /// A list.
    List(Vec<Id>),
    /// A dict, in insertion order; `attrs` is the state set by `BUILD` (OrderedDict `_metadata`).
    Dict {
        /// Which mapping class.
        kind: DictKind,
        /// Key/value pairs in order (a later equal key is kept as a separate pair; see
        /// [`crate::select`] for how names are checked for uniqueness).
        items: Vec<(Id, Id)>,
        /// The `BUILD` state, if any.
        attrs: Option<Id>,
    },
    /// A set or frozenset.
    Set(Vec<Id>),
    /// An allowlisted symbol that has not been called.
    Global(Sym),
    /// A symbol outside the allowlist (only in scan mode, which keeps going to list them all).
    Unknown(String),
    /// A tensor of a kind torch's `weights_only` loads but weightport does not convert
    /// (quantized, sparse, meta, nested, ...): an inert record, refused by name when selected.
    Unconvertible {
        /// What kind of tensor.
        kind: &'static str,
        /// The rebuild function that built it.
        rebuild: String,
    },
    /// A storage persistent id.
    Storage(Box<StorageRef>),
    /// A tensor description.
    Tensor(Box<TensorDesc>),
    /// `torch.device(...)`, kept as its string tag.
    Device(String),
    /// A numpy dtype (`numpy.dtype(descr, False, True)` + `BUILD`): its type string and byte order.
    NpDtype {
        /// `f8`, `i4`, `b1`, …
        descr: String,
        /// `<`, `>`, `|` or `=`.
        order: char,
    },
    /// A numpy array (numeric dtypes only): shape, dtype and raw bytes as stored.
    NpArray {
        /// Shape.
        shape: Vec<u64>,
        /// dtype descr (`f8`, …); empty until `BUILD` sets the state.
        descr: String,
        /// Byte order.
        order: char,
        /// Fortran order.
        fortran: bool,
        /// Raw bytes.
        raw: Vec<u8>,
    },
    /// A numpy scalar: its dtype and raw bytes.
    NpScalar {
        /// The dtype descr (`f8`, …) with its byte order.
        descr: String,
        /// Byte order.
        order: char,
        /// The raw bytes.
        raw: Vec<u8>,
    },
}

impl Node {
    /// A short name of the node's Python type, for messages.
    pub fn type_name(&self) -> String {
        match self {
            Node::None => "None".into(),
            Node::Bool(_) => "bool".into(),
            Node::Int(_) | Node::BigInt(_) => "int".into(),
            Node::Float(_) => "float".into(),
            Node::Complex(..) => "complex".into(),
            Node::Str(_) => "str".into(),
            Node::Bytes(_) => "bytes".into(),
            Node::Tuple(_) => "tuple".into(),
            Node::List(_) => "list".into(),
            Node::Dict { kind, .. } => match kind {
                DictKind::Plain => "dict".into(),
                DictKind::Ordered => "collections.OrderedDict".into(),
                DictKind::Counter => "collections.Counter".into(),
            },
            Node::Set(_) => "set".into(),
            Node::Global(s) => format!("global {}", s.qualname()),
            Node::Unknown(s) if s.contains(' ') => format!("foreign object ({s})"),
            Node::Unknown(s) => format!("global {s}"),
            Node::Unconvertible { kind, .. } => format!("torch.Tensor ({kind})"),
            Node::Storage(_) => "storage".into(),
            Node::Tensor(_) => "torch.Tensor".into(),
            Node::Device(_) => "torch.device".into(),
            Node::NpDtype { .. } => "numpy.dtype".into(),
            Node::NpScalar { .. } => "numpy scalar".into(),
            Node::NpArray { .. } => "numpy.ndarray".into(),
        }
    }
}

/// The node arena, with each node's nesting depth (1 for a leaf).
#[derive(Debug, Default)]
pub struct Arena {
    nodes: Vec<Node>,
    depth: Vec<u32>,
}

impl Arena {
    /// Adds a node; `depth` is its nesting depth.
    pub fn push(&mut self, node: Node, depth: u32) -> Id {
        self.nodes.push(node);
        self.depth.push(depth);
        (self.nodes.len() - 1) as Id
    }
    /// The node `id`.
    pub fn get(&self, id: Id) -> &Node {
        &self.nodes[id as usize]
    }
    /// The node `id`, mutably.
    pub fn get_mut(&mut self, id: Id) -> &mut Node {
        &mut self.nodes[id as usize]
    }
    /// Nesting depth of `id`.
    pub fn depth(&self, id: Id) -> u32 {
        self.depth[id as usize]
    }
    /// Raises the recorded depth of `id` to at least `d`.
    pub fn raise_depth(&mut self, id: Id, d: u32) {
        let slot = &mut self.depth[id as usize];
        *slot = (*slot).max(d);
    }
    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
    /// True when no node was made.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
    /// The str behind `id`, if it is one.
    pub fn str(&self, id: Id) -> Option<&str> {
        match self.get(id) {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }
    /// The int behind `id`, if it is one.
    pub fn int(&self, id: Id) -> Option<i64> {
        match self.get(id) {
            Node::Int(i) => Some(*i),
            _ => None,
        }
    }
}
