//! `weightport verify`: a written file or repo checked in full, or against its source.

use std::io::Write;

use serde_json::json;
use weightport_engine::{comparable_hashes, compare};
use weightport_engine::{open_inputs, OpenRequest, Progress};

use crate::args::VerifyArgs;
use crate::options::open_request;
use crate::render::{human, p, paths};
use crate::Failure;

pub(crate) fn run(
    a: &VerifyArgs,
    json: bool,
    bar: &dyn Progress,
    out: &mut impl Write,
) -> Result<(), Failure> {
    if let Some(file) = &a.attestation {
        return crate::attest::verify(a, file, json, out);
    }
    let req = open_request(&a.read);
    let src = open_inputs(std::slice::from_ref(&a.path), &req)?.source;
    let data: u64 = src.tensors().iter().map(|t| t.byte_len).sum();
    let mut diffs = Vec::new();
    let against = match &a.against {
        Some(other) => {
            Some(open_inputs(std::slice::from_ref(other), &OpenRequest::default())?.source)
        }
        None => None,
    };
    let mine = match &against {
        Some(o) => {
            let (mine, theirs) = comparable_hashes(src.as_ref(), o.as_ref(), bar)?;
            diffs = compare(&mine, &theirs);
            mine
        }
        None => {
            let h = weightport_engine::hash_source(src.as_ref(), bar)?;
            src.tensors()
                .iter()
                .map(|t| t.name.clone())
                .zip(h)
                .collect()
        }
    };
    let ok = diffs.is_empty();
    if json {
        let v = json!({
            "ok": ok,
            "command": "verify",
            "files": paths(&src.files()),
            "tensors": mine.len(),
            "data_bytes": data,
            "against": a.against.as_ref().map(|p| p.display().to_string()),
            "differences": diffs,
        });
        writeln!(out, "{v}")?;
    } else {
        writeln!(
            out,
            "{}: valid {}, {} tensors, {}",
            p(&a.path),
            src.format(),
            mine.len(),
            human(data)
        )?;
        if let Some(other) = &a.against {
            if ok {
                writeln!(
                    out,
                    "identical to {}: every tensor has the same shape and values (the same bytes where dtypes agree)",
                    p(other)
                )?;
            } else {
                writeln!(out, "differs from {}:", p(other))?;
                for d in &diffs {
                    writeln!(out, "  {d}")?;
                }
            }
        }
    }
    if ok {
        Ok(())
    } else {
        let message = format!("{}: {} differences", p(&a.path), diffs.len());
        Err(Failure::Findings(1, Some(message)))
    }
}
