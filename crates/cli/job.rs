//! Job files (`weightport run JOB.toml`): the TOML schema, and each output turned into the
//! `convert` command line it stands for.
//!
//! ```toml
//! state = ".weightport-state.json"   # optional; default `.<job file name>.state.json` beside it
//! [defaults]                         # any output option; every output inherits it
//! threads = 4
//! attest = true                      # true: `<output>.intoto.json`; per output: a path
//! [[job]]
//! input = "release"                  # or a list; a job may also set any output option
//! [[job.output]]
//! path = "out/repo"
//! [[job.output]]
//! path = "out/model-Q4_K_M.gguf"
//! quant = "Q4_K_M"
//! report = "out/model-Q4_K_M.html"
//! ```
//! An option is taken from the output, else its job, else `[defaults]`. Keys are convert's
//! long options with `_` for `-` (`shard_size`, `leave_output_tensor`, `outtype`…), plus
//! `verify = false` (`--no-verify`). Unknown keys are refused with their line. Relative paths
//! are relative to the job file's directory. An output's options are checked by the same
//! parser as `convert`'s, so a job file cannot say what the command line cannot.

use std::path::{Path, PathBuf};

use clap::Parser;
use serde::{Deserialize, Serialize};
use toml::Spanned;
use weightport_core::Error;

use crate::args::{Cli, Command, ConvertArgs};

/// A size: bytes, or text as on the command line (`5GB`, `500MiB`).
#[derive(Deserialize, Serialize, Debug, Clone, PartialEq)]
#[serde(untagged)]
pub(crate) enum Size {
    Bytes(u64),
    Text(String),
}

impl Size {
    fn arg(&self) -> String {
        match self {
            Size::Bytes(n) => n.to_string(),
            Size::Text(s) => s.clone(),
        }
    }
}

/// `attest`/`report`: on/off (a default path beside the output) or a path.
#[derive(Deserialize, Serialize, Debug, Clone, PartialEq)]
#[serde(untagged)]
pub(crate) enum Toggle {
    On(bool),
    Path(String),
}

/// One path or several.
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// What a key's value is, for reading `-o PATH:KEY=VALUE` as the job file reads the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `true`/`false`; a bare key is `true`.
    Switch,
    /// `true`/`false` or a path; a bare key is `true`.
    Toggle,
    /// A whole number.
    Count,
    /// A byte count, or text as on the command line (`5GB`).
    Size,
    /// Text.
    Text,
    /// A list of texts: the key once per item.
    List,
}

/// The [`Kind`] of each option type.
trait OptionKind {
    const KIND: Kind;
}
impl OptionKind for bool {
    const KIND: Kind = Kind::Switch;
}
impl OptionKind for Toggle {
    const KIND: Kind = Kind::Toggle;
}
impl OptionKind for usize {
    const KIND: Kind = Kind::Count;
}
impl OptionKind for Size {
    const KIND: Kind = Kind::Size;
}
impl OptionKind for String {
    const KIND: Kind = Kind::Text;
}
impl OptionKind for Vec<String> {
    const KIND: Kind = Kind::List;
}

