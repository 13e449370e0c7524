//! XLM-RoBERTa's named hook ([`crate::table::Hook::PositionOffsetFromPad`], after the reference's
//! `BertModel._xlmroberta_tokenizer_init` and `XLMRobertaModel.modify_tensors` in
//! `conversion/bert.py`): RoBERTa numbers positions from `pad_token_id + 1`, so the first
//! `pad_token_id + 1` rows of `embeddings.position_embeddings` are never used.
//!
//! * When the config has a `pad_token_id` (XLMRobertaConfig's default is 1), the offset is
//!   `pad_token_id + 1`: `max_position_embeddings` is lowered by it before any key is written
//!   (bge-m3's 8194 positions become `bert.context_length` 8192) and `position_embd.weight`
//!   keeps rows `offset..` (an [`crate::Origin::Rows`]: `data_torch[offset:, :]`).
//! * With `"pad_token_id": null` (which transformers keeps) nothing changes; a config without
//!   the key gets XLMRobertaConfig's default 1.
//! * jina-embeddings-v3 (`lora_adaptations` in config.json) is another architecture in the
//!   reference (`jina-bert-v3` plus one LoRA file per task): refused.
//!
//! The vocabulary is the other half of the class ([`crate::tokenizer::xlmr`]).

use weightport_core::{Error, Format, Location, Result};

use crate::config::{bad, read_json, HParams};

/// Applies the offset to `hp` (as the reference does in its constructor) and returns it, or
/// `None` when the config has no `pad_token_id`.
pub(crate) fn position_offset(hp: &mut HParams) -> Result<Option<u64>> {
    if hp.raw.get("lora_adaptations").is_some_and(|v| !v.is_null()) {
        return Err(Error::Unsupported {
            at: Location::file(&hp.path),
            format: Some(Format::Gguf),
            what: "XLM-RoBERTa with LoRA adaptations (jina-embeddings-v3) is not supported yet"
                .into(),
        });
    }
    // transformers keeps an explicit `"pad_token_id": null` (the table's default fills only an
    // absent key here, but the normalised config no longer tells the two apart).
    if read_json(&hp.path)?
        .get("pad_token_id")
        .is_some_and(serde_json::Value::is_null)
    {
        return Ok(None);
    }
    let Some(pad) = hp.uint(&["pad_token_id"])? else {
        return Ok(None);
    };
    let offset = pad
        .checked_add(1)
        .ok_or_else(|| bad(&hp.path, "pad_token_id is too large"))?;
    if let Some(n) = hp.uint(&["max_position_embeddings"])? {
        let left = n.checked_sub(offset).ok_or_else(|| {
            bad(
                &hp.path,
                format!(
                    "max_position_embeddings {n} is smaller than pad_token_id + 1 = {offset} \
                     (positions start after the padding id)"
                ),
            )
        })?;
        hp.raw
            .insert("max_position_embeddings".into(), serde_json::json!(left));
    }
    Ok(Some(offset))
}

/// The rows of `position_embd` that are kept, for a tensor of `rows` rows: `offset..rows`.
pub(crate) fn kept_rows(
    hp: &HParams,
    tensor: &str,
    rows: u64,
    offset: u64,
) -> Result<std::ops::Range<u64>> {
    if offset >= rows {
        return Err(Error::Unsupported {
            at: Location::file(&hp.path).tensor(tensor),
            format: Some(Format::Gguf),
            what: format!(
                "{rows} position embeddings, none left after the first pad_token_id + 1 = {offset}"
            ),
        });
    }
    Ok(offset..rows)
}
