#!/usr/bin/env python3
"""Generate a Mixtral-shaped fp16 HF release for the MoE benchmark (numpy only, no torch).

    python benches/gen_mixtral.py OUTDIR [--layers 4] [--experts 8] [--hidden 2048]
                                         [--intermediate 5632] [--vocab 32000]

Writes OUTDIR/model-0000i-of-0000n.safetensors, model.safetensors.index.json, a
MixtralForCausalLM config.json (transformers-5 keys) and the tokenizer files of
fixtures/good/arch/llama/ (560-piece SentencePiece; the reference converter pads the vocabulary to
vocab_size with [PAD] tokens, and so does weightport).

Layout (what the benchmark is about): per-expert tensors
`model.layers.L.block_sparse_moe.experts.E.w{1,2,3}.weight`, as Mixtral releases store them, and
the experts of every layer split across two shards: shard 1 holds the embeddings, the output head
and the final norm; then, per layer, one shard with the attention, norms, router and the first
half of the experts, and one with the second half. A converter that stacks experts therefore has
to combine tensors of two files for every `ffn_*_exps` tensor.

Default shape (hidden 2048, 16 heads of 128, 4 KV heads, expert intermediate 5632 = 22 × 256, so
k-quants need no fallback, vocab 32000, 4 layers of 8 experts): 127 tensors, 2,560,790,528 data
bytes (2.38 GiB), 9 shards (8 of ~265–285 MiB holding experts, 250 MiB of embeddings and head).

Data: N(0, 0.02) fp16 for matrices, 1 + N(0, 0.01) for norms, each tensor from its own generator
np.random.default_rng([seed * 1000 + shard, i]) (gen_llama.fill_chunks), written chunk by chunk (RAM ~ one chunk);
deterministic.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gen_llama import write_stream  # noqa: E402  (same header layout and data as run.sh's model)

ROOT = HERE.parent
TOKENIZER = ROOT / "fixtures" / "good" / "arch" / "llama"
TOKENIZER_FILES = ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json")


def shards(layers: int, experts: int, hidden: int, inter: int, vocab: int, heads: int, kv_heads: int):
    """[[(name, shape, kind)]] per shard, in file order."""
    head_dim = hidden // heads
    out = [[
        ("model.embed_tokens.weight", (vocab, hidden), "w"),
        ("lm_head.weight", (vocab, hidden), "w"),
        ("model.norm.weight", (hidden,), "norm"),
    ]]
    half = experts // 2
    for i in range(layers):
        p = f"model.layers.{i}."

        def expert(e):
            q = f"{p}block_sparse_moe.experts.{e}."
            return [(q + "w1.weight", (inter, hidden), "w"), (q + "w2.weight", (hidden, inter), "w"),
                    (q + "w3.weight", (inter, hidden), "w")]

        first = [
            (p + "input_layernorm.weight", (hidden,), "norm"),
            (p + "post_attention_layernorm.weight", (hidden,), "norm"),
            (p + "self_attn.q_proj.weight", (heads * head_dim, hidden), "w"),
            (p + "self_attn.k_proj.weight", (kv_heads * head_dim, hidden), "w"),
            (p + "self_attn.v_proj.weight", (kv_heads * head_dim, hidden), "w"),
            (p + "self_attn.o_proj.weight", (hidden, heads * head_dim), "w"),
            (p + "block_sparse_moe.gate.weight", (experts, hidden), "w"),
        ]
        for e in range(half):
            first += expert(e)
        second = []
        for e in range(half, experts):
            second += expert(e)
        out += [first, second]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk-mib", type=int, default=64)
    a = ap.parse_args(argv)
    if a.experts < 2 or a.experts % 2:
        sys.exit("--experts must be even and ≥ 2 (half of a layer's experts go to each shard)")

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    parts = shards(a.layers, a.experts, a.hidden, a.intermediate, a.vocab, a.heads, a.kv_heads)
    n = len(parts)
    chunk_elems = max(1, a.chunk_mib * 2**20 // 4)
    t0 = time.monotonic()
    weight_map, total, count = {}, 0, 0
    for k, specs in enumerate(parts, 1):
        name = f"model-{k:05d}-of-{n:05d}.safetensors"
        weight_map.update((s[0], name) for s in specs)
        # write_stream seeds tensor i of the shard with [seed, i]: one seed per shard.
        total += write_stream(str(out / name), specs, a.seed * 1000 + k, chunk_elems, {"format": "pt"})
        count += len(specs)
    params = total // 2
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_parameters": params, "total_size": total},
         "weight_map": dict(sorted(weight_map.items()))}, indent=2, sort_keys=True) + "\n")
    cfg = {
        "architectures": ["MixtralForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "dtype": "float16",
        "eos_token_id": 2,
        "head_dim": a.hidden // a.heads,
        "hidden_act": "silu",
        "hidden_size": a.hidden,
        "initializer_range": 0.02,
        "intermediate_size": a.intermediate,
        "max_position_embeddings": 32768,
        "model_type": "mixtral",
        "num_attention_heads": a.heads,
        "num_experts_per_tok": 2,
        "num_hidden_layers": a.layers,
        "num_key_value_heads": a.kv_heads,
        "num_local_experts": a.experts,
        "output_router_logits": False,
        "rms_norm_eps": 1e-05,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
        "router_aux_loss_coef": 0.02,
        "router_jitter_noise": 0.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "transformers_version": "5.24.0",
        "use_cache": True,
        "vocab_size": a.vocab,
    }
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for f in TOKENIZER_FILES:
        shutil.copy(TOKENIZER / f, out / f)
    print(f"{out}: {count} tensors in {n} shards, {total} data bytes ({total / 2**30:.2f} GiB), "
          f"{time.monotonic() - t0:.1f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
