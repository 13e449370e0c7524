//! Our plan against what llama.cpp's convert_hf_to_gguf.py wrote for the same tiny releases
//! (`fixtures/good/arch/<name>/` → `fixtures/expected/arch/<name>.json`, made by
//! `fixtures/gen/gen_arch.py`).
//!
//! Compared: every KV (key, GGUF type, value; long arrays by element type, count and sha256 of
//! the elements as stored), every tensor (order, name, ne, type), and for `--outtype f32` the
//! sha256 of each tensor's bytes, computed here from the safetensors bytes with plain loops:
//! widen to f32, gather rows through our q/k permutation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};
use weightport_arch::{plan, ArchPlan, Origin, OutType, PlanOptions, SourceTensor};
use weightport_core::{DType, MetaType, MetaValue};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A safetensors file, parsed with no validation (the fixtures are trusted).
struct St {
    header: BTreeMap<String, Value>,
    data: Vec<u8>,
}

fn read_st(path: &Path) -> St {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: BTreeMap<String, Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    St {
        header,
        data: bytes[8 + n..].to_vec(),
    }
}

fn dtype_of(s: &str) -> DType {
    match s {
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "U8" => DType::U8,
        other => panic!("fixture dtype {other}"),
    }
}

/// Every tensor of the release, with the file it lives in.
fn sources(dir: &Path) -> (Vec<SourceTensor>, BTreeMap<String, St>) {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    let mut sts = BTreeMap::new();
    for f in files {
        let st = read_st(&dir.join(&f));
        for (name, info) in &st.header {
            if name == "__metadata__" {
                continue;
            }
            out.push(SourceTensor {
                name: name.clone(),
                shape: info["shape"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap())
                    .collect(),
                dtype: dtype_of(info["dtype"].as_str().unwrap()),
                file: f.clone(),
            });
        }
        sts.insert(f, st);
    }
    // Not in file order on purpose: the plan must order them like the reference.
    out.reverse();
    (out, sts)
}

fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // subnormal: normalize
            let mut e = 127 - 15 + 1;
            let mut m = m;
            while m & 0x400 == 0 {
                m <<= 1;
                e -= 1;
            }
            sign | ((e as u32) << 23) | ((m & 0x3ff) << 13)
        }
        (31, 0) => sign | 0x7f80_0000,
        (31, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// The tensor's elements widened to f32 (or kept as stored f16/bf16 bits when `keep_f16`), rows
/// gathered through the plan's permutation (or not, when `permute` is false).
fn output_bytes(
    p: &ArchPlan,
    sts: &BTreeMap<String, St>,
    srcs: &[SourceTensor],
    i: usize,
    keep_f16: bool,
    permute: bool,
) -> Vec<u8> {
    let t = &p.tensors[i];
    let src = match &t.origin {
        Origin::Hf { index, .. } => &srcs[*index],
        Origin::Rows { index, rows, .. } => {
            let all = part_bytes(sts, &srcs[*index], None, keep_f16);
            let row = all.len() / srcs[*index].shape[0] as usize;
            return all[rows.start as usize * row..rows.end as usize * row].to_vec();
        }
        Origin::PadRows { index, .. } => {
            let mut all = part_bytes(sts, &srcs[*index], None, keep_f16);
            let row = all.len() / srcs[*index].shape[0] as usize;
            all.resize(t.shape[0] as usize * row, 0);
            return all;
        }
        Origin::Generated(v) => return v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Origin::View { index, view, .. } => {
            // The view's elements one by one, each at offset + Σ i_k · stride_k.
            let all = part_bytes(sts, &srcs[*index], None, keep_f16);
            let n: u64 = srcs[*index].shape.iter().product();
            let e = all.len() / n as usize;
            let count: u64 = view.shape().iter().product();
            return (0..count)
                .flat_map(|i| {
                    let at = view_index(view, i);
                    all[at * e..(at + 1) * e].to_vec()
                })
                .collect();
        }
        Origin::Views { index, views, .. } => {
            let all = part_bytes(sts, &srcs[*index], None, keep_f16);
            let n: u64 = srcs[*index].shape.iter().product();
            let e = all.len() / n as usize;
            return views
                .iter()
                .flat_map(|view| {
                    let count: u64 = view.shape().iter().product();
                    (0..count).flat_map(|i| {
                        let at = view_index(view, i);
                        all[at * e..(at + 1) * e].to_vec()
                    })
                })
                .collect();
        }
        Origin::Blocks { parts, map } => {
            // Block k: `width` bytes of each part's view, then the map.
            let n_blocks = parts[0].view.shape().iter().product::<u64>() / parts[0].width;
            let mut out = Vec::new();
            for k in 0..n_blocks {
                let mut block = Vec::new();
                for part in parts {
                    let raw = raw_bytes(sts, &srcs[part.index]);
                    for b in k * part.width..(k + 1) * part.width {
                        block.push(raw[view_index(&part.view, b)]);
                    }
                }
                map.apply(&mut block);
                out.extend(block);
            }
            return out;
        }
        Origin::Stack { sources } => {
            // The parts one after another, each converted alone (no permutation).
            return sources
                .iter()
                .flat_map(|&(_, j)| part_bytes(sts, &srcs[j], None, keep_f16))
                .collect();
        }
    };
    let perm = match &t.permute {
        Some(q) if permute => Some(q.rows(t.shape[0] as usize).unwrap()),
        _ => None,
    };
    part_bytes(sts, src, perm, keep_f16)
}

/// One source tensor's elements, rows gathered through `perm`, widened to f32 unless `keep_f16`.
/// The stored bytes of `src`.
fn raw_bytes<'a>(sts: &'a BTreeMap<String, St>, src: &SourceTensor) -> &'a [u8] {
    let st = &sts[&src.file];
    let off = &st.header[&src.name]["data_offsets"];
    let (a, b) = (off[0].as_u64().unwrap(), off[1].as_u64().unwrap());
    &st.data[a as usize..b as usize]
}

