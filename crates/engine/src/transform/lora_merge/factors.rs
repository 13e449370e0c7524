//! A term's factors widened to f32, and the last merge's kept per thread.
//!
//! A chunk needs all of `A` (and, for a transposed product, all of `B`), so those are widened
//! for every call of the merge. A chain that moves rows after the merge (the q/k permutation of
//! an HF → GGUF conversion) calls it once per row, each time with all of `A`: widened each time,
//! that cost more than the merge itself. Each thread keeps the widened whole factors of the
//! last merge it ran, by the merge's id (unique in the process, so never another tensor's).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use weightport_core::{DType, Result};
use weightport_quant::cast::{decode_f32, CastRule};

use super::product::{pack_whole, Packed};
use super::{cast_error, size, LoraTerm};

/// A fresh merge id.
pub(super) fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// What a term's calls share: `a` as stored (`[rank, n]`) and, for a transposed product, all of
/// `B` k-major (`[rank, cols]`), so a rank step's values are contiguous; and the product's
/// right operand (`a`, or `kb` when transposed) packed for whole-row calls.
pub(super) struct Whole {
    a: Vec<f32>,
    kb: Option<Vec<f32>>,
    packed: Packed,
}

/// A term's factors for one call: the shared whole ones and, for a plain product, the rows of
/// `B` (`[rows, rank]`) the call covers.
pub(super) struct Factors {
    whole: Rc<Whole>,
    rows_b: Vec<f32>,
}

impl Factors {
    pub(super) fn a(&self) -> &[f32] {
        &self.whole.a
    }

    pub(super) fn b(&self) -> &[f32] {
        self.whole.kb.as_deref().unwrap_or(&self.rows_b)
    }

    /// The product's right operand packed whole (`A`, or `B` k-major when transposed).
    pub(super) fn packed(&self) -> &Packed {
        &self.whole.packed
    }
}

thread_local! {
    /// The id of the last merge run on this thread and its terms' whole factors.
    static LAST: RefCell<(u64, Vec<Rc<Whole>>)> = const { RefCell::new((u64::MAX, Vec::new())) };
}

/// In bulk (F16C for F16, a copy for F32; f16 and bf16 widen exactly).
fn widen(d: DType, bytes: &[u8]) -> Result<Vec<f32>> {
    let mut v = vec![0.0; bytes.len() / size(d) as usize];
    decode_f32(d, bytes, &mut v, CastRule::Torch).map_err(cast_error)?;
    Ok(v)
}

fn whole(t: &LoraTerm, a: &[u8], b: &[u8], cols: u64) -> Result<Whole> {
    let a = widen(t.a, a)?;
    let (r, n) = (t.rank as usize, cols as usize);
    if !t.transposed {
        let packed = pack_whole(&a, r, n);
        return Ok(Whole {
            a,
            kb: None,
            packed,
        });
    }
    let b = widen(t.b, b)?;
    let mut kb = vec![0.0; r * n];
    for (j, row) in b.chunks_exact(r).take(n).enumerate() {
        for (k, v) in row.iter().enumerate() {
            kb[k * n + j] = *v;
        }
    }
    let packed = pack_whole(&kb, r, n);
    Ok(Whole {
        a,
        kb: Some(kb),
        packed,
    })
}

/// The factors of merge `id`'s `terms` for one call (`inputs`: `W`, then `A_k`, `B_k`).
pub(super) fn factors_of(
    id: u64,
    terms: &[LoraTerm],
    inputs: &[&[u8]],
    cols: u64,
) -> Result<Vec<Factors>> {
    let kept = LAST.with(|l| {
        let l = l.borrow();
        (l.0 == id).then(|| l.1.clone())
    });
    let wholes = match kept {
        Some(w) => w,
        None => {
            let w = (terms.iter().enumerate())
                .map(|(k, t)| whole(t, inputs[1 + 2 * k], inputs[2 + 2 * k], cols).map(Rc::new))
                .collect::<Result<Vec<_>>>()?;
            LAST.with(|l| *l.borrow_mut() = (id, w.clone()));
            w
        }
    };
    (terms.iter().enumerate().zip(wholes))
        .map(|((k, t), whole)| {
            let rows_b = match t.transposed {
                true => Vec::new(),
                false => widen(t.b, inputs[2 + 2 * k])?,
            };
            Ok(Factors { whole, rows_b })
        })
        .collect()
}
