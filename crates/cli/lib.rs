//! The `weightport` command line as a library: clap arguments → a pipeline job; indicatif
//! progress on stderr; results on stdout (a table, or one JSON document with `--json`).
//!
//! Two entry points share every step after the arguments: [`main`] is the command (the Rust
//! binary and the Python wheel's `weightport` script), [`run_json`] is the Python API (the same
//! arguments with `--json`, the document returned instead of printed, progress to a caller's
//! sink, no process-wide signal handlers).
//!
//! Exit codes: 0 ok, 1 failed (I/O, malformed input, verification mismatch), 2 usage,
//! 3 refused by the safety policy or a limit. A broken stdout pipe exits 0; a panic never
//! escapes (it is reported as an internal error, exit 1).

mod args;
mod attest;
mod convert;
mod delta;
mod diff;
mod edit;
mod imatrix;
mod inspect;
mod job;
mod multi;
mod options;
mod overlaps;
mod progress;
mod remote;
mod render;
mod report;
mod run;
mod scan;
mod slice;
mod units;
mod verify;

use std::ffi::OsString;
use std::io::Write;

use clap::Parser;
use weightport_core::Error;
use weightport_engine::Progress;
use weightport_engine::{ThreadsOutOfRange, Workers, MAX_THREADS};

use crate::args::{Cli, Command};

/// Runs the command line `argv` (program name first) and returns the exit code.
pub fn main(argv: impl IntoIterator<Item = OsString>) -> u8 {
    weightport_core::spell_knobs_with(options::flag);
    let argv: Vec<OsString> = argv.into_iter().collect();
    let cli = match Cli::try_parse_from(&argv) {
        Ok(c) => units::keep_argv(c, &argv),
        Err(e) => {
            let _ = e.print();
            if !e.use_stderr() {
                return 0;
            }
            // --json holds for argument errors too: clap could not tell us, so look for it.
            if argv.iter().any(|a| a == "--json") {
                render::print_error_json("usage", &usage_message(&e), 2);
            }
            return 2;
        }
    };
    let json = cli.json;
    install_panic_hook();
    let bar = progress::Bar::new();
    let mut out = std::io::stdout().lock();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        setup_process(&cli)?;
        run_command(cli, &bar, &mut out)?;
        out.flush()?;
        Ok(())
    }))
    .unwrap_or(Err(Failure::Internal));
    // What opening the inputs did on the way: killed edits rolled back.
    for n in weightport_edit::take_notices() {
        eprintln!("weightport: {}", weightport_core::sanitize(&n));
    }
    match outcome {
        Ok(()) | Err(Failure::BrokenPipe) => 0,
        Err(Failure::Internal) => {
            if json {
                render::print_error_json("internal", "internal error", 1);
            }
            1
        }
        Err(Failure::Findings(code, message)) => {
            if let Some(m) = message {
                eprintln!("weightport: {m}");
            }
            code
        }
        Err(Failure::Error(e)) => {
            let code = e.exit_code();
            eprintln!("weightport: {e}");
            if json {
                render::print_error_json(e.kind(), &e.to_string(), code);
            }
            code as u8
        }
    }
}

/// Runs the command line `argv` (program name first) as `--json` would, without printing:
/// returns the exit code and the JSON document the command prints on stdout (the error
/// document `{"ok": false, "error": {…}}` on failure). Progress goes to `progress`; nothing
/// process-wide (signal handlers, the open-files limit, the global thread pool) is touched.
pub fn run_json(
    argv: impl IntoIterator<Item = OsString>,
    progress: &dyn Progress,
) -> (i32, String) {
    weightport_core::spell_knobs_with(options::flag);
    let mut argv: Vec<OsString> = argv.into_iter().collect();
    // Right after the program name: before the command and any `--`.
    argv.insert(argv.len().min(1), "--json".into());
    let cli = match Cli::try_parse_from(&argv) {
        Ok(c) => units::keep_argv(c, &argv),
        Err(e) => return (2, render::error_json("usage", &usage_message(&e), 2)),
    };
    install_panic_hook();
    let mut out = Vec::new();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(cli, progress, &mut out)
    }))
    .unwrap_or(Err(Failure::Internal));
    let document = || String::from_utf8_lossy(&out).trim_end().to_string();
    match outcome {
        Ok(()) => (0, document()),
        Err(Failure::Findings(code, _)) => (i32::from(code), document()),
        Err(Failure::Internal) | Err(Failure::BrokenPipe) => {
            (1, render::error_json("internal", "internal error", 1))
        }
        Err(Failure::Error(e)) => {
            let code = e.exit_code();
            (code, render::error_json(e.kind(), &e.to_string(), code))
        }
    }
}

/// The first line of clap's message, without its `error: ` prefix; for missing arguments,
/// which clap lists on the lines after it, the list too.
fn usage_message(e: &clap::Error) -> String {
    let detail = e.to_string();
    let first = detail.lines().next().unwrap_or_default();
    let first = first.trim_start_matches("error: ").to_string();
    match missing_arguments(e) {
        Some(list) => format!("{first} {}", list.join(", ")),
        None => first,
    }
}

