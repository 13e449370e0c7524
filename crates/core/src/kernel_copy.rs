//! Ranges of mapped input files copied into staged outputs by the kernel (`copy_file_range`),
//! so identity bytes do not pass through user space on their way out.
//!
//! Every file [`crate::mapped::LocalFile::open`] maps is recorded here by its map's address
//! range, path and identity. The engine holds only the slice a reader returned from
//! [`crate::TensorSource::bytes`]; [`origin_of`] tells which file and offset those bytes are,
//! without every reader and wrapper forwarding a new method. The map holds no descriptor, so
//! the file is reopened on the first copy from it and must still have the identity it was
//! mapped with (device, inode, ctime, size); else, or if it cannot be reopened, no origin is
//! given and the bytes are written from the map as before. Sources that are not mapped local
//! files (pread-only, remote, members unpacked into memory) have no origin.
//!
//! [`copy_range`] copies with `copy_file_range`: on the same XFS or Btrfs filesystem the kernel
//! first tries to share the extents (`remap_file_range`, what `FICLONERANGE` does), which needs
//! both offsets on a block boundary, and otherwise copies page cache to page cache. Where the
//! kernel refuses (another filesystem: `EXDEV` on old kernels, `EINVAL`, `EOPNOTSUPP`,
//! `ENOSYS`), it returns how far it got and the caller writes the rest itself.
//!
//! `WEIGHTPORT_KERNEL_COPY=0` in the environment turns the copies off (for benchmarks and the
//! tests that compare both paths).

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::bytes::Identity;

/// One recorded map.
struct Recorded {
    len: usize,
    path: PathBuf,
    identity: Identity,
    /// The file reopened for copies (`None`: it could not be, or is no longer the file mapped).
    file: OnceLock<Option<Arc<File>>>,
}

/// Recorded maps by start address.
fn maps() -> &'static Mutex<BTreeMap<usize, Arc<Recorded>>> {
    static MAPS: OnceLock<Mutex<BTreeMap<usize, Arc<Recorded>>>> = OnceLock::new();
    MAPS.get_or_init(Default::default)
}

/// Whether kernel copies are on (`WEIGHTPORT_KERNEL_COPY=0` turns them off).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("WEIGHTPORT_KERNEL_COPY").is_none_or(|v| v != "0"))
}

/// Records `map`, the whole map of the local file `path` opened with `identity`.
pub(crate) fn record(map: &[u8], path: &Path, identity: Identity) {
    if map.is_empty() {
        return;
    }
    let r = Arc::new(Recorded {
        len: map.len(),
        path: path.to_path_buf(),
        identity,
        file: OnceLock::new(),
    });
    let mut m = maps().lock().unwrap_or_else(|e| e.into_inner());
    m.insert(map.as_ptr() as usize, r);
}

/// Forgets `map` (before it is unmapped).
pub(crate) fn forget(map: &[u8]) {
    let mut m = maps().lock().unwrap_or_else(|e| e.into_inner());
    m.remove(&(map.as_ptr() as usize));
}

/// Where bytes handed out from a mapped local file lie in that file.
#[derive(Debug, Clone)]
pub struct Origin {
    /// The file, reopened read-only and checked to be the one mapped.
    pub file: Arc<File>,
    /// The offset of the first byte in it.
    pub offset: u64,
}

/// The file and offset of `bytes`, if they lie wholly inside a recorded map whose file can be
/// reopened with the identity it was mapped with; `None` when kernel copies are off.
pub fn origin_of(bytes: &[u8]) -> Option<Origin> {
    if !enabled() || bytes.is_empty() {
        return None;
    }
    let at = bytes.as_ptr() as usize;
    let (start, rec) = {
        let m = maps().lock().unwrap_or_else(|e| e.into_inner());
        let (&start, rec) = m.range(..=at).next_back()?;
        (start, rec.clone())
    };
    let offset = at - start;
    if offset.checked_add(bytes.len())? > rec.len {
        return None;
    }
    let file = rec.file.get_or_init(|| reopen(&rec)).clone()?;
    Some(Origin {
        file,
        offset: offset as u64,
    })
}

