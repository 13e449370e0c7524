//! Greedy sharding as huggingface_hub's `split_state_dict_into_shards_factory` does it
//! (docs/specs/safetensors.md §4.3): tensors in order; a tensor larger than the limit becomes its own shard at once
//! (while the open shard stays open); otherwise the open shard is closed when adding the tensor
//! would exceed the limit (strictly greater: exactly the limit fits).

/// `model-00001-of-00004.safetensors` style names (1-based `i`).
pub fn shard_name(i: usize, n: usize) -> String {
    format!("model-{i:05}-of-{n:05}.safetensors")
}

/// Parses a shard name `{prefix}-0000i-of-0000n.{ext}` (digits only, at least 5, `i` ≤ `n`)
/// into `(prefix, i, n, ext)`; never panics on any string.
pub fn parse_shard_name(name: &str) -> Option<(&str, usize, usize, &str)> {
    let (stem, ext) = name.split_once('.')?;
    let (head, n) = stem.rsplit_once("-of-")?;
    let (prefix, i) = head.rsplit_once('-')?;
    let digits = |s: &str| s.len() >= 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(i) || !digits(n) || prefix.is_empty() {
        return None;
    }
    let (i, n): (usize, usize) = (i.parse().ok()?, n.parse().ok()?);
    (i >= 1 && i <= n).then_some((prefix, i, n, ext))
}

/// True for the names a safetensors repo output owns: its shards, single file and index.
pub fn is_repo_weights_name(name: &str) -> bool {
    name == SINGLE
        || name == INDEX
        || parse_shard_name(name).is_some_and(|(p, _, _, e)| p == "model" && e == "safetensors")
}

/// The single-file name.
pub const SINGLE: &str = "model.safetensors";
/// The index file name.
pub const INDEX: &str = "model.safetensors.index.json";

/// Splits tensors of the given byte sizes into shards of at most `max` bytes (a tensor over
/// `max` alone). Returns tensor indices per shard; never an empty shard, and at least one shard.
pub fn assign(sizes: &[u64], max: u64) -> Vec<Vec<usize>> {
    let mut shards = Vec::new();
    let mut cur = Vec::new();
    let mut cur_size = 0u64;
    for (i, &s) in sizes.iter().enumerate() {
        if s > max {
            shards.push(vec![i]);
            continue;
        }
        if cur_size + s > max {
            shards.push(std::mem::take(&mut cur));
            cur_size = 0;
        }
        cur.push(i);
        cur_size += s;
    }
    if !cur.is_empty() || shards.is_empty() {
        shards.push(cur);
    }
    shards
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversized_tensor_gets_its_own_shard_first() {
        // docs/specs/safetensors.md §4.3, verified against huggingface_hub: sizes [1,1,10,1,2], max 3.
        assert_eq!(
            assign(&[1, 1, 10, 1, 2], 3),
            vec![vec![2], vec![0, 1, 3], vec![4]]
        );
        assert_eq!(assign(&[3, 3], 3), vec![vec![0], vec![1]]);
        assert_eq!(assign(&[1, 2], 3), vec![vec![0, 1]]);
        assert_eq!(assign(&[], 3), vec![Vec::<usize>::new()]);
        assert_eq!(shard_name(1, 4), "model-00001-of-00004.safetensors");
    }

    #[test]
    fn shard_names_parse_without_panicking() {
        assert_eq!(
            parse_shard_name("model-00001-of-00004.safetensors"),
            Some(("model", 1, 4, "safetensors"))
        );
        assert!(is_repo_weights_name("model-00002-of-00002.safetensors"));
        assert!(is_repo_weights_name("model.safetensors.index.json"));
        assert!(!is_repo_weights_name("config.json"));
        assert!(!is_repo_weights_name("model-1-of-4.safetensors"));
        assert!(!is_repo_weights_name("model-00005-of-00004.safetensors"));
        // The name that made the foundation panic (a multi-byte char across a byte slice).
        assert!(!is_repo_weights_name("model-00001-o€1234.safetensors"));
        assert!(parse_shard_name("€-00001-of-00002.x").is_some());
        assert!(parse_shard_name("--of-.").is_none());
    }
}
