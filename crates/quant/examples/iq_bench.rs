//! Single-thread throughput of the grid quantizers with an importance matrix, on the data the
//! reference harness's timing mode wrote (`bash fixtures/gen/gen_quant_iq2.sh bench TYPE DIR
//! N_PER_ROW NROWS`): `cargo run --release -p weightport-quant --example iq_bench TYPE DIR
//! N_PER_ROW`. Writes `DIR/TYPE.ours.q` (compare it with `DIR/TYPE.ggml.q`) and prints MB/s
//! of f32 input per CPU second of this thread; the one-time table build is timed apart.

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
    let a: Vec<String> = std::env::args().skip(1).collect();
    let [name, dir, n_per_row] = &a[..] else {
        eprintln!("usage: iq_bench TYPE DIR N_PER_ROW");
        std::process::exit(2);
    };
    let dtype = DType::from_name(&name.to_uppercase()).expect("type name");
    let dir = std::path::Path::new(dir);
    let n_per_row: usize = n_per_row.parse().expect("N_PER_ROW");
    let (x, w) = (f32s(&dir.join("bench.f32")), f32s(&dir.join("bench.imat")));
    let row_bytes = match dtype.layout() {
        weightport_core::Layout::Block { elems, bytes } => {
            n_per_row / elems as usize * bytes as usize
        }
        weightport_core::Layout::Bits(_) => panic!("{name} is not a block type"),
    };
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
