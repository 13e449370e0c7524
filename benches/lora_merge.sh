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
#
# Environment (defaults): SCRATCH=/tmp/wp-bench-lora LAYERS=5 RANK=64 REPS=3 THREADS=2
#   WP=<repo>/target/release/weightport PYTHON=python3 (numpy, safetensors)
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
