//! The format registry: the only place that lists which formats exist (the shapes of a
//! registration are in [`weightport_core::registry`]). Adding a format is one crate exporting
//! its registration, and one line in [`INPUTS`], [`REPOS`] or [`OUTPUTS`].

use std::path::Path;

use weightport_core::mapped::regular_file;
use weightport_core::registry::{InputFormat, OpenRequest, OutputFormat, RepoFormat, RepoInput};
use weightport_core::{Error, Format, Knob, Result, TensorSource};

/// Formats registered at run time (a plugin, or a test), consulted before the built-in ones.
struct Extra {
    inputs: Vec<&'static InputFormat>,
    repos: Vec<&'static RepoFormat>,
    outputs: Vec<&'static OutputFormat>,
}

static EXTRA: std::sync::RwLock<Extra> = std::sync::RwLock::new(Extra {
    inputs: Vec::new(),
    repos: Vec::new(),
    outputs: Vec::new(),
});

/// Registers an input format (probed before the built-in ones).
pub fn register_input(f: &'static InputFormat) {
    EXTRA.write().expect("registry lock").inputs.push(f);
}

/// Registers a repo format (tried before the built-in ones).
pub fn register_repo(f: &'static RepoFormat) {
    EXTRA.write().expect("registry lock").repos.push(f);
}

/// Registers an output format (tried before the built-in ones).
pub fn register_output(f: &'static OutputFormat) {
    EXTRA.write().expect("registry lock").outputs.push(f);
}

fn inputs() -> Vec<&'static InputFormat> {
    let extra = EXTRA.read().expect("registry lock");
    extra.inputs.iter().copied().chain(INPUTS.iter()).collect()
}

fn repos() -> Vec<&'static RepoFormat> {
    let extra = EXTRA.read().expect("registry lock");
    extra.repos.iter().copied().chain(REPOS.iter()).collect()
}

fn outputs() -> Vec<&'static OutputFormat> {
    let extra = EXTRA.read().expect("registry lock");
    extra
        .outputs
        .iter()
        .copied()
        .chain(OUTPUTS.iter())
        .collect()
}

/// Input formats, probed in order. safetensors has no magic and its probe also accepts
/// unrecognised bytes (so its reader can say precisely what is wrong): it stays last.
pub static INPUTS: &[InputFormat] = &[
    weightport_gguf::registration::INPUT,
    weightport_pickle::registration::ZIP,
    weightport_pickle::registration::LEGACY,
    weightport_npz::registration::NPZ,
    weightport_npz::registration::NPY,
    weightport_safetensors::INPUT,
];

/// Repo layouts, tried in order.
pub static REPOS: &[RepoFormat] = &[weightport_npz::registration::NPY_DIR, weightport_hf::REPO];

/// Output formats; the first that claims `-o` wins.
pub static OUTPUTS: &[OutputFormat] = &[
    weightport_safetensors::OUTPUT,
    weightport_gguf::registration::OUTPUT,
    weightport_hf::OUTPUT,
];

/// Names of the registered formats of a list, for messages.
fn names<T>(list: &[&T], name: fn(&T) -> &'static str) -> String {
    list.iter().map(|t| name(t)).collect::<Vec<_>>().join(", ")
}

/// The output format for `-o target`, or the one `--to` names.
pub fn output_for(target: &Path, to: Option<&str>) -> Result<&'static OutputFormat> {
    let all = outputs();
    if let Some(n) = to {
        return all
            .iter()
            .copied()
            .find(|f| f.name.eq_ignore_ascii_case(n))
            .ok_or_else(|| {
                Error::Usage(format!(
                    "{} {n}: unknown output format (known: {})",
                    Knob::To,
                    names(&all, |f| f.name)
                ))
            });
    }
    all.iter()
        .copied()
        .find(|f| (f.claims)(target))
        .ok_or_else(|| {
            Error::Usage(format!(
                "{}: no output format of this build writes a file named like this (writable: \
                 {}); name a .safetensors file or a directory, or pass {}",
                weightport_core::shown(target),
                names(&all, |f| f.name),
                Knob::To
            ))
        })
}

/// The input format `--from` names.
pub fn input_named(name: &str) -> Result<&'static InputFormat> {
    let all = inputs();
    all.iter()
        .copied()
        .find(|f| f.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            Error::Usage(format!(
                "{} {name}: unknown input format (known: {})",
                Knob::From,
                names(&all, |f| f.name)
            ))
        })
}

/// Opens one weights file through [`weightport_core::ReadOptions::storage`]: the format `from`
/// names (its probe must agree), or the first whose probe recognises the content. The readers
/// are handed the opened source. Every file it reads is first settled and then held under a
/// reader's lock for as long as the source lives ([`crate::guarded`]): an edit killed in place
/// is rolled back before anything is read, and no edit starts while the file is read.
pub fn open_file(path: &Path, req: &OpenRequest) -> Result<Box<dyn TensorSource>> {
    crate::guarded::guard(open_unguarded(path, req)?)
}

fn open_unguarded(path: &Path, req: &OpenRequest) -> Result<Box<dyn TensorSource>> {
    regular_file(path)?;
    let src = req.read.storage.open(path, ", expected a weights file")?;
    let head = src.head(4096)?;
    if let Some(n) = &req.from {
        let f = input_named(n)?;
        if !(f.probe)(&*src, &head) {
            return Err(Error::NotFormat {
                path: path.to_path_buf(),
                expected: f.format,
                what: format!(
                    "is not {} ({} {n}); it {}",
                    f.name,
                    Knob::From,
                    weightport_core::sniff(&head)
                        .describe()
                        .trim_start_matches("is ")
                ),
            });
        }
        return (f.open)(src, &req.read);
    }
    match inputs().into_iter().find(|f| (f.probe)(&*src, &head)) {
        Some(f) => (f.open)(src, &req.read),
        None => Err(unrecognised(path, &head)),
    }
}

fn unrecognised(path: &Path, head: &[u8]) -> Error {
    use weightport_core::{Location, Sniffed};
    match weightport_core::sniff(head) {
        Sniffed::Format(f) => Error::Unsupported {
            at: Location::file(path),
            format: Some(f),
            what: format!(
                "reading {f} is not available in this build (readable: {})",
                names(&inputs(), |f| f.name)
            ),
        },
        Sniffed::Zip if head.starts_with(b"PK\x05\x06") => Error::NotFormat {
            path: path.to_path_buf(),
            expected: Format::Npz,
            what: "is an empty ZIP archive (what np.savez writes with no arrays): there are no \
                   tensors to convert"
                .into(),
        },
        Sniffed::Zip => Error::NotFormat {
            path: path.to_path_buf(),
            expected: Format::PytorchZip,
            what: "is a ZIP archive with neither a PyTorch `data.pkl` nor NumPy `.npy` members: \
                   not a weights file weightport reads"
                .into(),
        },
        other => Error::NotFormat {
            path: path.to_path_buf(),
            expected: Format::Safetensors,
            what: other.describe(),
        },
    }
}

/// Opens a repo (directory or index) if a repo format claims `path`.
pub fn open_repo(path: &Path, req: &OpenRequest) -> Option<Result<RepoInput>> {
    let repo = repos().into_iter().find(|r| (r.claims)(path))?;
    let open = |p: &Path| open_file(p, req);
    Some((repo.open)(path, req, &open))
}
