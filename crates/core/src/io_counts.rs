//! What a job did to its output files, counted as it happens: files, write calls, bytes
//! written, opens and syncs. `--json` reports it, and tests bound it (an average write of at
//! least 1 MiB, at most 2 opens per output file), so a path that starts writing in small pieces
//! or reopening its files fails a test instead of only getting slower.
//!
//! Every write call, open and sync of an output file goes through one of these counters: the
//! staged files ([`crate::staging::TempFile`]) count their own, and the pipeline counts the
//! files it opens outside them (the reopen that verifies a file, a unit's shared staging file).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::error::{Error, Result};

/// The counts of one job (or one output of a job).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoCounts {
    /// Output files written (weights files, index, companions, journal, records, parts).
    pub files: u64,
    /// Write calls (`pwrite`, `write`, `copy_file_range`) into them.
    pub writes: u64,
    /// Bytes those calls wrote.
    pub bytes_written: u64,
    /// Of those, bytes `copy_file_range` moved from an input in the kernel.
    pub bytes_copied: u64,
    /// Opens of them: the creation, any reopen to write, the reopen that verifies.
    pub opens: u64,
    /// `fsync`, `fdatasync` and `sync_file_range` calls on them.
    pub syncs: u64,
}

impl std::ops::AddAssign for IoCounts {
    fn add_assign(&mut self, o: IoCounts) {
        self.files += o.files;
        self.writes += o.writes;
        self.bytes_written += o.bytes_written;
        self.bytes_copied += o.bytes_copied;
        self.opens += o.opens;
        self.syncs += o.syncs;
    }
}

#[derive(Debug, Default)]
struct Counters {
    files: AtomicU64,
    writes: AtomicU64,
    bytes: AtomicU64,
    copied: AtomicU64,
    opens: AtomicU64,
    syncs: AtomicU64,
}

/// A shared counter: clones count into the same totals.
#[derive(Debug, Clone, Default)]
pub struct IoCounter(Arc<Counters>);

impl IoCounter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// An output file was opened for the first time by this job: created, or (a unit's shared
    /// staging file, which another unit may have created) joined.
    pub fn first_open(&self) {
        self.0.files.fetch_add(1, Relaxed);
        self.opened();
    }

    /// An output file was opened again.
    pub fn opened(&self) {
        self.0.opens.fetch_add(1, Relaxed);
    }

    /// One write call wrote `n` bytes.
    pub fn wrote(&self, n: u64) {
        self.0.writes.fetch_add(1, Relaxed);
        self.0.bytes.fetch_add(n, Relaxed);
    }

    /// One `copy_file_range` call copied `n` bytes from an input.
    pub fn copied(&self, n: u64) {
        self.wrote(n);
        self.0.copied.fetch_add(n, Relaxed);
    }

    /// One sync call.
    pub fn synced(&self) {
        self.0.syncs.fetch_add(1, Relaxed);
    }

    /// The totals so far.
    pub fn counts(&self) -> IoCounts {
        IoCounts {
            files: self.0.files.load(Relaxed),
            writes: self.0.writes.load(Relaxed),
            bytes_written: self.0.bytes.load(Relaxed),
            bytes_copied: self.0.copied.load(Relaxed),
            opens: self.0.opens.load(Relaxed),
            syncs: self.0.syncs.load(Relaxed),
        }
    }
}

/// The most one `pwrite` call hands the kernel. Larger calls cost more CPU in the kernel's
/// copy into the page cache (ext4, kernel 6.18, 2-core VM: 2.4 GB written from one buffer in
/// 8 MiB calls took 0.6-5.4 s of system time, in 256 KiB calls 0.5-0.9 s; a LoRA merge of the
/// 2.4 GiB bench model 0.84x the wall and 0.60x the system time of 2 MiB calls, a cast to F32
/// 0.82x the wall), and a call holds the file's write lock throughout, so another worker
/// writing the same file spins on it in the kernel meanwhile.
pub const WRITE_PIECE: usize = 256 << 10;

/// Writes all of `bytes` at `offset` of `file` (`path` names it in errors), in calls of at most
/// [`WRITE_PIECE`] bytes, counting each `pwrite` call in `io`.
pub fn write_all_at(
    file: &File,
    path: &Path,
    mut bytes: &[u8],
    mut offset: u64,
    io: &IoCounter,
) -> Result<()> {
    while !bytes.is_empty() {
        let piece = &bytes[..bytes.len().min(WRITE_PIECE)];
        match file.write_at(piece, offset) {
            Ok(0) => {
                return Err(Error::io(
                    path,
                    "write",
                    std::io::Error::from(std::io::ErrorKind::WriteZero),
                ))
            }
            Ok(n) => {
                io.wrote(n as u64);
                bytes = &bytes[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, "write", e)),
        }
    }
    Ok(())
}

/// Bytes written to a file between two write-back starts ([`Writeback`]).
pub const WRITEBACK_PACE: u64 = 8 << 20;

/// Write-back pacing of one file: after every [`WRITEBACK_PACE`] bytes written (by any thread)
/// it asks the kernel to start writing the file's dirty pages back
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which does not wait), so the final fsync finds
/// most of the file on its way to disk instead of all of it, at one call per few MiB rather
/// than one per write.
#[derive(Debug, Default)]
pub struct Writeback {
    unstarted: AtomicU64,
}

impl Writeback {
    /// `n` bytes were written to `file`: starts write-back of its dirty pages when the pace is
    /// reached, counting the call in `io`.
    pub fn wrote(&self, file: &File, n: u64, io: &IoCounter) {
        let total = self.unstarted.fetch_add(n, Relaxed) + n;
        if total < WRITEBACK_PACE {
            return;
        }
        let taken = self.unstarted.swap(0, Relaxed);
        if taken < WRITEBACK_PACE {
            // Another writer started it in between: keep what this one took.
            self.unstarted.fetch_add(taken, Relaxed);
            return;
        }
        start_writeback(file, 0, 0);
        io.synced();
    }
}

/// Starts write-back of `[offset, offset+len)` of `f` (`len` 0: to the end of the file)
/// without waiting; a hint (errors surface at the fsync).
pub fn start_writeback(f: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(off), Ok(n)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: a valid open fd; the call only schedules I/O for the range.
    unsafe {
        libc::sync_file_range(f.as_raw_fd(), off, n, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_in_pieces_and_write_back_starts_are_counted() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let f = File::create(&p).unwrap();
        let io = IoCounter::new();
        let wb = Writeback::default();
        let piece = vec![7u8; (WRITEBACK_PACE / 4) as usize];
        for k in 0..9u64 {
            write_all_at(&f, &p, &piece, k * piece.len() as u64, &io).unwrap();
            wb.wrote(&f, piece.len() as u64, &io);
        }
        let c = io.counts();
        // Each buffer in calls of at most WRITE_PIECE bytes.
        let calls = 9 * piece.len().div_ceil(WRITE_PIECE) as u64;
        assert!(calls > 9);
        assert_eq!((c.writes, c.bytes_written), (calls, 9 * piece.len() as u64));
        assert_eq!(
            c.syncs, 2,
            "one write-back start per {WRITEBACK_PACE} bytes"
        );
        let mut sum = c;
        sum += c;
        assert_eq!(sum.bytes_written, 2 * c.bytes_written);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 9 * piece.len() as u64);
    }
}
