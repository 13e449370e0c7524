//! Verification of emitted files: each is reopened through the registry with the same strict
//! reader users get, its tensor list compared with the plan, and every tensor's content hash
//! recomputed and compared with the hash of the bytes the executor wrote. Where the operation
//! was lossless (a widening cast), the output is also mapped back through the inverse operation
//! and compared with the hash of the source bytes it was made from, so the written values are
//! proven equal to the source's, not only to what the executor computed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use weightport_core::registry::OpenRequest;
use weightport_core::{
    sanitize, ContentHash, DType, Error, Location, Result, StagedFile, TensorInfo, TensorSource,
};

use crate::by_options::{TensorRecipe, Transform};
use crate::exec::{identity_plan, leaf_of, run, HashOnly, Hashes, Progress};
use crate::registry::open_file;
use crate::transform::cast::{is_float, Cast};
use crate::transform::quantize::Dequantize;

fn fail(path: &std::path::Path, tensor: Option<&str>, reason: String) -> Error {
    Error::Verify {
        at: Location {
            path: path.to_path_buf(),
            tensor: tensor.map(str::to_string),
            offset: None,
        },
        reason,
    }
}

/// Verifies one staged file of a job (`outs[i]` hashed `hashes` when written; `sources` are the
/// source's tensors, for lossless operations).
pub(crate) fn verify_staged(
    file: &StagedFile,
    outs: &[TensorRecipe],
    hashes: &Hashes,
    source: &dyn TensorSource,
    req: &OpenRequest,
    base: u64,
    progress: &dyn Progress,
) -> Result<()> {
    let shown = &file.path;
    let reopened = reopen(file, req)?;
    let check = match_planned(file, outs, reopened.as_ref())?;
    check_hashes(
        reopened.as_ref(),
        &check,
        outs,
        hashes,
        shown,
        base,
        progress,
    )?;
    verify_lossless(
        reopened.as_ref(),
        &check,
        outs,
        hashes,
        source,
        base,
        progress,
    )
    .map_err(|e| match e {
        Error::Verify { reason, at } => fail(shown, at.tensor.as_deref(), reason),
        other => other,
    })
}

/// Reopens the staged file alone (its format told by its own bytes) with the reader users get.
fn reopen(file: &StagedFile, req: &OpenRequest) -> Result<Box<dyn TensorSource>> {
    let mut plain = OpenRequest {
        from: None,
        ..req.clone()
    };
    plain.read.one_part = true;
    open_file(&file.temp, &plain).map_err(|e| {
        fail(
            &file.path,
            None,
            format!("the written file does not reopen: {e}"),
        )
    })
}

/// Pairs each tensor planned for the file (its index in `outs`) with its index in the reopened
/// file, refusing a count, name, type, shape or length other than planned.
fn match_planned(
    file: &StagedFile,
    outs: &[TensorRecipe],
    reopened: &dyn TensorSource,
) -> Result<Vec<(usize, usize)>> {
    let shown = &file.path;
    let got: HashMap<&str, usize> = reopened
        .tensors()
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    if got.len() != file.tensors.len() {
        return Err(fail(
            shown,
            None,
            format!(
                "holds {} tensors, {} were planned",
                got.len(),
                file.tensors.len()
            ),
        ));
    }
    let mut check = Vec::with_capacity(file.tensors.len());
    for &p in &file.tensors {
        let want = &outs[p].info;
        let &i = got.get(want.name.as_str()).ok_or_else(|| {
            fail(
                shown,
                Some(&want.name),
                "missing from the written file".into(),
            )
        })?;
        let have = &reopened.tensors()[i];
        if have.dtype != want.dtype || have.shape != want.shape || have.byte_len != want.byte_len {
            return Err(fail(
                shown,
                Some(&want.name),
                format!(
                    "written as {} {:?}, planned {} {:?}",
                    have.dtype, have.shape, want.dtype, want.shape
                ),
            ));
        }
        check.push((p, i));
    }
    Ok(check)
}

/// Rehashes each checked tensor of the reopened file and compares with the hash of what the
/// executor wrote.
fn check_hashes(
    reopened: &dyn TensorSource,
    check: &[(usize, usize)],
    outs: &[TensorRecipe],
    hashes: &Hashes,
    shown: &std::path::Path,
    base: u64,
    progress: &dyn Progress,
) -> Result<()> {
    let all = identity_plan(reopened);
    let plan: Vec<TensorRecipe> = check.iter().map(|&(_, i)| all[i].clone()).collect();
    let got = run(reopened, &plan, base, progress, HashOnly)?;
    for (k, &(p, _)) in check.iter().enumerate() {
        if got.out[k] != hashes.out[p] {
            return Err(fail(
                shown,
                Some(&outs[p].info.name),
                format!(
                    "content hash {} differs from the {} written",
                    got.out[k], hashes.out[p]
                ),
            ));
        }
    }
    Ok(())
}

