//! Quantization and dequantization as transforms of the output plan, over the bit-exact kernels
//! of weightport-quant. Both work in whole blocks: a quantized tensor's unit is one block of
//! bytes, a dequantized one's the elements of one block; rows are whole numbers of blocks (the
//! plan's fallback guarantees it), so a chunk never splits a block or crosses a row mid-block.
//!
//! A quantized tensor also reports its error against its source ([`super::quality`]: RMSE, max
//! abs and relative error, share clipped; computed while the bytes pass through by dequantizing
//! each chunk it wrote): no reference
//! tool prints it, and it tells a user which tensors a mix hurt.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use weightport_core::{CastRule, DType, Error, Layout, Result};
use weightport_quant::cast::{decode_f32, encode_f32};

use super::quality::{Accum, Quality};
use super::Transform;

fn block(d: DType) -> (u64, u64) {
    match d.layout() {
        Layout::Block { elems, bytes } => (u64::from(elems), u64::from(bytes)),
        _ => (1, d.granule()),
    }
}

fn elem_size(d: DType) -> u64 {
    u64::from(d.elem_bytes().unwrap_or(4))
}

/// A block ggml's grid search aborts on (IQ3 of NaN/inf or overflowing values) is the input's
/// fault: refused, naming the first element (in the tensor) of the super-block; `first` is the
/// tensor element the kernel's slice starts at.
fn grid_refusal(e: weightport_quant::QuantError, first: usize, block_elems: usize) -> Error {
    match e {
        weightport_quant::QuantError::GridSearch { dtype, block, .. } => Error::Refused {
            at: weightport_core::Location::default(),
            reason: format!(
                "cannot quantize to {dtype}: the {block_elems} values from element {} are \
                 non-finite or overflow f32 when squared (ggml's quantizer aborts on them)",
                first + block * block_elems
            ),
        },
        other => kernel_error(other),
    }
}

/// Elements quantized per step: a multiple of every block size (32, 256), small enough that the
/// f32 values and their round trip stay in L2 instead of growing with the chunk.
const STEP_ELEMS: usize = 16 << 10;

