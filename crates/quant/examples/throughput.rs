//! Single-threaded kernel throughput on 64 MiB of random f32 (MB/s of f32 data, per CPU second).
//!
//! `cargo run --release --example throughput [TYPE ...]` (default: a representative set).

#[path = "support/timing.rs"]
mod timing;
use timing::timed;
use weightport_quant::{can_dequantize, can_quantize, dequantize, quantize, DType};

fn main() {
    let names: Vec<String> = std::env::args().skip(1).collect();
    let types: Vec<DType> = if names.is_empty() {
        [
            "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
        ]
        .iter()
        .map(|n| DType::from_name(n).unwrap())
        .collect()
    } else {
        names
            .iter()
            .map(|n| DType::from_name(n).expect("unknown type"))
            .collect()
    };
    let n = 64 << 20 >> 2; // 64 MiB of f32
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let src: Vec<f32> = (0..n)
        .map(|_| {
            // sum of 4 uniforms: roughly normal, cheap
            let mut acc = 0.0f32;
            for _ in 0..4 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                acc += (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            }
            acc
        })
        .collect();
    let mb = (n * 4) as f64 / 1e6;
    for dt in types {
        let weightport_core::Layout::Block { elems, bytes } = dt.layout() else {
            continue;
        };
        let mut q = vec![0u8; n / elems as usize * bytes as usize];
        print!("{:>7}:", dt.name());
        if can_quantize(dt) {
            let secs = timed(|| quantize(dt, &src, &mut q).unwrap());
            print!(" quantize {:7.1} MB/s", mb / secs);
        } else {
            // random bytes with small finite f16 scales: realistic dequantization work
            for (i, b) in q.iter_mut().enumerate() {
                *b = (i as u32).wrapping_mul(2_654_435_761) as u8 & 0x3B;
            }
            print!("{:22}", "");
        }
        if can_dequantize(dt) {
            let mut out = vec![0f32; n];
            let secs = timed(|| dequantize(dt, &q, &mut out).unwrap());
            print!("   dequantize {:7.1} MB/s (f32 out)", mb / secs);
        }
        println!();
    }
}
