//! Remote inputs against a real nginx (Debian's), started here on loopback over HTTPS with a CA
//! made here (`SSL_CERT_FILE`): it serves a Hub-layout tree built from the fixtures, as the Hub
//! does: the model API's file list (`/api/models/ORG/NAME/revision/REV`), `/resolve/` answering
//! 302 to an `/lfs/` location on another host (127.0.0.2) with `X-Repo-Commit`,
//! `X-Linked-Etag` and `X-Linked-Size`, small files answered directly, ranges as 206. The
//! `/resolve/` and API locations answer 401 without the token, `/lfs/` answers 403 *with* one
//! (the token must never reach another host). Every conversion from `hf://` is compared byte
//! for byte with the same conversion of the local files (and with the reference's file where
//! one is committed). Request counts are read from nginx's access log.
//!
//! nginx is installed by `.ci/run` (apt); outside CI, without nginx or openssl, the tests say
//! so and pass without checking anything.

use crate::common;

use std::process::Command;

use common::fault_proxy;
use common::fixtures;
use common::hub::{repo, sha256_hex, tools, Hub, TOKEN};
use common::remote::{free_port, names_in};

#[test]
fn hub_repos_convert_as_their_local_files_do() {
    let Some(nginx) = tools() else { return };
    let hub = Hub::start(
        &nginx,
        &[
            repo("hf_repo_sharded", "good/hf_repo_sharded"),
            repo("bin_repo", "good/pickle/bin_repo"),
            repo("llama", "good/arch/llama"),
            repo("npz", "good/npz"),
            repo("gguf", "good/gguf"),
        ],
    );
    let f = fixtures();
    // A safetensors repo, merged: also what safetensors-py's save_file wrote.
    let merged = hub.same_as_local(
        "hf://org/hf_repo_sharded",
        &f.join("good/hf_repo_sharded"),
        "m.safetensors",
        &[],
    );
    assert!(
        std::fs::read(merged).unwrap()
            == std::fs::read(f.join("expected/merged/model.safetensors")).unwrap()
    );
    // And resharded into a repo (its companions copied from the Hub).
    hub.same_as_local(
        "hf://org/hf_repo_sharded@main",
        &f.join("good/hf_repo_sharded"),
        "repo",
        &["--shard-size", "10000"],
    );
    // A .bin repo (ZIP records read by ranges).
    hub.same_as_local(
        "hf://org/bin_repo",
        &f.join("good/pickle/bin_repo"),
        "b.safetensors",
        &[],
    );
    // An HF release to a Q4_K_M GGUF (config, tokenizer and weights from the Hub).
    hub.same_as_local(
        "hf://org/llama",
        &f.join("good/arch/llama"),
        "l.gguf",
        &["--outtype", "f16", "--quant", "Q4_K_M"],
    );
    // An npz archive of deflated members, and a gguf-split set named by its first part.
    hub.same_as_local(
        "hf://org/npz/dtypes_compressed.npz",
        &f.join("good/npz/dtypes_compressed.npz"),
        "n.safetensors",
        &[],
    );
    let split = hub.same_as_local(
        "hf://org/gguf/c_split-00001-of-00003.gguf",
        &f.join("good/gguf/c_split-00001-of-00003.gguf"),
        "s.gguf",
        &[],
    );
    assert!(
        std::fs::read(split).unwrap()
            == std::fs::read(f.join("good/gguf/c_quant_q4_k_m.gguf")).unwrap()
    );
    // A plain https:// file.
    let st = f.join("good/safetensors/llama_tiny.safetensors");
    let url = hub.plain(&st);
    hub.same_as_local(&url, &st, "p.safetensors", &[]);
    // No token went to the LFS host (it answers 403 to one), and every LFS read was a range.
    let log = hub.log();
    assert!(log.iter().all(|l| !l.contains(" 403 ")), "{log:?}");
    assert!(
        log.iter()
            .filter(|l| l.contains("/lfs/"))
            .all(|l| l.contains(" 206 ")),
        "{log:?}"
    );
}

