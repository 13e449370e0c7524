//! The torch layer of the interpreter: what the allowlisted symbols mean. The generic VM
//! (`vm.rs`: input, opcodes, stack, marks, memo, limits) resolves globals and hands every
//! `REDUCE`, `BUILD` and persistent id to the methods here, which know torch's rebuild
//! functions, storages, parameters and their hooks, the plain containers and numpy's array
//! reconstruction (docs/specs/pickle.md §1.3, §2.3). They build inert nodes; nothing is called.

use super::*;

impl<'a> Vm<'a> {
    // ---- persistent ids ----------------------------------------------------------------

    pub(super) fn persistent_load(&mut self, pid: Id) -> R<()> {
        let lenient = self.lenient();
        if self.pid == PidStyle::Forbidden {
            return refused(
                self.at,
                "persistent id in a pickle that may only hold constants",
            );
        }
        let items = match self.arena.get(pid) {
            Node::Tuple(t) => t.clone(),
            Node::Unknown(_) if lenient => return self.push(Node::Unknown("pid".into())),
            other => {
                let t = other.type_name();
                return refused(
                    self.at,
                    format!("persistent id is a {t}, not a ('storage', ...) tuple"),
                );
            }
        };
        let tag = items.first().and_then(|&i| self.arena.str(i));
        if tag == Some("module") {
            return refused(
                self.at,
                "persistent id ('module', class, source file, source): the file pickles nn.Module \
                 classes; save `model.state_dict()` instead",
            );
        }
        let want = if self.pid == PidStyle::Zip { 5 } else { 6 };
        if tag != Some("storage") || items.len() != want {
            return refused(
                self.at,
                format!(
                    "persistent id is not ('storage', class, key, location, numel{}) ",
                    if want == 6 { ", view" } else { "" }
                ),
            );
        }
        let kind = match self.arena.get(items[1]) {
            Node::Global(Sym::Storage(k)) => *k,
            Node::Unknown(_) if lenient => return self.push(Node::Unknown("pid".into())),
            other => {
                let t = other.type_name();
                return refused(
                    self.at,
                    format!("storage class is {t}, not a torch storage class"),
                );
            }
        };
        let key = self.storage_key(items[2])?;
        let location = match self.arena.str(items[3]) {
            Some(l) => l.to_string(),
            None => return refused(self.at, "storage location is not a string"),
        };
        let numel = match self.arena.get(items[4]) {
            Node::Int(n) if *n >= 0 => *n as u64,
            _ => {
                return refused(
                    self.at,
                    format!("storage `{key}` numel is not a non-negative int"),
                )
            }
        };
        let view = if want == 6 {
            self.legacy_view(items[5], &key, numel)?
        } else {
            None
        };
        let s = StorageRef {
            key: key.clone(),
            kind,
            location,
            numel,
            view,
        };
        self.register_storage(&s)?;
        self.push(Node::Storage(Box::new(s)))
    }

    /// A storage key: decimal digits (at most 40).
    fn storage_key(&self, id: Id) -> R<String> {
        match self.arena.str(id) {
            Some(k) if !k.is_empty() && k.len() <= 40 && k.bytes().all(|b| b.is_ascii_digit()) => {
                Ok(k.to_string())
            }
            Some(k) => refused(
                self.at,
                format!(
                    "storage key `{}` is not decimal digits",
                    weightport_core::sanitize(k)
                ),
            ),
            None => refused(self.at, "storage key is not a string"),
        }
    }

    /// A legacy persistent id's view of its root storage: `None`, or `(offset, numel)` within
    /// the storage's `numel` elements.
    fn legacy_view(&self, id: Id, key: &str, numel: u64) -> R<Option<(u64, u64)>> {
        let mut view = None;
        match self.arena.get(id) {
            Node::None => {}
            Node::Tuple(v) if v.len() == 3 => {
                let (off, n) = (self.arena.int(v[1]), self.arena.int(v[2]));
                match (off, n) {
                    (Some(o), Some(n))
                        if o >= 0
                            && n >= 0
                            && (o as u64).checked_add(n as u64).is_some_and(|e| e <= numel) =>
                    {
                        view = Some((o as u64, n as u64))
                    }
                    _ => return refused(self.at, format!("storage `{key}` view is out of range")),
                }
            }
            _ => {
                return refused(
                    self.at,
                    format!("storage `{key}` view metadata is malformed"),
                )
            }
        }
        Ok(view)
    }

