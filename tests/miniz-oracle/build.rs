//! Builds miniz (the ZIP reader torch vendors, `third_party/miniz-*`) with its archive
//! functions on and torch's definitions, plus `src/torch_reader.c`, which drives it as torch's
//! `PyTorchStreamReader` does.
//!
//! The C source comes from `WEIGHTPORT_MINIZ_SRC` (a directory holding `miniz.c` and `miniz.h`,
//! or the split sources of a miniz release: `miniz.c`, `miniz_zip.c`, `miniz_tinfl.c`,
//! `miniz_tdef.c`) when set, else from the `miniz-sys` 0.1.12 crate in cargo's registry (miniz
//! 2.0.x, whose name lookup, central-directory sort and extraction are torch's miniz 3.0.2's:
//! see docs/design-notes.md).

use std::path::{Path, PathBuf};

fn registry_source() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))?;
    let src = home.join("registry").join("src");
    std::fs::read_dir(src)
        .ok()?
        .flatten()
        .map(|index| index.path().join("miniz-sys-0.1.12"))
        .find(|d| d.join("miniz.c").is_file())
}

fn main() {
    println!("cargo:rerun-if-env-changed=WEIGHTPORT_MINIZ_SRC");
    println!("cargo:rerun-if-changed=src/torch_reader.c");
    let dir = std::env::var_os("WEIGHTPORT_MINIZ_SRC")
        .map(PathBuf::from)
        .or_else(registry_source)
        .expect("miniz's source: set WEIGHTPORT_MINIZ_SRC or let cargo fetch miniz-sys 0.1.12");
    let mut build = cc::Build::new();
    for f in ["miniz.c", "miniz_zip.c", "miniz_tinfl.c", "miniz_tdef.c"] {
        let p = dir.join(f);
        if p.is_file() {
            println!("cargo:rerun-if-changed={}", p.display());
            build.file(p);
        }
    }
    build
        .file("src/torch_reader.c")
        .include(&dir)
        // As torch's CMake builds it (cmake/Dependencies.cmake): no CRC-32 check on reads.
        .define("MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS", None)
        .define("MINIZ_NO_STDIO", None)
        .define("MINIZ_NO_TIME", None)
        .define("MINIZ_NO_ZLIB_COMPATIBLE_NAMES", None)
        .warnings(false)
        .compile("weightport_miniz_oracle");
}
