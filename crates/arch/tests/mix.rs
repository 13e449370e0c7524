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

/// The tiny Llama of fixtures/good/imatrix (8 layers, every row 256, 2 heads sharing 1 KV head)
/// as the mix sees it, in llama-quantize's order.
fn tiny_imatrix_model() -> Vec<MixTensor> {
    let mut names = vec![
        ("token_embd.weight".to_string(), 2),
        ("output_norm.weight".to_string(), 1),
        ("output.weight".to_string(), 2),
    ];
    for i in 0..8 {
        for (n, d) in [
            ("attn_norm", 1),
            ("attn_q", 2),
            ("attn_k", 2),
            ("attn_v", 2),
            ("attn_output", 2),
            ("ffn_norm", 1),
            ("ffn_gate", 2),
            ("ffn_up", 2),
            ("ffn_down", 2),
        ] {
            names.push((format!("blk.{i}.{n}.weight"), d));
        }
    }
    let refs: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
    quantize_order(&refs)
        .into_iter()
        .map(|i| MixTensor {
            name: names[i].0.clone(),
            ne0: 256,
            n_dims: names[i].1,
            dtype: if names[i].1 == 1 {
                DType::F32
            } else {
                DType::F16
            },
        })
        .collect()
}

/// Every file type of llama-quantize (the IQ types and Q2_K_S among them), with and without an
/// importance matrix: the types `llama-quantize --dry-run` printed for the tiny imatrix model
/// (fixtures/expected/imatrix/reference.json, fixtures/gen/gen_imatrix.py) are ours.
#[test]
fn imatrix_mixes_choose_what_llama_quantize_dry_run_chose() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/expected/imatrix/reference.json");
    let v: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    let input = tiny_imatrix_model();
    let mut checked = 0;
    for (key, has_imatrix) in [("dry_run", true), ("dry_run_no_imatrix", false)] {
        for (ty, want) in v[key].as_object().unwrap() {
            let params = MixParams {
                ftype: Ftype::parse(ty).unwrap(),
                pure: false,
                tensor_types: vec![],
                output_type: None,
                token_embd_type: None,
                leave_output: false,
                arch: "llama".into(),
                n_layer: 8,
                n_gqa: 2,
                n_expert: 0,
                has_imatrix,
            };
            let chosen = choose(&input, &params);
            assert_eq!(want.as_object().unwrap().len(), 58, "{key} {ty}");
            for (t, c) in input.iter().zip(chosen) {
                let Some(w) = want.get(&t.name) else {
                    assert_eq!(t.n_dims, 1, "{key} {ty}: {} not quantized", t.name);
                    continue;
                };
                assert!(
                    c.dtype.name().eq_ignore_ascii_case(w.as_str().unwrap()),
                    "{key} {ty}: {} is {} for llama-quantize, {} for us",
                    t.name,
                    w,
                    c.dtype.name()
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 33);
}
