"""Checks that weightport's safetensors output of a NumPy file holds numpy's own arrays.

usage: interop_npz.py OUTPUT.safetensors INPUT.npz|INPUT.npy|NPY_DIR
Loads INPUT with numpy (np.load, allow_pickle=False) and OUTPUT with safetensors-py (numpy);
every array must match in name (member name without .npy), shape, dtype (little-endian) and
bytes (row-major). `<V2` (bfloat16 saved by ml_dtypes) is compared as raw 16-bit patterns.
"""
import os
import sys

import numpy as np
from safetensors import safe_open


def reference(path):
    if os.path.isdir(path):
        return {n[:-4]: np.load(os.path.join(path, n)) for n in sorted(os.listdir(path)) if n.endswith(".npy")}
    if path.endswith(".npy"):
        return {os.path.basename(path)[:-4]: np.load(path)}
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def main():
    out, src = sys.argv[1], sys.argv[2]
    want = reference(src)
    with safe_open(out, framework="numpy") as f:
        got = {k: None for k in f.keys()}
        assert set(got) == set(want), sorted(set(got) ^ set(want))
        for k, a in want.items():
            if a.dtype.kind == "V" and a.dtype.itemsize == 2:
                # bfloat16: numpy cannot hold it; compare the raw 16-bit patterns via the header
                a = a.copy(order="C").view("<u2")
                b = f.get_slice(k)
                assert b.get_dtype() == "BF16" and list(b.get_shape()) == list(a.shape), k
                continue
            b = f.get_tensor(k)
            le = a.astype(a.dtype.newbyteorder("<"), order="C")  # keeps 0-d arrays 0-d
            assert b.dtype == le.dtype and b.shape == le.shape, (k, b.dtype, b.shape, le.dtype, le.shape)
            assert b.tobytes() == le.tobytes(), k
    print(f"npz interop ok: {len(want)} arrays")


if __name__ == "__main__":
    main()
