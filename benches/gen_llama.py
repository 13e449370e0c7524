#!/usr/bin/env python3
"""Generate a Llama-shaped fp16 safetensors checkpoint for benchmarks (numpy only, no torch).

    python benches/gen_llama.py OUT.safetensors [--layers 5] [--writer auto|save_file|stream]

Needs numpy + safetensors only (no torch).

Default shape (Llama-2-7B widths, fewer layers): hidden 4096, intermediate 11008, vocab 32000.
Tensors: model.embed_tokens.weight [vocab, hidden]; per layer q/k/v/o_proj [hidden, hidden],
gate/up_proj [inter, hidden], down_proj [hidden, inter], input_layernorm /
post_attention_layernorm [hidden]; model.norm.weight [hidden]; lm_head.weight [vocab, hidden].
5 layers -> 48 tensors, 2,548,129,792 data bytes (~2.37 GiB); 10 layers -> 93 tensors,
4,571,963,392 data bytes (~4.26 GiB).

Data: N(0, 0.02) fp16 for matrices, 1 + N(0, 0.01) for norms. Each tensor gets its own
generator np.random.default_rng([seed, i]) (i = position in model order), filled in row
chunks, so the output does not depend on chunk size or writer, and is deterministic.

Writers (the two produce byte-identical files):
  save_file  build every tensor in RAM (~model size) then safetensors.numpy.save_file(...,
             metadata={"format": "pt"}).
  stream     write the same layout ourselves (header as safetensors serializes it: compact JSON,
             __metadata__ first, tensors sorted by dtype rank desc then name, space-padded to a
             multiple of 8) and generate each tensor chunk by chunk: RAM ~ one chunk.
  auto       save_file if the model is < 40% of MemAvailable, else stream.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import time

import numpy as np


def tensor_specs(layers: int, hidden: int, inter: int, vocab: int):
    """[(name, shape, kind)] in model (state_dict) order; kind is 'w' (matrix) or 'norm'."""
    specs = [("model.embed_tokens.weight", (vocab, hidden), "w")]
    for i in range(layers):
        p = f"model.layers.{i}."
        specs += [
            (p + "self_attn.q_proj.weight", (hidden, hidden), "w"),
            (p + "self_attn.k_proj.weight", (hidden, hidden), "w"),
            (p + "self_attn.v_proj.weight", (hidden, hidden), "w"),
            (p + "self_attn.o_proj.weight", (hidden, hidden), "w"),
            (p + "mlp.gate_proj.weight", (inter, hidden), "w"),
            (p + "mlp.up_proj.weight", (inter, hidden), "w"),
            (p + "mlp.down_proj.weight", (hidden, inter), "w"),
            (p + "input_layernorm.weight", (hidden,), "norm"),
            (p + "post_attention_layernorm.weight", (hidden,), "norm"),
        ]
    specs += [("model.norm.weight", (hidden,), "norm"), ("lm_head.weight", (vocab, hidden), "w")]
    return specs


def fill_chunks(index: int, shape, kind: str, seed: int, chunk_elems: int):
    """Yield consecutive fp16 chunks (1-D arrays) of tensor number `index`."""
    rng = np.random.default_rng([seed, index])
    total = int(np.prod(shape))
    row = shape[-1]
    step = max(row, (chunk_elems // row) * row)  # whole rows, so chunking is invisible
    done = 0
    while done < total:
        n = min(step, total - done)
        x = rng.standard_normal(n, dtype=np.float32)
        if kind == "norm":
            x *= np.float32(0.01)
            x += np.float32(1.0)
        else:
            x *= np.float32(0.02)
        yield x.astype(np.float16)
        done += n


def header_bytes(specs, metadata):
    # All tensors are F16, so the reference order (dtype rank desc, then name) is name order.
    entries = {"__metadata__": metadata} if metadata is not None else {}
    offset = 0
    for name, shape, _ in sorted(specs, key=lambda s: s[0].encode("utf-8")):
        nbytes = int(np.prod(shape)) * 2
        entries[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    h = json.dumps(entries, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return h + b" " * (-len(h) % 8), offset


def write_stream(out, specs, seed, chunk_elems, metadata):
    header, total = header_bytes(specs, metadata)
    index_of = {name: i for i, (name, _, _) in enumerate(specs)}
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        for name, shape, kind in sorted(specs, key=lambda s: s[0].encode("utf-8")):
            for chunk in fill_chunks(index_of[name], shape, kind, seed, chunk_elems):
                f.write(chunk.tobytes())
    os.replace(tmp, out)
    return total


def write_save_file(out, specs, seed, chunk_elems, metadata):
    from safetensors.numpy import save_file

    tensors = {}
    for i, (name, shape, kind) in enumerate(specs):
        arr = np.empty(int(np.prod(shape)), dtype=np.float16)
        pos = 0
        for chunk in fill_chunks(i, shape, kind, seed, chunk_elems):
            arr[pos : pos + chunk.size] = chunk
            pos += chunk.size
        tensors[name] = arr.reshape(shape)
    save_file(tensors, out, metadata=metadata)
    return sum(a.nbytes for a in tensors.values())


def mem_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=11008)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk-mib", type=int, default=64, help="generation chunk (fp32 scratch) size")
    ap.add_argument("--writer", choices=["auto", "save_file", "stream"], default="auto")
    a = ap.parse_args(argv)

    specs = tensor_specs(a.layers, a.hidden, a.intermediate, a.vocab)
    total = sum(int(np.prod(s)) * 2 for _, s, _ in specs)
    writer = a.writer
    if writer == "auto":
        writer = "save_file" if total < 0.4 * mem_available() else "stream"
    chunk_elems = max(1, a.chunk_mib * 2**20 // 4)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    t0 = time.monotonic()
    fn = write_save_file if writer == "save_file" else write_stream
    fn(a.out, specs, a.seed, chunk_elems, {"format": "pt"})
    dt = time.monotonic() - t0
    print(
        f"{a.out}: {len(specs)} tensors, {total} data bytes ({total / 2**30:.2f} GiB), "
        f"file {os.path.getsize(a.out)} bytes, writer={writer}, {dt:.1f}s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
