//! The composite transforms over ragged chunkings, against outputs computed by hand.

use std::sync::Arc;

use weightport_core::DType;

use super::cast::Cast;
use super::chain::Chain;
use super::gather::Gather;
use super::interleave::Interleave;
use super::permute::PermuteRows;
use super::slice::{PadRows, Slice};
use super::stack::Stack;
use super::Transform;
use half::f16;

fn run(op: &dyn Transform, input: &[u8], out_len: u64, step: u64) -> Vec<u8> {
    let mut out = vec![0u8; out_len as usize];
    let mut s = 0;
    while s < out_len {
        let e = (s + step).min(out_len);
        let ins: Vec<&[u8]> = op
            .needs(s..e)
            .into_iter()
            .map(|(_, r)| &input[r.start as usize..r.end as usize])
            .collect();
        op.apply(s..e, &ins, &mut out[s as usize..e as usize])
            .unwrap();
        s = e;
    }
    out
}

#[test]
fn permutation_gathers_rows_for_any_chunking() {
    // 4 rows of 3 u16 values; output row r = input row rows[r].
    let input: Vec<u8> = (0u16..12).flat_map(|v| v.to_le_bytes()).collect();
    let p = PermuteRows::new(vec![2, 0, 3, 1], 6, 2);
    let want: Vec<u8> = [2u16, 0, 3, 1]
        .iter()
        .flat_map(|&r| (r * 3..r * 3 + 3).flat_map(|v| v.to_le_bytes()))
        .collect();
    for step in [2, 4, 6, 10, 24] {
        assert_eq!(run(&p, &input, 24, step), want, "step {step}");
    }
}

#[test]
fn a_transposing_gather_reads_columns_for_any_chunking() {
    // 3 rows of 5 u16 values (value = r·5 + c); output row c holds column c of the input.
    let input: Vec<u8> = (0u16..15).flat_map(|v| v.to_le_bytes()).collect();
    let t = Gather::new(0, vec![(5, 1), (3, 5)], 2);
    let want: Vec<u8> = (0u16..5)
        .flat_map(|c| (0u16..3).flat_map(move |r| (r * 5 + c).to_le_bytes()))
        .collect();
    // Chunks that end inside output rows, span several, or cover everything.
    for step in [2, 4, 6, 8, 14, 30] {
        assert_eq!(run(&t, &input, 30, step), want, "step {step}");
    }
    // Chained before a cast, as the plan uses it.
    let c = Chain::of(
        Some(Arc::new(t) as Arc<dyn Transform>),
        Some(
            Arc::new(Cast::new(DType::F16, DType::F32, "t", false).unwrap()) as Arc<dyn Transform>,
        ),
    )
    .unwrap();
    let f16s: Vec<u8> = (0u16..15)
        .flat_map(|v| f16::from_f32(f32::from(v)).to_le_bytes())
        .collect();
    let want32: Vec<u8> = (0u16..5)
        .flat_map(|c| (0u16..3).flat_map(move |r| f32::from(r * 5 + c).to_le_bytes()))
        .collect();
    for step in [4, 12, 20, 60] {
        assert_eq!(
            run(c.as_ref(), &f16s, 60, step),
            want32,
            "cast, step {step}"
        );
    }
}

/// `run` for a transform with several inputs.
fn run_many(op: &dyn Transform, inputs: &[Vec<u8>], out_len: u64, step: u64) -> Vec<u8> {
    let mut out = vec![0u8; out_len as usize];
    let mut s = 0;
    while s < out_len {
        let e = (s + step).min(out_len);
        let ins: Vec<&[u8]> = op
            .needs(s..e)
            .into_iter()
            .map(|(k, r)| &inputs[k][r.start as usize..r.end as usize])
            .collect();
        op.apply(s..e, &ins, &mut out[s as usize..e as usize])
            .unwrap();
        s = e;
    }
    out
}

