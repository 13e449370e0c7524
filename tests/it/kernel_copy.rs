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
//! * Several outputs from one read (`convert IN -o A -o B …`): each output's identity chunks are
//!   copied in the kernel into that output (`io.bytes_copied` per output as its own `convert`
//!   reports it, and in total), the transformed outputs written from the shared window; every
//!   file is the single-output conversion's and the reference's. Copies off, and an input on
//!   another filesystem: the same bytes, none copied. On loop-mounted XFS and Btrfs images
//!   (ignored by default): the identity output shares the input's extents.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::fixtures;
use serde_json::Value;

/// `weightport --json convert IN ARGS…` with `env` set: the document.
fn convert_doc(input: &Path, args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weightport"));
    c.args(["--json", "convert"]).arg(input).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `weightport --json convert IN -o OUT [args]` with `env` set; its `io` object.
fn convert(input: &Path, out: &Path, args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut a = vec!["-o", out.to_str().unwrap()];
    a.extend(args);
    convert_doc(input, &a, env)["io"].clone()
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

/// A loop-mounted XFS or Btrfs image, unmounted (and its loop device freed) when dropped.
struct LoopFs {
    _img_dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl LoopFs {
    /// An XFS image with reflinks.
    fn xfs() -> LoopFs {
        LoopFs::mount(&["mkfs.xfs", "-q", "-m", "reflink=1"])
    }

    /// A Btrfs image (extents are always shareable).
    fn btrfs() -> LoopFs {
        LoopFs::mount(&["mkfs.btrfs", "-q"])
    }

    /// A 512 MiB image made by `mkfs` (the program and its flags), loop-mounted.
    fn mount(mkfs: &[&str]) -> LoopFs {
        let d = tempfile::tempdir().unwrap();
        let img = d.path().join("fs.img");
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
        ok(Command::new(mkfs[0]).args(&mkfs[1..]).arg(&img));
        ok(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&img)
            .arg(&mnt));
        LoopFs { _img_dir: d, mnt }
    }
}

impl Drop for LoopFs {
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
    let fs = LoopFs::xfs();
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

/// The outputs of one read of the tiny Llama release: its three shards merged into one
/// safetensors file (every byte an identity copy of an input range), an F16 GGUF (identity
/// chunks but for the q/k row permutation and the norms; convert_hf_to_gguf.py's file,
/// fixtures/expected/arch/files.json) and a Q8_0 GGUF (quantized: llama-quantize's file).
/// Name, options after `-o PATH:`, the same as `convert` flags.
const FANOUT: [(&str, &str, &[&str]); 3] = [
    ("a.safetensors", "", &[]),
    ("f16.gguf", "dtype=f16", &["--dtype", "f16"]),
    (
        "q8.gguf",
        "outtype=f16,quant=Q8_0",
        &["--outtype", "f16", "--quant", "Q8_0"],
    ),
];

/// The reference's sha256 of each [`FANOUT`] output of the Llama release (`None`: no reference
/// file; compared with the single-output conversion and verified against the input instead).
fn fanout_reference(name: &str) -> Option<String> {
    let files = common::arch::expected("files.json");
    match name {
        "f16.gguf" => Some(files["llama"]["outtypes"]["f16"]["sha256"].as_str()?.into()),
        "q8.gguf" => Some(common::arch::reference("Q8_0")),
        _ => None,
    }
}

/// `convert IN -o DIR/NAME[:OPTS]…` of every [`FANOUT`] output, with `env` set: the document.
fn fanout(input: &Path, dir: &Path, env: &[(&str, &str)]) -> Value {
    let specs: Vec<String> = FANOUT
        .iter()
        .map(|(name, opts, _)| match opts.is_empty() {
            true => dir.join(name).display().to_string(),
            false => format!("{}:{opts}", dir.join(name).display()),
        })
        .collect();
    let mut a = Vec::new();
    for s in &specs {
        a.extend(["-o", s.as_str()]);
    }
    let v = convert_doc(input, &a, env);
    assert_eq!(v["made"], FANOUT.len(), "{v}");
    assert_eq!(
        v["reads"].as_array().map(Vec::len),
        Some(1),
        "one read: {v}"
    );
    v
}

/// Each output's `io.bytes_copied` in a multi-output document, in order; checks the total.
fn copied_per_output(v: &Value) -> Vec<u64> {
    let per: Vec<u64> = v["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["result"]["io"]["bytes_copied"].as_u64().unwrap())
        .collect();
    assert_eq!(v["io"]["bytes_copied"], per.iter().sum::<u64>(), "{v}");
    per
}

/// Every [`FANOUT`] output in `dir` is the file in `want` (a single-output conversion) and the
/// reference's.
fn assert_fanout_files(dir: &Path, want: &Path, what: &str) {
    for (name, _, _) in FANOUT {
        let got = std::fs::read(dir.join(name)).unwrap();
        assert!(
            got == std::fs::read(want.join(name)).unwrap(),
            "{what}: {name} differs from its own convert"
        );
        if let Some(sha) = fanout_reference(name) {
            assert_eq!(
                common::arch::sha_file(&dir.join(name)),
                sha,
                "{what}: {name}"
            );
        }
    }
}

/// The single-output conversions of every [`FANOUT`] output into `dir`; each one's `io`.
fn fanout_separately(input: &Path, dir: &Path) -> Vec<Value> {
    FANOUT
        .iter()
        .map(|(name, _, flags)| convert(input, &dir.join(name), flags, &[]))
        .collect()
}

/// Issue 34 item 4 for `-o A -o B …`: the merged safetensors output gets every tensor byte
/// copied in the kernel, the F16 GGUF its identity chunks, each output counting its own copies
/// as its single-output `convert` does; the quantized output is written from the shared
/// window. The files are those of the single-output runs and of the reference; with copies
/// off, the same files and nothing copied.
#[test]
fn a_fanout_copies_identity_chunks_in_the_kernel() {
    let tmp = tempfile::tempdir().unwrap();
    let src = common::arch::release("llama");
    let sep = tmp.path().join("sep");
    let single = fanout_separately(&src, &sep);

    let on = tmp.path().join("on");
    let v = fanout(&src, &on, &[]);
    let copied = copied_per_output(&v);
    let single_copied: Vec<u64> = single
        .iter()
        .map(|io| io["bytes_copied"].as_u64().unwrap())
        .collect();
    assert_eq!(
        copied, single_copied,
        "each output copies what its convert does"
    );
    let data: u64 = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .map(|p| data_bytes(&p))
        .sum();
    assert_eq!(copied[0], data, "every tensor byte of the merged file");
    assert!(copied[1] > 0, "the F16 GGUF's identity chunks: {v}");
    assert_fanout_files(&on, &sep, "copies on");
    let verify = common::wp(&[
        "verify",
        on.join("a.safetensors").to_str().unwrap(),
        "--against",
        src.to_str().unwrap(),
    ]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    if let Some(py) = common::python_with_jsonschema() {
        let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/json/run.schema.json");
        common::validate_json(&py, &schema, v.to_string().as_bytes(), "a fan-out's copies");
    }

    let off = tmp.path().join("off");
    let v = fanout(&src, &off, &[("WEIGHTPORT_KERNEL_COPY", "0")]);
    assert_eq!(copied_per_output(&v), [0, 0, 0], "{v}");
    assert_fanout_files(&off, &sep, "copies off");
}

/// The fan-out's input on another filesystem (tmpfs under the temp dir's): the kernel refuses
/// every copy (`EXDEV`) and the executor writes the bytes from the shared window instead.
#[test]
fn a_fanout_from_another_filesystem_falls_back_to_writes() {
    let shm = Path::new("/dev/shm");
    let here = tempfile::tempdir().unwrap();
    let dev = |p: &Path| std::os::unix::fs::MetadataExt::dev(&std::fs::metadata(p).unwrap());
    if !shm.is_dir() || dev(shm) == dev(here.path()) {
        eprintln!("skipped: no /dev/shm on another filesystem than the temp dir");
        return;
    }
    let other = tempfile::tempdir_in(shm).unwrap();
    // The release's directory name names the model in the GGUF: keep it.
    let src = other.path().join("llama");
    common::arch::copy_tree(&common::arch::release("llama"), &src);
    let sep = here.path().join("sep");
    fanout_separately(&common::arch::release("llama"), &sep);
    let out = here.path().join("out");
    let v = fanout(&src, &out, &[]);
    assert_eq!(copied_per_output(&v), [0, 0, 0], "{v}");
    assert_fanout_files(&out, &sep, "input on tmpfs");
}

/// On a filesystem that shares extents, the identity output of a fan-out shares the input's
/// (as a single `convert` does) while the other output is cast from the shared window.
fn a_fanout_shares_extents_on(fs: &LoopFs) {
    let src = fs.mnt.join("in.safetensors");
    write_safetensors(&src, &[16, 5, 32]);
    let sep = fs.mnt.join("sep.f32.safetensors");
    let io = convert(&src, &sep, &["--dtype", "f32"], &[]);
    assert_eq!(io["bytes_copied"], 0, "a cast copies nothing: {io}");
    let (same, f32) = (
        fs.mnt.join("same.safetensors"),
        fs.mnt.join("f32.safetensors"),
    );
    let f32_spec = format!("{}:dtype=f32", f32.display());
    let v = convert_doc(&src, &["-o", same.to_str().unwrap(), "-o", &f32_spec], &[]);
    assert_eq!(copied_per_output(&v), [data_bytes(&src), 0], "{v}");
    assert!(std::fs::read(&same).unwrap() == std::fs::read(&src).unwrap());
    assert!(std::fs::read(&f32).unwrap() == std::fs::read(&sep).unwrap());
    let shared = shared_bytes(&same);
    // Every whole block of tensor data (53 MiB less the heads and tails of the tensors).
    assert!(shared >= 52 << 20, "{shared} bytes of shared extents");
    assert_eq!(shared_bytes(&f32), 0, "the cast output shares nothing");
}

#[test]
#[ignore = "needs root, loop devices and mkfs.xfs (xfsprogs): run by hand"]
fn on_xfs_a_fanouts_identity_output_shares_the_inputs_extents() {
    a_fanout_shares_extents_on(&LoopFs::xfs());
}

#[test]
#[ignore = "needs root, loop devices and mkfs.btrfs (btrfs-progs): run by hand"]
fn on_btrfs_a_fanouts_identity_output_shares_the_inputs_extents() {
    a_fanout_shares_extents_on(&LoopFs::btrfs());
}