    /// Records a storage the first time its key is seen; a key seen again must have the same
    /// storage type and size.
    fn register_storage(&mut self, s: &StorageRef) -> R<()> {
        let key = &s.key;
        match self.storage_index.get(key) {
            Some(&i) => {
                let prev = &self.storages[i];
                if prev.kind != s.kind {
                    return refused(
                        self.at,
                        format!("storage `{key}` is used with two different storage types (dtype aliasing)"),
                    );
                }
                if prev.numel != s.numel {
                    return refused(
                        self.at,
                        format!(
                            "storage `{key}` is declared with two sizes ({} and {})",
                            prev.numel, s.numel
                        ),
                    );
                }
            }
            None => {
                self.storage_index.insert(key.clone(), self.storages.len());
                self.storages.push(s.clone());
            }
        }
        Ok(())
    }

    /// `dict()`, `dict(d)`, `list(x)`, `tuple(x)`: an empty or copied container.
    fn builtin_call(&mut self, sym: Sym, t: &str, args: &[Id]) -> R<Applied> {
        let a = &self.arena;
        let items = match args {
            [] => Vec::new(),
            [x] => match a.get(*x) {
                Node::List(v) | Node::Tuple(v) if t != "dict" => v.clone(),
                Node::Dict { items, .. } if t == "dict" => {
                    items.iter().flat_map(|&(k, v)| [k, v]).collect()
                }
                _ => return self.schema_err(sym, "argument is not a container of that kind"),
            },
            _ => return self.schema_err(sym, "more than one argument"),
        };
        let node = match t {
            "dict" => Node::Dict {
                kind: DictKind::Plain,
                items: items.chunks(2).map(|c| (c[0], c[1])).collect(),
                attrs: None,
            },
            "list" => Node::List(items.clone()),
            "tuple" => Node::Tuple(items.clone()),
            _ => return self.schema_err(sym, "only a defaultdict factory, never called"),
        };
        Ok(Applied::Node(node, items))
    }

    fn schema_err<T>(&self, sym: Sym, what: &str) -> R<T> {
        refused(
            self.at,
            format!(
                "call of `{}` does not match its schema: {what}",
                sym.qualname()
            ),
        )
    }

    pub(super) fn apply(&mut self, sym: Sym, args: &[Id]) -> R<Applied> {
        match sym {
            Sym::RebuildTensorV2
            | Sym::RebuildTensorV3
            | Sym::RebuildTensor
            | Sym::RebuildParameter
            | Sym::RebuildParameterWithState
            | Sym::RebuildFromTypeV2
            | Sym::UnsupportedTensor(_)
            | Sym::GetLayout => self.apply_torch(sym, args),
            Sym::OrderedDict
            | Sym::Counter
            | Sym::DefaultDict
            | Sym::BuiltinType(_)
            | Sym::Set
            | Sym::FrozenSet => self.apply_container(sym, args),
            Sym::Storage(_)
            | Sym::DType(_)
            | Sym::QScheme(_)
            | Sym::TensorType
            | Sym::ParameterType
            | Sym::Size
            | Sym::Device
            | Sym::CodecsEncode
            | Sym::ByteArray
            | Sym::Bytes
            | Sym::Complex => self.apply_value(sym, args),
            Sym::NpDtype | Sym::NpNdarray | Sym::NpReconstruct | Sym::NpScalar => {
                self.apply_numpy(sym, args)
            }
        }
    }

    /// torch's rebuild functions: tensors, parameters, subclass forwarding, layouts.
    fn apply_torch(&mut self, sym: Sym, args: &[Id]) -> R<Applied> {
        let a = &self.arena;
        match sym {
            Sym::RebuildTensorV2 | Sym::RebuildTensorV3 | Sym::RebuildTensor => {
                let desc = self.tensor(sym, args)?;
                Ok(Applied::Node(Node::Tensor(Box::new(desc)), vec![]))
            }
            Sym::RebuildParameter | Sym::RebuildParameterWithState => {
                self.rebuild_parameter(sym, args)
            }
            Sym::RebuildFromTypeV2 => self.rebuild_from_type(sym, args),
            // Kept as an inert record: scan reads on past it, and selection refuses it by name
            // when it is among the tensors to convert.
            Sym::UnsupportedTensor(kind) => Ok(Applied::Node(
                Node::Unconvertible {
                    kind,
                    rebuild: sym.qualname(),
                },
                vec![],
            )),
            Sym::GetLayout => match args {
                [x] => match a.get(*x) {
                    Node::Str(l) => Ok(Applied::Node(Node::Str(l.clone()), vec![])),
                    _ => self.schema_err(sym, "the layout is not a str"),
                },
                _ => self.schema_err(sym, "expected one argument"),
            },
            _ => self.schema_err(sym, "not a symbol of this group"),
        }
    }

