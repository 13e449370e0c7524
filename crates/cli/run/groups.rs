//! Running the job: its outputs grouped by what they read (one read per group), each
//! output its own verified transaction, side files written after.

use super::*;

/// The pipeline's options of every output of `job`, or the first refused (labelled with its
/// output): the whole job is checked before any of it runs.
pub(super) fn job_options(job: &Job, cx: &Ctx) -> Result<Vec<ConvertOptions>, Error> {
    let mut all = Vec::with_capacity(job.outputs.len());
    for o in &job.outputs {
        let label = |e: Error| match e {
            Error::Usage(m) => Error::Usage(format!("{}: {m}", o.label(&job.file))),
            e => e,
        };
        let asked = &cx.global.workers;
        let workers = Workers::new(
            asked.threads().or(o.threads),
            asked.max_memory().or(o.max_memory),
        )
        .map_err(|ThreadsOutOfRange(n)| {
            label(Error::Usage(format!(
                "threads = {n}: must be between 1 and {MAX_THREADS}"
            )))
        })?;
        let g = Global { workers };
        all.push(convert_options(&o.args, &g, cx.json).map_err(label)?);
    }
    Ok(all)
}

/// Output `o` (number `index` of the job, its options `opts`) to make, or (`Err`) what
/// happened to it already: its record still holds, or its input is refused.
pub(super) fn pending(
    index: usize,
    o: &PlannedOutput,
    mut opts: ConvertOptions,
    cx: &Ctx,
    d: &mut Decide,
) -> Result<Pending, Box<(Outcome, Option<String>)>> {
    let key = o.args.output.display().to_string();
    let before = state::stats_before(o);
    let redone = match d.state.outputs.get(&key) {
        None => None,
        Some(rec) => match record_holds(rec, o, &mut d.hashes) {
            Ok(fresh) => {
                if let Some(inputs) = fresh {
                    d.refreshed.push((
                        key,
                        Record {
                            inputs,
                            ..rec.clone()
                        },
                    ));
                }
                return Err(Box::new((Outcome::Skipped, None)));
            }
            Err(why) => Some(why),
        },
    };
    let failed = |e| Box::new((Outcome::Failed(e), redone.clone()));
    opts.dry_run |= cx.dry_run;
    // An output this job recorded is its own to replace, and so are the statement and report
    // its record names (not others, when their paths changed).
    opts.force |= cx.force || redone.is_some();
    let rec = d.state.outputs.get(&key);
    for s in &mut opts.side_files {
        let recorded =
            rec.is_some_and(|r| [&r.attestation, &r.report].contains(&&Some(s.path.clone())));
        s.replace |= cx.force || recorded;
    }
    let route = route(&opts).map_err(failed)?;
    Ok(Pending {
        index,
        key: group_key(o.job, &opts, &route.open),
        opts,
        route,
        redone,
        before,
    })
}

/// The outputs of a group just made get their statements and reports (as `convert` writes
/// them, after the commit).
pub(super) fn side_files(g: &Group, job: &Job, cx: &Ctx, results: Results) -> Results {
    let with_side = |m: &Pending, r: ConvertReport| {
        let o = &job.outputs[m.index];
        if !r.dry_run {
            let made_as = json!({"file": cx.file, "job": o.job, "output": o.output,
                                 "line": o.line, "convert": o.argv});
            crate::attest::write_outputs(&o.args, &r, Some(made_as), &m.opts.side_files)?;
        }
        Ok(r)
    };
    g.members
        .iter()
        .zip(results)
        .map(|(m, r)| r.and_then(|r| with_side(m, r)))
        .collect()
}

/// The key outputs share an input by: the job, the paths, the open request up to whether tied
/// pickle tensors keep every name (`shared_copy`, which [`same_tensors`] settles).
pub(super) fn group_key(job: usize, opts: &ConvertOptions, req: &OpenRequest) -> String {
    let mut r = req.clone();
    r.read.shared_copy = false;
    format!("{job} {:?} {r:?}", opts.inputs)
}

/// Two opens of one input that list the same tensors of the same files (no tied tensors,
/// so `shared_copy` changed nothing): one read serves both.
pub(super) fn same_tensors(a: &Input, b: &Input) -> bool {
    let (x, y) = (a.source.as_ref(), b.source.as_ref());
    x.tensors() == y.tensors()
        && x.files() == y.files()
        && x.unconverted() == y.unconverted()
        && (0..x.tensors().len()).all(|i| x.file_of(i) == y.file_of(i))
}

/// Opens a group's input (once per distinct request, once in all when the opens agree) and
/// converts it into every member: one shared read for the members of one open.
pub(super) fn convert_group(g: &Group, progress: &dyn Progress) -> Result<Converted, Error> {
    let n = g.members.len();
    let mut opened: Vec<(bool, Result<Input, Error>)> = Vec::new();
    let mut which = Vec::with_capacity(n);
    for m in &g.members {
        let sc = m.route.open.read.shared_copy;
        let at = match opened.iter().position(|(s, _)| *s == sc) {
            Some(i) => i,
            None => {
                opened.push((sc, open_inputs(&m.opts.inputs, &m.route.open)));
                opened.len() - 1
            }
        };
        which.push(at);
    }
    if let [(_, Ok(a)), (_, Ok(b))] = opened.as_slice() {
        if same_tensors(a, b) {
            which.iter_mut().for_each(|w| *w = 0);
        }
    }
    let mut results: Vec<Option<Result<ConvertReport, Error>>> = (0..n).map(|_| None).collect();
    let mut reads = Vec::new();
    for (x, (_, input)) in opened.iter().enumerate() {
        let members: Vec<usize> = (0..n).filter(|&i| which[i] == x).collect();
        if members.is_empty() {
            continue;
        }
        let input = match input {
            Ok(i) => i,
            Err(Error::Interrupted) => return Err(Error::Interrupted),
            Err(e) => {
                for &i in &members {
                    results[i] = Some(Err(Error::Usage(e.to_string())));
                }
                continue;
            }
        };
        let ms: Vec<&Pending> = members.iter().map(|&i| &g.members[i]).collect();
        let (rs, read) = convert_members(input, &ms, progress)?;
        reads.extend(read);
        for (i, r) in members.into_iter().zip(rs) {
            results[i] = Some(r);
        }
    }
    let results = results
        .into_iter()
        .map(|r| r.expect("every member converted"));
    Ok((results.collect(), reads))
}

/// Converts one opened input into `members` (one shared read when there are several).
pub(super) fn convert_members(
    input: &Input,
    members: &[&Pending],
    progress: &dyn Progress,
) -> Result<(Results, Option<GroupRead>), Error> {
    let indices: Vec<usize> = members.iter().map(|m| m.index).collect();
    if let [one] = members {
        let r = convert_input(input, &one.route, progress);
        let read = r.as_ref().ok().filter(|r| !r.dry_run).map(|r| GroupRead {
            outputs: indices,
            read_bytes: r.read_bytes,
            files: r.reads.clone(),
        });
        return Ok((vec![r], read));
    }
    let outputs: Vec<Route> = members.iter().map(|m| m.route.clone()).collect();
    let many = convert_many(input, &outputs, progress)?;
    let read = (!members[0].opts.dry_run).then(|| GroupRead {
        outputs: indices,
        read_bytes: many.read_bytes,
        files: many.reads.clone(),
    });
    Ok((many.outputs, read))
}
