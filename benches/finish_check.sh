#!/usr/bin/env bash
# `finish` with and without the byte-by-byte check of what lies between tensors (issue 28 item
# 8): a generated ~256 MiB safetensors file of 2048 F32 vectors of odd lengths (so a GGUF of it
# pads after nearly every tensor: 2048 gaps to check) converted to one GGUF file as 2 units,
# with parts and --in-place. Per repetition and mode, for each binary in turn (paired): plan,
# both units, then `finish` timed (wall and CPU from /usr/bin/time); medians over REPS. The two
# outputs are compared with cmp.
#
#   WP_BEFORE=/path/to/old/weightport WP_AFTER=target/release/weightport bash benches/finish_check.sh
#
# Environment (defaults): SCRATCH=/tmp/wp-finish  REPS=5  THREADS=2
# Caveats: everything in the page cache (the input is pre-read, outputs are fsynced as always).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH="${SCRATCH:-/tmp/wp-finish}"
REPS="${REPS:-5}"
THREADS="${THREADS:-2}"
WP_AFTER="${WP_AFTER:-$ROOT/target/release/weightport}"
WP_BEFORE="${WP_BEFORE:?set WP_BEFORE to the weightport built without the check}"
mkdir -p "$SCRATCH"
IN="$SCRATCH/odd.safetensors"

if [[ ! -f $IN ]]; then
  python3 - "$IN" <<'EOF'
import json, struct, sys
n = 2048
lens = [32768 + (i % 7) for i in range(n)]
header, off = {}, 0
for i, k in enumerate(lens):
    header[f"t{i:04d}"] = {"dtype": "F32", "shape": [k], "data_offsets": [off, off + 4 * k]}
    off += 4 * k
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for i, k in enumerate(lens):
        f.write(struct.pack(f"<{k}f", *([float(i % 251) * 0.5] * k)))
EOF
fi
cat "$IN" > /dev/null
echo "input: $(du -h "$IN" | cut -f1)"

# One plan + 2 units + timed finish of binary $1 in mode $2 (parts|in-place); prints "wall cpu".
once() {
  local wp=$1 mode=$2 dir="$SCRATCH/run-$mode"
  rm -rf "$dir" && mkdir -p "$dir"
  local extra=()
  [[ $mode == in-place ]] && extra=(--in-place)
  "$wp" plan "$IN" -o "$dir/odd.gguf" --units 2 --plan "$dir/p.json" "${extra[@]}" > /dev/null
  "$wp" --threads 1 unit "$dir/p.json" --index 0 > /dev/null
  "$wp" --threads 1 unit "$dir/p.json" --index 1 > /dev/null
  /usr/bin/time -f "%e %U %S" -o "$dir/time" "$wp" --threads "$THREADS" finish "$dir/p.json" > /dev/null
  awk '{printf "%s %.2f\n", $1, $2 + $3}' "$dir/time"
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }

for mode in parts in-place; do
  : > "$SCRATCH/b.$mode" && : > "$SCRATCH/a.$mode"
  for r in $(seq "$REPS"); do
    once "$WP_BEFORE" "$mode" >> "$SCRATCH/b.$mode"
    cp "$SCRATCH/run-$mode/odd.gguf" "$SCRATCH/before.gguf"
    once "$WP_AFTER" "$mode" >> "$SCRATCH/a.$mode"
    cmp "$SCRATCH/before.gguf" "$SCRATCH/run-$mode/odd.gguf"
  done
  bw=$(cut -d' ' -f1 "$SCRATCH/b.$mode" | median); bc=$(cut -d' ' -f2 "$SCRATCH/b.$mode" | median)
  aw=$(cut -d' ' -f1 "$SCRATCH/a.$mode" | median); ac=$(cut -d' ' -f2 "$SCRATCH/a.$mode" | median)
  echo "finish ($mode, median of $REPS): before ${bw} s wall ${bc} s CPU; after ${aw} s wall ${ac} s CPU"
done
