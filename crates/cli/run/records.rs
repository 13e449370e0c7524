//! What the job's state records of an output and whether a record still holds (a rerun
//! skips what it made and nothing changed since).

use super::*;

/// The record an output would get now, before its inputs and files are known.
pub(super) fn expected_record(o: &PlannedOutput) -> Record {
    let mut options = serde_json::to_value(&o.options).unwrap_or(Value::Null);
    if let Some(m) = options.as_object_mut() {
        // What does not change the output's bytes.
        for k in [
            "threads",
            "max_memory",
            "force",
            "verify",
            "attest",
            "report",
        ] {
            m.remove(k);
        }
        m.retain(|_, v| !v.is_null());
    }
    Record {
        recipe: json!({
            "inputs": o.given,
            "output": o.args.output,
            "options": options,
            "weightport": env!("CARGO_PKG_VERSION"),
        }),
        inputs: Vec::new(),
        job_file: None,
        attestation: o.args.attest.clone(),
        report: o.args.report.clone(),
        root: PathBuf::new(),
        files: Vec::new(),
    }
}

/// The subjects of an attestation file, sorted.
pub(super) fn subjects(file: &Path) -> Result<Vec<FileDigest>, String> {
    let text = std::fs::read(file).map_err(|_| format!("{} is missing", p(file)))?;
    let st: Value =
        serde_json::from_slice(&text).map_err(|_| format!("{} is not JSON", p(file)))?;
    let mut v: Vec<FileDigest> = st["subject"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            Some(FileDigest {
                name: s["name"].as_str()?.to_string(),
                sha256: s["digest"]["sha256"].as_str()?.to_string(),
            })
        })
        .collect();
    v.sort();
    Ok(v)
}

/// `Ok` when `rec` still describes output `o` (`Some`: its inputs' stats refreshed, for
/// inputs that had to be hashed to show them unchanged); else why not.
pub(super) fn record_holds(
    rec: &Record,
    o: &PlannedOutput,
    hashes: &mut Hashes,
) -> Result<Option<Vec<InputFile>>, String> {
    let now = expected_record(o);
    if rec.recipe != now.recipe {
        return Err("its options changed".into());
    }
    let refreshed = state::inputs_hold(rec, o, hashes)?;
    if (&rec.attestation, &rec.report) != (&now.attestation, &now.report) {
        return Err("its attestation or report path changed".into());
    }
    if let Some(a) = &rec.attestation {
        if subjects(a)? != rec.files {
            return Err(format!("{} is not the one recorded", p(a)));
        }
    }
    if let Some(r) = rec.report.as_ref().filter(|r| !r.is_file()) {
        return Err(format!("{} is missing", p(r)));
    }
    for f in &rec.files {
        let path = rec.root.join(&f.name);
        match weightport_provenance::sha256_file(&path) {
            Ok(h) if h == f.sha256 => {}
            Ok(_) => return Err(format!("{} changed", p(&path))),
            Err(_) => return Err(format!("{} is missing", p(&path))),
        }
    }
    Ok(refreshed)
}

/// Every file a committed output consists of, named relative to the directory it lies in.
/// `known` holds the sha256 of files already hashed ([`hash_made`]); others are hashed here.
pub(super) fn digests(
    r: &ConvertReport,
    rec: &Record,
    known: &BTreeMap<PathBuf, String>,
) -> Result<(PathBuf, Vec<FileDigest>), Error> {
    let first = r.files.first().map(|f| f.path.clone()).unwrap_or_default();
    let root = first.parent().unwrap_or(Path::new("")).to_path_buf();
    if let Some(a) = &rec.attestation {
        return Ok((root, subjects(a).map_err(Error::Internal)?));
    }
    let mut v = Vec::new();
    for f in files_made(r) {
        let name = f.strip_prefix(&root).unwrap_or(&f).to_string_lossy().into();
        let sha256 = match known.get(&f) {
            Some(h) => h.clone(),
            None => weightport_provenance::sha256_file(&f)?,
        };
        v.push(FileDigest { name, sha256 });
    }
    v.sort();
    Ok((root, v))
}

/// Every file an output consists of: weights, index, companions.
pub(super) fn files_made(r: &ConvertReport) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = r.files.iter().map(|f| f.path.clone()).collect();
    all.extend(r.index.iter().cloned());
    all.extend(r.copied.iter().cloned());
    all
}

