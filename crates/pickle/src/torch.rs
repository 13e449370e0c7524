//! torch dtypes, storage classes, and the tensor descriptions the VM builds.
//!
//! Spec §1.3: a storage is a persistent id `('storage', <class>, key, location, numel)`; typed
//! classes (`torch.FloatStorage`) count numel in elements, `torch.UntypedStorage` in bytes (its
//! dtype comes from `_rebuild_tensor_v3`). Offsets, sizes and strides are in elements.

use weightport_core::DType;

/// A torch dtype: its name, element size and the weightport dtype it maps to (`None`: torch
/// has it, weightport cannot represent it, so a tensor of it is refused with its name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TorchDType {
    /// `float32`, `bfloat16`, `float8_e4m3fn`, …
    pub name: &'static str,
    /// Bytes per element.
    pub itemsize: u8,
    /// Width of the unit a big-endian file byteswaps (half the itemsize for complex).
    pub swap: u8,
    /// The weightport dtype.
    pub core: Option<DType>,
}

const fn dt(name: &'static str, itemsize: u8, swap: u8, core: Option<DType>) -> TorchDType {
    TorchDType {
        name,
        itemsize,
        swap,
        core,
    }
}

/// Every dtype symbol `torch.<name>` accepted as a constant (canonical names and the aliases
/// torch exposes as module attributes).
pub(crate) const DTYPES: &[(&str, TorchDType)] = &[
    ("float32", F32),
    ("float", F32),
    ("float64", F64),
    ("double", F64),
    ("float16", F16),
    ("half", F16),
    ("bfloat16", BF16),
    ("int64", I64),
    ("long", I64),
    ("int32", I32),
    ("int", I32),
    ("int16", I16),
    ("short", I16),
    ("int8", I8),
    ("uint8", U8),
    ("bool", BOOL),
    ("complex64", C64),
    ("cfloat", C64),
    ("complex128", C128),
    ("cdouble", C128),
    ("complex32", C32),
    ("chalf", C32),
    (
        "float8_e4m3fn",
        dt("float8_e4m3fn", 1, 1, Some(DType::F8_E4M3)),
    ),
    ("float8_e5m2", dt("float8_e5m2", 1, 1, Some(DType::F8_E5M2))),
    (
        "float8_e4m3fnuz",
        dt("float8_e4m3fnuz", 1, 1, Some(DType::F8_E4M3FNUZ)),
    ),
    (
        "float8_e5m2fnuz",
        dt("float8_e5m2fnuz", 1, 1, Some(DType::F8_E5M2FNUZ)),
    ),
    (
        "float8_e8m0fnu",
        dt("float8_e8m0fnu", 1, 1, Some(DType::F8_E8M0)),
    ),
    ("float4_e2m1fn_x2", dt("float4_e2m1fn_x2", 1, 1, None)),
    ("uint16", dt("uint16", 2, 2, Some(DType::U16))),
    ("uint32", dt("uint32", 4, 4, Some(DType::U32))),
    ("uint64", dt("uint64", 8, 8, Some(DType::U64))),
    ("qint8", dt("qint8", 1, 1, None)),
    ("quint8", dt("quint8", 1, 1, None)),
    ("qint32", dt("qint32", 4, 4, None)),
    ("quint4x2", dt("quint4x2", 1, 1, None)),
    ("quint2x4", dt("quint2x4", 1, 1, None)),
    ("bits8", dt("bits8", 1, 1, None)),
    ("bits16", dt("bits16", 2, 2, None)),
    ("bits1x8", dt("bits1x8", 1, 1, None)),
    ("bits2x4", dt("bits2x4", 1, 1, None)),
    ("bits4x2", dt("bits4x2", 1, 1, None)),
];

