//! Compares the kernels with reference outputs committed in fixtures/good/quant (produced by
//! ggml's C code and by torch; see the README there): quantized bytes must be identical and
//! dequantized/cast values identical bit for bit (NaN payloads included).

use std::path::PathBuf;
use weightport_quant::cast::{self, Bf16Rounding, CastRule, F16Nan};
use weightport_quant::{can_dequantize, can_quantize, dequantize, quantize, DType};

/// Elements per input distribution in input.f32 (see fixtures/gen/quant_ref.c).
const DIST_ELEMS: usize = 1024;
const DISTS: &[&str] = &[
    "normal",
    "student_t2",
    "tiny_1e-30",
    "zeros",
    "constant",
    "f16_edges",
    "mixed_scales",
    "positive",
    "integers",
    "sparse",
    "denormal_f32",
    "huge_1e7",
];

const TYPES: &[(&str, DType)] = &[
    ("q4_0", DType::Q4_0),
    ("q4_1", DType::Q4_1),
    ("q5_0", DType::Q5_0),
    ("q5_1", DType::Q5_1),
    ("q8_0", DType::Q8_0),
    ("q8_1", DType::Q8_1),
    ("q2_k", DType::Q2_K),
    ("q3_k", DType::Q3_K),
    ("q4_k", DType::Q4_K),
    ("q5_k", DType::Q5_K),
    ("q6_k", DType::Q6_K),
    ("q8_k", DType::Q8_K),
    ("tq1_0", DType::TQ1_0),
    ("tq2_0", DType::TQ2_0),
    ("mxfp4", DType::MXFP4),
    ("nvfp4", DType::NVFP4),
    ("q1_0", DType::Q1_0),
    ("q2_0", DType::Q2_0),
    ("iq2_xxs", DType::IQ2_XXS),
    ("iq2_xs", DType::IQ2_XS),
    ("iq2_s", DType::IQ2_S),
    ("iq3_xxs", DType::IQ3_XXS),
    ("iq3_s", DType::IQ3_S),
    ("iq1_s", DType::IQ1_S),
    ("iq1_m", DType::IQ1_M),
    ("iq4_nl", DType::IQ4_NL),
    ("iq4_xs", DType::IQ4_XS),
];

/// Quantizers whose ggml references live in their own tests (tests/iq3.rs and tests/iq2.rs:
/// ggml aborts on some of `nonfinite.f32`, and the importance matrix matters there).
const OWN_FIXTURES: &[DType] = &[DType::IQ3_XXS, DType::IQ3_S, DType::IQ2_S, DType::IQ1_M];

