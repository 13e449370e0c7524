//! The operations of an edit, resolved against a target into per-tensor [`Step`]s, and how each
//! step rewrites a range of a tensor's bytes.
//!
//! Steps of one tensor apply in the order given on the command line, each to the bytes the
//! earlier ones left (as `t[a] = 1; t.masked_fill_(~m, 0)` would in torch). A step works on any
//! range of whole units (elements; for a ggml block type, whole rows), so the transaction can cut
//! a tensor into chunks anywhere on a unit boundary and get the same bytes.
//!
//! | op | plain dtypes | quantized GGUF (whole rows only) |
//! |---|---|---|
//! | `--set NAME[SLICE]=V` | every element set to V cast as torch casts it | rows set to V, quantized as `convert --quant` does |
//! | `--mask FILE` | elements where the mask is not `> 0` become +0 | rows whose mask value is not `> 0` become quantized zeros; the mask must be constant along a row (last axis 1) |
//! | `--add FILE` | `(t.float() + d.float()).to(t.dtype)` (F64: in f64) | refused |
//! | `--replace FILE[::NAME[SLICE]]` | bytes copied from the same dtype and shape | float rows quantized as `convert --quant` does |

use std::path::{Path, PathBuf};
use std::sync::Arc;

use weightport_core::{sanitize, CastRule, DType, Error, Knob, Location, Result, TensorSource};
use weightport_safetensors::SafetensorsFile;

use crate::lock::{settle, ReadGuard};
use crate::scalar::{from_f32_as_torch, is_elementwise, positive, to_f32, Scalar};
use crate::select::{Region, Selection};
use crate::target::{Placed, Target};

/// Most separate runs a selection may cut a tensor into.
pub(crate) const MAX_RUNS: u64 = 1 << 24;

/// One operation as the command line gives it.
#[derive(Debug, Clone)]
pub enum Op {
    /// `--set NAME[SLICE]=VALUE`.
    Set {
        /// The selection.
        sel: Selection,
        /// The value.
        value: Scalar,
    },
    /// `--mask FILE`.
    Mask(PathBuf),
    /// `--add FILE`.
    Add(PathBuf),
    /// `--replace FILE` or `--replace FILE::NAME[SLICE]`.
    Replace {
        /// The file holding the new values.
        file: PathBuf,
        /// Only this tensor (and region); `None`: every tensor of the file, whole.
        sel: Option<Selection>,
    },
}

impl Op {
    /// Parses `NAME[SLICE]=VALUE`.
    pub fn parse_set(s: &str) -> std::result::Result<Op, String> {
        let at = s
            .rfind("]=")
            .map(|i| i + 1)
            .or_else(|| s.rfind('='))
            .ok_or_else(|| format!("{} `{s}`: expected NAME[SLICE]=VALUE", Knob::Set))?;
        let sel = Selection::parse(&s[..at]).map_err(|e| format!("{} {e}", Knob::Set))?;
        let value = Scalar::parse(&s[at + 1..]).map_err(|e| format!("{} `{s}`: {e}", Knob::Set))?;
        Ok(Op::Set { sel, value })
    }

    /// Parses `FILE` or `FILE::NAME[SLICE]`.
    pub fn parse_replace(s: &str) -> std::result::Result<Op, String> {
        match s.split_once("::") {
            Some((f, sel)) if !Path::new(s).exists() => Ok(Op::Replace {
                file: f.into(),
                sel: Some(Selection::parse(sel).map_err(|e| format!("{} {e}", Knob::Replace))?),
            }),
            _ => Ok(Op::Replace {
                file: s.into(),
                sel: None,
            }),
        }
    }
}

/// A safetensors file an edit reads values from, held open under a reader's lock.
pub struct Aux {
    /// The file.
    pub file: SafetensorsFile,
    /// The path as given.
    pub path: PathBuf,
    _guard: ReadGuard,
}

impl Aux {
    /// Opens `path` (after rolling back any killed edit of it) and refuses the target itself.
    pub fn open(path: &Path, t: &Target) -> Result<Arc<Aux>> {
        use std::os::unix::fs::MetadataExt;
        let guard = settle(path)?;
        let m = std::fs::metadata(path).map_err(|e| Error::io(path, "open", e))?;
        if t.files.iter().any(|f| f.dev == m.dev() && f.ino == m.ino()) {
            return Err(Error::Usage(format!(
                "{}: is a file of the target itself; give a separate file",
                weightport_core::shown(path)
            )));
        }
        let file = SafetensorsFile::open(path)?;
        Ok(Arc::new(Aux {
            file,
            path: path.to_path_buf(),
            _guard: guard,
        }))
    }

