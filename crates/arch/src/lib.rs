//! weightport-arch: what an HF release means in GGUF terms.
//!
//! Pure functions and data the pipeline calls to convert an HF release (config.json,
//! safetensors, tokenizer files) the way llama.cpp's `convert_hf_to_gguf.py` does
//! (docs/specs/gguf.md §5). Nothing here reads tensor data.
//!
//! * [`plan`]: config.json → the ordered GGUF KV list (exact GGUF types) and the output tensors
//!   (GGUF name, source, shape, q/k permutation, F32 decision, dtype), dropped tensors.
//!   An unsupported architecture is refused after reading config.json alone.
//! * [`permute_rows`]: the Llama q/k row permutation as a row-index gather.
//! * [`tokenizer::export`]: SentencePiece / BPE vocabularies → `tokenizer.ggml.*`, with the
//!   pre-tokenizer check hash computed by HF's `tokenizers` crate.
//! * [`pooling`]: a sentence-transformers release's pooling type (`modules.json`).
//! * [`phi3`]: Phi-3's hyper-parameter list and longrope factors.
//! * [`gpt2`]: GPT-2's hyper-parameter list.
//! * [`ssm`]: Mamba 2's hyper-parameter list and dimensions.
//! * [`split`]: fused tensors written as several (DeepSeek-V2's MLA `kv_b_proj`).
//! * [`fp8`]: the scaled weights of an FP8 release (`weight_scale_inv`) and their blocks.
//! * [`xlmr`]: XLM-RoBERTa's position offset.
//! * `minimax`: MiniMax-M2's refused variants and shape checks.
//! * `nemotron_h`: Nemotron-H's config normalization, layer kinds and keys.
//! * [`xielu`]: Apertus' xIELU parameters, the tensor values the caller reads for the plan.
//! * [`lora`], [`plan_adapter`]: PEFT LoRA adapters, their checks and their GGUF adapter plan.
//! * [`mmproj`], [`plan_mmproj`]: multimodal projectors (`clip` GGUF files for llama.cpp's mtmd).
//! * [`table`]: the architecture table (adding an architecture is adding data there).
#![deny(missing_docs)]

pub mod card;
mod chatglm;
mod config;
pub mod fp8;
pub mod gemma3n;
mod gpt2;
pub mod lora;
mod minimax;
pub mod mix;
pub mod mmproj;
pub mod naming;
mod nemotron_h;
mod origin;
mod permute;
mod phi3;
pub mod plan;
mod pooling;
mod qwen_next;
mod shapes;
pub mod split;
mod ssm;
mod table;
pub mod tokenizer;
mod value_op;
pub mod xielu;
mod xlmr;

pub use config::{hf_architecture, HParams};
pub use origin::{BlockMap, BlockPart, Origin, SourceTensor, View};
pub use permute::{permute_rows, QkPermute};
pub use plan::{
    check_supported, check_supported_within, llama3_rope_factors, plan, plan_adapter, plan_mmproj,
    size_label, value_tensors, ArchPlan, OutTensor, OutType, PlanOptions, RowScale, ValueOp,
};
pub use tokenizer::{export as export_tokenizer, TokenType, VocabExport};
