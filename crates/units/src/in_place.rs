//! `plan --in-place`: every unit writes its tensors straight into one staging file per output
//! file, at their offsets in it, and `finish` writes the header into that file and publishes
//! it: no part is copied or appended. Units write disjoint byte ranges of one file, so the
//! staging directory must be on a filesystem where processes (on different machines) may do
//! that: a local disk, NFS, Lustre, GPFS, CephFS; not an object-store mount that uploads a
//! file whole, nor runners that share no filesystem (those use the default parts).
//!
//! A unit never shrinks the file and writes only its own tensors' bytes; every unit of the
//! plan writes the same bytes at the same places on every run (the output is deterministic),
//! so a rerun, or two runs of one unit at once, write what is already there. The file's name
//! carries the plan's hash: units of another plan of the same output never share it.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use weightport_core::hash::{self, LeafHasher};
use weightport_core::io_counts::{write_all_at, Writeback};
use weightport_core::kernel_copy::{copy_range, Origin};
use weightport_core::{ContentHash, Error, IoCounter, Location, Result, TensorInfo};
use weightport_engine::Progress;

use super::planfile::UnitPlan;

/// The staging file output file `f` is written into.
pub(crate) fn in_place_path(plan: &UnitPlan, f: usize) -> PathBuf {
    let tag = plan.plan_sha256.get(..16).unwrap_or(&plan.plan_sha256);
    plan.staging.join(format!("file-{f:05}.{tag}.data"))
}

/// Opens (creating it) the staging file of output file `f` for writing, extended to the
/// file's planned size if shorter (never cut: other units may have written past this one).
/// Refuses a symlink, a non-file, or a file with another link (already published).
pub(crate) fn open_shared(plan: &UnitPlan, f: usize) -> Result<File> {
    let p = in_place_path(plan, f);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&p)
        .map_err(|e| Error::io(&p, "open shared staging file", e))?;
    let m = file.metadata().map_err(|e| Error::io(&p, "stat", e))?;
    let named =
        std::fs::symlink_metadata(&p).is_ok_and(|n| n.ino() == m.ino() && n.dev() == m.dev());
    if !m.is_file() || m.nlink() > 1 || !named {
        return Err(Error::Verify {
            at: Location::file(&p),
            reason: "the staging file is not a plain file of its own (published already?); \
                     check the output, then remove the staging directory"
                .into(),
        });
    }
    let size = plan.files[f].size;
    if m.len() < size {
        file.set_len(size).map_err(|e| Error::io(&p, "size", e))?;
    }
    Ok(file)
}

/// The lock file beside output file `f`'s staging file: a unit holds it shared while it may
/// write the staging file, `finish` exclusively from before it writes the header until the
/// staging directory is gone. (A file of its own: readers of the staging file, `finish`'s own
/// verification among them, take shared locks on the staging file itself.)
fn lock_path(plan: &UnitPlan, f: usize) -> PathBuf {
    in_place_path(plan, f).with_extension("lock")
}

/// Opens (creating it) output file `f`'s lock file and locks it (`exclusive` or shared)
/// without waiting; `busy` is the refusal when another process holds it.
fn lock(plan: &UnitPlan, f: usize, exclusive: bool, busy: &str) -> Result<File> {
    use rustix::fs::{flock, FlockOperation};
    let p = lock_path(plan, f);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&p)
        .map_err(|e| Error::io(&p, "open staging lock file", e))?;
    let op = match exclusive {
        true => FlockOperation::NonBlockingLockExclusive,
        false => FlockOperation::NonBlockingLockShared,
    };
    flock(&file, op).map_err(|e| match e {
        rustix::io::Errno::WOULDBLOCK => Error::Verify {
            at: Location::file(in_place_path(plan, f)),
            reason: busy.into(),
        },
        e => Error::io(&p, "lock staging lock file", e.into()),
    })?;
    Ok(file)
}

/// A unit's shared lock on output file `f`'s staging file, held while its descriptor is open,
/// so `finish` cannot publish the file while the unit (a requeued duplicate, say) may still
/// write into it. Refused while a `finish` holds it.
fn lock_shared(plan: &UnitPlan, f: usize) -> Result<File> {
    lock(
        plan,
        f,
        false,
        "a finish is publishing this output (this unit ran late: a requeued duplicate?); \
         nothing was written",
    )
}

/// `finish`'s exclusive lock on output file `f`'s staging file, held until the file is
/// published and the staging directory removed: refused while any unit has it open to write
/// (a late or requeued duplicate still running), so no unit writes into a published file; a
/// unit opening it afterwards finds it published (another link, or gone) and refuses.
pub(crate) fn lock_for_finish(plan: &UnitPlan, f: usize) -> Result<File> {
    lock(
        plan,
        f,
        true,
        "a unit still has this staging file open to write (a requeued or duplicate unit still \
         running?); wait for it to end, then run finish again; nothing was published",
    )
}

