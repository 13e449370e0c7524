//! weightport-pickle: PyTorch checkpoints read by a restricted, symbolic pickle VM.
//!
//! Nothing in a checkpoint is ever executed. The [`vm`] interprets pickle opcodes into an inert
//! value tree; globals resolve only against the exact allowlist in [`allow`] (spec
//! `docs/specs/pickle.md` §2.3), and calls on allowed symbols build descriptions, never
//! calls. Everything else — unknown globals, `INST`/`OBJ`/`NEWOBJ`/`EXT*`, `BUILD` on
//! anything but an OrderedDict, data after `STOP` — is refused with the symbol and its byte
//! offset. Sizes are capped before anything is allocated ([`vm::VmLimits`]).
//!
//! Containers: the torch ZIP format ([`container`], torch ≥ 1.6) and the legacy stacked format
//! ([`legacy`]). Both produce a [`Checkpoint`], a `TensorSource`. [`scan`] audits a file
//! without converting it.
//!
//! Entry points for the pipeline's format registry: [`probe`], [`open`], [`scan`].
#![deny(missing_docs)]
#![deny(unsafe_code)]

use std::path::Path;
use std::sync::Arc;

use weightport_core::bytes::SourceReader;
use weightport_core::mapped::LocalFile;
use weightport_core::{ByteSource, Error, Format, Location, ReadOptions, Result, TensorSource};

pub mod allow;
mod census;
mod container;
mod intlit;
mod legacy;
pub mod registration;
pub mod scan;
pub mod select;
mod source;
mod torch;
mod value;
pub mod vm;
pub mod walk;

pub use scan::{scan, ScanReport, Verdict};
pub use source::{Checkpoint, CheckpointReport};
pub use vm::VmLimits;

/// True when `path` (whose first bytes are `head`) is a PyTorch checkpoint this crate reads:
/// [`probe_zip`] or [`probe_legacy`].
pub fn probe(path: &Path, head: &[u8]) -> bool {
    probe_legacy(path, head) || probe_zip(path, head)
}

/// A torch ZIP: a ZIP whose central directory holds `<prefix>/data.pkl`, in any letter case
/// (told from `.npz`,
/// whose entries are `*.npy`).
pub fn probe_zip(path: &Path, head: &[u8]) -> bool {
    head.starts_with(b"PK\x03\x04")
        && LocalFile::open(path, "").is_ok_and(|src| probe_zip_source(&src, head))
}

/// [`probe_zip`] of a source.
pub fn probe_zip_source(src: &dyn ByteSource, head: &[u8]) -> bool {
    if !head.starts_with(b"PK\x03\x04") {
        return false;
    }
    let config = zip::read::Config {
        archive_offset: zip::read::ArchiveOffset::Known(0),
    };
    let reader = std::io::BufReader::new(SourceReader::new(src));
    let Ok(ar) = zip::ZipArchive::with_config(config, reader) else {
        return false;
    };
    let found = ar.file_names().any(|n| {
        n.ok()
            .is_some_and(|n| is_data_pkl(&n) && n.matches('/').count() == 1)
    });
    found
}

/// Whether a ZIP entry name is `<prefix>/data.pkl` as torch looks it up: letter case ignored
/// (`DATA.PKL` is loaded too).
pub fn is_data_pkl(name: &str) -> bool {
    let n = name.as_bytes();
    n.len() > 9 && n[n.len() - 9..].eq_ignore_ascii_case(b"/data.pkl")
}

/// Whether a ZIP archive holds any pickle entry (`*.pkl`: torch checkpoints, TorchScript);
/// `None` when its central directory cannot be read.
pub fn zip_has_pickle(path: &Path) -> Option<bool> {
    let file = std::fs::File::open(path).ok()?;
    let ar = zip::ZipArchive::new(std::io::BufReader::new(file)).ok()?;
    let found = ar
        .file_names_raw()
        .any(|n| n.len() >= 4 && n[n.len() - 4..].eq_ignore_ascii_case(b".pkl"));
    Some(found)
}