/// `inspect` of a sharded safetensors repo: per shard one `/resolve/` (the 302) and one ranged
/// read of the LFS object, whose first 100,001 bytes hold the header.
#[test]
fn inspect_reads_each_safetensors_header_with_one_ranged_request() {
    let Some(nginx) = tools() else { return };
    let r = repo("hf_repo_sharded", "good/hf_repo_sharded");
    let shas: Vec<(String, String)> = r
        .files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into(),
                sha256_hex(&std::fs::read(p).unwrap()),
            )
        })
        .collect();
    let hub = Hub::start(&nginx, &[r]);
    let out = hub.wp(&["inspect", "--json", "hf://org/hf_repo_sharded"]);
    common::remote::inspects_as_local(&out, "good/hf_repo_sharded");
    let log = hub.log();
    assert_eq!(shas.len(), 3);
    for (name, sha) in &shas {
        let resolves = log
            .iter()
            .filter(|l| l.contains("/resolve/") && l.contains(name.as_str()))
            .count();
        let reads: Vec<&String> = log
            .iter()
            .filter(|l| l.contains(&format!("/lfs/{sha}")))
            .collect();
        assert_eq!(resolves, 1, "{name}: {log:?}");
        assert_eq!(reads.len(), 1, "{name}: {log:?}");
        assert!(reads[0].contains("\"bytes=0-100000\""), "{}", reads[0]);
    }
}

/// A server that ignores `Range` (nginx's `max_ranges 0`: 200 with the whole file) is refused
/// with a message saying so, never misread; plain http is refused.
#[test]
fn a_server_ignoring_range_is_refused() {
    let Some(nginx) = tools() else { return };
    let hub = Hub::start(&nginx, &[]);
    let big = fixtures().join("good/arch/llama/model-00001-of-00003.safetensors");
    assert!(std::fs::metadata(&big).unwrap().len() > 100_001);
    let url = hub.plain(&big).replace("/plain/", "/norange/");
    let out = hub.wp(&["inspect", &url]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("ignored the Range request"), "{err}");
    let out = hub.wp(&["inspect", &url.replace("https://", "http://")]);
    assert_eq!(out.status.code(), Some(2));
    // Stopped, nginx leaves no worker listening behind.
    let port = hub.port;
    drop(hub);
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}

/// The token is never in a message or `--json`: a missing repo and a wrong revision fail with
/// the server's status, naming the address only.
#[test]
fn errors_name_the_address_never_the_token() {
    let Some(nginx) = tools() else { return };
    let hub = Hub::start(&nginx, &[repo("hf_repo_sharded", "good/hf_repo_sharded")]);
    for arg in [
        "hf://org/nothing",
        "hf://org/hf_repo_sharded@v9",
        "hf://org/hf_repo_sharded/nope.safetensors",
    ] {
        let out = hub.wp(&["inspect", "--json", arg]);
        assert_ne!(out.status.code(), Some(0), "{arg}");
        let all = [out.stdout, out.stderr].concat();
        let text = String::from_utf8_lossy(&all);
        assert!(!text.contains(TOKEN), "{arg}: {text}");
        assert!(
            text.contains("404") || text.contains("no such file"),
            "{arg}: {text}"
        );
    }
    // Without the token the Hub answers 401, and the message says so.
    let out = Command::new(env!("CARGO_BIN_EXE_weightport"))
        .args(["inspect", "hf://org/hf_repo_sharded"])
        .env("HF_ENDPOINT", hub.endpoint())
        .env_remove("HF_TOKEN")
        .env("HF_HOME", hub.dir.path().join("hf-home"))
        .env("SSL_CERT_FILE", hub.dir.path().join("ca.pem"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("401"),
        "{out:?}"
    );
    // An unknown CA: a certificate error, not retried.
    let out = Command::new(env!("CARGO_BIN_EXE_weightport"))
        .args(["inspect", "hf://org/hf_repo_sharded"])
        .env("HF_ENDPOINT", hub.endpoint())
        .env("HF_TOKEN", TOKEN)
        .env_remove("SSL_CERT_FILE")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.to_lowercase().contains("certificate") || err.contains("UnknownIssuer"),
        "{err}"
    );
}

