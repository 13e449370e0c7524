//! `quantize_rows` with an importance matrix against ggml's `ggml_quantize_chunk(type, x, …,
//! imatrix)` for the K-quants and legacy types: the reference bytes in
//! fixtures/good/quant/weighted/ come from ggml's C (fixtures/gen/gen_quant_weighted.sh; cases
//! in cases.txt, described in the README there). Checked with the AVX2 build and the portable
//! one.

use std::path::PathBuf;
use weightport_quant::{
    can_quantize, quantize, quantize_rows, set_portable_only, uses_imatrix, DType,
};

/// The types whose ggml quantizer reads `quant_weights`, by fixture name.
const WEIGHTED: &[(&str, DType)] = &[
    ("q2_k", DType::Q2_K),
    ("q3_k", DType::Q3_K),
    ("q4_k", DType::Q4_K),
    ("q5_k", DType::Q5_K),
    ("q6_k", DType::Q6_K),
    ("q4_0", DType::Q4_0),
    ("q4_1", DType::Q4_1),
    ("q5_0", DType::Q5_0),
    ("q5_1", DType::Q5_1),
];

/// Byte offsets of the f16 scale fields in a block of `dt` (blocks.rs layouts).
fn f16_fields(dt: DType) -> &'static [usize] {
    match dt {
        DType::Q2_K => &[80, 82],
        DType::Q3_K => &[108],
        DType::Q6_K => &[208],
        DType::Q4_K | DType::Q5_K | DType::Q4_1 | DType::Q5_1 => &[0, 2],
        _ => &[0], // Q4_0, Q5_0
    }
}

/// The first byte where `got` and ggml's `want` differ, other than the sign of an f16 field
/// that is NaN in both. Which of two NaN operands an IEEE operation returns is unspecified
/// (x86 returns the first, and compilers commute operands of `+`/`*` freely), so when NaN
/// inputs meet NaN weights the sign of a NaN scale depends on code generation: our AVX2 and
/// portable builds differ from each other there (the `bits` case). Everything else, the NaN-ness
/// of every scale included, must be identical.
fn first_diff(dt: DType, got: &[u8], want: &[u8]) -> Option<usize> {
    let bytes = out_len(dt, dt.layout_block_elems());
    let is_nan = |b: &[u8], o: usize| {
        let h = u16::from_le_bytes([b[o], b[o + 1]]);
        h & 0x7C00 == 0x7C00 && h & 0x03FF != 0
    };
    for (k, (g, w)) in got.chunks(bytes).zip(want.chunks(bytes)).enumerate() {
        for i in (0..bytes).filter(|&i| g[i] != w[i]) {
            let in_nan_f16 = f16_fields(dt)
                .iter()
                .any(|&o| (o..o + 2).contains(&i) && is_nan(g, o) && is_nan(w, o) && g[o] == w[o]);
            if !in_nan_f16 {
                return Some(k * bytes + i);
            }
        }
    }
    None
}

/// Types ggml's `quantize_<type>` quantizes while ignoring `quant_weights` (the harness checks
/// that ggml's bytes with and without the imatrix are equal for every case).
const IGNORING: &[DType] = &[
    DType::Q8_0,
    DType::TQ1_0,
    DType::TQ2_0,
    DType::MXFP4,
    DType::NVFP4,
    DType::Q1_0,
    DType::Q2_0,
];

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/good/quant/weighted")
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

struct Case {
    name: String,
    nrows: usize,
    n_per_row: usize,
    x: Vec<f32>,
    imat: Vec<f32>,
}

fn cases() -> Vec<Case> {
    let list = String::from_utf8(read("cases.txt")).unwrap();
    let cases: Vec<Case> = list
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let name = f[0].to_string();
            let x = f32s(&read(&format!("{name}.x.f32")));
            let imat = f32s(&read(&format!("{name}.imat.f32")));
            let (nrows, n_per_row) = (f[1].parse().unwrap(), f[2].parse().unwrap());
            assert_eq!(x.len(), nrows * n_per_row, "{name}");
            assert_eq!(imat.len(), n_per_row, "{name}");
            Case {
                name,
                nrows,
                n_per_row,
                x,
                imat,
            }
        })
        .collect();
    assert_eq!(
        cases.len(),
        24,
        "cases.txt lists the 24 cases of the harness"
    );
    cases
}

fn out_len(dt: DType, elems: usize) -> usize {
    match dt.layout() {
        weightport_core::Layout::Block { elems: e, bytes } => elems / e as usize * bytes as usize,
        _ => unreachable!(),
    }
}

fn check_all_weighted(portable: bool) {
    set_portable_only(portable);
    let mut checked = 0;
    for c in cases() {
        for &(tn, dt) in WEIGHTED {
            if !c.n_per_row.is_multiple_of(dt.layout_block_elems()) {
                continue; // rows of whole legacy blocks but not whole super-blocks
            }
            let want = read(&format!("{}.{tn}.q", c.name));
            let mut got = vec![0u8; out_len(dt, c.x.len())];
            quantize_rows(dt, &c.x, &mut got, c.n_per_row, Some(&c.imat)).unwrap();
            assert_eq!(got.len(), want.len(), "{} {tn}", c.name);
            if let Some(i) = first_diff(dt, &got, &want) {
                let row_bytes = got.len() / c.nrows;
                panic!(
                    "{} {tn} (portable={portable}): byte {i} (row {}, offset {} in row) is {:#04x}, ggml {:#04x}",
                    c.name,
                    i / row_bytes,
                    i % row_bytes,
                    got[i],
                    want[i]
                );
            }
            checked += 1;
        }
    }
    set_portable_only(false);
    assert_eq!(checked, 22 * WEIGHTED.len() + 2 * 4);
}

