"""Recomputes convert's quality figures (--json transforms[].quality) with numpy from the files.

usage: quality_check.py SOURCE.safetensors OUTPUT(.gguf|.safetensors) REPORT.json

The source values come from the safetensors reader, the reconstruction from the written file:
a GGUF's tensors dequantized by gguf-py (gguf.quants.dequantize), a safetensors' F16/BF16 bytes
decoded by numpy. The definitions are those of crates/engine/src/transform/quality.rs. Prints one line
per tensor and exits 1 on any disagreement.
"""
import json
import struct
import sys

import numpy as np
from safetensors.numpy import load_file


def safetensors_floats(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = data[a:b]
        if t["dtype"] == "F16":
            v = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif t["dtype"] == "BF16":
            v = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] == "F32":
            v = np.frombuffer(raw, dtype="<f4")
        else:
            continue
        out[name] = (v, 1)
    return out


def gguf_floats(path):
    import gguf
    from gguf.quants import dequantize

    out = {}
    for t in gguf.GGUFReader(path).tensors:
        block = gguf.GGML_QUANT_SIZES[t.tensor_type][0]
        v = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        out[t.name] = (v, block)
    return out


def figures(x, y, block):
    x = x.astype(np.float32).reshape(-1)
    y = y.astype(np.float32).reshape(-1)
    fx, fy = np.isfinite(x), np.isfinite(y)
    clipped = fx & ~fy
    if block > 1:
        yb = y.reshape(-1, block)
        lo, hi = yb.min(axis=1), yb.max(axis=1)
        below = np.where(yb < hi[:, None], yb, -np.inf).max(axis=1)
        above = np.where(yb > lo[:, None], yb, np.inf).min(axis=1)
        top = ((hi - below) / np.float32(2.0)).astype(np.float32)
        bottom = ((above - lo) / np.float32(2.0)).astype(np.float32)
        xb = x.reshape(-1, block)
        out = ((xb - hi[:, None]) > top[:, None]) | ((lo[:, None] - xb) > bottom[:, None])
        clipped |= out.reshape(-1) & fx & fy
    both = fx & fy
    d = np.abs(x[both].astype(np.float64) - y[both].astype(np.float64))
    sq = float(np.sum(d * d))
    sx = float(np.sum(x[both].astype(np.float64) ** 2))
    return {
        "values": x.size,
        "rmse": (sq / max(int(both.sum()), 1)) ** 0.5,
        "max_abs_error": float(d.max()) if d.size else 0.0,
        "relative_error": (sq / sx) ** 0.5 if sx > 0 else 0.0,
        "clipped_share": float(clipped.sum()) / x.size,
    }


def close(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-30


def main():
    src, out, rep = sys.argv[1:4]
    x = load_file(src)
    ys = gguf_floats(out) if out.endswith(".gguf") else safetensors_floats(out)
    report = json.load(open(rep))
    bad = 0
    checked = 0
    for t in report["transforms"]:
        q = t["quality"]
        if q is None:
            continue
        y, block = ys[t["tensor"]]
        want = figures(x[t["tensor"]], y, block)
        ok = (
            q["values"] == want["values"]
            and close(q["rmse"], want["rmse"], 1e-5)
            and close(q["relative_error"], want["relative_error"], 1e-5)
            and close(q["max_abs_error"], want["max_abs_error"], 1e-6)
            and q["clipped_share"] == want["clipped_share"]
        )
        checked += 1
        print(("ok  " if ok else "BAD ") + t["tensor"], t["op"], "ours", q, "numpy", want)
        bad += not ok
    if checked == 0:
        print("no tensor has quality figures")
        sys.exit(1)
    sys.exit(1 if bad else 0)


main()
