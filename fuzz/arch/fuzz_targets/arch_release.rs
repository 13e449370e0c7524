//! The HF release → GGUF planner on hostile side files: the input's first byte picks which file
//! of a real tiny release (fixtures/good/arch/llama or qwen2) is replaced by the remaining
//! bytes (config.json, tokenizer_config.json, tokenizer.json, tokenizer.model,
//! special_tokens_map.json, generation_config.json); the plan must return Ok or Err, never panic.
//!
//! Seeds: byte `i` followed by the content of `FILES[i]`, and of the other releases'
//! config.json files, from fixtures/good/arch (see the issue-10 note for the command used).
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weightport_arch::{plan, PlanOptions, SourceTensor};
use weightport_core::DType;

const FILES: &[(&str, &str)] = &[
    ("llama", "config.json"),
    ("llama", "tokenizer_config.json"),
    ("llama", "tokenizer.model"),
    ("llama", "special_tokens_map.json"),
    ("llama", "generation_config.json"),
    ("qwen2", "config.json"),
    ("qwen2", "tokenizer.json"),
    ("qwen2", "tokenizer_config.json"),
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/good/arch")
}

/// The release's tensors (names, shapes, dtypes) from its safetensors headers.
fn tensors(dir: &Path) -> Vec<SourceTensor> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".safetensors") {
            continue;
        }
        let bytes = std::fs::read(&p).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
        // Minimal header walk: `"name":{"dtype":"F16","shape":[a,b],...}`.
        for part in header.split("},").flat_map(|s| s.split("}}")) {
            let Some((k, rest)) = part.rsplit_once("\":{") else {
                continue;
            };
            let k = k.rsplit_once('"').map_or(k, |(_, k)| k);
            if k == "__metadata__" {
                continue;
            }
            let dtype = if rest.contains("\"BF16\"") {
                DType::BF16
            } else if rest.contains("\"F16\"") {
                DType::F16
            } else {
                DType::F32
            };
            let shape = rest
                .split("\"shape\":[")
                .nth(1)
                .and_then(|s| s.split(']').next())
                .map(|s| s.split(',').filter_map(|d| d.trim().parse().ok()).collect())
                .unwrap_or_default();
            out.push(SourceTensor {
                name: k.to_string(),
                shape,
                dtype,
                file: name.clone(),
            });
        }
    }
    out
}

struct Release {
    dir: PathBuf,
    tensors: Vec<SourceTensor>,
}

fn releases() -> &'static [(String, Release)] {
    static R: OnceLock<Vec<(String, Release)>> = OnceLock::new();
    R.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("wp-arch-fuzz-{}", std::process::id()));
        ["llama", "qwen2"]
            .iter()
            .map(|name| {
                let src = fixtures().join(name);
                let dir = root.join(name);
                std::fs::create_dir_all(&dir).unwrap();
                for e in std::fs::read_dir(&src).unwrap() {
                    let p = e.unwrap().path();
                    if !p.to_string_lossy().ends_with(".safetensors") {
                        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
                    }
                }
                let tensors = tensors(&src);
                (name.to_string(), Release { dir, tensors })
            })
            .collect()
    })
}

/// libFuzzer's panic hook aborts; panics weightport contains (third-party parsers, see
/// `weightport_core::contain_panic`) are errors, not findings.
fn quiet_contained_panics() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let fuzzer_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !weightport_core::panic_is_contained() {
                fuzzer_hook(info)
            }
        }));
    });
}

fuzz_target!(|data: &[u8]| {
    quiet_contained_panics();
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let (release, file) = FILES[pick as usize % FILES.len()];
    let (_, r) = releases().iter().find(|(n, _)| n == release).unwrap();
    let target = r.dir.join(file);
    let original = std::fs::read(fixtures().join(release).join(file)).unwrap();
    std::fs::write(&target, body).unwrap();
    let mut opts = PlanOptions::default();
    opts.pre_tokenizer = Some("qwen2".into());
    let _ = plan(&r.dir, &r.tensors, &opts);
    std::fs::write(&target, original).unwrap();
});
