//! The .npz reader on arbitrary bytes: open, then read every tensor front to back (sequential
//! path), its second half again (random/restart path), with a tiny scratch buffer. Never a
//! panic; reads are capped so a hostile archive cannot make one input take long.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weightport_core::{ReadOptions, TensorSource};
use weightport_npz::NpzSource;

const CAP: u64 = 4 << 20;

fuzz_target!(|data: &[u8]| {
    let mut opts = ReadOptions::default();
    opts.void2_as_bf16 = true;
    let label = std::path::Path::new("fuzz.npz");
    let Ok(src) = NpzSource::from_bytes(label, data.to_vec(), &opts) else {
        return;
    };
    let src = src.with_scratch(7);
    let mut budget = CAP;
    let mut buf = vec![0u8; 4096];
    for i in 0..src.tensors().len() {
        let t = src.tensors()[i].clone();
        let g = t.dtype.granule();
        let step = 4096 / g * g;
        let mut off = 0u64;
        while off < t.byte_len && budget > 0 {
            let n = step.min(t.byte_len - off);
            if src.read_into(i, off, &mut buf[..n as usize]).is_err() {
                break;
            }
            if let Some(b) = src.bytes(i) {
                assert_eq!(&b[off as usize..(off + n) as usize], &buf[..n as usize]);
            }
            off += n;
            budget = budget.saturating_sub(n);
        }
        let half = t.byte_len / g / 2 * g;
        let n = step.min(t.byte_len - half);
        if budget > n {
            let _ = src.read_into(i, half, &mut buf[..n as usize]);
            budget -= n;
        }
    }
});