thread_local! {
    static VALUES: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    /// The whole rows a by-rows piece touches, quantized.
    static ROWS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A kernel's refusal: a dtype without a kernel is unsupported (of no format: the kernels are
/// ggml's types, whatever file they are read from or written to); a slice of the wrong length
/// is a bug of the plan, which hands kernels whole blocks.
fn kernel_error(e: weightport_quant::QuantError) -> Error {
    match e {
        weightport_quant::QuantError::Unsupported { .. } => {
            Error::unsupported(weightport_core::Location::default(), None, e.to_string())
        }
        weightport_quant::QuantError::MissingImportance { dtype } => Error::Refused {
            at: weightport_core::Location::default(),
            reason: format!(
                "{dtype} needs an importance matrix ({}): ggml's quantizer cannot run \
                 without one",
                weightport_core::Knob::Imatrix
            ),
        },
        other => Error::Internal(format!("quantization kernel: {other}")),
    }
}

/// F32/F16/BF16 → a block type.
pub(crate) struct Quantize {
    from: DType,
    to: DType,
    stats: Mutex<Accum>,
    measure: bool,
    rows: Option<Rows>,
}

/// Row-wise quantization (`quantize_rows`): with importance weights, or for a type whose
/// kernel only works by rows.
struct Rows {
    /// `ne[0]`.
    n_per_row: usize,
    /// `ne[1]`: rows of one expert (the weights change every `rows_per_expert` rows).
    rows_per_expert: usize,
    /// `n_per_row × n_expert` weights, or none.
    weights: Option<Arc<[f32]>>,
}

impl Quantize {
    /// A quantization of `from` (F32, F16 or BF16) into the block type `to`.
    pub(crate) fn new(from: DType, to: DType) -> Result<Quantize> {
        if !matches!(from, DType::F32 | DType::F16 | DType::BF16)
            || !(weightport_quant::can_quantize(to) || weightport_quant::uses_imatrix(to))
        {
            return Err(Error::Usage(format!("cannot quantize {from} to {to}")));
        }
        Ok(Quantize {
            from,
            to,
            stats: Mutex::new(Accum::default()),
            measure: false,
            rows: None,
        })
    }

    /// Quantizes by rows of the tensor of shape `shape` (outermost first), with `weights`
    /// (`ne[0] × ne[2]` importance weights, one row per expert) if given, as llama-quantize
    /// calls `ggml_quantize_chunk` once per expert.
    pub(crate) fn by_rows(mut self, shape: &[u64], weights: Option<Arc<[f32]>>) -> Quantize {
        let (ne0, _) = crate::importance::row_and_experts(shape);
        let ne1 = if shape.len() >= 2 {
            shape[shape.len() - 2]
        } else {
            1
        };
        self.rows = Some(Rows {
            n_per_row: ne0 as usize,
            rows_per_expert: ne1.max(1) as usize,
            weights,
        });
        self
    }

    /// With `on`, every quality figure is measured ([`Accum::add`]); else only RMSE and max
    /// abs error, in a cheaper pass.
    pub(crate) fn measured(mut self, on: bool) -> Quantize {
        self.measure = on;
        self
    }
}

impl Quantize {
    /// The output bytes `out` of a tensor quantized by whole rows, each expert's rows with that
    /// expert's weights. The executor cuts tensors at block boundaries (its hash leaves), not
    /// at rows, and a row's bytes depend on the whole row (the legacy types' σ² is the row's),
    /// so the rows `out` touches are quantized whole (`input` holds them: [`Transform::needs`])
    /// and the piece copied out of them; a row two pieces share is quantized by both, to the
    /// same bytes, and counted in the quality figures by the piece holding its first byte.
    fn apply_rows(&self, r: &Rows, out: Range<u64>, input: &[u8], dst: &mut [u8]) -> Result<()> {
        let (be, bb) = block(self.to);
        let n = r.n_per_row;
        let row_bytes = n / be as usize * bb as usize;
        let (start, end) = (out.start as usize, out.end as usize);
        let first = start / row_bytes;
        let rows = end.div_ceil(row_bytes) - first;
        let owned = start.div_ceil(row_bytes) - first..rows.min(end.div_ceil(row_bytes) - first);
        let mut acc = Accum::default();
        ROWS.with(|cell| -> Result<()> {
            let whole = &mut *cell.borrow_mut();
            whole.resize(rows * row_bytes, 0);
            self.quantize_rows_of(r, first, input, whole, owned, &mut acc)?;
            let skip = start - first * row_bytes;
            dst.copy_from_slice(&whole[skip..skip + dst.len()]);
            Ok(())
        })?;
        self.stats.lock().expect("stats lock").merge(&acc);
        Ok(())
    }

    /// Quantizes whole rows `first..` (their values in `input`) into `whole`, in steps that
    /// stay within one expert; the quality figures of the rows in `owned` (relative to
    /// `first`) go into `acc`.
    fn quantize_rows_of(
        &self,
        r: &Rows,
        first: usize,
        input: &[u8],
        whole: &mut [u8],
        owned: Range<usize>,
        acc: &mut Accum,
    ) -> Result<()> {
        let (be, bb) = block(self.to);
        let (n, es) = (r.n_per_row, elem_size(self.from) as usize);
        let row_bytes = n / be as usize * bb as usize;
        let rows = whole.len() / row_bytes;
        let step = (STEP_ELEMS / n).max(1);
        VALUES.with(|cell| -> Result<()> {
            let (vals, back) = &mut *cell.borrow_mut();
            let mut row = 0;
            while row < rows {
                let expert = (first + row) / r.rows_per_expert;
                let to_boundary = r.rows_per_expert - (first + row) % r.rows_per_expert;
                let m = step.min(rows - row).min(to_boundary);
                let w = r.weights.as_ref().map(|w| &w[expert * n..(expert + 1) * n]);
                let out = &mut whole[row * row_bytes..(row + m) * row_bytes];
                vals.resize(m * n, 0.0);
                let src = &input[row * n * es..(row + m) * n * es];
                decode_f32(self.from, src, vals, CastRule::Ggml).map_err(kernel_error)?;
                weightport_quant::quantize_rows(self.to, vals, out, n, w).map_err(|e| {
                    let at = match e {
                        weightport_quant::QuantError::GridSearch { row: k, .. } => {
                            (first + row + k) * n
                        }
                        _ => 0,
                    };
                    grid_refusal(e, at, be as usize)
                })?;
                back.resize(m * n, 0.0);
                weightport_quant::dequantize(self.to, out, back).map_err(kernel_error)?;
                let mine = row.max(owned.start)..(row + m).min(owned.end);
                if !mine.is_empty() {
                    let span = (mine.start - row) * n..(mine.end - row) * n;
                    self.measure_rows(acc, &vals[span.clone()], &back[span], w);
                }
                row += m;
            }
            Ok(())
        })
    }

    /// Adds whole rows' errors to `acc` (weighted too, with the rows' importance weights).
    fn measure_rows(&self, acc: &mut Accum, vals: &[f32], back: &[f32], w: Option<&[f32]>) {
        let (be, _) = block(self.to);
        if self.measure {
            acc.add(vals, back, be as usize);
        } else {
            acc.add_plain(vals, back);
        }
        if let Some(w) = w {
            acc.add_weighted(vals, back, w);
        }
    }
}

impl Transform for Quantize {
    fn describe(&self) -> String {
        format!("{}→{}", self.from, self.to)
    }
    fn cost_ns(&self) -> f64 {
        let weighted = self.rows.as_ref().is_some_and(|r| r.weights.is_some());
        weightport_quant::quantize_ns_per_value(self.to, weighted)
    }
    fn unit(&self) -> u64 {
        let (be, bb) = block(self.to);
        match &self.rows {
            Some(r) => r.n_per_row as u64 / be * bb,
            None => bb,
        }
    }
    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        let (be, bb) = block(self.to);
        if let Some(r) = &self.rows {
            // whole rows: see `apply_rows`
            let row_bytes = r.n_per_row as u64 / be * bb;
            let row_in = r.n_per_row as u64 * elem_size(self.from);
            let (first, last) = (out.start / row_bytes, out.end.div_ceil(row_bytes));
            return vec![(0, first * row_in..last * row_in)];
        }
        let per_block = be * elem_size(self.from);
        vec![(0, out.start / bb * per_block..out.end / bb * per_block)]
    }
    fn apply(&self, out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        if let Some(r) = &self.rows {
            return self.apply_rows(r, out, inputs[0], dst);
        }
        let (be, bb) = block(self.to);
        let (be, bb) = (be as usize, bb as usize);
        let first = out.start as usize / bb * be; // this piece's first element in the tensor
        let es = elem_size(self.from) as usize;
        let n = inputs[0].len() / es;
        let mut acc = Accum::default();
        VALUES.with(|cell| -> Result<()> {
            let (vals, back) = &mut *cell.borrow_mut();
            for start in (0..n).step_by(STEP_ELEMS) {
                let m = STEP_ELEMS.min(n - start);
                let out = &mut dst[start / be * bb..(start + m) / be * bb];
                vals.resize(m, 0.0);
                // The reference quantizes what ggml's row conversion makes of the input.
                let src = &inputs[0][start * es..(start + m) * es];
                decode_f32(self.from, src, vals, CastRule::Ggml).map_err(kernel_error)?;
                weightport_quant::quantize(self.to, vals, out)
                    .map_err(|e| grid_refusal(e, first + start, be))?;
                back.resize(m, 0.0);
                weightport_quant::dequantize(self.to, out, back).map_err(kernel_error)?;
                if self.measure {
                    acc.add(vals, back, be);
                } else {
                    acc.add_plain(vals, back);
                }
            }
            Ok(())
        })?;
        self.stats.lock().expect("stats lock").merge(&acc);
        Ok(())
    }
    fn outcome(&self) -> Option<String> {
        let stats = self.stats.lock().ok()?;
        let (rmse, max) = stats.rmse_max()?;
        let weighted = stats.weighted().map_or(String::new(), |(r, m)| {
            format!("; importance-weighted rmse {r:.3e}, max abs error {m:.3e}")
        });
        Some(format!(
            "{}: rmse {rmse:.3e}, max abs error {max:.3e}{weighted}",
            self.describe()
        ))
    }
    fn quality(&self) -> Option<Quality> {
        self.stats.lock().ok()?.quality()
    }
}

