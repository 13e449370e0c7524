//! The registry is the only seam: a format defined and registered inside this test (no change
//! to pipeline code) is read and written by `convert`, opened by `inspect`'s path and hashed by
//! `verify`'s. It stores a block-quantized tensor (Q8_0: 34-byte blocks, which never divide a
//! chunk), so this also proves unit-aligned chunking: the output is identical to the input file
//! (the reference here: an identity conversion of this format must reproduce it) at 1, 2 and 7
//! threads with chunks far smaller than the tensor.

use std::path::PathBuf;
use std::sync::Arc;

use weightport_core::registry::{
    InputFormat, OutputFormat, OutputPlan, OutputRequest, PlannedFile,
};
use weightport_core::staging::TempFile;
use weightport_core::{
    hash, ByteSource, DType, FinishedFile, Format, IoCounter, Metadata, Plan, ReadOptions, Result,
    StagedFile, TensorInfo, TensorSink, TensorSource,
};
use weightport_engine::registry::{register_input, register_output};
use weightport_engine::{
    convert, hash_source, open_input, ConvertOptions, NoProgress, OpenRequest,
};

const MAGIC: &[u8; 8] = b"WPTEST1\n";

/// `MAGIC`, u32 name length, name, u64 dims[2] (rows, cols of Q8_0 elements), data.
struct TestFile {
    path: PathBuf,
    infos: Vec<TensorInfo>,
    data: Vec<u8>,
}

fn header(t: &TensorInfo) -> Vec<u8> {
    let mut h = MAGIC.to_vec();
    h.extend((t.name.len() as u32).to_le_bytes());
    h.extend(t.name.as_bytes());
    h.extend(t.shape[0].to_le_bytes());
    h.extend(t.shape[1].to_le_bytes());
    h
}

fn open(src: Arc<dyn ByteSource>, _: &ReadOptions) -> Result<Box<dyn TensorSource>> {
    let path = src.name();
    let b = src.range(0, src.len())?.into_owned();
    let n = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
    let name = String::from_utf8(b[12..12 + n].to_vec()).unwrap();
    let dim = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let shape = vec![dim(12 + n), dim(20 + n)];
    let byte_len = DType::Q8_0.byte_len(&shape).unwrap();
    Ok(Box::new(TestFile {
        path: path.to_path_buf(),
        infos: vec![TensorInfo {
            name,
            dtype: DType::Q8_0,
            shape,
            byte_len,
        }],
        data: b[28 + n..].to_vec(),
    }))
}

impl TensorSource for TestFile {
    fn format(&self) -> Format {
        Format::Gguf
    }
    fn metadata(&self) -> &Metadata {
        static M: std::sync::OnceLock<Metadata> = std::sync::OnceLock::new();
        M.get_or_init(Metadata::new)
    }
    fn tensors(&self) -> &[TensorInfo] {
        &self.infos
    }
    fn files(&self) -> Vec<PathBuf> {
        vec![self.path.clone()]
    }
    fn file_of(&self, _: usize) -> PathBuf {
        self.path.clone()
    }
    fn bytes(&self, _: usize) -> Option<&[u8]> {
        None
    }
    fn read_into(&self, _: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        // The read_into contract: any granule-aligned offset.
        assert_eq!(
            offset % DType::Q8_0.granule(),
            0,
            "chunk not aligned to a block"
        );
        dst.copy_from_slice(&self.data[offset as usize..offset as usize + dst.len()]);
        Ok(())
    }
}

static INPUT: InputFormat = InputFormat {
    name: "wptest",
    format: Format::Gguf,
    probe: |_, head| head.starts_with(MAGIC),
    open,
};

struct Sink {
    temp: Option<TempFile>,
    target: PathBuf,
    data_at: u64,
    size: u64,
}

