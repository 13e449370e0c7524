//! Round trip: arbitrary tensors (dtype, shape, bytes) as a safetensors file → each writer
//! (one safetensors file, a sharded HF repo with tiny shards, GGUF) → each reader. Whatever a
//! writer accepts must read back tensor for tensor with the same dtype, shape and bytes, and
//! `verify --against` the input must find no difference. Small chunks and two threads, so tensors
//! span many chunks and shards.
#![no_main]

use std::path::{Path, PathBuf};

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use weightport_core::DType;
use weightport_engine::{comparable_hashes, compare};
use weightport_engine::{convert, open_input, ConvertOptions, NoProgress, OpenRequest};

const DTYPES: [DType; 10] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::F64,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::BOOL,
];

/// A safetensors file made from the fuzz input: byte 0 the tensor count, then per tensor a dtype
/// byte, a rank byte and one byte per dimension; the rest fills the tensors' data in order.
fn safetensors_from(data: &[u8]) -> Option<Vec<u8>> {
    let (&count, mut rest) = data.split_first()?;
    let mut header = Map::new();
    let mut sizes = Vec::new();
    for i in 0..1 + usize::from(count % 4) {
        let (&d, r) = rest.split_first()?;
        let (&rank, r) = r.split_first()?;
        let rank = usize::from(rank % 4);
        let dims = r.get(..rank)?;
        rest = &r[rank..];
        let dtype = DTYPES[usize::from(d) % DTYPES.len()];
        let shape: Vec<u64> = dims
            .iter()
            .map(|b| u64::from(b % 5) * (1 + u64::from(b / 64)))
            .collect();
        let len = dtype.byte_len(&shape).ok()?;
        let start: u64 = sizes.iter().sum();
        header.insert(
            format!("layers.{i}.weight"),
            json!({"dtype": dtype.name(), "shape": shape, "data_offsets": [start, start + len]}),
        );
        sizes.push(len);
    }
    let total: u64 = sizes.iter().sum();
    if total > 1 << 16 {
        return None;
    }
    let mut head = serde_json::to_vec(&Value::Object(header)).ok()?;
    head.resize(head.len().next_multiple_of(8), b' ');
    let mut file = (head.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&head);
    file.extend((0..total as usize).map(|k| rest.get(k % rest.len().max(1)).copied().unwrap_or(0)));
    Some(file)
}

fn convert_to(input: &Path, output: &Path, shard_size: Option<u64>) -> bool {
    let mut o = ConvertOptions::new(vec![input.to_path_buf()], output.to_path_buf());
    o.shard_size = shard_size;
    o.workers = weightport_engine::Workers::new(Some(2), None).unwrap();
    o.chunk = 24;
    o.force = true;
    convert(&o, &NoProgress).is_ok()
}

fn assert_same(input: &Path, output: &Path) {
    let a = open_input(input, &OpenRequest::default())
        .expect("input opens")
        .source;
    let b = open_input(output, &OpenRequest::default())
        .expect("an emitted output opens")
        .source;
    let mut theirs: Vec<_> = b.tensors().iter().enumerate().collect();
    theirs.sort_by(|x, y| x.1.name.cmp(&y.1.name));
    assert_eq!(
        a.tensors().len(),
        theirs.len(),
        "tensor count of {}",
        output.display()
    );
    for (i, t) in a.tensors().iter().enumerate() {
        let j = theirs
            .iter()
            .find(|(_, u)| u.name == t.name)
            .expect("same names")
            .0;
        let u = &b.tensors()[j];
        assert_eq!((t.dtype, &t.shape), (u.dtype, &u.shape), "{}", t.name);
        let mut x = vec![0u8; t.byte_len as usize];
        let mut y = vec![0u8; u.byte_len as usize];
        a.read_into(i, 0, &mut x).unwrap();
        b.read_into(j, 0, &mut y).expect("an emitted tensor reads");
        assert_eq!(x, y, "bytes of {} in {}", t.name, output.display());
    }
    let (mine, other) = comparable_hashes(a.as_ref(), b.as_ref(), &NoProgress).expect("hashes");
    assert!(
        compare(&mine, &other).is_empty(),
        "verify --against {}",
        output.display()
    );
}

fn outputs(dir: &Path) -> [(PathBuf, Option<u64>); 3] {
    [
        (dir.join("out.safetensors"), None),
        (dir.join("repo"), Some(40)),
        (dir.join("out.gguf"), None),
    ]
}

fuzz_target!(|data: &[u8]| {
    let Some(file) = safetensors_from(data) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("wp-fuzz-rt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.safetensors");
    std::fs::write(&input, &file).unwrap();
    for (out, shards) in outputs(&dir) {
        if convert_to(&input, &out, shards) {
            assert_same(&input, &out);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
});
