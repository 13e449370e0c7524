//! The output transaction: nothing of a job becomes visible until everything is staged and
//! verified, and then it is published in an order where a crash leaves a readable output.
//!
//! ```text
//! prepare: lock the output ─ finish commits of killed runs ─ remove their temp files
//!          ─ refuse to overwrite (no --force) ─ list what --force will remove ─ check free space
//! (the executor writes and verifies the weights temp files)
//! commit:  stage extras (index, companions) as temp files ─ fsync everything
//!          ─ journal (repos) ─ weights ─ index ─ companions ─ remove stale files ─ drop journal
//! ```
//! Without `--force` every rename is `RENAME_NOREPLACE`, so a file that appeared meanwhile is
//! never replaced. A repo commit first writes a journal naming every rename and removal; a run
//! killed mid-commit (SIGKILL, power loss) is rolled forward by the next run on that output, so
//! an output is never left holding new shards under an old index. Until the index is renamed the
//! old index still names complete old shards wherever new shard names differ from old ones.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use weightport_core::registry::{ExtraContent, ExtraFile, OutputPlan};
use weightport_core::staging::{stale_temp_owner, sync_dir, OutputLock, TempFile};
use weightport_core::{shown, Error, FinishedFile, IoCounter, Knob, Result, WrittenFile};

/// A prepared output: locked, checked, with the list of what the commit will remove.
pub(crate) struct Prepared {
    lock: Option<OutputLock>,
    /// The directories `prepare` created for the output, innermost first (the output's own
    /// and the missing parents above it): removed on a failure, each only while empty.
    created_dirs: Vec<PathBuf>,
    /// Files `--force` removes after publishing (stale shards, an old index).
    pub removals: Vec<PathBuf>,
    /// Temp files of killed runs that were removed (or, in a dry run, would be).
    pub cleaned: Vec<PathBuf>,
    /// Files published by finishing a killed run's commit.
    pub recovered: Vec<PathBuf>,
    /// Free bytes where the output goes, when known.
    pub free_bytes: Option<u64>,
    /// Bytes the output occupies, rounded up to the filesystem's blocks.
    pub needed_bytes: u64,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        self.lock.take();
        for d in std::mem::take(&mut self.created_dirs) {
            if std::fs::remove_dir(d).is_err() {
                break;
            }
        }
    }
}

fn journal_prefix() -> &'static str {
    ".weightport-commit."
}

fn lock_path(plan: &OutputPlan, target: &Path) -> PathBuf {
    if plan.is_repo {
        plan.dir.join(".weightport.lock")
    } else {
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        plan.dir.join(format!(".{name}.wp-lock"))
    }
}

/// Free bytes and block size of the filesystem holding `path` (or its nearest ancestor).
pub(crate) fn fs_space(path: &Path) -> Option<(u64, u64)> {
    let mut p = path;
    while !p.exists() {
        p = p.parent()?;
        if p.as_os_str().is_empty() {
            p = Path::new(".");
        }
    }
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value to be overwritten.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    (rc == 0).then(|| {
        (
            s.f_bavail as u64 * s.f_frsize as u64,
            (s.f_frsize as u64).max(512),
        )
    })
}

fn check_target_kind(plan: &OutputPlan, target: &Path) -> Result<()> {
    if plan.is_repo {
        if target.exists() && !target.is_dir() {
            return Err(Error::Usage(format!(
                "{}: exists and is not a directory",
                shown(target)
            )));
        }
    } else if target.is_dir() {
        return Err(Error::Usage(format!(
            "{}: is a directory; name a file, or pass {} to choose the output format",
            shown(target),
            Knob::To
        )));
    }
    Ok(())
}

