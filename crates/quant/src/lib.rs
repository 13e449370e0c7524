//! Bit-exact ggml quantization kernels and f32/f16/bf16 casts for weightport.
//!
//! Pure slice-in/slice-out functions, single-threaded per call, no I/O:
//!
//! - [`quantize`] reproduces byte for byte what `llama-quantize` writes when no importance
//!   matrix is given (`ggml_quantize_chunk`, which is ggml's `quantize_row_<type>_ref` for
//!   every type here except IQ4_NL/IQ4_XS, see [`quantize`]), and [`dequantize`] reproduces
//!   `dequantize_row_<type>` bit for bit. [`can_quantize`]/[`can_dequantize`] say which
//!   [`DType`]s are covered; anything else is [`QuantError::Unsupported`].
//! - [`cast`] converts f32/f16/bf16 with torch's or ggml's rounding and counts overflow and
//!   underflow for lossy-cast reports.
//! - [`blocks`] has the block layouts as `#[repr(C)]` structs.
//!
//! Exactness rests on doing what the C code does, in f32, in the same order (spec
//! `gguf.md` §3.0): no fused multiply-add, sums accumulated in index order, and the three
//! roundings (`nearest_int` half-to-even, `roundf` half-away, truncating casts). Float → int
//! casts of out-of-range values follow x86-64 (`cvttss2si`), which is what the reference
//! fixtures were produced on.

#![deny(missing_docs)]

#[macro_use]
mod dispatch;

mod blocks;
pub mod cast;
mod cost;
mod grids;
mod iq1_quant;
mod iq2_quant;
mod iq3_init;
mod iq3_quant;
mod iq_init;
mod iquants;
mod kquants;
mod kquants_weighted;
mod legacy;
mod legacy_weighted;
mod other;
mod search;
mod util;
mod weighted;

pub use cost::quantize_ns_per_value;
#[doc(hidden)]
pub use dispatch::set_portable_only;
pub use weighted::{requires_imatrix, uses_imatrix};

pub use weightport_core::DType;

use blocks::*;

/// Why a kernel call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// The dtype has no kernel for this direction in this crate.
    #[error("unsupported type: {op} of {dtype} is not implemented")]
    Unsupported {
        /// The dtype asked for.
        dtype: DType,
        /// `"quantize"` or `"dequantize"`.
        op: &'static str,
    },
    /// A slice has the wrong length.
    #[error("{what}: expected {expected} elements, got {got}")]
    Length {
        /// Which slice.
        what: &'static str,
        /// The length it must have.
        expected: usize,
        /// The length it has.
        got: usize,
    },
    /// The dtype's ggml quantizer needs an importance matrix (it asserts one) and none was
    /// given.
    #[error("{dtype} needs an importance matrix: ggml cannot quantize it without one")]
    MissingImportance {
        /// The dtype.
        dtype: DType,
    },
    /// ggml's grid search aborts on this input (every candidate's distance is NaN or
    /// infinite, or the scale is NaN): non-finite or overflowing values or weights.
    #[error(
        "{dtype}: no grid point fits row {row}, super-block {block} (non-finite or \
         overflowing values or importance weights; ggml aborts here)"
    )]
    GridSearch {
        /// The dtype.
        dtype: DType,
        /// Row index within the call.
        row: usize,
        /// Super-block index within the row.
        block: usize,
    },
    /// The source element count is not a multiple of the block size.
    #[error("{len} elements are not a whole number of {dtype} blocks of {block}")]
    PartialBlock {
        /// The dtype.
        dtype: DType,
        /// Elements given.
        len: usize,
        /// Elements per block.
        block: usize,
    },
}

/// `(elements, bytes)` per block of a block dtype.
fn block_shape(dtype: DType) -> Option<(usize, usize)> {
    match dtype.layout() {
        weightport_core::Layout::Block { elems, bytes } => Some((elems as usize, bytes as usize)),
        weightport_core::Layout::Bits(_) => None,
    }
}

