"""Reads weightport's output with safetensors-py (and numpy) and compares it with the source.

usage: interop_check.py [--nan-equal] OUTPUT SOURCE
OUTPUT and SOURCE are each a .safetensors file or a repo directory (index + shards, or
model.safetensors). Exits non-zero on any difference. Needs only numpy and safetensors.
--nan-equal: a NaN equals any NaN (torch's cast output keeps no consistent NaN payload).
"""
import json
import os
import sys

import numpy as np
from safetensors import safe_open


def load(path):
    if os.path.isdir(path):
        idx = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(idx):
            with open(idx) as f:
                index = json.load(f)
            files = sorted(set(index["weight_map"].values()))
            out = {}
            for name in files:
                shard = load(os.path.join(path, name))
                for k in shard:
                    assert index["weight_map"][k] == name, f"{k}: index says {index['weight_map'][k]}, found in {name}"
                out.update(shard)
            assert set(out) == set(index["weight_map"]), "index and shards disagree"
            total = sum(a.nbytes for a in out.values())
            assert index["metadata"]["total_size"] == total, (index["metadata"], total)
            return out
        path = os.path.join(path, "model.safetensors")
    out = {}
    with safe_open(path, framework="numpy") as f:
        for k in f.keys():
            out[k] = f.get_tensor(k)
    return out


def main():
    args = sys.argv[1:]
    nan_equal = args[0] == "--nan-equal"
    if nan_equal:
        args = args[1:]
    got, want = load(args[0]), load(args[1])
    assert set(got) == set(want), (sorted(set(got) ^ set(want)))
    for k in want:
        a, b = got[k], want[k]
        assert a.dtype == b.dtype and a.shape == b.shape, (k, a.dtype, a.shape, b.dtype, b.shape)
        if nan_equal and a.dtype.kind == "f":
            both_nan = np.isnan(a) & np.isnan(b)
            same = a.view(f"u{a.itemsize}") == b.view(f"u{b.itemsize}")
            assert np.all(same | both_nan), (k, int(np.sum(~(same | both_nan))))
        else:
            assert a.tobytes() == b.tobytes(), k
    print(f"interop ok: {len(want)} tensors, {sum(a.nbytes for a in want.values())} bytes")


if __name__ == "__main__":
    main()
