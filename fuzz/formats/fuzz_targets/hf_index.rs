//! Arbitrary bytes as `model.safetensors.index.json`: never a panic; every shard an accepted
//! index names stays inside the repo directory, and the index we render from what was read reads
//! back to the same weight map.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weightport_core::Limits;
use weightport_hf::index::check_inside;
use weightport_hf::{read_index, render_index};

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("wp-fuzz-index-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.safetensors.index.json");
    std::fs::write(&path, data).unwrap();
    if let Ok(ix) = read_index(&path, &Limits::default()) {
        for shard in ix.shards() {
            assert!(
                check_inside(&shard).is_ok(),
                "accepted shard name {shard:?}"
            );
        }
        let text = render_index(0, ix.total_size.unwrap_or(0), &ix.weight_map);
        std::fs::write(&path, text).unwrap();
        let again = read_index(&path, &Limits::default()).expect("what we render reads back");
        assert_eq!(again.weight_map, ix.weight_map);
    }
    let _ = std::fs::remove_file(&path);
});
