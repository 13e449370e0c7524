//! The one public error type.
//!
//! Messages are lowercase, carry no trailing period, and name the file, the tensor and the byte
//! offset where they are known. Names read from files are escaped (see [`sanitize`]) so a
//! hostile name cannot drive a terminal.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::format::Format;

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where in an input something went wrong.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub path: PathBuf,
    /// The tensor, if one is concerned.
    pub tensor: Option<String>,
    /// Absolute byte offset in the file, if known.
    pub offset: Option<u64>,
}

impl Location {
    /// A location naming only a file.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Location {
            path: path.into(),
            tensor: None,
            offset: None,
        }
    }
    /// Adds a byte offset.
    pub fn at(mut self, offset: u64) -> Self {
        self.offset = Some(offset);
        self
    }
    /// Adds a tensor name.
    pub fn tensor(mut self, name: impl Into<String>) -> Self {
        self.tensor = Some(name.into());
        self
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.display().to_string();
        write!(f, "{}", sanitize(&path))?;
        if let Some(t) = &self.tensor {
            let sep = if path.is_empty() { "" } else { ": " };
            write!(f, "{sep}tensor `{}`", sanitize(t))?;
        }
        if let Some(o) = self.offset {
            write!(f, " (byte {o})")?;
        }
        Ok(())
    }
}

/// Every error weightport's libraries return.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operating system refused an operation on `path`.
    #[error("{}: {op}: {source}", shown(path))]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// What was being done (`open`, `read`, `write`, …).
        op: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The input breaks its format's rules.
    #[error("{at}: malformed {}: {reason}", named(*format, "input"))]
    Malformed {
        /// Where.
        at: Location,
        /// The format being read (`None`: the input is no format of this crate's, or the
        /// rule broken is not one of a format's).
        format: Option<Format>,
        /// What is wrong.
        reason: String,
    },
    /// The input is not the format it was expected to be; `what` says what it really is.
    #[error("{}: {what}", shown(path))]
    NotFormat {
        /// The file.
        path: PathBuf,
        /// The format that was expected.
        expected: Format,
        /// What the file really is, and what to do.
        what: String,
    },
    /// A valid input uses something weightport does not handle.
    #[error("{at}: unsupported{}: {what}", spaced(*format))]
    Unsupported {
        /// Where.
        at: Location,
        /// The format whose feature is not handled (`None`: not a format's, e.g. a dtype
        /// without a kernel).
        format: Option<Format>,
        /// The feature.
        what: String,
    },
    /// The safety policy refused the input (path traversal, forbidden pickle global, …).
    #[error("{at}: refused: {reason}")]
    Refused {
        /// Where.
        at: Location,
        /// Why.
        reason: String,
    },
    /// A size read from an input exceeds a cap.
    #[error("{at}: {what} is {needed}, over the limit of {limit}")]
    Limit {
        /// Where.
        at: Location,
        /// The quantity.
        what: &'static str,
        /// The value found.
        needed: u64,
        /// The cap.
        limit: u64,
    },
    /// An emitted file does not hold what was meant to be written.
    #[error("{at}: verification failed: {reason}")]
    Verify {
        /// Where.
        at: Location,
        /// The mismatch.
        reason: String,
    },
    /// A request that cannot be carried out as asked (output exists, bad option, …).
    #[error("{0}")]
    Usage(String),
    /// An internal invariant failed (a bug in weightport, not in the input).
    #[error("internal error (a bug; please report it): {0}")]
    Internal(String),
    /// The job was cancelled (SIGINT); nothing was committed.
    #[error("interrupted; nothing was written")]
    Interrupted,
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: &Path, op: &'static str, source: io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    }

    /// A malformed-input error (`format`: a [`Format`], or `None`).
    pub fn malformed(
        at: Location,
        format: impl Into<Option<Format>>,
        reason: impl Into<String>,
    ) -> Self {
        Error::Malformed {
            at,
            format: format.into(),
            reason: reason.into(),
        }
    }

    /// An unsupported-feature error (`format`: a [`Format`], or `None`).
    pub fn unsupported(
        at: Location,
        format: impl Into<Option<Format>>,
        what: impl Into<String>,
    ) -> Self {
        Error::Unsupported {
            at,
            format: format.into(),
            what: what.into(),
        }
    }

    /// A stable machine-readable kind, used by `--json` output.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Io { .. } => "io",
            Error::Malformed { .. } => "malformed",
            Error::NotFormat { .. } => "not_format",
            Error::Unsupported { .. } => "unsupported",
            Error::Refused { .. } => "refused",
            Error::Limit { .. } => "limit",
            Error::Verify { .. } => "verify",
            Error::Usage(_) => "usage",
            Error::Internal(_) => "internal",
            Error::Interrupted => "interrupted",
        }
    }

    /// Where the error is, when it names a place in a file.
    pub fn location(&self) -> Option<&Location> {
        match self {
            Error::Malformed { at, .. }
            | Error::Unsupported { at, .. }
            | Error::Refused { at, .. }
            | Error::Limit { at, .. }
            | Error::Verify { at, .. } => Some(at),
            _ => None,
        }
    }

    /// The CLI exit code for this error: 1 failed, 2 usage, 3 refused by policy or a limit,
    /// 130 interrupted.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Refused { .. } | Error::Limit { .. } => 3,
            Error::Usage(_) => 2,
            Error::Interrupted => 130,
            _ => 1,
        }
    }
}

