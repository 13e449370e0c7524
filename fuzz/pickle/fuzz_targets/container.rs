//! Raw bytes as a checkpoint file: ZIP or legacy container, pickle, tensors (every tensor read
//! back through `read_into` in two chunkings), and the scan report. Must never panic.
#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;
use weightport_core::{ReadOptions, TensorSource};

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("wp-fuzz-container-{}.bin", std::process::id()));
    {
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(data).unwrap();
    }
    if weightport_pickle::probe(&path, &data[..data.len().min(64)]) || !data.is_empty() {
        if let Ok(c) = weightport_pickle::open_checkpoint(&path, &ReadOptions::default()) {
            for (i, t) in c.tensors().iter().enumerate() {
                if t.byte_len > 1 << 24 {
                    continue;
                }
                let mut whole = vec![0u8; t.byte_len as usize];
                let _ = c.read_into(i, 0, &mut whole);
                let g = t.dtype.granule() as usize;
                let mut off = 0;
                while off < whole.len() {
                    let n = (3 * g).min(whole.len() - off);
                    let mut part = vec![0u8; n];
                    if c.read_into(i, off as u64, &mut part).is_ok() {
                        assert_eq!(part, whole[off..off + n]);
                    }
                    off += n;
                }
                if let Some(b) = c.bytes(i) {
                    assert_eq!(b, &whole[..]);
                }
            }
        }
        let _ = weightport_pickle::scan(&path);
    }
    let _ = std::fs::remove_file(&path);
});