    /// `torch._utils._rebuild_parameter[_with_state]`: the tensor of argument 0, marked a
    /// parameter with its `requires_grad`; hooks refused, the state checked and dropped.
    fn rebuild_parameter(&mut self, sym: Sym, args: &[Id]) -> R<Applied> {
        let a = &self.arena;
        let n = if sym == Sym::RebuildParameter { 3 } else { 4 };
        if args.len() != n {
            return self.schema_err(sym, &format!("{} arguments, expected {n}", args.len()));
        }
        let mut desc = match a.get(args[0]) {
            Node::Tensor(t) => (**t).clone(),
            _ => return self.schema_err(sym, "argument 0 is not a tensor"),
        };
        let Node::Bool(rg) = a.get(args[1]) else {
            return self.schema_err(sym, "requires_grad is not a bool");
        };
        self.check_hooks(sym, args[2])?;
        if n == 4 {
            let ok = match a.get(args[3]) {
                Node::Dict { .. } | Node::None => true,
                Node::Tuple(t) => {
                    t.len() == 2
                        && t.iter()
                            .all(|&x| matches!(a.get(x), Node::Dict { .. } | Node::None))
                }
                _ => false,
            };
            if !ok {
                return self.schema_err(sym, "state is not a dict or (dict, dict)");
            }
        }
        desc.requires_grad = *rg;
        desc.parameter = true;
        Ok(Applied::Node(Node::Tensor(Box::new(desc)), vec![]))
    }

    /// `torch._tensor._rebuild_from_type_v2`: forwards to a tensor rebuild function only; the
    /// subclass's Python attributes are inert and dropped.
    fn rebuild_from_type(&mut self, sym: Sym, args: &[Id]) -> R<Applied> {
        let a = &self.arena;
        if args.len() != 4 {
            return self.schema_err(sym, "expected (func, type, args, state)");
        }
        let func = match a.get(args[0]) {
            Node::Global(
                f @ (Sym::RebuildTensorV2
                | Sym::RebuildTensorV3
                | Sym::RebuildTensor
                | Sym::RebuildParameter
                | Sym::RebuildParameterWithState),
            ) => *f,
            other => {
                let t = other.type_name();
                return refused(
                    self.at,
                    format!(
                        "`torch._tensor._rebuild_from_type_v2` forwarding to {t} refused: \
                         only tensor rebuild functions may be forwarded"
                    ),
                );
            }
        };
        if !matches!(
            a.get(args[1]),
            Node::Global(Sym::TensorType | Sym::ParameterType)
        ) {
            return self.schema_err(sym, "type is not torch.Tensor or Parameter");
        }
        let inner = match a.get(args[2]) {
            Node::Tuple(t) => t.clone(),
            _ => return self.schema_err(sym, "args is not a tuple"),
        };
        match a.get(args[3]) {
            Node::Dict { items, .. } if items.is_empty() => {}
            Node::None => {}
            Node::Dict { .. } => {
                // Python attributes on a tensor subclass: inert, dropped.
            }
            _ => return self.schema_err(sym, "state is not a dict"),
        }
        self.apply(func, &inner)
    }

