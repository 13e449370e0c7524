//! HF repos in the format registry.
//!
//! * [`REPO`]: a repo directory or an `*.index.json` as one input. The index is checked against
//!   the repo, not trusted: every shard it names must exist (inside the repo) and hold exactly
//!   the tensors the index maps to it; an empty `weight_map`, a `total_size` that disagrees
//!   with the shards' data bytes, or a `*-0000i-of-0000n.*` shard file in the repo that the
//!   index never names are errors naming what is wrong (`--index-only` reads exactly what the
//!   index names and skips the last two checks).
//! * [`OUTPUT`]: a repo directory: `model.safetensors` when everything fits one shard, else
//!   `model-0000i-of-0000n.safetensors` + `model.safetensors.index.json` (huggingface_hub's
//!   greedy split, transformers' index rendering), with the input repo's companion files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use weightport_core::registry::{
    ExtraContent, ExtraFile, OpenFile, OpenRequest, OutputFormat, OutputPlan, OutputRequest,
    PlannedFile, RepoFormat, RepoInput,
};
use weightport_core::{
    sanitize, shown, Error, Format, Location, MultiSource, Result, TensorInfo, TensorSource,
};
use weightport_safetensors::layout;
use weightport_safetensors::registration::{at_file, header_metadata};

use crate::index::{read_index, render_index, Index};
use crate::repo::{companion_files, find_weights, resolve_in_repo, Weights};
use crate::shard::{self, parse_shard_name};

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn bad_index(path: &Path, reason: String) -> Error {
    Error::malformed(Location::file(path), Format::Safetensors, reason)
}

/// Checks that a shard holds exactly the tensors the index maps to it.
fn check_shard(
    index_path: &Path,
    index: &Index,
    shard: &str,
    src: &dyn TensorSource,
) -> Result<()> {
    let file = src.file_of(0);
    let names: BTreeSet<&str> = src.tensors().iter().map(|t| t.name.as_str()).collect();
    // A tied weight the reader kept under one name is recorded as `{dropped: kept}` metadata
    // (convert.py's convention): the index may still name the dropped one.
    let alias_of = |t: &str| {
        src.metadata()
            .get(t)
            .and_then(|v| v.as_str())
            .is_some_and(|kept| names.contains(kept))
    };
    for (t, _) in index.weight_map.iter().filter(|(_, f)| *f == shard) {
        if !names.contains(t.as_str()) && !alias_of(t) {
            return Err(Error::malformed(
                Location::file(&file).tensor(t.clone()),
                src.format(),
                format!(
                    "{} puts this tensor in `{}` but the shard does not hold it",
                    shown(index_path),
                    sanitize(shard)
                ),
            ));
        }
    }
    for t in src.tensors() {
        if index.weight_map.get(&t.name).map(String::as_str) != Some(shard) {
            return Err(Error::malformed(
                Location::file(&file).tensor(t.name.clone()),
                src.format(),
                "the shard holds this tensor but the index does not map it to this shard",
            ));
        }
    }
    Ok(())
}

/// Shard-named files of `dir` that the index never names (`model-00003-of-00003.safetensors`
/// missing from a truncated `weight_map`).
fn unnamed_shards(dir: &Path, index: &Index, shards: &[String]) -> Result<Vec<String>> {
    let named: BTreeSet<&str> = shards.iter().map(String::as_str).collect();
    let families: BTreeSet<(&str, usize, &str)> = shards
        .iter()
        .filter_map(|s| parse_shard_name(s).map(|(p, _, n, e)| (p, n, e)))
        .collect();
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, "read directory", e))? {
        let e = e.map_err(|e| Error::io(dir, "read directory", e))?;
        let Some(n) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let sibling = parse_shard_name(&n).is_some_and(|(p, _, total, ext)| {
            families.contains(&(p, total, ext))
                || (families.is_empty() && index.weight_map.is_empty())
        });
        if sibling && !named.contains(n.as_str()) {
            out.push(n);
        }
    }
    out.sort();
    Ok(out)
}

/// Opens a sharded repo from its index (see the module docs for the checks).
pub fn open_index(
    index_path: &Path,
    req: &OpenRequest,
    open_file: OpenFile,
) -> Result<MultiSource> {
    let dir = parent_dir(index_path);
    let index = read_index(index_path, &req.read.limits)?;
    if index.weight_map.is_empty() {
        return Err(bad_index(
            index_path,
            "index: `weight_map` is empty: it names no tensor".into(),
        ));
    }
    let shards = index.shards();
    let mut parts: Vec<Box<dyn TensorSource>> = Vec::new();
    for shard in &shards {
        let p = resolve_in_repo(&dir, shard)?;
        let meta = std::fs::metadata(&p);
        if !meta.as_ref().is_ok_and(|m| m.is_file()) {
            let what = if meta.is_ok() {
                "is not a regular file"
            } else {
                "is missing"
            };
            return Err(bad_index(
                index_path,
                format!(
                    "index names shard `{}`, which {what} (looked in {}; an incomplete download?)",
                    sanitize(shard),
                    shown(&dir)
                ),
            ));
        }
        let src = open_file(&p)?;
        check_shard(index_path, &index, shard, src.as_ref())?;
        parts.push(src);
    }
    if !req.index_only {
        let extra = unnamed_shards(&dir, &index, &shards)?;
        if let Some(first) = extra.first() {
            return Err(bad_index(
                index_path,
                format!(
                    "index: the repo holds shard `{}` ({} in all) that `weight_map` never names: \
                     the index is incomplete; pass {} to read only what it names",
                    sanitize(first),
                    extra.len(),
                    weightport_core::Knob::IndexOnly
                ),
            ));
        }
    }
    let source = MultiSource::new(parts)?;
    if let (Some(declared), false) = (index.total_size, req.index_only) {
        let data: u64 = source.tensors().iter().map(|t| t.byte_len).sum();
        let safetensors = source.format() == Format::Safetensors;
        if safetensors && declared != data {
            return Err(bad_index(
                index_path,
                format!(
                    "index: metadata.total_size is {declared} but the shards hold {data} data \
                     bytes: the index does not describe these shards; pass {} to read \
                     them anyway",
                    weightport_core::Knob::IndexOnly
                ),
            ));
        }
    }
    Ok(source)
}

