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

/// Seeded f16 values (exponent below 15: finite, |v| < 2), `n` of them.
fn f16_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(2 * n);
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&((x as u16) & 0xbbff).to_le_bytes());
    }
    out
}

/// A Llama-shaped release written by hand (an input, not an output of ours): one F16
/// `model.safetensors` in the order `benches/gen_llama.py` writes (embeddings, per layer q, k,
/// v, o, gate, up, down and the two norms, the final norm, `lm_head`), hidden 2048,
/// intermediate 5632, vocab 4096, 1 layer (130 MiB), the `config.json` transformers 4
/// writes for it, and the llama fixture's tokenizer. The directory is named `wide`, as the
/// repo is (HF → GGUF names the model after it).
fn wide_release(root: &Path) -> PathBuf {
    let (hidden, inter, vocab, layers) = (2048usize, 5632usize, 4096usize, 1);
    let mut specs: Vec<(String, Vec<usize>)> =
        vec![("model.embed_tokens.weight".into(), vec![vocab, hidden])];
    for i in 0..layers {
        let p = format!("model.layers.{i}.");
        for (n, s) in [
            ("self_attn.q_proj.weight", vec![hidden, hidden]),
            ("self_attn.k_proj.weight", vec![hidden, hidden]),
            ("self_attn.v_proj.weight", vec![hidden, hidden]),
            ("self_attn.o_proj.weight", vec![hidden, hidden]),
            ("mlp.gate_proj.weight", vec![inter, hidden]),
            ("mlp.up_proj.weight", vec![inter, hidden]),
            ("mlp.down_proj.weight", vec![hidden, inter]),
            ("input_layernorm.weight", vec![hidden]),
            ("post_attention_layernorm.weight", vec![hidden]),
        ] {
            specs.push((format!("{p}{n}"), s));
        }
    }
    specs.push(("model.norm.weight".into(), vec![hidden]));
    specs.push(("lm_head.weight".into(), vec![vocab, hidden]));
    let mut header = serde_json::Map::new();
    let mut at = 0usize;
    for (name, shape) in &specs {
        let n = shape.iter().product::<usize>() * 2;
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "F16", "shape": shape, "data_offsets": [at, at + n]}),
        );
        at += n;
    }
    let mut h = serde_json::Value::Object(header).to_string().into_bytes();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&h);
    for (k, (_, shape)) in specs.iter().enumerate() {
        bytes.extend(f16_bytes(shape.iter().product(), 0x9e37_79b9 + k as u64));
    }
    let dir = root.join("wide");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("model.safetensors"), &bytes).unwrap();
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": hidden, "initializer_range": 0.02, "intermediate_size": inter,
        "max_position_embeddings": 4096, "mlp_bias": false, "model_type": "llama",
        "num_attention_heads": 16, "num_hidden_layers": layers, "num_key_value_heads": 16,
        "pad_token_id": null, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
        "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "float16",
        "transformers_version": "4.46.0", "use_cache": true, "vocab_size": vocab
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let llama = crate::common::fixtures().join("good/arch/llama");
    for f in [
        "tokenizer.model",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
    ] {
        std::fs::copy(llama.join(f), dir.join(f)).unwrap();
    }
    dir
}

/// The bytes nginx sent of LFS object `sha` (206 answers), and how many requests asked for
/// them, from the access log (`… $status "$http_range" $body_bytes_sent`).
fn lfs_sent(hub: &Hub, sha: &str) -> (u64, usize) {
    let lines: Vec<String> = hub
        .log()
        .into_iter()
        .filter(|l| l.contains(&format!("/lfs/{sha}")))
        .collect();
    let sent = lines
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    (sent, lines.len())
}

/// An HF release → Q4_K_M GGUF at `--threads 2` with a 4 MiB read-ahead (`--max-memory 32M`):
/// the two workers read two far-apart regions of the one weights file at once (GGUF order is
/// not the file's), so the object is read by region. The GGUF equals the local conversion's
/// bytes, and nginx sent at most 1.05× the file (one read-ahead stream per object sent 1.41×
/// here, the other worker's reads going through 4 MiB blocks; 1.18× on the 2.37 GiB bench).
#[test]
fn two_workers_reading_far_apart_fetch_the_weights_about_once() {
    let Some(nginx) = tools() else { return };
    let scratch = tempfile::tempdir().unwrap();
    let dir = wide_release(scratch.path());
    let weights = std::fs::read(dir.join("model.safetensors")).unwrap();
    let hub = Hub::start(&nginx, &[repo_at("wide", &dir)]);
    let args: &[&str] = &["--quant", "Q4_K_M", "--threads", "2", "--max-memory", "32M"];
    hub.same_as_local("hf://org/wide", &dir, "w.gguf", args);
    let (sent, requests) = lfs_sent(&hub, &sha256_hex(&weights));
    let ratio = sent as f64 / weights.len() as f64;
    eprintln!("{sent} bytes sent in {requests} requests: {ratio:.3}×");
    assert!(
        ratio <= 1.05,
        "{sent} bytes sent in {requests} requests for a {}-byte file: {ratio:.3}×",
        weights.len()
    );
}

/// The served weights differ from the listing's LFS sha256 by one byte in the middle (the
/// object corrupted on the server, its size kept): an identity conversion read in order
/// (`--threads 1`) fails naming the digest, before commit, with nothing in the output directory.
#[test]
fn a_corrupted_byte_of_weights_read_in_order_is_caught_by_the_digest() {
    let Some(nginx) = tools() else { return };
    let scratch = tempfile::tempdir().unwrap();
    let (dir, bytes) = big_repo(scratch.path());
    let hub = Hub::start(&nginx, &[repo_at("big", &dir)]);
    let sha = sha256_hex(&bytes);
    let served = hub.lfs_path(&sha);
    let mut bad = bytes.clone();
    bad[bytes.len() / 2] ^= 0x01;
    // A new file in place of the served one (it may be a hard link to the input's).
    std::fs::remove_file(&served).unwrap();
    std::fs::write(&served, &bad).unwrap();
    let out = hub.dir.path().join("corrupt");
    std::fs::create_dir_all(&out).unwrap();
    let o = out.join("b.safetensors");
    let args: &[&str] = &["--threads", "1", "--max-memory", "5M"];
    let r = hub.wp(&convert_args("hf://org/big", &o, args));
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "sha256 {}, but the Hub lists {sha}",
            sha256_hex(&bad)
        )),
        "{err}"
    );
    assert!(names_in(&out).is_empty(), "{:?}", names_in(&out));
}
