//! Writes GGUF files with this crate for `tests/gguf_interop.py` to read with gguf-py.
//!
//! * `gguf_interop rewrite IN OUT`: reads IN and writes it again through [`GgufSink`]
//!   (lossless: same key order and types, same `ne`, same version and header padding).
//! * `gguf_interop sample OUT`: writes a file from plain tensor descriptions (`ne` = shape
//!   reversed) with a value of every GGUF type, empty typed arrays and a plain string array.

use std::path::{Path, PathBuf};

use weightport_core::{DType, MetaType, MetaValue, Metadata, ReadOptions, TensorInfo};
use weightport_core::{TensorSink, TensorSource};
use weightport_gguf::header::align_up;
use weightport_gguf::{GgufSink, GgufTensorSpec, WriteOptions};

fn write(out: &Path, sink: GgufSink, infos: &[TensorInfo], meta: &Metadata, data: &[Vec<u8>]) {
    let mut sink = sink;
    sink.plan(infos, meta).expect("plan");
    for (i, d) in data.iter().enumerate() {
        sink.write_at(i, 0, d).expect("write");
    }
    for f in Box::new(sink).finish().expect("finish") {
        f.temp.publish(true).expect("publish");
    }
    eprintln!("wrote {}", out.display());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("rewrite") if args.len() == 4 => rewrite(Path::new(&args[2]), &args[3]),
        Some("sample") if args.len() == 3 => sample(&args[2]),
        _ => {
            eprintln!("usage: gguf_interop rewrite IN OUT | gguf_interop sample OUT");
            std::process::exit(2);
        }
    }
}

/// `rewrite IN OUT`: IN's keys, tensors and layout written again.
fn rewrite(input: &Path, out: &str) {
    let g = weightport_gguf::open(input, &ReadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let specs = g
        .gguf_tensors()
        .iter()
        .map(GgufTensorSpec::from_gguf)
        .collect();
    let data: Vec<Vec<u8>> = (0..g.tensors().len())
        .map(|i| g.bytes(i).unwrap().to_vec())
        .collect();
    let out = PathBuf::from(out);
    let mut opts = WriteOptions::default();
    opts.version = g.version();
    // gguf-py's vocab-only files end right after the header; keep that.
    opts.pad_without_tensors =
        !g.tensors().is_empty() || align_up(g.infos_end(), g.alignment()) == Some(g.file_len());
    let sink = GgufSink::new(out.clone()).specs(specs).options(opts);
    write(&out, sink, g.tensors(), g.metadata(), &data);
}

/// `sample OUT`: [`sample_metadata`] and two tensors, F32 `w` and Q8_0 `q`.
fn sample(out: &str) {
    let infos = vec![
        TensorInfo {
            name: "w".into(),
            dtype: DType::F32,
            shape: vec![2, 3],
            byte_len: 24,
        },
        TensorInfo {
            name: "q".into(),
            dtype: DType::Q8_0,
            shape: vec![2, 32],
            byte_len: 68,
        },
    ];
    let mut q = vec![0u8; 68];
    q[0..2].copy_from_slice(&[0x00, 0x3c]); // d = 1.0 (f16), both blocks
    q[34..36].copy_from_slice(&[0x00, 0x3c]);
    for (i, b) in q.iter_mut().enumerate() {
        if i % 34 >= 2 {
            *b = (i % 34) as u8;
        }
    }
    let w: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let out = PathBuf::from(out);
    let m = sample_metadata();
    write(&out, GgufSink::new(out.clone()), &infos, &m, &[w, q]);
}

/// A value of every GGUF type, a plain string array, a typed array and an empty one.
fn sample_metadata() -> Metadata {
    let typed = |elem, items| MetaValue::TypedArray { elem, items };
    let entries = [
        ("general.architecture", MetaValue::Str("llama".into())),
        ("s.u8", MetaValue::U8(7)),
        ("s.i8", MetaValue::I8(-7)),
        ("s.u16", MetaValue::U16(700)),
        ("s.i16", MetaValue::I16(-700)),
        ("s.u32", MetaValue::U32(70_000)),
        ("s.i32", MetaValue::I32(-70_000)),
        ("s.f32", MetaValue::F32(0.25)),
        ("s.bool", MetaValue::Bool(true)),
        ("s.str", MetaValue::Str("ünïcode".into())),
        ("s.u64", MetaValue::U64(u64::MAX)),
        ("s.i64", MetaValue::I64(i64::MIN)),
        ("s.f64", MetaValue::F64(-0.5)),
        (
            "a.str",
            MetaValue::Array(vec![
                MetaValue::Str("a".into()),
                MetaValue::Str("bc".into()),
            ]),
        ),
        (
            "a.i32",
            typed(MetaType::I32, vec![MetaValue::I32(-1), MetaValue::I32(2)]),
        ),
        ("a.empty_f32", typed(MetaType::F32, vec![])),
    ];
    let mut m = Metadata::new();
    for (k, v) in entries {
        m.insert(k, v);
    }
    m
}
