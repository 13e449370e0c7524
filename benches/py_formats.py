#!/usr/bin/env python3
"""Bench inputs and Python baselines for the PyTorch and NumPy readers.

    python benches/py_formats.py make-bin IN.safetensors OUT.bin        # torch.save of the tensors
    python benches/py_formats.py make-npz IN.safetensors OUT.npz [-z]    # np.savez / savez_compressed
    python benches/py_formats.py bin2st IN.bin OUT.safetensors           # torch.load(weights_only) + save_file
    python benches/py_formats.py npz2st IN.npz OUT.safetensors           # np.load + safetensors.numpy.save_file
    python benches/py_formats.py make-bin-repo IN.safetensors OUTDIR SIZE  # sharded .bin repo, as
        # huggingface_hub's split_torch_state_dict_into_shards + torch.save per shard write it
    python benches/py_formats.py binrepo2st INDIR OUTDIR SIZE            # per shard torch.load(weights_only),
        # then split_torch_state_dict_into_shards + save_file per shard + index (what users script)
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
    elif cmd == "make-bin-repo":
        import torch
        from safetensors.torch import load_file
        save_repo(load_file(src), dst, sys.argv[4], "pytorch_model{suffix}.bin", torch.save)
    elif cmd == "binrepo2st":
        import json
        import os
        import torch
        from safetensors.torch import save_file
        with open(os.path.join(src, "pytorch_model.bin.index.json")) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        state = {}
        for name in files:
            state.update(torch.load(os.path.join(src, name), weights_only=True))
        save_repo(state, dst, sys.argv[4], "model{suffix}.safetensors",
                  lambda sd, path: save_file(sd, path, metadata={"format": "pt"}))
    else:
        raise SystemExit(__doc__)


def save_repo(state, out, size, pattern, save) -> None:
    import json
    import os
    from huggingface_hub import split_torch_state_dict_into_shards
    os.makedirs(out, exist_ok=True)
    split = split_torch_state_dict_into_shards(state, filename_pattern=pattern, max_shard_size=size)
    for filename, names in split.filename_to_tensors.items():
        save({n: state[n].contiguous() for n in names}, os.path.join(out, filename))
    if split.is_sharded:
        index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
        name = pattern.format(suffix="").replace(".bin", ".bin.index.json").replace(
            ".safetensors", ".safetensors.index.json")
        with open(os.path.join(out, name), "w") as f:
            json.dump(index, f, indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
