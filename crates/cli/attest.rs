//! `convert --attest FILE` (an in-toto Statement of what was made from what), `convert
//! --report FILE.html` (the quality report as a static page) and `verify --attestation FILE
//! DIR`.

use std::io::Write;
use std::path::Path;

use serde_json::{json, Value};
use weightport_core::staging::OutputLock;
use weightport_core::Error;
use weightport_engine::side::{self, SideFile};
use weightport_engine::{ConvertOptions, ConvertReport};
use weightport_provenance as provenance;

use crate::args::{ConvertArgs, VerifyArgs};
use crate::render::p;
use crate::Failure;

/// What `--attest` records as the recipe: the command line, the options that shape the output,
/// the version.
fn recipe(a: &ConvertArgs) -> Value {
    let q = &a.quant;
    json!({
        "command": command_line(),
        "options": {
            "to": a.to,
            "shard_size": a.shard_size,
            "dtype": format!("{:?}", a.dtype),
            "dtype_filter": a.dtype_filter,
            "allow_lossy": a.allow_lossy,
            "rename": a.rename,
            "quant": q.quant,
            "pure": q.pure,
            "tensor_type": q.tensor_type,
            "output_tensor_type": q.output_tensor_type,
            "token_embedding_type": q.token_embedding_type,
            "leave_output_tensor": q.leave_output_tensor,
            "allow_requantize": q.allow_requantize,
            "imatrix": q.imatrix.as_deref().map(side_material),
            "include_weights": q.include_weights,
            "exclude_weights": q.exclude_weights,
            "arch": q.arch,
            "name": q.name,
            "metadata": q.metadata.as_deref().map(side_material),
            "pre_tokenizer": q.pre_tokenizer,
            "no_mtp": q.no_mtp,
            "mtp": q.mtp,
            "from": a.read.from,
            "key": a.read.key,
            "shared": a.read.shared,
            "index_only": a.read.index_only,
        },
        "weightport": {"version": env!("CARGO_PKG_VERSION")},
    })
}

/// A side file the conversion read (`--imatrix`, `--metadata`) as the recipe names it: a local
/// file by its path and the sha256 of its bytes; a remote one by its address and published
/// sha256 (its view's stand-in is empty and never hashed).
fn side_material(p: &Path) -> Value {
    match weightport_remote::material(p) {
        Some(m) => json!({"path": m.shown, "sha256": m.sha256}),
        None => json!({"path": p.to_string_lossy(), "sha256": file_sha256(p)}),
    }
}

/// A remote input's file as the attestation names it: its address (with the commit) and its
/// published sha256. (`convert` refused `--attest` before converting when a remote file has
/// none; such a file is named here with no digest rather than hashed as its empty stand-in.)
fn remote_material(path: &Path) -> Option<(String, String)> {
    let m = weightport_remote::material(path)?;
    Some((m.shown, m.sha256.unwrap_or_default()))
}

/// The command line as recorded: an `https://` argument without its query (a signed URL's
/// signature) or user information.
fn command_line() -> Vec<String> {
    std::env::args()
        .map(|a| match weightport_remote::is_remote(Path::new(&a)) {
            true => weightport_remote::answers::shown_url(&a),
            false => a,
        })
        .collect()
}

/// The sha256 of the file at `path` (hex), or `null` if it cannot be read (the conversion,
/// which read it first, would have failed).
fn file_sha256(path: &Path) -> Option<String> {
    use sha2::{Digest, Sha256};
    let mut f = std::fs::File::open(path).ok()?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).ok()?;
    Some(format!("{:x}", h.finalize()))
}

/// The side files `a` asks for (`--attest`, `--report`), which the conversion checks with its
/// output before writing anything.
pub(crate) fn side_files(a: &ConvertArgs) -> Vec<SideFile> {
    let side = |flag, p| SideFile::new(flag, p).replacing(a.force);
    let attest = a.attest.as_deref().map(|p| side("--attest", p));
    let report = a.report.as_deref().map(|p| side("--report", p));
    attest.into_iter().chain(report).collect()
}

/// The locks of the side files of a conversion (none in a dry run): taken before the
/// conversion checks them and held until they are written, so two runs writing one file do
/// not both commit their outputs and then race at the rename.
pub(crate) fn lock_side_files(opts: &ConvertOptions) -> Result<Vec<OutputLock>, Error> {
    if opts.dry_run {
        return Ok(Vec::new());
    }
    let mut locks = Vec::new();
    for s in &opts.side_files {
        locks.extend(side::lock(s)?);
    }
    Ok(locks)
}

