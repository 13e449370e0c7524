"""Reads a GGUF file weightport wrote with gguf-py and compares it with a safetensors source.

usage: interop_gguf.py OUTPUT.gguf SOURCE.safetensors
Every tensor of SOURCE must be in OUTPUT with the same name, shape (ne reversed) and bytes, and
general.architecture must be set. Needs numpy, safetensors and gguf.
"""
import sys

import numpy as np
from gguf import GGUFReader
from safetensors.numpy import load_file


def main():
    r = GGUFReader(sys.argv[1])
    want = load_file(sys.argv[2])
    arch = r.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() , "general.architecture"
    got = {t.name: t for t in r.tensors}
    assert set(got) == set(want), sorted(set(got) ^ set(want))
    for k, a in want.items():
        t = got[k]
        assert list(reversed([int(x) for x in t.shape])) == list(a.shape) or a.ndim == 0, (k, t.shape, a.shape)
        assert np.asarray(t.data).tobytes() == np.ascontiguousarray(a).tobytes(), k
    print(f"gguf interop ok: {len(want)} tensors")


if __name__ == "__main__":
    main()