/// Maps each losslessly transformed tensor back through its inverse and compares with the
/// source bytes' hash (leaves cut to match the output's, as the executor hashed them).
fn verify_lossless(
    reopened: &dyn TensorSource,
    check: &[(usize, usize)],
    outs: &[TensorRecipe],
    hashes: &Hashes,
    source: &dyn TensorSource,
    base: u64,
    progress: &dyn Progress,
) -> Result<()> {
    let sources = source.tensors();
    // Group by the inverse's leaf size so each group runs with one base.
    let mut groups: BTreeMap<u64, Vec<(usize, TensorRecipe)>> = BTreeMap::new();
    for &(p, i) in check {
        let (Some(op), Some(want)) = (&outs[p].op, hashes.src[p]) else {
            continue;
        };
        let (Some(inv), &[s]) = (op.inverse(), outs[p].inputs.as_slice()) else {
            continue;
        };
        let out_leaf = leaf_of(&outs[p], base);
        let in_leaf: u64 = op
            .needs(0..out_leaf)
            .iter()
            .map(|(_, r)| r.end - r.start)
            .sum();
        let _ = want;
        groups.entry(in_leaf).or_default().push((
            p,
            TensorRecipe {
                info: sources[s].clone(),
                inputs: vec![i],
                op: Some(inv),
                note: None,
            },
        ));
    }
    for (leaf, items) in groups {
        let plan: Vec<TensorRecipe> = items.iter().map(|(_, o)| o.clone()).collect();
        let got = run(reopened, &plan, leaf, progress, HashOnly)?;
        for ((p, o), h) in items.iter().zip(&got.out) {
            // A signalling NaN comes back quieted: bytes differ, values do not. Only then
            // compare value by value.
            if Some(*h) != hashes.src[*p]
                && !same_values(reopened, o.inputs[0], source, &outs[*p], base)?
            {
                return Err(Error::Verify {
                    at: Location::default().tensor(outs[*p].info.name.clone()),
                    reason: "the written values, cast back, differ from the source's".into(),
                });
            }
        }
    }
    Ok(())
}

fn read(
    src: &dyn TensorSource,
    i: usize,
    r: std::ops::Range<u64>,
    buf: &mut Vec<u8>,
) -> Result<()> {
    buf.resize((r.end - r.start) as usize, 0);
    match src.bytes(i) {
        Some(all) => buf.copy_from_slice(&all[r.start as usize..r.end as usize]),
        None => src.read_into(i, r.start, buf)?,
    }
    Ok(())
}

/// Output tensor `o` (at `written` in `reopened`) holds exactly `o.op` of its source's values,
/// NaN counting equal to any NaN. Reads both in output-leaf chunks.
fn same_values(
    reopened: &dyn TensorSource,
    written: usize,
    source: &dyn TensorSource,
    o: &TensorRecipe,
    base: u64,
) -> Result<bool> {
    let (Some(op), &[s]) = (&o.op, o.inputs.as_slice()) else {
        return Ok(false);
    };
    let size = u64::from(o.info.dtype.elem_bytes().unwrap_or(1)) as usize;
    let leaf = leaf_of(o, base);
    let (mut got, mut input, mut want) = (Vec::new(), Vec::new(), Vec::new());
    let mut start = 0;
    while start < o.info.byte_len {
        let end = (start + leaf).min(o.info.byte_len);
        read(reopened, written, start..end, &mut got)?;
        let (_, r) = op.needs(start..end).remove(0);
        read(source, s, r, &mut input)?;
        want.resize(got.len(), 0);
        op.apply(start..end, &[&input], &mut want)?;
        let nan = |b: &[u8]| match o.info.dtype {
            DType::F64 => f64::from_le_bytes(b.try_into().expect("8")).is_nan(),
            _ => f32::from_le_bytes(b.try_into().expect("4")).is_nan(),
        };
        let equal = got
            .chunks(size)
            .zip(want.chunks(size))
            .all(|(a, b)| a == b || (nan(a) && nan(b)));
        if !equal {
            return Ok(false);
        }
        start = end;
    }
    Ok(true)
}