#[test]
fn weighted_equals_ggml_avx2() {
    check_all_weighted(false);
}

#[test]
fn weighted_equals_ggml_portable() {
    check_all_weighted(true);
}

/// The fixtures exercise the weights: for the normal data ggml's imatrix bytes differ from the
/// unweighted ones for every weighted type, so matching them is not matching `quantize`.
#[test]
fn fixtures_depend_on_the_imatrix() {
    let c = cases()
        .into_iter()
        .find(|c| c.name == "normal_skew")
        .unwrap();
    for &(tn, dt) in WEIGHTED {
        let want = read(&format!("{}.{tn}.q", c.name));
        let mut plain = vec![0u8; want.len()];
        quantize(dt, &c.x, &mut plain).unwrap();
        assert_ne!(plain, want, "{tn}");
    }
}

/// Types whose ggml quantizer ignores the imatrix write what `quantize` writes; ggml's
/// bytes for those (with imatrix == without, checked by the harness) are the unweighted
/// fixtures of tests/reference.rs, which `quantize` is checked against there.
#[test]
fn ignoring_types_write_the_unweighted_bytes() {
    for c in cases() {
        for &dt in IGNORING {
            if !c.n_per_row.is_multiple_of(dt.layout_block_elems()) {
                continue;
            }
            assert!(!uses_imatrix(dt), "{dt}");
            let n = out_len(dt, c.x.len());
            let (mut with, mut plain) = (vec![0u8; n], vec![0u8; n]);
            quantize_rows(dt, &c.x, &mut with, c.n_per_row, Some(&c.imat)).unwrap();
            quantize(dt, &c.x, &mut plain).unwrap();
            assert_eq!(with, plain, "{} {dt}", c.name);
        }
    }
    for &(_, dt) in WEIGHTED {
        assert!(uses_imatrix(dt), "{dt}");
    }
}

/// Without an imatrix `quantize_rows` is `quantize` for every type (ggml's `quantize_<type>`
/// with `quant_weights == NULL` is the `_ref` path, which `quantize` reproduces).
#[test]
fn rows_without_imatrix_equal_quantize() {
    for c in cases() {
        for &dt in DType::ALL {
            if !can_quantize(dt) || !c.n_per_row.is_multiple_of(dt.layout_block_elems()) {
                continue;
            }
            let n = out_len(dt, c.x.len());
            let (mut rows, mut plain) = (vec![0u8; n], vec![0u8; n]);
            let by_rows = quantize_rows(dt, &c.x, &mut rows, c.n_per_row, None);
            let whole = quantize(dt, &c.x, &mut plain);
            // where ggml aborts (IQ3 on non-finite values) both refuse
            assert_eq!(by_rows.is_ok(), whole.is_ok(), "{} {dt}", c.name);
            if by_rows.is_ok() {
                assert_eq!(rows, plain, "{} {dt}", c.name);
            }
        }
    }
}

trait BlockElems {
    fn layout_block_elems(self) -> usize;
}

impl BlockElems for DType {
    fn layout_block_elems(self) -> usize {
        match self.layout() {
            weightport_core::Layout::Block { elems, .. } => elems as usize,
            _ => usize::MAX,
        }
    }
}

/// Bad arguments are errors, not panics.
#[test]
fn bad_arguments_are_errors() {
    let x = vec![0.5f32; 512];
    let w = vec![1.0f32; 256];
    let mut y = vec![0u8; out_len(DType::Q4_K, 512)];
    assert!(quantize_rows(DType::Q4_K, &x, &mut y, 256, Some(&w[..255])).is_err());
    assert!(quantize_rows(DType::Q4_K, &x, &mut y, 128, None).is_err());
    assert!(quantize_rows(DType::Q4_K, &x[..300], &mut y, 256, Some(&w)).is_err());
    assert!(quantize_rows(DType::Q4_K, &x, &mut y[..10], 256, Some(&w)).is_err());
    quantize_rows(DType::Q4_K, &x, &mut y, 256, Some(&w)).unwrap();
}

/// Arbitrary bit patterns (NaN payloads, infinities, subnormals, huge values) as values and
/// as weights never panic (this test runs with overflow checks in the test profile). ggml's
/// bytes for the non-finite cases are checked above; here only robustness.
#[test]
fn random_bits_do_not_panic() {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let n_per_row = 512;
    let x: Vec<f32> = (0..32 * n_per_row)
        .map(|_| f32::from_bits(next() as u32))
        .collect();
    let w: Vec<f32> = (0..n_per_row)
        .map(|_| f32::from_bits(next() as u32))
        .collect();
    for &(_, dt) in WEIGHTED {
        for portable in [false, true] {
            set_portable_only(portable);
            let mut y = vec![0u8; out_len(dt, x.len())];
            quantize_rows(dt, &x, &mut y, n_per_row, Some(&w)).unwrap();
        }
    }
    set_portable_only(false);
}
