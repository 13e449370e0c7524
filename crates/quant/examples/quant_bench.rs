//! Single-thread throughput of the importance-matrix quantizers (MB/s of f32 input per CPU
//! second of this thread), on the inputs of the three C reference harnesses; the first argument
//! names the harness whose input is used:
//!
//! ```sh
//! # grid quantizers (IQ2/IQ1) on what `bash fixtures/gen/gen_quant_iq2.sh bench TYPE DIR N_PER_ROW
//! # NROWS` wrote; writes DIR/TYPE.ours.q (compare it with DIR/TYPE.ggml.q)
//! cargo run --release -p weightport-quant --example quant_bench -- iq2 TYPE DIR N_PER_ROW
//! # weighted K-quant and legacy row kernels on what `fixtures/gen/gen_quant_weighted.sh --bench
//! # DIR` wrote, bytes compared with ggml's DIR/bench.<type>.q
//! cargo run --release -p weightport-quant --example quant_bench -- weighted DIR [TYPE ...]
//! # IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS on `fixtures/gen/quant_iq3_ref.c bench`'s input, with the
//! # same output hash (`bash fixtures/gen/gen_quant_iq3.sh bench iq3_xxs 256 16 1`)
//! cargo run --release -p weightport-quant --example quant_bench -- iq3 TYPE N_PER_ROW MiB 0|1
//! ```

use weightport_quant::{quantize_rows, DType};

#[path = "support/timing.rs"]
mod timing;
use timing::timed;

fn f32s(path: &std::path::Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// (elements, bytes) of a block of `dt`; panics for a type that is not a block type.
fn block(dt: DType, name: &str) -> (usize, usize) {
    match dt.layout() {
        weightport_core::Layout::Block { elems, bytes } => (elems as usize, bytes as usize),
        weightport_core::Layout::Bits(_) => panic!("{name} is not a block type"),
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: quant_bench iq2 TYPE DIR N_PER_ROW\n       quant_bench weighted DIR [TYPE ...]\n       quant_bench iq3 TYPE N_PER_ROW MiB IMATRIX(0|1)"
    );
    std::process::exit(2);
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    match a.first().map(String::as_str) {
        Some("iq2") => iq2(&a[1..]),
        Some("weighted") => weighted(&a[1..]),
        Some("iq3") => iq3(&a[1..]),
        _ => usage(),
    }
}

/// The grid quantizers on `gen_quant_iq2.sh bench`'s input; the one-time table build is timed
/// apart.
fn iq2(a: &[String]) {
    let [name, dir, n_per_row] = a else { usage() };
    let dtype = DType::from_name(&name.to_uppercase()).expect("type name");
    let dir = std::path::Path::new(dir);
    let n_per_row: usize = n_per_row.parse().expect("N_PER_ROW");
    let (x, w) = (f32s(&dir.join("bench.f32")), f32s(&dir.join("bench.imat")));
    let (elems, bytes) = block(dtype, name);
    let row_bytes = n_per_row / elems * bytes;
    let mut first = vec![0u8; row_bytes];
    let init =
        timed(|| quantize_rows(dtype, &x[..n_per_row], &mut first, n_per_row, Some(&w)).unwrap());
    let mut q = vec![0u8; x.len() / n_per_row * row_bytes];
    let secs = timed(|| quantize_rows(dtype, &x, &mut q, n_per_row, Some(&w)).unwrap());
    std::fs::write(dir.join(format!("{name}.ours.q")), &q).unwrap();
    println!(
        "ours {name}: {} values in {secs:.3} s = {:.2} MB/s of f32 (thread CPU time; first row incl. table build {init:.3} s)",
        x.len(),
        x.len() as f64 * 4.0 / secs / 1e6
    );
}

/// The imatrix-weighted K-quant and legacy row kernels on `gen_quant_weighted.sh --bench`'s
/// input, with a byte comparison against ggml's output for the same data.
fn weighted(a: &[String]) {
    let Some((dir, names)) = a.split_first() else {
        usage()
    };
    let dir = std::path::PathBuf::from(dir);
    let mut names = names.to_vec();
    if names.is_empty() {
        names = [
            "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
        ]
        .map(String::from)
        .to_vec();
    }
    let x = f32s(&dir.join("bench.x.f32"));
    let w = f32s(&dir.join("bench.imat.f32"));
    let mb = (x.len() * 4) as f64 / 1e6;
    for n in names {
        let dt = DType::from_name(&n).expect("unknown type");
        let weightport_core::Layout::Block { elems, bytes } = dt.layout() else {
            continue;
        };
        if !w.len().is_multiple_of(elems as usize) {
            continue; // rows are not whole blocks of this type
        }
        let mut q = vec![0u8; x.len() / elems as usize * bytes as usize];
        let secs = timed(|| quantize_rows(dt, &x, &mut q, w.len(), Some(&w)).unwrap());
        let want = std::fs::read(dir.join(format!("bench.{}.q", n.to_lowercase())));
        let same = match want {
            Ok(want) if want == q => "bytes equal ggml",
            Ok(_) => "BYTES DIFFER",
            Err(_) => "no ggml output to compare",
        };
        println!(
            "{} weightport {:.1} MB/s ({same})",
            n.to_lowercase(),
            mb / secs
        );
    }
}

/// Sums of 4 xorshift uniforms, as the C harness's `bench_input`.
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

/// IQ3/IQ4 on `quant_iq3_ref.c bench`'s input, printing the same fnv1a hash of the output.
fn iq3(a: &[String]) {
    let [name, n, mib, imat] = a else { usage() };
    let dt = DType::from_name(&name.to_uppercase()).expect("unknown type");
    let n: usize = n.parse().expect("n_per_row");
    let total = mib.parse::<usize>().expect("MiB") << 18;
    let rows = total / n;
    let x = bench_input(total);
    let w: Vec<f32> = (0..n)
        .map(|i| 0.5 + ((i * 37) % 101) as f32 / 50.0)
        .collect();
    let w = (imat == "1").then_some(&w[..]);
    let (elems, bytes) = block(dt, name);
    let mut y = vec![0u8; rows * n / elems * bytes];
    // first use builds the grid tables (as the C side's warm-up call initialises ggml's)
    quantize_rows(dt, &x[..n], &mut y[..n / elems * bytes], n, w).unwrap();
    let dt_s = timed(|| quantize_rows(dt, &x[..rows * n], &mut y, n, w).unwrap());
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in &y {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    println!(
        "ours {name} imatrix={imat}: {:.1} MB/s of f32 ({dt_s:.2} s) fnv1a {h:016x}",
        total as f64 * 4.0 / 1e6 / dt_s
    );
}
