//! The undo journal: the pre-image of every byte range an edit changes, made durable before the
//! first target byte is written.
//!
//! ```text
//! "WPJRNL01"
//! pre-images, one after another, in the table's order
//! table: JSON {"version":1,"files":[{"name","dev","ino","size"}],
//!              "ranges":[{"file","offset","len","tensor"}]}
//! u64 LE  table length
//! u128 LE xxh3-128 of every byte above
//! "WPJEND01"
//! [undo only: JSON {"post":["<xxh3-128 of each range's new bytes, hex>"]}
//!  u64 LE length, u128 LE xxh3-128 of that JSON, "WPPOST01"]
//! ```
//! It is written as a temp file, fsynced, and then renamed to `.NAME.wp-journal` (and the
//! directory fsynced), so a journal under its final name is always complete: a journal whose
//! checksum fails was damaged after the fact and is refused, never applied. `.NAME.wp-undo` is
//! the same file after a completed `--keep-undo` edit, with the post-image hashes appended so
//! `--undo` can tell whether the edited bytes changed since.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use weightport_core::staging::{sync_dir, TempFile};
use weightport_core::{Error, IoCounter, Location, Result};
use xxhash_rust::xxh3::Xxh3;

use crate::target::{file_name, Target, REPO_SIDE};

const MAGIC: &[u8; 8] = b"WPJRNL01";
const END: &[u8; 8] = b"WPJEND01";
const POST: &[u8; 8] = b"WPPOST01";
const TRAILER: u64 = 8 + 16 + 8;
/// Largest table or post record read back (a journal is ours, but read as untrusted input).
const MAX_TABLE: u64 = 1 << 30;

/// One range of the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// Index into the journal's files.
    pub file: usize,
    /// Absolute offset in that file.
    pub offset: u64,
    /// Length.
    pub len: u64,
    /// The tensor the range lies in (for messages).
    pub tensor: String,
}

/// One file a journal covers: by name (in the journal's directory) and identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JFile {
    /// File name, in the journal's directory.
    pub name: String,
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Size.
    pub size: u64,
}

/// Writes a journal (module docs).
pub(crate) struct JournalWriter {
    temp: TempFile,
    hasher: Xxh3,
    pos: u64,
    files: Vec<JFile>,
    ranges: Vec<Range>,
    dest: PathBuf,
}

fn jerr(path: &Path, e: std::io::Error) -> Error {
    Error::io(path, "write journal", e)
}

impl JournalWriter {
    /// Starts the journal of an edit of `t`, to be published at `dest`.
    pub(crate) fn create(t: &Target, dest: &Path) -> Result<JournalWriter> {
        let temp = TempFile::beside(dest, &IoCounter::new())?;
        temp.write_at(MAGIC, 0)?;
        let mut hasher = Xxh3::new();
        hasher.update(MAGIC);
        let files = t
            .files
            .iter()
            .map(|f| JFile {
                name: file_name(&f.path),
                dev: f.dev,
                ino: f.ino,
                size: f.size,
            })
            .collect();
        Ok(JournalWriter {
            temp,
            hasher,
            pos: 8,
            files,
            ranges: Vec::new(),
            dest: dest.to_path_buf(),
        })
    }

    /// Appends the pre-image `bytes` of `range`.
    pub(crate) fn add(&mut self, range: Range, bytes: &[u8]) -> Result<()> {
        self.start(range);
        self.extend(bytes)
    }

    /// Starts `range`, whose pre-image follows in [`JournalWriter::extend`] calls.
    pub(crate) fn start(&mut self, range: Range) {
        self.ranges.push(range);
    }

    /// Appends pre-image bytes of the range started last.
    pub(crate) fn extend(&mut self, bytes: &[u8]) -> Result<()> {
        self.temp.write_at(bytes, self.pos)?;
        self.hasher.update(bytes);
        self.pos += bytes.len() as u64;
        Ok(())
    }