/// Element `i` (row-major over the view's sizes) of `view`: its index in the source.
fn view_index(view: &weightport_arch::View, mut i: u64) -> usize {
    let mut at = view.offset;
    for &(size, stride) in view.dims.iter().rev() {
        at += (i % size) * stride;
        i /= size;
    }
    at as usize
}

fn part_bytes(
    sts: &BTreeMap<String, St>,
    src: &SourceTensor,
    perm: Option<Vec<u32>>,
    keep_f16: bool,
) -> Vec<u8> {
    let st = &sts[&src.file];
    let info = &st.header[&src.name];
    let off: Vec<usize> = info["data_offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let raw = &st.data[off[0]..off[1]];
    let rows = src.shape[0] as usize;
    let perm: Vec<u32> = perm.unwrap_or_else(|| (0..rows as u32).collect());
    if keep_f16 {
        assert!(matches!(src.dtype, DType::F16 | DType::BF16));
        let row_bytes = raw.len() / rows;
        return perm
            .iter()
            .flat_map(|&r| &raw[r as usize * row_bytes..(r as usize + 1) * row_bytes])
            .copied()
            .collect();
    }
    let vals: Vec<f32> = match src.dtype {
        DType::F32 => raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        DType::F16 => raw
            .chunks_exact(2)
            .map(|c| f16_to_f32(u16::from_le_bytes(c.try_into().unwrap())))
            .collect(),
        DType::BF16 => raw
            .chunks_exact(2)
            .map(|c| f32::from_bits((u16::from_le_bytes(c.try_into().unwrap()) as u32) << 16))
            .collect(),
        _ => unreachable!(),
    };
    let row_len = vals.len() / rows;
    let mut out = Vec::with_capacity(vals.len() * 4);
    for &r in &perm {
        for v in &vals[r as usize * row_len..(r as usize + 1) * row_len] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out
}

fn type_name(v: &MetaValue) -> &'static str {
    match v {
        MetaValue::Str(_) => "string",
        MetaValue::Bool(_) => "bool",
        MetaValue::U32(_) => "uint32",
        MetaValue::I32(_) => "int32",
        MetaValue::F32(_) => "float32",
        MetaValue::U64(_) => "uint64",
        MetaValue::TypedArray { .. } => "array",
        other => panic!("unexpected KV value {other:?}"),
    }
}

fn elem_name(t: MetaType) -> &'static str {
    match t {
        MetaType::Str => "string",
        MetaType::I32 => "int32",
        MetaType::F32 => "float32",
        MetaType::U32 => "uint32",
        MetaType::U8 => "uint8",
        other => panic!("unexpected element type {other:?}"),
    }
}

/// sha256 of the array's elements as GGUF stores them.
fn stored_sha(items: &[MetaValue]) -> String {
    let mut h = Sha256::new();
    for it in items {
        match it {
            MetaValue::Str(s) => {
                h.update((s.len() as u64).to_le_bytes());
                h.update(s.as_bytes());
            }
            MetaValue::I32(v) => h.update(v.to_le_bytes()),
            MetaValue::F32(v) => h.update(v.to_le_bytes()),
            MetaValue::U32(v) => h.update(v.to_le_bytes()),
            MetaValue::U8(v) => h.update([*v]),
            other => panic!("unexpected element {other:?}"),
        }
    }
    hex(&h.finalize())
}

