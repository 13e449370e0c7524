//! The importance-matrix reader (both formats) on arbitrary bytes: never a panic, and every
//! accepted matrix keeps what `--imatrix` relies on: entries sorted and unique by name, every
//! entry's weights as many as its values, counts never negative, a GGUF entry's values a whole
//! number of rows, one per count.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use weightport_core::Limits;
use weightport_gguf::imatrix::parse_imatrix;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_imatrix_values: 1 << 20,
        ..Limits::default()
    };
    let Ok(m) = parse_imatrix(Path::new("fuzz.imatrix"), data, &limits) else {
        return;
    };
    assert!(!m.entries.is_empty());
    for w in m.entries.windows(2) {
        assert!(w[0].name < w[1].name, "sorted and unique");
    }
    for e in &m.entries {
        assert!(!e.sums.is_empty() && !e.counts.is_empty());
        if !m.legacy {
            assert!(e.counts.iter().all(|&c| c >= 0));
            assert_eq!(e.sums.len() % e.counts.len(), 0);
        }
        assert_eq!(e.weights(m.legacy).len(), e.sums.len());
        assert!((e.at as usize) < data.len());
        // By address: the values may hold NaN, which no float equals.
        assert!(m.get(&e.name).is_some_and(|f| std::ptr::eq(f, e)));
    }
});