    /// Plain containers: ordered dicts, counters, default dicts, `dict`/`list`/`tuple`, sets.
    fn apply_container(&mut self, sym: Sym, args: &[Id]) -> R<Applied> {
        let a = &self.arena;
        match sym {
            Sym::OrderedDict | Sym::Counter => {
                let kind = if sym == Sym::OrderedDict {
                    DictKind::Ordered
                } else {
                    DictKind::Counter
                };
                let mut items = Vec::new();
                match args {
                    [] => {}
                    [x] => match a.get(*x) {
                        Node::List(v) | Node::Tuple(v) if sym == Sym::OrderedDict => {
                            for &p in v {
                                match a.get(p) {
                                    Node::Tuple(kv) | Node::List(kv) if kv.len() == 2 => {
                                        items.push((kv[0], kv[1]))
                                    }
                                    _ => {
                                        return self
                                            .schema_err(sym, "item is not a (key, value) pair")
                                    }
                                }
                            }
                        }
                        Node::Dict { items: d, .. } => items.extend(d.iter().copied()),
                        _ => {
                            return self
                                .schema_err(sym, "argument is not a list of pairs or a dict")
                        }
                    },
                    _ => return self.schema_err(sym, "more than one argument"),
                }
                self.check_keys(&items)?;
                let children: Vec<Id> = items.iter().flat_map(|&(k, v)| [k, v]).collect();
                Ok(Applied::Node(
                    Node::Dict {
                        kind,
                        items,
                        attrs: None,
                    },
                    children,
                ))
            }
            Sym::DefaultDict => match args {
                [] => Ok(Applied::Node(empty_dict(), vec![])),
                [f] if matches!(a.get(*f), Node::None | Node::Global(Sym::BuiltinType(_))) => {
                    Ok(Applied::Node(empty_dict(), vec![]))
                }
                _ => self.schema_err(sym, "the factory is not None or a builtin type"),
            },
            Sym::BuiltinType(t) => self.builtin_call(sym, t, args),
            Sym::Set | Sym::FrozenSet => match args {
                [] => Ok(Applied::Node(Node::Set(vec![]), vec![])),
                [x] => match a.get(*x) {
                    Node::List(v) | Node::Tuple(v) | Node::Set(v) => {
                        let v = v.clone();
                        Ok(Applied::Node(Node::Set(v.clone()), v))
                    }
                    _ => self.schema_err(sym, "expected a list"),
                },
                _ => self.schema_err(sym, "expected one list"),
            },
            _ => self.schema_err(sym, "not a symbol of this group"),
        }
    }

    /// Sizes, devices, bytes and complex numbers, and torch constants that may not be called.
    fn apply_value(&mut self, sym: Sym, args: &[Id]) -> R<Applied> {
        let a = &self.arena;
        match sym {
            Sym::Storage(_)
            | Sym::DType(_)
            | Sym::QScheme(_)
            | Sym::TensorType
            | Sym::ParameterType => {
                refused(self.at, format!("`{}` may not be called", sym.qualname()))
            }
            Sym::Size => {
                let inner = match args {
                    [x] => *x,
                    _ => return self.schema_err(sym, "expected one tuple"),
                };
                match a.get(inner) {
                    Node::Tuple(v) if v.iter().all(|&i| a.int(i).is_some_and(|n| n >= 0)) => {
                        Ok(Applied::Same(inner))
                    }
                    _ => self.schema_err(sym, "expected a tuple of non-negative ints"),
                }
            }
            Sym::Device => match args {
                [t] | [t, _] => {
                    let Some(s) = a.str(*t) else {
                        return self.schema_err(sym, "device type is not a str");
                    };
                    let mut tag = s.to_string();
                    if let [_, i] = args {
                        match a.get(*i) {
                            Node::Int(n) => tag = format!("{tag}:{n}"),
                            Node::None => {}
                            _ => return self.schema_err(sym, "device index is not an int"),
                        }
                    }
                    Ok(Applied::Node(Node::Device(tag), vec![]))
                }
                _ => self.schema_err(sym, "expected (str,) or (str, int)"),
            },
            Sym::CodecsEncode | Sym::ByteArray | Sym::Bytes => self.apply_bytes(sym, args),
            Sym::Complex => self.apply_complex(sym, args),
            _ => self.schema_err(sym, "not a symbol of this group"),
        }
    }

    /// numpy's dtypes, array reconstruction and scalars.
    fn apply_numpy(&mut self, sym: Sym, args: &[Id]) -> R<Applied> {
        let a = &self.arena;
        match sym {
            Sym::NpDtype => self.np_dtype(sym, args),
            Sym::NpNdarray => refused(self.at, "`numpy.ndarray` may not be called"),
            Sym::NpReconstruct => match args {
                [cls, shape, _]
                    if matches!(a.get(*cls), Node::Global(Sym::NpNdarray))
                        && matches!(a.get(*shape), Node::Tuple(_)) =>
                {
                    Ok(Applied::Node(
                        Node::NpArray {
                            shape: vec![0],
                            descr: String::new(),
                            order: '|',
                            fortran: false,
                            raw: Vec::new(),
                        },
                        vec![],
                    ))
                }
                _ => self.schema_err(sym, "expected (numpy.ndarray, (0,), b'b')"),
            },
            Sym::NpScalar => self.np_scalar(sym, args),
            _ => self.schema_err(sym, "not a symbol of this group"),
        }
    }

