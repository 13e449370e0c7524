#!/usr/bin/env bash
# `--merge-lora` (issue 31 item 2): a rank-64 LoRA on every linear layer merged into a generated
# Llama-shaped F16 model while it is written as safetensors, against cp + sync of the output.
#
#   bash benches/lora_merge.sh          # generate inputs if missing, time, print figures
#   bash benches/lora_merge.sh --clean  # delete this script's scratch directory
#
# Inputs (in $SCRATCH, generated if missing):
#   llama-${LAYERS}l.safetensors   benches/gen_llama.py (LAYERS 5 = the 2.37 GiB bench model)
#   adapter-${LAYERS}l-r${RANK}/   adapter_config.json (PEFT's keys: r, lora_alpha 16,
#                                  target_modules) and adapter_model.safetensors with F32
#                                  lora_A [RANK, in] / lora_B [out, RANK] of every q/k/v/o and
#                                  gate/up/down projection, N(0, 0.02), written by numpy +
#                                  safetensors (peft is not needed: the file is PEFT's layout)
# Timed (REPS runs after a warm-up, whole process, median wall/CPU and peak RSS printed by
# /usr/bin/time -v):
#   merge  $WP --threads $THREADS convert llama.safetensors -o merged.safetensors
#          --merge-lora adapter --force                     (verified, as always)
#   copy   cp merged.safetensors copy.safetensors && sync
# With CHAIN=1 (needs torch, transformers and peft in $PYTHON, and llama.cpp's converter and
# llama-quantize), the merged-to-Q4_K_M half, on a release made of the same file (hard link,
# benches/llama_config.py, fixtures/good/arch/llama's tokenizer):
#   onepass  $WP convert release -o X.gguf --merge-lora adapter --dtype f16 --quant Q4_K_M
#   chain    peft: PEFT from_pretrained (float16) + PeftModel.from_pretrained + merge_and_unload
#            + save_pretrained; convert: convert_hf_to_gguf.py --outtype f16; quantize:
#            llama-quantize Q4_K_M $THREADS (each step timed; the chain's wall is their sum);
#            the two Q4_K_M files are cmp'd
#
# Environment (defaults): SCRATCH=/tmp/wp-bench-lora LAYERS=5 RANK=64 REPS=3 THREADS=2
#   WP=<repo>/target/release/weightport PYTHON=python3 (numpy, safetensors) CHAIN=0
#   LLAMA_DIR=$HOME/llama/llama_cpp_python-0.3.36/vendor/llama.cpp
#   QUANTIZE=$LLAMA_DIR/build/bin/llama-quantize
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
SCRATCH="${SCRATCH:-/tmp/wp-bench-lora}"
LAYERS="${LAYERS:-5}" RANK="${RANK:-64}" REPS="${REPS:-3}" THREADS="${THREADS:-2}"
WP="${WP:-$ROOT/target/release/weightport}"
PYTHON="${PYTHON:-python3}"
if [[ "${1:-}" == --clean ]]; then rm -rf "$SCRATCH"; exit 0; fi
mkdir -p "$SCRATCH"
BASE="$SCRATCH/llama-${LAYERS}l.safetensors"
ADAPTER="$SCRATCH/adapter-${LAYERS}l-r${RANK}"
[[ -f "$BASE" ]] || "$PYTHON" "$HERE/gen_llama.py" "$BASE" --layers "$LAYERS"
if [[ ! -f "$ADAPTER/adapter_model.safetensors" ]]; then
    mkdir -p "$ADAPTER"
    "$PYTHON" - "$BASE" "$ADAPTER" "$RANK" <<'EOF'
import json, sys
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file
base, out, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
mods = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
tensors = {}
with safe_open(base, "np") as f:
    for i, name in enumerate(sorted(f.keys())):
        stem = name[: -len(".weight")]
        if not name.endswith(".weight") or stem.rsplit(".", 1)[-1] not in mods:
            continue
        rows, cols = f.get_slice(name).get_shape()
        rng = np.random.default_rng([7, i])
        tensors[f"base_model.model.{stem}.lora_A.weight"] = rng.normal(0, 0.02, (rank, cols)).astype(np.float32)
        tensors[f"base_model.model.{stem}.lora_B.weight"] = rng.normal(0, 0.02, (rows, rank)).astype(np.float32)
save_file(tensors, f"{out}/adapter_model.safetensors", metadata={"format": "pt"})
json.dump({"peft_type": "LORA", "r": rank, "lora_alpha": 16, "target_modules": list(mods),
           "base_model_name_or_path": base}, open(f"{out}/adapter_config.json", "w"), indent=2)
