//! What a job (a job file, or `convert` with several `-o`) writes, told apart before any of it
//! runs: no output inside another (or at its place, or a part of another's GGUF split set), no
//! side file (`attest`, `report`, the job's state) at another's place, at an output's or inside
//! another output's directory, nor at an input's place (an input file, a file of an input
//! directory, an importance matrix, the job file). Paths are compared with their directories
//! resolved (`pipeline::side::resolved`: a symlinked directory, `..`), files by device and inode.
//! Each conversion checks its own side files again against the files it plans and reads
//! (`pipeline::side::check`), with `--force` deciding about existing files there.

use std::path::{Path, PathBuf};

use weightport_core::Error;
use weightport_engine::side::resolved;

use crate::job::Job;
use crate::render::p;

/// A path the job writes: whose (the output's index, `None` for the job's own state) and as
/// what.
struct Written {
    owner: Option<usize>,
    what: &'static str,
    path: PathBuf,
    at: PathBuf,
}

/// Where a written path was asked for: `job.toml:12` (its output's line; the job file for
/// its state) or `-o PATH`.
fn prefix(job: &Job, w: &Written) -> String {
    match (w.owner, &job.state) {
        (Some(i), Some(_)) => format!("{}:{}", p(&job.file), job.outputs[i].line),
        (Some(i), None) => format!("-o {}", p(&job.outputs[i].args.output)),
        (None, _) => p(&job.file),
    }
}

/// `the output`, `attest out/a.json`, `the state out/.state.json`.
fn subject(w: &Written) -> String {
    match (w.owner, w.what) {
        (Some(_), "output") => "the output".into(),
        (Some(_), what) => format!("{what} {}", p(&w.path)),
        (None, what) => format!("the {what} {}", p(&w.path)),
    }
}

/// `out/r, the output of job.toml:6`.
fn object(job: &Job, w: &Written) -> String {
    match w.owner {
        Some(_) => format!("{}, the {} of {}", p(&w.path), w.what, prefix(job, w)),
        None => format!("{}, the job's {}", p(&w.path), w.what),
    }
}

/// Refuses outputs and side files of `job` that overlap, or side files at an input's place.
pub(crate) fn refuse(job: &Job) -> Result<(), Error> {
    let outputs: Vec<Written> = job
        .outputs
        .iter()
        .enumerate()
        .map(|(i, o)| written(Some(i), "output", &o.args.output))
        .collect();
    let mut sides = Vec::new();
    for (i, o) in job.outputs.iter().enumerate() {
        sides.extend(
            o.args
                .attest
                .as_deref()
                .map(|a| written(Some(i), "attest", a)),
        );
        sides.extend(
            o.args
                .report
                .as_deref()
                .map(|r| written(Some(i), "report", r)),
        );
    }
    sides.extend(job.state.as_deref().map(|s| written(None, "state", s)));
    refuse_nested_outputs(job, &outputs)?;
    refuse_shared_sides(job, &sides, &outputs)?;
    refuse_split_parts(job, &outputs, &sides)?;
    refuse_inputs(job, &sides)
}

fn written(owner: Option<usize>, what: &'static str, path: &Path) -> Written {
    Written {
        owner,
        what,
        path: path.to_path_buf(),
        at: resolved(path),
    }
}

/// Two outputs at one place, or one inside the other's directory.
fn refuse_nested_outputs(job: &Job, outputs: &[Written]) -> Result<(), Error> {
    for (k, b) in outputs.iter().enumerate() {
        for a in &outputs[..k] {
            let why = if a.at == b.at {
                "is also written as"
            } else if b.at.starts_with(&a.at) {
                "lies inside"
            } else if a.at.starts_with(&b.at) {
                "contains"
            } else {
                continue;
            };
            return Err(overlap(job, b, why, a));
        }
    }
    Ok(())
}

/// `-o out/r/x: the output lies inside out/r, the output of -o out/r; nothing was written`.
fn overlap(job: &Job, b: &Written, why: &str, a: &Written) -> Error {
    Error::Usage(format!(
        "{}: {} {why} {}; nothing was written",
        prefix(job, b),
        subject(b),
        object(job, a)
    ))
}