    /// `codecs.encode(str, 'latin1')`, `bytearray(…)` and `bytes()`.
    fn apply_bytes(&self, sym: Sym, args: &[Id]) -> R<Applied> {
        let a = &self.arena;
        match args {
            [] if sym != Sym::CodecsEncode => Ok(Applied::Node(Node::Bytes(vec![]), vec![])),
            [b] if sym == Sym::ByteArray && matches!(a.get(*b), Node::Bytes(_)) => {
                Ok(Applied::Same(*b))
            }
            [s, enc] if sym != Sym::Bytes => {
                let (Some(s), Some(enc)) = (a.str(*s), a.str(*enc)) else {
                    return self.schema_err(sym, "expected (str, 'latin1')");
                };
                if enc != "latin1" && enc != "latin-1" {
                    return self.schema_err(sym, "only the latin1 encoding is accepted");
                }
                match latin1(s) {
                    Some(out) => Ok(Applied::Node(Node::Bytes(out), vec![])),
                    None => self.schema_err(sym, "character outside latin-1"),
                }
            }
            _ => self.schema_err(sym, "unexpected arguments"),
        }
    }

    /// `builtins.complex(re[, im])`.
    fn apply_complex(&self, sym: Sym, args: &[Id]) -> R<Applied> {
        let a = &self.arena;
        let num = |i: &Id| match a.get(*i) {
            Node::Float(f) => Some(*f),
            Node::Int(n) => Some(*n as f64),
            _ => None,
        };
        match args {
            [re] | [re, _] => {
                let im = if args.len() == 2 {
                    num(&args[1])
                } else {
                    Some(0.0)
                };
                match (num(re), im) {
                    (Some(r), Some(i)) => Ok(Applied::Node(Node::Complex(r, i), vec![])),
                    _ => self.schema_err(sym, "expected (float, float)"),
                }
            }
            _ => self.schema_err(sym, "expected (float, float)"),
        }
    }

    /// `numpy.dtype(descr, align, copy)`: numeric dtypes only.
    fn np_dtype(&self, sym: Sym, args: &[Id]) -> R<Applied> {
        let a = &self.arena;
        match args {
            [d, _, _] => {
                let Some(d) = a.str(*d) else {
                    return self.schema_err(sym, "descr is not a str");
                };
                let (order, body) = match d.chars().next() {
                    Some(c @ ('<' | '>' | '|' | '=')) => (c, &d[1..]),
                    _ => ('=', d),
                };
                if !np_numeric(body) {
                    return refused(
                    self.at,
                    format!(
                        "numpy dtype `{}` refused: only numeric dtypes are tensors (string arrays are not, and object arrays hold pickles)",
                        weightport_core::sanitize(d)
                    ),
                );
                }
                Ok(Applied::Node(
                    Node::NpDtype {
                        descr: body.to_string(),
                        order,
                    },
                    vec![],
                ))
            }
            _ => self.schema_err(sym, "expected (str, bool, bool)"),
        }
    }

    /// `numpy.core.multiarray.scalar(dtype, payload)`: the payload's size must match the dtype.
    fn np_scalar(&self, sym: Sym, args: &[Id]) -> R<Applied> {
        let a = &self.arena;
        match args {
            [d, b] => {
                let (descr, order) = match a.get(*d) {
                    Node::NpDtype { descr, order } => (descr.clone(), *order),
                    _ => return self.schema_err(sym, "argument 0 is not a numpy dtype"),
                };
                let raw = match a.get(*b) {
                    Node::Bytes(b) => b.clone(),
                    // py2-era latin-1 str payload.
                    Node::Str(s) => match latin1(s) {
                        Some(out) => out,
                        None => return self.schema_err(sym, "payload not bytes"),
                    },
                    _ => return self.schema_err(sym, "argument 1 is not bytes"),
                };
                let size: usize = descr[1..].parse().unwrap_or(0);
                if size != raw.len() {
                    return self.schema_err(sym, "payload size does not match the dtype");
                }
                Ok(Applied::Node(Node::NpScalar { descr, order, raw }, vec![]))
            }
            _ => self.schema_err(sym, "expected (dtype, bytes)"),
        }
    }