EOF
fi
cat "$BASE" "$ADAPTER/adapter_model.safetensors" > /dev/null

# Runs "$@" REPS times after a warm-up; prints the median wall, CPU and the largest peak RSS.
timed() {
    local label="$1"; shift
    local walls=() cpus=() rss=0 log="$SCRATCH/time.log"
    for i in $(seq 0 "$REPS"); do
        sync
        /usr/bin/time -v -o "$log" "$@" > /dev/null
        [[ $i == 0 ]] && continue
        walls+=("$(awk -F': ' '/Elapsed/ {n=split($2,t,":"); s=0; for(k=1;k<=n;k++) s=s*60+t[k]; print s}' "$log")")
        cpus+=("$(awk -F': ' '/User time/ {u=$2} /System time/ {s=$2} END {print u+s}' "$log")")
        local r; r="$(awk -F': ' '/Maximum resident/ {print $2}' "$log")"
        (( r > rss )) && rss=$r
    done
    local med; med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
    printf '%-6s wall %8.2f s  cpu %8.2f s  peak RSS %6.1f MiB\n' "$label" \
        "$(med "${walls[@]}")" "$(med "${cpus[@]}")" "$(echo "$rss / 1024" | bc -l)"
}

OUT="$SCRATCH/merged.safetensors"
timed merge "$WP" --threads "$THREADS" convert "$BASE" -o "$OUT" --merge-lora "$ADAPTER" --force
timed copy sh -c "cp '$OUT' '$SCRATCH/copy.safetensors' && sync"
rm -f "$SCRATCH/copy.safetensors"
ls -l "$BASE" "$ADAPTER/adapter_model.safetensors" "$OUT" | awk '{print $5, $NF}'

[[ "${CHAIN:-0}" == 1 ]] || exit 0
LLAMA_DIR="${LLAMA_DIR:-$HOME/llama/llama_cpp_python-0.3.36/vendor/llama.cpp}"
QUANTIZE="${QUANTIZE:-$LLAMA_DIR/build/bin/llama-quantize}"
export LD_LIBRARY_PATH="$(dirname "$QUANTIZE")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
REL="$SCRATCH/release-${LAYERS}l"
mkdir -p "$REL"
[[ "$BASE" -ef "$REL/model.safetensors" ]] || ln -f "$BASE" "$REL/model.safetensors"
for f in "$ROOT"/fixtures/good/arch/llama/*; do
    case "$(basename "$f")" in config.json | *.safetensors | *.index.json | *.bin | *.md) continue ;; esac
    cp "$f" "$REL/"
done
"$PYTHON" "$HERE/llama_config.py" "$BASE" 32 v5 > "$REL/config.json"
# The merged release is named as the base release: general.name and the other names derived
# from the directory agree, so the two files can be compared whole.
ONE="$SCRATCH/onepass-q4km.gguf" PM="$SCRATCH/peft/release-${LAYERS}l"
timed onepass "$WP" --threads "$THREADS" convert "$REL" -o "$ONE" --merge-lora "$ADAPTER" \
    --dtype f16 --quant Q4_K_M --force
cat > "$SCRATCH/peft_merge.py" <<'EOF'
import shutil, sys, torch
from pathlib import Path
from peft import PeftModel
from transformers import AutoModelForCausalLM
rel, adapter, out = sys.argv[1:4]
model = AutoModelForCausalLM.from_pretrained(rel, dtype=torch.float16)
model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
model.save_pretrained(out)
for f in Path(rel).glob("tokenizer*"):
    shutil.copy(f, out)
EOF
timed peft "$PYTHON" "$SCRATCH/peft_merge.py" "$REL" "$ADAPTER" "$PM"
timed convert env PYTHONPATH="$LLAMA_DIR/gguf-py" "$PYTHON" "$LLAMA_DIR/convert_hf_to_gguf.py" "$PM" \
    --outtype f16 --outfile "$SCRATCH/chain-f16.gguf"
timed quantize "$QUANTIZE" "$SCRATCH/chain-f16.gguf" "$SCRATCH/chain-q4km.gguf" Q4_K_M "$THREADS"
if cmp -s "$ONE" "$SCRATCH/chain-q4km.gguf"; then echo "outputs: identical"; else echo "outputs: DIFFER"; fi
rm -rf -- "$SCRATCH/peft" "$SCRATCH/chain-f16.gguf"