/// Declares the option fields once and the structs that carry them (`[defaults]`, `[[job]]`,
/// `[[job.output]]`), each refusing unknown keys, and the keys with their kinds.
macro_rules! with_options {
    ($($(#[$m:meta])* $field:ident: $ty:ty,)*) => {
        /// Every option key of an output and what its value is (aliases not included).
        pub(crate) const OPTION_KEYS: &[(&str, Kind)] =
            &[$((stringify!($field), <$ty as OptionKind>::KIND),)*];

        /// Every option an output can have (all unset by default).
        #[derive(Deserialize, Serialize, Debug, Clone, Default, PartialEq)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct Options { $($(#[$m])* pub(crate) $field: Option<$ty>,)* }

        /// A `[[job]]`.
        #[derive(Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct JobEntry {
            pub(crate) input: Spanned<OneOrMany>,
            #[serde(default)]
            pub(crate) output: Vec<OutputEntry>,
            $($(#[$m])* pub(crate) $field: Option<$ty>,)*
        }

        /// A `[[job.output]]`.
        #[derive(Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct OutputEntry {
            pub(crate) path: Spanned<String>,
            $($(#[$m])* pub(crate) $field: Option<$ty>,)*
        }

        impl Options {
            /// Each option of `self`, else of `base`.
            fn or(self, base: &Options) -> Options {
                Options { $($field: self.$field.or_else(|| base.$field.clone()),)* }
            }
        }
        impl JobEntry {
            fn options(&self) -> Options {
                Options { $($field: self.$field.clone(),)* }
            }
        }
        impl OutputEntry {
            fn options(&self) -> Options {
                Options { $($field: self.$field.clone(),)* }
            }
        }
    };
}

with_options! {
    threads: usize,
    max_memory: Size,
    to: String,
    from: String,
    shard_size: Size,
    #[serde(alias = "outtype")]
    dtype: String,
    dtype_filter: String,
    allow_lossy: bool,
    rename: Vec<String>,
    quant: String,
    pure: bool,
    tensor_type: Vec<String>,
    output_tensor_type: String,
    token_embedding_type: String,
    leave_output_tensor: bool,
    allow_requantize: bool,
    imatrix: String,
    metadata: String,
    include_weights: Vec<String>,
    exclude_weights: Vec<String>,
    arch: String,
    name: String,
    pre_tokenizer: String,
    no_mtp: bool,
    mtp: bool,
    key: String,
    shared: String,
    index_only: bool,
    void2_as: String,
    allow_inert_objects: bool,
    mmproj: bool,
    verify: bool,
    force: bool,
    attest: Toggle,
    report: Toggle,
}

/// The whole file.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct JobFile {
    state: Option<String>,
    #[serde(default)]
    defaults: Options,
    #[serde(default)]
    job: Vec<JobEntry>,
}

/// One output of a job file, ready to run.
#[derive(Debug)]
pub(crate) struct PlannedOutput {
    /// 1-based job and output numbers.
    pub job: usize,
    pub output: usize,
    /// Line of its `path` in the job file.
    pub line: usize,
    /// The `convert` arguments it stands for.
    pub args: ConvertArgs,
    /// Its `threads` and `max_memory`.
    pub threads: Option<usize>,
    pub max_memory: Option<u64>,
    /// The options as merged (for the record of what made the output).
    pub options: Options,
    /// Its inputs as given (a remote address without a URL's query or user information),
    /// for the record and `--json`: `args.inputs` become a remote input's local view when the
    /// run opens it.
    pub given: Vec<PathBuf>,
    /// The `convert` command line it stands for.
    pub argv: Vec<String>,
}

impl PlannedOutput {
    /// `job N output M (PATH, line L)`.
    pub(crate) fn label(&self, file: &Path) -> String {
        format!(
            "{}:{}: job {} output {} ({})",
            crate::render::p(file),
            self.line,
            self.job,
            self.output,
            crate::render::p(&self.args.output)
        )
    }
}

/// A parsed job file.
#[derive(Debug)]
pub(crate) struct Job {
    pub file: PathBuf,
    /// Where what each output was made from is recorded (none for `convert` with several
    /// `-o`).
    pub state: Option<PathBuf>,
    pub outputs: Vec<PlannedOutput>,
}

/// 1-based line of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Reads and checks `file`: its syntax, its keys, and every output's options (by convert's
/// own parser). Nothing runs when any of it is wrong.
pub(crate) fn load(file: &Path) -> Result<Job, Error> {
    let text = std::fs::read_to_string(file).map_err(|e| Error::io(file, "read", e))?;
    let parsed: JobFile = toml::from_str(&text).map_err(|e| {
        let at = e
            .span()
            .map(|s| format!(":{}", line_of(&text, s.start)))
            .unwrap_or_default();
        Error::Usage(format!("{}{at}: {}", crate::render::p(file), e.message()))
    })?;
    // Absolute, so the state's records name the same outputs from any working directory.
    let parent = file.parent().filter(|d| !d.as_os_str().is_empty());
    let parent = parent.unwrap_or(Path::new("."));
    let base = std::path::absolute(parent).map_err(|e| Error::io(parent, "resolve", e))?;
    if parsed.job.is_empty() {
        return Err(Error::Usage(format!(
            "{}: no [[job]]: nothing to do",
            crate::render::p(file)
        )));
    }
    check_defaults(file, &parsed.defaults)?;
    let mut outputs = Vec::new();
    for (j, entry) in parsed.job.iter().enumerate() {
        if entry.output.is_empty() {
            return Err(Error::Usage(format!(
                "{}:{}: job {} has no [[job.output]]",
                crate::render::p(file),
                line_of(&text, entry.input.span().start),
                j + 1
            )));
        }
        let job_opts = entry.options().or(&parsed.defaults);
        for (k, out) in entry.output.iter().enumerate() {
            let line = line_of(&text, out.path.span().start);
            let options = out.options().or(&job_opts);
            let at = |what: String| {
                Error::Usage(format!(
                    "{}:{line}: job {} output {}: {what}",
                    crate::render::p(file),
                    j + 1,
                    k + 1
                ))
            };
            let inputs = resolve_inputs(&base, entry.input.get_ref());
            let path = base.join(out.path.get_ref());
            let argv = convert_argv(&base, &inputs, &path, &options).map_err(at)?;
            let cli = Cli::try_parse_from(&argv).map_err(|e| at(option_error(&e)))?;
            let given = inputs.iter().map(|i| shown_input(i)).collect();
            let Command::Convert(mut args) = cli.command else {
                return Err(at("not a conversion".into()));
            };
            args.output = path.clone();
            outputs.push(PlannedOutput {
                job: j + 1,
                output: k + 1,
                line,
                args: *args,
                threads: cli.threads,
                max_memory: cli.max_memory,
                options,
                given,
                argv: argv.iter().map(|a| shown_arg(a)).collect(),
            });
        }
    }
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
    let state = match &parsed.state {
        Some(s) => base.join(s),
        None => base.join(format!(".{}.state.json", name.unwrap_or_default())),
    };
    let job = Job {
        file: file.to_path_buf(),
        state: Some(state),
        outputs,
    };
    Ok(job)
}

/// What clap's refusal of an output's options means in keys: a missing option is named by
/// its key (`missing \`quant\`, which the options given need`), anything else as clap says.
pub(crate) fn option_error(e: &clap::Error) -> String {
    match crate::missing_arguments(e) {
        Some(args) => {
            let keys: Vec<String> = args
                .iter()
                .map(|a| {
                    let flag = a.split_whitespace().next().unwrap_or(a);
                    format!("`{}`", flag.trim_start_matches('-').replace('-', "_"))
                })
                .collect();
            format!("missing {}, which the options given need", keys.join(", "))
        }
        None => crate::usage_message(e),
    }
}

/// `attest` and `report` in `[defaults]` can only be switched on: one path for every output
/// would be overwritten by each.
fn check_defaults(file: &Path, d: &Options) -> Result<(), Error> {
    for (key, t) in [("attest", &d.attest), ("report", &d.report)] {
        if let Some(Toggle::Path(_)) = t {
            return Err(Error::Usage(format!(
                "{}: [defaults] {key}: true or false (a path is given per output)",
                crate::render::p(file)
            )));
        }
    }
    Ok(())
}

/// An input as recorded and shown: a remote address without a URL's query (a signed URL's
/// signature) or user information; a local path as it is.
pub(crate) fn shown_input(p: &Path) -> PathBuf {
    match weightport_remote::is_remote(p) {
        true => PathBuf::from(weightport_remote::answers::shown_url(&p.to_string_lossy())),
        false => p.to_path_buf(),
    }
}

/// An argument of the command line an output stands for, as recorded (see [`shown_input`]).
fn shown_arg(a: &std::ffi::OsStr) -> String {
    shown_input(Path::new(a)).to_string_lossy().into_owned()
}

/// A side file's key (`imatrix`, `metadata`): relative to the job file's directory, but a remote
/// address as given.
fn side_path(base: &Path, m: &str) -> String {
    match weightport_remote::is_remote(Path::new(m)) {
        true => m.to_string(),
        false => base.join(m).to_string_lossy().into_owned(),
    }
}

/// The job's inputs: relative to the job file's directory, but a remote address as given.
fn resolve_inputs(base: &Path, input: &OneOrMany) -> Vec<PathBuf> {
    let one = |s: &String| match weightport_remote::is_remote(Path::new(s)) {
        true => PathBuf::from(s),
        false => base.join(s),
    };
    match input {
        OneOrMany::One(s) => vec![one(s)],
        OneOrMany::Many(v) => v.iter().map(one).collect(),
    }
}

/// Where `attest`/`report` put their file: the path given, or beside the output.
fn toggle_path(base: &Path, output: &Path, t: &Option<Toggle>, suffix: &str) -> Option<PathBuf> {
    match t {
        Some(Toggle::Path(p)) => Some(base.join(p)),
        Some(Toggle::On(true)) => {
            let mut s = output.as_os_str().to_os_string();
            s.push(suffix);
            Some(PathBuf::from(s))
        }
        _ => None,
    }
}

/// The `weightport convert` command line an output stands for.
fn convert_argv(
    base: &Path,
    inputs: &[PathBuf],
    output: &Path,
    o: &Options,
) -> Result<Vec<std::ffi::OsString>, String> {
    let mut v: Vec<std::ffi::OsString> = vec!["weightport".into(), "convert".into()];
    for (name, value) in option_flags(base, output, o) {
        v.push(format!("--{name}").into());
        if let Some(x) = value {
            v.push(x.into());
        }
    }
    if inputs.is_empty() {
        return Err("`input` names no file".into());
    }
    v.extend(inputs.iter().map(|p| p.as_os_str().to_os_string()));
    v.push("-o".into());
    v.push(output.as_os_str().to_os_string());
    Ok(v)
}

/// A flag of the command line (without its `--`) and its value, if it takes one.
pub(crate) type Flag = (&'static str, Option<String>);

/// The flags the options `o` set, in the command line's order.
pub(crate) fn option_flags(base: &Path, output: &Path, o: &Options) -> Vec<Flag> {
    let mut flags = text_flags(o);
    flags.extend(switch_flags(o));
    if let Some(m) = &o.imatrix {
        flags.push(("imatrix", Some(side_path(base, m))));
    }
    if let Some(m) = &o.metadata {
        flags.push(("metadata", Some(side_path(base, m))));
    }
    flags.extend(list_flags(o));
    flags.extend(number_flags(o));
    flags.extend(toggle_flags(base, output, o));
    flags
}

/// The options with a text value.
fn text_flags(o: &Options) -> Vec<Flag> {
    let strings = [
        ("to", &o.to),
        ("from", &o.from),
        ("dtype", &o.dtype),
        ("dtype-filter", &o.dtype_filter),
        ("quant", &o.quant),
        ("output-tensor-type", &o.output_tensor_type),
        ("token-embedding-type", &o.token_embedding_type),
        ("arch", &o.arch),
        ("name", &o.name),
        ("pre-tokenizer", &o.pre_tokenizer),
        ("key", &o.key),
        ("shared", &o.shared),
        ("void2-as", &o.void2_as),
    ];
    strings
        .into_iter()
        .filter_map(|(name, value)| value.as_ref().map(|x| (name, Some(x.clone()))))
        .collect()
}

/// The switches set to true (`verify = false` as `--no-verify`).
fn switch_flags(o: &Options) -> Vec<Flag> {
    let bools = [
        ("allow-lossy", o.allow_lossy),
        ("pure", o.pure),
        ("leave-output-tensor", o.leave_output_tensor),
        ("allow-requantize", o.allow_requantize),
        ("index-only", o.index_only),
        ("allow-inert-objects", o.allow_inert_objects),
        ("mmproj", o.mmproj),
        ("no-mtp", o.no_mtp),
        ("mtp", o.mtp),
        ("force", o.force),
        ("no-verify", o.verify.map(|v| !v)),
    ];
    bools
        .into_iter()
        .filter(|&(_, on)| on == Some(true))
        .map(|(name, _)| (name, None))
        .collect()
}

/// The options given as lists: one flag per value.
fn list_flags(o: &Options) -> Vec<Flag> {
    let lists = [
        ("rename", &o.rename),
        ("tensor-type", &o.tensor_type),
        ("include-weights", &o.include_weights),
        ("exclude-weights", &o.exclude_weights),
    ];
    lists
        .into_iter()
        .flat_map(|(name, list)| list.iter().flatten().map(move |x| (name, Some(x.clone()))))
        .collect()
}

/// The sizes and the thread count.
fn number_flags(o: &Options) -> Vec<Flag> {
    let mut flags = Vec::new();
    for (name, size) in [("shard-size", &o.shard_size), ("max-memory", &o.max_memory)] {
        if let Some(s) = size {
            flags.push((name, Some(s.arg())));
        }
    }
    if let Some(n) = o.threads {
        flags.push(("threads", Some(n.to_string())));
    }
    flags
}

/// `--attest` and `--report`, with the paths their toggles stand for.
fn toggle_flags(base: &Path, output: &Path, o: &Options) -> Vec<Flag> {
    let mut flags = Vec::new();
    if let Some(p) = toggle_path(base, output, &o.attest, ".intoto.json") {
        flags.push(("attest", Some(p.display().to_string())));
    }
    if let Some(p) = toggle_path(base, output, &o.report, ".html") {
        flags.push(("report", Some(p.display().to_string())));
    }
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<Job, Error> {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("job.toml");
        std::fs::write(&f, text).unwrap();
        load(&f)
    }

    #[test]
    fn options_merge_output_over_job_over_defaults() {
        let j = load_text(
            "[defaults]\nquant = \"Q8_0\"\nthreads = 2\n[[job]]\ninput = \"in\"\nquant = \"Q6_K\"\n\
             [[job.output]]\npath = \"a.gguf\"\n[[job.output]]\npath = \"b.gguf\"\nquant = \"Q4_K_M\"\n",
        )
        .unwrap();
        let q: Vec<_> = j
            .outputs
            .iter()
            .map(|o| o.args.quant.quant.clone())
            .collect();
        assert_eq!(q, [Some("Q6_K".into()), Some("Q4_K_M".into())]);
        assert_eq!(j.outputs[1].threads, Some(2));
        assert_eq!(j.outputs[1].line, 10);
    }

    #[test]
    fn importance_options_reach_the_convert_arguments() {
        let j = load_text(
            "[[job]]\ninput = \"in\"\n[[job.output]]\npath = \"a.gguf\"\nquant = \"IQ4_XS\"\n\
             imatrix = \"m.gguf\"\nexclude_weights = [\"output\"]\n",
        )
        .unwrap();
        let q = &j.outputs[0].args.quant;
        let m = q.imatrix.as_ref().unwrap();
        assert!(m.is_absolute() && m.ends_with("m.gguf"), "{m:?}");
        assert_eq!(q.exclude_weights, ["output"]);
        assert!(q.include_weights.is_empty());
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let e = load_text(
            "[[job]]\ninput = \"in\"\n[[job.output]]\npath = \"a.gguf\"\nquantt = \"Q8_0\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("job.toml:5") && e.contains("unknown field `quantt`"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_option_value_names_the_output_line() {
        let e = load_text(
            "[[job]]\ninput = \"in\"\n[[job.output]]\npath = \"a.gguf\"\ndtype = \"f8\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("job.toml:4: job 1 output 1") && e.contains("f8"),
            "{e}"
        );
    }

    #[test]
    fn attest_true_puts_the_statement_beside_the_output() {
        let j = load_text("[defaults]\nattest = true\n[[job]]\ninput = \"in\"\n[[job.output]]\npath = \"o/repo\"\n")
            .unwrap();
        let a = j.outputs[0].args.attest.as_ref().unwrap();
        assert!(a.ends_with("o/repo.intoto.json"), "{a:?}");
    }
}
