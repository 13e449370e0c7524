//! Arbitrary bytes as a plan file (`weightport plan`'s plan.json), read by `unit` and `finish`:
//! never a panic. The first byte picks whether the document's `plan_sha256` is first set to its
//! real hash (the hash is no secret: a hostile plan can carry a right one), so the field and
//! cross-checks behind it are reached; every plan accepted then holds only indices in range
//! (`check_indices` walks every one the unit and finish commands take).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

/// `data` with `plan_sha256` set to the hash of the rest of the document, as `plan` writes it.
fn with_real_hash(data: &[u8]) -> Option<Vec<u8>> {
    let mut doc: serde_json::Value = serde_json::from_slice(data).ok()?;
    doc.as_object()?;
    doc["plan_sha256"] = weightport_units::doc_sha256(&doc).into();
    serde_json::to_vec(&doc).ok()
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let fixed;
    let text = match pick & 1 {
        0 => rest,
        _ => match with_real_hash(rest) {
            Some(t) => {
                fixed = t;
                &fixed
            }
            None => rest,
        },
    };
    if let Ok(plan) = weightport_units::parse_plan(Path::new("plan.json"), text) {
        if let Err(e) = weightport_units::check_indices(&plan) {
            panic!("accepted plan with an index out of range: {e}");
        }
    }
});
