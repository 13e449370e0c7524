//! Issue 35's guard, independent of wall time: every conversion path, run on a Llama-shaped fp16
//! release of more than 256 MiB generated here on demand (never committed), reports the I/O it
//! did to its output files in `--json` (`io`), and must write at least 128 KiB per write call
//! on average (half the 256 KiB a `pwrite` is cut in), open each output file at most twice (to write it, to verify it) and start write-back
//! at most once per few MiB. Before issue 35 the HF release → GGUF path wrote 52 KB pieces and
//! opened, stat'ed, `sync_file_range`d and closed the file for each: a regression of that kind
//! fails here, on any machine, however fast.
//!
//! The counts are weightport's own; `benches/README.md` holds the `strace -f -c` figures they
//! were checked against on the bench release.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};

use common::{fixtures, wp};
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;

/// The least average write call: half of `io_counts::WRITE_PIECE`, the most one `pwrite` hands
/// the kernel (each buffer's last piece is shorter).
const MIN_WRITE: u64 = 128 << 10;

/// Llama-2 widths at a quarter (rows a multiple of 256, so every k-quant applies), two layers
/// and an 8192-token vocabulary: 272 MiB of F16.
const HIDDEN: u64 = 2048;
const INTERMEDIATE: u64 = 5632;
const VOCAB: u64 = 8192;
const LAYERS: u64 = 2;
const HEADS: u64 = 16;

/// The release's tensors in model order: (name, shape).
fn specs() -> Vec<(String, Vec<u64>)> {
    let mut v = vec![("model.embed_tokens.weight".to_string(), vec![VOCAB, HIDDEN])];
    for l in 0..LAYERS {
        let p = format!("model.layers.{l}.");
        for (n, s) in [
            ("self_attn.q_proj.weight", vec![HIDDEN, HIDDEN]),
            ("self_attn.k_proj.weight", vec![HIDDEN, HIDDEN]),
            ("self_attn.v_proj.weight", vec![HIDDEN, HIDDEN]),
            ("self_attn.o_proj.weight", vec![HIDDEN, HIDDEN]),
            ("mlp.gate_proj.weight", vec![INTERMEDIATE, HIDDEN]),
            ("mlp.up_proj.weight", vec![INTERMEDIATE, HIDDEN]),
            ("mlp.down_proj.weight", vec![HIDDEN, INTERMEDIATE]),
            ("input_layernorm.weight", vec![HIDDEN]),
            ("post_attention_layernorm.weight", vec![HIDDEN]),
        ] {
            v.push((format!("{p}{n}"), s));
        }
    }
    v.push(("model.norm.weight".into(), vec![HIDDEN]));
    v.push(("lm_head.weight".into(), vec![VOCAB, HIDDEN]));
    v
}

/// Tensor `i`'s F16 bytes: finite values of magnitude 2^-6..2^-2 (norms 1..2) from a xorshift
/// seeded by its index.
fn tensor_bytes(i: usize, numel: u64, norm: bool) -> Vec<u8> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ (i as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let mut out = Vec::with_capacity(numel as usize * 2);
    for _ in 0..numel.div_ceil(4) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        for k in 0..4 {
            let r = (s >> (16 * k)) as u16;
            let exp = if norm { 15 } else { 9 + (r >> 10) % 5 };
            let bits = ((r & 0x8000) * u16::from(!norm)) | (exp << 10) | (r & 0x3ff);
            out.extend_from_slice(&bits.to_le_bytes());
        }
    }
    out.truncate(numel as usize * 2);
    out
}

/// The generated release: `dir` (model.safetensors, config.json, the llama fixture's
/// tokenizer), and the same tensors as a torch `pytorch_model.bin` in `bin`.
struct Release {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    bin: PathBuf,
    out: PathBuf,
    bytes: u64,
}

