//! Tensor shapes checked against config.json ([`crate::table::Hook::CheckShapes`]): the
//! reference writes whatever shapes a release holds, and llama.cpp refuses to load a file whose
//! tensors disagree with its keys; so a release whose projections, norms or MLP contradict
//! config.json, or whose sizes are absurd, is refused naming the tensor or the key. The names
//! are the Llama-style ones (Apertus' norms and ungated MLP, GLM-4's fused `gate_up_proj`).

use std::path::Path;

use weightport_core::{Error, Format, Location, Result};

use crate::config::{bad, HParams};
use crate::origin::SourceTensor;

/// The most a size of config.json may be (hidden size, heads, head size, MLP width): real
/// releases are far below; the products of the shapes stay far from overflow.
const MAX_SIZE: u64 = 1 << 20;

/// The sizes from config.json, each capped at [`MAX_SIZE`].
struct Dims {
    hidden: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    ffn: u64,
}

impl Dims {
    fn of(hp: &HParams) -> Result<Dims> {
        let size = |k: &str| -> Result<u64> {
            let v = u64::from(hp.need_u32(&[k])?);
            if v == 0 || v > MAX_SIZE {
                return Err(bad(
                    &hp.path,
                    format!("`{k}` {v} (1 to {MAX_SIZE} expected)"),
                ));
            }
            Ok(v)
        };
        let hidden = size("hidden_size")?;
        let heads = size("num_attention_heads")?;
        let kv_heads = match hp.u32(&["num_key_value_heads"])? {
            Some(_) => size("num_key_value_heads")?,
            None => heads,
        };
        let head_dim = match hp.u32(&["head_dim"])? {
            Some(_) => size("head_dim")?,
            None => hidden / heads,
        };
        Ok(Dims {
            hidden,
            heads,
            kv_heads,
            head_dim,
            ffn: size("intermediate_size")?,
        })
    }
}

/// Refuses a config.json whose sizes are absurd (zero or above [`MAX_SIZE`]), naming
/// the key, before anything is computed from them.
pub(crate) fn check_sizes(hp: &HParams) -> Result<()> {
    Dims::of(hp).map(drop)
}

/// Refuses, naming it, a tensor whose shape disagrees with config.json (the reference writes it
/// as it is, and llama.cpp cannot load the file), or a config.json whose sizes are absurd.
pub(crate) fn check_shape(hf: &str, t: &SourceTensor, hp: &HParams, dir: &Path) -> Result<()> {
    let d = Dims::of(hp)?;
    let (q, kv) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
    let part = hf
        .strip_prefix("model.layers.")
        .and_then(|r| r.split_once('.'))
        .map_or(hf, |(_, p)| p);
    let want: Vec<u64> = match part {
        "self_attn.q_proj.weight" => vec![q, d.hidden],
        "self_attn.k_proj.weight" | "self_attn.v_proj.weight" => vec![kv, d.hidden],
        "self_attn.o_proj.weight" => vec![d.hidden, q],
        "self_attn.q_proj.bias" => vec![q],
        "self_attn.k_proj.bias" | "self_attn.v_proj.bias" => vec![kv],
        "self_attn.q_norm.weight" | "self_attn.k_norm.weight" => vec![d.head_dim],
        "attention_layernorm.weight"
        | "feedforward_layernorm.weight"
        | "input_layernorm.weight"
        | "post_attention_layernorm.weight"
        | "model.norm.weight" => vec![d.hidden],
        "mlp.up_proj.weight" => vec![d.ffn, d.hidden],
        "mlp.gate_up_proj.weight" => vec![2 * d.ffn, d.hidden],
        "mlp.down_proj.weight" => vec![d.hidden, d.ffn],
        "model.embed_tokens.weight" | "lm_head.weight" => match t.shape.first() {
            Some(&rows) => vec![rows, d.hidden],
            None => vec![0, d.hidden],
        },
        _ => return Ok(()),
    };
    require_shape(t, &want, dir)
}

/// Refuses tensor `t` unless its shape is `want`, the one config.json's sizes give.
pub(crate) fn require_shape(t: &SourceTensor, want: &[u64], dir: &Path) -> Result<()> {
    if t.shape != want {
        return Err(Error::malformed(
            Location::file(dir).tensor(&t.name),
            Format::HfRelease,
            format!("shape {:?}, config.json's sizes give {want:?}", t.shape),
        ));
    }
    Ok(())
}
