#!/usr/bin/env python3
"""Bench inputs and Python baselines for the PyTorch and NumPy readers.

    python benches/py_formats.py make-bin IN.safetensors OUT.bin        # torch.save of the tensors
    python benches/py_formats.py make-npz IN.safetensors OUT.npz [-z]    # np.savez / savez_compressed
    python benches/py_formats.py bin2st IN.bin OUT.safetensors           # torch.load(weights_only) + save_file
    python benches/py_formats.py npz2st IN.npz OUT.safetensors           # np.load + safetensors.numpy.save_file
"""
import sys


def main() -> None:
    cmd, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
    if cmd == "make-bin":
        import torch
        from safetensors.torch import load_file
        torch.save(load_file(src), dst)
    elif cmd == "make-npz":
        import numpy as np
        from safetensors.numpy import load_file
        (np.savez_compressed if "-z" in sys.argv[4:] else np.savez)(dst, **load_file(src))
    elif cmd == "bin2st":
        import torch
        from safetensors.torch import save_file
        save_file(torch.load(src, weights_only=True), dst)
    elif cmd == "npz2st":
        import numpy as np
        from safetensors.numpy import save_file
        with np.load(src) as z:
            save_file({k: z[k] for k in z.files}, dst)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