/// The recorded file opened again, if it is still the file that was mapped.
fn reopen(rec: &Recorded) -> Option<Arc<File>> {
    let f = File::open(&rec.path).ok()?;
    let m = f.metadata().ok()?;
    let now = Identity::File {
        dev: m.dev(),
        ino: m.ino(),
        ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        len: m.len(),
    };
    (now == rec.identity).then(|| Arc::new(f))
}

/// Where `to` is on a filesystem that shares extents (XFS, Btrfs) and `from_offset` and
/// `to_offset` lie at the same place within one of its blocks but not at its start: the bytes
/// up to the next block boundary, copied alone so the rest starts on a block in both files and
/// the kernel can share its extents. Else 0 (elsewhere a split would only add calls).
fn shared_head(to: &File, from_offset: u64, to_offset: u64, len: u64) -> u64 {
    const XFS: u64 = 0x5846_5342;
    const BTRFS: u64 = 0x9123_683e;
    let Ok(fs) = rustix::fs::fstatfs(to) else {
        return 0;
    };
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    let (kind, bs) = (fs.f_type as u64, u64::try_from(fs.f_bsize).unwrap_or(0));
    if !matches!(kind, XFS | BTRFS) || bs == 0 {
        return 0;
    }
    let phase = to_offset % bs;
    match phase != 0 && phase == from_offset % bs {
        true => (bs - phase).min(len),
        false => 0,
    }
}

/// Copies `len` bytes from `from_offset` of `from` to `to_offset` of `to` in the kernel,
/// calling `wrote(n)` after each call that copied `n` bytes. Returns the bytes copied: all of
/// them, or fewer where the kernel refused or the source ended; the caller writes the rest.
/// Other errors (`ENOSPC`, `EIO`) are returned.
pub fn copy_range(
    from: &File,
    mut from_offset: u64,
    to: &File,
    mut to_offset: u64,
    len: u64,
    mut wrote: impl FnMut(u64),
) -> std::io::Result<u64> {
    use rustix::io::Errno;
    let head = shared_head(to, from_offset, to_offset, len);
    let mut done = 0u64;
    while done < len {
        let left = match done < head {
            true => head - done,
            false => len - done,
        };
        let want = usize::try_from(left).unwrap_or(usize::MAX).min(1 << 30);
        match rustix::fs::copy_file_range(
            from,
            Some(&mut from_offset),
            to,
            Some(&mut to_offset),
            want,
        ) {
            Ok(0) => break,
            Ok(n) => {
                done += n as u64;
                wrote(n as u64);
            }
            Err(Errno::INTR) => {}
            Err(
                Errno::XDEV
                | Errno::INVAL
                | Errno::OPNOTSUPP
                | Errno::NOSYS
                | Errno::BADF
                | Errno::PERM
                | Errno::TXTBSY,
            ) => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::ByteSource;
    use std::os::unix::fs::FileExt;

    /// A mapped file's slices have their file offsets; the copy lands where asked, byte for
    /// byte; a file replaced since it was mapped gives no origin.
    #[test]
    fn origins_and_copies() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("in");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let src = crate::mapped::LocalFile::open(&p, "").unwrap();
        let all = src.map().unwrap();
        let o = origin_of(&all[1000..250_000]).expect("a mapped range has an origin");
        assert_eq!(o.offset, 1000);
        assert!(
            origin_of(&data[..10]).is_none(),
            "heap bytes have no origin"
        );

        let out = tempfile::tempfile_in(d.path()).unwrap();
        out.set_len(260_000).unwrap();
        let mut calls = 0;
        let n = copy_range(&o.file, o.offset, &out, 7, 249_000, |_| calls += 1).unwrap();
        assert_eq!(n, 249_000);
        assert!(calls >= 1);
        let mut back = vec![0u8; 249_000];
        out.read_exact_at(&mut back, 7).unwrap();
        assert_eq!(back, &data[1000..250_000]);

        // Replaced after mapping: another inode at the path, so no origin.
        let q = d.path().join("in2");
        std::fs::write(&q, &data).unwrap();
        let src2 = crate::mapped::LocalFile::open(&q, "").unwrap();
        std::fs::remove_file(&q).unwrap();
        std::fs::write(&q, &data).unwrap();
        assert!(origin_of(&src2.map().unwrap()[..100]).is_none());
    }
}
