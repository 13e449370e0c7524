#!/usr/bin/env python3
"""The Python baseline of `weightport edit` (benches/edit.sh): load every tensor with torch,
zero rows A:B of one tensor, save_file the whole model (what one does without an in-place tool).

    python benches/py_edit.py IN OUT TENSOR A B
"""
import sys

from safetensors.torch import load_file, save_file


def main():
    src, out, name, a, b = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    ts = load_file(src)
    ts[name][a:b] = 0
    save_file(ts, out, metadata={"format": "pt"})


if __name__ == "__main__":
    main()
