//! What every integration test needs: the fixtures directory and the built CLI.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `fixtures/` of the repository.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Runs the weightport binary built for these tests.
pub fn wp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weightport"))
        .args(args)
        .output()
        .expect("run weightport")
}
