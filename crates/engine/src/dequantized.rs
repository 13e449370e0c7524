//! The scaled weights of an FP8 release as the F32 tensors the architecture plan reads: each
//! weight the plan lists in `ArchPlan::dequant` is shown with its own shape as F32, and any
//! byte range of it is computed on read ([`Fp8Dequant`]) from the weight bytes under it and the
//! run of its scale those elements take; nothing is held beyond the range asked for.

use std::collections::HashMap;

use weightport_arch::fp8::Dequant;
use weightport_core::{sanitize, DType, Error, Result, TensorInfo, TensorSource};

use crate::transform::fp8::Fp8Dequant;
use crate::transform::Transform;

/// The dequantized weights of a source, by tensor index.
#[derive(Default)]
pub(crate) struct Dequantized {
    by_index: HashMap<usize, Weight>,
}

struct Weight {
    op: Fp8Dequant,
    scale: usize,
    /// Bytes per stored weight element.
    width: u64,
}

impl Dequantized {
    /// The weights `plan` names, over `tensors` (the source's).
    pub(crate) fn new(plan: &[Dequant], tensors: &[TensorInfo]) -> Result<Self> {
        let mut by_index = HashMap::with_capacity(plan.len());
        for d in plan {
            let (w, s) = (&tensors[d.weight], &tensors[d.scale]);
            let op = Fp8Dequant::new(w.dtype, s.dtype, &w.shape, &d.dims)
                .map_err(|e| Error::Internal(format!("`{}`: {e}", sanitize(&w.name))))?;
            let width = w
                .dtype
                .byte_len(&[1])
                .map_err(|e| Error::Internal(e.to_string()))?;
            by_index.insert(
                d.weight,
                Weight {
                    op,
                    scale: d.scale,
                    width,
                },
            );
        }
        Ok(Dequantized { by_index })
    }

    /// True when tensor `i` is read dequantized.
    pub(crate) fn has(&self, i: usize) -> bool {
        self.by_index.contains_key(&i)
    }

    /// Tensor `i`'s info as the plan reads it (F32 for a dequantized weight).
    pub(crate) fn info(&self, i: usize, info: &TensorInfo) -> TensorInfo {
        if !self.has(i) {
            return info.clone();
        }
        let n: u64 = info.shape.iter().product();
        TensorInfo {
            name: info.name.clone(),
            dtype: DType::F32,
            shape: info.shape.clone(),
            byte_len: n * 4,
        }
    }

    /// The stored byte range of weight `i` under its F32 byte range `offset..offset + len`.
    pub(crate) fn stored(&self, i: usize, offset: u64, len: u64) -> Option<(u64, u64)> {
        let w = self.by_index.get(&i)?;
        let (start, end) = (offset / 4, (offset + len).div_ceil(4));
        Some((start * w.width, (end - start) * w.width))
    }

    /// Reads F32 bytes `offset..offset + dst.len()` of weight `i` from `inner`; false when `i`
    /// is not dequantized.
    pub(crate) fn read(
        &self,
        inner: &dyn TensorSource,
        i: usize,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<bool> {
        let Some(w) = self.by_index.get(&i) else {
            return Ok(false);
        };
        let end = offset + dst.len() as u64;
        let aligned = offset / 4 * 4..end.div_ceil(4) * 4;
        let mut bufs = Vec::with_capacity(2);
        for (k, r) in w.op.needs(aligned.clone()) {
            let src = if k == 0 { i } else { w.scale };
            let mut buf = vec![0u8; (r.end - r.start) as usize];
            inner.read_into(src, r.start, &mut buf)?;
            bufs.push(buf);
        }
        let ins: Vec<&[u8]> = bufs.iter().map(Vec::as_slice).collect();
        if aligned.start == offset && aligned.end == end {
            w.op.apply(aligned, &ins, dst)?;
        } else {
            let mut out = vec![0u8; (aligned.end - aligned.start) as usize];
            w.op.apply(aligned.clone(), &ins, &mut out)?;
            let s = (offset - aligned.start) as usize;
            dst.copy_from_slice(&out[s..s + dst.len()]);
        }
        Ok(true)
    }
}
