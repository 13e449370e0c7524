//! The job's result as a table or as JSON.

use super::*;

pub(super) fn status(o: &Outcome) -> &'static str {
    match o {
        Outcome::Made(_) => "made",
        Outcome::Skipped => "skipped",
        Outcome::Planned(_) => "planned",
        Outcome::Failed(_) => "failed",
    }
}

/// One output in `--json`.
pub(super) fn output_json(o: &PlannedOutput, d: &Done) -> Value {
    let path = |x: &Option<PathBuf>| x.as_ref().map(|p| p.display().to_string());
    let mut v = json!({
        "job": o.job,
        "output": o.output,
        "line": o.line,
        "inputs": o.given.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "path": o.args.output.display().to_string(),
        "status": status(&d.outcome),
        "redone_because": d.redone,
        "attestation": path(&o.args.attest),
        "report": path(&o.args.report),
        "seconds": d.seconds,
        "error": Value::Null,
        "result": Value::Null,
    });
    match &d.outcome {
        Outcome::Made(r) | Outcome::Planned(r) => v["result"] = report_json(r),
        Outcome::Failed(e) => {
            v["error"] =
                json!({"kind": e.kind(), "message": e.to_string(), "exit_code": e.exit_code()})
        }
        Outcome::Skipped => {}
    }
    v
}

/// The part of a conversion's report a job summary carries.
pub(super) fn report_json(r: &ConvertReport) -> Value {
    let mut types: BTreeMap<&str, usize> = BTreeMap::new();
    for t in &r.plan {
        *types.entry(t.dtype.name()).or_default() += 1;
    }
    json!({
        "output_format": r.output_format,
        "verified": r.verified,
        "files": r.files.iter().map(|f| json!({"path": f.path.display().to_string(), "bytes": f.size, "tensors": f.tensors})).collect::<Vec<_>>(),
        "tensors": r.tensors,
        "types": types,
        "total_bytes": r.total_bytes,
        "needed_bytes": r.needed_bytes,
        "free_bytes": r.free_bytes,
        "threads": r.threads,
        "memory_bytes": r.memory_bytes,
        "read_bytes": r.read_bytes,
        "io": io_json(&r.io),
    })
}

/// The I/O of every output made.
pub(super) fn io_total(done: &[Done]) -> IoCounts {
    let mut sum = IoCounts::default();
    for d in done {
        if let Outcome::Made(r) = &d.outcome {
            sum += r.io;
        }
    }
    sum
}

/// Disk the made or planned outputs need, summed, and the least free space where they go.
pub(super) fn disk(done: &[Done]) -> (u64, Option<u64>) {
    let reports = done.iter().filter_map(|d| match &d.outcome {
        Outcome::Planned(r) | Outcome::Made(r) => Some(r),
        _ => None,
    });
    let (mut needed, mut free) = (0, None::<u64>);
    for r in reports {
        needed += r.needed_bytes;
        free = match (free, r.free_bytes) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    (needed, free)
}

/// The reads of a run in `--json`.
pub(super) fn reads_json(reads: &[GroupRead]) -> Value {
    let files = |f: &[(PathBuf, u64)]| -> Vec<Value> {
        f.iter()
            .map(|(p, n)| json!({"path": crate::remote::shown_path(p), "bytes": n}))
            .collect()
    };
    reads
        .iter()
        .map(
            |g| json!({"outputs": g.outputs, "read_bytes": g.read_bytes, "files": files(&g.files)}),
        )
        .collect()
}

pub(super) fn run_json(
    job: &Job,
    done: &[Done],
    reads: &[GroupRead],
    dry_run: bool,
    secs: f64,
) -> Value {
    let [made, skipped, planned, failed] = counts(done);
    let (needed, free) = disk(done);
    json!({
        "ok": failed == 0,
        "command": if job.state.is_some() { "run" } else { "convert" },
        "job_file": job.state.as_ref().map(|_| job.file.display().to_string()),
        "state": job.state.as_ref().map(|s| s.display().to_string()),
        "dry_run": dry_run,
        "made": made,
        "skipped": skipped,
        "planned": planned,
        "failed": failed,
        "needed_bytes": needed,
        "free_bytes": free,
        "outputs": job.outputs.iter().zip(done).map(|(o, d)| output_json(o, d)).collect::<Vec<_>>(),
        "reads": reads_json(reads),
        "io": io_json(&io_total(done)),
        "seconds": secs,
    })
}

/// One line per output on stdout (failures are also on stderr, as they happen).
pub(super) fn run_text(
    job: &Job,
    done: &[Done],
    reads: &[GroupRead],
    out: &mut impl Write,
) -> std::io::Result<()> {
    for (o, d) in job.outputs.iter().zip(done) {
        let what = match &d.outcome {
            Outcome::Made(r) | Outcome::Planned(r) => result_text(r, d.seconds),
            Outcome::Skipped => "verified against its recorded provenance".into(),
            Outcome::Failed(e) => e.to_string(),
        };
        let why = d.redone.as_deref().map(|w| format!(" (made again: {w})"));
        writeln!(
            out,
            "{:<8} {}  {}{}",
            status(&d.outcome),
            p(&o.args.output),
            weightport_core::sanitize(&what),
            why.unwrap_or_default()
        )?;
    }
    if done
        .iter()
        .any(|d| matches!(d.outcome, Outcome::Planned(_)))
    {
        let (needed, free) = disk(done);
        let free = free.map(human).unwrap_or_else(|| "unknown".into());
        writeln!(out, "disk needed {} in all; free {free}", human(needed))?;
    }
    for g in reads.iter().filter(|g| g.outputs.len() > 1) {
        let names: Vec<String> = g
            .outputs
            .iter()
            .map(|&i| p(&job.outputs[i].args.output))
            .collect();
        writeln!(
            out,
            "one read of {} for {}",
            human(g.read_bytes),
            weightport_core::sanitize(&names.join(", "))
        )?;
    }
    Ok(())
}

pub(super) fn result_text(r: &ConvertReport, secs: f64) -> String {
    let mut types: BTreeMap<&str, usize> = BTreeMap::new();
    for t in &r.plan {
        *types.entry(t.dtype.name()).or_default() += 1;
    }
    let types: Vec<String> = types.iter().map(|(t, n)| format!("{t}×{n}")).collect();
    let tail = if r.dry_run {
        format!("{} needed", human(r.needed_bytes))
    } else {
        let v = if r.verified {
            "verified"
        } else {
            "NOT verified"
        };
        format!("{v}, {secs:.2} s")
    };
    format!(
        "{} files, {}, {} tensors ({}); {tail}",
        r.files.len(),
        human(r.total_bytes),
        r.tensors,
        types.join(" ")
    )
}