#[test]
fn stack_concatenates_inputs_over_ragged_chunks() {
    // Three inputs of 5 u16 values (10 bytes): input k holds 100k, 100k+1, ….
    let inputs: Vec<Vec<u8>> = (0u16..3)
        .map(|k| (0..5).flat_map(|v| (100 * k + v).to_le_bytes()).collect())
        .collect();
    let want: Vec<u8> = [
        0u16, 1, 2, 3, 4, 100, 101, 102, 103, 104, 200, 201, 202, 203, 204,
    ]
    .iter()
    .flat_map(|v| v.to_le_bytes())
    .collect();
    let st = Stack::new(3, 10, 2);
    // Chunks that end inside a part, on a part boundary, and span all three parts.
    for step in [2, 4, 6, 8, 10, 14, 30] {
        assert_eq!(run_many(&st, &inputs, 30, step), want, "step {step}");
    }
    assert_eq!(st.needs(8..24), vec![(0, 8..10), (1, 0..10), (2, 0..4)]);
    // Stacked, then cast: the chain reads the same pieces, each value cast once.
    let f32s: Vec<Vec<u8>> = (0..3)
        .map(|k| {
            (0..4)
                .flat_map(|v| (k as f32 * 10.0 + v as f32 + 0.25).to_le_bytes())
                .collect()
        })
        .collect();
    let stack: Arc<dyn Transform> = Arc::new(Stack::new(3, 16, 4));
    let cast: Arc<dyn Transform> = Arc::new(Cast::new(DType::F32, DType::F16, "t", false).unwrap());
    let chain = Chain::of(Some(stack), Some(cast)).unwrap();
    let want: Vec<u8> = (0..3)
        .flat_map(|k| (0..4).map(move |v| k as f32 * 10.0 + v as f32 + 0.25))
        .flat_map(|v| half::f16::from_f32(v).to_le_bytes())
        .collect();
    for step in [2, 6, 10, 24] {
        assert_eq!(
            run_many(chain.as_ref(), &f32s, 24, step),
            want,
            "step {step}"
        );
    }
}

#[test]
fn row_slice_over_ragged_chunks() {
    // 6 rows of 3 u16 values (6 bytes a row), value = 10·row + column; keep rows 1..4.
    let input: Vec<u8> = (0u16..6)
        .flat_map(|r| (0..3).flat_map(move |c| (10 * r + c).to_le_bytes()))
        .collect();
    let want: Vec<u8> = [10u16, 11, 12, 20, 21, 22, 30, 31, 32]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let sl = Slice::rows(1..4, 6, 2);
    // Chunks ending inside a row, on a row boundary, and covering the whole slice.
    for step in [2, 4, 6, 8, 10, 18] {
        assert_eq!(run(&sl, &input, 18, step), want, "step {step}");
    }
    assert_eq!(sl.needs(4..14), vec![(0, 10..20)]);
    // Sliced, then cast F32 → F16: the same rows, each value cast once.
    let f32s: Vec<u8> = (0..5)
        .flat_map(|r| (0..2).map(move |c| r as f32 + 0.25 * c as f32))
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let slice: Arc<dyn Transform> = Arc::new(Slice::rows(2..5, 8, 4));
    let cast: Arc<dyn Transform> = Arc::new(Cast::new(DType::F32, DType::F16, "t", false).unwrap());
    let chain = Chain::of(Some(slice), Some(cast)).unwrap();
    let want: Vec<u8> = [2.0f32, 2.25, 3.0, 3.25, 4.0, 4.25]
        .iter()
        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
        .collect();
    for step in [2, 6, 10, 12] {
        assert_eq!(run(chain.as_ref(), &f32s, 12, step), want, "step {step}");
    }
    assert!(!chain.lossless());
}

#[test]
fn pad_rows_appends_zeros_over_ragged_chunks_also_after_a_cast() {
    // Three bf16 rows of 2 values, padded to 5 rows: the rows, then 4 zero values.
    let vals = [1.0f32, -2.0, 3.5, 0.25, -8.0, 64.0];
    let input: Vec<u8> = vals
        .iter()
        .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
        .collect();
    let pad = PadRows::new(12, 2);
    let mut want = input.clone();
    want.resize(20, 0);
    // Chunks inside the source, across its end and wholly past it.
    for step in [2, 4, 6, 10, 14, 20] {
        assert_eq!(run(&pad, &input, 20, step), want, "step {step}");
    }
    assert_eq!(pad.needs(14..20), vec![(0, 12..12)]);
    // Padded, then cast BF16 → F16: the values cast, the padding zeros.
    let pad: Arc<dyn Transform> = Arc::new(PadRows::new(12, 2));
    let cast: Arc<dyn Transform> =
        Arc::new(Cast::new(DType::BF16, DType::F16, "t", false).unwrap());
    let chain = Chain::of(Some(pad), Some(cast)).unwrap();
    let mut want: Vec<u8> = vals
        .iter()
        .flat_map(|&v| f16::from_f32(v).to_le_bytes())
        .collect();
    want.resize(20, 0);
    for step in [2, 6, 12, 20] {
        assert_eq!(run(chain.as_ref(), &input, 20, step), want, "step {step}");
    }
}