// One table drives dispatch and the `can_*` queries.
macro_rules! kernels {
    ($( $dt:ident => $blk:ty, q: $q:expr, dq: $dq:expr; )*) => {
        fn quantize_dispatch(dtype: DType, src: &[f32], dst: &mut [u8]) -> bool {
            match dtype {
                $( DType::$dt => match $q {
                    Some(f) => { let f: fn(&[f32], &mut [$blk]) = f; f(src, as_blocks_mut::<$blk>(dst)); true }
                    None => false,
                }, )*
                _ => false,
            }
        }
        fn dequantize_dispatch(dtype: DType, src: &[u8], dst: &mut [f32]) -> bool {
            match dtype {
                $( DType::$dt => match $dq {
                    Some(f) => { let f: fn(&[$blk], &mut [f32]) = f; f(as_blocks::<$blk>(src), dst); true }
                    None => false,
                }, )*
                _ => false,
            }
        }
        fn can_quantize_block(dtype: DType) -> bool {
            match dtype { $( DType::$dt => { let q: Option<fn(&[f32], &mut [$blk])> = $q; q.is_some() } )* _ => false }
        }
        /// True if [`dequantize`] supports `dtype`.
        pub fn can_dequantize(dtype: DType) -> bool {
            match dtype { $( DType::$dt => { let d: Option<fn(&[$blk], &mut [f32])> = $dq; d.is_some() } )* _ => false }
        }
    };
}

kernels! {
    Q4_0 => BlockQ4_0, q: Some(legacy::quantize_q4_0), dq: Some(legacy::dequantize_q4_0);
    Q4_1 => BlockQ4_1, q: Some(legacy::quantize_q4_1), dq: Some(legacy::dequantize_q4_1);
    Q5_0 => BlockQ5_0, q: Some(legacy::quantize_q5_0), dq: Some(legacy::dequantize_q5_0);
    Q5_1 => BlockQ5_1, q: Some(legacy::quantize_q5_1), dq: Some(legacy::dequantize_q5_1);
    Q8_0 => BlockQ8_0, q: Some(legacy::quantize_q8_0), dq: Some(legacy::dequantize_q8_0);
    Q8_1 => BlockQ8_1, q: Some(legacy::quantize_q8_1), dq: None;
    Q2_K => BlockQ2K, q: Some(kquants::quantize_q2_k), dq: Some(kquants::dequantize_q2_k);
    Q3_K => BlockQ3K, q: Some(kquants::quantize_q3_k), dq: Some(kquants::dequantize_q3_k);
    Q4_K => BlockQ4K, q: Some(kquants::quantize_q4_k), dq: Some(kquants::dequantize_q4_k);
    Q5_K => BlockQ5K, q: Some(kquants::quantize_q5_k), dq: Some(kquants::dequantize_q5_k);
    Q6_K => BlockQ6K, q: Some(kquants::quantize_q6_k), dq: Some(kquants::dequantize_q6_k);
    Q8_K => BlockQ8K, q: Some(kquants::quantize_q8_k), dq: Some(kquants::dequantize_q8_k);
    TQ1_0 => BlockTq1_0, q: Some(other::quantize_tq1_0), dq: Some(other::dequantize_tq1_0);
    TQ2_0 => BlockTq2_0, q: Some(other::quantize_tq2_0), dq: Some(other::dequantize_tq2_0);
    MXFP4 => BlockMxfp4, q: Some(other::quantize_mxfp4), dq: Some(other::dequantize_mxfp4);
    NVFP4 => BlockNvfp4, q: Some(other::quantize_nvfp4), dq: Some(other::dequantize_nvfp4);
    Q1_0 => BlockQ1_0, q: Some(other::quantize_q1_0), dq: Some(other::dequantize_q1_0);
    Q2_0 => BlockQ2_0, q: Some(other::quantize_q2_0), dq: Some(other::dequantize_q2_0);
    IQ2_XXS => BlockIq2Xxs, q: None, dq: Some(iquants::dequantize_iq2_xxs);
    IQ2_XS => BlockIq2Xs, q: None, dq: Some(iquants::dequantize_iq2_xs);
    IQ2_S => BlockIq2S, q: None, dq: Some(iquants::dequantize_iq2_s);
    IQ3_XXS => BlockIq3Xxs, q: None, dq: Some(iquants::dequantize_iq3_xxs);
    IQ3_S => BlockIq3S, q: None, dq: Some(iquants::dequantize_iq3_s);
    IQ1_S => BlockIq1S, q: None, dq: Some(iquants::dequantize_iq1_s);
    IQ1_M => BlockIq1M, q: None, dq: Some(iquants::dequantize_iq1_m);
    IQ4_NL => BlockIq4Nl, q: Some(iquants::quantize_iq4_nl), dq: Some(iquants::dequantize_iq4_nl);
    IQ4_XS => BlockIq4Xs, q: Some(iquants::quantize_iq4_xs), dq: Some(iquants::dequantize_iq4_xs);
}

/// True if [`quantize`] (no importance matrix) supports `dtype`.
pub fn can_quantize(dtype: DType) -> bool {
    can_quantize_rows(dtype) && !weighted::requires_imatrix(dtype)
}