fn scalar_matches(ours: &MetaValue, want: &Value) -> bool {
    match ours {
        MetaValue::Str(s) => want.as_str() == Some(s),
        MetaValue::Bool(b) => want.as_bool() == Some(*b),
        MetaValue::U32(v) => want.as_u64() == Some(*v as u64),
        MetaValue::I32(v) => want.as_i64() == Some(*v as i64),
        MetaValue::F32(v) => want.as_f64() == Some(*v as f64),
        _ => false,
    }
}

/// Same keys in the same order, same types, same values.
fn compare_kv(what: &str, kv: &[(String, MetaValue)], ref_kv: &[Value]) {
    let ours: Vec<&str> = kv.iter().map(|(k, _)| k.as_str()).collect();
    let theirs: Vec<&str> = ref_kv.iter().map(|e| e["key"].as_str().unwrap()).collect();
    assert_eq!(ours, theirs, "{what}: KV keys or order differ");
    for ((k, v), e) in kv.iter().zip(ref_kv) {
        assert_eq!(type_name(v), e["type"], "{what}: type of {k}");
        match v {
            MetaValue::TypedArray { elem, items } => {
                assert_eq!(elem_name(*elem), e["elem"], "{what}: element type of {k}");
                assert_eq!(
                    items.len() as u64,
                    e["count"].as_u64().unwrap(),
                    "{what}: {k}"
                );
                assert_eq!(stored_sha(items), e["sha256"], "{what}: elements of {k}");
            }
            _ => assert!(
                scalar_matches(v, &e["value"]),
                "{what}: {k} = {v:?}, want {}",
                e["value"]
            ),
        }
    }
}

fn expected(name: &str) -> Value {
    let p = fixtures().join(format!("expected/arch/{name}.json"));
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// The output types the reference was run with for `name`, other than f32 and f16 (checked by
/// name: KVs, tensor names, ne and types).
fn other_outtypes(name: &str) -> Vec<String> {
    let exp = expected(name);
    exp["outtypes"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "f32" && *k != "f16")
        .cloned()
        .collect()
}

/// Plans `name` for `outtype` and compares with the reference; returns the plan.
fn check(name: &str, outtype: &str, pre: Option<&str>) -> ArchPlan {
    let dir = fixtures().join("good/arch").join(name);
    let exp = expected(name);
    let ref_out = &exp["outtypes"][outtype];
    let ref_kv = ref_out["kv"].as_array().unwrap();
    let (srcs, sts) = sources(&dir);
    let p = plan(&dir, &srcs, &plan_options(outtype, ref_kv, pre)).unwrap();

    compare_kv(&format!("{name}/{outtype}"), &p.kv, ref_kv);

    // ---- tensors: order, names, ne, types; f32 bytes.
    let ref_t = ref_out["tensors"].as_array().unwrap();
    let names: Vec<&str> = p.tensors.iter().map(|t| t.name.as_str()).collect();
    let ref_names: Vec<&str> = ref_t.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names, ref_names,
        "{name}/{outtype}: tensor names or order differ"
    );
    let case = Case {
        what: format!("{name}/{outtype}"),
        p: &p,
        srcs: &srcs,
        sts: &sts,
        f32_out: outtype == "f32",
    };
    let permuted = (0..ref_t.len())
        .filter(|&i| case.check_tensor(i, &ref_t[i]))
        .count();
    if p.arch == "llama" && outtype == "f32" {
        // q and k of every block were checked byte for byte.
        let blocks = p.hparams.u32(&["num_hidden_layers"]).unwrap().unwrap();
        assert_eq!(permuted as u32, 2 * blocks, "{name}");
    }
    p
}

/// The options the reference's file was written with. `general.name` comes from the
/// reference's model-card/directory heuristics: it is passed in from the reference's keys.
fn plan_options(outtype: &str, ref_kv: &[Value], pre: Option<&str>) -> PlanOptions {
    let ref_name = ref_kv
        .iter()
        .find(|e| e["key"] == "general.name")
        .map(|e| e["value"].as_str().unwrap().to_owned());
    let mut o = PlanOptions::default();
    o.outtype = match outtype {
        "f32" => OutType::F32,
        "f16" => OutType::F16,
        "bf16" => OutType::Bf16,
        "q8_0" => OutType::Q8_0,
        _ => unreachable!(),
    };
    o.card.name = ref_name;
    o.pre_tokenizer = pre.map(str::to_owned);
    o.vocab = true;
    o.sort_names = true;
    o
}

/// One plan of a release against the reference's tensors.
struct Case<'a> {
    /// `release/outtype`, for the messages.
    what: String,
    p: &'a ArchPlan,
    srcs: &'a [SourceTensor],
    sts: &'a BTreeMap<String, St>,
    f32_out: bool,
}

