//! Single-thread throughput of the importance-matrix IQ quantizers (IQ3_XXS, IQ3_S, IQ4_NL,
//! IQ4_XS) on the input `fixtures/gen/quant_iq3_ref.c bench` times ggml on, with the same
//! output hash, so the two can be compared side by side:
//!
//! ```sh
//! cargo run --release -p weightport-quant --example iq3_throughput -- iq3_xxs 256 16 1
//! bash fixtures/gen/gen_quant_iq3.sh bench iq3_xxs 256 16 1
//! ```
//!
//! Arguments: type, `n_per_row`, MiB of f32 input, `1` to use an importance matrix.

use std::time::Instant;
use weightport_quant::{quantize_rows, DType};

/// CPU time of this thread in seconds (Linux /proc/thread-self/schedstat); wall time elsewhere.
fn cpu_secs() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(s.split_whitespace().next()?.parse::<f64>().ok()? / 1e9)
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

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, n, mib, imat] = &args[..] else {
        eprintln!("usage: iq3_throughput TYPE N_PER_ROW MiB IMATRIX(0|1)");
        std::process::exit(2);
    };
    let dt = DType::from_name(&name.to_uppercase()).expect("unknown type");
    let n: usize = n.parse().expect("n_per_row");
    let total = mib.parse::<usize>().expect("MiB") << 18;
    let rows = total / n;
    let x = bench_input(total);
    let w: Vec<f32> = (0..n)
        .map(|i| 0.5 + ((i * 37) % 101) as f32 / 50.0)
        .collect();
    let w = (imat == "1").then_some(&w[..]);
    let weightport_core::Layout::Block { elems, bytes } = dt.layout() else {
        panic!("{name} is not a block type");
    };
    let mut y = vec![0u8; rows * n / elems as usize * bytes as usize];
    // first use builds the grid tables (as the C side's warm-up call initialises ggml's)
    quantize_rows(
        dt,
        &x[..n],
        &mut y[..n / elems as usize * bytes as usize],
        n,
        w,
    )
    .unwrap();
    let (t, c) = (Instant::now(), cpu_secs());
    quantize_rows(dt, &x[..rows * n], &mut y, n, w).unwrap();
    let dt_s = match (c, cpu_secs()) {
        (Some(a), Some(b)) => b - a,
        _ => t.elapsed().as_secs_f64(),
    };
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in &y {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    println!(
        "ours {name} imatrix={imat}: {:.1} MB/s of f32 ({dt_s:.2} s) fnv1a {h:016x}",
        total as f64 * 4.0 / 1e6 / dt_s
    );
}