/// Writes what `--attest` and `--report` asked for (`sides`, as the conversion checked them),
/// after a committed conversion, atomically; `job` (the job file's output it was made as) goes
/// into the recipe.
pub(crate) fn write_outputs(
    a: &ConvertArgs,
    r: &ConvertReport,
    job: Option<Value>,
    sides: &[SideFile],
) -> Result<(), Error> {
    if r.dry_run {
        return Ok(());
    }
    let side = |flag: &str| sides.iter().find(|s| s.flag == flag);
    if let (Some(path), Some(prov)) = (side("--attest"), &r.provenance) {
        let mut recipe = recipe(a);
        if let Some(j) = job {
            recipe["job"] = j;
        }
        let st = provenance::statement_with(prov, recipe, &remote_material)?;
        let mut text = serde_json::to_vec_pretty(&st)
            .map_err(|e| Error::Internal(format!("attestation: {e}")))?;
        text.push(b'\n');
        side::write(path, &text)?;
    }
    if let Some(path) = side("--report") {
        side::write(path, crate::report::html(r).as_bytes())?;
    }
    Ok(())
}

/// The DSSE payload type of an in-toto statement.
const DSSE_INTOTO: &str = "application/vnd.in-toto+json";

/// The statement in `doc`: the document itself, or the payload of a DSSE envelope (what
/// `sign_dsse`, cosign and model-signing publish) with the number of signatures it carries,
/// which are not checked here.
fn statement_of(doc: Value, file: &Path) -> Result<(Value, Option<usize>), Error> {
    if doc.get("payload").is_none() && doc.get("payloadType").is_none() {
        return Ok((doc, None));
    }
    let bad = |why: String| Error::Usage(format!("{}: a DSSE envelope {why}", p(file)));
    if doc["payloadType"] != DSSE_INTOTO {
        return Err(bad(format!(
            "whose `payloadType` is {}, not {DSSE_INTOTO}",
            doc["payloadType"]
        )));
    }
    let payload = doc["payload"]
        .as_str()
        .ok_or_else(|| bad("without a `payload` string".into()))?;
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(payload))
        .map_err(|e| bad(format!("whose `payload` is not base64 ({e})")))?;
    let st = serde_json::from_slice(&bytes)
        .map_err(|e| bad(format!("whose payload is not JSON ({e})")))?;
    Ok((st, Some(doc["signatures"].as_array().map_or(0, Vec::len))))
}

/// `verify --attestation FILE DIR`: every subject's sha256, missing and extra files. `FILE`
/// may be a statement or a DSSE envelope holding one (its signatures are not checked).
pub(crate) fn verify(
    a: &VerifyArgs,
    file: &Path,
    json: bool,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let text = std::fs::read(file).map_err(|e| Error::io(file, "read", e))?;
    let doc: Value = serde_json::from_slice(&text)
        .map_err(|e| Error::Usage(format!("{}: not JSON: {e}", p(file))))?;
    let (st, signatures) = statement_of(doc, file)?;
    let subjects = st["subject"].as_array().map_or(0, Vec::len);
    let found = provenance::check(&st, &a.path, &[file.to_path_buf()])?;
    let diffs: Vec<String> = found.iter().map(|m| m.to_string()).collect();
    let ok = diffs.is_empty();
    if let Some(n) = signatures {
        eprintln!(
            "weightport: {}: a DSSE envelope: its {n} signature(s) are NOT checked here, only \
             the digests of the statement it carries; verify the signatures with the signer's \
             tool (cosign, model_signing, in-toto)",
            p(file)
        );
    }
    if json {
        let mut v = json!({
            "ok": ok,
            "command": "verify",
            "files": [],
            "tensors": 0,
            "data_bytes": 0,
            "against": Value::Null,
            "attestation": file.display().to_string(),
            "subjects": subjects,
            "differences": diffs,
        });
        if let Some(n) = signatures {
            v["envelope_signatures"] = n.into();
            v["signatures_checked"] = false.into();
        }
        writeln!(out, "{v}")?;
    } else if ok {
        let unsigned = match signatures {
            Some(_) => " (the envelope's signatures were not checked)",
            None => "",
        };
        writeln!(
            out,
            "{}: all {subjects} files named by {} have their attested sha256, and no other file is there{unsigned}",
            p(&a.path),
            p(file)
        )?;
    } else {
        writeln!(out, "{}: differs from {}:", p(&a.path), p(file))?;
        for d in &diffs {
            writeln!(out, "  {}", weightport_core::sanitize(d))?;
        }
    }
    if ok {
        Ok(())
    } else {
        let message = format!("{}: {} differences", p(&a.path), diffs.len());
        Err(Failure::Findings(1, Some(message)))
    }
}