impl Case<'_> {
    /// Compares output tensor `i` with the reference's `r`: ne and type, and the bytes when
    /// they can be equal without the output cast; returns whether a q/k permutation was
    /// checked by them.
    fn check_tensor(&self, i: usize, r: &Value) -> bool {
        let (name, t, srcs) = (&self.what, &self.p.tensors[i], self.srcs);
        let ne: Vec<u64> = r["ne"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(t.ne(), ne, "{name}: ne of {}", t.name);
        assert_eq!(
            t.dtype.name(),
            r["type"].as_str().unwrap(),
            "{name}: type of {}",
            t.name
        );
        let src_dtype = match &t.origin {
            Origin::Hf { index, .. }
            | Origin::Rows { index, .. }
            | Origin::PadRows { index, .. }
            | Origin::View { index, .. }
            | Origin::Views { index, .. } => srcs[*index].dtype,
            Origin::Generated(_) => DType::F32,
            Origin::Stack { sources } => srcs[sources[0].1].dtype,
            Origin::Blocks { .. } => DType::MXFP4,
        };
        // Exact byte comparisons: f32 output, or f16/bf16 output of a source of the same type.
        let same16 = t.dtype == src_dtype && matches!(t.dtype, DType::F16 | DType::BF16);
        // Repacked blocks are the release's bytes rearranged, whatever the output type.
        let same16 = same16 || matches!(t.origin, Origin::Blocks { .. });
        // `1 + w` norms are compared as whole files (tests/it/hf_gguf.rs).
        if !(self.f32_out || same16) || t.value.is_some() {
            return false;
        }
        let bytes = output_bytes(self.p, self.sts, srcs, i, same16, true);
        let sha = |b: &[u8]| hex(&Sha256::digest(b));
        assert_eq!(sha(&bytes), r["sha256"], "{name}: bytes of {}", t.name);
        if t.permute.is_none() {
            return false;
        }
        // The permutation is what makes them equal.
        let plain = output_bytes(self.p, self.sts, srcs, i, same16, false);
        assert_ne!(sha(&plain), r["sha256"], "{name}: {}", t.name);
        true
    }
}

#[test]
fn llama_spm_f32_matches_reference() {
    let p = check("llama", "f32", None);
    assert_eq!(p.arch, "llama");
    assert!(p.chkhsh.is_none());
    let q = p
        .tensors
        .iter()
        .find(|t| t.name == "blk.0.attn_q.weight")
        .unwrap();
    let k = p
        .tensors
        .iter()
        .find(|t| t.name == "blk.0.attn_k.weight")
        .unwrap();
    assert_eq!(q.permute.unwrap().n_head_kv, Some(4));
    assert_eq!(k.permute.unwrap().n_head_kv, Some(2));
    assert!(p.tensors.iter().any(|t| t.name == "output.weight"));
}

#[test]
fn llama_spm_f16_matches_reference() {
    check("llama", "f16", None);
    for o in other_outtypes("llama") {
        check("llama", &o, None);
    }
}

#[test]
fn mistral_spm_matches_reference() {
    let p = check("mistral", "f32", None);
    assert_eq!(p.hf_arch, "MistralForCausalLM");
    check("mistral", "f16", None);
    for o in other_outtypes("mistral") {
        check("mistral", &o, None);
    }
}

#[test]
fn qwen2_bpe_tied_matches_reference() {
    let exp = expected("qwen2");
    let pre = exp["pre_override"].as_str().unwrap();
    let p = check("qwen2", "f32", Some(pre));
    // The check hash is computed exactly like the reference's.
    assert_eq!(p.chkhsh.as_deref(), exp["chkhsh"].as_str());
    // Tied embeddings: no output.weight, and no permutation (NEOX rope).
    assert!(!p.tensors.iter().any(|t| t.name == "output.weight"));
    assert!(p.tensors.iter().all(|t| t.permute.is_none()));
    check("qwen2", "f16", Some(pre));
    for o in other_outtypes("qwen2") {
        check("qwen2", &o, Some(pre));
    }
}

#[test]
fn qwen3_bpe_untied_matches_reference() {
    let exp = expected("qwen3");
    let pre = exp["pre_override"].as_str().unwrap();
    let p = check("qwen3", "f32", Some(pre));
    assert_eq!(p.arch, "qwen3");
    assert!(p.tensors.iter().any(|t| t.name == "output.weight"));
    assert!(p
        .tensors
        .iter()
        .any(|t| t.name == "blk.1.attn_k_norm.weight" && t.force_f32));
    check("qwen3", "f16", Some(pre));
    for o in other_outtypes("qwen3") {
        check("qwen3", &o, Some(pre));
    }
}

