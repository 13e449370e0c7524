//! `slice IN 'NAME[SLICE]' -o OUT`: the bytes of one selection, read from any source the
//! registry opens, written as `.npy` (numpy's `np.save` layout, byte for byte) or `.safetensors`
//! (one tensor, as `save_file` writes it).
//!
//! Only the selection's bytes are read: each contiguous run with one `read_into`, as
//! safetensors' `get_slice` does (a deflated ZIP member, readable only front to back, is read
//! up to the end of the last run). A quantized GGUF tensor is read in whole rows, dequantized as
//! ggml does, and written as F32.

use std::io::Write;
use std::path::{Path, PathBuf};

use weightport_core::staging::{sync_dir, TempFile};
use weightport_core::{
    sanitize, shown, Access, DType, Error, Layout, Location, Result, TensorInfo, TensorSource,
};

use crate::select::{Region, Selection};

/// What a slice wrote.
#[derive(Debug, Clone)]
pub struct Sliced {
    /// The output file.
    pub path: PathBuf,
    /// The tensor.
    pub tensor: String,
    /// Dtype written (F32 for a dequantized block type).
    pub dtype: DType,
    /// Shape written.
    pub shape: Vec<u64>,
    /// Bytes of tensor data read from the input.
    pub read: u64,
    /// Length of the output file.
    pub bytes: u64,
}

/// Output container of a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    Npy,
    Safetensors,
}

fn npy_descr(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F64 => "<f8",
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::I64 => "<i8",
        DType::I32 => "<i4",
        DType::I16 => "<i2",
        DType::I8 => "|i1",
        DType::U64 => "<u8",
        DType::U32 => "<u4",
        DType::U16 => "<u2",
        DType::U8 => "|u1",
        DType::BOOL => "|b1",
        DType::C64 => "<c8",
        _ => return None,
    })
}

/// The `.npy` header `np.save` writes (format 1.0) for a C-order array.
pub fn npy_header(descr: &str, shape: &[u64]) -> Vec<u8> {
    let dims = match shape {
        [] => "()".to_string(),
        [n] => format!("({n},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}");
    if let Some(first) = shape.first() {
        h.push_str(&" ".repeat(21usize.saturating_sub(first.to_string().len())));
    }
    let hlen = h.len() + 1;
    let pad = 64 - (10 + hlen) % 64;
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&((hlen + pad) as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend(std::iter::repeat_n(b' ', pad));
    out.push(b'\n');
    out
}

/// Writes the selection `sel` of `src` to `out` (module docs); `force` allows replacing an
/// existing `out` that is not the input.
pub fn slice(src: &dyn TensorSource, sel: &Selection, out: &Path, force: bool) -> Result<Sliced> {
    let kind = match out.extension().and_then(|e| e.to_str()) {
        Some("npy") => Out::Npy,
        Some("safetensors") => Out::Safetensors,
        _ => {
            return Err(Error::Usage(format!(
                "{}: the output must end in .npy or .safetensors",
                shown(out)
            )))
        }
    };
    let i = src
        .tensors()
        .iter()
        .position(|t| t.name == sel.name)
        .ok_or_else(|| {
            Error::Usage(format!(
                "{}: no tensor `{}`",
                shown(&src.files().first().cloned().unwrap_or_default()),
                sanitize(&sel.name)
            ))
        })?;
    let t = src.tensors()[i].clone();
    let at = || Location::file(src.file_of(i)).tensor(t.name.clone());
    let region = sel
        .region(&t.shape)
        .map_err(|e| Error::Usage(format!("{}: `{}`: {e}", at(), sanitize(&sel.text))))?;
    let dtype = if t.dtype.is_block() {
        DType::F32
    } else {
        t.dtype
    };
    let shape = region.out_shape();
    let info = TensorInfo {
        name: t.name.clone(),
        dtype,
        shape: shape.clone(),
        byte_len: region.numel() * u64::from(dtype.elem_bytes().unwrap_or(1)),
    };
    if t.dtype.is_block() && !weightport_quant::can_dequantize(t.dtype) {
        return Err(Error::unsupported(
            at(),
            None,
            format!("dequantizing {}", t.dtype),
        ));
    }
    if dtype.elem_bytes().is_none() {
        return Err(Error::unsupported(
            at(),
            None,
            format!("slicing {} (elements smaller than a byte)", t.dtype),
        ));
    }
    let header = match kind {
        Out::Npy => npy_header(
            npy_descr(dtype).ok_or_else(|| {
                Error::Usage(format!(
                    "{}: numpy has no {dtype} dtype: write .safetensors instead",
                    at()
                ))
            })?,
            &shape,
        ),
        Out::Safetensors => {
            weightport_safetensors::layout(std::slice::from_ref(&info), None)?.header
        }
    };
    refuse_input(out, src)?;
    let temp = TempFile::beside(out, &weightport_core::IoCounter::new())?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, Appender { temp: &temp, at: 0 });
    w.write_all(&header)
        .map_err(|e| Error::io(temp.path(), "write", e))?;
    let read = copy_region(src, i, &region, &mut w, temp.path())?;
    w.flush().map_err(|e| Error::io(temp.path(), "write", e))?;
    drop(w);
    temp.sync()?;
    let path = temp.publish(force)?;
    sync_dir(
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )?;
    Ok(Sliced {
        path,
        tensor: t.name,
        dtype,
        shape,
        read,
        bytes: header.len() as u64 + info.byte_len,
    })
}

fn refuse_input(out: &Path, src: &dyn TensorSource) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(out) else {
        return Ok(());
    };
    let same = src
        .files()
        .iter()
        .any(|f| std::fs::metadata(f).is_ok_and(|n| (n.dev(), n.ino()) == (m.dev(), m.ino())));
    if same {
        return Err(Error::Usage(format!(
            "{}: is the input; an output never replaces its input",
            shown(out)
        )));
    }
    Ok(())
}