fn release() -> Release {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("llama");
    let bin = tmp.path().join("bin");
    let out = tmp.path().join("out");
    for d in [&dir, &bin, &out] {
        std::fs::create_dir_all(d).unwrap();
    }
    let specs = specs();
    let data: Vec<Vec<u8>> = specs
        .iter()
        .enumerate()
        .map(|(i, (_, s))| tensor_bytes(i, s.iter().product(), s.len() == 1))
        .collect();
    write_safetensors(&dir.join("model.safetensors"), &specs, &data);
    write_torch_bin(&bin.join("pytorch_model.bin"), &specs, &data);
    std::fs::write(dir.join("config.json"), config().to_string()).unwrap();
    let tok = fixtures().join("good/arch/llama");
    for f in [
        "tokenizer.model",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
    ] {
        std::fs::copy(tok.join(f), dir.join(f)).unwrap();
    }
    let bytes = data.iter().map(|d| d.len() as u64).sum();
    assert!(bytes >= 256 * MIB, "{bytes} bytes");
    Release {
        _tmp: tmp,
        dir,
        bin,
        out,
        bytes,
    }
}

fn config() -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"],
        "bos_token_id": 1, "eos_token_id": 2,
        "head_dim": HIDDEN / HEADS, "hidden_act": "silu", "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE, "max_position_embeddings": 4096,
        "model_type": "llama", "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
        "num_key_value_heads": HEADS, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
        "tie_word_embeddings": false, "torch_dtype": "float16", "vocab_size": VOCAB,
    })
}

/// A safetensors file as the format defines it (8-byte header length, JSON header padded with
/// spaces to 8 bytes, data in header order).
fn write_safetensors(path: &Path, specs: &[(String, Vec<u64>)], data: &[Vec<u8>]) {
    let mut order: Vec<usize> = (0..specs.len()).collect();
    order.sort_by(|&a, &b| specs[a].0.cmp(&specs[b].0));
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut at = 0u64;
    for &i in &order {
        let n = data[i].len() as u64;
        header.insert(
            specs[i].0.clone(),
            json!({"dtype": "F16", "shape": specs[i].1, "data_offsets": [at, at + n]}),
        );
        at += n;
    }
    let mut h = Value::Object(header).to_string().into_bytes();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    f.write_all(&(h.len() as u64).to_le_bytes()).unwrap();
    f.write_all(&h).unwrap();
    for &i in &order {
        f.write_all(&data[i]).unwrap();
    }
    f.flush().unwrap();
}

/// Pickle protocol 2 of the `OrderedDict` of tensors `torch.save` writes for a state dict: each
/// tensor `torch._utils._rebuild_tensor_v2((storage, HalfStorage, key, cpu, numel), 0, size,
/// stride, False, OrderedDict())`, storage `k` holding tensor `k`.
fn state_dict_pickle(specs: &[(String, Vec<u64>)]) -> Vec<u8> {
    fn text(p: &mut Vec<u8>, s: &str) {
        p.push(b'X');
        p.extend_from_slice(&(s.len() as u32).to_le_bytes());
        p.extend_from_slice(s.as_bytes());
    }
    fn int(p: &mut Vec<u8>, v: u64) {
        p.push(b'J');
        p.extend_from_slice(&(v as i32).to_le_bytes());
    }
    fn ints(p: &mut Vec<u8>, vs: &[u64]) {
        p.push(b'(');
        vs.iter().for_each(|&v| int(p, v));
        p.push(b't');
    }
    let ordered_dict = b"ccollections\nOrderedDict\n)R";
    let mut p = b"\x80\x02".to_vec();
    p.extend_from_slice(ordered_dict);
    p.push(b'(');
    for (k, (name, shape)) in specs.iter().enumerate() {
        text(&mut p, name);
        p.extend_from_slice(b"ctorch._utils\n_rebuild_tensor_v2\n((");
        text(&mut p, "storage");
        p.extend_from_slice(b"ctorch\nHalfStorage\n");
        text(&mut p, &k.to_string());
        text(&mut p, "cpu");
        int(&mut p, shape.iter().product());
        p.extend_from_slice(b"tQ");
        int(&mut p, 0);
        ints(&mut p, shape);
        let stride: Vec<u64> = (0..shape.len())
            .map(|d| shape[d + 1..].iter().product())
            .collect();
        ints(&mut p, &stride);
        p.push(0x89);
        p.extend_from_slice(ordered_dict);
        p.extend_from_slice(b"tR");
    }
    p.extend_from_slice(b"u.");
    p
}