/// An LFS object rewritten on the server after it was opened: the next read fails with "input
/// changed while reading", and the conversion leaves nothing behind.
#[test]
fn a_file_changed_on_the_server_mid_read_is_detected() {
    let Some(nginx) = tools() else { return };
    let r = repo("llama", "good/arch/llama");
    let shard = r
        .files
        .iter()
        .find(|p| p.to_string_lossy().ends_with("00001-of-00003.safetensors"))
        .unwrap()
        .clone();
    let bytes = std::fs::read(&shard).unwrap();
    let hub = Hub::start(&nginx, &[r]);
    let _env = common::remote::IN_PROCESS_ENV.lock();
    std::env::set_var("HF_ENDPOINT", hub.endpoint());
    std::env::set_var("HF_TOKEN", TOKEN);
    std::env::set_var("SSL_CERT_FILE", hub.dir.path().join("ca.pem"));
    let input = weightport_remote::open("hf://org/llama").unwrap();
    let storage = weightport_remote::RemoteFiles;
    use weightport_core::Storage;
    let src = storage
        .open(&input.path.join(shard.file_name().unwrap()), "")
        .unwrap();
    let mut head = vec![0u8; 8];
    src.read_at(0, &mut head).unwrap();
    // The same length, other bytes, a new modification time: nginx's ETag changes.
    let mut other = bytes.clone();
    let last = other.len() - 1;
    other[last] ^= 0xff;
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(hub.lfs_path(&sha256_hex(&bytes)), &other).unwrap();
    let mut tail = vec![0u8; 16];
    let err = src
        .read_at(bytes.len() as u64 - 16, &mut tail)
        .unwrap_err()
        .to_string();
    assert!(err.contains("input changed while reading"), "{err}");
}

/// A proxy between weightport and nginx drops connections, answers 500 and 503, cuts bodies
/// and stalls past the 1 s timeout, on 30% of requests (the listing's, the small files' and the
/// ranges' alike): each conversion equals the local one, or fails after the retry budget with a
/// clear message and no output.
#[test]
fn faults_on_the_way_give_the_local_bytes_or_a_clear_error_and_nothing_written() {
    let Some(nginx) = tools() else { return };
    let proxy_port = free_port();
    let repos = common::remote::FAULT_CASES.map(|(name, dir, _, _)| repo(name, dir));
    let hub = Hub::start_with(&nginx, &repos, Some(proxy_port));
    let mode = fault_proxy::Mode::Random {
        seed: 0x5eed_2026,
        percent: 30,
    };
    let proxy = fault_proxy::FaultProxy::start(hub.dir.path(), proxy_port, hub.plain_port, mode);
    let front = format!("https://127.0.0.1:{}", proxy.port);
    common::remote::through_faults(
        hub.dir.path(),
        &|name| format!("hf://org/{name}"),
        &|a| hub.wp(a),
        &|a| hub.wp_at(&front, a),
        &proxy,
    );
}

/// A server that fails every ranged read after the first of each object (503, retried with
/// backoff five times): the conversion fails naming the file and the attempts, and leaves
/// nothing in the output directory.
#[test]
fn a_server_failing_every_retry_is_a_clear_error_and_nothing_is_written() {
    let Some(nginx) = tools() else { return };
    let proxy_port = free_port();
    let hub = Hub::start_with(
        &nginx,
        &[repo("llama", "good/arch/llama")],
        Some(proxy_port),
    );
    let mode = fault_proxy::Mode::FailLaterRanges;
    let proxy = fault_proxy::FaultProxy::start(hub.dir.path(), proxy_port, hub.plain_port, mode);
    let dir = hub.dir.path().join("fail");
    std::fs::create_dir_all(&dir).unwrap();
    let o = dir.join("l.gguf");
    let front = format!("https://127.0.0.1:{}", proxy.port);
    let r = hub.wp_at(
        &front,
        &["convert", "hf://org/llama", "-o", o.to_str().unwrap()],
    );
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(
        err.contains("503") && err.contains("gave up after 6 attempts"),
        "{err}"
    );
    assert!(
        err.contains("hf://org/llama@") && err.contains(".safetensors"),
        "{err}"
    );
    assert!(names_in(&dir).is_empty(), "{:?}", names_in(&dir));
    assert!(proxy.counts().status >= 6);
}

