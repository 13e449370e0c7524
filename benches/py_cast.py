#!/usr/bin/env python3
"""The Python baseline for `weightport convert --dtype`: what users run today.

    python benches/py_cast.py IN.safetensors OUT.safetensors f32|bf16|f16

safetensors.torch.load_file + .to(dtype) for floating tensors + save_file (needs torch).
"""
import sys

import torch
from safetensors.torch import load_file, save_file

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def main() -> None:
    src, dst, name = sys.argv[1], sys.argv[2], sys.argv[3]
    d = load_file(src)
    out = {k: (t.to(DT[name]) if t.is_floating_point() else t) for k, t in d.items()}
    del d
    save_file(out, dst, metadata={"format": "pt"})


if __name__ == "__main__":
    main()
