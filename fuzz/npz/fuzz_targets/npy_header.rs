//! The npy header parser and the single-file reader on arbitrary bytes: never a panic, and an
//! accepted header always describes a byte length that fits its shape.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weightport_core::{ReadOptions, TensorSource};
use weightport_npz::{header, NpySource};

fuzz_target!(|data: &[u8]| {
    let mut opts = ReadOptions::default();
    opts.void2_as_bf16 = data.first().is_some_and(|b| b & 1 == 1);
    if let Ok(h) = header::parse(data, &opts) {
        assert!(h.shape.len() <= opts.limits.max_rank);
        assert_eq!(Ok(h.byte_len), h.dtype.byte_len(&h.shape));
        assert!(h.data_offset <= data.len() as u64);
    }
    let label = std::path::Path::new("fuzz.npy");
    if let Ok(src) = NpySource::from_bytes(label, data.to_vec(), &opts) {
        let t = &src.tensors()[0];
        assert_eq!(
            t.byte_len + header::parse(data, &opts).unwrap().data_offset,
            data.len() as u64
        );
        let g = t.dtype.granule() as usize;
        let mut buf = vec![0u8; (t.byte_len as usize).min(1 << 16) / g * g];
        src.read_into(0, 0, &mut buf).unwrap();
        if let Some(b) = src.bytes(0) {
            assert_eq!(&b[..buf.len()], &buf[..]);
        }
    }
});
