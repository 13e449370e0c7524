//! weight surgery's parsers of untrusted text and files (issue 32): the input's first byte
//! picks what the rest is:
//! * 0: a selection `NAME[ITEMS]` (`--set`, `slice`): parsed, then resolved against a few shapes,
//!   its runs listed; a region never holds more elements than its tensor;
//! * 1: a VALUE (`--set …=VALUE`): parsed and cast to every elementwise dtype;
//! * 2: a patch file (`edit --apply`): opened against a small real target and turned into edit
//!   steps (never applied); the target's bytes never change.
//!
//! Never a panic. Seeds: fixtures' selections and values, and fixtures/good/edit's patch-like
//! safetensors files.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weightport_core::DType;
use weightport_edit::scalar::{is_elementwise, Scalar};
use weightport_edit::{Selection, Target};

const SHAPES: &[&[u64]] = &[
    &[],
    &[7],
    &[4, 6],
    &[2, 3, 5],
    &[1, 0, 3],
    &[u32::MAX as u64, 2],
];

/// A private copy of a small real safetensors target, made once per process.
fn target() -> &'static (PathBuf, Vec<u8>) {
    static T: OnceLock<(PathBuf, Vec<u8>)> = OnceLock::new();
    T.get_or_init(|| {
        let src =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/good/edit/base.safetensors");
        let dir = std::env::temp_dir().join(format!("wp-fuzz-edit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("target.safetensors");
        let bytes = std::fs::read(src).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        (path, bytes)
    })
}

fn selection(text: &str) {
    let Ok(sel) = Selection::parse(text) else {
        return;
    };
    for shape in SHAPES {
        if let Ok(region) = sel.region(shape) {
            let total: u128 = shape.iter().map(|&d| u128::from(d)).product();
            assert!(u128::from(region.numel()) <= total, "{text} on {shape:?}");
            let _ = region.runs(shape, 1 << 20);
            let _ = region.out_shape();
        }
    }
}

fn value(text: &str) {
    if let Ok(v) = Scalar::parse(text) {
        for &d in DType::ALL.iter().filter(|d| is_elementwise(**d)) {
            if let Ok(b) = v.to_bytes(d) {
                assert_eq!(Some(b.len() as u32), d.elem_bytes(), "{text} as {d:?}");
            }
        }
    }
}

fn patch(bytes: &[u8]) {
    let (path, original) = target();
    let file = path.with_file_name("patch.safetensors");
    std::fs::write(&file, bytes).unwrap();
    if let Ok(t) = Target::open(path) {
        if let Ok(p) = weightport_edit::patch::Patch::open(&file, &t) {
            let _ = p.steps(&t);
        }
    }
    assert_eq!(
        &std::fs::read(path).unwrap(),
        original,
        "the target changed"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    match pick % 3 {
        0 => selection(&String::from_utf8_lossy(body)),
        1 => value(&String::from_utf8_lossy(body)),
        _ => patch(body),
    }
});
