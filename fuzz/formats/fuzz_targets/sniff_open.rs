//! Arbitrary bytes as an input file of any format: sniffing never panics, and whatever the
//! registry opens (safetensors, GGUF, NPZ/NPY, torch ZIP or legacy checkpoints) hashes every
//! tensor to the end without a panic. The first byte picks the file name, since some readers
//! look at it (the format itself is always sniffed from content).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weightport_core::sniff;
use weightport_engine::{hash_source, open_input, NoProgress, OpenRequest};

const NAMES: [&str; 8] = [
    "model.safetensors",
    "pytorch_model.bin",
    "model.gguf",
    "arrays.npz",
    "array.npy",
    "model.pt",
    "model_best.pth.tar",
    "weights",
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let _ = sniff(&body[..body.len().min(4096)]);
    let dir = std::env::temp_dir().join(format!("wp-fuzz-sniff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(NAMES[usize::from(pick) % NAMES.len()]);
    std::fs::write(&path, body).unwrap();
    if let Ok(input) = open_input(&path, &OpenRequest::default()) {
        let total: u64 = input.source.tensors().iter().map(|t| t.byte_len).sum();
        if total <= 1 << 24 {
            let _ = hash_source(input.source.as_ref(), &NoProgress);
        }
    }
    let _ = std::fs::remove_file(&path);
});
