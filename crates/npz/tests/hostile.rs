//! Hostile inputs built from bytes in the test: every one must be rejected with the right error
//! kind (or accepted, where numpy accepts it), before any allocation sized by the input.

use std::io::Write;
use std::path::Path;

use weightport_core::{Error, Limits, ReadOptions, TensorSource};
use weightport_npz::header::{self, HeaderErrorKind};
use weightport_npz::{NpySource, NpzSource};

fn npy_v1(text: &str, data: &[u8]) -> Vec<u8> {
    let mut v = b"\x93NUMPY\x01\x00".to_vec();
    v.extend_from_slice(&(text.len() as u16).to_le_bytes());
    v.extend_from_slice(text.as_bytes());
    v.extend_from_slice(data);
    v
}

fn npy_v2(text: &[u8], data: &[u8]) -> Vec<u8> {
    let mut v = b"\x93NUMPY\x02\x00".to_vec();
    v.extend_from_slice(&(text.len() as u32).to_le_bytes());
    v.extend_from_slice(text);
    v.extend_from_slice(data);
    v
}

fn dict(descr: &str, shape: &str) -> String {
    format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}\n")
}

fn open_npy(bytes: Vec<u8>) -> Result<NpySource, Error> {
    NpySource::from_bytes(Path::new("h.npy"), bytes, &ReadOptions::default())
}

#[track_caller]
fn assert_rejects(bytes: Vec<u8>, kind: &str) {
    match open_npy(bytes) {
        Ok(_) => panic!("accepted, expected {kind}"),
        Err(e) => assert_eq!(e.kind(), kind, "{e}"),
    }
}

#[test]
fn header_length_is_capped_before_reading() {
    // HLEN = 4 GiB - 1 on a 12-byte file: a limit error, not an allocation.
    let mut b = b"\x93NUMPY\x02\x00".to_vec();
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    assert_rejects(b, "limit");
    // numpy's limit exactly is fine; one byte more is not.
    let base = dict("<f4", "(1,)");
    let at_limit = format!("{base:<width$}", width = 10_000);
    assert!(open_npy(npy_v2(at_limit.as_bytes(), &[0; 4])).is_ok());
    let over = format!("{base:<width$}", width = 10_001);
    assert_rejects(npy_v2(over.as_bytes(), &[0; 4]), "limit");
}

#[test]
fn rank_and_shape_caps() {
    let ones = |n: usize| format!("({},)", vec!["1"; n].join(", "));
    assert!(open_npy(npy_v1(&dict("<f4", &ones(64)), &[0; 4])).is_ok());
    assert_rejects(npy_v1(&dict("<f4", &ones(65)), &[0; 4]), "limit");
    let mut o = ReadOptions::default();
    o.limits = Limits {
        max_rank: 2,
        ..Limits::default()
    };
    let e = NpySource::from_bytes(
        Path::new("h.npy"),
        npy_v1(&dict("<f4", "(1, 1, 1)"), &[0; 4]),
        &o,
    )
    .unwrap_err();
    assert_eq!(e.kind(), "limit");
    assert_rejects(
        npy_v1(&dict("<f8", "(18446744073709551615, 2)"), &[]),
        "malformed",
    );
    assert_rejects(
        npy_v1(&dict("<f8", "(18446744073709551616,)"), &[]),
        "malformed",
    );
    // A zero dimension makes any other dimension harmless, as in numpy.
    let src = open_npy(npy_v1(&dict("<f4", "(0, 18446744073709551615)"), &[])).unwrap();
    assert_eq!(src.tensors()[0].byte_len, 0);
    // A huge declared array in a tiny file is a truncation error, not an allocation.
    assert_rejects(
        npy_v1(&dict("<f4", "(1099511627776,)"), &[0; 16]),
        "malformed",
    );
}

