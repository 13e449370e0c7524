//! Issue 34 item 3: a late duplicate of a finished `plan --in-place` unit (a requeued array
//! task still running when `finish` runs) cannot touch the published file. The attack as a
//! batch engine makes it: a duplicate of unit 0 is caught (SIGSTOP) while it has the shared
//! staging file open, the original unit 0 and unit 1 run to the end, and `finish` runs. Before, `finish` published the
//! file and the resumed duplicate then wrote into it; now `finish` refuses while a unit holds
//! the staging file, publishes once the duplicate has ended, and the published file is the
//! input, byte for byte.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn wp(args: &[&str]) -> std::process::Output {
    common::wp(args)
}

/// A safetensors file as the format defines it: tensors of `mib` MiB of F16 each.
fn write_safetensors(path: &Path, mib: &[u64]) {
    let mut header = serde_json::Map::new();
    let mut at = 0u64;
    for (i, m) in mib.iter().enumerate() {
        let n = m << 20;
        header.insert(
            format!("t{i}"),
            serde_json::json!({"dtype": "F16", "shape": [n / 2], "data_offsets": [at, at + n]}),
        );
        at += n;
    }
    let mut h = serde_json::Value::Object(header).to_string().into_bytes();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut b = (h.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(&h);
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..at / 8 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        b.extend_from_slice(&(s & 0x3bff_3bff_3bff_3bff).to_le_bytes());
    }
    std::fs::write(path, b).unwrap();
}

/// Whether process `pid` has a file open whose path ends with `.data` (a shared staging file).
fn holds_staging_file(pid: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().ends_with(".data")))
}

fn signal(pid: u32, sig: &str) {
    let s = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(s.success());
}

#[test]
fn a_late_duplicate_unit_cannot_touch_the_published_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("in.safetensors");
    write_safetensors(&src, &[48, 48, 32]);
    let out = tmp.path().join("out.safetensors");
    let plan = tmp.path().join("p.json");
    let (s, o, p) = (
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        plan.to_str().unwrap(),
    );
    let r = wp(&[
        "plan",
        s,
        "-o",
        o,
        "--units",
        "2",
        "--in-place",
        "--plan",
        p,
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    // The requeued duplicate of unit 0, caught while it has the staging file open; then unit 0
    // (the original) and unit 1 run to the end.
    let dup = Command::new(env!("CARGO_BIN_EXE_weightport"))
        .args(["unit", p, "--index", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !holds_staging_file(dup.id()) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the duplicate never opened it"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
    signal(dup.id(), "-STOP");
    for i in ["0", "1"] {
        let r = wp(&["unit", p, "--index", i]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    }

    let r = wp(&["finish", p]);
    signal(dup.id(), "-CONT");
    let refused = !r.status.success();
    let published = out.exists();
    let d = dup.wait_with_output().unwrap();
    assert!(
        refused && !published,
        "finish published while a unit was still writing: exit {:?}, {}",
        r.status.code(),
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("still has this staging file open"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));

    // Once the duplicate has ended, finish publishes the input's bytes.
    let r = wp(&["finish", p]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&src).unwrap());
    // A unit run after the publish leaves the file as it was.
    let before = std::fs::metadata(&out).unwrap();
    let r = wp(&["unit", p, "--index", "0"]);
    eprintln!(
        "a unit after finish: exit {:?}: {}",
        r.status.code(),
        String::from_utf8_lossy(&r.stderr)
    );
    let after = std::fs::metadata(&out).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (before.ctime(), before.ctime_nsec()),
        (after.ctime(), after.ctime_nsec())
    );
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&src).unwrap());
}