/// A legacy checkpoint (a pickle of the magic number). It also claims what only this crate
/// can refuse properly: any binary pickle (a `PROTO 2..5` header not followed by a
/// safetensors header, as [`weightport_core::sniff`] tells) and the legacy tar format (needs 262 bytes of `head`), so a raw
/// malicious pickle named `.bin` is refused (exit 3) rather than reported as unknown.
/// Probe it before safetensors.
pub fn probe_legacy(_path: &Path, head: &[u8]) -> bool {
    legacy::starts_with_magic(head)
        || is_text_pickle(head)
        || (head.len() >= 3
            && head[0] == 0x80
            && (2..=5).contains(&head[1])
            && head[2] != 0
            && !matches!(
                weightport_core::sniff(head),
                weightport_core::Sniffed::Format(Format::Safetensors)
            ))
        || container::is_tar(head)
}

/// A protocol 0/1 pickle (no `PROTO` header): the static walk of the first bytes reaches
/// `STOP`, or meets a global or a call before anything CPython would stop at. Never a file
/// whose first bytes are a safetensors header.
pub fn is_text_pickle(head: &[u8]) -> bool {
    use weightport_core::Sniffed;
    let sniffed = weightport_core::sniff(head);
    matches!(sniffed, Sniffed::Unknown) && walk::walk(head, 1 << 16).looks_like_pickle()
}

/// The limits the VM runs with for `opts` (rank from [`weightport_core::Limits`]).
pub fn vm_limits(opts: &ReadOptions) -> VmLimits {
    VmLimits {
        max_rank: opts.limits.max_rank,
        ..opts.limits.pickle.clone()
    }
}

/// Opens a PyTorch checkpoint as a tensor source (`Format::PytorchZip` or
/// `Format::PytorchLegacy`).
pub fn open(path: &Path, opts: &ReadOptions) -> Result<Box<dyn TensorSource>> {
    Ok(Box::new(open_checkpoint(path, opts)?))
}

/// [`open`] of a source.
pub fn open_source(src: Arc<dyn ByteSource>, opts: &ReadOptions) -> Result<Box<dyn TensorSource>> {
    Ok(Box::new(open_checkpoint_source(src, opts)?))
}

/// Opens a PyTorch checkpoint, keeping the concrete type (for [`Checkpoint::report`]).
pub fn open_checkpoint(path: &Path, opts: &ReadOptions) -> Result<Checkpoint> {
    open_checkpoint_source(opts.storage.open(path, ", expected a file")?, opts)
}

/// [`open_checkpoint`] of a file already mapped (a member the scan unpacked); `path` names it in
/// messages.
pub fn open_checkpoint_mapped(
    path: &Path,
    map: Arc<memmap2::Mmap>,
    opts: &ReadOptions,
) -> Result<Checkpoint> {
    open_checkpoint_source(Arc::new(LocalFile::from_map(path, map)), opts)
}

/// [`open_checkpoint`] of a source: told by its first bytes, read by ranges.
pub fn open_checkpoint_source(src: Arc<dyn ByteSource>, opts: &ReadOptions) -> Result<Checkpoint> {
    let limits = vm_limits(opts);
    let head = src.head(container::HEAD)?;
    let path = &src.name().to_path_buf();
    if head.starts_with(b"PK\x03\x04") {
        return container::open(opts, &limits, src);
    }
    if legacy::starts_with_magic(&head) || matches!(head.first(), Some(0x80 | b'c' | b'(')) {
        return legacy::open(opts, &limits, src);
    }
    if container::is_tar(&head) {
        return Err(Error::Refused {
            at: Location::file(path),
            reason: "legacy tar-format PyTorch checkpoint (torch <= 0.1.9), which torch itself refuses under weights_only; re-save it with a current torch".into(),
        });
    }
    Err(Error::NotFormat {
        path: path.to_path_buf(),
        expected: Format::PytorchZip,
        what: "is not a PyTorch checkpoint (neither a torch ZIP nor a legacy pickle)".into(),
    })
}