    /// The bytes of tensor `i` (mapped).
    pub fn bytes(&self, i: usize) -> &[u8] {
        self.file.bytes(i).unwrap_or(&[])
    }

    fn at(&self, i: usize) -> Location {
        Location::file(&self.path).tensor(self.file.tensors()[i].name.clone())
    }
}

/// A tensor of an [`Aux`] file.
#[derive(Clone)]
pub struct AuxRef {
    /// The file.
    pub aux: Arc<Aux>,
    /// Its tensor.
    pub index: usize,
}

impl AuxRef {
    fn bytes(&self) -> &[u8] {
        self.aux.bytes(self.index)
    }
    fn dtype(&self) -> DType {
        self.aux.file.tensors()[self.index].dtype
    }
}

/// Element strides of an aux tensor broadcast (numpy's rules) onto a target shape: 0 on axes it
/// does not vary along.
#[derive(Debug, Clone)]
pub struct Broadcast {
    strides: Vec<u64>,
}

impl Broadcast {
    /// Broadcasts `from` onto `to`, or says why it cannot.
    pub fn new(from: &[u64], to: &[u64]) -> std::result::Result<Broadcast, String> {
        if from.len() > to.len() {
            return Err(format!("shape {from:?} has more dimensions than {to:?}"));
        }
        let mut own = vec![1u64; from.len()];
        for d in (0..from.len().saturating_sub(1)).rev() {
            own[d] = own[d + 1] * from[d + 1];
        }
        let lead = to.len() - from.len();
        let mut strides = vec![0u64; to.len()];
        for (a, (&f, &s)) in from.iter().zip(&own).enumerate() {
            let t = to[lead + a];
            strides[lead + a] = match f {
                _ if f == t && f != 1 => s,
                1 => 0,
                _ => return Err(format!("shape {from:?} does not broadcast to {to:?}")),
            };
        }
        Ok(Broadcast { strides })
    }

    /// True when the last axis is broadcast (constant along a row).
    fn row_constant(&self) -> bool {
        self.strides.last().is_none_or(|s| *s == 0)
    }
}

/// Walks the elements of a row-major tensor from a given one, tracking the broadcast index.
struct Odometer<'a> {
    shape: &'a [u64],
    strides: &'a [u64],
    idx: Vec<u64>,
    aux: u64,
}

impl<'a> Odometer<'a> {
    fn at(shape: &'a [u64], b: &'a Broadcast, mut e: u64) -> Self {
        let mut idx = vec![0u64; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = e % shape[d].max(1);
            e /= shape[d].max(1);
        }
        let aux = idx.iter().zip(&b.strides).map(|(i, s)| i * s).sum();
        Odometer {
            shape,
            strides: &b.strides,
            idx,
            aux,
        }
    }

    fn step(&mut self) {
        for d in (0..self.shape.len()).rev() {
            self.idx[d] += 1;
            self.aux += self.strides[d];
            if self.idx[d] < self.shape[d] {
                return;
            }
            self.aux -= self.strides[d] * self.idx[d];
            self.idx[d] = 0;
        }
    }
}

/// One step of an edit of one tensor (module docs). Byte ranges are relative to the tensor.
pub enum Step {
    /// Every unit of `runs` becomes `unit` (an element, or a quantized row).
    Fill {
        /// Sorted, disjoint, unit-aligned byte ranges.
        runs: Vec<(u64, u64)>,
        /// The new bytes of one unit.
        unit: Vec<u8>,
    },
    /// The bytes of `runs` are copied from the same offsets of `src` (same dtype and shape).
    Copy {
        /// Ranges.
        runs: Vec<(u64, u64)>,
        /// Source.
        src: AuxRef,
    },
    /// The rows of `runs` are quantized from `src`'s rows (a float tensor of the same shape).
    QuantRows {
        /// Row-aligned ranges of the target.
        runs: Vec<(u64, u64)>,
        /// Source.
        src: AuxRef,
    },
    /// Elements whose mask value is not `> 0` become +0.
    Mask {
        /// The mask.
        src: AuxRef,
        /// Its broadcast onto the target.
        bc: Broadcast,
    },
    /// Rows whose mask value is not `> 0` become `zero_row` (quantized zeros).
    MaskRows {
        /// The mask.
        src: AuxRef,
        /// Its broadcast (constant along rows).
        bc: Broadcast,
        /// Quantized zeros of one row.
        zero_row: Vec<u8>,
    },
    /// `(t.float() + d.float()).to(t.dtype)`.
    Add {
        /// The addend.
        src: AuxRef,
        /// Its broadcast onto the target.
        bc: Broadcast,
    },
    /// Bytes from `at` on are `src`'s bytes (a patch block).
    Raw {
        /// Tensor-relative start.
        at: u64,
        /// The block.
        src: AuxRef,
    },
}

