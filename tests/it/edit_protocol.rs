//! `weightport edit`'s safety protocol (issue 32): --keep-undo/--undo, recovery of a pending
//! journal by --recover and by the next reader, --verify-rest, the locks, and the refusals
//! (hard link, symlink out of the repo, read-only file, shape/dtype change, slice out of bounds,
//! mask of the wrong shape, a full disk). Each refusal must name the tensor or file and leave
//! every byte as it was. The edited bytes are checked against torch's output
//! (fixtures/expected/edit, see tests/it/edit.rs).

use crate::common;
use common::tmpfs::Tmpfs;

use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{fixtures, wp};
use serde_json::Value;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}
fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}
fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn base() -> PathBuf {
    fixtures().join("good/edit/base.safetensors")
}

/// torch's result of `--set 'f16[2]=0' --set 'f16[-2:]=1'` on base.safetensors.
fn torch_rows_f16() -> Vec<u8> {
    fs::read(fixtures().join("expected/edit/set_rows_f16.safetensors")).unwrap()
}

const ROWS_F16: [&str; 4] = ["--set", "f16[2]=0", "--set", "f16[-2:]=1"];

fn copy_base(dir: &Path) -> PathBuf {
    let t = dir.join("t.safetensors");
    fs::copy(base(), &t).unwrap();
    t
}

fn edit(t: &Path, extra: &[&str]) -> Output {
    let mut a = vec!["edit", s(t)];
    a.extend_from_slice(extra);
    wp(&a)
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn keep_undo_then_undo_restores_the_original() {
    let tmp = tempfile::tempdir().unwrap();
    let t = copy_base(tmp.path());
    let mut a = ROWS_F16.to_vec();
    a.push("--keep-undo");
    let o = edit(&t, &a);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert_eq!(fs::read(&t).unwrap(), torch_rows_f16());
    assert!(tmp.path().join(".t.safetensors.wp-undo").exists());
    let o = edit(&t, &["--undo"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert_eq!(fs::read(&t).unwrap(), fs::read(base()).unwrap());
    assert_eq!(names(tmp.path()), ["t.safetensors"]);
    let o = edit(&t, &["--undo"]);
    assert_ne!(code(&o), 0, "a second undo has nothing to undo");
    assert!(err(&o).contains("no undo journal"), "{}", err(&o));
}

#[test]
fn undo_is_refused_when_the_edited_bytes_changed_since() {
    let tmp = tempfile::tempdir().unwrap();
    let t = copy_base(tmp.path());
    let mut a = ROWS_F16.to_vec();
    a.push("--keep-undo");
    assert_eq!(code(&edit(&t, &a)), 0);
    // Another writer (not weightport) changes one edited byte.
    let mut bytes = fs::read(&t).unwrap();
    let want = torch_rows_f16();
    let at = bytes
        .iter()
        .zip(fs::read(base()).unwrap())
        .position(|(a, b)| *a != b)
        .unwrap();
    bytes[at] ^= 0x40;
    fs::write(&t, &bytes).unwrap();
    let o = edit(&t, &["--undo"]);
    assert_eq!(code(&o), 3, "{}", err(&o));
    assert!(err(&o).contains("f16"), "names the tensor: {}", err(&o));
    assert_eq!(fs::read(&t).unwrap(), bytes, "nothing changed");
    assert_ne!(bytes, want);
}

/// A journal left by an edit that died after writing (made here from a kept undo journal,
/// which is the same file with the post-image hashes appended) is rolled back by `--recover`.
#[test]
fn recover_rolls_back_a_pending_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let t = copy_base(tmp.path());
    let mut a = ROWS_F16.to_vec();
    a.push("--keep-undo");
    assert_eq!(code(&edit(&t, &a)), 0);
    let d = tmp.path();
    fs::rename(
        d.join(".t.safetensors.wp-undo"),
        d.join(".t.safetensors.wp-journal"),
    )
    .unwrap();
    let o = wp(&["--json", "edit", "--recover", s(&t)]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert_eq!(fs::read(&t).unwrap(), fs::read(base()).unwrap());
    assert_eq!(names(d), ["t.safetensors"]);
    let o = wp(&["edit", "--recover", s(&t)]);
    assert_eq!(code(&o), 0);
    assert!(String::from_utf8_lossy(&o.stdout).contains("nothing to recover"));
}

/// Any command that opens the file (here `diff` and `convert`) rolls a pending journal back
/// first and says so, so nothing ever reads a half-edited file.
#[test]
fn the_next_reader_rolls_back_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for (i, cmd) in ["diff", "convert"].iter().enumerate() {
        let t = d.join(format!("t{i}.safetensors"));
        fs::copy(base(), &t).unwrap();
        let mut a = ROWS_F16.to_vec();
        a.push("--keep-undo");
        assert_eq!(code(&edit(&t, &a)), 0);
        let n = t.file_name().unwrap().to_str().unwrap();
        fs::rename(
            d.join(format!(".{n}.wp-undo")),
            d.join(format!(".{n}.wp-journal")),
        )
        .unwrap();
        let out = d.join(format!("o{i}.safetensors"));
        let o = match *cmd {
            "diff" => wp(&["diff", s(&t), s(&base())]),
            _ => wp(&["convert", s(&t), "-o", s(&out)]),
        };
        assert_eq!(code(&o), 0, "{cmd}: {}", err(&o));
        assert!(err(&o).contains("rolled back"), "{cmd}: {}", err(&o));
        assert_eq!(fs::read(&t).unwrap(), fs::read(base()).unwrap(), "{cmd}");
        if *cmd == "convert" {
            assert_eq!(fs::read(&out).unwrap(), fs::read(base()).unwrap());
        }
    }
}

#[test]
fn verify_rest_reports_every_other_byte_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let t = copy_base(tmp.path());
    let mut a = vec!["--json", "edit", s(&t)];
    a.extend_from_slice(&ROWS_F16);
    a.push("--verify-rest");
    let o = wp(&a);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verified_rest"], true);
    assert_eq!(fs::read(&t).unwrap(), torch_rows_f16());
}

fn flock(f: &fs::File, how: libc::c_int) {
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), how) }, 0);
}