const F32: TorchDType = dt("float32", 4, 4, Some(DType::F32));
const F64: TorchDType = dt("float64", 8, 8, Some(DType::F64));
const F16: TorchDType = dt("float16", 2, 2, Some(DType::F16));
const BF16: TorchDType = dt("bfloat16", 2, 2, Some(DType::BF16));
const I64: TorchDType = dt("int64", 8, 8, Some(DType::I64));
const I32: TorchDType = dt("int32", 4, 4, Some(DType::I32));
const I16: TorchDType = dt("int16", 2, 2, Some(DType::I16));
const I8: TorchDType = dt("int8", 1, 1, Some(DType::I8));
const U8: TorchDType = dt("uint8", 1, 1, Some(DType::U8));
const BOOL: TorchDType = dt("bool", 1, 1, Some(DType::BOOL));
const C64: TorchDType = dt("complex64", 8, 4, Some(DType::C64));
const C128: TorchDType = dt("complex128", 16, 8, None);
const C32: TorchDType = dt("complex32", 4, 2, None);

/// The legacy typed storage classes `torch.<X>Storage` and their dtypes (docs/specs/pickle.md §1.3 table).
pub(crate) const STORAGES: &[(&str, TorchDType)] = &[
    ("DoubleStorage", F64),
    ("FloatStorage", F32),
    ("HalfStorage", F16),
    ("BFloat16Storage", BF16),
    ("LongStorage", I64),
    ("IntStorage", I32),
    ("ShortStorage", I16),
    ("CharStorage", I8),
    ("ByteStorage", U8),
    ("BoolStorage", BOOL),
    ("ComplexFloatStorage", C64),
    ("ComplexDoubleStorage", C128),
    ("QInt8Storage", dt("qint8", 1, 1, None)),
    ("QUInt8Storage", dt("quint8", 1, 1, None)),
    ("QInt32Storage", dt("qint32", 4, 4, None)),
    ("QUInt4x2Storage", dt("quint4x2", 1, 1, None)),
    ("QUInt2x4Storage", dt("quint2x4", 1, 1, None)),
];

/// Looks a dtype symbol name up.
pub(crate) fn dtype_by_name(name: &str) -> Option<TorchDType> {
    DTYPES.iter().find(|(n, _)| *n == name).map(|(_, d)| *d)
}

/// What a storage persistent id's class says about its elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageKind {
    /// `torch.<X>Storage`: numel counts elements of this dtype.
    Typed(TorchDType),
    /// `torch.UntypedStorage`: numel counts bytes.
    Untyped,
}

/// A storage persistent id, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageRef {
    /// The record key (decimal).
    pub key: String,
    /// The storage class.
    pub kind: StorageKind,
    /// Device tag (`cpu`, `cuda:0`, …), opaque.
    pub location: String,
    /// numel as written (elements for typed, bytes for untyped).
    pub numel: u64,
    /// Legacy pre-1.0 storage views: `(offset, numel)` in elements within the root storage.
    pub view: Option<(u64, u64)>,
}

impl StorageRef {
    /// Bytes the root storage holds.
    pub fn root_bytes(&self) -> Option<u64> {
        match self.kind {
            StorageKind::Typed(d) => self.numel.checked_mul(u64::from(d.itemsize)),
            StorageKind::Untyped => Some(self.numel),
        }
    }
}

/// A tensor as a rebuild call describes it; bounds are checked when it is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorDesc {
    /// The storage.
    pub storage: StorageRef,
    /// Element type.
    pub dtype: TorchDType,
    /// Offset into the storage in elements (including a legacy view's offset).
    pub offset: u64,
    /// Sizes.
    pub shape: Vec<u64>,
    /// Strides in elements.
    pub stride: Vec<u64>,
    /// `{'conj': True}` metadata: the stored data is un-conjugated.
    pub conj: bool,
    /// `{'neg': True}` metadata: the stored data is un-negated.
    pub neg: bool,
    /// Wrapped as an `nn.Parameter`.
    pub parameter: bool,
    /// requires_grad as saved.
    pub requires_grad: bool,
}

impl TensorDesc {
    /// True when the view reads its elements in row-major order without gaps.
    pub fn is_contiguous(&self) -> bool {
        let mut expect = 1u64;
        for (&n, &s) in self.shape.iter().zip(&self.stride).rev() {
            if n == 0 {
                return true;
            }
            if n != 1 && s != expect {
                return false;
            }
            expect = expect.saturating_mul(n);
        }
        true
    }
}