/// A format's name, or `none` when there is none.
fn named(format: Option<Format>, none: &'static str) -> &'static str {
    format.map_or(none, Format::name)
}

/// ` NAME` for a format, nothing without one.
fn spaced(format: Option<Format>) -> String {
    format.map_or(String::new(), |f| format!(" {f}"))
}

/// A path made safe to print (control characters escaped).
pub fn shown(path: &Path) -> String {
    sanitize(&path.display().to_string())
}

/// Escapes control characters (and nothing else) so a name read from a file is safe to print.
pub fn sanitize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control()
            || matches!(
                c,
                '\u{2028}' | '\u{2029}' | '\u{202e}' | '\u{200e}' | '\u{200f}'
            )
        {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_escapes_terminal_controls() {
        assert_eq!(sanitize("a\x1b[31mb\n"), "a\\u{1b}[31mb\\n");
        assert_eq!(sanitize("model.layers.0/é"), "model.layers.0/é");
    }

    #[test]
    fn messages_name_file_tensor_and_offset() {
        let e = Error::malformed(
            Location::file("m.safetensors").tensor("w").at(96),
            Format::Safetensors,
            "bad",
        );
        assert_eq!(
            e.to_string(),
            "m.safetensors: tensor `w` (byte 96): malformed safetensors: bad"
        );
        assert_eq!(e.exit_code(), 1);
    }

    #[test]
    fn paths_from_files_are_sanitized_in_every_message() {
        let evil = "evil\x1b]0;pwned\x07\x1b[2J.safetensors";
        let e = Error::io(Path::new(evil), "open", io::Error::other("x"));
        assert!(!e.to_string().contains('\x1b'), "{e}");
        let e = Error::NotFormat {
            path: evil.into(),
            expected: Format::Safetensors,
            what: "w".into(),
        };
        assert!(!e.to_string().contains('\x1b'));
        let e = Error::malformed(Location::file(evil).tensor(evil), Format::Safetensors, "r");
        assert!(!e.to_string().contains('\x1b'));
    }

    #[test]
    fn a_format_is_named_only_when_there_is_one() {
        let at = Location::file("m.bin").at(8);
        let e = Error::malformed(at.clone(), Format::Gguf, "bad");
        assert_eq!(e.to_string(), "m.bin (byte 8): malformed gguf: bad");
        let e = Error::malformed(at.clone(), None, "bad");
        assert_eq!(e.to_string(), "m.bin (byte 8): malformed input: bad");
        let e = Error::unsupported(at.clone(), Format::Npz, "encrypted member");
        assert_eq!(
            e.to_string(),
            "m.bin (byte 8): unsupported npz: encrypted member"
        );
        let e = Error::unsupported(at, None, "dequantizing Q4_K to I32");
        assert_eq!(
            e.to_string(),
            "m.bin (byte 8): unsupported: dequantizing Q4_K to I32"
        );
    }
}
