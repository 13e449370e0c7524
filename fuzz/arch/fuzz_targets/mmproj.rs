//! The multimodal projector planner on hostile input: the bytes up to the first NUL are the
//! release's `config.json`, up to the second its `preprocessor_config.json`, and each following
//! line `NAME DTYPE D0,D1,…` one tensor of its weights (names, types and shapes are all the
//! planner sees of them). The family check (`mmproj::check`) and the plan must return Ok or
//! Err, never panic; every planned tensor must name one of the given tensors and a view or a
//! row range must stay inside it.
//!
//! The tokenizer files hold the `[IMG_BREAK]` added token (a Pixtral tower's projector is
//! refused without it), so the Pixtral families reach the planner.
//!
//! Seeds: the `gemma3_mm`, `qwen25vl_mm`, `qwen3vl`, `llava_clip`, `llava_pixtral`,
//! `mistral3_mm` and `idefics3` releases of fixtures/good/arch written this way from their
//! config.json, preprocessor_config.json and safetensors headers (fuzz/README.md), and variants
//! with absurd sizes.
#![no_main]

#[path = "common/tensor_line.rs"]
mod tensor_line;

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weightport_arch::{mmproj, plan_mmproj, Origin, OutType, PlanOptions, SourceTensor};

/// One release directory per process.
fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("wp-fuzz-mmproj-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let added = r#"{"added_tokens_decoder": {"12": {"content": "[IMG_BREAK]"}}}"#;
        std::fs::write(d.join("tokenizer_config.json"), added).unwrap();
        std::fs::write(d.join("tokenizer.json"), r#"{"added_tokens": []}"#).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |&b| b == 0);
    let config = parts.next().unwrap_or(&[]);
    let pre = parts.next().unwrap_or(&[]);
    let tensors: Vec<SourceTensor> = String::from_utf8_lossy(parts.next().unwrap_or(&[]))
        .lines()
        .take(4096)
        .filter_map(|l| tensor_line::tensor(l, "model.safetensors"))
        .collect();
    let d = dir();
    std::fs::write(d.join("config.json"), config).unwrap();
    std::fs::write(d.join(mmproj::PREPROCESSOR), pre).unwrap();
    if mmproj::check(d).is_err() {
        return;
    }
    for outtype in [OutType::F16, OutType::Q8_0] {
        let mut opts = PlanOptions::default();
        opts.outtype = outtype;
        opts.vocab = false;
        let Ok(plan) = plan_mmproj(d, &tensors, &opts) else {
            continue;
        };
        for t in &plan.tensors {
            let (index, view) = match &t.origin {
                Origin::Hf { index, .. } => (*index, None),
                Origin::View { index, view, .. } => (*index, Some(view)),
                Origin::Rows { index, rows, .. } => {
                    let n = tensors[*index].shape.first().copied().unwrap_or(0);
                    assert!(
                        rows.start < rows.end && rows.end <= n,
                        "{}: rows {rows:?} of {n}",
                        t.name
                    );
                    (*index, None)
                }
                other => panic!("{}: a projector tensor from {other:?}", t.name),
            };
            assert!(index < tensors.len(), "{} names tensor {index}", t.name);
            if let Some(v) = view {
                let n: u64 = tensors[index].shape.iter().product();
                if v.dims.iter().all(|(c, _)| *c > 0) {
                    let last = v.offset + v.dims.iter().map(|(c, s)| (c - 1) * s).sum::<u64>();
                    assert!(last < n, "{}: a view past its source", t.name);
                }
                assert_eq!(v.shape(), t.shape, "{}", t.name);
            }
        }
    }
});