#[test]
fn nothing_in_the_header_is_evaluated() {
    for text in [
        "{'descr': '<f4', 'fortran_order': False, 'shape': os.system('id'), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (lambda: 1)(), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), **{'x': 1}}",
        "{'descr': '<f4', 'fortran_order': not True, 'shape': (1,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1+1,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (0x10,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }; import os",
        "{'descr': f'<f4', 'fortran_order': False, 'shape': (1,), }",
        "{'descr': '<f4' '', 'fortran_order': False, 'shape': (1,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\\\n",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\0",
        "[('descr', '<f4')]",
    ] {
        match open_npy(npy_v1(text, &[0; 4])) {
            Ok(_) => panic!("accepted {text:?}"),
            Err(e) => assert_eq!(e.kind(), "malformed", "{text:?}: {e}"),
        }
    }
    // Nesting is rejected at the first extra parenthesis: no recursion, no stack growth.
    let deep = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': {}1,{} }}",
        "(".repeat(4000),
        ")".repeat(4000)
    );
    assert_rejects(npy_v2(deep.as_bytes(), &[]), "malformed");
    // Non-ASCII (latin-1 é) inside a string.
    assert_rejects(
        npy_v2(
            b"{'descr': '<f\xe9', 'fortran_order': False, 'shape': (1,), }",
            &[0; 4],
        ),
        "malformed",
    );
}

#[test]
fn header_parser_reports_offsets() {
    let b = npy_v1(&dict("<f4", "(2, x)"), &[]);
    let e = header::parse(&b, &ReadOptions::default()).unwrap_err();
    assert!(matches!(e.kind, HeaderErrorKind::Malformed(_)));
    let text = std::str::from_utf8(&b[10..]).unwrap();
    assert_eq!(e.offset, 10 + text.find('x').unwrap() as u64);
    let msg = open_npy(b).unwrap_err().to_string();
    assert!(
        msg.starts_with(&format!("h.npy: tensor `h` (byte {})", e.offset)),
        "{msg}"
    );
}