fn names_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Locks and checks the output of `plan`. In a dry run nothing is created or removed, but every
/// refusal the real run would give is given.
pub(crate) fn prepare(
    plan: &OutputPlan,
    target: &Path,
    force: bool,
    dry_run: bool,
) -> Result<Prepared> {
    check_target_kind(plan, target)?;
    let mut p = Prepared {
        lock: None,
        created_dirs: Vec::new(),
        removals: Vec::new(),
        cleaned: Vec::new(),
        recovered: Vec::new(),
        free_bytes: None,
        needed_bytes: 0,
    };
    if !dry_run {
        p.created_dirs = missing_dirs(&plan.dir);
        if !p.created_dirs.is_empty() {
            std::fs::create_dir_all(&plan.dir)
                .map_err(|e| Error::io(&plan.dir, "create directory", e))?;
        }
        p.lock = Some(OutputLock::acquire(&lock_path(plan, target), target)?);
        p.recovered = recover(&plan.dir)?;
    }
    for n in names_in(&plan.dir) {
        if stale_temp_owner(&n).is_some() {
            let path = plan.dir.join(&n);
            if !dry_run {
                std::fs::remove_file(&path)
                    .map_err(|e| Error::io(&path, "remove stale temp file", e))?;
            }
            p.cleaned.push(path);
        }
    }
    check_overwrite(plan, force)?;
    if plan.is_repo && force {
        p.removals = stale_files(plan);
    }
    check_space(plan, &mut p)?;
    Ok(p)
}

/// `dir` and those of its ancestors that do not exist yet, innermost first.
fn missing_dirs(dir: &Path) -> Vec<PathBuf> {
    dir.ancestors()
        .filter(|d| !d.as_os_str().is_empty())
        .take_while(|d| d.symlink_metadata().is_err())
        .map(Path::to_path_buf)
        .collect()
}

fn planned_paths(plan: &OutputPlan) -> impl Iterator<Item = &Path> {
    plan.files
        .iter()
        .map(|f| f.path.as_path())
        .chain(plan.extras.iter().map(|e| e.path.as_path()))
}

fn check_overwrite(plan: &OutputPlan, force: bool) -> Result<()> {
    if force {
        return Ok(());
    }
    if let Some(p) = planned_paths(plan).find(|p| p.symlink_metadata().is_ok()) {
        return Err(Error::Usage(format!(
            "{}: already exists; pass {} to replace it",
            shown(p),
            Knob::Force
        )));
    }
    if plan.is_repo {
        if let Some(n) = names_in(&plan.dir)
            .into_iter()
            .find(|n| (plan.is_own_file)(n))
        {
            return Err(Error::Usage(format!(
                "{}: already holds `{}`; pass {} to replace the repo's weights",
                shown(&plan.dir),
                weightport_core::sanitize(&n),
                Knob::Force
            )));
        }
    }
    Ok(())
}

fn stale_files(plan: &OutputPlan) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = names_in(&plan.dir)
        .into_iter()
        .filter(|n| (plan.is_own_file)(n))
        .map(|n| plan.dir.join(n))
        .filter(|p| !planned_paths(plan).any(|q| q == p))
        .collect();
    v.sort();
    v
}

fn check_space(plan: &OutputPlan, p: &mut Prepared) -> Result<()> {
    let Some((free, block)) = fs_space(&plan.dir) else {
        return Ok(());
    };
    let round = |n: u64| n.div_ceil(block) * block;
    let need: u64 = plan.files.iter().map(|f| round(f.size)).sum::<u64>()
        + plan.extras.iter().map(|e| round(e.size())).sum::<u64>()
        + block;
    p.free_bytes = Some(free);
    p.needed_bytes = need;
    if free < need {
        return Err(Error::io(
            &plan.dir,
            "check free space in",
            std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                format!("the output needs {need} bytes (in filesystem blocks), {free} are free"),
            ),
        ));
    }
    Ok(())
}

fn stage_extra(e: &ExtraFile, io: &IoCounter) -> Result<TempFile> {
    let t = TempFile::beside(&e.path, io)?;
    match &e.content {
        ExtraContent::Bytes(b) => t.write_at(b, 0)?,
        ExtraContent::CopyOf(src) => t.copy_from(src)?,
    }
    t.sync()?;
    Ok(t)
}

