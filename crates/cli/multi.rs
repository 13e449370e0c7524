//! `weightport convert IN -o A -o B:quant=Q8_0 …`: several outputs of one input, made from one
//! read as the outputs of a job file's `[[job]]` are (the job runner runs them, without a
//! state file).
//!
//! Each `-o` is `PATH[:KEY[=VALUE][,KEY[=VALUE]…]]` with the keys of a job file's
//! `[[job.output]]`, read as the job file reads them (`quant=Q8_0`, `shard_size=2GB`,
//! `attest=true` or `attest=PATH`, `verify=false`…); a bare key is `true` (`pure`, `report`).
//! Every output gets the command line's other options plus its own; an option given both ways
//! is refused (clap's "cannot be used multiple times"). What follows the last colon is options
//! when it is shaped as options (`KEY` or `KEY=VALUE` items) and one item names a known key or
//! has a value; then every item must be right, or the `-o` is refused naming the key. So
//! `-o a:b` is the path `a:b`, and `-o a.gguf:quantt=Q8_0` is refused, not a path; a path that
//! itself ends in `:KEY=VALUE` is written with a trailing colon (`-o 'odd:quant=x:'`). Values
//! cannot hold commas: use a job file for those.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::Parser;
use serde::Deserialize;
use weightport_core::Error;

use crate::args::{Cli, Command, ConvertArgs};
use crate::job::{Job, Kind, Options, PlannedOutput, OPTION_KEYS};

/// Whether `a` names several outputs or options for one: it is then made by [`job_of`].
pub(crate) fn is_multi(a: &ConvertArgs) -> bool {
    a.outputs.len() > 1 || a.outputs.iter().any(|o| !matches!(split(o), Ok((_, None))))
}

/// A key as it may be written: letters, digits, `_` and `-`, not starting with a digit.
fn key_shaped(k: &str) -> bool {
    let mut c = k.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == '-')
}

/// The kind of option `key` (`outtype` is `dtype`'s alias, as in job files).
fn kind_of(key: &str) -> Option<Kind> {
    let key = if key == "outtype" { "dtype" } else { key };
    OPTION_KEYS
        .iter()
        .find(|(k, _)| *k == key)
        .map(|&(_, kind)| kind)
}

/// `PATH[:options]` → the path and its options (`None`: no option part), or why the options
/// are refused (naming the key).
pub(crate) fn split(spec: &Path) -> Result<(PathBuf, Option<Options>), String> {
    let s = spec.to_string_lossy();
    let Some((path, tail)) = s.rsplit_once(':') else {
        return Ok((spec.to_path_buf(), None));
    };
    if tail.is_empty() {
        return Ok((PathBuf::from(path), Some(Options::default())));
    }
    let items: Vec<(&str, Option<&str>)> = tail
        .split(',')
        .map(|item| match item.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (item, None),
        })
        .collect();
    let shaped = items.iter().all(|(k, _)| key_shaped(k));
    let claims = items
        .iter()
        .any(|(k, v)| v.is_some() || kind_of(k).is_some());
    if !(shaped && claims) {
        return Ok((spec.to_path_buf(), None));
    }
    Ok((PathBuf::from(path), Some(options_of(&items)?)))
}

/// The options `KEY[=VALUE]` items stand for, read as a job file's `[[job.output]]` table.
fn options_of(items: &[(&str, Option<&str>)]) -> Result<Options, String> {
    let mut table = toml::Table::new();
    for &(key, value) in items {
        let Some(kind) = kind_of(key) else {
            return Err(format!(
                "unknown key `{key}` (the keys are a job file's `[[job.output]]` keys, \
                 docs/jobs.md); to name a path that ends in `:{key}…`, add a trailing colon"
            ));
        };
        let v = item_value(key, kind, value)?;
        match (table.get_mut(key), v) {
            (Some(toml::Value::Array(list)), toml::Value::Array(more)) => list.extend(more),
            (Some(_), _) => return Err(format!("`{key}` is given twice")),
            (None, v) => {
                table.insert(key.to_string(), v);
            }
        }
    }
    Options::deserialize(toml::Value::Table(table)).map_err(|e| e.to_string())
}

