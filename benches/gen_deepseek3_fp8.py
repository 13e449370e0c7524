#!/usr/bin/env python3
"""Generate a DeepSeek-V3-shaped FP8 HF release for the FP8 benchmark (numpy only, no torch).

    python benches/gen_deepseek3_fp8.py OUTDIR [--layers 8] [--experts 48] [--hidden 2048]
                                               [--moe-intermediate 1024] [--vocab 32000]

Writes OUTDIR/model-0000i-of-0000n.safetensors, model.safetensors.index.json, a
DeepseekV3ForCausalLM config.json with DeepSeek-V3's `quantization_config` (fp8, e4m3, dynamic
activations, 128×128 blocks) and the BPE tokenizer files of fixtures/good/arch/qwen2/ (whose
check hash the reference does not know: benches/fp8.sh gives it the pre-tokenizer `qwen2`).

Layout, as DeepSeek-V3's release: MLA (q_lora_rank 512, kv_lora_rank 256, 16 heads of nope 128 +
rope 64, v 128; `kv_a_proj_with_mqa` has 320 rows, a ragged 128-block edge), one leading dense
layer (intermediate 4096), then MoE layers of EXPERTS routed experts (per expert
`mlp.experts.E.{gate,up,down}_proj.weight`) plus one shared expert, the router `mlp.gate.weight`
BF16 and its `e_score_correction_bias` F32. Every decoder linear weight is F8_E4M3 with an F32
`weight_scale_inv` per 128×128 block; embeddings, head and norms BF16. Shard 1 holds the
embeddings, head and final norm; then per layer one shard with the attention, norms, router,
shared expert and the first half of the experts, one with the second half: the experts of every
layer lie in two files. Default: 8 layers, 48 experts: ~2.3 GiB.

Data: FP8 bytes uniform over the finite E4M3 values (no NaN), scales 2⁻¹⁰ · U(0.5, 1.5), BF16
N(0, 0.02) (norms 1 + N(0, 0.01)); each tensor from np.random.default_rng([seed, i]), written
chunk by chunk; deterministic.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TOKENIZER = HERE.parent / "fixtures" / "good" / "arch" / "qwen2"
BLOCK = 128
CHUNK = 1 << 24


def fp8(name, shape):
    """An FP8 weight and its block scale."""
    s = (-(-shape[0] // BLOCK), -(-shape[1] // BLOCK))
    return [(name, shape, "F8_E4M3"), (name + "_scale_inv", s, "F32")]


def attention(p, a):
    h, heads = a.hidden, 16
    out = [(p + "input_layernorm.weight", (h,), "norm"), (p + "post_attention_layernorm.weight", (h,), "norm"),
           (p + "self_attn.q_a_layernorm.weight", (512,), "norm"),
           (p + "self_attn.kv_a_layernorm.weight", (256,), "norm")]
    out += fp8(p + "self_attn.q_a_proj.weight", (512, h))
    out += fp8(p + "self_attn.q_b_proj.weight", (heads * 192, 512))
    out += fp8(p + "self_attn.kv_a_proj_with_mqa.weight", (256 + 64, h))
    out += fp8(p + "self_attn.kv_b_proj.weight", (heads * 256, 256))
    out += fp8(p + "self_attn.o_proj.weight", (h, heads * 128))
    return out


def mlp(p, hidden, inter):
    return (fp8(p + "gate_proj.weight", (inter, hidden)) + fp8(p + "up_proj.weight", (inter, hidden))
            + fp8(p + "down_proj.weight", (hidden, inter)))


def shards(a):
    out = [[("model.embed_tokens.weight", (a.vocab, a.hidden), "BF16"),
            ("lm_head.weight", (a.vocab, a.hidden), "BF16"), ("model.norm.weight", (a.hidden,), "norm")]]
    for i in range(a.layers):
        p = f"model.layers.{i}."
        if i == 0:
            out.append(attention(p, a) + mlp(p + "mlp.", a.hidden, 4096))
            continue
        first = attention(p, a) + mlp(p + "mlp.shared_experts.", a.hidden, a.moe_intermediate)
        first += [(p + "mlp.gate.weight", (a.experts, a.hidden), "BF16"),
                  (p + "mlp.gate.e_score_correction_bias", (a.experts,), "F32")]
        experts = [mlp(f"{p}mlp.experts.{e}.", a.hidden, a.moe_intermediate) for e in range(a.experts)]
        half = a.experts // 2
        out.append(first + [t for e in experts[:half] for t in e])
        out.append([t for e in experts[half:] for t in e])
    return out


WIDTH = {"F8_E4M3": 1, "F32": 4, "BF16": 2, "norm": 2}


def chunks(index, shape, kind, seed):
    rng = np.random.default_rng([seed, index])
    total = int(np.prod(shape))
    done = 0
    while done < total:
        n = min(CHUNK, total - done)
        if kind == "F8_E4M3":
            b = rng.integers(0, 0x7F, size=n, dtype=np.uint8)  # 0x7f is NaN
            b |= (rng.integers(0, 2, size=n, dtype=np.uint8) << 7)
            yield b.tobytes()
        elif kind == "F32":
            yield (np.float32(2.0 ** -10) * rng.uniform(0.5, 1.5, n).astype(np.float32)).tobytes()
        else:
            x = rng.standard_normal(n, dtype=np.float32) * np.float32(0.01 if kind == "norm" else 0.02)
            if kind == "norm":
                x += np.float32(1.0)
            yield (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()  # BF16 by truncation
        done += n


def write_shard(path, specs, seed, first_index):
    entries, offset = {"__metadata__": {"format": "pt"}}, 0
    ordered = sorted(enumerate(specs), key=lambda s: s[1][0])
    for _, (name, shape, kind) in ordered:
        n = int(np.prod(shape)) * WIDTH[kind]
        dtype = "BF16" if kind == "norm" else kind
        entries[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(entries, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(str(path) + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for i, (name, shape, kind) in ordered:
            for c in chunks(first_index + i, shape, kind, seed):
                f.write(c)
    os.replace(str(path) + ".tmp", path)
    return offset


def config(a):
    return {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "vocab_size": a.vocab, "hidden_size": a.hidden, "intermediate_size": 4096,
        "moe_intermediate_size": a.moe_intermediate, "num_hidden_layers": a.layers,
        "num_attention_heads": 16, "num_key_value_heads": 16, "n_shared_experts": 1,
        "n_routed_experts": a.experts, "num_experts_per_tok": 8, "routed_scaling_factor": 2.5,
        "kv_lora_rank": 256, "q_lora_rank": 512, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "qk_nope_head_dim": 128, "n_group": 8, "topk_group": 4, "first_k_dense_replace": 1,
        "norm_topk_prob": True, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000,
        "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                         "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
        "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16",
        "num_nextn_predict_layers": 1,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": [BLOCK, BLOCK]},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--experts", type=int, default=48)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--moe-intermediate", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seed", type=int, default=30)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    parts = shards(a)
    weight_map, total, index = {}, 0, 0
    for k, specs in enumerate(parts):
        fname = f"model-{k + 1:05d}-of-{len(parts):05d}.safetensors"
        total += write_shard(a.out / fname, specs, a.seed, index)
        index += len(specs)
        weight_map.update({name: fname for name, _, _ in specs})
    (a.out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2, sort_keys=True))
    (a.out / "config.json").write_text(json.dumps(config(a), indent=2))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / f, a.out / f)
    print(f"{a.out}: {total} data bytes ({total / 2**30:.2f} GiB) in {len(parts)} shards")


if __name__ == "__main__":
    main()
