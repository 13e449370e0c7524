#!/usr/bin/env python3
"""Python baseline for `weightport convert IN -o OUTDIR --shard-size SIZE`.

    python benches/py_reshard.py IN.safetensors OUTDIR SIZE [--framework pt|numpy]

What a careful Python user would do with the reference libraries:
  1. read the tensor list (offset order), dtypes and shapes with safetensors.safe_open (header only);
  2. split with huggingface_hub.split_state_dict_into_shards_factory over those byte sizes
     (same greedy algorithm as split_torch_state_dict_into_shards / save_pretrained), with
     filename_pattern "model{suffix}.safetensors"; SIZE is parsed by huggingface_hub
     ("500MB" = 500*10**6; a bare integer is bytes);
  3. for each shard: get_tensor only that shard's tensors, save_file(..., metadata={"format": "pt"}),
     drop them;
  4. if more than one shard, write model.safetensors.index.json
     (json.dumps(indent=2, sort_keys=True) + "\\n", metadata total_parameters + total_size).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time

from huggingface_hub.serialization import split_state_dict_into_shards_factory
from safetensors import safe_open

BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "I16": 16, "U16": 16, "F16": 16,
    "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("outdir")
    ap.add_argument("size")
    ap.add_argument("--framework", choices=["pt", "numpy"], default="pt")
    a = ap.parse_args(argv)
    size = int(a.size) if a.size.isdigit() else a.size

    t0 = time.monotonic()
    if a.framework == "pt":
        from safetensors.torch import save_file
    else:
        from safetensors.numpy import save_file

    os.makedirs(a.outdir, exist_ok=True)
    with safe_open(a.input, framework=a.framework) as f:
        names = list(f.offset_keys())
        nbytes, numel = {}, {}
        for n in names:
            sl = f.get_slice(n)
            numel[n] = math.prod(sl.get_shape())
            nbytes[n] = numel[n] * BITS[sl.get_dtype()] // 8
        # Values are indices into `names` (the factory skips str values, so not the names).
        split = split_state_dict_into_shards_factory(
            {n: i for i, n in enumerate(names)},
            get_storage_size=lambda i: nbytes[names[i]],
            get_storage_id=lambda i: None,
            filename_pattern="model{suffix}.safetensors",
            max_shard_size=size,
        )
        for filename, shard_names in split.filename_to_tensors.items():
            tensors = {n: f.get_tensor(n) for n in shard_names}
            save_file(tensors, os.path.join(a.outdir, filename), metadata={"format": "pt"})
            del tensors
    if split.is_sharded:
        index = {
            "metadata": {"total_parameters": sum(numel.values()), "total_size": split.metadata["total_size"]},
            "weight_map": split.tensor_to_filename,
        }
        with open(os.path.join(a.outdir, "model.safetensors.index.json"), "w") as fh:
            fh.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    n_files = len(split.filename_to_tensors)
    print(f"py_reshard: {len(names)} tensors -> {n_files} file(s) in {a.outdir} ({time.monotonic() - t0:.2f}s)")


if __name__ == "__main__":
    main()
