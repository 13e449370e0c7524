//! `weightport convert IN -o A -o B:quant=Q8_0 …`: several outputs of one input, made from one
//! read as the outputs of a job file's `[[job]]` are (the job runner runs them, without a
//! state file).
//!
//! Each `-o` is `PATH[:KEY[=VALUE][,KEY[=VALUE]…]]`, the keys those of a job file's
//! `[[job.output]]` that convert has as options (`quant=Q8_0`, `to=gguf`, `shard_size=2GB`,
//! `pure`, `force`…). Every output gets the command line's other options plus its own; an
//! option given both ways is refused (clap's "cannot be used multiple times"). A suffix is
//! options only when every item names a known key, so `-o a:b` is the path `a:b`; a path that
//! itself ends in `:KEY=VALUE` is written with a trailing colon (`-o 'odd:quant=x:'`). Values
//! cannot hold commas: use a job file for those.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::Parser;
use weightport_core::Error;

use crate::args::{Cli, Command, ConvertArgs};
use crate::job::{Job, Options, PlannedOutput};

/// Keys an output may carry, and whether they take a value.
const KEYS: &[(&str, bool)] = &[
    ("to", true),
    ("shard_size", true),
    ("dtype", true),
    ("outtype", true),
    ("dtype_filter", true),
    ("allow_lossy", false),
    ("rename", true),
    ("quant", true),
    ("pure", false),
    ("tensor_type", true),
    ("output_tensor_type", true),
    ("token_embedding_type", true),
    ("leave_output_tensor", false),
    ("allow_requantize", false),
    ("imatrix", true),
    ("include_weights", true),
    ("exclude_weights", true),
    ("arch", true),
    ("name", true),
    ("force", false),
    ("no_verify", false),
    ("attest", true),
    ("report", true),
];

/// Whether `a` names several outputs or options for one: it is then made by [`job_of`].
pub fn is_multi(a: &ConvertArgs) -> bool {
    a.outputs.len() > 1 || a.outputs.iter().any(|o| split(o).1.is_some())
}

/// `PATH[:options]` → the path and the convert flags of its options (`None`: no option part).
pub fn split(spec: &Path) -> (PathBuf, Option<Vec<String>>) {
    let s = spec.to_string_lossy();
    let Some((path, tail)) = s.rsplit_once(':') else {
        return (spec.to_path_buf(), None);
    };
    if tail.is_empty() {
        return (PathBuf::from(path), Some(Vec::new()));
    }
    let mut flags = Vec::new();
    for item in tail.split(',') {
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (item, None),
        };
        let Some(&(_, takes)) = KEYS.iter().find(|(k, _)| *k == key) else {
            return (spec.to_path_buf(), None);
        };
        flags.push(format!("--{}", key.replace('_', "-")));
        match (takes, value) {
            (true, Some(v)) => flags.push(v.to_string()),
            (false, None | Some("true")) => {}
            (false, Some("false")) => {
                flags.pop();
            }
            _ => return (spec.to_path_buf(), None),
        }
    }
    (PathBuf::from(path), Some(flags))
}

/// The command line without its `-o`/`--output` options (program name first).
fn without_outputs(argv: &[OsString]) -> Vec<OsString> {
    let mut v = Vec::with_capacity(argv.len());
    let mut skip = false;
    for a in argv {
        let s = a.to_string_lossy();
        if std::mem::take(&mut skip) {
            continue;
        }
        if s == "-o" || s == "--output" {
            skip = true;
        } else if !(s.starts_with("--output=") || (s.starts_with("-o") && !s.starts_with("--"))) {
            v.push(a.clone());
        }
    }
    v
}

/// The outputs of `a` as a job of one `[[job]]` (no state file: nothing is skipped, an
/// existing output is refused as `convert` refuses it, unless `force`).
pub fn job_of(a: &ConvertArgs) -> Result<Job, Error> {
    let base = without_outputs(&a.argv);
    let mut outputs = Vec::new();
    for (k, spec) in a.outputs.iter().enumerate() {
        let (path, flags) = split(spec);
        let mut argv = base.clone();
        argv.extend(flags.unwrap_or_default().into_iter().map(OsString::from));
        argv.push("-o".into());
        argv.push(path.clone().into_os_string());
        let at = |what: String| Error::Usage(format!("-o {}: {what}", crate::output::p(spec)));
        let cli = Cli::try_parse_from(&argv).map_err(|e| at(crate::usage_message(&e)))?;
        let Command::Convert(mut args) = cli.command else {
            return Err(at("not a conversion".into()));
        };
        args.output = path;
        args.argv = argv.clone();
        outputs.push(PlannedOutput {
            job: 1,
            output: k + 1,
            line: k + 1,
            args: *args,
            threads: None,
            max_memory: None,
            options: Options::default(),
            argv: argv
                .iter()
                .skip(1)
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
        });
    }
    let job = Job {
        file: PathBuf::from("convert"),
        state: None,
        outputs,
    };
    crate::job::refuse_shared_paths(&job.file, &job.outputs)?;
    Ok(job)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_after_the_last_colon_only_when_every_key_is_known() {
        let (p, f) = split(Path::new("out/m.gguf:quant=Q8_0,pure"));
        assert_eq!(p, Path::new("out/m.gguf"));
        assert_eq!(f.unwrap(), ["--quant", "Q8_0", "--pure"]);
        assert_eq!(split(Path::new("a:b")).0, Path::new("a:b"));
        assert!(split(Path::new("a:b")).1.is_none());
        assert_eq!(split(Path::new("a:quanta=1")).0, Path::new("a:quanta=1"));
        let (p, f) = split(Path::new("odd:quant=x:"));
        assert_eq!(
            (p.as_path(), f.unwrap().len()),
            (Path::new("odd:quant=x"), 0)
        );
        assert!(split(Path::new("m:pure=maybe")).1.is_none());
    }

    #[test]
    fn outputs_are_removed_from_the_command_line() {
        let argv: Vec<OsString> = [
            "weightport",
            "convert",
            "in",
            "-o",
            "a",
            "--output=b",
            "-oc",
            "--output",
            "d",
            "--pure",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let v = without_outputs(&argv);
        assert_eq!(v, ["weightport", "convert", "in", "--pure"]);
    }
}
