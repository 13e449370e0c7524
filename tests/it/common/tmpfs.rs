//! A small disk for the disk-full tests: a tmpfs of a given size, mounted under a new temp dir
//! and unmounted when dropped.

use std::path::PathBuf;
use std::process::Command;

pub(crate) struct Tmpfs {
    _dir: tempfile::TempDir,
    pub mnt: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`160k`, `1m`). Mounting needs root: elsewhere `None` with a
    /// printed reason, except in CI, which runs as root or says why not in
    /// `WEIGHTPORT_NO_TMPFS` (a test that runs nothing there is not a pass).
    pub(crate) fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("small");
        std::fs::create_dir(&mnt).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mnt)
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(Tmpfs { _dir: dir, mnt });
        }
        let why = std::env::var("WEIGHTPORT_NO_TMPFS").ok();
        assert!(
            std::env::var_os("CI").is_none() || why.is_some(),
            "cannot mount a tmpfs in CI, and WEIGHTPORT_NO_TMPFS does not say why"
        );
        let why = why.unwrap_or_else(|| "cannot mount a tmpfs here (needs root)".into());
        eprintln!("SKIPPED: {why}");
        None
    }

    /// Free bytes on the tmpfs, as `df` reports them.
    pub(crate) fn free(&self) -> u64 {
        let o = Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(&self.mnt)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        text.lines().nth(1).unwrap().trim().parse().unwrap()
    }

    /// Fills the disk to `left` free bytes with a file it returns.
    pub(crate) fn fill_to(&self, left: u64) -> PathBuf {
        let p = self.mnt.join("ballast");
        let n = self.free().saturating_sub(left);
        std::fs::write(&p, vec![1u8; n as usize]).unwrap();
        p
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
    }
}