    /// Writes the table and trailer, fsyncs, publishes under the final name (refusing to
    /// replace a journal already there) and fsyncs the directory.
    pub(crate) fn seal(mut self) -> Result<PathBuf> {
        let table = table_json(&self.files, &self.ranges).to_string();
        let mut tail = Vec::with_capacity(table.len() + 40);
        tail.extend_from_slice(table.as_bytes());
        tail.extend_from_slice(&(table.len() as u64).to_le_bytes());
        self.hasher.update(&tail);
        tail.extend_from_slice(&self.hasher.digest128().to_le_bytes());
        tail.extend_from_slice(END);
        self.temp.write_at(&tail, self.pos)?;
        self.temp.sync()?;
        let published = self.temp.publish(false)?;
        sync_dir(self.dest.parent().unwrap_or(Path::new(".")))?;
        Ok(published)
    }
}

fn table_json(files: &[JFile], ranges: &[Range]) -> Value {
    json!({
        "version": 1,
        "files": files.iter().map(|f| json!({"name": f.name, "dev": f.dev, "ino": f.ino, "size": f.size})).collect::<Vec<_>>(),
        "ranges": ranges.iter().map(|r| json!({"file": r.file, "offset": r.offset, "len": r.len, "tensor": r.tensor})).collect::<Vec<_>>(),
    })
}

/// A journal read back and checked.
#[derive(Debug)]
pub struct Journal {
    /// Its path.
    pub path: PathBuf,
    /// The files it covers.
    pub files: Vec<JFile>,
    /// Its ranges.
    pub ranges: Vec<Range>,
    /// Where each range's pre-image starts in the journal.
    pub at: Vec<u64>,
    /// Hashes of the post-images (an undo journal), one per range.
    pub post: Option<Vec<u128>>,
    file: File,
}

fn bad(path: &Path, offset: u64, reason: impl Into<String>) -> Error {
    Error::malformed(
        Location::file(path).at(offset),
        None,
        format!("edit journal: {}", reason.into()),
    )
}

fn read_at(f: &File, path: &Path, off: u64, len: u64) -> Result<Vec<u8>> {
    let mut b = vec![0u8; len as usize];
    f.read_exact_at(&mut b, off)
        .map_err(|e| Error::io(path, "read journal", e))?;
    Ok(b)
}

fn u64_at(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
}

fn u128_at(b: &[u8]) -> u128 {
    u128::from_le_bytes(b[..16].try_into().expect("16 bytes"))
}

impl Journal {
    /// Opens and checks a journal: magic, trailer, checksum of everything, table.
    pub fn open(path: &Path) -> Result<Journal> {
        let file = File::open(path).map_err(|e| Error::io(path, "open journal", e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io(path, "stat", e))?
            .len();
        let (end, post) = read_post(&file, path, len)?;
        if end < 8 + TRAILER || read_at(&file, path, 0, 8)? != MAGIC {
            return Err(bad(path, 0, "not a weightport journal"));
        }
        let trailer = read_at(&file, path, end - TRAILER, TRAILER)?;
        if &trailer[24..] != END {
            return Err(bad(
                path,
                end - 8,
                "no end marker (written by another version?)",
            ));
        }
        let table_len = u64_at(&trailer);
        if table_len > MAX_TABLE || table_len + TRAILER + 8 > end {
            return Err(bad(path, end - TRAILER, "table length out of range"));
        }
        let body_end = end - TRAILER + 8;
        if checksum(&file, path, body_end)? != u128_at(&trailer[8..]) {
            return Err(bad(
                path,
                end - 24,
                "checksum mismatch: the journal is damaged; it was not applied",
            ));
        }
        let table_at = end - TRAILER - table_len;
        let table: Value = serde_json::from_slice(&read_at(&file, path, table_at, table_len)?)
            .map_err(|e| bad(path, table_at, e.to_string()))?;
        let (files, ranges) = parse_table(&table).ok_or_else(|| bad(path, table_at, "table"))?;
        let mut at = Vec::with_capacity(ranges.len());
        let mut pos = 8u64;
        for r in &ranges {
            at.push(pos);
            pos = pos
                .checked_add(r.len)
                .ok_or_else(|| bad(path, table_at, "range lengths overflow"))?;
        }
        if pos != table_at || ranges.iter().any(|r| r.file >= files.len()) {
            return Err(bad(
                path,
                table_at,
                "the ranges do not match the pre-images",
            ));
        }
        if post.as_ref().is_some_and(|p| p.len() != ranges.len()) {
            return Err(bad(
                path,
                end,
                "the post-image hashes do not match the ranges",
            ));
        }
        Ok(Journal {
            path: path.to_path_buf(),
            files,
            ranges,
            at,
            post,
            file,
        })
    }

    /// Reads `dst.len()` bytes of range `i`'s pre-image from `from` on.
    pub fn read(&self, i: usize, from: u64, dst: &mut [u8]) -> Result<()> {
        self.file
            .read_exact_at(dst, self.at[i] + from)
            .map_err(|e| Error::io(&self.path, "read journal", e))
    }

    /// The resolved paths of its files (beside the journal).
    pub fn file_paths(&self) -> Vec<PathBuf> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        self.files.iter().map(|f| dir.join(&f.name)).collect()
    }
}

