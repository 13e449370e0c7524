#!/usr/bin/env python3
"""config.json of a LlamaForCausalLM release derived from its safetensors header (stdlib only).

    python benches/llama_config.py MODEL.safetensors HEADS v5|legacy > config.json

v5: what transformers 5 save_pretrained writes (fixtures/good/arch/llama/config.json);
legacy: transformers 4.x, as in most Llama repos on the hub. Used by gguf.sh and crash_loop.sh.
"""
import json, struct, sys

path, heads, style = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(path, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    hdr = json.loads(f.read(n))
hdr.pop("__metadata__", None)
vocab, hidden = hdr["model.embed_tokens.weight"]["shape"]
inter = hdr["model.layers.0.mlp.gate_proj.weight"]["shape"][0]
layers = 1 + max(int(k.split(".")[2]) for k in hdr if k.startswith("model.layers."))
kv_heads = hdr["model.layers.0.self_attn.k_proj.weight"]["shape"][0] // (hidden // heads)
assert hidden % heads == 0, f"hidden {hidden} is not a multiple of HEADS={heads}"
dtype = {"F16": "float16", "BF16": "bfloat16", "F32": "float32"}[hdr["model.embed_tokens.weight"]["dtype"]]
cfg = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "head_dim": hidden // heads,
    "hidden_act": "silu",
    "hidden_size": hidden,
    "initializer_range": 0.02,
    "intermediate_size": inter,
    "max_position_embeddings": 4096,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": heads,
    "num_hidden_layers": layers,
    "num_key_value_heads": kv_heads,
    "pad_token_id": None,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": "lm_head.weight" not in hdr,
    "use_cache": True,
    "vocab_size": vocab,
}
if style == "v5":    # what transformers 5 save_pretrained writes (fixtures/good/arch/llama/config.json)
    cfg.update(dtype=dtype, rope_parameters={"rope_theta": 10000.0, "rope_type": "default"},
               transformers_version="5.24.0")
elif style == "legacy":    # transformers 4.x, as in most Llama repos on the hub
    cfg.update(torch_dtype=dtype, rope_theta=10000.0, rope_scaling=None, transformers_version="4.46.0")
else:
    sys.exit(f"HF_CONFIG={style}: expected legacy or v5")
print(json.dumps(dict(sorted(cfg.items())), indent=2))