/// The sha256 of every file of the outputs of one read that were made without an
/// attestation (whose subjects already are the digests), hashed several at once: the state's
/// records (one pass per file; a 2.4 GB repo and two GGUFs took 5.5 s one after another).
pub(super) fn hash_made(
    results: &[Result<ConvertReport, Error>],
    workers: &Workers,
) -> Result<BTreeMap<PathBuf, String>, Error> {
    let files: Vec<PathBuf> = results
        .iter()
        .flatten()
        .filter(|r| !r.dry_run && r.provenance.is_none())
        .flat_map(files_made)
        .collect();
    let sums = weightport_engine::sha256_files(&files, workers)?;
    Ok(files.into_iter().zip(sums).collect())
}

/// After output `m.index` was made (and its side files written): its record in the state.
pub(super) fn made(
    o: &PlannedOutput,
    m: &Pending,
    report: ConvertReport,
    rec: &Recorder,
    known: &BTreeMap<PathBuf, String>,
) -> Result<Outcome, Error> {
    if report.dry_run {
        return Ok(Outcome::Planned(Box::new(report)));
    }
    if let Some(path) = rec.path {
        let mut now = expected_record(o);
        (now.root, now.files) = digests(&report, &now, known)?;
        let (remote, read): (Vec<PathBuf>, Vec<PathBuf>) = report
            .reads
            .iter()
            .map(|(f, _)| f.clone())
            .partition(|f| crate::remote::is_view(f));
        now.inputs = state::inputs_made(&m.before, &read, &rec.inputs);
        now.inputs.extend(state::remote_inputs(o, &remote)?);
        now.job_file = rec.job_file.clone();
        let key = o.args.output.display().to_string();
        state::update(path, rec.force, &files_made(&report), |st| {
            st.outputs.insert(key, now);
        })?;
    }
    Ok(Outcome::Made(Box::new(report)))
}

/// The sha256 of the input files of a group's made outputs, for their records: taken from the
/// statements written (their materials: an attested input is not hashed twice), the rest
/// hashed several at once.
pub(super) fn hash_inputs(
    g: &Group,
    job: &Job,
    results: &Results,
    rec: &mut Recorder,
    workers: &Workers,
) -> Result<(), Error> {
    for (m, r) in g.members.iter().zip(results) {
        if let (Ok(_), Some(a)) = (r, &job.outputs[m.index].args.attest) {
            rec.inputs.seed_from_statement(a);
        }
    }
    rec.inputs.fill(&inputs_of(&g.members, results), workers)
}

/// Converts group `g` while one thread beside it hashes the input files its members list (those
/// not yet hashed at their stat), which their records need: the hashing fills the cores' idle
/// moments instead of adding a pass after the conversion. A group with an attested member hashes
/// nothing beside: its statement hashes its materials, which the records then take.
pub(super) fn convert_hashing_inputs(
    g: &Group,
    job: &Job,
    rec: &mut Recorder,
    progress: &dyn Progress,
) -> Result<Converted, Error> {
    let attested = g
        .members
        .iter()
        .any(|m| job.outputs[m.index].args.attest.is_some());
    if rec.path.is_none() || attested {
        return convert_group(g, progress);
    }
    let listed: BTreeSet<PathBuf> = g
        .members
        .iter()
        .flat_map(|m| m.before.keys().cloned())
        .collect();
    let todo = rec.inputs.unhashed(&listed);
    let files: Vec<PathBuf> = todo.iter().map(|(p, _)| p.clone()).collect();
    let (converted, sums) = sha256_files_beside(&files, || convert_group(g, progress))?;
    rec.inputs.record(todo, sums);
    Ok(converted)
}

/// Every input file the made outputs of a group listed or read, to hash for their records.
pub(super) fn inputs_of(members: &[Pending], results: &Results) -> BTreeSet<PathBuf> {
    let mut all = BTreeSet::new();
    for (m, r) in members.iter().zip(results) {
        if let Some(r) = r.as_ref().ok().filter(|r| !r.dry_run) {
            all.extend(m.before.keys().cloned());
            all.extend(r.reads.iter().map(|(f, _)| f.clone()));
        }
    }
    // A remote input's files are recorded by identity, never hashed as their local view.
    all.retain(|f| !crate::remote::is_view(f));
    all
}
