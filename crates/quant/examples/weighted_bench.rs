//! Single-threaded throughput of the imatrix-weighted row kernels (MB/s of f32 input per CPU
//! second) on the inputs `fixtures/gen/gen_quant_weighted.sh --bench DIR` writes, with a
//! byte comparison against ggml's output for the same data (`DIR/bench.<type>.q`).
//!
//! `cargo run --release -p weightport-quant --example weighted_bench -- DIR [TYPE ...]`

use std::time::Instant;
use weightport_quant::{quantize_rows, DType};

/// CPU time of this thread in seconds (Linux), wall time elsewhere.
fn cpu_secs() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(s.split_whitespace().next()?.parse::<f64>().ok()? / 1e9)
}

fn timed(f: impl FnOnce()) -> f64 {
    let (t, c) = (Instant::now(), cpu_secs());
    f();
    match (c, cpu_secs()) {
        (Some(a), Some(b)) => b - a,
        _ => t.elapsed().as_secs_f64(),
    }
}

fn f32s(path: &std::path::Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("usage: weighted_bench DIR [TYPE ...]"));
    let mut names: Vec<String> = args.collect();
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
            Ok(want) => {
                if want == q {
                    "bytes equal ggml"
                } else {
                    "BYTES DIFFER"
                }
            }
            Err(_) => "no ggml output to compare",
        };
        println!(
            "{} weightport {:.1} MB/s ({same})",
            n.to_lowercase(),
            mb / secs
        );
    }
}