#[test]
fn llama3_bpe_rope_freqs_matches_reference() {
    let exp = expected("llama3");
    let pre = exp["pre_override"].as_str().unwrap();
    let p = check("llama3", "f32", Some(pre));
    assert_eq!(p.chkhsh.as_deref(), exp["chkhsh"].as_str());
    assert_eq!(p.tensors[0].name, "rope_freqs.weight");
    assert!(matches!(p.tensors[0].origin, Origin::Generated(_)));
    check("llama3", "f16", Some(pre));
    for o in other_outtypes("llama3") {
        check("llama3", &o, Some(pre));
    }
}

/// transformers-4 style config.json files (top-level rope_theta, `rope_scaling` with `type`,
/// no head_dim, no num_key_value_heads): the reference's --vocab-only KVs.
#[test]
fn legacy_configs_match_reference_hparams() {
    for name in [
        "cfg_llama2_legacy",
        "cfg_llama_linear",
        "cfg_mistral_v01",
        "cfg_qwen25_yarn",
        "cfg_qwen3_legacy",
    ] {
        let exp = expected(name);
        let dir = fixtures().join("good/arch").join(name);
        let ref_kv = exp["kv"].as_array().unwrap();
        let mut opts = PlanOptions::default();
        opts.outtype = OutType::F16;
        opts.card.name = ref_kv
            .iter()
            .find(|e| e["key"] == "general.name")
            .map(|e| e["value"].as_str().unwrap().to_owned());
        opts.pre_tokenizer = exp["pre_override"].as_str().map(str::to_owned);
        opts.vocab = true;
        opts.sort_names = true;
        let p = plan(&dir, &[], &opts).unwrap();
        assert!(p.tensors.is_empty());
        compare_kv(name, &p.kv, ref_kv);
    }
}

#[test]
fn bert_wordpiece_matches_reference() {
    let exp = expected("bert");
    let pre = exp["pre_override"].as_str().unwrap();
    let p = check("bert", "f32", Some(pre));
    assert_eq!(p.chkhsh.as_deref(), exp["chkhsh"].as_str());
    assert!(p.dropped.iter().any(|(n, _)| n.starts_with("pooler.")));
    check("bert", "f16", Some(pre));
    for o in other_outtypes("bert") {
        check("bert", &o, Some(pre));
    }
}

/// Sentence-transformers releases (fixtures/gen/gen_arch_st.py): `{arch}.pooling_type` from
/// `modules.json` + the Pooling module's config (mean with a Normalize module, cls, and
/// Qwen3-Embedding's lasttoken), at the reference's place among the KVs.
#[test]
fn sentence_transformers_pooling_matches_reference() {
    for (name, want) in [("bert_st", 1), ("bert_st_cls", 2), ("qwen3_st", 3)] {
        let exp = expected(name);
        let pre = exp["pre_override"].as_str();
        let p = check(name, "f32", pre);
        let arch = p.arch.clone();
        let pooling =
            p.kv.iter()
                .find(|(k, _)| *k == format!("{arch}.pooling_type"))
                .map(|(_, v)| v.clone());
        assert_eq!(pooling, Some(MetaValue::U32(want)), "{name}");
        check(name, "f16", pre);
        for o in other_outtypes(name) {
            check(name, &o, pre);
        }
    }
}

/// transformers' `encode` ignores the truncation and padding a `tokenizer.json` configures
/// (all-MiniLM-L6-v2's truncates at 128); so does the check hash.
#[test]
fn check_hash_ignores_truncation_and_padding() {
    let exp = expected("bert");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bert-truncating");
    std::fs::create_dir_all(&dir).unwrap();
    let src = fixtures().join("good/arch/bert");
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    let mut tj: Value =
        serde_json::from_slice(&std::fs::read(dir.join("tokenizer.json")).unwrap()).unwrap();
    tj["truncation"] = serde_json::json!({"direction": "Right", "max_length": 8,
        "strategy": "LongestFirst", "stride": 0});
    tj["padding"] = serde_json::json!({"strategy": {"Fixed": 200}, "direction": "Right",
        "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"});
    std::fs::write(dir.join("tokenizer.json"), serde_json::to_vec(&tj).unwrap()).unwrap();
    let (srcs, _) = sources(&dir);
    let mut opts = PlanOptions::default();
    opts.pre_tokenizer = Some("bert-bge".into());
    let p = plan(&dir, &srcs, &opts).unwrap();
    assert_eq!(p.chkhsh.as_deref(), exp["chkhsh"].as_str());
}

