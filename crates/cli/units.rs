//! `plan`, `unit`, `finish`: one conversion as units a batch engine runs.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use serde_json::json;
use weightport_core::Error;
use weightport_engine::ConvertOptions;
use weightport_engine::Progress;
use weightport_engine::Workers;
use weightport_units::{self as units, UnitOutcome, UnitPlan, UnitSplit};

use crate::args::{Cli, Command, ConvertArgs, FinishArgs, PlanArgs, UnitArgs};
use crate::options::{convert_options, Global};
use crate::render::{human, io_json, p};
use crate::Failure;

/// Keeps the command line of `plan` (after the program name) for the plan file.
pub(crate) fn keep_argv(mut cli: Cli, argv: &[OsString]) -> Cli {
    match &mut cli.command {
        Command::Plan(a) => {
            a.argv = argv
                .iter()
                .skip(1)
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            a.convert.output = a.convert.outputs[0].clone();
        }
        Command::Convert(a) => {
            a.argv = argv.to_vec();
            a.output = a.outputs[0].clone();
        }
        Command::Edit(a) => a.argv = argv.to_vec(),
        _ => {}
    }
    cli
}

fn absolute(path: &Path) -> Result<PathBuf, Error> {
    std::path::absolute(path).map_err(|e| Error::io(path, "resolve", e))
}

/// The convert options of `a` with `inputs` and `output` as given (absolute).
fn options_of(
    a: &ConvertArgs,
    inputs: Vec<PathBuf>,
    output: PathBuf,
    g: &Global,
) -> Result<ConvertOptions, Error> {
    let mut opts = convert_options(a, g, false)?;
    opts.inputs = inputs;
    opts.output = output;
    Ok(opts)
}

/// The convert options a plan file's command stands for.
fn plan_options(plan: &UnitPlan, g: &Global) -> Result<ConvertOptions, Error> {
    let argv = std::iter::once("weightport".to_string()).chain(plan.command.iter().cloned());
    let bad = |what: String| {
        Error::malformed(
            weightport_core::Location::file(&plan.path),
            None,
            format!("plan file field `command`: {what}"),
        )
    };
    let cli = Cli::try_parse_from(argv).map_err(|e| bad(e.kind().to_string()))?;
    let Command::Plan(mut a) = cli.command else {
        return Err(bad("not a `plan` command line".into()));
    };
    a.convert.output = plan.output.clone();
    options_of(&a.convert, plan.inputs.clone(), plan.output.clone(), g)
}

pub(crate) fn plan(a: &PlanArgs, json: bool, out: &mut impl Write) -> Result<(), Failure> {
    let c = &a.convert;
    if c.outputs.len() > 1 {
        return Err(Error::Usage("plan: one -o (a plan makes one output)".into()).into());
    }
    if !matches!(crate::multi::split(&c.outputs[0]), Ok((_, None))) {
        return Err(Error::Usage(format!(
            "plan: -o {}: a plan's output takes no options after a colon (give them as \
             flags: --quant Q8_0); a path that ends in `:…` is written with a trailing colon",
            p(&c.outputs[0])
        ))
        .into());
    }
    if c.dry_run || c.attest.is_some() || c.report.is_some() {
        return Err(Error::Usage(
            "plan: --dry-run, --attest and --report apply to convert only".into(),
        )
        .into());
    }
    let inputs = c
        .inputs
        .iter()
        .map(|i| absolute(i))
        .collect::<Result<_, _>>()?;
    let output = absolute(&c.output)?;
    let g = Global {
        workers: Workers::default(),
    };
    let opts = options_of(c, inputs, output.clone(), &g)?;
    let how = match (a.units, a.unit_size) {
        (Some(n), _) => UnitSplit::Count(n),
        (None, Some(s)) => UnitSplit::Size(s),
        (None, None) => {
            return Err(Error::Usage("plan: give --units N or --unit-size SIZE".into()).into())
        }
    };
    let plan_path = match &a.plan {
        Some(f) => absolute(f)?,
        None => PathBuf::from(format!("{}.plan.json", output.display())),
    };
    let r = units::plan_units(&opts, how, a.in_place, &a.argv, &plan_path)?;
    if json {
        let doc = json!({
            "ok": true,
            "command": "plan",
            "plan": r.plan.display().to_string(),
            "output": r.output.display().to_string(),
            "staging": r.staging.display().to_string(),
            "in_place": a.in_place,
            "tensors": r.tensors,
            "input_files": r.input_files,
            "files": r.files.iter().map(|(f, s)| json!({"path": f.display().to_string(), "size": s})).collect::<Vec<_>>(),
            "units": r.units.iter().enumerate().map(|(i, (t, b, w))| json!({"index": i, "tensors": t, "part_bytes": b,
                "whole_files": w.iter().map(|f| f.display().to_string()).collect::<Vec<_>>()})).collect::<Vec<_>>(),
        });
        writeln!(out, "{doc}")?;
        return Ok(());
    }
    writeln!(
        out,
        "planned {} tensors into {} files as {} units: {}",
        r.tensors,
        r.files.len(),
        r.units.len(),
        p(&r.plan)
    )?;
    for (i, (t, b, _)) in r.units.iter().enumerate() {
        writeln!(out, "  unit {i:>5}  {:>12}  {t} tensors", human(*b))?;
    }
    writeln!(
        out,
        "run `weightport unit {} --index I` for I in 0..{}, then `weightport finish {}`",
        p(&r.plan),
        r.units.len(),
        p(&r.plan)
    )?;
    Ok(())
}

