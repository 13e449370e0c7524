//! The allowlist: the only `(module, name)` pairs a pickle may name (docs/specs/pickle.md §2.3).
//!
//! Matching is exact, after mapping the Python 2 module name `__builtin__` to `builtins` and
//! nothing else. Dotted names are refused (`STACK_GLOBAL('torch', 'serialization.os.system')`
//! resolves to `os.system` under protocol ≥ 4). Each entry carries the argument schema the VM
//! enforces when the symbol is called and a one-line reason why accepting it cannot execute
//! anything. A symbol is never imported or looked up: it only selects which inert description
//! the VM builds.

use crate::torch::{dtype_by_name, StorageKind, TorchDType, STORAGES};

/// An allowlisted symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sym {
    /// `torch._utils._rebuild_tensor_v2`.
    RebuildTensorV2,
    /// `torch._utils._rebuild_tensor_v3`.
    RebuildTensorV3,
    /// `torch._utils._rebuild_tensor`.
    RebuildTensor,
    /// `torch._utils._rebuild_parameter`.
    RebuildParameter,
    /// `torch._utils._rebuild_parameter_with_state`.
    RebuildParameterWithState,
    /// `torch._tensor._rebuild_from_type_v2`.
    RebuildFromTypeV2,
    /// A torch rebuild function weightport recognises but does not convert.
    UnsupportedTensor(&'static str),
    /// `torch.serialization._get_layout`: a layout name (`torch.sparse_coo`, ...).
    GetLayout,
    /// A quantization scheme constant (`torch.per_tensor_affine`, ...).
    QScheme(&'static str),
    /// `collections.defaultdict`: a dict whose factory is only ever called on a missing key,
    /// never while unpickling.
    DefaultDict,
    /// A builtin type as a constant (`builtins.dict`, `list`, `tuple`, `int`, `float`, `str`,
    /// `bool`): a defaultdict factory, or called to make an empty or copied container.
    BuiltinType(&'static str),
    /// `collections.OrderedDict`.
    OrderedDict,
    /// `collections.Counter`.
    Counter,
    /// A storage class, only valid inside a persistent id.
    Storage(StorageKind),
    /// A dtype constant.
    DType(TorchDType),
    /// `torch.Size`.
    Size,
    /// `torch.device`.
    Device,
    /// `torch.Tensor`, only as `_rebuild_from_type_v2`'s type.
    TensorType,
    /// `torch.nn.parameter.Parameter`, only as `_rebuild_from_type_v2`'s type.
    ParameterType,
    /// `_codecs.encode`.
    CodecsEncode,
    /// `builtins.bytes`.
    Bytes,
    /// `builtins.bytearray`.
    ByteArray,
    /// `builtins.set`.
    Set,
    /// `builtins.frozenset`.
    FrozenSet,
    /// `builtins.complex`.
    Complex,
    /// `numpy.(_)core.multiarray.scalar`.
    NpScalar,
    /// `numpy.dtype`.
    NpDtype,
    /// `numpy.(_)core.multiarray._reconstruct`.
    NpReconstruct,
    /// `numpy.ndarray`, only as `_reconstruct`'s first argument.
    NpNdarray,
}

/// One allowlist entry.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// Module.
    pub module: &'static str,
    /// Name.
    pub name: &'static str,
    /// What it stands for.
    pub sym: Sym,
    /// The accepted shape of a call (or where the symbol may appear).
    pub schema: &'static str,
    /// Why accepting it cannot execute anything.
    pub reason: &'static str,
}

const fn e(
    module: &'static str,
    name: &'static str,
    sym: Sym,
    schema: &'static str,
    reason: &'static str,
) -> Entry {
    Entry {
        module,
        name,
        sym,
        schema,
        reason,
    }
}

const VIEW: &str =
    "pure view descriptor; offset, sizes and strides bounds-checked against the storage";
const UNSUP: &str = "recognised so the error can name the tensor kind; never converted";
const QSCHEME: &str = "an argument of _rebuild_qtensor";
const CONST: &str = "a constant";

/// The fixed entries (storage classes and dtypes are matched by [`lookup`] from their tables).
pub const ENTRIES: &[Entry] = &[
    e("torch._utils", "_rebuild_tensor_v2", Sym::RebuildTensorV2,
      "REDUCE (storage, offset:int, size:tuple, stride:tuple, requires_grad:bool, OrderedDict() [, {conj|neg: bool}])", VIEW),
    e("torch._utils", "_rebuild_tensor_v3", Sym::RebuildTensorV3,
      "REDUCE (storage, offset, size, stride, requires_grad, OrderedDict(), dtype [, metadata])", VIEW),
    e("torch._utils", "_rebuild_tensor", Sym::RebuildTensor,
      "REDUCE (storage, offset, size, stride)", VIEW),
    e("torch._utils", "_rebuild_parameter", Sym::RebuildParameter,
      "REDUCE (tensor, requires_grad:bool, OrderedDict())", "marks a described tensor as a Parameter"),
    e("torch._utils", "_rebuild_parameter_with_state", Sym::RebuildParameterWithState,
      "REDUCE (tensor, bool, OrderedDict(), dict | (dict, dict))", "marks a Parameter; its state is kept as inert data"),
    e("torch._tensor", "_rebuild_from_type_v2", Sym::RebuildFromTypeV2,
      "REDUCE (one of the tensor rebuilders, torch.Tensor | Parameter, args:tuple, state:dict)",
      "restricted: in Python a call forwarder, here only a tensor rebuilder may be forwarded"),
    e("torch._utils", "_rebuild_qtensor", Sym::UnsupportedTensor("quantized tensor"), "REDUCE: kept as an inert record", UNSUP),
    e("torch._utils", "_rebuild_sparse_tensor", Sym::UnsupportedTensor("sparse tensor"), "REDUCE: kept as an inert record", UNSUP),
    e("torch._utils", "_rebuild_meta_tensor_no_storage", Sym::UnsupportedTensor("meta tensor without storage"), "REDUCE: kept as an inert record", UNSUP),
    e("torch._utils", "_rebuild_wrapper_subclass", Sym::UnsupportedTensor("tensor wrapper subclass"), "REDUCE: kept as an inert record", UNSUP),
    e("torch._utils", "_rebuild_device_tensor_from_numpy", Sym::UnsupportedTensor("device tensor from numpy"), "REDUCE: kept as an inert record", UNSUP),
    e("torch._utils", "_rebuild_device_tensor_from_cpu_tensor", Sym::UnsupportedTensor("device tensor from a cpu tensor"), "REDUCE: kept as an inert record", UNSUP),
    e("torch._utils", "_rebuild_nested_tensor", Sym::UnsupportedTensor("nested tensor"), "REDUCE: kept as an inert record", UNSUP),
    e("torch.serialization", "_get_layout", Sym::GetLayout, "REDUCE (str,)",
      "a layout name for a sparse tensor's description"),
    e("torch", "per_tensor_affine", Sym::QScheme("per_tensor_affine"), QSCHEME, CONST),
    e("torch", "per_channel_affine", Sym::QScheme("per_channel_affine"), QSCHEME, CONST),
    e("torch", "per_tensor_symmetric", Sym::QScheme("per_tensor_symmetric"), QSCHEME, CONST),
    e("torch", "per_channel_symmetric", Sym::QScheme("per_channel_symmetric"), QSCHEME, CONST),
    e("torch", "per_channel_affine_float_qparams", Sym::QScheme("per_channel_affine_float_qparams"), QSCHEME, CONST),
    e("collections", "OrderedDict", Sym::OrderedDict,
      "REDUCE () | ([(k, v), ...],); BUILD with a dict state (_metadata)", "an ordered map plus inert attributes"),
    e("collections", "Counter", Sym::Counter, "REDUCE () | ({...},)", "a map"),
    e("collections", "defaultdict", Sym::DefaultDict, "REDUCE () | (None | builtin type,)",
      "a map; its factory is a builtin type constant and is never called while unpickling"),
    e("builtins", "dict", Sym::BuiltinType("dict"), "a defaultdict factory; REDUCE () | ({...} | [(k, v), ...],)", "a map"),
    e("builtins", "list", Sym::BuiltinType("list"), "a defaultdict factory; REDUCE () | ([...] | (...),)", "a list"),
    e("builtins", "tuple", Sym::BuiltinType("tuple"), "a defaultdict factory; REDUCE () | ([...] | (...),)", "a tuple"),
    e("builtins", "int", Sym::BuiltinType("int"), "a defaultdict factory only", CONST),
    e("builtins", "float", Sym::BuiltinType("float"), "a defaultdict factory only", CONST),
    e("builtins", "str", Sym::BuiltinType("str"), "a defaultdict factory only", CONST),
    e("builtins", "bool", Sym::BuiltinType("bool"), "a defaultdict factory only", CONST),
    e("torch", "Size", Sym::Size, "REDUCE ((int >= 0, ...),)", "a tuple of non-negative ints"),
    e("torch", "device", Sym::Device, "REDUCE (str,) | (str, int)", "a string tag"),
    e("torch", "Tensor", Sym::TensorType, "only as _rebuild_from_type_v2's type", "a type tag"),
    e("torch.nn.parameter", "Parameter", Sym::ParameterType, "only as _rebuild_from_type_v2's type", "a type tag"),
    e("_codecs", "encode", Sym::CodecsEncode, "REDUCE (str, 'latin1' | 'latin-1')",
      "bytes: the protocol-2 encoding of bytes"),
    e("builtins", "bytes", Sym::Bytes, "REDUCE ()", "b''"),
    e("builtins", "bytearray", Sym::ByteArray, "REDUCE () | (str, 'latin-1') | (bytes,)", "bytes"),
    e("builtins", "set", Sym::Set, "REDUCE () | ([...],)", "a set"),
    e("builtins", "frozenset", Sym::FrozenSet, "REDUCE () | ([...],)", "a set"),
    e("builtins", "complex", Sym::Complex, "REDUCE (float, float)", "a number"),
    e("numpy.core.multiarray", "scalar", Sym::NpScalar, "REDUCE (numpy.dtype, bytes)",
      "a numeric scalar; object dtypes refused"),
    e("numpy._core.multiarray", "scalar", Sym::NpScalar, "REDUCE (numpy.dtype, bytes)",
      "a numeric scalar; object dtypes refused"),
    e("numpy.core.multiarray", "_reconstruct", Sym::NpReconstruct, "REDUCE (numpy.ndarray, (0,), b'b'); BUILD (1, shape, dtype, fortran, bytes)",
      "an empty array shell filled by BUILD with numeric bytes; object dtypes refused"),
    e("numpy._core.multiarray", "_reconstruct", Sym::NpReconstruct, "REDUCE (numpy.ndarray, (0,), b'b'); BUILD (1, shape, dtype, fortran, bytes)",
      "an empty array shell filled by BUILD with numeric bytes; object dtypes refused"),
    e("numpy", "ndarray", Sym::NpNdarray, "only as _reconstruct's first argument", "a type tag"),
    e("numpy", "dtype", Sym::NpDtype, "REDUCE (str, bool, bool); BUILD (version, byteorder, ...)",
      "a numeric type descriptor; object dtypes refused"),
];

const STORAGE_SCHEMA: &str = "only as element 1 of a storage persistent id";
const STORAGE_REASON: &str = "a dtype tag, never callable";
const DTYPE_SCHEMA: &str = "as a _rebuild_tensor_v3 argument or a metadata value";
const DTYPE_REASON: &str = "a constant";

/// Resolves `module.name` against the allowlist.
pub fn lookup(module: &str, name: &str) -> Option<Entry> {
    let module = if module == "__builtin__" {
        "builtins"
    } else {
        module
    };
    // Python 2 names that pickle's fix_imports maps (NAME_MAPPING) to builtins.
    let name = match (module, name) {
        ("builtins", "long") => "int",
        ("builtins", "unicode") => "str",
        _ => name,
    };
    if name.contains('.') || module.is_empty() || name.is_empty() {
        return None;
    }
    if let Some(e) = ENTRIES
        .iter()
        .find(|e| e.module == module && e.name == name)
    {
        return Some(*e);
    }
    let storage_module = matches!(module, "torch" | "torch.cuda");
    if storage_module {
        if let Some((_, d)) = STORAGES.iter().find(|(n, _)| *n == name) {
            return Some(e(
                "torch",
                "<X>Storage",
                Sym::Storage(StorageKind::Typed(*d)),
                STORAGE_SCHEMA,
                STORAGE_REASON,
            ));
        }
    }
    if (module == "torch" || module == "torch.storage") && name == "UntypedStorage" {
        return Some(e(
            "torch",
            "UntypedStorage",
            Sym::Storage(StorageKind::Untyped),
            STORAGE_SCHEMA,
            STORAGE_REASON,
        ));
    }
    if module == "torch" {
        if let Some(d) = dtype_by_name(name) {
            return Some(e(
                "torch",
                "<dtype>",
                Sym::DType(d),
                DTYPE_SCHEMA,
                DTYPE_REASON,
            ));
        }
    }
    None
}

impl Sym {
    /// A readable name of the symbol (`torch._utils._rebuild_tensor_v2`, `torch.float16`, …).
    pub fn qualname(&self) -> String {
        match self {
            Sym::Storage(StorageKind::Untyped) => "torch.UntypedStorage".into(),
            Sym::Storage(StorageKind::Typed(d)) => format!("torch storage of {}", d.name),
            Sym::DType(d) => format!("torch.{}", d.name),
            other => ENTRIES
                .iter()
                .find(|e| e.sym == *other)
                .map(|e| format!("{}.{}", e.module, e.name))
                .unwrap_or_else(|| format!("{other:?}")),
        }
    }
}

/// True for an allowlisted global that torch's own `weights_only` unpickler (torch 2.15
/// `_get_allowed_globals`) does not accept: numpy's, `collections.defaultdict`, and the
/// builtins other than `set`, `bytearray` and `complex`. Data-only here, but
/// `torch.load(weights_only=True)` refuses a file naming one.
pub fn beyond_weights_only(module: &str, name: &str) -> bool {
    let module = if module == "__builtin__" {
        "builtins"
    } else {
        module
    };
    module == "numpy"
        || module.starts_with("numpy.")
        || (module == "collections" && name == "defaultdict")
        || (module == "builtins" && !matches!(name, "set" | "bytearray" | "complex"))
}

/// The opcodes torch's `weights_only` unpickler accepts (docs/specs/pickle.md §2.1); any other makes
/// it refuse the file.
pub const WEIGHTS_ONLY_OPCODES: &[&str] = &[
    "PROTO",
    "STOP",
    "MARK",
    "GLOBAL",
    "REDUCE",
    "BUILD",
    "NEWOBJ",
    "APPEND",
    "APPENDS",
    "SETITEM",
    "SETITEMS",
    "TUPLE",
    "TUPLE1",
    "TUPLE2",
    "TUPLE3",
    "EMPTY_TUPLE",
    "EMPTY_LIST",
    "EMPTY_DICT",
    "EMPTY_SET",
    "NONE",
    "NEWTRUE",
    "NEWFALSE",
    "BININT",
    "BININT1",
    "BININT2",
    "LONG1",
    "BINFLOAT",
    "BINUNICODE",
    "SHORT_BINSTRING",
    "BINPERSID",
    "BINGET",
    "LONG_BINGET",
    "BINPUT",
    "LONG_BINPUT",
];

/// Modules whose globals stay refused even when foreign objects are kept inert
/// (`--allow-inert-objects`): only a malicious file names them, so a conversion stops there
/// rather than listing them. torch's `weights_only` blocks `sys`, `os`, `posix` and `nt` even
/// when a user allowlists them; the rest run code or unpickle nested data. Every other
/// foreign class becomes an inert record (never called) and is listed.
pub fn never_inert(module: &str) -> bool {
    const BLOCKED: &[&str] = &[
        "sys",
        "os",
        "posix",
        "nt",
        "subprocess",
        "builtins",
        "__builtin__",
        "runpy",
        "pty",
        "importlib",
        "ctypes",
        "pickle",
        "_pickle",
        "marshal",
        "types",
        "shutil",
        "socket",
        "code",
        "codeop",
        "pydoc",
        "webbrowser",
        "operator",
        "_operator",
        "functools",
        "copyreg",
        "copy_reg",
        "torch",
        "__torch__",
        "logging",
        "pip",
        "pkgutil",
        "uuid",
        "asyncio",
        "cProfile",
        "profile",
        "timeit",
        "bdb",
        "trace",
        "idlelib",
        "venv",
        "numpy.testing",
        "_posixsubprocess",
        "multiprocessing",
        "threading",
        "signal",
    ];
    BLOCKED.iter().any(|b| {
        module == *b
            || module
                .strip_prefix(b)
                .is_some_and(|rest| rest.starts_with('.'))
    })
}

/// A hint appended to a refusal when the symbol shows the file pickles a whole `nn.Module`
/// or a TorchScript object rather than a state dict.
pub fn module_hint(module: &str) -> &'static str {
    if module == "__main__" {
        "; `__main__` is the script that saved the file: a class defined there (a model, or a \
         tensor subclass) is pickled by name; save plain tensors instead \
         (`model.state_dict()`, `t.as_subclass(torch.Tensor)`)"
    } else if module.starts_with("torch.nn.modules") || module == "torch.nn" {
        "; the file pickles a whole nn.Module (model object), not a state dict: \
         load it in Python and save `model.state_dict()` instead"
    } else if module.starts_with("__torch__") {
        "; this is TorchScript, not a state-dict checkpoint"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_matches_only() {
        assert!(lookup("torch._utils", "_rebuild_tensor_v2").is_some());
        assert!(lookup("__builtin__", "set").is_some());
        assert!(lookup("torch", "serialization.os.system").is_none());
        assert!(lookup("torch", "save").is_none());
        assert!(lookup("os", "system").is_none());
        assert!(lookup("posix", "system").is_none());
        assert!(lookup("builtins", "eval").is_none());
        assert!(lookup("torch.storage", "_load_from_bytes").is_none());
        assert!(lookup("torch.cuda", "HalfStorage").is_some());
        assert!(lookup("torch", "float8_e4m3fn").is_some());
        assert!(lookup("torch._utils ", "_rebuild_tensor_v2").is_none());
    }
}
