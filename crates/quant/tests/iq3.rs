//! IQ3_XXS, IQ3_S, IQ4_NL and IQ4_XS with and without an importance matrix, against ggml's
//! `ggml_quantize_chunk` output committed in fixtures/good/quant/iq3 (see the README there and
//! fixtures/gen/quant_iq3_ref.c): identical bytes for every case ggml completes, and
//! [`QuantError::GridSearch`] naming a super-block with non-finite values for every case where
//! ggml aborts. Both builds of the kernels (AVX2 where available, and portable).

use std::collections::HashMap;
use std::path::PathBuf;
use weightport_quant::{quantize, quantize_rows, set_portable_only, DType, QuantError};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/good/quant/iq3")
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

struct Input {
    n_per_row: usize,
    nrows: usize,
    offset: usize,
}

struct Output {
    dtype: String,
    input: String,
    imatrix: String,
    ok: bool,
    offset: usize,
    len: usize,
}

struct Manifest {
    inputs: HashMap<String, Input>,
    imatrices: HashMap<(String, usize), usize>,
    outputs: Vec<Output>,
}

fn manifest() -> Manifest {
    let text = String::from_utf8(read("manifest.txt")).unwrap();
    let mut m = Manifest {
        inputs: HashMap::new(),
        imatrices: HashMap::new(),
        outputs: Vec::new(),
    };
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| f[i].parse::<usize>().unwrap();
        match f[0] {
            "input" => {
                let input = Input {
                    n_per_row: num(2),
                    nrows: num(3),
                    offset: num(4),
                };
                m.inputs.insert(f[1].to_string(), input);
            }
            "imatrix" => {
                m.imatrices.insert((f[1].to_string(), num(2)), num(3));
            }
            "output" => m.outputs.push(Output {
                dtype: f[1].to_string(),
                input: f[2].to_string(),
                imatrix: f[3].to_string(),
                ok: f[4] == "ok",
                offset: num(5),
                len: num(6),
            }),
            _ => panic!("manifest line {line:?}"),
        }
    }
    m
}

/// The first super-block (256 values) of `x` that contains a NaN or ±inf.
fn first_nonfinite_block(x: &[f32]) -> Option<usize> {
    x.iter().position(|v| !v.is_finite()).map(|i| i / 256 * 256)
}

fn check_type(name: &str, dtype: DType) {
    let m = manifest();
    let inputs = f32s(&read("inputs.f32"));
    let imatrix = f32s(&read("imatrix.f32"));
    let expected = read(&format!("{name}.q"));
    let (mut ok, mut aborts) = (0, 0);
    for out in m.outputs.iter().filter(|o| o.dtype == name) {
        let inp = &m.inputs[&out.input];
        let n = inp.n_per_row;
        let x = &inputs[inp.offset..inp.offset + n * inp.nrows];
        let w = (out.imatrix != "none").then(|| {
            let at = m.imatrices[&(out.imatrix.clone(), n)];
            &imatrix[at..at + n]
        });
        let bytes = expected_len(dtype, x.len());
        let case = format!("{name} {} imatrix {}", out.input, out.imatrix);
        for portable in [false, true] {
            set_portable_only(portable);
            let mut y = vec![0xA5u8; bytes];
            let got = quantize_rows(dtype, x, &mut y, n, w);
            if out.ok {
                got.unwrap_or_else(|e| panic!("{case} (portable {portable}): {e}"));
                let want = &expected[out.offset..out.offset + out.len];
                assert_bytes_eq(&y, want, &case, portable);
                if w.is_none() {
                    // the no-imatrix entry point writes the same bytes
                    let mut y2 = vec![0x5Au8; bytes];
                    quantize(dtype, x, &mut y2).unwrap();
                    assert_bytes_eq(&y2, want, &format!("{case} via quantize"), portable);
                }
            } else {
                match got {
                    Err(QuantError::GridSearch {
                        dtype: d,
                        row,
                        block,
                    }) => {
                        assert_eq!(d, dtype);
                        let element = row * n + block * 256;
                        // ggml aborts in the first super-block it cannot do; ours names it
                        let first = first_nonfinite_block(x);
                        assert!(
                            first.is_none_or(|f| element >= f),
                            "{case}: error at element {element}, first non-finite block {first:?}"
                        );
                    }
                    other => panic!("{case} (portable {portable}): ggml aborts, ours {other:?}"),
                }
            }
        }
        set_portable_only(false);
        if out.ok {
            ok += 1;
        } else {
            aborts += 1;
        }
    }
    assert!(ok >= 50, "{name}: only {ok} cases");
    eprintln!("{name}: {ok} cases byte-identical, {aborts} ggml aborts refused");
}

fn expected_len(dtype: DType, elems: usize) -> usize {
    let (e, b) = match dtype {
        DType::IQ4_NL => (32, 18),
        DType::IQ4_XS => (256, 136),
        DType::IQ3_XXS => (256, 98),
        DType::IQ3_S => (256, 110),
        _ => unreachable!(),
    };
    elems / e * b
}

fn assert_bytes_eq(ours: &[u8], ggml: &[u8], case: &str, portable: bool) {
    assert_eq!(ours.len(), ggml.len(), "{case}: length");
    if let Some(i) = ours.iter().zip(ggml).position(|(a, b)| a != b) {
        panic!(
            "{case} (portable {portable}): byte {i} ours {:#04x} ggml {:#04x}",
            ours[i], ggml[i]
        );
    }
}

#[test]
fn iq4_nl_matches_ggml() {
    check_type("iq4_nl", DType::IQ4_NL);
}

#[test]
fn iq4_xs_matches_ggml() {
    check_type("iq4_xs", DType::IQ4_XS);
}

#[test]
fn iq3_xxs_matches_ggml() {
    check_type("iq3_xxs", DType::IQ3_XXS);
}

#[test]
fn iq3_s_matches_ggml() {
    check_type("iq3_s", DType::IQ3_S);
}

/// The first `n` values of the harness's bench input (sums of 4 xorshift uniforms; the same
/// f32 operations as `bench_input` in quant_iq3_ref.c).
fn bench_input(n: usize) -> Vec<f32> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            let mut acc = 0f32;
            for _ in 0..4 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                acc += (s >> 40) as f32 / (1u32 << 24) as f32 - 0.5;
            }
            acc
        })
        .collect()
}

fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// 1 Mi values per case (4096 super-blocks): the FNV-1a 64 of our output equals that of
/// ggml's, recorded in big_hashes.txt, for every type, row length and imatrix.
#[test]
fn big_inputs_hash_like_ggml() {
    let x = bench_input(1 << 20);
    let text = String::from_utf8(read("big_hashes.txt")).unwrap();
    let mut cases = 0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let dtype = DType::from_name(&f[0].to_uppercase()).unwrap();
        let n: usize = f[1].parse().unwrap();
        let w: Vec<f32> = (0..n)
            .map(|i| 0.5 + ((i * 37) % 101) as f32 / 50.0)
            .collect();
        let w = (f[2] == "bench").then_some(&w[..]);
        let mut y = vec![0u8; expected_len(dtype, x.len())];
        quantize_rows(dtype, &x, &mut y, n, w).unwrap();
        assert_eq!(format!("{:016x}", fnv1a(&y)), f[3], "{line}");
        cases += 1;
    }
    assert_eq!(cases, 16);
}
