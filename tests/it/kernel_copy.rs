//! Issue 34 item 4: identity ranges of mapped inputs reach the output through the kernel
//! (`copy_file_range`, extents shared where the filesystem can), the bytes unchanged.
//!
//! * A safetensors file written by Python's `safetensors` converted to safetensors is that file
//!   again, byte for byte, and `--json` `io.bytes_copied` says every tensor byte was copied in
//!   the kernel; with `WEIGHTPORT_KERNEL_COPY=0` none is and the bytes are the same.
//! * A torch-written `.bin` repo (stored zip members, mapped) to safetensors: copied too.
//! * An input on another filesystem (tmpfs under ext4: the kernel refuses with `EXDEV`): the
//!   bytes are written as before, none copied, the output the same.
//! * On a loop-mounted XFS image (root, loop devices and `mkfs.xfs` needed, so ignored by
//!   default): the output's data extents are shared with the input's (`filefrag -v`).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::fixtures;
use serde_json::Value;

/// `weightport --json convert IN -o OUT [args]` with `env` set; its `io` object.
fn convert(input: &Path, out: &Path, args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weightport"));
    c.args(["--json", "convert"])
        .arg(input)
        .arg("-o")
        .arg(out)
        .args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["io"].clone()
}

/// The data bytes of a safetensors file (all but the 8-byte length and the header).
fn data_bytes(p: &Path) -> u64 {
    let b = std::fs::read(p).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap());
    b.len() as u64 - 8 - n
}

#[test]
fn identity_bytes_are_copied_in_the_kernel_and_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/safetensors/llama_tiny.safetensors");
    let on = tmp.path().join("on.safetensors");
    let io = convert(&src, &on, &[], &[]);
    assert_eq!(io["bytes_copied"], data_bytes(&src), "{io}");
    assert_eq!(std::fs::read(&on).unwrap(), std::fs::read(&src).unwrap());

    let off = tmp.path().join("off.safetensors");
    let io = convert(&src, &off, &[], &[("WEIGHTPORT_KERNEL_COPY", "0")]);
    assert_eq!(io["bytes_copied"], 0, "{io}");
    assert_eq!(std::fs::read(&off).unwrap(), std::fs::read(&src).unwrap());
}

#[test]
fn a_torch_bin_repo_is_copied_in_the_kernel() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/pickle/bin_repo");
    let on = tmp.path().join("on.safetensors");
    let io = convert(&src, &on, &[], &[]);
    assert!(io["bytes_copied"].as_u64().unwrap() > 0, "{io}");
    let off = tmp.path().join("off.safetensors");
    let io = convert(&src, &off, &[], &[("WEIGHTPORT_KERNEL_COPY", "0")]);
    assert_eq!(io["bytes_copied"], 0, "{io}");
    assert_eq!(std::fs::read(&on).unwrap(), std::fs::read(&off).unwrap());
    let v = common::wp(&[
        "verify",
        on.to_str().unwrap(),
        "--against",
        src.to_str().unwrap(),
    ]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
}

/// The kernel refuses a copy between two filesystems (`EXDEV`): the executor writes the bytes.
#[test]
fn another_filesystem_falls_back_to_writes() {
    let shm = Path::new("/dev/shm");
    let here = tempfile::tempdir().unwrap();
    let dev = |p: &Path| std::os::unix::fs::MetadataExt::dev(&std::fs::metadata(p).unwrap());
    if !shm.is_dir() || dev(shm) == dev(here.path()) {
        eprintln!("skipped: no /dev/shm on another filesystem than the temp dir");
        return;
    }
    let other = tempfile::tempdir_in(shm).unwrap();
    let fixture = fixtures().join("good/safetensors/llama_tiny.safetensors");
    let src = other.path().join("in.safetensors");
    std::fs::copy(&fixture, &src).unwrap();
    let out = here.path().join("out.safetensors");
    let io = convert(&src, &out, &[], &[]);
    assert_eq!(io["bytes_copied"], 0, "{io}");
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(&fixture).unwrap()
    );
}

/// A safetensors file as the format defines it, one F16 tensor per entry of `mib`, each that
/// many MiB of bytes from a xorshift.
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
    let mut h = Value::Object(header).to_string().into_bytes();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut b = (h.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(&h);
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..at / 8 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        // Finite F16 values: no exponent of all ones.
        b.extend_from_slice(&(s & 0x3bff_3bff_3bff_3bff).to_le_bytes());
    }
    std::fs::write(path, b).unwrap();
}

/// A loop-mounted XFS image, unmounted (and its loop device freed) when dropped.
struct Xfs {
    _img_dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl Xfs {
    fn mount() -> Xfs {
        let d = tempfile::tempdir().unwrap();
        let img = d.path().join("xfs.img");
        let mnt = d.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let f = std::fs::File::create(&img).unwrap();
        f.set_len(512 << 20).unwrap();
        let ok = |c: &mut Command| {
            let o = c.output().unwrap();
            assert!(
                o.status.success(),
                "{c:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        ok(Command::new("mkfs.xfs")
            .args(["-q", "-m", "reflink=1"])
            .arg(&img));
        ok(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&img)
            .arg(&mnt));
        Xfs { _img_dir: d, mnt }
    }
}

impl Drop for Xfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
    }
}

/// The byte ranges of `p` whose extents `filefrag -v` flags as shared.
fn shared_bytes(p: &Path) -> u64 {
    let o = Command::new("filefrag").arg("-v").arg(p).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    text.lines()
        .filter(|l| l.contains("shared"))
        .filter_map(|l| l.split(':').nth(3)?.trim().parse::<u64>().ok())
        .sum::<u64>()
        * 4096
}

#[test]
#[ignore = "needs root, loop devices and mkfs.xfs (xfsprogs): run by hand"]
fn on_xfs_the_output_shares_the_inputs_extents() {
    let fs = Xfs::mount();
    let src = fs.mnt.join("in.safetensors");
    write_safetensors(&src, &[16, 5, 32]);
    let out = fs.mnt.join("out.safetensors");
    let io = convert(&src, &out, &[], &[]);
    assert_eq!(io["bytes_copied"], data_bytes(&src), "{io}");
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&src).unwrap());
    let shared = shared_bytes(&out);
    // Every whole block of tensor data (53 MiB less the heads and tails of the tensors).
    assert!(shared >= 52 << 20, "{shared} bytes of shared extents");
}

/// Units write their tensors' identity bytes through the kernel too, into parts and into the
/// shared staging file of `plan --in-place`; the finished file is the input again.
#[test]
fn units_copy_in_the_kernel() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/safetensors/llama_tiny.safetensors");
    for in_place in [false, true] {
        let out = tmp.path().join(format!("u{in_place}.safetensors"));
        let plan = tmp.path().join(format!("u{in_place}.plan.json"));
        let mut args = vec![
            "plan",
            src.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--units",
            "2",
            "--plan",
            plan.to_str().unwrap(),
        ];
        if in_place {
            args.push("--in-place");
        }
        let o = common::wp(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let mut copied = 0;
        for i in ["0", "1"] {
            let o = common::wp(&["--json", "unit", plan.to_str().unwrap(), "--index", i]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let v: Value = serde_json::from_slice(&o.stdout).unwrap();
            copied += v["io"]["bytes_copied"].as_u64().unwrap();
        }
        let o = common::wp(&["finish", plan.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(copied, data_bytes(&src), "in place: {in_place}");
        assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&src).unwrap());
    }
}
