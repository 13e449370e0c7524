//! `weightport edit`: in-place edits, `--apply`, `--recover`, `--undo`; a table or one JSON
//! document (docs/json/edit.schema.json).

use std::ffi::OsString;
use std::io::Write;

use serde_json::{json, Value};
use weightport_core::{sanitize, Error};
use weightport_edit::{EditOptions, Edited, Op};

use crate::args::EditArgs;
use crate::render::{human, p};
use crate::Failure;

/// The operations in command-line order (clap keeps each flag's values in order, not their
/// interleaving: the order comes from the command line itself).
fn ops_in_order(a: &EditArgs) -> Result<Vec<Op>, Error> {
    let (mut set, mut mask, mut add, mut rep) =
        (a.set.iter(), a.mask.iter(), a.add.iter(), a.replace.iter());
    let mut ops = Vec::new();
    let mut i = 0;
    let argv: Vec<String> = a
        .argv
        .iter()
        .map(|s: &OsString| s.to_string_lossy().into_owned())
        .collect();
    while i < argv.len() {
        let tok = argv[i].as_str();
        let (flag, inline) = match tok.split_once('=') {
            Some((f, _)) if f.starts_with("--") => (f, true),
            _ => (tok, false),
        };
        let op = match flag {
            "--set" => set.next().map(|s| Op::parse_set(s)),
            "--mask" => mask.next().map(|f| Ok(Op::Mask(f.clone()))),
            "--add" => add.next().map(|f| Ok(Op::Add(f.clone()))),
            "--replace" => rep.next().map(|s| Op::parse_replace(s)),
            "--" => break,
            _ => None,
        };
        if let Some(op) = op {
            ops.push(op.map_err(Error::Usage)?);
            i += if inline { 1 } else { 2 };
        } else {
            i += 1;
        }
    }
    Ok(ops)
}

pub(crate) fn run(a: &EditArgs, json: bool, out: &mut impl Write) -> Result<(), Failure> {
    if a.recover {
        let texts = weightport_edit::recover(&a.target)?;
        let message = if texts.is_empty() {
            "nothing to recover: no interrupted edit".to_string()
        } else {
            texts.join("; ")
        };
        return simple(a, "recover", &texts, &message, json, out);
    }
    if a.undo {
        let text = weightport_edit::undo(&a.target)?;
        return simple(a, "undo", &weightport_edit::notices(), &text, json, out);
    }
    let mut opts = EditOptions::default();
    opts.dry_run = a.dry_run;
    opts.keep_undo = a.keep_undo;
    opts.verify_rest = a.verify_rest;
    let edited = match &a.apply {
        Some(patch) => weightport_edit::patch::apply(&a.target, patch, opts)?,
        None => weightport_edit::edit(&a.target, &ops_in_order(a)?, opts)?,
    };
    let recovered = weightport_edit::notices();
    if json {
        writeln!(out, "{}", document(a, &edited, &recovered))?;
    } else {
        text(a, &edited, out)?;
    }
    Ok(())
}

fn base(a: &EditArgs, action: &str) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("ok".into(), json!(true));
    m.insert("command".into(), json!("edit"));
    m.insert("action".into(), json!(action));
    m.insert("target".into(), json!(a.target.display().to_string()));
    m
}

/// `--recover` and `--undo`: one line.
fn simple(
    a: &EditArgs,
    action: &str,
    recovered: &[String],
    message: &str,
    json: bool,
    out: &mut impl Write,
) -> Result<(), Failure> {
    if json {
        let mut m = base(a, action);
        m.insert("recovered".into(), json!(recovered));
        m.insert("message".into(), json!(message));
        writeln!(out, "{}", Value::Object(m))?;
    } else {
        writeln!(out, "{}: {}", p(&a.target), sanitize(message))?;
    }
    Ok(())
}

fn document(a: &EditArgs, e: &Edited, recovered: &[String]) -> Value {
    let t = &e.target;
    let r = &e.report;
    let tensors: Vec<Value> = r
        .changes
        .iter()
        .map(|c| {
            let pl = &t.tensors[c.tensor];
            json!({
                "name": pl.name, "dtype": pl.dtype.name(), "shape": pl.shape,
                "file": t.files[pl.file].shown.display().to_string(),
                "elements": c.elements,
                "bytes": c.ranges.iter().map(|(x, y)| y - x).sum::<u64>(),
                "ranges": c.ranges.iter().map(|(x, y)| json!([x, y])).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut m = base(a, if a.apply.is_some() { "apply" } else { "edit" });
    m.insert("format".into(), json!(t.container.name()));
    m.insert("dry_run".into(), json!(a.dry_run));
    m.insert(
        "elements".into(),
        json!(r.changes.iter().map(|c| c.elements).sum::<u64>()),
    );
    m.insert("bytes".into(), json!(r.bytes));
    m.insert(
        "ranges".into(),
        json!(r.changes.iter().map(|c| c.ranges.len()).sum::<usize>()),
    );
    m.insert("tensors".into(), Value::Array(tensors));
    m.insert(
        "undo".into(),
        json!(r.undo.as_ref().map(|u| u.display().to_string())),
    );
    m.insert(
        "dropped_undo".into(),
        json!(r.dropped_undo.as_ref().map(|u| u.display().to_string())),
    );
    m.insert("verified_rest".into(), json!(r.verified_rest));
    m.insert("recovered".into(), json!(recovered));
    Value::Object(m)
}

/// The table on stdout (what was rolled back on the way is on stderr, as for every command).
fn text(a: &EditArgs, e: &Edited, out: &mut impl Write) -> std::io::Result<()> {
    let (t, r) = (&e.target, &e.report);
    let elements: u64 = r.changes.iter().map(|c| c.elements).sum();
    let ranges: usize = r.changes.iter().map(|c| c.ranges.len()).sum();
    let verb = if a.dry_run {
        "would change"
    } else {
        "changed in place"
    };
    if r.changes.is_empty() {
        return writeln!(
            out,
            "{}: nothing to change (every selected element already has its new value)",
            p(&a.target)
        );
    }
    writeln!(
        out,
        "{}: {verb} ({}): {} tensors, {elements} elements, {} in {ranges} byte ranges",
        p(&a.target),
        t.container.name(),
        r.changes.len(),
        human(r.bytes)
    )?;
    for c in &r.changes {
        let pl = &t.tensors[c.tensor];
        let (first, last) = (c.ranges[0].0, c.ranges[c.ranges.len() - 1].1);
        writeln!(
            out,
            "  {:<40} {:<6} {:<16} {:>10} elements  bytes {first}..{last} ({} ranges)",
            sanitize(&pl.name),
            pl.dtype.name(),
            format!("{:?}", pl.shape),
            c.elements,
            c.ranges.len()
        )?;
    }
    if let Some(u) = &r.undo {
        writeln!(
            out,
            "undo journal kept: {} (weightport edit --undo {})",
            p(u),
            p(&a.target)
        )?;
    }
    if r.verified_rest {
        writeln!(
            out,
            "every byte outside the changed ranges re-hashed: unchanged"
        )?;
    }
    Ok(())
}