fn claims_repo(path: &Path) -> bool {
    path.is_dir()
        || path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".index.json"))
}

fn open_repo(path: &Path, req: &OpenRequest, open_file: OpenFile) -> Result<RepoInput> {
    let (dir, weights, note) = if path.is_dir() {
        let (w, note) = find_weights(path)?;
        (path.to_path_buf(), w, note)
    } else {
        let w = if path.to_string_lossy().ends_with(".bin.index.json") {
            Weights::BinIndex(path.to_path_buf())
        } else {
            Weights::SafetensorsIndex(path.to_path_buf())
        };
        (parent_dir(path), w, None)
    };
    let source: Box<dyn TensorSource> = match &weights {
        Weights::SafetensorsIndex(p) | Weights::BinIndex(p) => {
            Box::new(open_index(p, req, open_file)?)
        }
        Weights::SafetensorsFile(p) | Weights::BinFile(p) => open_file(p)?,
    };
    Ok(RepoInput {
        source,
        dir,
        chosen: weights.path().to_path_buf(),
        notes: note.into_iter().collect(),
    })
}

/// A repo directory or an index file.
pub const REPO: RepoFormat = RepoFormat {
    name: "hf-repo",
    claims: claims_repo,
    open: open_repo,
};

fn plan_repo(req: &OutputRequest) -> Result<OutputPlan> {
    let dir = req.target.to_path_buf();
    let max = req.shard_size.unwrap_or(crate::DEFAULT_SHARD_SIZE);
    let sizes: Vec<u64> = req.tensors.iter().map(|t| t.byte_len).collect();
    let groups = shard::assign(&sizes, max);
    let n = groups.len();
    let meta = header_metadata(req);
    let mut files = Vec::with_capacity(n);
    let mut weight_map = BTreeMap::new();
    for (i, idx) in groups.into_iter().enumerate() {
        let name = if n == 1 {
            shard::SINGLE.to_string()
        } else {
            shard::shard_name(i + 1, n)
        };
        let subset: Vec<TensorInfo> = idx.iter().map(|&k| req.tensors[k].clone()).collect();
        let lay = layout(&subset, meta.as_ref()).map_err(|e| at_file(e, &dir.join(&name)))?;
        for t in &subset {
            weight_map.insert(t.name.clone(), name.clone());
        }
        files.push(PlannedFile {
            path: dir.join(&name),
            size: lay.total_len,
            tensors: idx,
        });
    }
    let mut extras = Vec::new();
    if n > 1 {
        let params: u64 = req.tensors.iter().map(TensorInfo::numel).sum();
        let data: u64 = sizes.iter().sum();
        extras.push(ExtraFile {
            path: dir.join(shard::INDEX),
            content: ExtraContent::Bytes(render_index(params, data, &weight_map).into_bytes()),
            is_index: true,
        });
    }
    if let Some(src) = req.companions_from {
        if !same_dir(&dir, src) {
            for c in companion_files(src)? {
                let name = c.file_name().expect("listed file has a name").to_owned();
                extras.push(ExtraFile {
                    path: dir.join(name),
                    content: companion(c, req),
                    is_index: false,
                });
            }
        }
    }
    Ok(OutputPlan {
        dir,
        is_repo: true,
        files,
        extras,
        is_own_file: shard::is_repo_weights_name,
        reshaped: Vec::new(),
    })
}

/// A companion file's content: a copy, except a `config.json` whose floating `dtype` no
/// longer describes the weights after `--dtype` (rewritten as `save_pretrained` would).
fn companion(c: PathBuf, req: &OutputRequest) -> ExtraContent {
    let rewritten = match req.float_dtype {
        Some(d) if c.file_name().is_some_and(|n| n == "config.json") => {
            crate::config_dtype::config_for(&c, d)
        }
        _ => None,
    };
    rewritten.map_or(ExtraContent::CopyOf(c), ExtraContent::Bytes)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// A repo directory of safetensors shards: any `-o` whose name is not a weights file name.
pub const OUTPUT: OutputFormat = OutputFormat {
    name: "hf-repo",
    format: Format::Safetensors,
    claims: |p| {
        !p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(crate::repo::is_weights_file)
    },
    plan: plan_repo,
    sink: weightport_safetensors::registration::sink_for,
    stores: weightport_safetensors::registration::stores,
    by_architecture: false,
    cast_rule: weightport_core::CastRule::Torch,
};
