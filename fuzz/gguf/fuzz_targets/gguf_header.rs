//! The GGUF header parser on arbitrary bytes: never a panic, and every accepted file keeps the
//! invariants the rest of weightport relies on; re-writing what was read with our writer gives a
//! file the parser accepts and that re-writes to the same header.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use weightport_core::Limits;
use weightport_gguf::header::parse;
use weightport_gguf::{layout_with, GgufTensorSpec, WriteOptions};

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.gguf");
    let Ok(h) = parse(path, data, &Limits::default()) else {
        return;
    };
    let mut expected = 0u64;
    for t in &h.tensors {
        assert_eq!(t.offset, expected);
        assert!(h.data_start + t.offset + t.nbytes <= data.len() as u64);
        assert_eq!(t.dtype.byte_len(&t.shape()), Ok(t.nbytes));
        assert!(t.ne.len() <= 4 && t.name.len() <= 63);
        expected += t.nbytes.next_multiple_of(u64::from(h.alignment));
    }
    let specs: Vec<GgufTensorSpec> = h.tensors.iter().map(GgufTensorSpec::from_gguf).collect();
    let mut opts = WriteOptions::default();
    opts.version = h.version;
    let lay = layout_with(&specs, &h.metadata, &opts).expect("what was read can be written");
    if lay.total_len > 1 << 22 {
        return;
    }
    let mut out = lay.header.clone();
    out.resize(lay.total_len as usize, 0);
    let h2 = parse(path, &out, &Limits::default()).expect("what we wrote can be read");
    let specs2: Vec<GgufTensorSpec> = h2.tensors.iter().map(GgufTensorSpec::from_gguf).collect();
    let lay2 = layout_with(&specs2, &h2.metadata, &opts).expect("re-write");
    assert_eq!(lay.header, lay2.header);
});