/// The arguments a [`clap::error::ErrorKind::MissingRequiredArgument`] error names
/// (`--quant <TYPE>`).
fn missing_arguments(e: &clap::Error) -> Option<Vec<String>> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::MissingRequiredArgument {
        return None;
    }
    match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::Strings(v)) if !v.is_empty() => Some(v.clone()),
        Some(ContextValue::String(v)) => Some(vec![v.clone()]),
        _ => None,
    }
}

/// Reports a panic as an internal error (once per process), except a third-party parser's
/// panic that its caller contains and reports as an error.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            if weightport_core::panic_is_contained() {
                return;
            }
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let loc = info
                .location()
                .map(|l| format!(" at {l}"))
                .unwrap_or_default();
            eprintln!("weightport: internal error (a bug; please report it): {msg}{loc}");
        }));
    });
}

/// How a command failed.
pub enum Failure {
    /// A library error.
    Error(Error),
    /// stdout was closed (e.g. `| head`): not a failure.
    BrokenPipe,
    /// A panic was caught.
    Internal,
    /// The command ran and reported its findings; exit with this code (the command line also
    /// prints the message on stderr).
    Findings(u8, Option<String>),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Error(e)
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Failure::BrokenPipe
        } else {
            Failure::Error(Error::io(std::path::Path::new("<stdout>"), "write", e))
        }
    }
}

/// Raises the soft open-files limit to the hard limit: a 1 TB reshard into 1 GB shards holds
/// hundreds of files open at once, more than the common soft limit of 1024.
fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit on a valid, owned rlimit struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// What only the command does to its own process: signal handlers, the open-files limit, the
/// global thread pool.
fn setup_process(cli: &Cli) -> Result<(), Failure> {
    weightport_engine::cancel::install(cli.json)
        .map_err(|e| Error::Internal(format!("cannot install signal handlers: {e}")))?;
    raise_fd_limit();
    if let Some(b) = thread_pool(&workers_of(cli)?) {
        b.build_global().map_err(pool_error)?;
    }
    Ok(())
}

/// The worker policy of `--threads` and `--max-memory`, built once.
fn workers_of(cli: &Cli) -> Result<Workers, Failure> {
    Workers::new(cli.threads, cli.max_memory).map_err(|ThreadsOutOfRange(n)| {
        Error::Usage(format!(
            "--threads {n}: must be between 1 and {MAX_THREADS}"
        ))
        .into()
    })
}

/// A `--threads` pool: `None` when not asked for (rayon's global pool, one thread per core).
fn thread_pool(workers: &Workers) -> Option<rayon::ThreadPoolBuilder> {
    let n = workers.threads()?;
    Some(rayon::ThreadPoolBuilder::new().num_threads(n))
}

fn pool_error(e: rayon::ThreadPoolBuildError) -> Failure {
    Error::Internal(format!("cannot start the worker threads: {e}")).into()
}

/// Runs one parsed command line in a `--threads` pool of its own (not the process's global
/// one, which a Python caller may use for something else), printing its result on `out`.
fn run(cli: Cli, progress: &dyn Progress, out: &mut Vec<u8>) -> Result<(), Failure> {
    match thread_pool(&workers_of(&cli)?) {
        None => run_command(cli, progress, out),
        Some(b) => {
            let pool = b.build().map_err(pool_error)?;
            pool.install(|| run_command(cli, progress, out))
        }
    }
}

fn run_command(mut cli: Cli, progress: &dyn Progress, out: &mut impl Write) -> Result<(), Failure> {
    let json = cli.json;
    let max_memory = cli.max_memory;
    let _remote = remote::localize(&mut cli.command, max_memory)?;
    let global = options::Global {
        workers: workers_of(&cli)?,
    };
    match cli.command {
        Command::Convert(a) if multi::is_multi(&a) => {
            let mut job = multi::job_of(&a)?;
            let _views = remote::localize_job(&mut job, a.dry_run, max_memory)?;
            run::run_job(&job, (a.dry_run, false), &global, json, progress, out)
        }
        Command::Convert(a) => convert::run(&a, &global, json, progress, out),
        Command::Inspect(a) => inspect::run(&a, json, out),
        Command::Verify(a) => verify::run(&a, json, progress, out),
        Command::Scan(a) => scan::run(&a, _remote.first(), json, out),
        Command::Run(a) => run::run(&a, &global, json, progress, out),
        Command::Plan(a) => units::plan(&a, json, out),
        Command::Unit(a) => units::unit(&a, &global, json, progress, out),
        Command::Finish(a) => units::finish(&a, &global, json, progress, out),
        Command::Edit(a) => edit::run(&a, json, out),
        Command::Diff(a) => diff::run(&a, json, out),
        Command::Delta(a) => delta::run(&a, json, out),
        Command::Slice(a) => slice::run(&a, json, out),
    }
}
