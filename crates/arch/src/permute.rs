//! The Llama q/k row permutation.
//!
//! HF checkpoints of `llama`-arch models store each attention head's rows of `q_proj`/`k_proj`
//! in "rotate half" order (all first halves of the rotary pairs, then all second halves);
//! llama.cpp's `llama` arch applies RoPE to adjacent pairs. The reference converter reorders the
//! rows with `W.reshape(n, 2, rows/n/2, *rest).swapaxes(1, 2).reshape(W.shape)`, where `n` is
//! `n_head` for `q_proj` and `n_head_kv` for `k_proj` (GQA). Only whole rows move, so the
//! pipeline can apply it as a row gather on any dtype whose rows are contiguous (2-D weights and
//! 1-D biases alike: a bias "row" is one element).
//!
//! See: docs/specs/gguf.md §5.3.

use weightport_core::{Error, Result};

/// The row permutation for a tensor of `n_rows` rows: output row `i` is input row `p[i]`.
///
/// `n_head` and `n_head_kv` follow the reference's `permute(W, n_head, n_head_kv)`: when
/// `n_head_kv` is given and differs from `n_head`, the rows are split into `n_head_kv` heads,
/// otherwise into `n_head` heads. For `q_proj` pass `(n_head, Some(n_head))`, for `k_proj`
/// `(n_head, Some(n_head_kv))`.
///
/// With `h` heads of `D = n_rows / h` rows each: `p[h*D + 2*i + j] = h*D + j*D/2 + i` for
/// `i < D/2`, `j ∈ {0, 1}`. Errors when `n_rows` is not a multiple of `2 * heads`.
pub fn permute_rows(n_rows: usize, n_head: u32, n_head_kv: Option<u32>) -> Result<Vec<u32>> {
    let heads = match n_head_kv {
        Some(kv) if kv != n_head => kv,
        _ => n_head,
    } as usize;
    if heads == 0 || !n_rows.is_multiple_of(2 * heads) {
        return Err(Error::Usage(format!(
            "q/k permutation: {n_rows} rows cannot be split into {heads} heads of an even number of rows"
        )));
    }
    if u32::try_from(n_rows).is_err() {
        return Err(Error::Usage(format!(
            "q/k permutation: {n_rows} rows do not fit a u32 row index"
        )));
    }
    let d = n_rows / heads;
    let half = d / 2;
    let mut p = Vec::with_capacity(n_rows);
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                p.push((h * d + j * half + i) as u32);
            }
        }
    }
    Ok(p)
}

/// Which heads count a permuted tensor is split by (see [`permute_rows`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QkPermute {
    /// `num_attention_heads`.
    pub n_head: u32,
    /// `Some(n_head)` for `q_proj`, `Some(num_key_value_heads)` for `k_proj`.
    pub n_head_kv: Option<u32>,
}

impl QkPermute {
    /// The permutation for a tensor of `n_rows` rows.
    pub fn rows(&self, n_rows: usize) -> Result<Vec<u32>> {
        permute_rows(n_rows, self.n_head, self.n_head_kv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_head_interleaves_halves() {
        assert_eq!(
            permute_rows(8, 1, None).unwrap(),
            vec![0, 4, 1, 5, 2, 6, 3, 7]
        );
    }

    #[test]
    fn gqa_uses_kv_heads() {
        // 2 kv heads of 4 rows: each head interleaved on its own.
        assert_eq!(
            permute_rows(8, 4, Some(2)).unwrap(),
            vec![0, 2, 1, 3, 4, 6, 5, 7]
        );
        assert_eq!(
            permute_rows(8, 4, Some(4)).unwrap(),
            permute_rows(8, 4, None).unwrap()
        );
    }

    #[test]
    fn is_a_permutation_and_rejects_odd_heads() {
        let mut p = permute_rows(64, 4, Some(4)).unwrap();
        p.sort_unstable();
        assert_eq!(p, (0..64).collect::<Vec<_>>());
        assert!(permute_rows(6, 4, None).is_err());
        assert!(permute_rows(8, 0, None).is_err());
    }
}
