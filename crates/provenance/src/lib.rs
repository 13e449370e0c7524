//! Provenance of a conversion as an in-toto Statement v1, and the check of a published output
//! against one.
//!
//! * `subject`: every file the output consists of (weights, index, companions), named by its
//!   path relative to the output directory with `/` separators, with its sha256, sorted by
//!   name — the per-file digests model-signing's `files` serialization records, so the
//!   statement can be signed as it is (`sigstore`'s DSSE signing of a statement, or a verifier
//!   rebuilding model-signing's manifest from the subjects);
//! * `predicate.materials`: every input file (resource descriptors with sha256);
//! * `predicate.recipe`: the command line, options and weightport version, given by the caller;
//! * `predicate.tensors`: per output tensor its type, shape, content hash, and the source
//!   tensors it was computed from with the content hash of what was read;
//! * `predicate.modelSigning`: model-signing v1.0's root digest over the same files (sha256 of
//!   the concatenated raw digests in name order), for cross-reference.
//!
//! Everything but the recipe depends only on the input bytes and options, so two runs at any
//! thread count give the same subjects, materials and tensors.
//!
//! No dependency on the engine: a conversion hands this crate plain data ([`Provenance`]: the
//! files it read and wrote, and per output tensor its hash and the hashes of the source tensors
//! it read), collected by the engine while it ran. Files are hashed in parallel on the rayon
//! pool the caller runs in.
#![deny(missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use weightport_core::{ContentHash, Error, Result};

/// The in-toto Statement type.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// Our predicate's type.
pub const PREDICATE_TYPE: &str = "https://example.invalid/weightport/conversion/v1";

/// One output tensor's provenance.
#[derive(Debug, Clone)]
pub struct TensorProvenance {
    /// Output name.
    pub name: String,
    /// Written type.
    pub dtype: String,
    /// Written shape.
    pub shape: Vec<u64>,
    /// Content hash of the written tensor.
    pub hash: ContentHash,
    /// The operation, when not a copy.
    pub op: Option<String>,
    /// Source tensors read (name, content hash of the tensor as read).
    pub sources: Vec<(String, ContentHash)>,
}

/// What a conversion was made of, collected while it ran.
#[derive(Debug, Clone, Default)]
pub struct Provenance {
    /// The output directory (subjects are named relative to it).
    pub root: PathBuf,
    /// Every input file read (weights, configs, tokenizer files).
    pub materials: Vec<PathBuf>,
    /// Every output file published.
    pub outputs: Vec<PathBuf>,
    /// Per output tensor.
    pub tensors: Vec<TensorProvenance>,
}

/// sha256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    Ok(sha256_file_until(path, || false)?.unwrap_or_default())
}