/// A block type → F32, F16 or BF16 (through f32, as ggml's `dequantize_row_*`; F16 and BF16
/// under the output's [`CastRule`]).
pub(crate) struct Dequantize {
    from: DType,
    to: DType,
    rule: CastRule,
}

impl Dequantize {
    /// A dequantization of the block type `from` into `to` (F32, F16 or BF16).
    pub(crate) fn new(from: DType, to: DType) -> Result<Dequantize> {
        if !matches!(to, DType::F32 | DType::F16 | DType::BF16)
            || !weightport_quant::can_dequantize(from)
        {
            return Err(Error::unsupported(
                weightport_core::Location::default(),
                None,
                format!("dequantizing {from} to {to} is not supported"),
            ));
        }
        Ok(Dequantize {
            from,
            to,
            rule: CastRule::Ggml,
        })
    }

    /// The same dequantization narrowing to F16/BF16 with `rule`'s NaN bits.
    pub(crate) fn rule(mut self, rule: CastRule) -> Dequantize {
        self.rule = rule;
        self
    }
}

impl Transform for Dequantize {
    fn describe(&self) -> String {
        format!("{}→{}", self.from, self.to)
    }
    fn unit(&self) -> u64 {
        block(self.from).0 * elem_size(self.to)
    }
    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        let (_, bb) = block(self.from);
        let u = self.unit();
        vec![(0, out.start / u * bb..out.end / u * bb)]
    }
    fn apply(&self, _out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        let (be, bb) = block(self.from);
        let mut vals = vec![0f32; (inputs[0].len() as u64 / bb * be) as usize];
        weightport_quant::dequantize(self.from, inputs[0], &mut vals).map_err(kernel_error)?;
        encode_f32(self.to, &vals, dst, self.rule).map_err(kernel_error)?;
        Ok(())
    }
}