/// True if [`quantize_rows`] supports `dtype` (some types only with an importance matrix:
/// see [`requires_imatrix`]).
pub fn can_quantize_rows(dtype: DType) -> bool {
    can_quantize_block(dtype)
        || weighted::row_kernel(dtype).is_some()
        || weighted::checked_row_kernel(dtype).is_some()
}

/// Quantizes `src` into `dst` exactly as ggml does without an importance matrix:
/// `ggml_quantize_chunk(dtype, …, imatrix = NULL)`, i.e. what `llama-quantize` writes. For all
/// supported types but two that is `quantize_row_<dtype>_ref`; for IQ4_NL and IQ4_XS it is
/// `quantize_iq4_nl`/`quantize_iq4_xs` (scale search with 7 tries each way;
/// `quantize_row_iq4_nl_ref` does no search and gives other bytes). Q8_1 and Q8_K have no
/// `ggml_quantize_chunk` path; for them this is their `_ref` function. IQ3_XXS and IQ3_S are
/// `quantize_iq3_xxs`/`quantize_iq3_s` (= their `_ref`); where ggml aborts on the input
/// (NaN/inf, or values whose square overflows) this returns [`QuantError::GridSearch`] (row 0,
/// the super-block's index in `src`).
///
/// `src.len()` must be a multiple of the block's element count and `dst.len()` must be
/// exactly `blocks × block bytes`. Blocks are independent, so callers may split a tensor at
/// any block boundary (e.g. per row) and get the same bytes.
pub fn quantize(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    let unsupported = QuantError::Unsupported {
        dtype,
        op: "quantize",
    };
    if weighted::requires_imatrix(dtype) {
        return Err(QuantError::MissingImportance { dtype });
    }
    if !can_quantize(dtype) {
        return Err(unsupported);
    }
    let (elems, bytes) = block_shape(dtype).ok_or(unsupported)?;
    if !src.len().is_multiple_of(elems) {
        return Err(QuantError::PartialBlock {
            dtype,
            len: src.len(),
            block: elems,
        });
    }
    let want = src.len() / elems * bytes;
    if dst.len() != want {
        return Err(QuantError::Length {
            what: "quantize destination bytes",
            expected: want,
            got: dst.len(),
        });
    }
    if let Some(k) = weighted::checked_row_kernel(dtype) {
        // blocks are independent without an importance matrix: all of `src` is one row
        return k(src, dst, None).map_err(|block| QuantError::GridSearch {
            dtype,
            row: 0,
            block,
        });
    }
    quantize_dispatch(dtype, src, dst);
    Ok(())
}

/// Quantizes rows of `n_per_row` values exactly as `ggml_quantize_chunk(dtype, src, dst, 0,
/// nrows, n_per_row, imatrix)` does: with an importance matrix (`imatrix.len() ==
/// n_per_row`, the same weights for every row) the types whose ggml quantizer reads one use
/// it; every other type, and every type without one, writes what [`quantize`] writes.
///
/// `src.len()` must be a multiple of `n_per_row`, and `n_per_row` of the block's element
/// count; `dst.len()` exactly `blocks × block bytes`. Rows are independent, so callers may
/// split a tensor at any row boundary.
///
/// The grid types IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M are quantized only here
/// ([`quantize`] refuses them): IQ2_XXS, IQ2_XS and IQ1_S need an importance matrix
/// ([`QuantError::MissingImportance`] without one, where ggml asserts), IQ2_S and IQ1_M take
/// one if given. Where ggml's grid search aborts (non-finite or overflowing values or
/// weights leave no candidate) this returns [`QuantError::GridSearch`] naming the row and
/// super-block; elsewhere non-finite input gives ggml's bytes.
pub fn quantize_rows(
    dtype: DType,
    src: &[f32],
    dst: &mut [u8],
    n_per_row: usize,
    imatrix: Option<&[f32]>,
) -> Result<(), QuantError> {
    let unsupported = QuantError::Unsupported {
        dtype,
        op: "quantize",
    };
    let kernel = weighted::row_kernel(dtype);
    let checked = weighted::checked_row_kernel(dtype);
    if !can_quantize_rows(dtype) {
        return Err(unsupported);
    }
    let (elems, bytes) = block_shape(dtype).ok_or(unsupported)?;
    if n_per_row == 0 || !n_per_row.is_multiple_of(elems) {
        return Err(QuantError::PartialBlock {
            dtype,
            len: n_per_row,
            block: elems,
        });
    }
    if !src.len().is_multiple_of(n_per_row) {
        return Err(QuantError::Length {
            what: "quantize source elements (a whole number of rows)",
            expected: src.len() / n_per_row * n_per_row,
            got: src.len(),
        });
    }
    if let Some(w) = imatrix {
        if w.len() != n_per_row {
            return Err(QuantError::Length {
                what: "importance matrix weights (one per column)",
                expected: n_per_row,
                got: w.len(),
            });
        }
    }
    let row_bytes = n_per_row / elems * bytes;
    let want = src.len() / n_per_row * row_bytes;
    if dst.len() != want {
        return Err(QuantError::Length {
            what: "quantize destination bytes",
            expected: want,
            got: dst.len(),
        });
    }
    if imatrix.is_none() && weighted::requires_imatrix(dtype) {
        return Err(QuantError::MissingImportance { dtype });
    }
    let rows = src
        .chunks_exact(n_per_row)
        .zip(dst.chunks_exact_mut(row_bytes));
    match (checked, kernel) {
        (Some(k), _) => {
            for (row, (x, y)) in rows.enumerate() {
                k(x, y, imatrix).map_err(|block| QuantError::GridSearch { dtype, row, block })?;
            }
        }
        (None, Some(k)) => rows.for_each(|(x, y)| k(x, y, imatrix)),
        (None, None) => {
            quantize_dispatch(dtype, src, dst);
        }
    }
    Ok(())
}