    fn check_hooks(&self, sym: Sym, h: Id) -> R<()> {
        match self.arena.get(h) {
            Node::Dict { items, .. } if items.is_empty() => Ok(()),
            Node::None => Ok(()),
            _ => self.schema_err(sym, "backward_hooks is not an empty OrderedDict"),
        }
    }

    fn tensor(&mut self, sym: Sym, args: &[Id]) -> R<TensorDesc> {
        let a = &self.arena;
        let ok_len = match sym {
            Sym::RebuildTensorV2 => args.len() == 6 || args.len() == 7,
            Sym::RebuildTensorV3 => args.len() == 7 || args.len() == 8,
            _ => args.len() == 4,
        };
        if !ok_len {
            return self.schema_err(sym, &format!("{} arguments", args.len()));
        }
        let storage = match a.get(args[0]) {
            Node::Storage(s) => (**s).clone(),
            other => {
                let t = other.type_name();
                return self.schema_err(sym, &format!("argument 0 is a {t}, not a storage"));
            }
        };
        let key = storage.key.clone();
        let offset = match a.get(args[1]) {
            Node::Int(n) if *n >= 0 => *n as u64,
            Node::Int(n) => return refused(self.at, format!("negative storage offset {n}")),
            _ => return self.schema_err(sym, "storage_offset is not an int"),
        };
        let ints = |id: Id, what: &str| -> R<Vec<u64>> {
            let v = match a.get(id) {
                Node::Tuple(v) | Node::List(v) => v,
                _ => return self.schema_err(sym, &format!("{what} is not a tuple")),
            };
            if v.len() > self.limits.max_rank {
                return limit(
                    self.at,
                    "tensor rank",
                    v.len() as u64,
                    self.limits.max_rank as u64,
                );
            }
            v.iter()
                .map(|&i| match a.get(i) {
                    Node::Int(n) if *n >= 0 => Ok(*n as u64),
                    Node::Int(n) => refused(self.at, format!("negative {what} {n}")),
                    Node::BigInt(_) => refused(self.at, format!("{what} does not fit 64 bits")),
                    _ => self.schema_err(sym, &format!("{what} holds a non-int")),
                })
                .collect()
        };
        let shape = ints(args[2], "size")?;
        let stride = ints(args[3], "stride")?;
        if shape.len() != stride.len() {
            return self.schema_err(sym, "size and stride differ in length");
        }
        let (dtype, requires_grad, conj, neg) = self.view_flags(sym, args, &storage)?;
        self.one_dtype_per_key(&key, dtype)?;
        let base = self.view_base(&storage, dtype, offset, &shape, &stride)?;
        Ok(TensorDesc {
            storage,
            dtype,
            offset: base,
            shape,
            stride,
            conj,
            neg,
            parameter: false,
            requires_grad,
        })
    }

    /// The dtype (a v3 rebuild may name one, which must be the typed storage's), `requires_grad`,
    /// the backward hooks (none allowed) and the `conj`/`neg` flags of a rebuild's metadata.
    fn view_flags(
        &self,
        sym: Sym,
        args: &[Id],
        storage: &StorageRef,
    ) -> R<(TorchDType, bool, bool, bool)> {
        let a = &self.arena;
        let key = &storage.key;
        let mut requires_grad = false;
        let mut meta = None;
        let mut dtype = match storage.kind {
            StorageKind::Typed(d) => d,
            StorageKind::Untyped => crate::torch::dtype_by_name("uint8").expect("uint8"),
        };
        if sym != Sym::RebuildTensor {
            match a.get(args[4]) {
                Node::Bool(b) => requires_grad = *b,
                _ => return self.schema_err(sym, "requires_grad is not a bool"),
            }
            self.check_hooks(sym, args[5])?;
            if sym == Sym::RebuildTensorV3 {
                match a.get(args[6]) {
                    Node::Global(Sym::DType(d)) => {
                        if let StorageKind::Typed(sd) = storage.kind {
                            if sd != *d {
                                return refused(
                                    self.at,
                                    format!(
                                        "storage `{key}` of {} read as {}: dtype aliasing",
                                        sd.name, d.name
                                    ),
                                );
                            }
                        }
                        dtype = *d;
                    }
                    _ => return self.schema_err(sym, "dtype is not a torch dtype"),
                }
                meta = args.get(7).copied();
            } else {
                meta = args.get(6).copied();
            }
        }
        let (mut conj, mut neg) = (false, false);
        if let Some(m) = meta {
            match a.get(m) {
                Node::None => {}
                Node::Dict { items, .. } => {
                    for &(k, v) in items {
                        let b = match a.get(v) {
                            Node::Bool(b) => *b,
                            _ => return self.schema_err(sym, "metadata value is not a bool"),
                        };
                        match a.str(k) {
                            Some("conj") => conj = b,
                            Some("neg") => neg = b,
                            _ => return self.schema_err(sym, "metadata key is not conj or neg"),
                        }
                    }
                }
                _ => return self.schema_err(sym, "metadata is not a dict"),
            }
        }
        Ok((dtype, requires_grad, conj, neg))
    }