/// One block type into another (`--allow-requantize`), through f32, in units of
/// `lcm(elements per block)` so both sides are whole blocks.
pub(crate) struct Requantize {
    from: DType,
    to: DType,
    elems: u64,
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Requantize {
    /// A requantization of block type `from` into block type `to`.
    pub(crate) fn new(from: DType, to: DType) -> Result<Requantize> {
        Dequantize::new(from, DType::F32)?;
        Quantize::new(DType::F32, to)?;
        let (a, b) = (block(from).0, block(to).0);
        Ok(Requantize {
            from,
            to,
            elems: a / gcd(a, b) * b,
        })
    }
}

impl Transform for Requantize {
    fn describe(&self) -> String {
        format!("{}→{} (requantized)", self.from, self.to)
    }
    fn cost_ns(&self) -> f64 {
        weightport_quant::quantize_ns_per_value(self.to, false)
    }
    fn unit(&self) -> u64 {
        self.elems / block(self.to).0 * block(self.to).1
    }
    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)> {
        let (u, v) = (
            self.unit(),
            self.elems / block(self.from).0 * block(self.from).1,
        );
        vec![(0, out.start / u * v..out.end / u * v)]
    }
    fn apply(&self, _out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()> {
        let (be, bb) = block(self.from);
        let mut vals = vec![0f32; (inputs[0].len() as u64 / bb * be) as usize];
        weightport_quant::dequantize(self.from, inputs[0], &mut vals).map_err(kernel_error)?;
        weightport_quant::quantize(self.to, &vals, dst).map_err(kernel_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_errors_name_no_format() {
        let e = Dequantize::new(DType::Q4_K, DType::I32).err().unwrap();
        assert_eq!(
            e.to_string(),
            ": unsupported: dequantizing Q4_K to I32 is not supported"
        );
        let e = kernel_error(weightport_quant::QuantError::Unsupported {
            dtype: DType::Q8_K,
            op: "quantize",
        });
        assert!(!e.to_string().contains("gguf"), "{e}");
        let e = kernel_error(weightport_quant::QuantError::Length {
            what: "dst",
            expected: 1,
            got: 2,
        });
        assert!(matches!(e, Error::Internal(_)), "{e}");
    }

    #[test]
    fn values_ggml_aborts_on_are_refused_with_their_element() {
        // IQ3_XXS of a NaN: ggml's grid search asserts; the second block of this piece is
        // element 256 + 256 of the tensor
        let q = Quantize::new(DType::F32, DType::IQ3_XXS).unwrap();
        let mut vals = vec![0.5f32; 512];
        vals[300] = f32::NAN;
        let src: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut dst = vec![0u8; 2 * 98];
        let e = q.apply(98..3 * 98, &[&src], &mut dst).unwrap_err();
        assert!(matches!(e, Error::Refused { .. }), "{e}");
        assert!(e.to_string().contains("IQ3_XXS"), "{e}");
        assert!(e.to_string().contains("element 512"), "{e}");
    }

    /// Rows of a 3-D tensor take their expert's weights, also in a chunk that crosses an
    /// expert boundary: the weighted error of the whole equals the one computed row by row.
    #[test]
    fn by_rows_uses_each_experts_weights() {
        let (ne0, ne1, ne2) = (32usize, 2usize, 2usize);
        let x: Vec<f32> = (0..ne0 * ne1 * ne2)
            .map(|i| ((i * 37) % 23) as f32 - 11.0)
            .collect();
        let w: Vec<f32> = (0..ne0 * ne2)
            .map(|i| if i < ne0 { 1.0 } else { (i % 5) as f32 })
            .collect();
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let q = Quantize::new(DType::F32, DType::Q8_0).unwrap().by_rows(
            &[ne2 as u64, ne1 as u64, ne0 as u64],
            Some(Arc::from(w.clone())),
        );
        let row = q.unit() as usize;
        assert_eq!(row, 34);
        let mut dst = vec![0u8; row * ne1 * ne2];
        // Rows 1..3 cross the boundary between expert 0 (rows 0, 1) and expert 1 (rows 2, 3).
        for r in [0..1, 1..3, 3..4] {
            let out = (r.start * row) as u64..(r.end * row) as u64;
            let input = &bytes[r.start * ne0 * 4..r.end * ne0 * 4];
            q.apply(out, &[input], &mut dst[r.start * row..r.end * row])
                .unwrap();
        }
        let mut back = vec![0f32; x.len()];
        weightport_quant::dequantize(DType::Q8_0, &dst, &mut back).unwrap();
        let mut want = Accum::default();
        for r in 0..ne1 * ne2 {
            let e = r / ne1;
            let span = r * ne0..(r + 1) * ne0;
            want.add_weighted(&x[span.clone()], &back[span], &w[e * ne0..(e + 1) * ne0]);
        }
        let got = q.stats.lock().unwrap().weighted().unwrap();
        let want = want.weighted().unwrap();
        assert!((got.0 - want.0).abs() < 1e-12 && (got.1 - want.1).abs() < 1e-12);
    }
}