/// Dequantizes `src` into `dst` exactly as ggml's `dequantize_row_<dtype>` does.
///
/// `src.len()` must be a whole number of blocks and `dst.len()` exactly `blocks × elements`.
pub fn dequantize(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    let unsupported = QuantError::Unsupported {
        dtype,
        op: "dequantize",
    };
    if !can_dequantize(dtype) {
        return Err(unsupported);
    }
    let (elems, bytes) = block_shape(dtype).ok_or(unsupported)?;
    if !src.len().is_multiple_of(bytes) {
        return Err(QuantError::PartialBlock {
            dtype,
            len: src.len(),
            block: bytes,
        });
    }
    let want = src.len() / bytes * elems;
    if dst.len() != want {
        return Err(QuantError::Length {
            what: "dequantize destination elements",
            expected: want,
            got: dst.len(),
        });
    }
    dequantize_dispatch(dtype, src, dst);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_agree_with_core() {
        use std::mem::size_of;
        let table: &[(DType, usize)] = &[
            (DType::Q4_0, size_of::<BlockQ4_0>()),
            (DType::Q4_K, size_of::<BlockQ4K>()),
            (DType::Q6_K, size_of::<BlockQ6K>()),
            (DType::Q8_K, size_of::<BlockQ8K>()),
            (DType::IQ4_XS, size_of::<BlockIq4Xs>()),
            (DType::IQ1_M, size_of::<BlockIq1M>()),
            (DType::MXFP4, size_of::<BlockMxfp4>()),
        ];
        for &(d, s) in table {
            assert_eq!(block_shape(d).unwrap().1, s, "{d}");
        }
    }

    #[test]
    fn errors_are_clear() {
        let mut out = [0u8; 18];
        assert!(matches!(
            quantize(DType::IQ2_XXS, &[0.0; 256], &mut [0u8; 66]),
            Err(QuantError::MissingImportance { .. })
        ));
        assert!(matches!(
            quantize(DType::F32, &[0.0; 32], &mut out),
            Err(QuantError::Unsupported { .. })
        ));
        assert!(matches!(
            quantize(DType::Q4_0, &[0.0; 31], &mut out),
            Err(QuantError::PartialBlock { .. })
        ));
        assert!(matches!(
            quantize(DType::Q4_0, &[0.0; 32], &mut [0u8; 17]),
            Err(QuantError::Length { .. })
        ));
        assert!(matches!(
            dequantize(DType::Q8_1, &[0u8; 36], &mut [0.0; 32]),
            Err(QuantError::Unsupported { .. })
        ));
        quantize(DType::Q4_0, &[1.0; 32], &mut out).unwrap();
        for &d in DType::ALL {
            if can_quantize(d) {
                quantize(d, &[], &mut []).unwrap();
            }
            if can_dequantize(d) {
                dequantize(d, &[], &mut []).unwrap();
            }
        }
        let msg = quantize(DType::IQ2_XXS, &[0.0; 256], &mut [0u8; 66])
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "IQ2_XXS needs an importance matrix: ggml cannot quantize it without one"
        );
        for &d in DType::ALL {
            if can_quantize_rows(d) && !can_quantize(d) {
                assert!(requires_imatrix(d), "{d}");
                quantize_rows(d, &[], &mut [], 256, Some(&[1.0; 256])).unwrap();
            }
        }
    }
}
