//! `weightport scan` output: a table, one JSON document, or SARIF 2.1.0.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use weightport_core::sanitize;
use weightport_pickle::scan::rules;
use weightport_remote::RemoteInput;
use weightport_scan::{ScanOutcome, ScanReport, Skipped, Verdict};

use crate::args::{ScanArgs, ScanFormat};
use crate::render::{meta_json, p};
use crate::Failure;

/// Runs the scan and prints it; exit 3 unless every file is safe and none was left unread.
/// A remote input (`remote`, its view at `a.input`) is read through its storage, by ranges,
/// and reported under its address.
pub(crate) fn run(
    a: &ScanArgs,
    remote: Option<&RemoteInput>,
    json: bool,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let outcome = match remote {
        None => weightport_scan::scan(&a.input)?,
        Some(r) => remote_outcome(r)?,
    };
    let format = if json && a.format == ScanFormat::Text {
        ScanFormat::Json
    } else {
        a.format
    };
    match format {
        ScanFormat::Text => text(&outcome, out)?,
        ScanFormat::Json => writeln!(out, "{}", document(&outcome))?,
        ScanFormat::Sarif => writeln!(out, "{}", sarif(&outcome)?)?,
    }
    if outcome.passed() {
        Ok(())
    } else {
        Err(Failure::Findings(3, None))
    }
}

/// The scan of a remote input's view, every path and message naming the remote address; a
/// file the view could not lay out is unread (the scan fails).
fn remote_outcome(r: &RemoteInput) -> Result<ScanOutcome, weightport_core::Error> {
    let storage = weightport_remote::RemoteFiles;
    let mut o = weightport_scan::scan_with(&r.path, Some(&storage))?;
    let path = r.path.to_string_lossy();
    let view = path.trim_end_matches('/');
    let shown = r.shown.trim_end_matches('/');
    let renamed = |p: &Path| -> PathBuf {
        let s = p.to_string_lossy();
        match s.strip_prefix(view) {
            Some(rest) => PathBuf::from(format!("{shown}{rest}")),
            None => p.to_path_buf(),
        }
    };
    for rep in &mut o.reports {
        rep.path = renamed(&rep.path);
        for f in &mut rep.findings {
            f.what = f.what.replace(view, shown);
        }
        rep.error = rep.error.take().map(|e| e.replace(view, shown));
    }
    for s in &mut o.skipped {
        s.path = renamed(&s.path);
        s.reason = s.reason.replace(view, shown);
    }
    for n in &r.notes {
        o.skipped.push(Skipped {
            path: PathBuf::from(&r.shown),
            reason: n.clone(),
            unverified: true,
        });
    }
    Ok(o)
}

fn verdict(r: &ScanReport) -> &'static str {
    if r.verdict == Verdict::Safe {
        "safe"
    } else {
        "unsafe"
    }
}

fn report_json(r: &ScanReport) -> Value {
    json!({
        "path": r.path.display().to_string(),
        "format": r.format.map(|f| f.name()),
        "verdict": verdict(r),
        "findings": r.findings.iter().map(|f| json!({"offset": f.offset, "what": f.what, "unsafe": f.unsafe_, "rule": f.rule})).collect::<Vec<_>>(),
        "globals": r.globals.iter().map(|g| json!({"offset": g.offset, "module": g.module, "name": g.name, "allowed": g.allowed})).collect::<Vec<_>>(),
        "opcodes": r.opcodes.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "records": r.records.iter().map(|x| json!({"name": x.name, "size": x.size, "method": x.method, "referenced": x.referenced})).collect::<Vec<_>>(),
        "entries": r.entries.iter().map(|(k, v)| (k.clone(), meta_json(v))).collect::<serde_json::Map<_, _>>(),
        "tensors": r.tensors,
        "error": r.error,
        "pickles": r.pickles.iter().map(|x| json!({"entry": x.entry, "size": x.size, "sha256": x.sha256_hex(), "loaded": x.loaded})).collect::<Vec<_>>(),
    })
}

fn skipped_json(s: &Skipped) -> Value {
    json!({"path": s.path.display().to_string(), "reason": s.reason, "unverified": s.unverified})
}

fn document(o: &ScanOutcome) -> Value {
    json!({
        "ok": o.passed(),
        "command": "scan",
        "files": o.reports.iter().map(report_json).collect::<Vec<_>>(),
        "skipped": o.skipped.iter().map(skipped_json).collect::<Vec<_>>(),
        "unsafe": o.unsafe_count(),
        "unverified": o.unverified_count(),
    })
}