/// True if `dt` is checked against this directory's `<t>.q` files.
fn quantized_here(dt: DType) -> bool {
    can_quantize(dt) && !OWN_FIXTURES.contains(&dt)
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/good/quant")
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

fn exists(name: &str) -> bool {
    dir().join(name).exists()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn u16s(b: &[u8]) -> Vec<u16> {
    b.chunks_exact(2)
        .map(|c| u16::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn block_shape(d: DType) -> (usize, usize) {
    match d.layout() {
        weightport_core::Layout::Block { elems, bytes } => (elems as usize, bytes as usize),
        _ => unreachable!(),
    }
}

/// Index of the first differing f32 bit pattern, if any.
fn first_f32_diff(a: &[f32], b: &[f32]) -> Option<usize> {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits())
}

#[test]
fn quantize_matches_ggml_ref_byte_for_byte() {
    let input = f32s(&read("input.f32"));
    assert_eq!(input.len(), DIST_ELEMS * DISTS.len());
    let mut failures = Vec::new();
    let mut checked = 0;
    for &(name, dt) in TYPES {
        if !quantized_here(dt) {
            assert!(
                !exists(&format!("{name}.q")),
                "{name}: ggml fixture exists but no quantizer"
            );
            continue;
        }
        let want = read(&format!("{name}.q"));
        let (elems, bytes) = block_shape(dt);
        let mut got = vec![0u8; want.len()];
        quantize(dt, &input, &mut got).unwrap();
        checked += 1;
        // report per distribution, first bad block
        for (di, dist) in DISTS.iter().enumerate() {
            let lo = di * DIST_ELEMS / elems * bytes;
            let hi = (di + 1) * DIST_ELEMS / elems * bytes;
            if let Some(p) = (lo..hi).find(|&i| got[i] != want[i]) {
                let blk = p / bytes;
                failures.push(format!(
                    "{name} [{dist}] block {blk}: byte {} ours {:#04x} ggml {:#04x}\n  ours {:02x?}\n  ggml {:02x?}",
                    p % bytes,
                    got[p],
                    want[p],
                    &got[blk * bytes..(blk + 1) * bytes],
                    &want[blk * bytes..(blk + 1) * bytes]
                ));
            }
        }
    }
    assert_eq!(checked, 20);
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn dequantize_matches_ggml_bit_for_bit() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for &(name, dt) in TYPES {
        for src in [format!("{name}.q"), format!("{name}.rand.q")] {
            let out = src.replace(".q", ".deq.f32");
            if !exists(&out) {
                continue;
            }
            assert!(
                can_dequantize(dt),
                "{name}: fixture exists but no dequantizer"
            );
            let q = read(&src);
            let want = f32s(&read(&out));
            let mut got = vec![0f32; want.len()];
            dequantize(dt, &q, &mut got).unwrap();
            checked += 1;
            if let Some(i) = first_f32_diff(&got, &want) {
                failures.push(format!(
                    "{src}: element {i} (block {}) ours {:#010x} ({}) ggml {:#010x} ({})",
                    i / block_shape(dt).0,
                    got[i].to_bits(),
                    got[i],
                    want[i].to_bits(),
                    want[i]
                ));
            }
        }
    }
    // 19 types dequantize quantizer output, 26 types dequantize random blocks
    assert_eq!(checked, 19 + 26);
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn casts_match_ggml() {
    let x = f32s(&read("ggml_cast.in.f32"));
    let f16_want = u16s(&read("ggml_cast.f16"));
    let bf16_want = u16s(&read("ggml_cast.bf16"));
    let mut got = vec![0u16; x.len()];
    cast::cast_f32_to_f16(&x, &mut got, F16Nan::Canonical).unwrap();
    for i in 0..x.len() {
        assert_eq!(got[i], f16_want[i], "f16 of {:#010x}", x[i].to_bits());
    }
    cast::cast_f32_to_bf16(&x, &mut got, Bf16Rounding::Ggml).unwrap();
    for i in 0..x.len() {
        assert_eq!(got[i], bf16_want[i], "bf16 of {:#010x}", x[i].to_bits());
    }
    let all: Vec<u16> = (0..=u16::MAX).collect();
    let mut wide = vec![0f32; 65536];
    let mut want = f32s(&read("ggml_cast.f16_to_f32.pos"));
    want.extend(f32s(&read("ggml_cast.f16_to_f32.neg")));
    cast::cast_f16_to_f32(&all, &mut wide).unwrap();
    assert_eq!(first_f32_diff(&wide, &want), None, "f16 -> f32");
    let mut want = f32s(&read("ggml_cast.bf16_to_f32.pos"));
    want.extend(f32s(&read("ggml_cast.bf16_to_f32.neg")));
    cast::cast_bf16_to_f32(&all, &mut wide).unwrap();
    assert_eq!(first_f32_diff(&wide, &want), None, "bf16 -> f32");
}

fn u32s(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn casts_match_torch() {
    let x: Vec<f32> = u32s(&read("torch_cast.in.u32"))
        .into_iter()
        .map(f32::from_bits)
        .collect();
    let f16_want = u16s(&read("torch_cast.f16.u16"));
    let bf16_want = u16s(&read("torch_cast.bf16.u16"));
    let mut got = vec![0u16; x.len()];
    cast::cast_f32_to_f16(&x, &mut got, F16Nan::KeepPayload).unwrap();
    let bad: Vec<_> = (0..x.len()).filter(|&i| got[i] != f16_want[i]).collect();
    assert!(
        bad.is_empty(),
        "f16: {} mismatches, first input {:#010x}: ours {:#06x} torch {:#06x}",
        bad.len(),
        x[bad[0]].to_bits(),
        got[bad[0]],
        f16_want[bad[0]]
    );
    // scalar path too
    for (i, &v) in x.iter().enumerate() {
        assert_eq!(cast::f32_to_f16(v, F16Nan::KeepPayload), f16_want[i]);
    }
    let np_want = u16s(&read("numpy_cast.f16.u16"));
    let mut np = vec![0u16; x.len()];
    cast::cast_f32_to_f16(&x, &mut np, F16Nan::Numpy).unwrap();
    let bad: Vec<_> = (0..x.len()).filter(|&i| np[i] != np_want[i]).collect();
    assert!(
        bad.is_empty(),
        "numpy f16: {} mismatches, first input {:#010x}: ours {:#06x} numpy {:#06x}",
        bad.len(),
        x[bad[0]].to_bits(),
        np[bad[0]],
        np_want[bad[0]]
    );
    cast::cast_f32_to_bf16(&x, &mut got, Bf16Rounding::Torch).unwrap();
    let bad: Vec<_> = (0..x.len()).filter(|&i| got[i] != bf16_want[i]).collect();
    assert!(
        bad.is_empty(),
        "bf16: {} mismatches, first input {:#010x}: ours {:#06x} torch {:#06x}",
        bad.len(),
        x[bad[0]].to_bits(),
        got[bad[0]],
        bf16_want[bad[0]]
    );

    let w = u16s(&read("torch_widen.in.u16"));
    let mut wide = vec![0f32; w.len()];
    cast::cast_f16_to_f32(&w, &mut wide).unwrap();
    let want = u32s(&read("torch_widen.f16.u32"));
    for i in 0..w.len() {
        assert_eq!(wide[i].to_bits(), want[i], "f16 {:#06x} -> f32", w[i]);
        assert_eq!(cast::f16_to_f32(w[i]).to_bits(), want[i]);
    }
    // numpy's widening (convert_hf_to_gguf.py's F32 of an F16 tensor) keeps signalling NaNs.
    let want = u32s(&read("numpy_widen.f16.u32"));
    let bytes: Vec<u8> = w.iter().flat_map(|h| h.to_le_bytes()).collect();
    cast::decode_f32(DType::F16, &bytes, &mut wide, CastRule::Numpy).unwrap();
    for i in 0..w.len() {
        assert_eq!(
            wide[i].to_bits(),
            want[i],
            "numpy: f16 {:#06x} -> f32",
            w[i]
        );
        assert_eq!(
            cast::f16_to_f32_by(w[i], CastRule::Numpy).to_bits(),
            want[i]
        );
    }
    cast::cast_bf16_to_f32(&w, &mut wide).unwrap();
    let want = u32s(&read("torch_widen.bf16.u32"));
    for i in 0..w.len() {
        assert_eq!(wide[i].to_bits(), want[i], "bf16 {:#06x} -> f32", w[i]);
    }
}

/// Finite values round the same way in both flavours; only NaN differs.
#[test]
fn torch_and_ggml_flavours_differ_only_for_nan() {
    let x: Vec<f32> = u32s(&read("torch_cast.in.u32"))
        .into_iter()
        .map(f32::from_bits)
        .collect();
    for &v in &x {
        let same_f16 =
            cast::f32_to_f16(v, F16Nan::KeepPayload) == cast::f32_to_f16(v, F16Nan::Canonical);
        let same_bf16 =
            cast::f32_to_bf16(v, Bf16Rounding::Torch) == cast::f32_to_bf16(v, Bf16Rounding::Ggml);
        if !v.is_nan() {
            assert!(same_f16 && same_bf16, "{:#010x}", v.to_bits());
        }
    }
}

// ---- the "big" check: 1 Mi elements from fixtures/gen/quant_ref.c's integer-only generator,
// compared through FNV-1a 64 hashes in big_hashes.txt ----

const BIG_ELEMS: usize = 1 << 20;

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 * (1.0 / 16_777_216.0) - 0.5
    }
}

fn big_input() -> Vec<f32> {
    let mut r = SplitMix(0xB16C_0DE5);
    let mut x = Vec::with_capacity(BIG_ELEMS);
    for _ in 0..BIG_ELEMS / 32 {
        let e = (r.next() % 40) as i32 - 30;
        let scale = f32::from_bits(((127 + e) as u32) << 23);
        let kind = r.next() % 8;
        let c = r.uniform();
        for _ in 0..32 {
            let mut a = match kind {
                0..=4 => {
                    let mut a = r.uniform();
                    a += r.uniform();
                    a += r.uniform();
                    a + r.uniform()
                }
                5 => r.uniform() + 0.5,
                6 => c,
                _ => {
                    if r.next().is_multiple_of(4) {
                        r.uniform()
                    } else {
                        0.0
                    }
                }
            };
            if r.next().is_multiple_of(64) {
                a *= 64.0;
            }
            x.push(a * scale);
        }
    }
    x
}

fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn f32_bytes(v: &[f32]) -> impl Iterator<Item = u8> + '_ {
    v.iter().flat_map(|f| f.to_le_bytes())
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "seconds even with the kernels at opt-level 2: .ci/run runs it with --ignored"
)]
fn big_random_input_matches_ggml_hashes() {
    let text = String::from_utf8(read("big_hashes.txt")).unwrap();
    let x = big_input();
    let hx = fnv1a(f32_bytes(&x));
    let mut failures = Vec::new();
    let mut checked = 0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let dt = TYPES.iter().find(|t| t.0 == f[0]).unwrap().1;
        let want = |i: usize| u64::from_str_radix(f[i], 16).unwrap();
        assert_eq!(hx, want(1), "input generator differs from the C harness");
        let (elems, bytes) = block_shape(dt);
        let mut q = vec![0u8; BIG_ELEMS / elems * bytes];
        // Both builds of the kernels: CPU-specific (AVX2 where available) and portable. The
        // quant crate is built at opt-level 2 in the dev profile too (Cargo.toml), so a debug
        // run of this test takes seconds, with overflow checks on.
        for portable in [true, false] {
            weightport_quant::set_portable_only(portable);
            quantize(dt, &x, &mut q).unwrap();
            if fnv1a(q.iter().copied()) != want(2) {
                failures.push(format!(
                    "{}: quantized bytes differ (portable build: {portable})",
                    f[0]
                ));
            }
        }
        if can_dequantize(dt) {
            let mut y = vec![0f32; BIG_ELEMS];
            dequantize(dt, &q, &mut y).unwrap();
            if fnv1a(f32_bytes(&y)) != want(3) {
                failures.push(format!("{}: dequantized values differ", f[0]));
            }
        }
        checked += 1;
    }
    assert_eq!(checked, 20);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// NaN and ±inf inputs: ggml has no special cases, so this checks that we reproduce its
/// (x86-64) behaviour there too: NaN comparisons, inf scales, float → int conversions.
#[test]
fn nonfinite_inputs_match_ggml() {
    let x = f32s(&read("nonfinite.f32"));
    let mut failures = Vec::new();
    for &(name, dt) in TYPES {
        if !quantized_here(dt) {
            continue;
        }
        let want = read(&format!("{name}.nonfinite.q"));
        let (elems, bytes) = block_shape(dt);
        let mut got = vec![0u8; want.len()];
        for portable in [true, false] {
            weightport_quant::set_portable_only(portable);
            quantize(dt, &x, &mut got).unwrap();
            let Some(p) = (0..got.len()).find(|&i| got[i] != want[i]) else {
                continue;
            };
            let blk = p / bytes;
            failures.push(format!(
                "{name} (portable {portable}) block {blk} (elements {}..): byte {} ours {:#04x} ggml {:#04x}",
                blk * elems,
                p % bytes,
                got[p],
                want[p]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} types differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Blocks are independent: quantizing per block, or in odd-sized chunks (exercising the
/// kernels' batch tails), gives the same bytes as one call.
#[test]
fn chunked_calls_give_the_same_bytes() {
    let input = f32s(&read("input.f32"));
    for &(name, dt) in TYPES {
        if !quantized_here(dt) {
            continue;
        }
        let want = read(&format!("{name}.q"));
        let (elems, bytes) = block_shape(dt);
        for per in [1usize, 3, 5] {
            let mut got = vec![0u8; want.len()];
            for (x, q) in input.chunks(per * elems).zip(got.chunks_mut(per * bytes)) {
                quantize(dt, x, q).unwrap();
            }
            assert!(
                got == want,
                "{name}: chunks of {per} blocks differ from ggml"
            );
        }
    }
}

/// Extra sanity check beyond the reference comparison: on normal data, every quantizer's
/// round trip stays within a per-type fraction of the input's RMS.
#[test]
fn round_trip_error_is_bounded() {
    let x: Vec<f32> = f32s(&read("input.f32"))[..DIST_ELEMS].to_vec(); // the "normal" distribution
    let rms = (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt();
    for &(name, dt) in TYPES {
        if !(can_quantize(dt) && can_dequantize(dt)) {
            continue;
        }
        let (elems, bytes) = block_shape(dt);
        let mut q = vec![0u8; x.len() / elems * bytes];
        quantize(dt, &x, &mut q).unwrap();
        let mut y = vec![0f32; x.len()];
        dequantize(dt, &q, &mut y).unwrap();
        let err = (x
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f32>()
            / x.len() as f32)
            .sqrt();
        let bound = match name {
            "q8_0" | "q8_k" => 0.01,
            "q6_k" => 0.02,
            "q5_0" | "q5_1" | "q5_k" => 0.05,
            "q4_0" | "q4_1" | "q4_k" | "iq4_nl" | "iq4_xs" | "mxfp4" | "nvfp4" => 0.12,
            "q3_k" => 0.25,
            "q2_k" => 0.45,
            _ => 1.0, // ternary and 1-bit types: only a loose bound
        };
        assert!(
            err / rms < bound,
            "{name}: relative RMS error {}",
            err / rms
        );
    }
}