fn name_of(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn write_journal(
    dir: &Path,
    renames: &[&TempFile],
    removals: &[PathBuf],
    io: &IoCounter,
) -> Result<PathBuf> {
    let path = dir.join(format!("{}{}.json", journal_prefix(), std::process::id()));
    let doc = json!({
        "renames": renames.iter().map(|t| json!([name_of(t.path()), name_of(t.target())])).collect::<Vec<_>>(),
        "remove": removals.iter().map(|p| name_of(p)).collect::<Vec<_>>(),
    });
    let j = TempFile::beside(&path, io)?;
    j.write_at(doc.to_string().as_bytes(), 0)?;
    j.sync()?;
    let path = j.publish(true)?;
    sync_dir(dir)?;
    Ok(path)
}

/// Finishes the commits of runs that were killed mid-commit in `dir`; returns what it published.
fn recover(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut done = Vec::new();
    for n in names_in(dir) {
        let Some(pid) = n
            .strip_prefix(journal_prefix())
            .and_then(|r| r.strip_suffix(".json"))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks whether the process exists.
        if pid as u32 == std::process::id() || unsafe { libc::kill(pid, 0) } == 0 {
            continue;
        }
        let jp = dir.join(&n);
        let text = std::fs::read(&jp).map_err(|e| Error::io(&jp, "read journal", e))?;
        let doc: Value = serde_json::from_slice(&text).unwrap_or(Value::Null);
        let safe = |s: &str| !s.is_empty() && !s.contains('/') && s != "." && s != "..";
        for pair in doc["renames"].as_array().into_iter().flatten() {
            let (Some(from), Some(to)) = (pair[0].as_str(), pair[1].as_str()) else {
                continue;
            };
            if safe(from) && safe(to) && dir.join(from).exists() {
                std::fs::rename(dir.join(from), dir.join(to))
                    .map_err(|e| Error::io(&dir.join(to), "finish interrupted commit", e))?;
                done.push(dir.join(to));
            }
        }
        for r in doc["remove"].as_array().into_iter().flatten() {
            if let Some(r) = r.as_str().filter(|r| safe(r)) {
                let _ = std::fs::remove_file(dir.join(r));
            }
        }
        sync_dir(dir)?;
        std::fs::remove_file(&jp).map_err(|e| Error::io(&jp, "remove journal", e))?;
    }
    Ok(done)
}

/// What a commit published.
pub(crate) struct Committed {
    /// Weights files.
    pub files: Vec<WrittenFile>,
    /// Extra files (index, companions).
    pub extras: Vec<PathBuf>,
    /// Stale files removed.
    pub removed: Vec<PathBuf>,
}

/// Publishes a job: extras are staged first (any failure leaves the old output untouched), then
/// everything is renamed in order (see the module docs). The extras' and the journal's writes,
/// opens and syncs are counted in `io`.
pub(crate) fn commit(
    prepared: Prepared,
    plan: &OutputPlan,
    weights: Vec<FinishedFile>,
    force: bool,
    io: &IoCounter,
) -> Result<Committed> {
    let extras: Vec<(TempFile, bool)> = plan
        .extras
        .iter()
        .map(|e| stage_extra(e, io).map(|t| (t, e.is_index)))
        .collect::<Result<_>>()?;
    let mut order: Vec<&TempFile> = weights.iter().map(|w| &w.temp).collect();
    order.extend(extras.iter().filter(|(_, i)| *i).map(|(t, _)| t));
    order.extend(extras.iter().filter(|(_, i)| !*i).map(|(t, _)| t));
    let journal = if plan.is_repo {
        Some(write_journal(&plan.dir, &order, &prepared.removals, io)?)
    } else {
        None
    };
    let files: Vec<WrittenFile> = weights
        .into_iter()
        .map(|w| {
            let path = w.temp.publish(force)?;
            Ok(WrittenFile {
                path,
                size: w.size,
                tensors: w.tensors,
            })
        })
        .collect::<Result<_>>()?;
    let mut published = Vec::new();
    let (index, companions): (Vec<_>, Vec<_>) = extras.into_iter().partition(|(_, i)| *i);
    for (t, _) in index.into_iter().chain(companions) {
        published.push(t.publish(force)?);
    }
    sync_dir(&plan.dir)?;
    let mut removed = Vec::new();
    for r in &prepared.removals {
        std::fs::remove_file(r).map_err(|e| Error::io(r, "remove stale file", e))?;
        removed.push(r.clone());
    }
    if let Some(j) = journal {
        std::fs::remove_file(&j).map_err(|e| Error::io(&j, "remove journal", e))?;
    }
    sync_dir(&plan.dir)?;
    let mut prepared = prepared;
    // The directories made for the output are kept, their entries made durable too.
    for d in std::mem::take(&mut prepared.created_dirs) {
        let parent = d.parent().filter(|p| !p.as_os_str().is_empty());
        sync_dir(parent.unwrap_or(Path::new(".")))?;
    }
    Ok(Committed {
        files,
        extras: published,
        removed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(dir: &Path) -> OutputPlan {
        OutputPlan {
            dir: dir.to_path_buf(),
            is_repo: true,
            files: Vec::new(),
            extras: Vec::new(),
            is_own_file: weightport_hf::shard::is_repo_weights_name,
            reshaped: Vec::new(),
        }
    }

    #[test]
    fn a_commit_killed_between_renames_is_rolled_forward_by_the_next_run() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        // A dead run (pid 2147483646) had staged two shards, published the first, and was
        // killed before the second, the index and the removal of the old single file.
        let t2 = ".model-00002-of-00002.safetensors.2147483646.abcdef.wp-tmp";
        let ti = ".model.safetensors.index.json.2147483646.ghijkl.wp-tmp";
        std::fs::write(dir.join("model-00001-of-00002.safetensors"), b"new1").unwrap();
        std::fs::write(dir.join(t2), b"new2").unwrap();
        std::fs::write(dir.join(ti), b"index").unwrap();
        std::fs::write(dir.join("model.safetensors"), b"old").unwrap();
        let stray = ".config.json.2147483646.zzzzzz.wp-tmp";
        std::fs::write(dir.join(stray), b"half-written").unwrap();
        let journal = json!({
            "renames": [
                [".model-00001-of-00002.safetensors.2147483646.aaaaaa.wp-tmp", "model-00001-of-00002.safetensors"],
                [t2, "model-00002-of-00002.safetensors"],
                [ti, "model.safetensors.index.json"],
                ["../escape", "x"],
            ],
            "remove": ["model.safetensors", "../../etc/passwd"],
        });
        std::fs::write(
            dir.join(".weightport-commit.2147483646.json"),
            journal.to_string(),
        )
        .unwrap();
        let p = prepare(&plan(dir), dir, true, false).unwrap();
        assert_eq!(p.recovered.len(), 2);
        assert_eq!(
            std::fs::read(dir.join("model-00002-of-00002.safetensors")).unwrap(),
            b"new2"
        );
        assert_eq!(
            std::fs::read(dir.join("model.safetensors.index.json")).unwrap(),
            b"index"
        );
        assert!(!dir.join("model.safetensors").exists());
        assert!(!dir.join(".weightport-commit.2147483646.json").exists());
        assert_eq!(
            p.cleaned,
            vec![dir.join(stray)],
            "stale temps of dead runs are removed"
        );
        assert!(!dir.join(stray).exists());
        drop(p);
        let mut left: Vec<String> = names_in(dir);
        left.sort();
        assert_eq!(
            left,
            [
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors",
                "model.safetensors.index.json"
            ]
        );
    }
}
