//! IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M with an importance matrix against ggml's C:
//! `ggml_quantize_chunk(type, src, dst, 0, nrows, n_per_row, imatrix)` outputs committed in
//! fixtures/good/quant/iq2 (fixtures/gen/gen_quant_iq2.sh; see the README there).

use std::path::PathBuf;
use weightport_quant::{dequantize, quantize_rows, requires_imatrix, DType, QuantError};

/// The types with a row kernel here, with their fixture name and bytes per 256 values.
const TYPES: &[(&str, DType, usize)] = &[
    ("iq2_xxs", DType::IQ2_XXS, 66),
    ("iq2_xs", DType::IQ2_XS, 74),
    ("iq2_s", DType::IQ2_S, 82),
    ("iq1_s", DType::IQ1_S, 50),
    ("iq1_m", DType::IQ1_M, 56),
];

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/good/quant/iq2")
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn floats(name: &str) -> Vec<f32> {
    bytemuck_f32(&read(name))
}

fn bytemuck_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

struct Case {
    name: String,
    n_per_row: usize,
    nrows: usize,
}

fn cases() -> Vec<Case> {
    let txt = String::from_utf8(read("cases.txt")).unwrap();
    txt.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Case {
                name: f[0].to_string(),
                n_per_row: f[1].parse().unwrap(),
                nrows: f[2].parse().unwrap(),
            }
        })
        .collect()
}

/// Every case of every type, byte for byte, with the given kernel build.
fn check_all(portable: bool) {
    weightport_quant::set_portable_only(portable);
    let (x, w) = (floats("input.f32"), floats("imatrix.f32"));
    let cases = cases();
    assert_eq!(cases.len(), 20);
    for &(name, dtype, bytes) in TYPES {
        let want = read(&format!("{name}.q"));
        let (mut ox, mut ow, mut oq, mut bad) = (0, 0, 0, Vec::new());
        for c in &cases {
            let n = c.n_per_row * c.nrows;
            let qb = n / 256 * bytes;
            let mut got = vec![0u8; qb];
            let imat = &w[ow..ow + c.n_per_row];
            quantize_rows(dtype, &x[ox..ox + n], &mut got, c.n_per_row, Some(imat)).unwrap();
            if got != want[oq..oq + qb] {
                let blk = (0..qb / bytes)
                    .find(|&b| got[b * bytes..][..bytes] != want[oq + b * bytes..][..bytes]);
                bad.push(format!("{} (first differing block {blk:?})", c.name));
            }
            (ox, ow, oq) = (ox + n, ow + c.n_per_row, oq + qb);
        }
        assert_eq!(oq, want.len(), "{name}: fixture size");
        assert!(
            bad.is_empty(),
            "{name} (portable={portable}) differs from ggml in: {bad:?}"
        );
    }
    weightport_quant::set_portable_only(false);
}

#[test]
fn identical_to_ggml() {
    check_all(false);
}

#[test]
fn identical_to_ggml_portable() {
    check_all(true);
}

/// IQ2_S and IQ1_M quantize without an importance matrix too (their ggml quantizers weight
/// by the values themselves then): byte for byte as `ggml_quantize_chunk(…, NULL)`.
#[test]
fn without_imatrix_identical_to_ggml() {
    let x = floats("input.f32");
    for (name, dtype, bytes) in [("iq2_s", DType::IQ2_S, 82), ("iq1_m", DType::IQ1_M, 56)] {
        let want = read(&format!("{name}.noimatrix.q"));
        let (mut ox, mut oq) = (0, 0);
        for c in cases() {
            let n = c.n_per_row * c.nrows;
            let qb = n / 256 * bytes;
            let mut got = vec![0u8; qb];
            quantize_rows(dtype, &x[ox..ox + n], &mut got, c.n_per_row, None).unwrap();
            assert!(
                got == want[oq..oq + qb],
                "{name} without imatrix differs in {}",
                c.name
            );
            (ox, oq) = (ox + n, oq + qb);
        }
        assert_eq!(oq, want.len());
    }
}