#[test]
fn unknown_pre_tokenizer_hash_is_refused_with_the_hash() {
    let exp = expected("qwen2");
    let dir = fixtures().join("good/arch/qwen2");
    let (srcs, _) = sources(&dir);
    let err = plan(&dir, &srcs, &PlanOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains(exp["chkhsh"].as_str().unwrap()), "{err}");
    assert!(err.contains("`pre_tokenizer` NAME"), "{err}");
}

#[test]
fn embedded_pre_table_is_the_references() {
    let exp: Value = serde_json::from_slice(
        &std::fs::read(fixtures().join("expected/arch/pre_hashes.json")).unwrap(),
    )
    .unwrap();
    let t = weightport_arch::tokenizer::pre_table();
    assert_eq!(t.chktxt, exp["chktxt"].as_str().unwrap());
    let table: Vec<(String, String)> = serde_json::from_value(exp["table"].clone()).unwrap();
    assert_eq!(t.table, table);
    assert_eq!(
        weightport_arch::tokenizer::pre_name(
            "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea"
        ),
        Some("qwen2")
    );
}

#[test]
fn mixtral_experts_stack_like_the_reference() {
    let p = check("mixtral", "f32", None);
    // Every block's three expert stacks, each [4, rows, cols] from the four experts in order.
    let stacks: Vec<&weightport_arch::OutTensor> = p
        .tensors
        .iter()
        .filter(|t| matches!(t.origin, Origin::Stack { .. }))
        .collect();
    assert_eq!(stacks.len(), 6);
    for t in &stacks {
        let Origin::Stack { sources } = &t.origin else {
            unreachable!()
        };
        assert_eq!(t.shape[0], 4, "{}", t.name);
        for (x, (name, _)) in sources.iter().enumerate() {
            assert!(name.contains(&format!(".experts.{x}.")), "{name}");
        }
    }
    check("mixtral", "f16", None);
    for o in other_outtypes("mixtral") {
        check("mixtral", &o, None);
    }
}

#[test]
fn gemma3_text_and_multimodal_match_reference() {
    for name in ["gemma3", "gemma3_mm", "gemma"] {
        for o in ["f32", "f16", "bf16", "q8_0"] {
            check(name, o, None);
        }
    }
    // The multimodal release: the vision tower and projector are dropped, `language_model.`
    // is removed from the text model's names.
    let p = check("gemma3_mm", "f16", None);
    assert!(p
        .dropped
        .iter()
        .any(|(n, _)| n.starts_with("vision_tower.")));
    assert!(p
        .dropped
        .iter()
        .any(|(n, _)| n.starts_with("multi_modal_projector.")));
    assert!(p.kv.contains(&(
        "gemma3.final_logit_softcapping".into(),
        MetaValue::F32(30.0)
    )));
}

#[test]
fn phi3_fused_tensors_and_longrope_match_reference() {
    for o in ["f32", "f16", "bf16", "q8_0"] {
        let p = check("phi3", o, None);
        assert_eq!(p.tensors[0].name, "rope_factors_long.weight");
        assert_eq!(p.kv[1].0, "phi3.rope.scaling.attn_factor");
    }
}

#[test]
fn gemma3_embedding_is_cut_to_the_vocabulary() {
    // A release whose embedding has more rows than config.json's vocab_size: the output keeps
    // rows 0..vocab_size of the source (`data_torch[:n_vocab]`), as one Rows origin.
    let dir = fixtures().join("good/arch/gemma3");
    let tmp = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
    }
    let cfg = tmp.path().join("config.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&cfg).unwrap()).unwrap();
    v["vocab_size"] = 540.into();
    std::fs::write(&cfg, serde_json::to_vec(&v).unwrap()).unwrap();
    let (srcs, _) = sources(tmp.path());
    let p = plan(tmp.path(), &srcs, &{
        let mut o = PlanOptions::default();
        o.outtype = OutType::F16;
        o
    })
    .unwrap();
    let t = p
        .tensors
        .iter()
        .find(|t| t.name == "token_embd.weight")
        .unwrap();
    assert_eq!(t.shape, vec![540, 64]);
    assert!(matches!(&t.origin, Origin::Rows { rows, .. } if *rows == (0..540)));
}

#[test]
fn mixtral_with_8_experts_matches_reference() {
    for o in ["f32", "f16", "bf16", "q8_0"] {
        let p = check("mixtral8", o, None);
        assert!(p
            .kv
            .contains(&("llama.expert_count".into(), MetaValue::U32(8))));
    }
}

#[test]
fn qwen2moe_shared_expert_and_stacks_match_reference() {
    let pre = Some("qwen2");
    let p = check("qwen2moe", "f32", pre);
    let stacks = p
        .tensors
        .iter()
        .filter(|t| matches!(t.origin, Origin::Stack { .. }))
        .count();
    assert_eq!(stacks, 6);
    check("qwen2moe", "f16", pre);
    for o in other_outtypes("qwen2moe") {
        check("qwen2moe", &o, pre);
    }
}

