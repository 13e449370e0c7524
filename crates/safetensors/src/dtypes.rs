//! The safetensors dtype table (docs/specs/safetensors.md §1.4).
//!
//! Declaration order in the reference crate is its "alignment order": the writer sorts tensors
//! by this rank, descending, then by name.

use weightport_core::DType;

/// The 22 dtypes safetensors 0.8 knows, in the reference's declaration (alignment) order.
pub(crate) const DTYPES: [DType; 22] = [
    DType::BOOL,
    DType::F4,
    DType::F6_E2M3,
    DType::F6_E3M2,
    DType::U8,
    DType::I8,
    DType::F8_E5M2,
    DType::F8_E4M3,
    DType::F8_E8M0,
    DType::F8_E4M3FNUZ,
    DType::F8_E5M2FNUZ,
    DType::I16,
    DType::U16,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::U32,
    DType::F32,
    DType::C64,
    DType::F64,
    DType::I64,
    DType::U64,
];

/// The header names of [`DTYPES`], for "expected one of" messages.
pub(crate) const NAMES: [&str; 22] = [
    "BOOL",
    "F4",
    "F6_E2M3",
    "F6_E3M2",
    "U8",
    "I8",
    "F8_E5M2",
    "F8_E4M3",
    "F8_E8M0",
    "F8_E4M3FNUZ",
    "F8_E5M2FNUZ",
    "I16",
    "U16",
    "F16",
    "BF16",
    "I32",
    "U32",
    "F32",
    "C64",
    "F64",
    "I64",
    "U64",
];

/// Parses a header dtype string (case-sensitive).
pub(crate) fn parse(s: &str) -> Option<DType> {
    NAMES.iter().position(|n| *n == s).map(|i| DTYPES[i])
}

/// The writer's sort rank, or `None` if safetensors cannot store the dtype.
pub(crate) fn rank(d: DType) -> Option<usize> {
    DTYPES.iter().position(|x| *x == d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_match_core_names() {
        for (d, n) in DTYPES.iter().zip(NAMES) {
            assert_eq!(d.name(), n);
        }
        assert_eq!(parse("Q4_0"), None);
    }
}