/// The job file's value of `key` written as `KEY=VALUE` (or a bare `KEY`).
fn item_value(key: &str, kind: Kind, value: Option<&str>) -> Result<toml::Value, String> {
    use toml::Value as V;
    let text = |v: &str| V::String(v.to_string());
    match (kind, value) {
        (Kind::Switch | Kind::Toggle, None | Some("true")) => Ok(V::Boolean(true)),
        (Kind::Switch | Kind::Toggle, Some("false")) => Ok(V::Boolean(false)),
        (Kind::Switch, Some(v)) => Err(format!("`{key}` takes true or false, not `{v}`")),
        (_, None | Some("")) => Err(format!("`{key}` needs a value (`{key}=…`)")),
        (Kind::Toggle | Kind::Text, Some(v)) => Ok(text(v)),
        (Kind::List, Some(v)) => Ok(V::Array(vec![text(v)])),
        (Kind::Count, Some(v)) => v
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .map(V::Integer)
            .ok_or_else(|| format!("`{key}` takes a whole number, not `{v}`")),
        (Kind::Size, Some(v)) => Ok(v.parse::<i64>().map(V::Integer).unwrap_or(text(v))),
    }
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
pub(crate) fn job_of(a: &ConvertArgs) -> Result<Job, Error> {
    let base = without_outputs(&a.argv);
    let mut outputs = Vec::new();
    for (k, spec) in a.outputs.iter().enumerate() {
        let at = |what: String| Error::Usage(format!("-o {}: {what}", crate::render::p(spec)));
        let (path, options) = split(spec).map_err(at)?;
        let options = options.unwrap_or_default();
        let mut argv = base.clone();
        for (name, value) in crate::job::option_flags(Path::new(""), &path, &options) {
            argv.push(format!("--{name}").into());
            argv.extend(value.map(OsString::from));
        }
        argv.push("-o".into());
        argv.push(path.clone().into_os_string());
        let cli = Cli::try_parse_from(&argv).map_err(|e| at(crate::job::option_error(&e)))?;
        let Command::Convert(mut args) = cli.command else {
            return Err(at("not a conversion".into()));
        };
        args.output = path;
        args.argv = argv.clone();
        let given = args
            .inputs
            .iter()
            .map(|i| crate::job::shown_input(i))
            .collect();
        outputs.push(PlannedOutput {
            job: 1,
            output: k + 1,
            line: k + 1,
            args: *args,
            threads: cli.threads,
            max_memory: cli.max_memory,
            options,
            given,
            argv: argv
                .iter()
                .skip(1)
                .map(|a| {
                    crate::job::shown_input(Path::new(a))
                        .to_string_lossy()
                        .into_owned()
                })
                .collect(),
        });
    }
    let job = Job {
        file: PathBuf::from("convert"),
        state: None,
        outputs,
    };
    crate::overlaps::refuse(&job)?;
    Ok(job)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_after_the_last_colon_when_shaped_as_options() {
        let (p, o) = split(Path::new("out/m.gguf:quant=Q8_0,pure,report")).unwrap();
        let o = o.unwrap();
        assert_eq!(p, Path::new("out/m.gguf"));
        assert_eq!(
            (o.quant.as_deref(), o.pure, o.report),
            (Some("Q8_0"), Some(true), Some(crate::job::Toggle::On(true)))
        );
        assert_eq!(
            split(Path::new("a:b")).unwrap(),
            (PathBuf::from("a:b"), None)
        );
        assert_eq!(split(Path::new("a:b c=1")).unwrap().1, None);
        assert!(split(Path::new("a:quanta=1"))
            .unwrap_err()
            .contains("`quanta`"));
        let (p, o) = split(Path::new("odd:quant=x:")).unwrap();
        assert_eq!(p, Path::new("odd:quant=x"));
        assert!(o.unwrap().quant.is_none());
        assert!(split(Path::new("m:pure=maybe"))
            .unwrap_err()
            .contains("`pure`"));
        let o = split(Path::new(
            "m:attest=true,rename=s/a/b/,rename=s/c/d/,threads=3",
        ));
        let o = o.unwrap().1.unwrap();
        assert_eq!(o.attest, Some(crate::job::Toggle::On(true)));
        assert_eq!(o.rename.unwrap(), ["s/a/b/", "s/c/d/"]);
        assert_eq!(o.threads, Some(3));
        let o = split(Path::new("m:attest=a.json,shard_size=5GB,outtype=f16")).unwrap();
        let o = o.1.unwrap();
        assert_eq!(o.attest, Some(crate::job::Toggle::Path("a.json".into())));
        assert_eq!(o.shard_size, Some(crate::job::Size::Text("5GB".into())));
        assert_eq!(o.dtype.as_deref(), Some("f16"));
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