/// Qwen3-MoE: Qwen2-MoE's expert table, Qwen3's per-head q/k norms, no shared expert (only
/// `expert_feed_forward_length` is written).
#[test]
fn qwen3moe_matches_reference() {
    let pre = Some("qwen2");
    for o in ["f32", "f16", "bf16", "q8_0"] {
        let p = check("qwen3moe", o, pre);
        let stacks = p
            .tensors
            .iter()
            .filter(|t| matches!(t.origin, Origin::Stack { .. }))
            .count();
        assert_eq!(stacks, 6);
        assert!(p.kv.contains(&(
            "qwen3moe.expert_feed_forward_length".into(),
            MetaValue::U32(32)
        )));
        assert!(!p
            .kv
            .iter()
            .any(|(k, _)| k == "qwen3moe.expert_shared_feed_forward_length"));
    }
}

/// OLMoE: the reference overwrites the RMS epsilon (1e-6 in config.json) with 1e-5 where the
/// common keys wrote it.
#[test]
fn olmoe_matches_reference() {
    let pre = Some("olmo");
    for o in ["f32", "f16", "bf16", "q8_0"] {
        let p = check("olmoe", o, pre);
        let eps: Vec<&MetaValue> =
            p.kv.iter()
                .filter(|(k, _)| k == "olmoe.attention.layer_norm_rms_epsilon")
                .map(|(_, v)| v)
                .collect();
        assert_eq!(eps, [&MetaValue::F32(1e-5)]);
    }
}

/// DeepSeek-V2: `kv_b_proj` split into two strided views (each head's key rows transposed, its
/// value rows), routed experts stacked, shared experts named, MLA and expert-group keys.
#[test]
fn deepseek2_matches_reference() {
    let pre = Some("qwen2");
    for o in ["f32", "f16", "bf16", "q8_0"] {
        let p = check("deepseek2", o, pre);
        let views: Vec<&str> = p
            .tensors
            .iter()
            .filter(|t| matches!(t.origin, Origin::View { .. }))
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(views.len(), 6, "{views:?}");
        assert!(p.kv.contains(&(
            "deepseek2.attention.head_count_kv".into(),
            MetaValue::U32(1)
        )));
        assert!(p
            .kv
            .contains(&("deepseek2.expert_group_count".into(), MetaValue::U32(2))));
    }
}

/// DeepSeek-V2-Lite's shape with the real release's legacy config.json: direct `q_proj`, no
/// `q_lora_rank` key (null in config.json), `rope_scaling` folded as transformers 5 folds it,
/// `scoring_func` softmax → `expert_gating_func` 1.
#[test]
fn deepseek2_lite_legacy_config_matches_reference() {
    for o in ["f32", "f16", "bf16", "q8_0"] {
        let p = check("deepseek2_lite", o, Some("qwen2"));
        assert!(!p
            .kv
            .iter()
            .any(|(k, _)| k == "deepseek2.attention.q_lora_rank"));
        assert!(p
            .kv
            .contains(&("deepseek2.expert_gating_func".into(), MetaValue::U32(1))));
        assert!(p.tensors.iter().any(|t| t.name == "blk.0.attn_q.weight"));
    }
}

/// GPT-OSS unquantized: the fused experts transposed and split by alternating rows (views).
#[test]
fn gptoss_matches_reference() {
    for o in ["f32", "f16", "bf16", "q8_0"] {
        let p = check("gptoss", o, Some("qwen2"));
        let views = p
            .tensors
            .iter()
            .filter(|t| matches!(t.origin, Origin::View { .. }))
            .count();
        // Per block: gate, up, down weights and gate, up biases.
        assert_eq!(views, 10);
    }
}

/// GPT-OSS with MXFP4 experts: the blocks repacked first, `general.file_type` MOSTLY_MXFP4_MOE
/// (38) for f32/f16/bf16, each repacked tensor's bytes equal to the reference's.
#[test]
fn gptoss_mxfp4_matches_reference() {
    for (o, ft) in [("f32", 38), ("f16", 38), ("bf16", 38), ("q8_0", 7)] {
        let p = check("gptoss_mxfp4", o, Some("qwen2"));
        let first: Vec<&str> = p.tensors[..6].iter().map(|t| t.name.as_str()).collect();
        assert!(
            p.tensors[..6]
                .iter()
                .all(|t| matches!(t.origin, Origin::Blocks { .. })),
            "{first:?}"
        );
        assert!(p
            .kv
            .contains(&("general.file_type".into(), MetaValue::U32(ft))));
    }
}

