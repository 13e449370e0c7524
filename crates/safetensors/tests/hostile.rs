//! Hostile headers built from bytes: caps apply before allocation, and each case is rejected
//! with the right kind of error.

use weightport_core::{Error, Limits};
use weightport_safetensors::SafetensorsFile;

fn file(header: &[u8], data: &[u8]) -> tempfile::NamedTempFile {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header);
    b.extend_from_slice(data);
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), b).unwrap();
    f
}

#[test]
fn a_header_over_the_cap_is_a_limit_refusal() {
    let mut h = b"{}".to_vec();
    h.resize(2000, b' ');
    let f = file(&h, &[]);
    let limits = Limits {
        max_header_bytes: 1000,
        ..Limits::default()
    };
    match SafetensorsFile::open_with(f.path(), &limits) {
        Err(e @ Error::Limit { .. }) => assert_eq!(e.exit_code(), 3),
        other => panic!("{other:?}"),
    }
    assert!(SafetensorsFile::open(f.path()).is_ok());
}

#[test]
fn rank_and_tensor_count_are_capped() {
    let shape = vec!["1"; 65].join(",");
    let h = format!(r#"{{"a":{{"dtype":"U8","shape":[{shape}],"data_offsets":[0,1]}}}}"#);
    let f = file(h.as_bytes(), &[0]);
    assert!(matches!(
        SafetensorsFile::open(f.path()),
        Err(Error::Limit { .. })
    ));
    let h = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
    let f = file(h.as_bytes(), &[0, 0]);
    let limits = Limits {
        max_tensors: 1,
        ..Limits::default()
    };
    assert!(SafetensorsFile::open_with(f.path(), &limits).is_err());
}

#[test]
fn huge_claimed_sizes_allocate_nothing() {
    // A shape claiming exabytes against a 1-byte data section: rejected by arithmetic alone.
    let h = r#"{"a":{"dtype":"F64","shape":[1000000000,1000000000],"data_offsets":[0,1]}}"#;
    let f = file(h.as_bytes(), &[0]);
    assert!(matches!(
        SafetensorsFile::open(f.path()),
        Err(Error::Malformed { .. })
    ));
    let h = r#"{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,18446744073709551615]}}"#;
    let f = file(h.as_bytes(), &[0]);
    assert!(SafetensorsFile::open(f.path()).is_err());
}

/// Deterministic byte mutations of real headers: any outcome but a panic is acceptable, and an
/// accepted file must still satisfy the layout invariants.
#[test]
fn mutated_headers_never_panic() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/good/safetensors");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.safetensors");
    let mut state = 0x9e3779b97f4a7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut accepted = 0;
    for name in [
        "all_dtypes",
        "edge_cases",
        "zero_size_middle",
        "header_order",
    ] {
        let orig = std::fs::read(dir.join(format!("{name}.safetensors"))).unwrap();
        let n = u64::from_le_bytes(orig[..8].try_into().unwrap()) as usize;
        for _ in 0..400 {
            let mut b = orig.clone();
            for _ in 0..(1 + next() % 3) {
                let pos = 8 + (next() as usize) % n;
                b[pos] = match next() % 4 {
                    0 => b"0123456789"[(next() % 10) as usize],
                    1 => b"{}[],:\""[(next() % 7) as usize],
                    _ => next() as u8,
                };
            }
            std::fs::write(&out, &b).unwrap();
            // Read by ranges only, the same outcome.
            let src = weightport_core::mapped::LocalFile::open_pread(&out, "").unwrap();
            let by_ranges =
                SafetensorsFile::from_source(std::sync::Arc::new(src), &Limits::default());
            assert_eq!(
                format!("{:?}", by_ranges.map(|f| f.header().clone())),
                format!(
                    "{:?}",
                    SafetensorsFile::open(&out).map(|f| f.header().clone())
                )
            );
            if let Ok(f) = SafetensorsFile::open(&out) {
                accepted += 1;
                use weightport_core::TensorSource;
                let total: u64 = f.tensors().iter().map(|t| t.byte_len).sum();
                assert_eq!(f.data_start() + total, b.len() as u64);
                for i in 0..f.tensors().len() {
                    assert_eq!(f.bytes(i).unwrap().len() as u64, f.tensors()[i].byte_len);
                }
            }
        }
    }
    // Some mutations (inside names or metadata) keep the file valid, so the invariants above
    // were exercised; most do not.
    assert!(
        accepted > 0 && accepted < 800,
        "{accepted} of 1600 accepted"
    );
}
