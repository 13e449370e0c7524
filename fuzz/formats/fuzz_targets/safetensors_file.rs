//! Arbitrary bytes as a `.safetensors` file: never a panic; an accepted file's tensors lie inside
//! the file, and reading each in small pieces gives the same bytes as reading it whole (and as
//! the mapped view, when there is one).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weightport_core::{Limits, TensorSource};
use weightport_safetensors::SafetensorsFile;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("wp-fuzz-st-{}.safetensors", std::process::id()));
    std::fs::write(&path, data).unwrap();
    if let Ok(f) = SafetensorsFile::open_with(&path, &Limits::default()) {
        let end = data.len() as u64;
        for (i, t) in f.tensors().iter().enumerate() {
            let start = f.tensor_offset(i);
            assert!(start >= f.data_start() && start + t.byte_len <= end);
            assert_eq!(t.dtype.byte_len(&t.shape), Ok(t.byte_len));
            let mut whole = vec![0u8; t.byte_len as usize];
            f.read_into(i, 0, &mut whole)
                .expect("an accepted tensor reads");
            assert_eq!(whole, data[start as usize..(start + t.byte_len) as usize]);
            let g = t.dtype.granule() as usize;
            let mut off = 0;
            while off < whole.len() {
                let n = (3 * g).min(whole.len() - off);
                let mut part = vec![0u8; n];
                f.read_into(i, off as u64, &mut part)
                    .expect("a piece reads");
                assert_eq!(part, whole[off..off + n]);
                off += n;
            }
            if let Some(b) = f.bytes(i) {
                assert_eq!(b, &whole[..]);
            }
        }
    }
    let _ = std::fs::remove_file(&path);
});