#[test]
fn moe_configs_of_dense_or_unknown_architectures_are_refused() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("arch-moe-refused");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["tokenizer.model", "tokenizer_config.json"] {
        std::fs::copy(fixtures().join("good/arch/llama").join(f), dir.join(f)).unwrap();
    }
    let cfg = r#"{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
        "hidden_size": 64, "num_attention_heads": 4, "num_local_experts": 4, "vocab_size": 560}"#;
    std::fs::write(dir.join("config.json"), cfg).unwrap();
    let msg = plan(&dir, &[], &PlanOptions::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("MixtralForCausalLM"), "{msg}");
    std::fs::write(
        dir.join("config.json"),
        r#"{"architectures": ["DbrxForCausalLM"], "num_hidden_layers": 2}"#,
    )
    .unwrap();
    let msg = plan(&dir, &[], &PlanOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("DbrxForCausalLM") && msg.contains("MixtralForCausalLM"),
        "{msg}"
    );
}

#[test]
fn incomplete_experts_are_refused() {
    let dir = fixtures().join("good/arch/mixtral");
    let (mut srcs, _) = sources(&dir);
    srcs.retain(|t| t.name != "model.layers.1.block_sparse_moe.experts.2.w3.weight");
    let msg = plan(&dir, &srcs, &PlanOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("block 1 holds 11 of its 12 expert tensors"),
        "{msg}"
    );
}

#[test]
fn unsupported_architecture_is_refused_before_anything_else() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("arch-unsupported");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"architectures": ["FooBarForCausalLM"], "num_hidden_layers": 2}"#,
    )
    .unwrap();
    // No weights, no tokenizer: the refusal must come from config.json alone.
    let err = plan(&dir, &[], &PlanOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("FooBarForCausalLM"), "{msg}");
    assert!(
        msg.contains("LlamaForCausalLM") && msg.contains("Qwen2ForCausalLM"),
        "{msg}"
    );
    assert_eq!(err.kind(), "unsupported");
}

/// StarCoder2, Command-R and GPT-2 (fixtures/gen/gen_arch_dense3.py): every KV and tensor name,
/// order, `ne` and type; f32 bytes. GPT-2's Conv1D weights are transposed: their f32 bytes equal
/// the reference's only through the transpose.
#[test]
fn starcoder2_cohere_gpt2_match_reference() {
    for (name, pre) in [
        ("starcoder2", "starcoder"),
        ("cohere", "command-r"),
        ("cohere_qk", "command-r"),
        ("gpt2", "gpt-2"),
    ] {
        for o in ["f32", "f16", "bf16", "q8_0"] {
            check(name, o, Some(pre));
        }
    }
    let p = check("cohere", "f16", Some("command-r"));
    // `model_max_length` (2048) wins over `max_position_embeddings` (512), in the common place.
    let ctx =
        p.kv.iter()
            .position(|(k, _)| k == "command-r.context_length")
            .unwrap();
    assert_eq!(p.kv[ctx].1, MetaValue::U32(2048));
    assert_eq!(p.kv[ctx - 1].0, "command-r.block_count");
    let p = check("gpt2", "f32", Some("gpt-2"));
    let transposed: Vec<&str> = p
        .tensors
        .iter()
        .filter(|t| matches!(t.origin, Origin::View { .. }))
        .map(|t| t.name.as_str())
        .collect();
    // c_attn, attn c_proj, c_fc, mlp c_proj per block.
    assert_eq!(transposed.len(), 8, "{transposed:?}");
    assert!(transposed.contains(&"blk.1.attn_qkv.weight"));
}

/// Embedding encoders (fixtures/gen/gen_arch_enc.py): every KV and tensor of the reference's
/// XLM-RoBERTa and ModernBERT files, f32 bytes included (XLM-R's `position_embd` is rows 2..66
/// of the source: positions start after `pad_token_id` 1).
#[test]
fn xlm_roberta_and_modernbert_match_reference() {
    for name in ["xlmr_st", "modernbert"] {
        let pre = expected(name)["pre_override"].as_str().map(str::to_owned);
        for o in ["f32", "f16", "bf16", "q8_0"] {
            check(name, o, pre.as_deref());
        }
    }
    let p = check("xlmr_st", "f32", None);
    let pos = p
        .tensors
        .iter()
        .find(|t| t.name == "position_embd.weight")
        .unwrap();
    assert!(
        matches!(&pos.origin, Origin::Rows { rows, .. } if *rows == (2..66)),
        "{:?}",
        pos.origin
    );
    assert!(p
        .kv
        .contains(&("bert.context_length".into(), MetaValue::U32(64))));
}
