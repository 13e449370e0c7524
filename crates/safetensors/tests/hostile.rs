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
