//! The `weightport` command line: clap arguments → a pipeline job; indicatif progress on
//! stderr; results on stdout (a table, or one JSON document with `--json`).
//!
//! Exit codes: 0 ok, 1 failed (I/O, malformed input, verification mismatch), 2 usage,
//! 3 refused by the safety policy or a limit. A broken stdout pipe exits 0; a panic never
//! escapes (it is reported as an internal error, exit 1).

mod args;
mod output;
mod progress;

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
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let json = cli.json;
    std::panic::set_hook(Box::new(|info| {
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

extern "C" fn on_sigint(_: libc::c_int) {
    weightport_pipeline::cancel::request();
}

/// SIGINT asks the job to stop; it then fails cleanly (temp files removed) with exit 130.
/// A second SIGINT kills the process as usual.
fn install_sigint() {
    // SAFETY: the handler only performs an atomic store, which is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as *const () as usize;
        sa.sa_flags = libc::SA_RESETHAND;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    install_sigint();
    if let Some(n) = cli.threads {
        if n == 0 {
            return Err(Error::Usage("--threads must be at least 1".into()).into());
        }
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
    }
    let json = cli.json;
    let mut out = std::io::stdout().lock();
    match cli.command {
        Command::Convert(a) => output::convert(&a, json, &mut out)?,
        Command::Inspect(a) => output::inspect(&a, json, &mut out)?,
        Command::Verify(a) => output::verify(&a, json, &mut out)?,
    }
    out.flush()?;
    Ok(())
}