#[test]
fn gather_transposes_and_interleaves_over_ragged_chunks() {
    // A [2 heads, 3 rows, 4 cols] u16 tensor, value = 100·head + 10·row + col.
    let input: Vec<u8> = (0u16..2)
        .flat_map(|h| (0..3).flat_map(move |r| (0..4).map(move |c| 100 * h + 10 * r + c)))
        .flat_map(|v| v.to_le_bytes())
        .collect();
    // Each head's first two rows transposed: [2, 4, 2].
    let t = Gather::new(0, vec![(2, 12), (4, 1), (2, 4)], 2);
    let want: Vec<u8> = (0u16..2)
        .flat_map(|h| (0..4).flat_map(move |c| (0..2).map(move |r| 100 * h + 10 * r + c)))
        .flat_map(|v| v.to_le_bytes())
        .collect();
    for step in [2, 4, 6, 10, 32] {
        assert_eq!(run(&t, &input, 32, step), want, "step {step}");
    }
    assert!(!t.concatenates());
    assert_eq!(t.needs(16..20), vec![(0, 24..34)]);
    // Each head's last row: contiguous runs, concatenated.
    let v = Gather::new(8, vec![(2, 12), (1, 4), (4, 1)], 2);
    let want: Vec<u8> = [20u16, 21, 22, 23, 120, 121, 122, 123]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    for step in [2, 6, 8, 16] {
        assert_eq!(run(&v, &input, 16, step), want, "step {step}");
    }
    assert!(v.concatenates());
    assert_eq!(v.needs(4..12), vec![(0, 20..24), (0, 40..44)]);
    // Every other column (stride 2): [2·3 rows, 2 cols] from offset 1.
    let odd = Gather::new(1, vec![(6, 4), (2, 2)], 2);
    let want: Vec<u8> = (0u16..2)
        .flat_map(|h| (0..3).flat_map(move |r| [1, 3].map(|c| 100 * h + 10 * r + c)))
        .flat_map(|v| v.to_le_bytes())
        .collect();
    for step in [2, 6, 24] {
        assert_eq!(run(&odd, &input, 24, step), want, "step {step}");
    }
}

#[test]
fn interleave_takes_one_block_of_each_part_over_ragged_chunks() {
    // Part 0: 1 byte a block (rows 0 and 2 of a [4, 2] byte tensor); part 1: 3 bytes a block
    // (all of a [4, 3] byte tensor); the map adds 1 to each block's first byte.
    let a: Vec<u8> = (0u8..8).collect();
    let b: Vec<u8> = (100u8..112).collect();
    let ga = Gather::new(0, vec![(2, 4), (2, 1)], 1);
    let gb = Gather::new(0, vec![(2, 6), (6, 1)], 1);
    let map = Arc::new(|blk: &mut [u8]| blk[0] += 1);
    let op = Interleave::new(vec![ga, gb], vec![1, 3], map);
    let want: Vec<u8> = vec![
        1, 100, 101, 102, 2, 103, 104, 105, 5, 106, 107, 108, 6, 109, 110, 111,
    ];
    let inputs = [a, b];
    for step in [4, 8, 12, 16] {
        assert_eq!(run_many(&op, &inputs, 16, step), want, "step {step}");
    }
}

#[test]
fn chain_permutes_then_casts() {
    let vals: Vec<f32> = (0..8).map(|v| v as f32 + 0.5).collect();
    let input: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let p: Arc<dyn Transform> = Arc::new(PermuteRows::new(vec![1, 0], 16, 4));
    let c: Arc<dyn Transform> = Arc::new(Cast::new(DType::F32, DType::F16, "t", false).unwrap());
    let chain = Chain::of(Some(p), Some(c)).unwrap();
    let want: Vec<u8> = [4, 5, 6, 7, 0, 1, 2, 3]
        .iter()
        .flat_map(|&i| half::f16::from_f32(vals[i]).to_le_bytes())
        .collect();
    for step in [2, 6, 16] {
        assert_eq!(run(chain.as_ref(), &input, 16, step), want, "step {step}");
    }
    assert!(!chain.lossless());
}
