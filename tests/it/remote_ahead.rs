//! The read-ahead of remote weights (issue 33 item 4), against the Hub-layout nginx of
//! `common::hub`: a release whose weights span many read-ahead windows converts as its local
//! files do, also through the fault proxy; the bytes held ahead never exceed the budget; a
//! weights file whose bytes are not the listing's LFS sha256 fails the conversion before
//! anything is committed.

use std::path::{Path, PathBuf};

use crate::common::fault_proxy;
use crate::common::hub::{repo, repo_at, sha256_hex, tools, Hub, TOKEN};
use crate::common::remote::{convert_args, free_port, names_in, ok, IN_PROCESS_ENV};

/// A safetensors file of `tensors` F16 tensors of `elems` elements each, finite values from a
/// seeded generator, written by hand here (an input, not an output of ours).
fn big_safetensors(path: &Path, tensors: usize, elems: usize) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    for t in 0..tensors {
        let (a, b) = (t * elems * 2, (t + 1) * elems * 2);
        header.insert(
            format!("model.layers.{t}.w"),
            serde_json::json!({"dtype": "F16", "shape": [elems / 64, 64], "data_offsets": [a, b]}),
        );
    }
    let mut h = serde_json::Value::Object(header).to_string().into_bytes();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&h);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..tensors * elems {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // An f16 of exponent below 15: finite, |v| < 2.
        bytes.extend_from_slice(&((x as u16) & 0xbbff).to_le_bytes());
    }
    std::fs::write(path, &bytes).unwrap();
    bytes
}

/// A repo directory holding one big safetensors file (6 MiB: 96 windows of 64 KiB).
pub(crate) fn big_repo(root: &Path) -> (PathBuf, Vec<u8>) {
    let dir = root.join("big");
    std::fs::create_dir_all(&dir).unwrap();
    let bytes = big_safetensors(&dir.join("model.safetensors"), 3, 1 << 20);
    (dir, bytes)
}

/// Read through the library with a 512 KiB budget (64 KiB windows), in the 256 KiB reads of a
/// worker: the bytes are the file's, the read-ahead held at most its budget (and did hold
/// several windows at once), and the object came in many ranged requests.
#[test]
fn read_ahead_holds_at_most_its_budget_over_many_windows() {
    let Some(nginx) = tools() else { return };
    let scratch = tempfile::tempdir().unwrap();
    let (dir, bytes) = big_repo(scratch.path());
    let hub = Hub::start(&nginx, &[repo_at("big", &dir)]);
    let _one = IN_PROCESS_ENV.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var("HF_ENDPOINT", hub.endpoint());
    std::env::set_var("HF_TOKEN", TOKEN);
    std::env::set_var("SSL_CERT_FILE", hub.dir.path().join("ca.pem"));
    let budget = 512 << 10;
    weightport_remote::set_read_ahead(budget);
    let input = weightport_remote::open("hf://org/big").unwrap();
    use weightport_core::Storage;
    let src = weightport_remote::RemoteFiles
        .open(&input.path.join("model.safetensors"), "")
        .unwrap();
    let mut got = vec![0u8; bytes.len()];
    for (i, piece) in got.chunks_mut(256 << 10).enumerate() {
        src.read_at((i * (256 << 10)) as u64, piece).unwrap();
    }
    assert!(got == bytes, "the bytes read ahead differ from the file's");
    let (b, peak) = weightport_remote::read_ahead_stats();
    assert_eq!(b, budget);
    assert!(
        peak <= budget,
        "{peak} bytes in flight over a {budget}-byte budget"
    );
    assert!(
        peak >= 4 * (64 << 10),
        "the read-ahead never held 4 windows: {peak}"
    );
    let sha = sha256_hex(&bytes);
    let ranged = hub
        .log()
        .iter()
        .filter(|l| l.contains(&format!("/lfs/{sha}")) && l.contains(" 206 "))
        .count();
    assert!(ranged >= 90, "{ranged} ranged requests for 96 windows");
    drop(src);
    drop(input);
    weightport_remote::set_read_ahead(0);
}

/// `convert hf://` of the many-window repo with `--max-memory 5M` (a 625 KB read-ahead: 76 KiB windows), once
/// straight and once through the fault proxy: both equal the local conversion.
#[test]
fn a_release_read_ahead_converts_as_its_local_files_do_also_through_faults() {
    let Some(nginx) = tools() else { return };
    let scratch = tempfile::tempdir().unwrap();
    let (dir, _) = big_repo(scratch.path());
    let proxy_port = free_port();
    let hub = Hub::start_with(&nginx, &[repo_at("big", &dir)], Some(proxy_port));
    // Straight (the redirects go to the proxy's port: a second Hub without one).
    let plain = Hub::start(&nginx, &[repo_at("big", &dir)]);
    let mem: &[&str] = &["--max-memory", "5M"];
    plain.same_as_local("hf://org/big", &dir, "s.safetensors", mem);
    let mode = fault_proxy::Mode::Random {
        seed: 0xa4ead,
        percent: 15,
    };
    let proxy = fault_proxy::FaultProxy::start(hub.dir.path(), proxy_port, hub.plain_port, mode);
    let front = format!("https://127.0.0.1:{}", proxy.port);
    let out = hub.dir.path().join("faulted");
    std::fs::create_dir_all(&out).unwrap();
    let (o, l) = (
        out.join("f.safetensors"),
        hub.dir.path().join("l.safetensors"),
    );
    ok(
        &hub.wp(&convert_args(dir.to_str().unwrap(), &l, mem)),
        "local",
    );
    let r = hub.wp_at(&front, &convert_args("hf://org/big", &o, mem));
    ok(&r, "through the faults");
    assert!(std::fs::read(&o).unwrap() == std::fs::read(&l).unwrap());
    let c = proxy.counts();
    assert!(
        c.requests >= 90 && c.dropped + c.status + c.truncated + c.stalled > 0,
        "{c:?}"
    );
}

/// The listing gives a weights file a wrong LFS sha256: the conversion (HF release → Q4_K_M
/// GGUF, and the many-window repo → safetensors) fails naming the digest, before commit, with
/// nothing in the output directory.
#[test]
fn a_weights_file_not_of_its_listed_sha256_fails_before_commit() {
    let Some(nginx) = tools() else { return };
    let scratch = tempfile::tempdir().unwrap();
    let (dir, _) = big_repo(scratch.path());
    let hub = Hub::start(
        &nginx,
        &[
            repo("llama", "good/arch/llama").with_wrong_sha("model-00002-of-00003.safetensors"),
            repo_at("big", &dir).with_wrong_sha("model.safetensors"),
        ],
    );
    let cases: [(&str, &str, &[&str]); 2] = [
        (
            "hf://org/llama",
            "l.gguf",
            &["--outtype", "f16", "--quant", "Q4_K_M"],
        ),
        ("hf://org/big", "b.safetensors", &["--max-memory", "5M"]),
    ];
    for (remote, name, args) in cases {
        let out = hub.dir.path().join("wrong").join(name);
        std::fs::create_dir_all(&out).unwrap();
        let r = hub.wp(&convert_args(remote, &out.join(name), args));
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{remote}: {err}");
        assert!(
            err.contains("sha256") && err.contains("but the Hub lists 0000000000"),
            "{remote}: {err}"
        );
        assert!(names_in(&out).is_empty(), "{remote}: {:?}", names_in(&out));
    }
}