/// The unit index and where it came from: `--index`, else `SLURM_ARRAY_TASK_ID`, else
/// `JOB_COMPLETION_INDEX` (a decimal integer from 0; anything else is a usage error).
fn unit_index(a: &UnitArgs) -> Result<(usize, String), Error> {
    if let Some(i) = a.index {
        return Ok((i, format!("--index {i}")));
    }
    for var in ["SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX"] {
        let Some(v) = std::env::var_os(var) else {
            continue;
        };
        let v = v.to_string_lossy();
        let t = v.trim();
        return match t.parse::<usize>() {
            Ok(i) if t.bytes().all(|b| b.is_ascii_digit()) => Ok((i, format!("${var}={t}"))),
            _ => Err(Error::Usage(format!(
                "${var} is `{}`, not a unit index (a whole number from 0)",
                weightport_core::sanitize(&v)
            ))),
        };
    }
    Err(Error::Usage(
        "unit: give --index I (or set SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX)".into(),
    ))
}

pub(crate) fn unit(
    a: &UnitArgs,
    g: &Global,
    json: bool,
    progress: &dyn Progress,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let (index, from) = unit_index(a)?;
    let mut plan = units::read_plan(&a.plan)?;
    let _views = crate::remote::localize_plan(&mut plan.inputs)?;
    if index >= plan.units.len() {
        return Err(Error::Usage(format!(
            "unit index {index} ({from}): {} has units 0 to {}",
            p(&a.plan),
            plan.units.len() - 1
        ))
        .into());
    }
    let opts = plan_options(&plan, g)?;
    let t0 = Instant::now();
    let r = units::run_unit(&plan, &opts, index, progress)?;
    let secs = t0.elapsed().as_secs_f64();
    let outcome = match r.outcome {
        UnitOutcome::Done => "done",
        UnitOutcome::AlreadyDone => "already-done",
        UnitOutcome::LostRace => "done-elsewhere",
    };
    if json {
        let doc = json!({
            "ok": true, "command": "unit", "index": r.index, "units": r.units, "outcome": outcome,
            "parts": r.parts.iter().map(|(f, b, sha)| json!({"path": f.display().to_string(), "bytes": b, "sha256": sha})).collect::<Vec<_>>(),
            "bytes": r.bytes, "tensors": r.tensors, "threads": r.threads, "io": io_json(&r.io), "seconds": secs,
        });
        writeln!(out, "{doc}")?;
        return Ok(());
    }
    writeln!(
        out,
        "unit {} of {}: {outcome}, {} tensors, {} in {secs:.2} s (verified)",
        r.index,
        r.units,
        r.tensors,
        human(r.bytes),
    )?;
    for (f, _, _) in &r.parts {
        writeln!(out, "  {}", p(f))?;
    }
    Ok(())
}

pub(crate) fn finish(
    a: &FinishArgs,
    g: &Global,
    json: bool,
    progress: &dyn Progress,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let mut plan = units::read_plan(&a.plan)?;
    let _views = crate::remote::localize_plan(&mut plan.inputs)?;
    let opts = plan_options(&plan, g)?;
    let t0 = Instant::now();
    let r = units::finish(&plan, &opts, progress)?;
    let secs = t0.elapsed().as_secs_f64();
    if json {
        let doc = json!({
            "ok": true, "command": "finish", "units": r.units, "tensors": r.tensors, "data_bytes": r.data_bytes,
            "verified": r.verified, "io": io_json(&r.io), "seconds": secs,
            "files": r.files.iter().map(|f| json!({"path": f.path.display().to_string(), "size": f.size, "tensors": f.tensors})).collect::<Vec<_>>(),
            "extras": r.extras.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
            "removed": r.removed.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
        });
        writeln!(out, "{doc}")?;
        return Ok(());
    }
    let verified = if r.verified { " (verified)" } else { "" };
    writeln!(
        out,
        "finished {} units: {} tensors into {} files, {} in {secs:.2} s{verified}",
        r.units,
        r.tensors,
        r.files.len(),
        human(r.data_bytes)
    )?;
    for f in &r.files {
        writeln!(
            out,
            "  {:<48} {:>10}  {} tensors",
            p(&f.path),
            human(f.size),
            f.tensors
        )?;
    }
    for e in &r.extras {
        writeln!(out, "  {}", p(e))?;
    }
    Ok(())
}