/// sha256 of a file, hex, read in MiB pieces; `None` once `stop` says so (asked before each
/// piece).
pub fn sha256_file_until(path: &Path, stop: impl Fn() -> bool) -> Result<Option<String>> {
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        if stop() {
            return Ok(None);
        }
        let n = f.read(&mut buf).map_err(|e| Error::io(path, "read", e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(Some(hex(&h.finalize())))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `path` relative to `root`, `/`-separated.
fn relative(root: &Path, path: &Path) -> String {
    let r = path.strip_prefix(root).unwrap_or(path);
    r.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// Files with their sha256, hashed in parallel, in the order given.
fn digests_unsorted(files: &[(String, PathBuf)]) -> Result<Vec<(String, String)>> {
    files
        .par_iter()
        .map(|(n, p)| Ok((n.clone(), sha256_file(p)?)))
        .collect()
}

fn sorted(mut v: Vec<(String, String)>) -> Vec<(String, String)> {
    v.sort();
    v.dedup();
    v
}

fn descriptors(d: &[(String, String)]) -> Value {
    Value::Array(
        d.iter()
            .map(|(n, h)| json!({"name": n, "digest": {"sha256": h}}))
            .collect(),
    )
}

/// model-signing v1.0's root digest: sha256 over the raw file digests in name order.
fn model_signing_root(subjects: &[(String, String)]) -> String {
    let mut h = Sha256::new();
    for (_, d) in subjects {
        let raw: Vec<u8> = (0..d.len())
            .step_by(2)
            .filter_map(|i| u8::from_str_radix(&d[i..i + 2], 16).ok())
            .collect();
        h.update(&raw);
    }
    hex(&h.finalize())
}

/// The in-toto Statement v1 for a conversion. `recipe` is the caller's record of the command
/// (command line, options, version).
pub fn statement(p: &Provenance, recipe: Value) -> Result<Value> {
    statement_with(p, recipe, &|_| None)
}

/// [`statement`], where `known` names and digests the materials that are not local files
/// (a remote input's view): `Some((name, sha256))` is recorded as it is, never read.
pub fn statement_with(
    p: &Provenance,
    recipe: Value,
    known: &dyn Fn(&Path) -> Option<(String, String)>,
) -> Result<Value> {
    let outs: Vec<(String, PathBuf)> = p
        .outputs
        .iter()
        .map(|f| (relative(&p.root, f), f.clone()))
        .collect();
    let (given, ins): (Vec<_>, Vec<_>) = p
        .materials
        .iter()
        .map(|f| (known(f), f))
        .partition(|(k, _)| k.is_some());
    let ins: Vec<(String, PathBuf)> = ins
        .into_iter()
        .map(|(_, f)| (f.display().to_string(), f.clone()))
        .collect();
    // One parallel pass over inputs and outputs together (sha256 is sequential per file).
    let both: Vec<(String, PathBuf)> = outs.iter().chain(&ins).cloned().collect();
    let all = digests_unsorted(&both)?;
    let (o, i) = all.split_at(outs.len());
    let mut i = i.to_vec();
    i.extend(given.into_iter().filter_map(|(k, _)| k));
    let (subjects, materials) = (sorted(o.to_vec()), sorted(i));
    let tensors: Vec<Value> = p
        .tensors
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "dtype": t.dtype,
                "shape": t.shape,
                "contentHash": t.hash.to_string(),
                "op": t.op,
                "sources": t.sources.iter().map(|(n, h)| json!({"name": n, "contentHash": h.to_string()})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let root_name = p
        .root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(json!({
        "_type": STATEMENT_TYPE,
        "subject": descriptors(&subjects),
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "materials": descriptors(&materials),
            "recipe": recipe,
            "contentHash": "weightport-content-v1: xxh3-128 over dtype, shape, length and 8 MiB leaves",
            "tensors": tensors,
            "modelSigning": {
                "name": root_name,
                "digest": {"sha256": model_signing_root(&subjects)},
                "serialization": {"method": "files", "hash_type": "sha256"},
            },
        },
    }))
}

/// A published file that does not match its statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// A subject's file has another sha256.
    Differs {
        /// Subject name.
        name: String,
        /// sha256 in the statement.
        expected: String,
        /// sha256 of the file.
        actual: String,
    },
    /// A subject's file is not there.
    Missing(String),
    /// A file of the directory no subject names.
    Extra(String),
    /// A symlink in the directory: what is published is the files, not links to files that
    /// may lie anywhere (model-signing refuses them too).
    Symlink(String),
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Differs {
                name,
                expected,
                actual,
            } => write!(
                f,
                "{name}: sha256 {actual}, the attestation says {expected}"
            ),
            Mismatch::Missing(n) => write!(f, "{n}: missing (named by the attestation)"),
            Mismatch::Extra(n) => write!(f, "{n}: extra (not named by the attestation)"),
            Mismatch::Symlink(n) => write!(
                f,
                "{n}: a symlink (refused: the attested files must be in the directory, not \
                 linked to from it)"
            ),
        }
    }
}

/// What lies under a directory: regular files and symlinks, relative.
#[derive(Default)]
struct Listing {
    files: Vec<String>,
    symlinks: Vec<String>,
}

/// Regular files and symlinks under `dir`, relative, skipping dot entries (locks, `.git`) and
/// `skip`. Symlinks are not followed.
fn walk(dir: &Path, base: &Path, skip: &[PathBuf], out: &mut Listing) -> Result<()> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, "read directory", e))?;
    for e in rd {
        let e = e.map_err(|e| Error::io(dir, "read directory", e))?;
        let path = e.path();
        if e.file_name().to_string_lossy().starts_with('.') || skip.contains(&path) {
            continue;
        }
        let ty = std::fs::symlink_metadata(&path).map_err(|e| Error::io(&path, "stat", e))?;
        if ty.is_symlink() {
            out.symlinks.push(relative(base, &path));
        } else if ty.is_dir() {
            walk(&path, base, skip, out)?;
        } else if ty.is_file() {
            out.files.push(relative(base, &path));
        }
    }
    Ok(())
}