/// A `torch.save` ZIP: `archive/data.pkl`, `byteorder`, one stored record per storage
/// (64-byte aligned, as torch writes them), `version`.
fn write_torch_bin(path: &Path, specs: &[(String, Vec<u64>)], data: &[Vec<u8>]) {
    use zip::write::SimpleFileOptions;
    let mut w = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let stored = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    w.start_file("archive/data.pkl", stored).unwrap();
    w.write_all(&state_dict_pickle(specs)).unwrap();
    w.start_file("archive/byteorder", stored).unwrap();
    w.write_all(b"little").unwrap();
    for (k, d) in data.iter().enumerate() {
        let aligned = stored.with_alignment(64);
        w.start_file(format!("archive/data/{k}"), aligned).unwrap();
        w.write_all(d).unwrap();
    }
    w.start_file("archive/version", stored).unwrap();
    w.write_all(b"3\n").unwrap();
    w.finish().unwrap();
}

/// Runs weightport with `args` (`--json` added), which must succeed; its document.
fn run(args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let o = wp(&all);
    assert!(
        o.status.success(),
        "{args:?}: {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("one JSON document")
}

/// The guard on one `io` object: at least `min_bytes` written, at least [`MIN_WRITE`] per write
/// call on average (`min_bytes` 0, a job that writes headers only: one write per file), at most two opens
/// per file, and write-back started at most once per 4 MiB (plus each file's fsync).
fn check(what: &str, io: &Value, min_bytes: u64) {
    let n = |k: &str| {
        io[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{what}: no io.{k} in {io}"))
    };
    let (files, writes, bytes, opens, syncs) = (
        n("files"),
        n("writes"),
        n("bytes_written"),
        n("opens"),
        n("syncs"),
    );
    eprintln!(
        "{what}: {files} files, {writes} writes of {} KiB on average, {opens} opens, {syncs} syncs",
        bytes / writes.max(1) / 1024
    );
    assert!(bytes >= min_bytes, "{what}: wrote {bytes} bytes: {io}");
    if min_bytes == 0 {
        // Headers only (`finish --in-place`: the units wrote the data): one write a file.
        assert!(
            writes <= files,
            "{what}: {writes} writes to {files} files: {io}"
        );
    } else {
        assert!(
            bytes / writes.max(1) >= MIN_WRITE,
            "{what}: {writes} writes of {} bytes on average: {io}",
            bytes / writes.max(1)
        );
    }
    assert!(
        opens <= 2 * files,
        "{what}: {opens} opens of {files} files: {io}"
    );
    assert!(
        syncs <= bytes / (4 * MIB) + 2 * files,
        "{what}: {syncs} syncs for {bytes} bytes in {files} files: {io}"
    );
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Every path converts the generated release (or its own output) with the I/O the guard
/// allows; outputs are removed as the test goes so it holds about 1.2 GB of disk at most.
#[test]
fn every_path_writes_in_large_pieces_and_opens_each_file_at_most_twice() {
    let r = release();
    let (st, o) = (r.dir.join("model.safetensors"), &r.out);
    let half = r.bytes / 2;
    let plain: &[(&str, Vec<String>, u64)] = &[
        (
            "reshard",
            vec![
                s(&st).into(),
                "-o".into(),
                format!("{}/repo", s(o)),
                "--shard-size".into(),
                "100MB".into(),
            ],
            r.bytes,
        ),
        (
            ".bin → safetensors",
            vec![
                s(&r.bin.join("pytorch_model.bin")).into(),
                "-o".into(),
                format!("{}/b.safetensors", s(o)),
            ],
            r.bytes,
        ),
        (
            "cast to F32",
            vec![
                s(&st).into(),
                "-o".into(),
                format!("{}/f32.safetensors", s(o)),
                "--dtype".into(),
                "f32".into(),
            ],
            2 * r.bytes,
        ),
        (
            "HF → GGUF F16",
            vec![
                s(&r.dir).into(),
                "-o".into(),
                format!("{}/f16.gguf", s(o)),
                "--dtype".into(),
                "f16".into(),
            ],
            r.bytes,
        ),
        (
            "HF → GGUF Q4_K_M",
            vec![
                s(&r.dir).into(),
                "-o".into(),
                format!("{}/q4.gguf", s(o)),
                "--quant".into(),
                "Q4_K_M".into(),
            ],
            r.bytes / 4,
        ),
        (
            "GGUF → GGUF Q8_0",
            vec![
                format!("{}/f16.gguf", s(o)),
                "-o".into(),
                format!("{}/q8.gguf", s(o)),
                "--quant".into(),
                "Q8_0".into(),
            ],
            half,
        ),
    ];
    for (what, args, min) in plain {
        let mut a = vec!["convert"];
        a.extend(args.iter().map(String::as_str));
        let doc = run(&a);
        // The path is the one named: an HF release planned by its architecture (q/k rows
        // permuted), a torch checkpoint read as one.
        if what.starts_with("HF") {
            assert_eq!(doc["architecture"], "llama (LlamaForCausalLM)", "{what}");
        }
        if what.starts_with(".bin") {
            assert_eq!(doc["input_format"], "pytorch-zip", "{what}");
        }
        check(what, &doc["io"], *min);
        let out = &args[2];
        if !out.ends_with("f16.gguf") {
            remove(Path::new(out));
        }
    }
    units(&r, false);
    units(&r, true);
    job(&r);
}

fn remove(p: &Path) {
    if p.is_dir() {
        std::fs::remove_dir_all(p).unwrap();
    } else {
        std::fs::remove_file(p).unwrap();
    }
}

/// `plan` (2 units) + both units + `finish` of HF → GGUF F16: each unit's I/O, and finish's.
fn units(r: &Release, in_place: bool) {
    let out = r.out.join("u.gguf");
    let plan = r.out.join("u.plan.json");
    let mut a = vec![
        "plan",
        s(&r.dir),
        "-o",
        s(&out),
        "--dtype",
        "f16",
        "--units",
        "2",
        "--plan",
        s(&plan),
    ];
    if in_place {
        a.push("--in-place");
    }
    run(&a);
    let how = if in_place {
        "units --in-place"
    } else {
        "units"
    };
    for i in ["0", "1"] {
        let doc = run(&["unit", s(&plan), "--index", i]);
        check(&format!("{how}: unit {i}"), &doc["io"], r.bytes / 4);
    }
    let doc = run(&["finish", s(&plan)]);
    // Finish writes the header; with parts it also appends the second unit's part.
    let min = if in_place { 0 } else { r.bytes / 4 };
    check(&format!("{how}: finish"), &doc["io"], min);
    remove(&out);
    remove(&plan);
}

/// A job of one read (issue 17's shared read) into a sharded repo and an F16 GGUF, as
/// `convert -o A -o B` runs it (the job runner without a state file, whose sha256 of every output
/// would only add reads): each output's I/O and the total.
fn job(r: &Release) {
    let repo = format!("{}:shard_size=100MB", s(&r.out.join("job-repo")));
    let gguf = format!("{}:outtype=f16", s(&r.out.join("job-f16.gguf")));
    let doc = run(&["convert", s(&r.dir), "-o", &repo, "-o", &gguf]);
    check("job: repo", &doc["outputs"][0]["result"]["io"], r.bytes);
    check("job: F16 GGUF", &doc["outputs"][1]["result"]["io"], r.bytes);
    check("job: all", &doc["io"], 2 * r.bytes);
}