/// Non-finite and overflowing inputs: where ggml writes a row we write the same bytes; where
/// it aborts we return `GridSearch`.
#[test]
fn non_finite_as_ggml_or_error() {
    let (x, w) = (floats("nonfinite.f32"), floats("nonfinite_imatrix.f32"));
    let txt = String::from_utf8(read("nonfinite.txt")).unwrap();
    let mut checked = 0;
    for &(name, dtype, bytes) in TYPES {
        let want = read(&format!("{name}.nonfinite.q"));
        let outcomes: Vec<(&str, &str)> = txt
            .lines()
            .filter(|l| l.starts_with(&format!("{name} ")))
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f[1], f[2])
            })
            .collect();
        assert_eq!(outcomes.len() * 256, x.len());
        for (k, (case, outcome)) in outcomes.into_iter().enumerate() {
            let mut got = vec![0u8; bytes];
            let r = quantize_rows(
                dtype,
                &x[256 * k..256 * k + 256],
                &mut got,
                256,
                Some(&w[256 * k..256 * k + 256]),
            );
            match outcome {
                "ok" => {
                    r.unwrap_or_else(|e| panic!("{name} {case}: ggml writes a row, we fail: {e}"));
                    assert_eq!(got, want[bytes * k..bytes * (k + 1)], "{name} {case}");
                }
                "abort" => assert!(
                    matches!(r, Err(QuantError::GridSearch { dtype: d, row: 0, block: 0 }) if d == dtype),
                    "{name} {case}: ggml aborts, we give {r:?}"
                ),
                o => panic!("outcome {o}"),
            }
            checked += 1;
        }
    }
    assert_eq!(checked, TYPES.len() * 9);
}

/// The types whose ggml quantizer asserts an importance matrix refuse to run without one.
#[test]
fn missing_imatrix_is_an_error() {
    for &(name, dtype, bytes) in TYPES {
        if !requires_imatrix(dtype) {
            continue;
        }
        let mut out = vec![0u8; bytes];
        let e = quantize_rows(dtype, &[0.5; 256], &mut out, 256, None).unwrap_err();
        assert_eq!(e, QuantError::MissingImportance { dtype }, "{name}");
        assert!(e.to_string().contains("importance matrix"), "{e}");
    }
    assert!(
        requires_imatrix(DType::IQ2_XXS)
            && requires_imatrix(DType::IQ2_XS)
            && requires_imatrix(DType::IQ1_S)
    );
    assert!(!requires_imatrix(DType::IQ2_S) && !requires_imatrix(DType::IQ1_M));
}

/// dequantize(quantize(x)) is close to x: relative RMS error per type on normal data, weighted
/// by the imatrix that was used, below a bound well above what these bit widths give.
#[test]
fn round_trip_is_close() {
    let (x, w) = (floats("input.f32"), floats("imatrix.f32"));
    let n = 256 * 4; // case "normal": 4 rows of 256, imatrix all 1
    for &(name, dtype, bytes) in TYPES {
        let mut q = vec![0u8; n / 256 * bytes];
        quantize_rows(dtype, &x[..n], &mut q, 256, Some(&w[..256])).unwrap();
        let mut y = vec![0f32; n];
        dequantize(dtype, &q, &mut y).unwrap();
        let err: f64 = x[..n]
            .iter()
            .zip(&y)
            .map(|(a, b)| f64::from(a - b).powi(2))
            .sum();
        let norm: f64 = x[..n].iter().map(|a| f64::from(*a).powi(2)).sum();
        let rel = (err / norm).sqrt();
        let bound = if name.starts_with("iq1") { 0.75 } else { 0.6 };
        assert!(rel < bound, "{name}: relative RMS error {rel}");
        assert!(rel > 0.05, "{name}: implausibly exact {rel}");
    }
}
