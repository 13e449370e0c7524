//! GLM-4 in transformers' layout (`GlmForCausalLM`), which the reference converts with its
//! `ChatGLMModel` (`conversion/chatglm.py`, arch `chatglm`): its own key list
//! ([`crate::table::KvLayout::ChatGlm`]).

use serde_json::Value;
use weightport_core::{MetaValue, Result};

use crate::config::{bad, HParams};

/// The largest head count or size accepted (real releases: 32 heads, 4096 wide).
const MAX_SIZE: u32 = 1 << 20;

/// `ChatGLMModel.set_gguf_parameters`: context (`seq_length`, else the embedding width),
/// embedding, feed-forward, blocks, heads, KV heads, RMS ε (`layernorm_epsilon`, else 1e-5:
/// config.json's `rms_norm_eps` is not read), file type, rope dimensions (`attention_dim`, else
/// `hidden_size / num_attention_heads`, times the partial rotary factor, truncated),
/// `tokenizer.ggml.add_bos_token` false, rope base 10000 × `rope_ratio` (config.json's
/// `rope_theta` is not read).
pub(crate) fn kvs(
    hp: &HParams,
    block_count: u32,
    file_type: u32,
    put: &mut impl FnMut(String, MetaValue),
) -> Result<()> {
    let name = hp.raw.get("_name_or_path").and_then(Value::as_str);
    if name.is_some_and(|n| n.contains("THUDM/chatglm3-6b")) {
        // The reference then reads ChatGLM3's own tokenizer (`set_vocab_chatglm3`), not done.
        return Err(weightport_core::Error::Unsupported {
            at: weightport_core::Location::file(&hp.path),
            format: Some(weightport_core::Format::Gguf),
            what: "ChatGLM3's tokenizer (`_name_or_path` THUDM/chatglm3-6b) is not supported yet"
                .into(),
        });
    }
    let a = |k: &str| format!("chatglm.{k}");
    let u = MetaValue::U32;
    let n_embed = hp.need_u32(&["hidden_size", "n_embed"])?;
    let n_head = hp.need_u32(&["n_head", "num_attention_heads"])?;
    if n_head == 0 || n_head > MAX_SIZE {
        return Err(bad(&hp.path, format!("{n_head} attention heads")));
    }
    let n_head_kv = hp
        .u32(&["multi_query_group_num", "num_key_value_heads"])?
        .unwrap_or(n_head);
    put(
        a("context_length"),
        u(hp.u32(&["seq_length"])?.unwrap_or(n_embed)),
    );
    put(a("embedding_length"), u(n_embed));
    let ffn = match hp.u32(&["ffn_hidden_size", "intermediate_size"])? {
        Some(f) => f,
        None => n_embed
            .checked_mul(4)
            .ok_or_else(|| bad(&hp.path, "4 × `hidden_size` overflows"))?,
    };
    put(a("feed_forward_length"), u(ffn));
    put(a("block_count"), u(block_count));
    put(a("attention.head_count"), u(n_head));
    put(a("attention.head_count_kv"), u(n_head_kv));
    let eps = hp.float(&["layernorm_epsilon"])?.unwrap_or(1e-5);
    put(
        a("attention.layer_norm_rms_epsilon"),
        MetaValue::F32(eps as f32),
    );
    put("general.file_type".into(), u(file_type));
    let rope_dim = match hp.u32(&["attention_dim"])? {
        Some(d) => d,
        None => hp.need_u32(&["hidden_size"])? / hp.need_u32(&["num_attention_heads"])?.max(1),
    };
    let factor = hp
        .rope()
        .get("partial_rotary_factor")
        .and_then(Value::as_f64)
        .unwrap_or(0.5);
    let dims = (f64::from(rope_dim) * factor).trunc();
    if !(0.0..=f64::from(u32::MAX)).contains(&dims) {
        return Err(bad(
            &hp.path,
            format!("rope dimensions {dims} (partial_rotary_factor {factor})"),
        ));
    }
    put(a("rope.dimension_count"), u(dims as u32));
    put(
        "tokenizer.ggml.add_bos_token".into(),
        MetaValue::Bool(false),
    );
    let ratio = hp.float(&["rope_ratio"])?.unwrap_or(1.0);
    put(
        a("rope.freq_base"),
        MetaValue::F32((10000.0 * ratio) as f32),
    );
    Ok(())
}
