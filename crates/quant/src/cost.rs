//! What a kernel costs: single-thread CPU nanoseconds per value quantized, for planners that
//! split work by time rather than by bytes (`weightport plan --units`). Measured on the 2-core
//! dev VM (AVX2): `examples/throughput.rs` without an importance matrix, `examples/quant_bench.rs`
//! with one (the tables in this crate's README), as 4000 / (MB/s of f32 input). Only the ratios
//! matter to a planner; other machines scale them together.

use weightport_core::DType;

/// CPU nanoseconds per value to quantize into `dtype` (with importance weights when
/// `weighted`); 0 for a type that is not quantized (a float cast costs the bytes it moves).
pub fn quantize_ns_per_value(dtype: DType, weighted: bool) -> f64 {
    use DType::*;
    let mb_per_s = match (dtype, weighted) {
        (Q8_0 | Q8_1 | Q8_K, _) => 1290.0,
        (Q4_0, false) | (Q5_0, false) => 1118.0,
        (Q4_1, false) => 1400.0,
        (Q5_1, false) => 1354.0,
        (Q4_0 | Q5_0, true) => 314.0,
        (Q4_1, true) => 139.0,
        (Q5_1, true) => 137.0,
        (Q2_K, false) => 262.0,
        (Q2_K, true) => 107.0,
        (Q3_K, false) => 284.0,
        (Q3_K, true) => 228.0,
        (Q4_K, false) => 227.0,
        (Q4_K, true) => 134.0,
        (Q5_K, false) => 233.0,
        (Q5_K, true) => 125.0,
        (Q6_K, false) => 317.0,
        (Q6_K, true) => 395.0,
        (TQ1_0, _) => 839.0,
        (TQ2_0, _) => 825.0,
        (MXFP4, _) => 723.0,
        (IQ4_NL | IQ4_XS, _) => 78.0,
        (IQ3_XXS, _) => 19.3,
        (IQ3_S, _) => 25.8,
        (IQ2_XXS, _) => 20.0,
        (IQ2_XS, _) => 13.5,
        (IQ2_S, _) => 25.1,
        (IQ1_S, _) => 32.9,
        (IQ1_M, _) => 35.3,
        _ => return 0.0,
    };
    4000.0 / mb_per_s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_searches_cost_more_than_the_rounding_types() {
        let ns = |d| quantize_ns_per_value(d, false);
        assert!(ns(DType::Q4_K) > ns(DType::Q6_K));
        assert!(ns(DType::Q6_K) > 3.0 * ns(DType::Q8_0));
        assert!(ns(DType::IQ2_XS) > ns(DType::Q4_K));
        assert_eq!(ns(DType::F16), 0.0);
        assert!(quantize_ns_per_value(DType::Q4_K, true) > ns(DType::Q4_K));
    }
}