/// A reader (what `convert`, `diff` or `slice` hold on an input while they read it) and a
/// writer's output lock (what `convert` holds on an output it writes) each make an edit refuse
/// at once, nothing changed.
#[test]
fn an_edit_refuses_while_another_process_reads_or_writes_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let t = copy_base(tmp.path());
    let reader = fs::File::open(&t).unwrap();
    flock(&reader, libc::LOCK_SH);
    let o = edit(&t, &ROWS_F16);
    assert_ne!(code(&o), 0);
    assert!(err(&o).contains("nothing was changed"), "{}", err(&o));
    assert_eq!(fs::read(&t).unwrap(), fs::read(base()).unwrap());
    drop(reader);
    let lock = tmp.path().join(".t.safetensors.wp-lock");
    let w = fs::File::create(&lock).unwrap();
    flock(&w, libc::LOCK_EX);
    let o = edit(&t, &ROWS_F16);
    assert_ne!(code(&o), 0);
    assert!(err(&o).contains("nothing was changed"), "{}", err(&o));
    assert_eq!(fs::read(&t).unwrap(), fs::read(base()).unwrap());
    drop(w);
    fs::remove_file(&lock).unwrap();
    assert_eq!(code(&edit(&t, &ROWS_F16)), 0);
    assert_eq!(fs::read(&t).unwrap(), torch_rows_f16());
}

/// Runs the edit expecting a refusal (exit `want`) whose message contains each of `needles`;
/// the file must be unchanged.
fn refused(t: &Path, args: &[&str], want: i32, needles: &[&str]) {
    let before = fs::read(t).unwrap();
    let o = edit(t, args);
    assert_eq!(code(&o), want, "{args:?}: {}", err(&o));
    for n in needles {
        assert!(err(&o).contains(n), "{args:?}: no `{n}` in: {}", err(&o));
    }
    assert_eq!(fs::read(t).unwrap(), before, "{args:?} changed the file");
}

