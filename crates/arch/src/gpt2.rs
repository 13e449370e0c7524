//! GPT-2's named hook (`conversion/gpt2.py` `GPT2Model.set_gguf_parameters`): its own
//! hyper-parameter list ([`crate::table::KvLayout::Gpt2`]).
//!
//! Not data of the common writer: the class does not call it, reads every key by its GPT-2 name
//! (a missing one fails the reference, so it is refused here), writes the feed-forward length
//! as `4 × n_embd` whatever `n_inner` says (the common writer would take `n_inner`, or write
//! nothing when it is null, as GPT2Config leaves it), the context from `n_ctx` (which GPT2Config
//! does not fill: GPT-2 releases carry it in config.json) and no KV-head, rope or RMS keys.
//! The rest of GPT-2 is table data: the `transformer.` prefix rule, the name map, and the
//! Conv1D weights listed in [`crate::table::ArchSpec::transposed`].

use weightport_core::{MetaValue, Result};

use crate::config::{bad, HParams};

/// Writes GPT-2's keys through `put`, in the reference's order: blocks, context, embedding,
/// feed-forward, heads, LayerNorm epsilon, file type.
pub(crate) fn kvs(
    hp: &HParams,
    block_count: u32,
    file_type: u32,
    put: &mut impl FnMut(String, MetaValue),
) -> Result<()> {
    let a = |k: &str| format!("gpt2.{k}");
    let n_embd = hp.need_u32(&["n_embd"])?;
    let n_ff = n_embd
        .checked_mul(4)
        .ok_or_else(|| bad(&hp.path, "n_embd × 4 does not fit 32 bits"))?;
    let eps = hp
        .float(&["layer_norm_epsilon"])?
        .ok_or_else(|| bad(&hp.path, "layer_norm_epsilon is missing"))?;
    put(a("block_count"), MetaValue::U32(block_count));
    put(
        a("context_length"),
        MetaValue::U32(hp.need_u32(&["n_ctx"])?),
    );
    put(a("embedding_length"), MetaValue::U32(n_embd));
    put(a("feed_forward_length"), MetaValue::U32(n_ff));
    put(
        a("attention.head_count"),
        MetaValue::U32(hp.need_u32(&["n_head"])?),
    );
    put(
        a("attention.layer_norm_epsilon"),
        MetaValue::F32(eps as f32),
    );
    put("general.file_type".into(), MetaValue::U32(file_type));
    Ok(())
}