/// The `/resolve/` lines of the access log, by file name.
fn resolves_by_file(hub: &Hub) -> std::collections::BTreeMap<String, usize> {
    let mut by = std::collections::BTreeMap::new();
    for l in hub.log().iter().filter(|l| l.contains("/resolve/")) {
        let path = l.split(' ').nth(1).unwrap_or_default();
        let name = path.rsplit('/').next().unwrap_or_default().to_string();
        *by.entry(name).or_insert(0) += 1;
    }
    by
}

/// Every request to the LFS host (127.0.0.2) carried no `Authorization`; returns those lines.
fn lfs_lines_without_token(hub: &Hub) -> Vec<String> {
    let lfs: Vec<String> = hub
        .auth_log()
        .into_iter()
        .filter(|l| l.contains(" /lfs/"))
        .collect();
    for l in &lfs {
        assert!(l.starts_with("127.0.0.2 ") && l.ends_with(" \"-\""), "{l}");
        assert!(!l.contains(TOKEN), "{l}");
    }
    lfs
}

/// The tiny Llama release on a Hub whose `/lfs/` host sits behind a fault proxy that creates
/// the expiry `switch` after three ranged requests; the proxy lives as long as the Hub.
fn hub_expiring(nginx: &std::path::Path, switch: &'static str) -> (Hub, fault_proxy::FaultProxy) {
    let proxy_port = free_port();
    let hub = Hub::start_with(nginx, &[repo("llama", "good/arch/llama")], Some(proxy_port));
    let mode = fault_proxy::Mode::Expire { after: 3, switch };
    let proxy = fault_proxy::FaultProxy::start(hub.dir.path(), proxy_port, hub.plain_port, mode);
    (hub, proxy)
}

/// `hf://org/llama` converted to a GGUF in the Hub's new directory `name`, expected to fail
/// (exit 1): the directory and the error.
fn failing_conversion(hub: &Hub, name: &str) -> (std::path::PathBuf, String) {
    let out = hub.dir.path().join(name);
    std::fs::create_dir_all(&out).unwrap();
    let o = out.join("l.gguf");
    let r = hub.wp(&["convert", "hf://org/llama", "-o", o.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&r.stderr).into_owned();
    assert_eq!(r.status.code(), Some(1), "{err}");
    (out, err)
}

/// The signed locations `/resolve/` redirects to "expire" mid-read (nginx answers 403 to them
/// once the proxy in front of the LFS host has passed three ranged requests, and `/resolve/`
/// then hands out `?gen=2`): each object whose read met a 403 asks `/resolve/` again (with the
/// token, the new location without it) and goes on there; the conversion equals the local one.
#[test]
fn an_expired_signed_location_is_resolved_again_and_the_output_is_the_local_ones() {
    let Some(nginx) = tools() else { return };
    let (hub, _proxy) = hub_expiring(&nginx, common::hub::EXPIRED);
    let dir = fixtures().join("good/arch/llama");
    hub.same_as_local("hf://org/llama", &dir, "l.gguf", &[]);
    let log = hub.log();
    let refused: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("/lfs/") && l.contains(" 403 "))
        .collect();
    assert!(!refused.is_empty(), "{log:#?}");
    let by = resolves_by_file(&hub);
    assert!(
        by.iter()
            .any(|(f, &n)| f.ends_with(".safetensors") && n == 2),
        "{by:?}"
    );
    assert!(by.values().all(|&n| n <= 2), "{by:?}");
    let lfs = lfs_lines_without_token(&hub);
    assert!(
        lfs.iter()
            .any(|l| l.contains("?gen=2") && l.contains(" 206 ")),
        "{lfs:#?}"
    );
    let resolves: Vec<String> = hub
        .auth_log()
        .into_iter()
        .filter(|l| l.contains("/resolve/"))
        .collect();
    assert!(
        resolves
            .iter()
            .all(|l| l.starts_with("127.0.0.1 ") && l.contains(TOKEN)),
        "{resolves:#?}"
    );
}

