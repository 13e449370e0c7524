//! Inputs cargo-fuzz found (fuzz/pickle); each must be refused quickly.

use std::path::Path;
use std::time::{Duration, Instant};

use weightport_core::ReadOptions;

#[test]
fn fuzz_findings_are_refused_fast() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz");
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let t = Instant::now();
        let r = weightport_pickle::open_checkpoint(&p, &ReadOptions::default());
        let _ = weightport_pickle::scan(&p);
        // Billion-laughs-style metadata: refused by counting, not by expanding (was ~0.6 s per
        // open in release, a timeout under the fuzzer's sanitizers). The deflated 1M-deep
        // nesting runs 3 VM passes over 2M opcodes: ~0.3 s in release, a few s unoptimised.
        let cap = Duration::from_secs(if cfg!(debug_assertions) { 30 } else { 2 });
        assert!(t.elapsed() < cap, "{}: {:?}", p.display(), t.elapsed());
        if let Err(e) = r {
            assert!(e.exit_code() == 3 || e.exit_code() == 1, "{e}");
        }
    }
}