impl TensorSink for Sink {
    fn plan(&mut self, tensors: &[TensorInfo], _: &Metadata) -> Result<Plan> {
        let h = header(&tensors[0]);
        let t = TempFile::beside(&self.target, &IoCounter::new())?;
        t.write_at(&h, 0)?;
        self.data_at = h.len() as u64;
        self.size = self.data_at + tensors[0].byte_len;
        t.set_len(self.size)?;
        self.temp = Some(t);
        Ok(Plan {
            files: self.staged(),
        })
    }
    fn write_at(&self, _: usize, offset: u64, bytes: &[u8]) -> Result<()> {
        let t = self.temp.as_ref().unwrap();
        t.write_at(bytes, self.data_at + offset)?;
        Ok(())
    }
    fn staged(&self) -> Vec<StagedFile> {
        let t = self.temp.as_ref().unwrap();
        vec![StagedFile {
            temp: t.path().to_path_buf(),
            path: self.target.clone(),
            format: Format::Gguf,
            size: self.size,
            tensors: vec![0],
        }]
    }
    fn finish(self: Box<Self>) -> Result<Vec<FinishedFile>> {
        let t = self.temp.unwrap();
        t.sync()?;
        Ok(vec![FinishedFile {
            temp: t,
            size: self.size,
            tensors: 1,
        }])
    }
}

fn plan(req: &OutputRequest) -> Result<OutputPlan> {
    Ok(OutputPlan {
        dir: req.target.parent().unwrap().to_path_buf(),
        is_repo: false,
        files: vec![PlannedFile {
            path: req.target.to_path_buf(),
            size: header(&req.tensors[0]).len() as u64 + req.tensors[0].byte_len,
            tensors: vec![0],
        }],
        extras: vec![],
        is_own_file: |_| false,
        reshaped: Vec::new(),
    })
}

static OUTPUT: OutputFormat = OutputFormat {
    name: "wptest",
    format: Format::Gguf,
    claims: |p| p.extension().is_some_and(|e| e == "wptest"),
    plan,
    sink: |req, _| {
        Ok(Box::new(Sink {
            temp: None,
            target: req.target.to_path_buf(),
            data_at: 0,
            size: 0,
        }))
    },
    stores: |d| d == DType::Q8_0,
    by_architecture: false,
    cast_rule: weightport_core::CastRule::Torch,
};

#[test]
fn a_format_registered_in_a_test_converts_inspects_and_verifies() {
    register_input(&INPUT);
    register_output(&OUTPUT);
    let tmp = tempfile::tempdir().unwrap();
    let info = TensorInfo {
        name: "blk.0.w".into(),
        dtype: DType::Q8_0,
        shape: vec![7, 32 * 40],
        byte_len: DType::Q8_0.byte_len(&[7, 32 * 40]).unwrap(),
    };
    let mut bytes = header(&info);
    bytes.extend((0..info.byte_len).map(|i| (i * 31 % 251) as u8));
    let input = tmp.path().join("in.wptest");
    std::fs::write(&input, &bytes).unwrap();

    // inspect's path: opened by content through the registered probe.
    let opened = open_input(&input, &OpenRequest::default()).unwrap();
    assert_eq!(opened.source.tensors(), std::slice::from_ref(&info));

    let chunk = 1000;
    assert!(
        hash::leaf_bytes(DType::Q8_0, chunk) < info.byte_len / 5,
        "several chunks"
    );
    assert_ne!(chunk % 34, 0, "the block size does not divide the chunk");
    for threads in [1, 2, 7] {
        let out = tmp.path().join(format!("out{threads}.wptest"));
        let mut o = ConvertOptions::new(vec![input.clone()], out.clone());
        o.chunk = chunk;
        o.workers = weightport_engine::Workers::new(Some(threads), None).unwrap();
        let r = convert(&o, &NoProgress).unwrap();
        assert!(r.verified);
        assert_eq!(r.output_format, "wptest");
        assert_eq!(std::fs::read(&out).unwrap(), bytes, "{threads} threads");
    }
    // verify's path: the same content hash from the input and from an output.
    let a = hash_source(opened.source.as_ref(), &NoProgress).unwrap();
    let o = open_input(&tmp.path().join("out7.wptest"), &OpenRequest::default()).unwrap();
    assert_eq!(a, hash_source(o.source.as_ref(), &NoProgress).unwrap());
}