/// Locations that keep answering 403, the fresh ones too: after three re-resolutions of a file
/// the conversion fails naming it and saying the signed URL kept failing, nothing written.
#[test]
fn a_signed_location_that_keeps_failing_is_a_clear_error_after_three_re_resolutions() {
    let Some(nginx) = tools() else { return };
    let (hub, _proxy) = hub_expiring(&nginx, common::hub::EXPIRED_ALL);
    let (out, err) = failing_conversion(&hub, "fail");
    assert!(
        err.contains("403")
            && err.contains("kept failing")
            && err.contains("resolved again 3 times"),
        "{err}"
    );
    assert!(
        err.contains("hf://org/llama@") && err.contains(".safetensors"),
        "{err}"
    );
    assert!(names_in(&out).is_empty(), "{:?}", names_in(&out));
    let by = resolves_by_file(&hub);
    assert!(by.values().any(|&n| n == 4), "{by:?}");
    assert!(by.values().all(|&n| n <= 4), "{by:?}");
    lfs_lines_without_token(&hub);
}

/// An `https://` file that no redirect gave answers 403 mid-read: nothing to resolve again, so
/// the error is the 403 as before, and nothing asks `/resolve/`.
#[test]
fn a_403_of_an_https_file_not_redirected_is_not_resolved_again() {
    let Some(nginx) = tools() else { return };
    let proxy_port = free_port();
    let hub = Hub::start_with(&nginx, &[], Some(proxy_port));
    let mode = fault_proxy::Mode::Expire {
        after: 1,
        switch: common::hub::EXPIRED,
    };
    let _proxy = fault_proxy::FaultProxy::start(hub.dir.path(), proxy_port, hub.plain_port, mode);
    let file = fixtures().join("good/arch/llama/model-00001-of-00003.safetensors");
    let url = hub
        .plain(&file)
        .replace(&format!(":{}/", hub.port), &format!(":{proxy_port}/"));
    let out = hub.dir.path().join("plain-out");
    std::fs::create_dir_all(&out).unwrap();
    let o = out.join("m.safetensors");
    let r = hub.wp(&["convert", &url, "-o", o.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains("the server answered 403 Forbidden"), "{err}");
    assert!(!err.contains("kept failing"), "{err}");
    assert!(names_in(&out).is_empty(), "{:?}", names_in(&out));
    let log = hub.log();
    assert!(log.iter().all(|l| !l.contains("/resolve/")), "{log:#?}");
    assert!(
        log.iter()
            .any(|l| l.contains("/plain/") && l.contains(" 403 ")),
        "{log:#?}"
    );
}

/// The first locations expire and `/resolve/` then names another LFS object (another
/// `X-Linked-Etag`): the read fails as "input changed while reading", nothing is written, and
/// no range is read at the new location.
#[test]
fn a_re_resolution_naming_another_object_is_input_changed() {
    let Some(nginx) = tools() else { return };
    let (hub, _proxy) = hub_expiring(&nginx, common::hub::EXPIRED_CHANGED);
    let (out, err) = failing_conversion(&hub, "changed");
    assert!(
        err.contains("input changed while reading") && err.contains("X-Linked-Etag"),
        "{err}"
    );
    assert!(err.contains(".safetensors"), "{err}");
    assert!(names_in(&out).is_empty(), "{:?}", names_in(&out));
    assert!(resolves_by_file(&hub).values().any(|&n| n == 2));
    let lfs = lfs_lines_without_token(&hub);
    assert!(lfs.iter().all(|l| !l.contains("gen=2")), "{lfs:#?}");
}