#[test]
fn hostile_selections_and_aux_files_are_refused_naming_the_tensor() {
    let tmp = tempfile::tempdir().unwrap();
    let t = copy_base(tmp.path());
    refused(&t, &["--set", "f16[6]=0"], 2, &["f16", "out of"]);
    refused(&t, &["--set", "f16[2:9]=0"], 2, &["f16"]);
    refused(&t, &["--set", "f16[:, :, 0]=0"], 2, &["f16"]);
    refused(&t, &["--set", "nope[0]=0"], 2, &["nope"]);
    refused(&t, &["--set", "i8[0]=200"], 2, &["i8", "overflow"]);
    // A mask of the wrong shape, an addend and a replacement of the wrong shape or dtype.
    let bad = tmp.path().join("bad.safetensors");
    let hdr = br#"{"f16":{"dtype":"F16","shape":[5,8],"data_offsets":[0,80]}}"#;
    let mut b = (hdr.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(hdr);
    b.resize(b.len() + 80, 0);
    fs::write(&bad, &b).unwrap();
    for flag in ["--mask", "--add", "--replace"] {
        refused(&t, &[flag, s(&bad)], 2, &["f16"]);
    }
    let dt = tmp.path().join("dtype.safetensors");
    let hdr = br#"{"f16":{"dtype":"F32","shape":[6,8],"data_offsets":[0,192]}}"#;
    let mut b = (hdr.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(hdr);
    b.resize(b.len() + 192, 0);
    fs::write(&dt, &b).unwrap();
    refused(&t, &["--replace", s(&dt)], 2, &["f16", "dtype"]);
}

#[test]
fn unsafe_targets_are_refused_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let t = copy_base(d);
    // A hard link: the edit would change the other name too.
    fs::hard_link(&t, d.join("other.safetensors")).unwrap();
    refused(&t, &ROWS_F16, 3, &["hard link"]);
    fs::remove_file(d.join("other.safetensors")).unwrap();
    // A read-only file.
    let mut p = fs::metadata(&t).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o444);
    fs::set_permissions(&t, p).unwrap();
    refused(&t, &ROWS_F16, 3, &["read-only"]);
    // A repo whose shard is a symlink out of the repo.
    let repo = d.join("repo");
    fs::create_dir(&repo).unwrap();
    let src = fixtures().join("good/edit/repo");
    let outside = d.join("outside.safetensors");
    fs::copy(src.join("model-00002-of-00002.safetensors"), &outside).unwrap();
    fs::copy(
        src.join("model-00001-of-00002.safetensors"),
        repo.join("model-00001-of-00002.safetensors"),
    )
    .unwrap();
    fs::copy(
        src.join("model.safetensors.index.json"),
        repo.join("model.safetensors.index.json"),
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, repo.join("model-00002-of-00002.safetensors")).unwrap();
    let before = fs::read(&outside).unwrap();
    let o = wp(&["edit", s(&repo), "--set", "f16[0]=0"]);
    assert_eq!(code(&o), 3, "{}", err(&o));
    assert!(err(&o).contains("symlink"), "{}", err(&o));
    assert_eq!(fs::read(&outside).unwrap(), before);
}

/// A disk without room for the journal (the pre-images of the changed ranges): refused before
/// anything is written, the file untouched. Needs a small tmpfs (root), as commit_safety.rs.
#[test]
fn a_full_disk_refuses_the_edit_and_changes_nothing() {
    let Some(disk) = Tmpfs::mount("4m") else {
        return;
    };
    let mnt = disk.mnt.clone();
    // A 1 MiB F32 tensor, all of which the edit changes.
    let t = mnt.join("t.safetensors");
    let hdr = br#"{"w":{"dtype":"F32","shape":[256,1024],"data_offsets":[0,1048576]}}"#;
    let mut b = (hdr.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(hdr);
    b.resize(b.len() + (1 << 20), 0x3f);
    fs::write(&t, &b).unwrap();
    let ballast = disk.fill_to(512 * 1024);
    refused(&t, &["--set", "w=0"], 1, &["free"]);
    let left: Vec<_> = names(&mnt)
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "side files left: {left:?}");
    fs::remove_file(ballast).unwrap();
    assert_eq!(code(&edit(&t, &["--set", "w=0"])), 0);
    assert!(fs::read(&t).unwrap()[b.len() - (1 << 20)..]
        .iter()
        .all(|&x| x == 0));
}
