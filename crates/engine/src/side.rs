//! Side files: what a command writes beside its outputs (`--attest`'s statement, `--report`'s
//! page, `plan`'s plan file, a unit's failure record). They follow the outputs' transaction
//! rules: never an input (told apart by device and inode, symlinks followed, as inputs are),
//! never a file of the output nor another side file (by path, directories resolved), never an
//! existing file without `--force`: all checked ([`check`]) when the output is planned, before
//! anything is written. They are written ([`write`]) through a fresh temp file beside them
//! (`core::staging::TempFile`: a new name, `O_EXCL`, so nothing planted there is written
//! through), fsynced and renamed into place, without replacing what appeared meanwhile
//! unless `--force`.

use std::path::{Component, Path, PathBuf};

use weightport_core::staging::{stale_temp_owner, sync_dir, OutputLock, TempFile};
use weightport_core::{shown, Error, IoCounter, Result};

/// A file a command writes beside its outputs, with the option that named it (`--attest`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideFile {
    /// The option, as the user gave it (`--attest`, `--report`, `--plan`).
    pub flag: String,
    /// Where it goes.
    pub path: PathBuf,
    /// An existing file there may be replaced: `--force`, or a job's record says this job
    /// wrote it.
    pub replace: bool,
}

impl SideFile {
    /// A side file named by `flag`, replacing nothing.
    pub fn new(flag: &str, path: &Path) -> SideFile {
        SideFile {
            flag: flag.to_string(),
            path: path.to_path_buf(),
            replace: false,
        }
    }

    /// The same, replacing an existing file if `yes`.
    pub fn replacing(mut self, yes: bool) -> SideFile {
        self.replace = yes;
        self
    }

    /// The option and the path (`--attest PATH` on the command line), for messages.
    pub fn label(&self) -> String {
        format!("{} {}", self.flag, shown(&self.path))
    }

    fn refused(&self, why: impl std::fmt::Display) -> Error {
        Error::Usage(format!("{}: {why}", self.label()))
    }
}

/// `path` as the filesystem resolves it: absolute, its longest existing prefix through
/// `canonicalize` (every symlink followed), the rest as written with `.` and `..` folded. Two
/// paths that name one place (through a symlinked directory, `a/../b`) resolve alike.
pub fn resolved(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let parts: Vec<Component> = abs.components().collect();
    let (mut out, k) = (0..=parts.len())
        .rev()
        .find_map(|k| {
            let prefix: PathBuf = parts[..k].iter().collect();
            prefix.canonicalize().ok().map(|c| (c, k))
        })
        .unwrap_or_default();
    for c in &parts[k..] {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// A file's identity (device, inode), symlinks followed.
fn identity(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// Refuses what a side file may not be. `inputs`: every file the conversion reads (and the
/// inputs as given); `outputs`: every file the output consists of. A side file that exists is
/// replaced only when it may be (`replace`), only when it is a regular file (or a symlink,
/// which the rename replaces, not what it points to), and never when it is an input. With
/// `probe` (not in a dry run, which writes nothing), a temp file is created and removed beside
/// each, to learn now that its directory takes one.
pub fn check(
    sides: &[SideFile],
    inputs: &[PathBuf],
    outputs: &[PathBuf],
    probe: bool,
) -> Result<()> {
    let outs: Vec<(PathBuf, &PathBuf)> = outputs.iter().map(|p| (resolved(p), p)).collect();
    let ids: Vec<(u64, u64)> = inputs.iter().filter_map(|p| identity(p)).collect();
    let mut seen: Vec<(PathBuf, &SideFile)> = Vec::new();
    for side in sides {
        let at = resolved(&side.path);
        if let Some((_, other)) = seen.iter().find(|(p, _)| *p == at) {
            return Err(side.refused(format!(
                "also the file of {}; name another file",
                other.flag
            )));
        }
        if let Some((o, given)) = outs.iter().find(|(o, _)| o.starts_with(&at)) {
            let what = match *o == at {
                true => "is a file of the output",
                false => "is a directory of the output file",
            };
            return Err(side.refused(format!("{what} {}; name another file", shown(given))));
        }
        check_existing(side, &ids, probe)?;
        seen.push((at, side));
    }
    Ok(())
}

/// Refuses when one of `paths` (files an output's commit writes or removes) is one of
/// `inputs` (device and inode, symlinks followed), whatever `--force` says.
pub fn refuse_inputs<'a>(
    paths: impl Iterator<Item = &'a PathBuf>,
    inputs: &[PathBuf],
) -> Result<()> {
    let ids: Vec<(u64, u64)> = inputs.iter().filter_map(|p| identity(p)).collect();
    for p in paths {
        if identity(p).is_some_and(|id| ids.contains(&id)) {
            return Err(Error::Usage(format!(
                "{}: is an input of this conversion, which the output would replace or \
                 remove; weightport never modifies an input (write the output elsewhere)",
                shown(p)
            )));
        }
    }
    Ok(())
}

/// The refusals that depend on what is at a side file's path now.
fn check_existing(side: &SideFile, inputs: &[(u64, u64)], probe: bool) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = &side.path;
    if path.as_os_str().as_bytes().ends_with(b"/") {
        return Err(side.refused("names a directory; name a file"));
    }
    if let Ok(m) = std::fs::metadata(path) {
        if m.is_dir() {
            return Err(side.refused("is a directory"));
        }
        if identity(path).is_some_and(|id| inputs.contains(&id)) {
            return Err(
                side.refused("is an input of this conversion; a side file never replaces an input")
            );
        }
        if !m.is_file() {
            return Err(side.refused(
                "is not a regular file (a device, a pipe or a socket); a side file only \
                 replaces a regular file",
            ));
        }
    }
    if !side.replace && std::fs::symlink_metadata(path).is_ok() {
        return Err(side.refused(format_args!(
            "already exists; pass {} to replace it",
            weightport_core::Knob::Force
        )));
    }
    let mut dir = path.parent();
    while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
        match std::fs::metadata(d) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => return Err(side.refused(format!("{} is not a directory", shown(d)))),
            Err(_) => dir = d.parent(),
        }
    }
    // The directory it goes into exists (or is the output's, made later): a temp file there now
    // says it can be written before the output is committed, not after.
    let parent_exists = dir == path.parent();
    if probe && parent_exists {
        TempFile::beside(path, &IoCounter::new())
            .map(drop)
            .map_err(|e| side.refused(format!("cannot be written: {e}")))?;
    }
    Ok(())
}

