//! `s3://` inputs against a real S3 server: s3s-fs 0.14.1 (the s3s crate's own server, which
//! checks SigV4 signatures), started here on 127.0.0.1 over a temp root whose directories are
//! buckets and whose files are objects, copied from the fixtures. Every conversion from `s3://`
//! is compared byte for byte with the same conversion of the local files (and with the
//! reference's file where one is committed). Request counts are read from s3s-fs's own log (one
//! `req:` line per request at `RUST_LOG=s3s::service=debug`).
//!
//! `.ci/run` installs s3s-fs (`cargo install s3s-fs --version 0.14.1 --locked --features binary`)
//! and says why when it could not (`WEIGHTPORT_NO_S3S`); in CI without either, the tests fail.
//! Outside CI without s3s-fs they say so and pass without checking anything.

use crate::common;
use common::fault_proxy;
use common::fixtures;
use common::remote::{convert_args, free_port, names_in, ok, same_as_local};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const KEY_ID: &str = "WPTESTKEYID0123456789";
const SECRET: &str = "wp/test+Secret0123456789abcdefghijklmnopq";

/// In CI s3s-fs may still be building in the background: `.ci/run` names its log
/// (`WEIGHTPORT_S3S_PENDING`), whose last line says `s3s-fs built …` or `s3s-fs failed: WHY`.
/// Waits for that line (at most 20 minutes) and returns the reason it failed, if it did.
fn wait_for_background_build() -> Option<String> {
    let log = std::env::var_os("WEIGHTPORT_S3S_PENDING")?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20 * 60);
    while std::time::Instant::now() < deadline {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(l) = text.lines().find(|l| l.starts_with("s3s-fs ")) {
            return l.strip_prefix("s3s-fs failed: ").map(str::to_string);
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("s3s-fs's background build did not finish in 20 minutes");
}

/// s3s-fs: `WEIGHTPORT_S3S_FS`, else `$CARGO_HOME/bin` or `~/.cargo/bin`; or why not.
fn s3s_fs() -> Option<PathBuf> {
    if let Some(why) = wait_for_background_build() {
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let found = std::env::var_os("WEIGHTPORT_S3S_FS")
        .map(PathBuf::from)
        .into_iter()
        .chain(home.map(|h| h.join("bin/s3s-fs")))
        .find(|p| p.is_file());
    if found.is_some() {
        return found;
    }
    if let Ok(why) = std::env::var("WEIGHTPORT_NO_S3S") {
        eprintln!("SKIPPED: {why}");
        return None;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "s3s-fs missing in CI (.ci/run installs it, or says why in WEIGHTPORT_NO_S3S)"
    );
    eprintln!("note: s3s-fs not installed; the s3:// tests check nothing");
    None
}

/// A running s3s-fs over a root of buckets; stopped by its pid on drop.
struct Server {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Copies the files of `fixtures/FROM` (not its subdirectories) to `root/TO`.
fn put(root: &Path, to: &str, from: &str) {
    let dest = root.join(to);
    std::fs::create_dir_all(&dest).unwrap();
    let src = fixtures().join(from);
    if src.is_file() {
        std::fs::copy(&src, dest.join(src.file_name().unwrap())).unwrap();
        return;
    }
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, dest.join(p.file_name().unwrap())).unwrap();
        }
    }
}

