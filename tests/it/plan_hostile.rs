//! Hostile plan files that carry a right `plan_sha256` (the hash is no secret: whoever edits a
//! plan can recompute it): `unit` and `finish` refuse them with a message naming the field,
//! never a panic. Each plan is one `weightport plan` wrote, edited the way an attacker (or the
//! `plan_file` fuzz target) would.

use crate::common;

use std::path::Path;
use std::process::Output;

use common::{fixtures, wp};
use serde_json::Value;

/// A real plan of the sharded repo resharded at 12 KB in one unit; returns its document.
fn real_plan(dir: &Path) -> Value {
    let (src, out, plan) = (
        fixtures().join("good/hf_repo_sharded"),
        dir.join("out"),
        dir.join("job.plan.json"),
    );
    let o = wp(&[
        "plan",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--shard-size",
        "12KB",
        "--units",
        "1",
        "--plan",
        plan.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&std::fs::read(&plan).unwrap()).unwrap()
}

/// Writes `doc` as the plan file with `plan_sha256` set to its real hash, as `plan` does.
fn write_rehashed(dir: &Path, mut doc: Value) {
    doc["plan_sha256"] = weightport_units::doc_sha256(&doc).into();
    std::fs::write(dir.join("job.plan.json"), doc.to_string()).unwrap();
}

fn unit0(dir: &Path) -> Output {
    let plan = dir.join("job.plan.json");
    // One thread: the tensors are computed in plan order.
    let plan = plan.to_str().unwrap();
    wp(&["--threads", "1", "unit", plan, "--index", "0"])
}

/// Exit 1 (not a panic's 101) and a message naming `field`.
fn refused(o: &Output, field: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "stderr: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("internal error"),
        "{err}"
    );
    assert!(err.contains(field), "no `{field}` in: {err}");
}

/// Two neighbours `(a, b)` of one file, `a` first in the file but computed after `b` (a higher
/// index), and the offset inside `a` where `b` still fits in the file.
fn neighbours(doc: &Value) -> (usize, usize, u64) {
    let (ts, files) = (&doc["tensors"], doc["files"].as_array().unwrap());
    let at = |k: usize, f: &str| ts[k][f].as_u64().unwrap();
    for (f, file) in files.iter().enumerate() {
        let n = ts.as_array().unwrap().len();
        let mut mine: Vec<usize> = (0..n).filter(|&k| ts[k]["file"] == f).collect();
        mine.sort_by_key(|&k| at(k, "offset"));
        for w in mine.windows(2) {
            let (a, b) = (w[0], w[1]);
            let inside = at(a, "offset") + at(a, "bytes") / 2;
            if a > b && inside + at(b, "bytes") <= file["size"].as_u64().unwrap() {
                return (a, b, inside);
            }
        }
    }
    panic!("no such pair in the plan");
}

/// Found while writing the plan reader's invariants for its fuzz target: a tensor moved into
/// the middle of its neighbour (still inside its file and the unit's segment, the hash
/// recomputed) made `unit` subtract past zero while re-reading its part, once the neighbour
/// (computed last, so intact) had read back right: "internal error (a bug …): attempt to
/// subtract with overflow" in a debug build, a read to the end of the part in a release one.
/// Tensors of one file must not overlap.
#[test]
fn overlapping_tensors_are_refused_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let mut doc = real_plan(dir.path());
    let (_, b, inside) = neighbours(&doc);
    doc["tensors"][b]["offset"] = inside.into();
    write_rehashed(dir.path(), doc);
    refused(&unit0(dir.path()), &format!("tensors[{b}].offset"));
}

/// The plan as `plan` wrote it, rehashed: accepted (the rehash itself breaks nothing), so the
/// refusal above is the overlap's.
#[test]
fn a_rehashed_unchanged_plan_runs() {
    let dir = tempfile::tempdir().unwrap();
    let doc = real_plan(dir.path());
    write_rehashed(dir.path(), doc);
    let o = unit0(dir.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