/// Takes the lock of `side` (`.NAME.wp-lock` beside it, as an output file's), so that another
/// weightport run writing the same file is refused when it checks it, before its output is
/// committed, rather than at the rename after. `None` when its directory does not exist yet
/// (one its output makes: that output's own lock covers it). Hold it until the file is written.
pub fn lock(side: &SideFile) -> Result<Option<OutputLock>> {
    let dir = match side.path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Some(name) = side.path.file_name() else {
        return Ok(None);
    };
    if !dir.is_dir() {
        return Ok(None);
    }
    let path = dir.join(format!(".{}.wp-lock", name.to_string_lossy()));
    match OutputLock::acquire(&path, &side.path) {
        Ok(l) => Ok(Some(l)),
        Err(Error::Usage(_)) => Err(side.refused(
            "another weightport run is writing this file; wait for it or name another file",
        )),
        Err(e) => Err(side.refused(format!("cannot be written: {e}"))),
    }
}

/// Writes `bytes` as `side`: a fresh temp file beside it, fsynced, renamed into place
/// (replacing a file there only if `side.replace`), the directory fsynced. A missing directory is
/// created (an output's directory that did not exist when the side file was checked).
pub fn write(side: &SideFile, bytes: &[u8]) -> Result<()> {
    let dir = match side.path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create directory", e))?;
    remove_stale_temps(dir, &side.path);
    let t = TempFile::beside(&side.path, &IoCounter::new())?;
    t.write_at(bytes, 0)?;
    t.sync()?;
    t.publish(side.replace).map_err(|e| match e {
        Error::Usage(m) => Error::Usage(format!("{}: {m}", side.flag)),
        e => e,
    })?;
    sync_dir(dir)
}

/// Removes temp files of `path` left in `dir` by runs that were killed while writing it
/// (`.NAME.PID.RANDOM.wp-tmp` of a process that no longer runs).
fn remove_stale_temps(dir: &Path, path: &Path) {
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return;
    };
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mine = format!(".{name}.");
    for e in rd.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with(&mine) && stale_temp_owner(&n).is_some() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolved_paths_agree_through_symlinked_directories_and_dots() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
        let a = resolved(&d.path().join("link/r/x.json"));
        let b = resolved(&d.path().join("real/q/../r/./x.json"));
        assert_eq!(a, b);
        assert!(a.starts_with(real.canonicalize().unwrap()));
    }

    #[test]
    fn a_side_file_is_refused_where_an_input_or_the_output_is() {
        let d = tempfile::tempdir().unwrap();
        let input = d.path().join("in.bin");
        std::fs::write(&input, b"x").unwrap();
        let side = |p: &Path| vec![SideFile::new("--attest", p).replacing(true)];
        let keep = |p: &Path| vec![SideFile::new("--attest", p)];
        let out = vec![d.path().join("r/model.safetensors")];
        let e = check(&side(&input), std::slice::from_ref(&input), &out, true).unwrap_err();
        assert!(e.to_string().contains("is an input"), "{e}");
        let e = check(&side(&out[0]), &[], &out, true).unwrap_err();
        assert!(e.to_string().contains("is a file of the output"), "{e}");
        let e = check(&side(&d.path().join("r")), &[], &out, true).unwrap_err();
        assert!(
            e.to_string().contains("is a directory of the output file"),
            "{e}"
        );
        let e = check(&keep(&input), &[], &out, true).unwrap_err();
        assert!(e.to_string().contains("pass `force` to replace it"), "{e}");
        check(&side(&input), &[], &out, true).unwrap();
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = check(&side(&fifo), &[], &out, true).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = check(&side(&d.path().join("sub/")), &[], &out, true).unwrap_err();
        assert!(e.to_string().contains("names a directory"), "{e}");
        check(&keep(&d.path().join("r/own.json")), &[input], &out, true).unwrap();
    }
}