/// sha256 of a regular file, hex, refusing a symlink at `path` (`O_NOFOLLOW`).
fn sha256_no_follow(path: &Path) -> Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| Error::io(path, "open", e))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(|e| Error::io(path, "read", e))?;
    Ok(hex(&h.finalize()))
}

/// The statement's subjects as (name, sha256), every entry in its order, names checked to be
/// relative paths inside the directory.
fn subjects_of(statement: &Value) -> Result<Vec<(String, String)>> {
    let bad = |why: &str| Error::Usage(format!("not a weightport attestation: {why}"));
    if statement["_type"] != STATEMENT_TYPE {
        return Err(bad("`_type` is not https://in-toto.io/Statement/v1"));
    }
    let subjects = statement["subject"]
        .as_array()
        .ok_or_else(|| bad("no `subject` list"))?;
    let mut named = Vec::with_capacity(subjects.len());
    for s in subjects {
        let (Some(n), Some(d)) = (s["name"].as_str(), s["digest"]["sha256"].as_str()) else {
            return Err(bad("a subject without a name and a sha256 digest"));
        };
        if n.split('/').any(|c| c == ".." || c.is_empty()) || n.starts_with('/') {
            return Err(bad(&format!("subject `{n}` is not a relative path")));
        }
        named.push((n.to_string(), d.to_string()));
    }
    Ok(named)
}

/// Checks `dir` against `statement`: every subject entry's sha256 (a name listed twice must
/// match both times), missing files, extra files and symlinks (`skip`: files that may lie in
/// `dir` without being subjects, such as the statement itself).
pub fn check(statement: &Value, dir: &Path, skip: &[PathBuf]) -> Result<Vec<Mismatch>> {
    let named = subjects_of(statement)?;
    let skip: Vec<PathBuf> = skip
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    let canon = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, "open", e))?;
    let mut listing = Listing::default();
    walk(&canon, &canon, &skip, &mut listing)?;
    let present: BTreeSet<String> = listing.files.into_iter().collect();
    let links: BTreeSet<String> = listing.symlinks.into_iter().collect();
    let names: BTreeSet<&String> = named.iter().map(|(n, _)| n).collect();
    let found: Vec<&String> = names
        .iter()
        .copied()
        .filter(|n| present.contains(*n))
        .collect();
    let sums: BTreeMap<&String, String> = found
        .par_iter()
        .map(|n| Ok((*n, sha256_no_follow(&canon.join(n))?)))
        .collect::<Result<_>>()?;
    let mut out: Vec<Mismatch> = links.iter().cloned().map(Mismatch::Symlink).collect();
    let mut missing = BTreeSet::new();
    for (n, expected) in &named {
        match sums.get(n) {
            Some(actual) if expected.eq_ignore_ascii_case(actual) => {}
            Some(actual) => out.push(Mismatch::Differs {
                name: n.clone(),
                expected: expected.clone(),
                actual: actual.clone(),
            }),
            None if links.contains(n) || !missing.insert(n) => {}
            None => out.push(Mismatch::Missing(n.clone())),
        }
    }
    out.extend(
        present
            .into_iter()
            .filter(|n| !names.contains(n))
            .map(Mismatch::Extra),
    );
    Ok(out)
}