/// One shared staging file a unit writes, open.
struct Shared {
    file: usize,
    /// The unit's shared lock ([`lock_shared`]), held as long as the file is open.
    _lock: File,
    path: PathBuf,
    fd: File,
    writeback: Writeback,
}

/// The shared files a unit writes (by output file index), open; their writes, opens and syncs
/// counted in `io`.
pub(crate) struct InPlaceFiles {
    files: Vec<Shared>,
    io: IoCounter,
}

impl InPlaceFiles {
    /// Opens the staging file of every output file in `files`.
    pub(crate) fn open(plan: &UnitPlan, files: &[usize], io: &IoCounter) -> Result<InPlaceFiles> {
        let files = files
            .iter()
            .map(|&f| {
                let lock = lock_shared(plan, f)?;
                let fd = open_shared(plan, f)?;
                io.first_open();
                Ok(Shared {
                    file: f,
                    _lock: lock,
                    path: in_place_path(plan, f),
                    fd,
                    writeback: Writeback::default(),
                })
            })
            .collect::<Result<_>>()?;
        Ok(InPlaceFiles {
            files,
            io: io.clone(),
        })
    }

    fn get(&self, f: usize) -> Result<&Shared> {
        self.files
            .iter()
            .find(|s| s.file == f)
            .ok_or_else(|| Error::Internal(format!("output file {f} is not open")))
    }

    /// Writes `bytes` at `offset` of output file `f`'s staging file.
    pub(crate) fn write_at(&self, f: usize, offset: u64, bytes: &[u8]) -> Result<()> {
        let s = self.get(f)?;
        write_all_at(&s.fd, &s.path, bytes, offset, &self.io)?;
        s.writeback.wrote(&s.fd, bytes.len() as u64, &self.io);
        Ok(())
    }

    /// Copies `len` bytes of an input file to `offset` of output file `f`'s staging file in the
    /// kernel; returns the bytes copied (the rest is the caller's to write).
    pub(crate) fn copy_in(&self, f: usize, offset: u64, from: &Origin, len: u64) -> Result<u64> {
        let s = self.get(f)?;
        let n = copy_range(&from.file, from.offset, &s.fd, offset, len, |n| {
            self.io.copied(n)
        })
        .map_err(|e| Error::io(&s.path, "copy into", e))?;
        s.writeback.wrote(&s.fd, n, &self.io);
        Ok(n)
    }

    /// fsyncs every file.
    pub(crate) fn sync(&self) -> Result<()> {
        for s in &self.files {
            self.io.synced();
            s.fd.sync_data()
                .map_err(|e| Error::io(&s.path, "fsync", e))?;
        }
        Ok(())
    }

    /// Re-reads each tensor `(file, offset, tensor, leaf length, hash written)` and checks its
    /// content hash.
    pub(crate) fn verify(
        &self,
        items: &[(usize, u64, &TensorInfo, u64, ContentHash)],
        progress: &dyn Progress,
    ) -> Result<()> {
        let mut buf = Vec::new();
        for &(f, off, o, leaf, want) in items {
            let s = self.get(f)?;
            let (file, p) = (&s.fd, &s.path);
            let got = read_back(file, p, (off, o, leaf), &mut buf, progress)?;
            if got != want {
                return Err(Error::Verify {
                    at: Location::file(p).tensor(o.name.clone()),
                    reason: format!("read back as {got}, written as {want}"),
                });
            }
        }
        Ok(())
    }
}

/// The content hash of tensor `o` (hashed in `leaf`-byte leaves) as stored at `off` of `file`.
fn read_back(
    file: &File,
    path: &Path,
    (off, o, leaf): (u64, &TensorInfo, u64),
    buf: &mut Vec<u8>,
    progress: &dyn Progress,
) -> Result<ContentHash> {
    let leaf = leaf.max(1);
    let (mut leaves, mut at) = (Vec::new(), 0u64);
    loop {
        let n = (o.byte_len - at).min(leaf);
        buf.resize(n as usize, 0);
        file.read_exact_at(buf, off + at)
            .map_err(|e| Error::io(path, "read back", e))?;
        let mut h = LeafHasher::new();
        h.update(buf);
        leaves.push(h.finish());
        progress.advance(n);
        at += n;
        if at >= o.byte_len {
            break;
        }
    }
    Ok(hash::root(o.dtype, &o.shape, o.byte_len, &leaves))
}
