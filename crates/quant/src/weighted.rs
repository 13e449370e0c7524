//! Row-wise quantization with an optional importance matrix: ggml's `ggml_quantize_chunk`
//! with `quant_weights`, which is what `llama-quantize --imatrix` calls.
//!
//! A *row kernel* quantizes one row of `n_per_row` values (a whole number of blocks) into
//! that row's blocks, with the row's importance weights (`n_per_row` values, the same for
//! every row of a tensor, or of one expert of a 3-D tensor) or without them. Types that have
//! no row kernel here ignore the importance matrix in ggml and go through their block kernel.
//!
//! Which ggml quantizers read `quant_weights` (pinned llama.cpp, `ggml-quants.c`):
//! - read it: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (`quantize_row_q*_K_impl`), Q4_0, Q4_1, Q5_0, Q5_1
//!   (`quantize_row_q*_impl`), and the IQ types. Without it each of these runs its `_ref`
//!   quantizer, which its row kernel here delegates to.
//! - ignore it: Q8_0, MXFP4, NVFP4, TQ1_0, TQ2_0 (`(void)quant_weights`), Q1_0 and Q2_0 (the
//!   `_ref` quantizer row by row: the same bytes), and F16/BF16/F32 (plain casts). The
//!   harness `fixtures/gen/quant_weighted_ref.c` checks that ggml's bytes with and without an
//!   imatrix are equal for each of these on every fixture case.
//! - Q8_1 and Q8_K have no `ggml_quantize_chunk` path at all (dot-product scratch types).

use crate::DType;

/// Quantizes one row `x` into the bytes `y` of that row's blocks, with optional importance
/// weights (`weights.len() == x.len()`).
pub(crate) type RowKernel = fn(x: &[f32], y: &mut [u8], weights: Option<&[f32]>);

/// The row kernel of `dtype`, if its ggml quantizer reads the importance matrix.
pub(crate) fn row_kernel(dtype: DType) -> Option<RowKernel> {
    // One arm per type whose ggml `quantize_<type>` reads `quant_weights`.
    match dtype {
        DType::Q2_K => Some(crate::kquants_weighted::q2_k_row),
        DType::Q3_K => Some(crate::kquants_weighted::q3_k_row),
        DType::Q4_K => Some(crate::kquants_weighted::q4_k_row),
        DType::Q5_K => Some(crate::kquants_weighted::q5_k_row),
        DType::Q6_K => Some(crate::kquants_weighted::q6_k_row),
        DType::Q4_0 => Some(crate::legacy_weighted::q4_0_row),
        DType::Q4_1 => Some(crate::legacy_weighted::q4_1_row),
        DType::Q5_0 => Some(crate::legacy_weighted::q5_0_row),
        DType::Q5_1 => Some(crate::legacy_weighted::q5_1_row),
        DType::IQ4_NL => Some(crate::iquants::quantize_row_iq4_nl),
        DType::IQ4_XS => Some(crate::iquants::quantize_row_iq4_xs),
        _ => None,
    }
}

/// A row kernel whose ggml quantizer can abort (`GGML_ASSERT` in its grid search, on
/// non-finite or overflowing values): `Err(block)` names the super-block (within the row) ggml
/// aborts on; nothing is promised about `y` then.
pub(crate) type CheckedRowKernel =
    fn(x: &[f32], y: &mut [u8], weights: Option<&[f32]>) -> Result<(), usize>;

/// The checked row kernel of `dtype`, if its ggml quantizer can abort. These types' kernels
/// also serve [`crate::quantize`] (with no weights).
pub(crate) fn checked_row_kernel(dtype: DType) -> Option<CheckedRowKernel> {
    // One arm per type.
    match dtype {
        DType::IQ3_XXS => Some(crate::iq3_quant::quantize_row_iq3_xxs),
        DType::IQ3_S => Some(crate::iq3_quant::quantize_row_iq3_s),
        DType::IQ2_XXS => Some(crate::iq2_quant::quantize_iq2_xxs),
        DType::IQ2_XS => Some(crate::iq2_quant::quantize_iq2_xs),
        DType::IQ2_S => Some(crate::iq2_quant::quantize_iq2_s),
        DType::IQ1_S => Some(crate::iq1_quant::quantize_iq1_s),
        DType::IQ1_M => Some(crate::iq1_quant::quantize_iq1_m),
        _ => None,
    }
}

/// True if ggml refuses to quantize `dtype` without an importance matrix (its quantizer
/// asserts `quant_weights != NULL`). llama-quantize's refusal names more cases (it is per
/// file type and tensor); that rule lives with the mixes.
pub fn requires_imatrix(dtype: DType) -> bool {
    matches!(dtype, DType::IQ2_XXS | DType::IQ2_XS | DType::IQ1_S)
}

/// True if an importance matrix changes what [`crate::quantize_rows`] writes for `dtype`.
pub fn uses_imatrix(dtype: DType) -> bool {
    row_kernel(dtype).is_some() || checked_row_kernel(dtype).is_some()
}
