#!/usr/bin/env python3
"""Interop: gguf-py's GGUFReader reads what weightport-gguf writes (not run by the root runner).

    cd crates/gguf && cargo build --example gguf_interop
    ~/ref/bin/python tests/gguf_interop.py <path to the gguf_interop example binary>

1. `sample`: a file written from plain tensor descriptions with a value of every GGUF type;
   gguf-py must read every key with its exact type and value, and the tensors with their
   shapes, offsets and bytes (the Q8_0 one dequantized by gguf.quants).
2. `rewrite`: every fixture in fixtures/good/gguf re-written by our sink must be byte-identical
   to the original, and gguf-py's description of both (fixtures/gen/gen_gguf.py: describe) the same.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import gguf
from gguf import GGUFValueType as V

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures/gen"))
from gen_gguf import describe  # noqa: E402


def check_sample(binary: Path, tmp: Path) -> None:
    out = tmp / "sample.gguf"
    subprocess.run([str(binary), "sample", str(out)], check=True)
    r = gguf.GGUFReader(out)
    f = r.fields
    want = {
        "s.u8": (V.UINT8, 7), "s.i8": (V.INT8, -7), "s.u16": (V.UINT16, 700),
        "s.i16": (V.INT16, -700), "s.u32": (V.UINT32, 70000), "s.i32": (V.INT32, -70000),
        "s.f32": (V.FLOAT32, 0.25), "s.bool": (V.BOOL, True), "s.str": (V.STRING, "ünïcode"),
        "s.u64": (V.UINT64, 2**64 - 1), "s.i64": (V.INT64, -(2**63)), "s.f64": (V.FLOAT64, -0.5),
    }
    for k, (t, v) in want.items():
        assert f[k].types == [t], (k, f[k].types)
        assert f[k].contents() == v, (k, f[k].contents())
    assert f["a.str"].types == [V.ARRAY, V.STRING] and f["a.str"].contents() == ["a", "bc"]
    assert f["a.i32"].types == [V.ARRAY, V.INT32] and f["a.i32"].contents() == [-1, 2]
    assert int(f["a.empty_f32"].parts[3][0]) == V.FLOAT32 and int(f["a.empty_f32"].parts[4][0]) == 0
    w, q = r.tensors
    assert w.name == "w" and list(w.shape) == [3, 2] and w.data.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert q.tensor_type == gguf.GGMLQuantizationType.Q8_0 and list(q.shape) == [32, 2]
    deq = gguf.quants.dequantize(q.data, q.tensor_type)
    assert deq.shape == (2, 32) and deq[0, 5] == 7.0, deq[0, :8]
    size = out.stat().st_size
    assert size % 32 == 0 and r.data_offset % 32 == 0
    print(f"ok sample ({size} bytes)")


def check_rewrites(binary: Path, tmp: Path) -> None:
    n = 0
    for src in sorted((ROOT / "fixtures/good/gguf").glob("*.gguf")):
        out = tmp / src.name
        subprocess.run([str(binary), "rewrite", str(src), str(out)], check=True)
        a, b = describe(src), describe(out)
        assert a == b, src.name
        assert src.read_bytes() == out.read_bytes(), src.name
        n += 1
    print(f"ok rewrite ({n} files)")


def main() -> None:
    binary = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as d:
        check_sample(binary, Path(d))
        check_rewrites(binary, Path(d))


if __name__ == "__main__":
    main()
