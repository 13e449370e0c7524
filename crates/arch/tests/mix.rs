//! The mix policy against llama-quantize: for 3 models × 14 file types, the type llama-quantize
//! gave each tensor (fixtures/expected/gguf-mix, written by fixtures/gen/gen_mix.py with the
//! pinned llama.cpp) is the type we choose, and its tensor order is ours.

use std::path::Path;

use serde_json::Value;
use weightport_arch::mix::{choose, quantize_order, Ftype, MixParams, MixTensor};
use weightport_core::DType;

#[test]
fn every_mix_chooses_what_llama_quantize_chose() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/expected/gguf-mix");
    let mut checked = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let file = p.file_name().unwrap().to_str().unwrap().to_string();
        let (model, ty) = file.trim_end_matches(".json").split_once('.').unwrap();
        let n_layer: usize = model
            .trim_start_matches("llama")
            .split('_')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        let tensors = v["tensors"].as_array().unwrap();
        let names: Vec<&str> = tensors
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        let order = quantize_order(&names);
        assert_eq!(
            order,
            (0..names.len()).collect::<Vec<_>>(),
            "{file}: llama-quantize's order"
        );
        let input: Vec<MixTensor> = tensors
            .iter()
            .map(|t| {
                let ne: Vec<u64> = t["ne"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap())
                    .collect();
                let n_dims = ne.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1);
                MixTensor {
                    name: t["name"].as_str().unwrap().into(),
                    ne0: ne[0],
                    n_dims,
                    dtype: if n_dims == 1 { DType::F32 } else { DType::F16 },
                }
            })
            .collect();
        let params = MixParams {
            ftype: Ftype::parse(ty).unwrap(),
            pure: false,
            tensor_types: vec![],
            output_type: None,
            token_embd_type: None,
            leave_output: false,
            arch: "llama".into(),
            n_layer,
            n_gqa: 4,
            n_expert: 0,
            has_imatrix: false,
        };
        for ((t, c), want) in input.iter().zip(choose(&input, &params)).zip(tensors) {
            assert_eq!(
                c.dtype.name(),
                want["type"].as_str().unwrap(),
                "{file}: {}",
                t.name
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 42);
}