/// The end of the journal proper and the post-image hashes, when an undo record follows it.
fn read_post(f: &File, path: &Path, len: u64) -> Result<(u64, Option<Vec<u128>>)> {
    if len < 32 || read_at(f, path, len - 8, 8)? != POST {
        return Ok((len, None));
    }
    let t = read_at(f, path, len - 32, 24)?;
    let n = u64_at(&t);
    if n > MAX_TABLE || n + 32 > len {
        return Err(bad(path, len - 32, "undo record length out of range"));
    }
    let body = read_at(f, path, len - 32 - n, n)?;
    if xxhash_rust::xxh3::xxh3_128(&body) != u128_at(&t[8..]) {
        return Err(bad(path, len - 32 - n, "undo record checksum mismatch"));
    }
    let v: Value =
        serde_json::from_slice(&body).map_err(|e| bad(path, len - 32 - n, e.to_string()))?;
    let post = v["post"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .map(|h| h.as_str().and_then(|s| u128::from_str_radix(s, 16).ok()))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| bad(path, len - 32 - n, "undo record"))?;
    Ok((len - 32 - n, Some(post)))
}

fn checksum(f: &File, path: &Path, end: u64) -> Result<u128> {
    let mut h = Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0;
    while pos < end {
        let n = (end - pos).min(buf.len() as u64) as usize;
        f.read_exact_at(&mut buf[..n], pos)
            .map_err(|e| Error::io(path, "read journal", e))?;
        h.update(&buf[..n]);
        pos += n as u64;
    }
    Ok(h.digest128())
}

fn parse_table(v: &Value) -> Option<(Vec<JFile>, Vec<Range>)> {
    if v["version"].as_u64()? != 1 {
        return None;
    }
    let files = v["files"]
        .as_array()?
        .iter()
        .map(|f| {
            Some(JFile {
                name: f["name"].as_str()?.to_string(),
                dev: f["dev"].as_u64()?,
                ino: f["ino"].as_u64()?,
                size: f["size"].as_u64()?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    if files
        .iter()
        .any(|f| f.name.contains('/') || f.name.is_empty() || f.name == "..")
    {
        return None;
    }
    let ranges = v["ranges"]
        .as_array()?
        .iter()
        .map(|r| {
            Some(Range {
                file: usize::try_from(r["file"].as_u64()?).ok()?,
                offset: r["offset"].as_u64()?,
                len: r["len"].as_u64()?,
                tensor: r["tensor"].as_str()?.to_string(),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some((files, ranges))
}

/// Appends the post-image hashes to a sealed journal and fsyncs it (it then serves `--undo`).
pub(crate) fn append_post(path: &Path, post: &[u128]) -> Result<()> {
    let body =
        json!({"post": post.iter().map(|h| format!("{h:032x}")).collect::<Vec<_>>()}).to_string();
    let mut rec = body.as_bytes().to_vec();
    rec.extend_from_slice(&(body.len() as u64).to_le_bytes());
    rec.extend_from_slice(&xxhash_rust::xxh3::xxh3_128(body.as_bytes()).to_le_bytes());
    rec.extend_from_slice(POST);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| Error::io(path, "open journal", e))?;
    f.write_all(&rec).map_err(|e| jerr(path, e))?;
    f.sync_all()
        .map_err(|e| Error::io(path, "fsync journal", e))
}

/// The journals that may cover `real` (a resolved file): its own, and its directory's (a repo
/// edit).
pub(crate) fn journals_for(real: &Path) -> [PathBuf; 2] {
    let dir = real.parent().unwrap_or(Path::new("."));
    [
        dir.join(format!(".{}.wp-journal", file_name(real))),
        dir.join(format!("{REPO_SIDE}.wp-journal")),
    ]
}