fn text(o: &ScanOutcome, out: &mut impl Write) -> std::io::Result<()> {
    let single = o.reports.len() == 1 && o.skipped.is_empty();
    for r in &o.reports {
        let v = if r.verdict == Verdict::Safe {
            "safe"
        } else {
            "UNSAFE"
        };
        writeln!(
            out,
            "{v:<6} {}  ({} tensors, {} globals)",
            p(&r.path),
            r.tensors,
            r.globals.len()
        )?;
        for f in r.findings.iter().filter(|f| f.unsafe_ || single) {
            let at = f.offset.map(|o| format!("byte {o}: ")).unwrap_or_default();
            writeln!(out, "       {at}{}", sanitize(&f.what))?;
        }
        if single {
            for g in &r.globals {
                let mark = if g.allowed { "allowed" } else { "REFUSED" };
                writeln!(
                    out,
                    "       global {}.{} at byte {} ({mark})",
                    sanitize(&g.module),
                    sanitize(&g.name),
                    g.offset
                )?;
            }
        }
    }
    for s in &o.skipped {
        let mark = if s.unverified { "UNREAD" } else { "skip" };
        writeln!(out, "{mark:<6} {}  ({})", p(&s.path), sanitize(&s.reason))?;
    }
    writeln!(
        out,
        "{} files scanned, {} unsafe; {} skipped ({} could not be read)",
        o.reports.len(),
        o.unsafe_count(),
        o.skipped.len(),
        o.unverified_count()
    )
}

// ---- SARIF 2.1.0 ---------------------------------------------------------------------------

/// An extra rule for files that were not read.
const UNREAD_RULE: (&str, &str) = (
    "file-not-scanned",
    "A file that could carry code was not read (permissions, a symlink not followed, depth).",
);

fn all_rules() -> Vec<(&'static str, &'static str)> {
    let mut v = rules::ALL.to_vec();
    v.push(UNREAD_RULE);
    v
}

fn sha256_file(path: &Path) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Some(format!("{:x}", h.finalize()))
}

fn uri(path: &Path) -> String {
    path.display().to_string()
}

fn artifact(path: &Path) -> Value {
    let mut a = json!({"location": {"uri": uri(path)}});
    if let Some(h) = sha256_file(path) {
        a["hashes"] = json!({"sha-256": h});
    }
    a
}

fn result(
    rule: &str,
    rule_index: usize,
    artifact: usize,
    path: &Path,
    offset: Option<u64>,
    message: &str,
    level: &str,
) -> Value {
    let mut loc = json!({"artifactLocation": {"uri": uri(path), "index": artifact}});
    if let Some(o) = offset {
        loc["region"] = json!({"byteOffset": o, "byteLength": 1});
    }
    json!({
        "ruleId": rule,
        "ruleIndex": rule_index,
        "level": level,
        "message": {"text": message},
        "locations": [{"physicalLocation": loc}],
    })
}

fn sarif(o: &ScanOutcome) -> std::io::Result<Value> {
    let rule_list = all_rules();
    let index_of = |id: &str| rule_list.iter().position(|(r, _)| *r == id).unwrap_or(0);
    let mut artifacts = Vec::new();
    let mut results = Vec::new();
    for r in &o.reports {
        let ai = artifacts.len();
        artifacts.push(artifact(&r.path));
        for f in r.findings.iter().filter(|f| f.unsafe_) {
            let (rule, ri) = (f.rule, index_of(f.rule));
            let msg = sanitize(&f.what);
            results.push(result(rule, ri, ai, &r.path, f.offset, &msg, "error"));
        }
    }
    for s in o.skipped.iter().filter(|s| s.unverified) {
        let ai = artifacts.len();
        artifacts.push(json!({"location": {"uri": uri(&s.path)}}));
        let (rule, ri) = (UNREAD_RULE.0, index_of(UNREAD_RULE.0));
        let msg = sanitize(&s.reason);
        results.push(result(rule, ri, ai, &s.path, None, &msg, "error"));
    }
    let rules_json: Vec<Value> = rule_list
        .iter()
        .map(|(id, text)| {
            json!({
                "id": id,
                "shortDescription": {"text": text},
                "defaultConfiguration": {"level": if *id == rules::NOTE { "note" } else { "error" }},
            })
        })
        .collect();
    Ok(json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "weightport",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": "https://example.invalid/weightport",
                "rules": rules_json,
            }},
            "artifacts": artifacts,
            "results": results,
            "columnKind": "unicodeCodePoints",
        }],
    }))
}
