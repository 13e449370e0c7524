//! The model-card reader on hostile bytes: the input's first byte picks which file of a release
//! directory the remaining bytes become (README.md, a `--metadata` overrides file,
//! generation_config.json, config.json), the others being benign; deriving the authorship keys
//! and writing them must return Ok or Err, never panic.
//!
//! Seeds: byte 0 followed by each README of fixtures/expected/arch/card.json, byte 1 followed by
//! its overrides (fixtures/gen/gen_arch_card.py's cases).
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weightport_arch::card::{Authorship, CardOptions};

const FILES: &[&str] = &[
    "README.md",
    "metadata.json",
    "generation_config.json",
    "config.json",
];

/// One directory per process (libFuzzer runs inputs one at a time in a process).
fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("wp-fuzz-card-{}", std::process::id()));
        std::fs::create_dir_all(d.join("Qwen2.5-0.5B-Instruct")).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let root = dir();
    let release = root.join("Qwen2.5-0.5B-Instruct");
    for f in FILES {
        let _ = std::fs::remove_file(release.join(f));
    }
    std::fs::write(
        release.join("config.json"),
        b"{\"_name_or_path\": \"org/Model-7B-v1\"}",
    )
    .unwrap();
    let overrides = release.join("metadata.json");
    std::fs::write(&overrides, b"{}").unwrap();
    std::fs::write(release.join(FILES[pick as usize % FILES.len()]), body).unwrap();
    let mut opts = CardOptions::default();
    opts.overrides = Some(overrides);
    if let Ok(a) = Authorship::load(&release, &opts, (i64::from(pick) - 100) * 1_000_003, || {
        "1.0K".into()
    }) {
        let _ = a.kvs(&mut |_, _| {});
    }
});