    /// One key, one dtype: a storage viewed as two dtypes is refused.
    fn one_dtype_per_key(&mut self, key: &str, dtype: TorchDType) -> R<()> {
        // One key, one dtype (docs/specs/pickle.md §1.3): torch refuses to save anything else.
        if let Some(prev) = self.key_dtype.get(key) {
            if *prev != dtype {
                return refused(
                    self.at,
                    format!(
                        "storage `{key}` is viewed as {} and as {}: dtype aliasing",
                        prev.name, dtype.name
                    ),
                );
            }
        } else {
            self.key_dtype.insert(key.to_string(), dtype);
        }
        Ok(())
    }

    /// The view's first element in its storage (a legacy storage view's start plus `offset`),
    /// after checking that every element the view reaches lies within the storage.
    fn view_base(
        &self,
        storage: &StorageRef,
        dtype: TorchDType,
        offset: u64,
        shape: &[u64],
        stride: &[u64],
    ) -> R<u64> {
        let key = &storage.key;
        let item = u64::from(dtype.itemsize);
        // Elements the (view of the) storage holds.
        let (base, elems) = match (storage.kind, storage.view) {
            (_, Some((o, n))) => (o, n),
            (StorageKind::Typed(_), None) => (0, storage.numel),
            (StorageKind::Untyped, None) => {
                if !storage.numel.is_multiple_of(item) {
                    return refused(
                        self.at,
                        format!(
                            "untyped storage `{key}` of {} bytes is not a whole number of {} elements",
                            storage.numel, dtype.name
                        ),
                    );
                }
                (0, storage.numel / item)
            }
        };
        let numel = shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|n| n.checked_mul(item).is_some());
        let Some(numel) = numel else {
            return refused(
                self.at,
                format!("tensor shape {shape:?} overflows 64-bit byte counts"),
            );
        };
        if numel == 0 {
            if offset > elems {
                return refused(
                    self.at,
                    format!("storage offset {offset} is past the end of storage `{key}` ({elems} elements)"),
                );
            }
        } else {
            let mut last = Some(offset);
            for (&n, &s) in shape.iter().zip(stride) {
                last = last.and_then(|l| (n - 1).checked_mul(s).and_then(|x| l.checked_add(x)));
            }
            match last {
                Some(l) if l < elems => {}
                Some(l) => {
                    return refused(
                        self.at,
                        format!(
                            "tensor view (offset {offset}, size {shape:?}, stride {stride:?}) reaches element {l} of storage `{key}`, which holds {elems}"
                        ),
                    )
                }
                None => {
                    return refused(
                        self.at,
                        format!("tensor view extent overflows (size {shape:?}, stride {stride:?})"),
                    )
                }
            }
        }
        Ok(base + offset)
    }

    pub(super) fn build(&mut self, target: Id, state: Id) -> R<()> {
        let lenient = self.lenient();
        let state_ok_dict = |a: &Arena, s: Id| match a.get(s) {
            Node::Dict { .. } | Node::None => true,
            Node::Tuple(t) => {
                t.len() == 2
                    && t.iter()
                        .all(|&x| matches!(a.get(x), Node::Dict { .. } | Node::None))
            }
            _ => false,
        };
        match self.arena.get(target) {
            Node::Dict {
                kind: DictKind::Ordered | DictKind::Counter,
                ..
            } => {
                if !state_ok_dict(&self.arena, state) {
                    return refused(
                        self.at,
                        "BUILD on an OrderedDict with a state that is not a dict",
                    );
                }
                self.grow(target, &[state])?;
                if let Node::Dict { attrs, .. } = self.arena.get_mut(target) {
                    *attrs = Some(state);
                }
                Ok(())
            }
            Node::NpDtype { .. } => self.build_np_dtype(target, state),
            Node::NpArray { .. } => self.build_np_array(target, state),
            Node::Unknown(_) if lenient => Ok(()),
            other => {
                let t = other.type_name();
                let msg = format!("BUILD on a {t} refused: it would set state (attributes) on an object that is not an OrderedDict");
                self.refuse(msg)
            }
        }
    }

    /// `BUILD` of a numpy dtype: its byte order, from a plain numeric dtype's state.
    fn build_np_dtype(&mut self, target: Id, state: Id) -> R<()> {
        let order = match self.arena.get(state) {
            Node::Tuple(t) if t.len() >= 3 => {
                let o = self.arena.str(t[1]).and_then(|s| s.chars().next());
                let plain = t[2..t.len().min(5)]
                    .iter()
                    .all(|&x| matches!(self.arena.get(x), Node::None));
                match o {
                    Some(c @ ('<' | '>' | '|' | '=')) if plain => c,
                    _ => return refused(self.at, "numpy dtype state is not a plain numeric dtype"),
                }
            }
            _ => return refused(self.at, "numpy dtype state is not a tuple"),
        };
        if let Node::NpDtype { order: o, .. } = self.arena.get_mut(target) {
            *o = order;
        }
        Ok(())
    }

    /// `BUILD` of a numpy array: `(version, shape, dtype, fortran, data)` whose data is exactly
    /// the shape's bytes of that dtype.
    fn build_np_array(&mut self, target: Id, state: Id) -> R<()> {
        let a = &self.arena;
        let st = match a.get(state) {
            Node::Tuple(t) if t.len() == 5 => t.clone(),
            _ => {
                return refused(
                    self.at,
                    "numpy array state is not (version, shape, dtype, fortran, data)",
                )
            }
        };
        let shape: Option<Vec<u64>> = match a.get(st[1]) {
            Node::Tuple(v) if v.len() <= self.limits.max_rank => v
                .iter()
                .map(|&i| a.int(i).and_then(|n| u64::try_from(n).ok()))
                .collect(),
            _ => None,
        };
        let Some(shape) = shape else {
            return refused(
                self.at,
                "numpy array shape is not a tuple of non-negative ints",
            );
        };
        let (descr, order) = match a.get(st[2]) {
            Node::NpDtype { descr, order } => (descr.clone(), *order),
            _ => return refused(self.at, "numpy array dtype is not a numeric numpy dtype"),
        };
        let fortran = matches!(a.get(st[3]), Node::Bool(true));
        let raw = match a.get(st[4]) {
            Node::Bytes(b) => b.clone(),
            Node::Str(s) => match s
                .chars()
                .map(|c| u8::try_from(u32::from(c)))
                .collect::<Result<Vec<u8>, _>>()
            {
                Ok(b) => b,
                Err(_) => return refused(self.at, "numpy array data is not latin-1 bytes"),
            },
            _ => {
                return refused(
                    self.at,
                    "numpy array data is not bytes (object arrays hold pickles)",
                )
            }
        };
        let item: u64 = descr[1..].parse().unwrap_or(0);
        let want = shape.iter().try_fold(item, |acc, &d| acc.checked_mul(d));
        if want != Some(raw.len() as u64) {
            return refused(
                self.at,
                "numpy array data size does not match its shape and dtype",
            );
        }
        if let Node::NpArray {
            shape: s,
            descr: d,
            order: o,
            fortran: f,
            raw: r,
        } = self.arena.get_mut(target)
        {
            if !d.is_empty() {
                return refused(self.at, "numpy array state set twice");
            }
            *s = shape;
            *d = descr;
            *o = order;
            *f = fortran;
            *r = raw;
        }
        Ok(())
    }
}

fn empty_dict() -> Node {
    Node::Dict {
        kind: DictKind::Plain,
        items: Vec::new(),
        attrs: None,
    }
}

pub(super) enum Applied {
    Node(Node, Vec<Id>),
    Same(Id),
}

/// The bytes of a str whose characters are all latin-1 (`codecs.encode(s, 'latin1')`).
fn latin1(s: &str) -> Option<Vec<u8>> {
    s.chars().map(|c| u8::try_from(u32::from(c)).ok()).collect()
}

fn np_numeric(body: &str) -> bool {
    let mut c = body.chars();
    let kind = c.next();
    let size: Option<usize> = c.as_str().parse().ok();
    matches!(kind, Some('b' | 'i' | 'u' | 'f' | 'c')) && matches!(size, Some(1 | 2 | 4 | 8 | 16))
}
