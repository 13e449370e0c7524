#!/usr/bin/env python3
"""Run the pinned `convert_hf_to_gguf.py` with a pre-tokenizer name for a BPE vocabulary whose
check hash its table does not know (the benchmark releases reuse fixtures' made-up vocabularies).

    python benches/ref_convert.py LLAMA_DIR PRE convert_hf_to_gguf.py-arguments...

Everything else is the reference's own `main()`; the override is consulted only where the
reference would raise NotImplementedError for an unknown hash (fixtures/gen/gen_arch.py does the
same when it records the reference outputs).
"""
import sys
from pathlib import Path

llama, pre, args = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
sys.path.insert(0, str(llama / "gguf-py"))
sys.path.insert(0, str(llama))
import convert_hf_to_gguf as conv  # noqa: E402
from conversion import base  # noqa: E402

orig = base.TextModel.get_vocab_base_pre


def get_vocab_base_pre(self, tokenizer):
    try:
        return orig(self, tokenizer)
    except NotImplementedError:
        return pre


base.TextModel.get_vocab_base_pre = get_vocab_base_pre
sys.argv = ["convert_hf_to_gguf.py", *args]
conv.main()
