//! The ggml type ids of GGUF tensor infos and the GGUF value type ids of key/value pairs.
//!
//! Tensor types follow `enum ggml_type` (docs/specs/gguf.md §2, `ggml/include/ggml.h:389-434`): the table is
//! data, so an id that is unknown (≥ 43) or removed (4, 5, 31-33, 36-38: block size 0 in ggml's
//! type traits) is refused by lookup, never by a panic. Block sizes and byte sizes come from
//! [`DType::layout`], which carries the same numbers as ggml's type traits (a unit test checks
//! the table against them).

use weightport_core::{DType, Layout, MetaType};

/// `GGML_TYPE_COUNT`: ids at or above it are unknown.
pub(crate) const GGML_TYPE_COUNT: u32 = 43;

/// ggml type id → dtype, for every id still defined.
const TABLE: &[(u32, DType)] = &[
    (0, DType::F32),
    (1, DType::F16),
    (2, DType::Q4_0),
    (3, DType::Q4_1),
    (6, DType::Q5_0),
    (7, DType::Q5_1),
    (8, DType::Q8_0),
    (9, DType::Q8_1),
    (10, DType::Q2_K),
    (11, DType::Q3_K),
    (12, DType::Q4_K),
    (13, DType::Q5_K),
    (14, DType::Q6_K),
    (15, DType::Q8_K),
    (16, DType::IQ2_XXS),
    (17, DType::IQ2_XS),
    (18, DType::IQ3_XXS),
    (19, DType::IQ1_S),
    (20, DType::IQ4_NL),
    (21, DType::IQ3_S),
    (22, DType::IQ2_S),
    (23, DType::IQ4_XS),
    (24, DType::I8),
    (25, DType::I16),
    (26, DType::I32),
    (27, DType::I64),
    (28, DType::F64),
    (29, DType::IQ1_M),
    (30, DType::BF16),
    (34, DType::TQ1_0),
    (35, DType::TQ2_0),
    (39, DType::MXFP4),
    (40, DType::NVFP4),
    (41, DType::Q1_0),
    (42, DType::Q2_0),
];

/// Names of the removed ids (for messages).
const REMOVED: &[(u32, &str)] = &[
    (4, "Q4_2"),
    (5, "Q4_3"),
    (31, "Q4_0_4_4"),
    (32, "Q4_0_4_8"),
    (33, "Q4_0_8_8"),
    (36, "IQ4_NL_4_4"),
    (37, "IQ4_NL_4_8"),
    (38, "IQ4_NL_8_8"),
];

/// Why a ggml type id cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TypeIdError {
    /// At or above `GGML_TYPE_COUNT`.
    Unknown(u32),
    /// A type ggml removed; its name.
    Removed(u32, &'static str),
}

/// The dtype of ggml type id `id`.
pub(crate) fn dtype_of(id: u32) -> Result<DType, TypeIdError> {
    if let Some(&(_, d)) = TABLE.iter().find(|(i, _)| *i == id) {
        return Ok(d);
    }
    match REMOVED.iter().find(|(i, _)| *i == id) {
        Some(&(i, n)) => Err(TypeIdError::Removed(i, n)),
        None => Err(TypeIdError::Unknown(id)),
    }
}

/// The ggml type id of `dtype`, if GGUF can hold it.
pub(crate) fn ggml_id(dtype: DType) -> Option<u32> {
    TABLE.iter().find(|(_, d)| *d == dtype).map(|&(i, _)| i)
}

/// `(block size in elements, bytes per block)` of a dtype GGUF can hold.
pub(crate) fn block_of(dtype: DType) -> (u64, u64) {
    match dtype.layout() {
        Layout::Block { elems, bytes } => (u64::from(elems), u64::from(bytes)),
        Layout::Bits(b) => (1, u64::from(b / 8)),
    }
}

/// GGUF value type id → [`MetaType`] (docs/specs/gguf.md §1.1 value encoding).
pub(crate) fn meta_type_of(id: u32) -> Option<MetaType> {
    Some(match id {
        0 => MetaType::U8,
        1 => MetaType::I8,
        2 => MetaType::U16,
        3 => MetaType::I16,
        4 => MetaType::U32,
        5 => MetaType::I32,
        6 => MetaType::F32,
        7 => MetaType::Bool,
        8 => MetaType::Str,
        9 => MetaType::Array,
        10 => MetaType::U64,
        11 => MetaType::I64,
        12 => MetaType::F64,
        _ => return None,
    })
}

/// [`MetaType`] → GGUF value type id.
pub(crate) fn meta_type_id(t: MetaType) -> u32 {
    match t {
        MetaType::U8 => 0,
        MetaType::I8 => 1,
        MetaType::U16 => 2,
        MetaType::I16 => 3,
        MetaType::U32 => 4,
        MetaType::I32 => 5,
        MetaType::F32 => 6,
        MetaType::Bool => 7,
        MetaType::Str => 8,
        MetaType::Array => 9,
        MetaType::U64 => 10,
        MetaType::I64 => 11,
        MetaType::F64 => 12,
    }
}

/// Encoded size of one fixed-size value (`None` for strings and arrays).
pub(crate) fn fixed_size(t: MetaType) -> Option<u64> {
    Some(match t {
        MetaType::U8 | MetaType::I8 | MetaType::Bool => 1,
        MetaType::U16 | MetaType::I16 => 2,
        MetaType::U32 | MetaType::I32 | MetaType::F32 => 4,
        MetaType::U64 | MetaType::I64 | MetaType::F64 => 8,
        MetaType::Str | MetaType::Array => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_ggml_type_traits() {
        // (id, block size, type size) from ggml/src/ggml.c type_traits, docs/specs/gguf.md §2.
        let want: &[(u32, u64, u64)] = &[
            (0, 1, 4),
            (1, 1, 2),
            (2, 32, 18),
            (3, 32, 20),
            (6, 32, 22),
            (7, 32, 24),
            (8, 32, 34),
            (9, 32, 36),
            (10, 256, 84),
            (11, 256, 110),
            (12, 256, 144),
            (13, 256, 176),
            (14, 256, 210),
            (15, 256, 292),
            (16, 256, 66),
            (17, 256, 74),
            (18, 256, 98),
            (19, 256, 50),
            (20, 32, 18),
            (21, 256, 110),
            (22, 256, 82),
            (23, 256, 136),
            (24, 1, 1),
            (25, 1, 2),
            (26, 1, 4),
            (27, 1, 8),
            (28, 1, 8),
            (29, 256, 56),
            (30, 1, 2),
            (34, 256, 54),
            (35, 256, 66),
            (39, 32, 17),
            (40, 64, 36),
            (41, 128, 18),
            (42, 64, 18),
        ];
        assert_eq!(want.len(), TABLE.len());
        for &(id, blck, size) in want {
            let d = dtype_of(id).unwrap();
            assert_eq!(block_of(d), (blck, size), "{d}");
            assert_eq!(ggml_id(d), Some(id));
        }
        for id in [4, 5, 31, 32, 33, 36, 37, 38] {
            assert!(matches!(dtype_of(id), Err(TypeIdError::Removed(..))));
        }
        assert_eq!(dtype_of(43), Err(TypeIdError::Unknown(43)));
        assert_eq!(dtype_of(u32::MAX), Err(TypeIdError::Unknown(u32::MAX)));
        for id in 0..13 {
            assert_eq!(meta_type_id(meta_type_of(id).unwrap()), id);
        }
        assert_eq!(meta_type_of(13), None);
    }
}