/// The steps of one tensor.
pub struct TensorEdit {
    /// Index into [`Target::tensors`].
    pub tensor: usize,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

impl TensorEdit {
    /// The byte ranges any step may change, sorted and merged.
    pub fn candidates(&self, p: &Placed) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = Vec::new();
        for s in &self.steps {
            match s {
                Step::Fill { runs, .. }
                | Step::Copy { runs, .. }
                | Step::QuantRows { runs, .. } => v.extend(runs.iter().copied()),
                Step::Raw { at, src } => v.push((*at, at + src.bytes().len() as u64)),
                _ => v.push((0, p.byte_len)),
            }
        }
        merge(v)
    }

    /// Applies every step to `buf`, the current bytes of `[start, start + buf.len())`.
    pub fn apply(&self, p: &Placed, start: u64, buf: &mut [u8]) -> Result<()> {
        for s in &self.steps {
            s.apply(p, start, buf)?;
        }
        Ok(())
    }
}

/// Sorts and merges overlapping or touching ranges.
pub(crate) fn merge(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The parts of `runs` inside `[start, end)`.
fn clip(runs: &[(u64, u64)], start: u64, end: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
    let first = runs.partition_point(|r| r.1 <= start);
    runs[first..]
        .iter()
        .take_while(move |r| r.0 < end)
        .map(move |&(a, b)| (a.max(start), b.min(end)))
}

impl Step {
    fn apply(&self, p: &Placed, start: u64, buf: &mut [u8]) -> Result<()> {
        let end = start + buf.len() as u64;
        let local = |a: u64, b: u64| (a - start) as usize..(b - start) as usize;
        match self {
            Step::Fill { runs, unit } => {
                for (a, b) in clip(runs, start, end) {
                    for u in buf[local(a, b)].chunks_exact_mut(unit.len()) {
                        u.copy_from_slice(unit);
                    }
                }
            }
            Step::Copy { runs, src } => {
                for (a, b) in clip(runs, start, end) {
                    buf[local(a, b)].copy_from_slice(&src.bytes()[a as usize..b as usize]);
                }
            }
            Step::QuantRows { runs, src } => {
                for (a, b) in clip(runs, start, end) {
                    quantize_rows(p, src, a, &mut buf[local(a, b)])?;
                }
            }
            Step::Mask { src, bc } => mask(p, src, bc, start, buf),
            Step::MaskRows { src, bc, zero_row } => mask_rows(p, src, bc, zero_row, start, buf),
            Step::Add { src, bc } => add(p, src, bc, start, buf)?,
            Step::Raw { at, src } => {
                let b = src.bytes();
                let (lo, hi) = ((*at).max(start), (at + b.len() as u64).min(end));
                if lo < hi {
                    buf[local(lo, hi)].copy_from_slice(&b[(lo - at) as usize..(hi - at) as usize]);
                }
            }
        }
        Ok(())
    }
}

fn elem_size(d: DType) -> u64 {
    u64::from(d.elem_bytes().unwrap_or(1))
}

fn mask(p: &Placed, src: &AuxRef, bc: &Broadcast, start: u64, buf: &mut [u8]) {
    let es = elem_size(p.dtype) as usize;
    let (md, ms) = (src.dtype(), elem_size(src.dtype()) as usize);
    let m = src.bytes();
    let mut o = Odometer::at(&p.shape, bc, start / es as u64);
    for e in buf.chunks_exact_mut(es) {
        let a = o.aux as usize * ms;
        if !positive(md, &m[a..a + ms]).unwrap_or(false) {
            e.fill(0);
        }
        o.step();
    }
}

fn mask_rows(p: &Placed, src: &AuxRef, bc: &Broadcast, zero: &[u8], start: u64, buf: &mut [u8]) {
    let row = zero.len() as u64;
    let ne0 = p.shape.last().copied().unwrap_or(1);
    let (md, ms) = (src.dtype(), elem_size(src.dtype()) as usize);
    let m = src.bytes();
    for (k, r) in buf.chunks_exact_mut(row as usize).enumerate() {
        let first = (start / row + k as u64) * ne0;
        let o = Odometer::at(&p.shape, bc, first);
        let a = o.aux as usize * ms;
        if !positive(md, &m[a..a + ms]).unwrap_or(false) {
            r.copy_from_slice(zero);
        }
    }
}

fn add(p: &Placed, src: &AuxRef, bc: &Broadcast, start: u64, buf: &mut [u8]) -> Result<()> {
    let es = elem_size(p.dtype) as usize;
    let (dd, ds) = (src.dtype(), elem_size(src.dtype()) as usize);
    let d = src.bytes();
    let mut o = Odometer::at(&p.shape, bc, start / es as u64);
    for e in buf.chunks_exact_mut(es) {
        let a = o.aux as usize * ds;
        let delta = &d[a..a + ds];
        if p.dtype == DType::F64 {
            let x = f64::from_le_bytes((&*e).try_into().expect("8 bytes"));
            let y = crate::scalar::to_f64(dd, delta).unwrap_or(f64::NAN);
            e.copy_from_slice(&(x + y).to_le_bytes());
        } else {
            let x = to_f32(p.dtype, e).unwrap_or(f32::NAN);
            let y = to_f32(dd, delta).unwrap_or(f32::NAN);
            from_f32_as_torch(x + y, p.dtype, e).ok_or_else(|| {
                Error::Internal(format!("add to {} was not refused at planning", p.dtype))
            })?;
        }
        o.step();
    }
    Ok(())
}

/// Quantizes the source rows of target bytes `[a, a + out.len())` into `out`.
fn quantize_rows(p: &Placed, src: &AuxRef, a: u64, out: &mut [u8]) -> Result<()> {
    let row = p.unit();
    let ne0 = p.shape.last().copied().unwrap_or(1) as usize;
    let sd = src.dtype();
    let ses = elem_size(sd) as usize;
    let rows = out.len() / row as usize;
    let first = (a / row) as usize * ne0;
    let bytes = &src.bytes()[first * ses..(first + rows * ne0) * ses];
    let mut vals = vec![0f32; rows * ne0];
    weightport_quant::cast::decode_f32(sd, bytes, &mut vals, CastRule::Ggml)
        .map_err(|e| Error::Internal(format!("decode: {e}")))?;
    weightport_quant::quantize_rows(p.dtype, &vals, out, ne0, None).map_err(|e| quant_error(p, e))
}

fn quant_error(p: &Placed, e: weightport_quant::QuantError) -> Error {
    Error::Refused {
        at: Location::default().tensor(p.name.clone()),
        reason: format!("cannot quantize the new rows: {e}"),
    }
}

fn tensor_err(t: &Target, i: usize, reason: impl Into<String>) -> Error {
    Error::Usage(format!("{}: {}", t.tensors[i].at(t), reason.into()))
}

/// Resolves the operations against `t`: the steps of every tensor they change, in order.
pub(crate) fn resolve(t: &Target, ops: &[Op]) -> Result<Vec<TensorEdit>> {
    let mut edits: Vec<TensorEdit> = Vec::new();
    let mut push = |i: usize, s: Step| match edits.iter_mut().find(|e| e.tensor == i) {
        Some(e) => e.steps.push(s),
        None => edits.push(TensorEdit {
            tensor: i,
            steps: vec![s],
        }),
    };
    for op in ops {
        match op {
            Op::Set { sel, value } => {
                let i = t.get(&sel.name)?;
                push(i, set_step(t, i, sel, *value)?);
            }
            Op::Mask(f) | Op::Add(f) => {
                let aux = Aux::open(f, t)?;
                for (j, info) in aux.file.tensors().iter().enumerate() {
                    let i = t.find(&info.name).ok_or_else(|| no_such(t, &aux, j))?;
                    let src = AuxRef {
                        aux: aux.clone(),
                        index: j,
                    };
                    let s = match op {
                        Op::Mask(_) => mask_step(t, i, src)?,
                        _ => add_step(t, i, src)?,
                    };
                    push(i, s);
                }
            }
            Op::Replace { file, sel } => {
                let aux = Aux::open(file, t)?;
                for (i, s) in replace_steps(t, &aux, sel.as_ref())? {
                    push(i, s);
                }
            }
        }
    }
    edits.sort_by_key(|e| (t.tensors[e.tensor].file, t.tensors[e.tensor].offset));
    Ok(edits)
}

fn no_such(t: &Target, aux: &Aux, j: usize) -> Error {
    Error::Usage(format!(
        "{}: names no tensor of {}",
        aux.at(j),
        weightport_core::shown(&t.given)
    ))
}

/// Byte runs of `region` in tensor `p`, in units (elements, or whole rows of a block type).
fn byte_runs(t: &Target, i: usize, region: &Region, what: &str) -> Result<Vec<(u64, u64)>> {
    let p = &t.tensors[i];
    let (shape, unit) = if p.dtype.is_block() {
        if !region.whole_rows(&p.shape) {
            let n = p.shape.last().copied().unwrap_or(1);
            return Err(Error::Refused {
                at: p.at(t),
                reason: format!(
                    "{what} cuts rows: the tensor is {}, and ggml quantizes each row of {n} values \
                     as a whole, so part of a row cannot be written without changing the rest of \
                     it; select whole rows (the last axis `:`)",
                    p.dtype
                ),
            });
        }
        (&p.shape[..p.shape.len().saturating_sub(1)], p.unit())
    } else {
        (&p.shape[..], p.unit())
    };
    let r = Region {
        start: region.start[..shape.len()].to_vec(),
        len: region.len[..shape.len()].to_vec(),
        dropped: region.dropped[..shape.len()].to_vec(),
    };
    let runs = r.runs(shape, MAX_RUNS).map_err(|e| tensor_err(t, i, e))?;
    Ok(runs
        .into_iter()
        .map(|(a, n)| (a * unit, (a + n) * unit))
        .collect())
}

fn region_of(t: &Target, i: usize, sel: &Selection) -> Result<Region> {
    sel.region(&t.tensors[i].shape)
        .map_err(|e| tensor_err(t, i, format!("`{}`: {e}", sanitize(&sel.text))))
}

fn set_step(t: &Target, i: usize, sel: &Selection, v: Scalar) -> Result<Step> {
    let p = &t.tensors[i];
    let region = region_of(t, i, sel)?;
    let runs = byte_runs(t, i, &region, &format!("`{}`", sanitize(&sel.text)))?;
    let unit = if p.dtype.is_block() {
        let x = v.to_bytes(DType::F32).map_err(|e| tensor_err(t, i, e))?;
        let x = f32::from_le_bytes(x[..4].try_into().expect("4 bytes"));
        quantized_row(p, x)?
    } else if is_elementwise(p.dtype) {
        v.to_bytes(p.dtype).map_err(|e| tensor_err(t, i, e))?
    } else {
        return Err(tensor_err(
            t,
            i,
            format!("{} elements cannot be set from a number", p.dtype),
        ));
    };
    Ok(Step::Fill { runs, unit })
}

/// One row of `p`'s block type holding `x` everywhere, quantized as `convert --quant` does.
fn quantized_row(p: &Placed, x: f32) -> Result<Vec<u8>> {
    let ne0 = p.shape.last().copied().unwrap_or(1) as usize;
    let mut out = vec![0u8; p.unit() as usize];
    weightport_quant::quantize_rows(p.dtype, &vec![x; ne0], &mut out, ne0, None)
        .map_err(|e| quant_error(p, e))?;
    Ok(out)
}

fn broadcast(t: &Target, i: usize, src: &AuxRef) -> Result<Broadcast> {
    let from = &src.aux.file.tensors()[src.index].shape;
    Broadcast::new(from, &t.tensors[i].shape).map_err(|e| {
        Error::Usage(format!(
            "{}: {e} (tensor `{}` of the target)",
            src.aux.at(src.index),
            sanitize(&t.tensors[i].name)
        ))
    })
}

fn mask_step(t: &Target, i: usize, src: AuxRef) -> Result<Step> {
    let p = &t.tensors[i];
    let bc = broadcast(t, i, &src)?;
    if scalar_kind(src.dtype()).is_none() {
        return Err(Error::Usage(format!(
            "{}: a mask must be bool, an int or a float type, not {}",
            src.aux.at(src.index),
            src.dtype()
        )));
    }
    if p.dtype.is_block() {
        if !bc.row_constant() {
            return Err(Error::Refused {
                at: p.at(t),
                reason: format!("the mask varies within rows, but the tensor is {} and ggml quantizes each row as a whole: give a mask whose last axis is 1 (whole rows kept or zeroed)", p.dtype),
            });
        }
        let zero_row = quantized_row(p, 0.0)?;
        return Ok(Step::MaskRows { src, bc, zero_row });
    }
    if p.dtype.elem_bytes().is_none() {
        return Err(tensor_err(
            t,
            i,
            format!(
                "{} elements are not whole bytes; a mask cannot address them",
                p.dtype
            ),
        ));
    }
    Ok(Step::Mask { src, bc })
}

/// `Some` for the dtypes element values are read from.
fn scalar_kind(d: DType) -> Option<()> {
    is_elementwise(d).then_some(())
}

fn add_step(t: &Target, i: usize, src: AuxRef) -> Result<Step> {
    let p = &t.tensors[i];
    if p.dtype.is_block() {
        return Err(Error::Refused {
            at: p.at(t),
            reason: format!("cannot add to a {} tensor: only whole rows of a quantized tensor can be set or replaced (adding would re-quantize every row it touches)", p.dtype),
        });
    }
    let ok = matches!(
        p.dtype,
        DType::F64
            | DType::F32
            | DType::F16
            | DType::BF16
            | DType::I64
            | DType::I32
            | DType::I16
            | DType::I8
            | DType::U8
            | DType::BOOL
    );
    if !ok {
        return Err(tensor_err(
            t,
            i,
            format!(
                "{} to {} is not supported (F64, F32, F16, BF16, I8, U8, I16, I32, I64, BOOL)",
                Knob::Add,
                p.dtype
            ),
        ));
    }
    if scalar_kind(src.dtype()).is_none() {
        return Err(Error::Usage(format!(
            "{}: an addend must be a number type, not {}",
            src.aux.at(src.index),
            src.dtype()
        )));
    }
    let bc = broadcast(t, i, &src)?;
    Ok(Step::Add { src, bc })
}

fn replace_steps(
    t: &Target,
    aux: &Arc<Aux>,
    sel: Option<&Selection>,
) -> Result<Vec<(usize, Step)>> {
    let picks: Vec<(usize, Option<&Selection>)> = match sel {
        Some(s) => {
            let j = aux
                .file
                .tensors()
                .iter()
                .position(|x| x.name == s.name)
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "{}: no tensor `{}`",
                        weightport_core::shown(&aux.path),
                        sanitize(&s.name)
                    ))
                })?;
            vec![(j, Some(s))]
        }
        None => (0..aux.file.tensors().len()).map(|j| (j, None)).collect(),
    };
    let mut out = Vec::new();
    for (j, s) in picks {
        let info = &aux.file.tensors()[j];
        let i = t.find(&info.name).ok_or_else(|| no_such(t, aux, j))?;
        let p = &t.tensors[i];
        let src = AuxRef {
            aux: aux.clone(),
            index: j,
        };
        let region = match s {
            Some(s) => region_of(t, i, s)?,
            None => Region::whole(&p.shape),
        };
        let what = s.map_or_else(
            || format!("`{}`", sanitize(&p.name)),
            |s| format!("`{}`", sanitize(&s.text)),
        );
        let runs = byte_runs(t, i, &region, &what)?;
        if info.shape != p.shape {
            return Err(Error::Usage(format!(
                "{}: shape {:?}, the target's is {:?}",
                aux.at(j),
                info.shape,
                p.shape
            )));
        }
        let step = if p.dtype.is_block() {
            if !weightport_quant::cast::is_float(info.dtype) {
                return Err(Error::Usage(format!(
                    "{}: rows for a {} tensor must be F32, F16, BF16 or F64, not {}",
                    aux.at(j),
                    p.dtype,
                    info.dtype
                )));
            }
            Step::QuantRows { runs, src }
        } else if info.dtype != p.dtype {
            return Err(Error::Usage(format!(
                "{}: dtype {}, the target's is {} ({} copies bytes: cast it first)",
                aux.at(j),
                info.dtype,
                p.dtype,
                Knob::Replace
            )));
        } else {
            Step::Copy { runs, src }
        };
        out.push((i, step));
    }
    Ok(out)
}
