//! The LoRA adapter reader and planner on hostile input: the bytes up to the first NUL are the
//! adapter's `adapter_config.json`, each following line `NAME DTYPE D0,D1,…` one tensor of its
//! weights file (names, types and shapes are all the planner sees of them); reading the
//! configuration, pairing the factors and planning the GGUF adapter over the tiny Llama
//! release's config.json must return Ok or Err, never panic, and every planned tensor must name
//! one of the given tensors.
//!
//! Seeds: each adapter of fixtures/good/lora and fixtures/hostile/lora, written this way from
//! its adapter_config.json and the header of its adapter_model.safetensors.
#![no_main]

#[path = "common/tensor_line.rs"]
mod tensor_line;

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weightport_arch::lora::{factors, AdapterConfig};
use weightport_arch::{plan_adapter, Origin, OutType, PlanOptions, SourceTensor};
use weightport_core::Limits;

/// One adapter directory per process, next to a copy of the tiny Llama's config.json.
fn dirs() -> &'static (PathBuf, PathBuf) {
    static DIRS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    DIRS.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("wp-fuzz-lora-{}", std::process::id()));
        let (adapter, base) = (root.join("my-adapter-7b-lora"), root.join("base"));
        std::fs::create_dir_all(&adapter).unwrap();
        std::fs::create_dir_all(&base).unwrap();
        let config = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/good/arch/llama/config.json"
        );
        std::fs::copy(config, base.join("config.json")).unwrap();
        (adapter, base)
    })
}

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let (config, rest) = data.split_at(split);
    let tensors: Vec<SourceTensor> = String::from_utf8_lossy(rest.get(1..).unwrap_or(&[]))
        .lines()
        .take(4096)
        .filter_map(|l| tensor_line::tensor(l, "adapter_model.safetensors"))
        .collect();
    let (adapter, base) = dirs();
    std::fs::write(adapter.join("adapter_config.json"), config).unwrap();
    let Ok(cfg) = AdapterConfig::read(adapter, &Limits::default()) else {
        return;
    };
    let _ = cfg.base_dir(Some(base));
    for (m, _) in cfg.rank_pattern.iter().take(4) {
        let _ = cfg.scale(m);
    }
    let _ = factors(&tensors, &cfg, adapter);
    for outtype in [OutType::F16, OutType::Q8_0] {
        let mut opts = PlanOptions::default();
        opts.outtype = outtype;
        opts.vocab = false;
        if let Ok(plan) = plan_adapter(base, adapter, &cfg, &tensors, &opts) {
            for t in &plan.tensors {
                let index = match &t.origin {
                    Origin::Hf { index, .. }
                    | Origin::Rows { index, .. }
                    | Origin::View { index, .. } => *index,
                    other => panic!("{}: an adapter tensor from {other:?}", t.name),
                };
                assert!(index < tensors.len(), "{} names tensor {index}", t.name);
            }
        }
    }
});
