"""Recomputes convert's importance-weighted quality figures with numpy and gguf-py.

usage: imatrix_quality_check.py SOURCE.gguf OUTPUT.gguf IMATRIX.dat REPORT.json

The source values are the F16 GGUF's tensors, the reconstruction the written file's tensors
dequantized by gguf-py (gguf.quants.dequantize), the weights the legacy imatrix read with numpy
(values / ncall). Definitions: crates/engine/src/transform/quality.rs (v = w / mean(w) per column;
weighted RMSE sqrt(sum(v d^2) / sum(v)), weighted max abs error max(sqrt(v) |d|)). Exits 1 on
any disagreement beyond 1e-6 relative, or when a tensor without weights reports some.
"""
import json
import struct
import sys

import numpy as np
import gguf
from gguf.quants import dequantize


def imatrix(path):
    b = open(path, "rb").read()
    n, pos, out = struct.unpack_from("<i", b, 0)[0], 4, {}
    for _ in range(n):
        ln = struct.unpack_from("<i", b, pos)[0]
        name = b[pos + 4:pos + 4 + ln].decode()
        pos += 4 + ln
        ncall, nval = struct.unpack_from("<ii", b, pos)
        pos += 8
        v = np.frombuffer(b, "<f4", nval, pos).astype(np.float64)
        pos += 4 * nval
        out[name] = v / ncall if ncall > 0 else v
    return out


def tensors(path):
    r = gguf.GGUFReader(path)
    return {t.name: (t, dequantize(t.data, t.tensor_type).astype(np.float64)) for t in r.tensors}


def main():
    src, out = tensors(sys.argv[1]), tensors(sys.argv[2])
    w = imatrix(sys.argv[3])
    report = json.load(open(sys.argv[4]))
    bad = checked = 0
    for t in report["transforms"]:
        q, name = t["quality"], t["tensor"]
        if q is None:
            continue
        if name not in w:
            if q["weighted_rmse"] is not None:
                print(f"{name}: weighted figures without weights")
                bad += 1
            continue
        x = src[name][1].reshape(-1, w[name].size)
        y = out[name][1].reshape(-1, w[name].size)
        v = w[name] / w[name].mean() if w[name].mean() > 0 else np.ones_like(w[name])
        d = x - y
        rmse = np.sqrt((v * d * d).sum() / (v.sum() * x.shape[0]))
        mx = (np.sqrt(v) * np.abs(d)).max()
        for key, want in [("weighted_rmse", rmse), ("weighted_max_abs_error", mx)]:
            if abs(q[key] - want) > 1e-6 * max(want, 1e-12):
                print(f"{name}: {key} {q[key]} != numpy {want}")
                bad += 1
        checked += 1
    print(f"{checked} tensors checked, {bad} disagreements")
    sys.exit(1 if bad or checked == 0 else 0)


main()