impl Server {
    /// The bucket `models`: the fixtures' repos under prefixes of their local directories' names.
    fn start(bin: &Path) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        for (to, from) in [
            ("models/hf_repo_sharded", "good/hf_repo_sharded"),
            ("models/bin_repo", "good/pickle/bin_repo"),
            ("models/llama", "good/arch/llama"),
            ("models/npz", "good/npz"),
            ("models/gguf", "good/gguf"),
            ("models", "good/safetensors/llama_tiny.safetensors"),
        ] {
            put(&root, to, from);
        }
        // A key with a space and a `+`, and an empty object beside it.
        let odd = root.join("models/odd");
        std::fs::create_dir_all(&odd).unwrap();
        let st = fixtures().join("good/safetensors/llama_tiny.safetensors");
        std::fs::copy(st, odd.join("my model+1.safetensors")).unwrap();
        std::fs::write(odd.join(".gitkeep"), b"").unwrap();
        // More keys than a listing page holds (1,000): the object asked is on the second page.
        let many = root.join("models/many");
        std::fs::create_dir_all(&many).unwrap();
        for i in 0..1000 {
            std::fs::write(many.join(format!("a{i:04}.txt")), b"x").unwrap();
        }
        std::fs::copy(
            fixtures().join("good/safetensors/llama_tiny.safetensors"),
            many.join("z.safetensors"),
        )
        .unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("s3s.log")).unwrap();
        let child = Command::new(bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", KEY_ID, "--secret-key", SECRET])
            .arg(&root)
            .env("RUST_LOG", "s3s::service=debug")
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("start s3s-fs");
        let s = Server { child, dir, port };
        for _ in 0..400 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return s;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        panic!("s3s-fs did not start on port {port}");
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `weightport ARGS` with this server as `AWS_ENDPOINT_URL`, its credentials.
    fn wp(&self, args: &[&str]) -> Output {
        self.wp_with(&self.endpoint(), SECRET, args)
    }

    /// `weightport ARGS` against `endpoint` (a proxy's) with `secret`, a 1 s stall timeout.
    fn wp_with(&self, endpoint: &str, secret: &str, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_weightport"))
            .args(args)
            .env("WEIGHTPORT_HTTP_TIMEOUT", "1")
            .env("AWS_ENDPOINT_URL", endpoint)
            .env("AWS_ACCESS_KEY_ID", KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_REGION", "us-east-1")
            .env("HOME", self.dir.path())
            .env_remove("AWS_ENDPOINT_URL_S3")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            // A CA file another test set in this process and removed since.
            .env_remove("SSL_CERT_FILE")
            .output()
            .expect("run weightport")
    }

    /// The requests s3s-fs logged so far (one line each: method, URI, headers).
    fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("s3s.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("s3s::service: req: Request"))
            .map(str::to_string)
            .collect()
    }

    fn object(&self, key: &str) -> PathBuf {
        self.dir.path().join("root/models").join(key)
    }
}

#[test]
fn s3_conversions_equal_the_local_ones() {
    let Some(bin) = s3s_fs() else { return };
    let s = Server::start(&bin);
    let f = fixtures();
    let tmp = s.dir.path().join("out");
    let wp = |a: &[&str]| s.wp(a);
    // A safetensors repo (a prefix), merged: also what safetensors-py's save_file wrote.
    let merged = same_as_local(
        &wp,
        &tmp,
        "s3://models/hf_repo_sharded/",
        &f.join("good/hf_repo_sharded"),
        "m.safetensors",
        &[],
    );
    assert!(
        std::fs::read(merged).unwrap()
            == std::fs::read(f.join("expected/merged/model.safetensors")).unwrap()
    );
    // The same prefix named without its `/`, resharded into a repo (companions copied).
    same_as_local(
        &wp,
        &tmp,
        "s3://models/hf_repo_sharded",
        &f.join("good/hf_repo_sharded"),
        "repo",
        &["--shard-size", "10000"],
    );
    // One safetensors object at the bucket's root.
    same_as_local(
        &wp,
        &tmp,
        "s3://models/llama_tiny.safetensors",
        &f.join("good/safetensors/llama_tiny.safetensors"),
        "one.safetensors",
        &[],
    );
    // A .bin repo (ZIP records read by ranges).
    same_as_local(
        &wp,
        &tmp,
        "s3://models/bin_repo/",
        &f.join("good/pickle/bin_repo"),
        "b.safetensors",
        &[],
    );
    // An HF release to a Q4_K_M GGUF (config, tokenizer and weights from the bucket).
    same_as_local(
        &wp,
        &tmp,
        "s3://models/llama/",
        &f.join("good/arch/llama"),
        "l.gguf",
        &["--outtype", "f16", "--quant", "Q4_K_M"],
    );
    // An npz archive of deflated members, and a gguf-split set named by its first part.
    same_as_local(
        &wp,
        &tmp,
        "s3://models/npz/dtypes_compressed.npz",
        &f.join("good/npz/dtypes_compressed.npz"),
        "n.safetensors",
        &[],
    );
    let split = same_as_local(
        &wp,
        &tmp,
        "s3://models/gguf/c_split-00001-of-00003.gguf",
        &f.join("good/gguf/c_split-00001-of-00003.gguf"),
        "s.gguf",
        &[],
    );
    assert!(
        std::fs::read(split).unwrap()
            == std::fs::read(f.join("good/gguf/c_quant_q4_k_m.gguf")).unwrap()
    );
    // Every object read was read by ranges, every request signed (s3s-fs checked each).
    let reqs = s.requests();
    assert!(
        reqs.iter().all(|r| r.contains("X-Amz-Signature=")),
        "{reqs:?}"
    );
    assert!(
        reqs.iter()
            .filter(|r| !r.contains("list-type=2"))
            .all(|r| r.contains("\"range\": \"bytes=")),
        "{reqs:?}"
    );
}

/// A key with a space and a `+` (s3s-fs echoes `encoding-type=url` without encoding keys, so
/// asking for it read the `+` as a space: "no such key") and an empty object in a prefix (a
/// range of it is not satisfiable: 416) read as the local directory does.
#[test]
fn odd_keys_and_empty_objects_read_as_local_files() {
    let Some(bin) = s3s_fs() else { return };
    let s = Server::start(&bin);
    let tmp = s.dir.path().join("out");
    let wp = |a: &[&str]| s.wp(a);
    let local = s.object("odd");
    same_as_local(&wp, &tmp, "s3://models/odd/", &local, "a.safetensors", &[]);
    same_as_local(
        &wp,
        &tmp,
        "s3://models/odd/my model+1.safetensors",
        &local.join("my model+1.safetensors"),
        "b.safetensors",
        &[],
    );
}

/// A listing of more than one page (continuation token): the object on the second page is
/// found; `verify` of a prefix against the local repo, and of an object, pass.
#[test]
fn listings_of_several_pages_and_verify() {
    let Some(bin) = s3s_fs() else { return };
    let s = Server::start(&bin);
    let out = s.wp(&["inspect", "--json", "s3://models/many/z.safetensors"]);
    ok(&out, "inspect");
    let lists: Vec<String> = s
        .requests()
        .into_iter()
        .filter(|r| r.contains("list-type=2"))
        .collect();
    assert_eq!(lists.len(), 2, "{lists:?}");
    assert!(lists[1].contains("continuation-token="), "{}", lists[1]);
    let repo = fixtures().join("good/hf_repo_sharded");
    let out = s.wp(&[
        "verify",
        "s3://models/hf_repo_sharded/",
        "--against",
        repo.to_str().unwrap(),
    ]);
    ok(&out, "verify --against");
    let one = fixtures().join("good/safetensors/llama_tiny.safetensors");
    ok(
        &s.wp(&[
            "verify",
            one.to_str().unwrap(),
            "--against",
            "s3://models/many/z.safetensors",
        ]),
        "verify against s3",
    );
    // And it compares: another source is a difference.
    let out = s.wp(&[
        "verify",
        "s3://models/many/z.safetensors",
        "--against",
        repo.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

/// Credentials from the shared credentials file, as the AWS CLI reads them: the profile
/// `AWS_PROFILE` names (else `default`), from `AWS_SHARED_CREDENTIALS_FILE` (else
/// `~/.aws/credentials`); the environment's pair wins over it; a profile named but absent is a
/// usage error that names it and no secret.
#[test]
fn credentials_from_the_shared_credentials_file() {
    let Some(bin) = s3s_fs() else { return };
    let s = Server::start(&bin);
    let home = s.dir.path().join("home");
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    let file = format!(
        "# a comment\n[default]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = wrong\n\n\
         [wp]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\n"
    );
    std::fs::write(home.join(".aws/credentials"), file).unwrap();
    let other = s.dir.path().join("other-credentials");
    std::fs::write(
        &other,
        format!("[default]\naws_access_key_id={KEY_ID}\naws_secret_access_key={SECRET}\n"),
    )
    .unwrap();
    let run = |env: &[(&str, &str)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weightport"));
        c.args(["inspect", "s3://models/llama_tiny.safetensors"])
            .env("AWS_ENDPOINT_URL", s.endpoint())
            .env("HOME", &home);
        for v in [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_PROFILE",
            "AWS_SHARED_CREDENTIALS_FILE",
            "AWS_CONFIG_FILE",
            "SSL_CERT_FILE",
        ] {
            c.env_remove(v);
        }
        c.envs(env.iter().copied()).output().unwrap()
    };
    ok(&run(&[("AWS_PROFILE", "wp")]), "AWS_PROFILE=wp");
    let out = run(&[]);
    let t = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("SignatureDoesNotMatch"),
        "the default profile's wrong secret: {t}"
    );
    ok(
        &run(&[
            ("AWS_ACCESS_KEY_ID", KEY_ID),
            ("AWS_SECRET_ACCESS_KEY", SECRET),
        ]),
        "the environment's pair over the default profile",
    );
    ok(
        &run(&[("AWS_SHARED_CREDENTIALS_FILE", other.to_str().unwrap())]),
        "AWS_SHARED_CREDENTIALS_FILE",
    );
    let out = run(&[("AWS_PROFILE", "nope")]);
    let t = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("AWS_PROFILE nope"), "{t}");
    assert!(!t.contains(SECRET), "{t}");
}

/// `inspect` of a sharded safetensors repo: one listing, and per shard one ranged read (the
/// first 100,001 bytes hold the header).
#[test]
fn inspect_reads_each_safetensors_header_with_one_request() {
    let Some(bin) = s3s_fs() else { return };
    let s = Server::start(&bin);
    let out = s.wp(&["inspect", "--json", "s3://models/hf_repo_sharded/"]);
    common::remote::inspects_as_local(&out, "good/hf_repo_sharded");
    let reqs = s.requests();
    let lists = reqs.iter().filter(|r| r.contains("list-type=2")).count();
    assert_eq!(lists, 1, "{reqs:?}");
    for i in 1..=3 {
        let name = format!("model-0000{i}-of-00003.safetensors?");
        let reads: Vec<&String> = reqs.iter().filter(|r| r.contains(&name)).collect();
        assert_eq!(reads.len(), 1, "{name}: {reqs:?}");
        assert!(
            reads[0].contains("\"range\": \"bytes=0-100000\""),
            "{}",
            reads[0]
        );
    }
}

/// Wrong credentials, a missing bucket and a missing key: clear errors naming the address,
/// never the secret (nor a signature), a non-zero exit, and nothing written.
#[test]
fn wrong_credentials_and_missing_objects_are_clear_errors() {
    let Some(bin) = s3s_fs() else { return };
    let s = Server::start(&bin);
    let dir = s.dir.path().join("err");
    std::fs::create_dir_all(&dir).unwrap();
    let o = dir.join("o.safetensors");
    let text = |out: &Output| {
        String::from_utf8_lossy(&[&out.stdout[..], &out.stderr].concat()).into_owned()
    };
    let addr = "s3://models/hf_repo_sharded/";
    let out = s.wp_with(
        &s.endpoint(),
        "not-the-secret",
        &convert_args(addr, &o, &["--json"]),
    );
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains(addr) && t.contains("403") && t.contains("SignatureDoesNotMatch"),
        "{t}"
    );
    assert!(
        t.contains("check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
        "{t}"
    );
    for secret in [
        SECRET,
        "not-the-secret",
        "X-Amz-Signature",
        "X-Amz-Credential",
    ] {
        assert!(!t.contains(secret), "{secret}: {t}");
    }
    assert!(names_in(&dir).is_empty(), "{:?}", names_in(&dir));
    // Without credentials the requests are not signed, and the refusal says so.
    let out = Command::new(env!("CARGO_BIN_EXE_weightport"))
        .args(["inspect", addr])
        .env("AWS_ENDPOINT_URL", s.endpoint())
        .env("HOME", s.dir.path())
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("SSL_CERT_FILE")
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("the request was not signed"), "{t}");
    for (arg, code, want) in [
        ("s3://nobucket/x/", 1, "NoSuchBucket"),
        (
            "s3://models/nothing.safetensors",
            2,
            "no such key or prefix",
        ),
        ("s3://models/nothing/", 2, "no objects under this prefix"),
        ("s3://models/../etc/", 2, "'.' or '..'"),
    ] {
        let out = s.wp(&convert_args(arg, &o, &[]));
        let t = text(&out);
        assert_eq!(out.status.code(), Some(code), "{arg}: {t}");
        assert!(t.contains(want), "{arg}: {t}");
        assert!(!t.contains(SECRET), "{arg}: {t}");
    }
    assert!(names_in(&dir).is_empty(), "{:?}", names_in(&dir));
}

/// An object rewritten on the server after it was opened (s3s-fs's ETag is the MD5 of the
/// bytes; it ignores `If-Match`): the next read fails with "input changed while reading".
#[test]
fn an_object_changed_mid_read_is_detected() {
    let Some(bin) = s3s_fs() else { return };
    let s = Server::start(&bin);
    let key = "llama/model-00001-of-00003.safetensors";
    let bytes = std::fs::read(s.object(key)).unwrap();
    assert!(bytes.len() > 100_001);
    let _env = common::remote::IN_PROCESS_ENV.lock();
    // The plain-http client is made now, with the roots of no SSL_CERT_FILE (another test's).
    std::env::remove_var("SSL_CERT_FILE");
    std::env::set_var("AWS_ENDPOINT_URL", s.endpoint());
    std::env::set_var("AWS_ACCESS_KEY_ID", KEY_ID);
    std::env::set_var("AWS_SECRET_ACCESS_KEY", SECRET);
    std::env::remove_var("AWS_ENDPOINT_URL_S3");
    std::env::remove_var("AWS_SESSION_TOKEN");
    let input = weightport_remote::open("s3://models/llama/").unwrap();
    use weightport_core::Storage;
    let src = weightport_remote::RemoteFiles
        .open(&input.path.join("model-00001-of-00003.safetensors"), "")
        .unwrap();
    let mut head = vec![0u8; 8];
    src.read_at(0, &mut head).unwrap();
    let mut other = bytes.clone();
    let last = other.len() - 1;
    other[last] ^= 0xff;
    std::fs::write(s.object(key), &other).unwrap();
    let mut tail = vec![0u8; 16];
    let err = src
        .read_at(bytes.len() as u64 - 16, &mut tail)
        .unwrap_err()
        .to_string();
    assert!(err.contains("input changed while reading"), "{err}");
    assert!(!err.contains(SECRET) && !err.contains("X-Amz-"), "{err}");
}

/// A proxy between weightport and s3s-fs drops connections, answers 500 and 503, cuts bodies
/// and stalls past the 1 s timeout on 30% of requests (the listings' and the ranges' alike):
/// each conversion equals the local one, or fails after the retry budget with nothing written.
#[test]
fn faults_on_the_way_give_the_local_bytes_or_a_clear_error() {
    let Some(bin) = s3s_fs() else { return };
    let s = Server::start(&bin);
    let port = free_port();
    let mode = fault_proxy::Mode::Random {
        seed: 0x5335_2026,
        percent: 30,
    };
    let proxy = fault_proxy::FaultProxy::start_plain(port, s.port, mode);
    let front = format!("http://127.0.0.1:{port}");
    common::remote::through_faults(
        s.dir.path(),
        &|name| format!("s3://models/{name}/"),
        &|a| s.wp(a),
        &|a| s.wp_with(&front, SECRET, a),
        &proxy,
    );
}

/// A job file, a plan and its units with an `s3://` prefix: the outputs equal the local
/// conversion (and safetensors-py's save_file); the job's state and the plan file record each
/// object by address and ETag, never the secret or a signature; a rerun skips the unchanged
/// output, and an object rewritten with the same length (another MD5 ETag) makes it again from
/// the new bytes.
#[test]
fn jobs_and_plans_record_objects_by_etag() {
    let Some(bin) = s3s_fs() else { return };
    let s = Server::start(&bin);
    let tmp = tempfile::tempdir().unwrap();
    let job = tmp.path().join("job.toml");
    std::fs::write(
        &job,
        "[[job]]\ninput = \"s3://models/hf_repo_sharded/\"\n[[job.output]]\npath = \"m.safetensors\"\n",
    )
    .unwrap();
    let merged = std::fs::read(fixtures().join("expected/merged/model.safetensors")).unwrap();
    let made = tmp.path().join("m.safetensors");
    ok(&s.wp(&["run", job.to_str().unwrap()]), "run");
    assert!(std::fs::read(&made).unwrap() == merged);
    let state_path = tmp.path().join(".job.toml.state.json");
    let state = std::fs::read_to_string(&state_path).unwrap();
    for bad in [SECRET, "X-Amz-", "weightport-remote."] {
        assert!(!state.contains(bad), "{bad} in the state: {state}");
    }
    let key = "hf_repo_sharded/model-00002-of-00003.safetensors";
    assert!(state.contains(&format!("\"s3://models/{key}\"")), "{state}");
    assert!(state.contains("\"etag\""), "{state}");
    let o = s.wp(&["--json", "run", job.to_str().unwrap()]);
    ok(&o, "rerun");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["outputs"][0]["status"], "skipped", "{v}");
    // Same length, its last byte (tensor data) changed: another ETag, the output made again.
    let mut bytes = std::fs::read(s.object(key)).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(s.object(key), &bytes).unwrap();
    let o = s.wp(&["--json", "run", job.to_str().unwrap()]);
    ok(&o, "run after the change");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["outputs"][0]["status"], "made", "{v}");
    let why = v["outputs"][0]["redone_because"].as_str().unwrap();
    assert!(why.contains("a remote input file changed"), "{why}");
    let local = tmp.path().join("local.safetensors");
    let dir = s.object("hf_repo_sharded");
    ok(
        &s.wp(&convert_args(dir.to_str().unwrap(), &local, &[])),
        "local",
    );
    assert!(std::fs::read(&made).unwrap() == std::fs::read(&local).unwrap());
    // A plan, two units and finish: the same bytes as the local conversion now.
    let out = tmp.path().join("p.safetensors");
    let o = s.wp(&[
        "--json",
        "plan",
        "s3://models/hf_repo_sharded/",
        "-o",
        out.to_str().unwrap(),
        "--units",
        "2",
    ]);
    ok(&o, "plan");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let plan = v["plan"].as_str().unwrap().to_string();
    let text = std::fs::read_to_string(&plan).unwrap();
    for bad in [SECRET, "X-Amz-", "weightport-remote."] {
        assert!(!text.contains(bad), "{bad} in the plan: {text}");
    }
    for i in 0..v["units"].as_array().unwrap().len() {
        ok(&s.wp(&["unit", &plan, "--index", &i.to_string()]), "unit");
    }
    ok(&s.wp(&["finish", &plan]), "finish");
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&local).unwrap());
}