/// Streams the region's bytes of tensor `i` into `w`; returns the bytes read from the source.
fn copy_region(
    src: &dyn TensorSource,
    i: usize,
    r: &Region,
    w: &mut impl Write,
    tmp: &Path,
) -> Result<u64> {
    let t = &src.tensors()[i];
    let put = |w: &mut dyn Write, b: &[u8]| w.write_all(b).map_err(|e| Error::io(tmp, "write", e));
    if let Layout::Block { .. } = t.dtype.layout() {
        return copy_rows(src, i, r, w, tmp);
    }
    let es = u64::from(t.dtype.elem_bytes().unwrap_or(1));
    let runs = r
        .runs(&t.shape, crate::ops::MAX_RUNS)
        .map_err(|e| Error::Usage(format!("{}: {e}", sanitize(&t.name))))?;
    let mut reader = Reader::new(src, i);
    let mut read = 0;
    for (a, n) in runs {
        let (off, len) = (a * es, n * es);
        let mut done = 0;
        while done < len {
            let m = (len - done).min(8 << 20);
            put(w, reader.get(off + done, m)?)?;
            done += m;
        }
        read += len;
    }
    Ok(read + reader.skipped)
}

/// Whole rows of a block type, dequantized, the region's columns kept.
fn copy_rows(
    src: &dyn TensorSource,
    i: usize,
    r: &Region,
    w: &mut impl Write,
    tmp: &Path,
) -> Result<u64> {
    let t = &src.tensors()[i];
    let nd = t.shape.len().max(1);
    let ne0 = t.shape.last().copied().unwrap_or(1);
    let row_bytes = match t.dtype.layout() {
        Layout::Block { elems, bytes } => ne0 / u64::from(elems) * u64::from(bytes),
        Layout::Bits(_) => unreachable!("copy_rows is for block types"),
    };
    let outer = Region {
        start: r.start[..nd - 1].to_vec(),
        len: r.len[..nd - 1].to_vec(),
        dropped: r.dropped[..nd - 1].to_vec(),
    };
    let runs = outer
        .runs(&t.shape[..nd - 1], crate::ops::MAX_RUNS)
        .map_err(|e| Error::Usage(format!("{}: {e}", sanitize(&t.name))))?;
    let (c0, cn) = (r.start[nd - 1] as usize, r.len[nd - 1] as usize);
    let mut reader = Reader::new(src, i);
    let mut vals = vec![0f32; ne0 as usize];
    let mut read = 0;
    let mut out = Vec::with_capacity(cn * 4);
    for (first, rows) in runs {
        for row in first..first + rows {
            let bytes = reader.get(row * row_bytes, row_bytes)?;
            weightport_quant::dequantize(t.dtype, bytes, &mut vals)
                .map_err(|e| Error::Internal(format!("dequantize: {e}")))?;
            out.clear();
            vals[c0..c0 + cn]
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
            w.write_all(&out).map_err(|e| Error::io(tmp, "write", e))?;
            read += row_bytes;
        }
    }
    Ok(read + reader.skipped)
}

/// Reads ranges of one tensor in increasing order: zero-copy when mapped, by `read_into` when
/// randomly readable, and front to back (skipping what is not wanted) when only sequential.
struct Reader<'s> {
    src: &'s dyn TensorSource,
    i: usize,
    buf: Vec<u8>,
    pos: u64,
    skipped: u64,
}

impl<'s> Reader<'s> {
    fn new(src: &'s dyn TensorSource, i: usize) -> Self {
        Reader {
            src,
            i,
            buf: Vec::new(),
            pos: 0,
            skipped: 0,
        }
    }

    fn get(&mut self, off: u64, len: u64) -> Result<&[u8]> {
        if let Some(all) = self.src.bytes(self.i) {
            return Ok(&all[off as usize..(off + len) as usize]);
        }
        if self.src.access(self.i) == Access::Sequential {
            while self.pos < off {
                let n = (off - self.pos).min(8 << 20);
                self.buf.resize(n as usize, 0);
                self.src.read_into(self.i, self.pos, &mut self.buf)?;
                self.pos += n;
                self.skipped += n;
            }
        }
        self.buf.resize(len as usize, 0);
        self.src.read_into(self.i, off, &mut self.buf)?;
        self.pos = off + len;
        Ok(&self.buf)
    }
}

/// Sequential writes into a staged file, through its own descriptor and I/O counters.
struct Appender<'a> {
    temp: &'a TempFile,
    at: u64,
}

impl Write for Appender<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.temp
            .write_at(bytes, self.at)
            .map_err(std::io::Error::other)?;
        self.at += bytes.len() as u64;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
