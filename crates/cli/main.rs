//! The `weightport` command line: clap arguments → a pipeline job; indicatif progress on
//! stderr; results on stdout (a table, or one JSON document with `--json`).
//!
//! Exit codes: 0 ok, 1 failed (I/O, malformed input, verification mismatch), 2 usage,
//! 3 refused by the safety policy or a limit. A broken stdout pipe exits 0; a panic never
//! escapes (it is reported as an internal error, exit 1).

mod args;
mod attest;
mod output;
mod progress;
mod report;
mod scan;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use weightport_core::Error;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            if !e.use_stderr() {
                return ExitCode::SUCCESS;
            }
            // --json holds for argument errors too: clap could not tell us, so look for it.
            if std::env::args_os().any(|a| a == "--json") {
                let msg = e.kind().to_string();
                let detail = e.to_string();
                let first = detail.lines().next().unwrap_or(&msg);
                output::print_error_json("usage", first.trim_start_matches("error: "), 2);
            }
            return ExitCode::from(2);
        }
    };
    let json = cli.json;
    std::panic::set_hook(Box::new(|info| {
        if weightport_core::panic_is_contained() {
            return; // a third-party parser's panic, reported as an error by its caller
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
    let result = std::panic::catch_unwind(|| run(cli));
    let outcome = match result {
        Ok(r) => r,
        Err(_) => Err(Failure::Internal),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::BrokenPipe) => ExitCode::SUCCESS,
        Err(Failure::Internal) => {
            if json {
                output::print_error_json("internal", "internal error", 1);
            }
            ExitCode::from(1)
        }
        Err(Failure::Findings(code)) => ExitCode::from(code),
        Err(Failure::Error(e)) => {
            let code = e.exit_code();
            eprintln!("weightport: {e}");
            if json {
                output::print_error_json(e.kind(), &e.to_string(), code);
            }
            ExitCode::from(code as u8)
        }
    }
}

/// How a command failed.
pub enum Failure {
    /// A library error.
    Error(Error),
    /// stdout was closed (e.g. `| head`): not a failure.
    BrokenPipe,
    /// A panic was caught.
    Internal,
    /// The command ran and reported its findings; exit with this code.
    Findings(u8),
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

fn run(cli: Cli) -> Result<(), Failure> {
    weightport_pipeline::cancel::install(cli.json)
        .map_err(|e| Error::Internal(format!("cannot install signal handlers: {e}")))?;
    raise_fd_limit();
    if let Some(n) = cli.threads {
        let max = weightport_pipeline::convert::MAX_THREADS;
        if n == 0 || n > max {
            return Err(Error::Usage(format!("--threads {n}: must be between 1 and {max}")).into());
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .map_err(|e| Error::Internal(format!("cannot start {n} threads: {e}")))?;
    }
    let json = cli.json;
    let mut out = std::io::stdout().lock();
    let cli_opts = |threads, max_memory| output::Global {
        threads,
        max_memory,
    };
    match cli.command {
        Command::Convert(a) => {
            output::convert(&a, &cli_opts(cli.threads, cli.max_memory), json, &mut out)?
        }
        Command::Inspect(a) => output::inspect(&a, json, &mut out)?,
        Command::Verify(a) => output::verify(&a, json, &mut out)?,
        Command::Scan(a) => scan::run(&a, json, &mut out)?,
    }
    out.flush()?;
    Ok(())
}
