//! Remote inputs in job files (`run`), in `convert` with several `-o` and in `delta`, against
//! the nginx Hub of `common::hub`: each output equals the same conversion of the local files
//! byte for byte (those are pinned to reference hashes by other tests), the view of a remote
//! input is laid out once for all the outputs that read it, the job's state records a remote
//! file by its address at the pinned commit, sha256 and ETag (never the view's temp path, a
//! token or a URL's query), and a rerun skips what still holds and redoes what changed.

use crate::common;

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use common::fixtures;
use common::hub::{commit_of, ok, repo, sha256_hex, tools, Hub, Repo, TOKEN};
use common::remote::tree_bytes;

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn statuses(v: &Value) -> Vec<String> {
    v["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["status"].as_str().unwrap().to_string())
        .collect()
}

/// The local conversion of `input` with `args` into `out`.
fn local(hub: &Hub, input: &Path, out: &Path, args: &[&str]) {
    let i = input.to_str().unwrap();
    ok(&hub.wp(&common::remote::convert_args(i, out, args)), i);
}

/// Panics when `text` holds the token or a temp view's path.
fn clean(text: &str, what: &str) {
    assert!(!text.contains(TOKEN), "{what} holds the token: {text}");
    assert!(
        !text.contains("weightport-remote."),
        "{what} names a view's temp path: {text}"
    );
}

/// A job of two outputs from `hf://org/llama` (a Q4_K_M GGUF, attested, and a merged
/// safetensors file): both equal the local conversions; the Hub's listing is asked once (one
/// view for both); the attestation names the files at the commit with their sha256; the state
/// records them by address, sha256 and ETag; a rerun skips both and reads no weights.
#[test]
fn a_job_file_converts_a_hub_repo_as_its_local_files_and_resumes() {
    let Some(nginx) = tools() else { return };
    let hub = Hub::start(&nginx, &[repo("llama", "good/arch/llama")]);
    let tmp = tempfile::tempdir().unwrap();
    let job = tmp.path().join("job.toml");
    std::fs::write(
        &job,
        "[[job]]\ninput = \"hf://org/llama\"\n\
         [[job.output]]\npath = \"l.gguf\"\nouttype = \"f16\"\nquant = \"Q4_K_M\"\nattest = true\n\
         [[job.output]]\npath = \"m.safetensors\"\n",
    )
    .unwrap();
    let o = hub.wp(&["--json", "run", job.to_str().unwrap()]);
    ok(&o, "run");
    let v = json_of(&o);
    assert_eq!(statuses(&v), ["made", "made"]);
    assert_eq!(v["outputs"][0]["inputs"][0], "hf://org/llama");
    clean(&String::from_utf8_lossy(&o.stdout), "--json");
    if let Some(py) = common::python_with_jsonschema() {
        let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/json/run.schema.json");
        common::validate_json(&py, &schema, &o.stdout, "run --json");
    }
    let llama = fixtures().join("good/arch/llama");
    let (lg, lm) = (
        tmp.path().join("local.gguf"),
        tmp.path().join("local.safetensors"),
    );
    local(
        &hub,
        &llama,
        &lg,
        &["--outtype", "f16", "--quant", "Q4_K_M"],
    );
    local(&hub, &llama, &lm, &[]);
    let gguf = std::fs::read(tmp.path().join("l.gguf")).unwrap();
    assert!(gguf == std::fs::read(&lg).unwrap(), "l.gguf differs");
    let st = std::fs::read(tmp.path().join("m.safetensors")).unwrap();
    assert!(st == std::fs::read(&lm).unwrap(), "m.safetensors differs");
    let listings = |log: &[String]| {
        log.iter()
            .filter(|l| l.contains("/api/models/org/llama/"))
            .count()
    };
    assert_eq!(listings(&hub.log()), 1, "{:?}", hub.log());
    // The attestation: each file at the commit, with the sha256 of the fixture's bytes.
    let commit = commit_of("llama");
    let at = tmp.path().join("l.gguf.intoto.json");
    let text = std::fs::read_to_string(&at).unwrap();
    clean(&text, "the attestation");
    let stmt: Value = serde_json::from_str(&text).unwrap();
    let materials = stmt["predicate"]["materials"].as_array().unwrap();
    for name in ["model-00001-of-00003.safetensors", "config.json"] {
        let want = sha256_hex(&std::fs::read(llama.join(name)).unwrap());
        let addr = format!("hf://org/llama@{commit}/{name}");
        let m = materials.iter().find(|m| m["name"] == addr.as_str());
        let m = m.unwrap_or_else(|| panic!("no material {addr}: {materials:?}"));
        assert_eq!(m["digest"]["sha256"], want.as_str(), "{addr}");
    }
    // The state: the weights by address at the commit, LFS sha256 and ETag.
    let state_path = tmp.path().join(".job.toml.state.json");
    let text = std::fs::read_to_string(&state_path).unwrap();
    clean(&text, "the job's state");
    let state: Value = serde_json::from_str(&text).unwrap();
    let rec = &state["outputs"][tmp.path().join("m.safetensors").to_str().unwrap()];
    let shard = "model-00002-of-00003.safetensors";
    let sha = sha256_hex(&std::fs::read(llama.join(shard)).unwrap());
    let addr = format!("hf://org/llama@{commit}/{shard}");
    let f = rec["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == addr.as_str());
    let f = f.unwrap_or_else(|| panic!("{addr} not recorded: {rec}"));
    assert_eq!(f["sha256"], sha.as_str());
    assert_eq!(f["etag"], format!("\"{sha}\"").as_str());
    assert_eq!(f["remote"], true);
    // A rerun: both skipped (their records hold), nothing rewritten, and of each weights file
    // only its first ranged read (its ETag) is asked.
    let before = hub.log().len();
    let mtime = |p: &str| {
        std::fs::metadata(tmp.path().join(p))
            .unwrap()
            .modified()
            .unwrap()
    };
    let (t1, t2) = (mtime("l.gguf"), mtime("m.safetensors"));
    let o = hub.wp(&["--json", "run", job.to_str().unwrap()]);
    ok(&o, "rerun");
    assert_eq!(statuses(&json_of(&o)), ["skipped", "skipped"]);
    assert_eq!((mtime("l.gguf"), mtime("m.safetensors")), (t1, t2));
    let log = hub.log()[before..].to_vec();
    let ranged: Vec<&String> = log.iter().filter(|l| l.contains("/lfs/")).collect();
    let shards = log.iter().filter(|l| l.contains(".safetensors")).count();
    assert!(shards >= 3, "{log:?}");
    for l in &ranged {
        assert!(
            l.contains("\"bytes=0-100000\""),
            "a rerun read more than a header: {l}"
        );
    }
}

/// `convert` with two `-o` from one `hf://` input: one view, and both outputs as the local
/// conversion's.
#[test]
fn convert_with_several_outputs_reads_a_remote_input() {
    let Some(nginx) = tools() else { return };
    let hub = Hub::start(&nginx, &[repo("hf_repo_sharded", "good/hf_repo_sharded")]);
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.safetensors"), tmp.path().join("b"));
    let spec_b = format!("{}:shard_size=10000", b.display());
    let o = hub.wp(&[
        "--json",
        "convert",
        "hf://org/hf_repo_sharded",
        "-o",
        a.to_str().unwrap(),
        "-o",
        &spec_b,
    ]);
    ok(&o, "convert -o -o");
    assert_eq!(statuses(&json_of(&o)), ["made", "made"]);
    let src = fixtures().join("good/hf_repo_sharded");
    let (la, lb) = (tmp.path().join("la.safetensors"), tmp.path().join("lb"));
    local(&hub, &src, &la, &[]);
    local(&hub, &src, &lb, &["--shard-size", "10000"]);
    assert!(tree_bytes(&a) == tree_bytes(&la), "a differs");
    assert!(tree_bytes(&b) == tree_bytes(&lb), "b differs");
    // The merged output is also what safetensors-py's save_file wrote.
    let merged = fixtures().join("expected/merged/model.safetensors");
    assert!(std::fs::read(&a).unwrap() == std::fs::read(merged).unwrap());
    let listings = hub
        .log()
        .iter()
        .filter(|l| l.contains("/api/models/org/hf_repo_sharded/"))
        .count();
    assert_eq!(listings, 1, "{:?}", hub.log());
}

/// An `https://` file with a signed URL's query as a job's input: the state and `--json` never
/// hold the query; `attest` is refused before anything is made (no published sha256); when
/// the served file changes (its ETag), the rerun makes the output again from the new bytes.
#[test]
fn a_job_redoes_an_output_whose_https_input_changed() {
    let Some(nginx) = tools() else { return };
    let hub = Hub::start(&nginx, &[]);
    let tmp = tempfile::tempdir().unwrap();
    let first = fixtures().join("good/safetensors/llama_tiny.safetensors");
    let url = hub.plain(&first);
    let served = hub.dir.path().join("root/plain/llama_tiny.safetensors");
    let signed = format!("{url}?X-Amz-Signature=secret123");
    let job = tmp.path().join("job.toml");
    let write_job = |attest: bool| {
        let extra = if attest { "attest = true\n" } else { "" };
        std::fs::write(
            &job,
            format!(
                "[[job]]\ninput = \"{signed}\"\n[[job.output]]\npath = \"o.safetensors\"\n{extra}"
            ),
        )
        .unwrap();
    };
    write_job(true);
    let o = hub.wp(&["run", job.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("has no sha256 published") && !e.contains("secret123"),
        "{e}"
    );
    assert!(!tmp.path().join("o.safetensors").exists());
    write_job(false);
    // A dry run plans from the headers: nothing written, no state.
    let o = hub.wp(&["--json", "run", "--dry-run", job.to_str().unwrap()]);
    ok(&o, "run --dry-run");
    assert_eq!(statuses(&json_of(&o)), ["planned"]);
    assert!(!tmp.path().join("o.safetensors").exists());
    assert!(!tmp.path().join(".job.toml.state.json").exists());
    let o = hub.wp(&["--json", "run", job.to_str().unwrap()]);
    ok(&o, "run");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(!out.contains("secret123"), "{out}");
    let reference = tmp.path().join("ref.safetensors");
    local(&hub, &first, &reference, &[]);
    let made = tmp.path().join("o.safetensors");
    assert!(std::fs::read(&made).unwrap() == std::fs::read(&reference).unwrap());
    let state = std::fs::read_to_string(tmp.path().join(".job.toml.state.json")).unwrap();
    assert!(!state.contains("secret123"), "{state}");
    clean(&state, "the job's state");
    assert!(state.contains(&format!("\"{url}\"")), "{state}");
    // Unchanged: skipped.
    let o = hub.wp(&["--json", "run", job.to_str().unwrap()]);
    ok(&o, "rerun");
    assert_eq!(statuses(&json_of(&o)), ["skipped"]);
    // The served file replaced (another size and time: nginx's ETag changes): made again.
    let second = fixtures().join("good/safetensors/header_order.safetensors");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::copy(&second, &served).unwrap();
    let o = hub.wp(&["--json", "run", job.to_str().unwrap()]);
    ok(&o, "run after the change");
    let v = json_of(&o);
    assert_eq!(statuses(&v), ["made"]);
    let why = v["outputs"][0]["redone_because"].as_str().unwrap();
    assert!(why.contains("a remote input file changed"), "{why}");
    let reference2 = tmp.path().join("ref2.safetensors");
    local(&hub, &second, &reference2, &[]);
    assert!(std::fs::read(&made).unwrap() == std::fs::read(&reference2).unwrap());
}

/// `delta` of a real fine-tune pair read from the Hub: the patch is the local delta's bytes, the
/// base and result sha256 are the files', and applied to a local copy of OLD it gives NEW.
#[test]
fn delta_reads_its_sides_from_the_hub() {
    let Some(nginx) = tools() else { return };
    let hub = Hub::start(
        &nginx,
        &[
            repo("ft-old", "good/edit/finetune/old"),
            repo("ft-new", "good/edit/finetune/new"),
        ],
    );
    let ft = fixtures().join("good/edit/finetune");
    let (old, new) = (
        ft.join("old/model.safetensors"),
        ft.join("new/model.safetensors"),
    );
    let tmp = tempfile::tempdir().unwrap();
    let (rp, lp) = (tmp.path().join("r.patch"), tmp.path().join("l.patch"));
    let o = hub.wp(&[
        "--json",
        "delta",
        "hf://org/ft-old/model.safetensors",
        "hf://org/ft-new/model.safetensors",
        "-o",
        rp.to_str().unwrap(),
    ]);
    ok(&o, "remote delta");
    let v = json_of(&o);
    let sha = |p: &Path| sha256_hex(&std::fs::read(p).unwrap());
    assert_eq!(v["base_sha256"], sha(&old).as_str());
    assert_eq!(v["result_sha256"], sha(&new).as_str());
    let o = hub.wp(&[
        "delta",
        old.to_str().unwrap(),
        new.to_str().unwrap(),
        "-o",
        lp.to_str().unwrap(),
    ]);
    ok(&o, "local delta");
    assert!(std::fs::read(&rp).unwrap() == std::fs::read(&lp).unwrap());
    let target = tmp.path().join("model.safetensors");
    std::fs::copy(&old, &target).unwrap();
    let o = hub.wp(&[
        "edit",
        target.to_str().unwrap(),
        "--apply",
        rp.to_str().unwrap(),
    ]);
    ok(&o, "apply");
    assert!(std::fs::read(&target).unwrap() == std::fs::read(&new).unwrap());
}

/// A delta against a remote file of another length is refused as the local one is, nothing
/// written; a missing remote side is a clear error naming it.
#[test]
fn delta_refuses_remote_sides_as_it_refuses_local_ones() {
    let Some(nginx) = tools() else { return };
    let edit = fixtures().join("good/edit");
    let hub = Hub::start(
        &nginx,
        &[
            Repo::of("base", vec![edit.join("base.safetensors")]),
            repo("ft-new", "good/edit/finetune/new"),
        ],
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("p.safetensors");
    let o = hub.wp(&[
        "delta",
        "hf://org/base/base.safetensors",
        "hf://org/ft-new/model.safetensors",
        "-o",
        out.to_str().unwrap(),
    ]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("different containers or lengths"), "{e}");
    assert!(!out.exists());
    let o = hub.wp(&[
        "delta",
        "hf://org/base/nothing.safetensors",
        "hf://org/ft-new/model.safetensors",
        "-o",
        out.to_str().unwrap(),
    ]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("hf://org/base/nothing.safetensors"), "{e}");
    assert!(!out.exists());
}

/// A job whose remote input is not on the Hub fails before anything is made, naming the
/// job file's output and the address, never the token; nothing is written.
#[test]
fn a_job_with_a_missing_remote_input_fails_naming_it() {
    let Some(nginx) = tools() else { return };
    let hub = Hub::start(&nginx, &[repo("llama", "good/arch/llama")]);
    let tmp = tempfile::tempdir().unwrap();
    let job = tmp.path().join("job.toml");
    std::fs::write(
        &job,
        "[[job]]\ninput = \"hf://org/llama\"\n[[job.output]]\npath = \"a.safetensors\"\n\
         [[job]]\ninput = \"hf://org/nothing\"\n[[job.output]]\npath = \"b.safetensors\"\n",
    )
    .unwrap();
    let o = hub.wp(&["run", job.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{e}");
    assert!(e.contains("hf://org/nothing") && !e.contains(TOKEN), "{e}");
    assert!(e.contains("job 2 output 1"), "{e}");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

/// `plan` of `hf://org/hf_repo_sharded` (revision `main`): the plan file names the repo at
/// the commit `main` resolved to and records each file by address, sha256 and ETag (no token,
/// no temp path); every unit and `finish` read that commit (never `main` again), and the
/// output is the local conversion's bytes (and safetensors-py's save_file's).
#[test]
fn plan_units_and_finish_read_the_commit_the_plan_pinned() {
    let Some(nginx) = tools() else { return };
    let hub = Hub::start(&nginx, &[repo("hf_repo_sharded", "good/hf_repo_sharded")]);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.safetensors");
    let o = hub.wp(&[
        "--json",
        "plan",
        "hf://org/hf_repo_sharded",
        "-o",
        out.to_str().unwrap(),
        "--units",
        "2",
    ]);
    ok(&o, "plan");
    let v = json_of(&o);
    let plan_path = v["plan"].as_str().unwrap().to_string();
    let text = std::fs::read_to_string(&plan_path).unwrap();
    clean(&text, "the plan file");
    if let Some(py) = common::python_with_jsonschema() {
        let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/json/plan-file.schema.json");
        common::validate_json(&py, &schema, text.as_bytes(), "the plan file");
    }
    let commit = commit_of("hf_repo_sharded");
    let plan: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        plan["inputs"][0],
        format!("hf://org/hf_repo_sharded@{commit}/").as_str()
    );
    let src = fixtures().join("good/hf_repo_sharded");
    let shard = "model-00001-of-00003.safetensors";
    let sha = sha256_hex(&std::fs::read(src.join(shard)).unwrap());
    let addr = format!("hf://org/hf_repo_sharded@{commit}/{shard}");
    let ids = plan["input_files"].as_array().unwrap();
    let id = ids.iter().find(|f| f["path"] == addr.as_str());
    let id = id.unwrap_or_else(|| panic!("{addr} not in the plan: {ids:?}"));
    assert_eq!(id["sha256"], sha.as_str());
    assert_eq!(id["etag"], format!("\"{sha}\"").as_str());
    assert_eq!(id["hashed"], "remote");
    let units = v["units"].as_array().unwrap().len();
    assert!(units >= 2, "{v}");
    let before = hub.log().len();
    for i in 0..units {
        ok(
            &hub.wp(&["unit", &plan_path, "--index", &i.to_string()]),
            "unit",
        );
    }
    ok(&hub.wp(&["finish", &plan_path]), "finish");
    let log = hub.log()[before..].to_vec();
    assert!(
        log.iter().all(|l| !l.contains("/main")),
        "a unit asked for main: {log:?}"
    );
    assert!(
        log.iter()
            .any(|l| l.contains(&format!("/revision/{commit}"))),
        "{log:?}"
    );
    let local_out = tmp.path().join("local.safetensors");
    local(&hub, &src, &local_out, &[]);
    let made = std::fs::read(&out).unwrap();
    assert!(
        made == std::fs::read(&local_out).unwrap(),
        "differs from local"
    );
    let merged = fixtures().join("expected/merged/model.safetensors");
    assert!(made == std::fs::read(merged).unwrap());
}

/// A plan of an `https://` file: a unit refuses to run when the served file's ETag is no
/// longer the one planned (same size, other bytes), and nothing of the output appears; a
/// signed URL (with a query) is refused by `plan` without showing the query.
#[test]
fn a_unit_refuses_a_remote_file_whose_etag_changed_since_the_plan() {
    let Some(nginx) = tools() else { return };
    let hub = Hub::start(&nginx, &[]);
    let tmp = tempfile::tempdir().unwrap();
    let file = fixtures().join("good/safetensors/llama_tiny.safetensors");
    let url = hub.plain(&file);
    let out = tmp.path().join("o.safetensors");
    let signed = format!("{url}?X-Amz-Signature=secret123");
    let o = hub.wp(&["plan", &signed, "-o", out.to_str().unwrap(), "--units", "2"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("never holds a URL's query") && !e.contains("secret123"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    let o = hub.wp(&[
        "--json",
        "plan",
        &url,
        "-o",
        out.to_str().unwrap(),
        "--units",
        "2",
    ]);
    ok(&o, "plan");
    let plan_path = json_of(&o)["plan"].as_str().unwrap().to_string();
    // The served file: same length, its last byte changed, a later time (nginx's ETag).
    let served = hub.dir.path().join("root/plain/llama_tiny.safetensors");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(&served, &bytes).unwrap();
    let o = hub.wp(&["unit", &plan_path, "--index", "0"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{e}");
    assert!(
        e.contains("changed since the plan") && e.contains("etag"),
        "{e}"
    );
    let o = hub.wp(&["finish", &plan_path]);
    assert_ne!(o.status.code(), Some(0));
    assert!(!out.exists());
}

/// Bytes nginx sent for the LFS objects in the log lines `log`.
fn lfs_bytes(log: &[String]) -> u64 {
    log.iter()
        .filter(|l| l.contains("/lfs/"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// Three units of a 6 MiB safetensors file on the Hub (three 2 MiB tensors): each unit fetches
/// its own tensor and the first 100 KB read (exact ranges, no read-ahead), not the file;
/// `finish` fetches the header only; the output is the local conversion's.
#[test]
fn a_unit_fetches_about_its_share_of_a_remote_file() {
    let Some(nginx) = tools() else { return };
    let scratch = tempfile::tempdir().unwrap();
    let (dir, bytes) = crate::remote_ahead::big_repo(scratch.path());
    let hub = Hub::start(&nginx, &[common::hub::repo_at("big", &dir)]);
    let out = scratch.path().join("o.safetensors");
    let o = hub.wp(&[
        "--json",
        "plan",
        "hf://org/big",
        "-o",
        out.to_str().unwrap(),
        "--units",
        "3",
    ]);
    ok(&o, "plan");
    let v = json_of(&o);
    let plan = v["plan"].as_str().unwrap().to_string();
    assert_eq!(v["units"].as_array().unwrap().len(), 3, "{v}");
    let mut total = 0u64;
    for i in 0..3 {
        let before = hub.log().len();
        ok(&hub.wp(&["unit", &plan, "--index", &i.to_string()]), "unit");
        let got = lfs_bytes(&hub.log()[before..]);
        assert!(
            got <= (2 << 20) + (256 << 10),
            "unit {i} fetched {got} bytes"
        );
        total += got;
    }
    assert!(total < bytes.len() as u64 + (512 << 10), "{total}");
    let before = hub.log().len();
    ok(&hub.wp(&["finish", &plan]), "finish");
    let got = lfs_bytes(&hub.log()[before..]);
    assert!(got <= 256 << 10, "finish fetched {got} bytes");
    let local_out = scratch.path().join("l.safetensors");
    local(&hub, &dir, &local_out, &[]);
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&local_out).unwrap());
}

/// A job whose input names the first part of a gguf-split set on the Hub: the output is the
/// merged GGUF (llama.cpp's), the state records the other parts it read (not in the job's
/// listing of one file), and a rerun finds them in the view by address and skips the output.
#[test]
fn a_job_reading_a_split_set_beyond_its_listing_resumes() {
    let Some(nginx) = tools() else { return };
    let hub = Hub::start(&nginx, &[repo("gguf", "good/gguf")]);
    let tmp = tempfile::tempdir().unwrap();
    let job = tmp.path().join("job.toml");
    std::fs::write(
        &job,
        "[[job]]\ninput = \"hf://org/gguf/c_split-00001-of-00003.gguf\"\n\
         [[job.output]]\npath = \"s.gguf\"\n",
    )
    .unwrap();
    ok(&hub.wp(&["run", job.to_str().unwrap()]), "run");
    let want = std::fs::read(fixtures().join("good/gguf/c_quant_q4_k_m.gguf")).unwrap();
    assert!(std::fs::read(tmp.path().join("s.gguf")).unwrap() == want);
    let state = std::fs::read_to_string(tmp.path().join(".job.toml.state.json")).unwrap();
    let third = format!(
        "hf://org/gguf@{}/c_split-00003-of-00003.gguf",
        commit_of("gguf")
    );
    assert!(state.contains(&third), "{state}");
    let o = hub.wp(&["--json", "run", job.to_str().unwrap()]);
    ok(&o, "rerun");
    let v = json_of(&o);
    assert_eq!(statuses(&v), ["skipped"], "{v}");
}