fn zip_of(members: &[(&str, Vec<u8>, bool)]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, data, deflate) in members {
        let method = if *deflate {
            zip::CompressionMethod::Deflated
        } else {
            zip::CompressionMethod::Stored
        };
        let o = zip::write::SimpleFileOptions::default().compression_method(method);
        w.start_file(*name, o).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

fn open_npz_bytes(bytes: Vec<u8>, opts: &ReadOptions) -> Result<NpzSource, Error> {
    NpzSource::from_bytes(Path::new("h.npz"), bytes, opts)
}

#[test]
fn member_count_is_capped() {
    let a = npy_v1(&dict("<f4", "(1,)"), &[0; 4]);
    let z = zip_of(&[
        ("a.npy", a.clone(), false),
        ("b.npy", a.clone(), false),
        ("c.npy", a, false),
    ]);
    let mut o = ReadOptions::default();
    o.limits = Limits {
        max_tensors: 2,
        ..Limits::default()
    };
    assert_eq!(open_npz_bytes(z.clone(), &o).unwrap_err().kind(), "limit");
    assert_eq!(
        open_npz_bytes(z, &ReadOptions::default())
            .unwrap()
            .tensors()
            .len(),
        3
    );
}

#[test]
fn empty_archive_has_no_tensors() {
    // np.savez(f) with no arrays writes an empty ZIP, and np.load reads it.
    let src = open_npz_bytes(zip_of(&[]), &ReadOptions::default()).unwrap();
    assert!(src.tensors().is_empty());
}

#[test]
fn unknown_compression_method_is_unsupported() {
    let a = npy_v1(&dict("<f4", "(1,)"), &[0; 4]);
    let mut z = zip_of(&[("a.npy", a, false)]);
    // Method 12 (bzip2) in the local header and the central directory entry.
    z[8] = 12;
    let cd = z.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
    z[cd + 10] = 12;
    let e = open_npz_bytes(z, &ReadOptions::default()).unwrap_err();
    assert!(matches!(e.kind(), "unsupported" | "malformed"), "{e}");
}

/// Fuzzing finding (sniff_open, crash-1e68f8c4): a deflated member whose version-1 header text
/// is 0 or 1 bytes long ends before the 12 preamble bytes read first; the reader sliced past
/// the header and panicked. Now it is a malformed header, as for a stored member.
#[test]
fn fuzz_sniff_open_deflated_npy_with_a_header_shorter_than_the_preamble() {
    for text in ["", "{"] {
        for deflate in [true, false] {
            let a = npy_v1(text, &[0; 16]);
            let z = zip_of(&[("a.npy", a, deflate)]);
            let e = open_npz_bytes(z, &ReadOptions::default()).unwrap_err();
            assert_eq!(
                e.kind(),
                "malformed",
                "text {text:?}, deflate {deflate}: {e}"
            );
            assert!(e.to_string().contains("tensor `a`"), "{e}");
        }
    }
}

#[test]
fn deflated_member_with_a_lying_npy_header() {
    // The npy header (inside the deflate stream) says far more data than the member holds.
    let a = npy_v1(&dict("<f8", "(1000000000,)"), &[0; 64]);
    let z = zip_of(&[("a.npy", a, true)]);
    let e = open_npz_bytes(z, &ReadOptions::default()).unwrap_err();
    assert_eq!(e.kind(), "malformed", "{e}");
    assert!(e.to_string().contains("declared size mismatch"), "{e}");
}

#[test]
fn names_with_controls_are_sanitized_in_messages() {
    let bad = npy_v1(&dict("<c16", "(1,)"), &[0; 16]);
    let z = zip_of(&[("evil\x1b[31m.npy", bad, false)]);
    let e = open_npz_bytes(z, &ReadOptions::default()).unwrap_err();
    assert_eq!(e.kind(), "unsupported");
    assert!(!e.to_string().contains('\x1b'), "{e}");
}

#[test]
fn reads_outside_the_tensor_or_misaligned_are_errors() {
    let mut data = Vec::new();
    for i in 0..6u32 {
        data.extend_from_slice(&(i as f32).to_be_bytes());
    }
    let src = open_npy(npy_v1(&dict(">f4", "(2, 3)"), &data)).unwrap();
    let mut buf = [0u8; 8];
    assert!(src.read_into(0, 20, &mut buf).is_err());
    assert!(src.read_into(0, u64::MAX - 2, &mut buf).is_err());
    assert!(src.read_into(0, 2, &mut buf[..4]).is_err());
    src.read_into(0, 16, &mut buf).unwrap();
    assert_eq!(buf[..4], 4f32.to_le_bytes());
}

/// Checks the shared ZIP layer (`weightport_core::archive`) makes that this reader did not
/// make before it shared them with the torch reader: names climbing out of the archive, the
/// "compressed patched data" flag, and a local method that differs from the central one.
#[test]
fn checks_shared_with_the_torch_reader_apply_to_npz() {
    let a = npy_v1(&dict("<f4", "(1,)"), &[0; 4]);
    let e = open_npz_bytes(
        zip_of(&[("../a.npy", a.clone(), false)]),
        &ReadOptions::default(),
    )
    .unwrap_err();
    assert_eq!(e.kind(), "malformed", "{e}");
    assert!(e.to_string().contains("path traversal"), "{e}");

    let mut z = zip_of(&[("a.npy", a.clone(), false)]);
    z[6] |= 0x20; // general-purpose flags of the first local header
    let e = open_npz_bytes(z, &ReadOptions::default()).unwrap_err();
    assert_eq!(e.kind(), "unsupported", "{e}");
    assert!(e.to_string().contains("patched data"), "{e}");

    let mut z = zip_of(&[("a.npy", a, false)]);
    z[8] = 8; // the local header says deflated, the central directory stored
    let e = open_npz_bytes(z, &ReadOptions::default()).unwrap_err();
    assert!(e.to_string().contains("compression method"), "{e}");
}