/// Compares two lists of `(name, dtype, hash)`: returns human-readable differences (empty when
/// equal). Hashes of different dtypes must already be value hashes in a common dtype.
pub fn compare(a: &[(String, ContentHash)], b: &[(String, ContentHash)]) -> Vec<String> {
    let bm: HashMap<&str, ContentHash> = b.iter().map(|(n, h)| (n.as_str(), *h)).collect();
    let am: HashMap<&str, ContentHash> = a.iter().map(|(n, h)| (n.as_str(), *h)).collect();
    let mut out = Vec::new();
    for (n, h) in a {
        match bm.get(n.as_str()) {
            None => out.push(format!(
                "tensor `{}` is missing from the reference",
                sanitize(n)
            )),
            Some(g) if g != h => out.push(format!("tensor `{}` differs", sanitize(n))),
            _ => {}
        }
    }
    for (n, _) in b {
        if !am.contains_key(n.as_str()) {
            out.push(format!("tensor `{}` is only in the reference", sanitize(n)));
        }
    }
    out
}

/// The dtype two tensors are compared in: their own where they agree; where both are floats the
/// widest exact representation of both (F64 if either is F64, else F32); a block type against
/// F32/F16/BF16 dequantized to that float type, exactly as `convert` writes it with that dtype.
/// `None` when the two cannot be compared by value.
fn common(a: DType, b: DType) -> Option<DType> {
    let dequantizes_to =
        |q: DType, f: DType| q.is_block() && weightport_quant::can_dequantize(q) && f != DType::F64;
    if a == b {
        Some(a)
    } else if is_float(a) && is_float(b) {
        Some(if a == DType::F64 || b == DType::F64 {
            DType::F64
        } else {
            DType::F32
        })
    } else if is_float(b) && dequantizes_to(a, b) {
        Some(b)
    } else if is_float(a) && dequantizes_to(b, a) {
        Some(a)
    } else {
        None
    }
}

/// The operation turning a tensor of `from` into `to` for comparison.
fn compare_op(from: DType, to: DType, name: &str) -> Result<Option<Arc<dyn Transform>>> {
    Ok(match (from == to, from.is_block()) {
        (true, _) => None,
        (false, true) => Some(Arc::new(Dequantize::new(from, to)?)),
        (false, false) => Some(Arc::new(Cast::new(from, to, name, true)?)),
    })
}

/// Tensor names with their hashes.
pub type NamedHashes = Vec<(String, ContentHash)>;

/// Hashes of `a` and `b` for `verify --against`: content hashes where dtypes agree; value
/// hashes where they differ but compare by value (see [`common`]), so a checkpoint and its
/// `--dtype f32` conversion compare equal, and so do a quantized GGUF and its conversion.
pub fn comparable_hashes(
    a: &dyn TensorSource,
    b: &dyn TensorSource,
    progress: &dyn Progress,
) -> Result<(NamedHashes, NamedHashes)> {
    let bt: HashMap<&str, DType> = b
        .tensors()
        .iter()
        .map(|t| (t.name.as_str(), t.dtype))
        .collect();
    let at: HashMap<&str, DType> = a
        .tensors()
        .iter()
        .map(|t| (t.name.as_str(), t.dtype))
        .collect();
    let side = |s: &dyn TensorSource,
                other: &HashMap<&str, DType>|
     -> Result<Vec<(String, ContentHash)>> {
        let plan: Vec<TensorRecipe> = s
            .tensors()
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let to = other
                    .get(t.name.as_str())
                    .and_then(|&o| common(t.dtype, o))
                    .unwrap_or(t.dtype);
                let op = compare_op(t.dtype, to, &t.name)?;
                Ok(TensorRecipe {
                    info: TensorInfo {
                        dtype: to,
                        byte_len: to
                            .byte_len(&t.shape)
                            .map_err(|e| Error::Internal(e.to_string()))?,
                        ..t.clone()
                    },
                    inputs: vec![i],
                    op,
                    note: None,
                })
            })
            .collect::<Result<_>>()?;
        let total = plan.iter().map(|o| o.info.byte_len).sum();
        progress.start("hash", total);
        let h = run(
            s,
            &plan,
            weightport_core::hash::HASH_CHUNK,
            progress,
            HashOnly,
        )?;
        progress.finish();
        Ok(plan.into_iter().map(|o| o.info.name).zip(h.out).collect())
    };
    Ok((side(a, &bt)?, side(b, &at)?))
}