/// Side files at one place, at an output's, inside another output's directory, or holding an
/// output inside them.
fn refuse_shared_sides(job: &Job, sides: &[Written], outputs: &[Written]) -> Result<(), Error> {
    for (k, s) in sides.iter().enumerate() {
        if let Some(a) = sides[..k].iter().find(|a| a.at == s.at) {
            return Err(overlap(job, s, "is also written as", a));
        }
        for o in outputs {
            let why = if o.at == s.at {
                "is also written as"
            } else if o.at.starts_with(&s.at) {
                "contains"
            } else if s.at.starts_with(&o.at) && s.owner != o.owner {
                // Inside its own output is the conversion's to check (against the files it
                // plans); inside another's, what that output's files are is not known here.
                "lies inside"
            } else {
                continue;
            };
            return Err(overlap(job, s, why, o));
        }
    }
    Ok(())
}

/// A path named as a part of a GGUF output split by `shard_size` (`m-00001-of-00003.gguf`
/// beside `m.gguf`).
fn refuse_split_parts(job: &Job, outputs: &[Written], sides: &[Written]) -> Result<(), Error> {
    for (o, split) in outputs.iter().zip(&job.outputs) {
        let name = o.at.file_name().map(|n| n.to_string_lossy().into_owned());
        let Some(stem) = name.as_deref().and_then(|n| n.strip_suffix(".gguf")) else {
            continue;
        };
        if split.args.shard_size.is_none() {
            continue;
        }
        for w in outputs.iter().chain(sides) {
            if w.at.parent() == o.at.parent() && is_part_name(&w.at, stem) {
                return Err(overlap(job, w, "is named as a part of the split set", o));
            }
        }
    }
    Ok(())
}

/// Whether `path` is named `<stem>-NNNNN-of-NNNNN.gguf`.
fn is_part_name(path: &Path, stem: &str) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let Some(rest) = name.as_deref().and_then(|n| n.strip_prefix(stem)) else {
        return false;
    };
    let Some(rest) = rest.strip_suffix(".gguf") else {
        return false;
    };
    let b = rest.as_bytes();
    b.len() == 15
        && b[0] == b'-'
        && &b[6..10] == b"-of-"
        && b[1..6].iter().chain(&b[10..15]).all(u8::is_ascii_digit)
}

/// What the job reads: every output's inputs and importance matrix, and the job file.
fn inputs_of(job: &Job) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = Vec::new();
    for o in &job.outputs {
        v.extend(o.args.inputs.iter().cloned());
        v.extend(o.args.quant.imatrix.iter().cloned());
    }
    if job.state.is_some() {
        v.push(job.file.clone());
    }
    v.sort();
    v.dedup();
    v
}

/// The directories whose files an input reads: a directory given, an index's directory.
fn input_dir(input: &Path) -> Option<PathBuf> {
    if input.is_dir() {
        return Some(resolved(input));
    }
    let index = input.to_string_lossy().ends_with(".index.json");
    index.then(|| input.parent().map(resolved)).flatten()
}

/// A side file (outputs' statements and reports) that is an input, or an existing file of an
/// input directory. The job's state is not checked here (`run` keeps it).
fn refuse_inputs(job: &Job, sides: &[Written]) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let inputs = inputs_of(job);
    let dirs: Vec<(PathBuf, &PathBuf)> = inputs
        .iter()
        .filter_map(|i| input_dir(i).map(|d| (d, i)))
        .collect();
    for s in sides.iter().filter(|s| s.owner.is_some()) {
        let Some(sid) = id(&s.path) else {
            continue;
        };
        let why = match inputs.iter().find(|i| id(i) == Some(sid)) {
            Some(i) if job.state.is_some() && *i == job.file => "is the job file".into(),
            Some(i) => format!("is an input of this job ({})", p(i)),
            None => match dirs.iter().find(|(d, _)| s.at.starts_with(d)) {
                Some((_, i)) => format!("is a file of the input {}", p(i)),
                None => continue,
            },
        };
        return Err(Error::Usage(format!(
            "{}: {} {why}; a side file never replaces an input; nothing was written",
            prefix(job, s),
            subject(s)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_outputs_at_one_path_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("job.toml");
        let text = "[[job]]\ninput = \"in\"\n[[job.output]]\npath = \"a.gguf\"\n[[job.output]]\npath = \"a.gguf\"\n";
        std::fs::write(&f, text).unwrap();
        let job = crate::job::load(&f).unwrap();
        let e = refuse(&job).unwrap_err().to_string();
        assert!(e.contains("also written"), "{e}");
    }

    #[test]
    fn split_part_names() {
        assert!(is_part_name(Path::new("d/m-00001-of-00003.gguf"), "m"));
        assert!(!is_part_name(Path::new("d/m-0001-of-00003.gguf"), "m"));
        assert!(!is_part_name(Path::new("d/mm-00001-of-00003.gguf"), "m"));
        assert!(!is_part_name(Path::new("d/m.gguf"), "m"));
    }
}
