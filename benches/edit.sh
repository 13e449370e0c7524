#!/usr/bin/env bash
# Issue 32's benchmark: in-place edit, diff and slice on the 2.4 GiB bench model (benches/README.md).
#
#   . ~/ref/bin/activate                 # numpy, safetensors, torch (fixtures/gen/requirements.txt)
#   bash benches/edit.sh                 # inputs under $SCRATCH (generated if missing, ~5 GB)
#   bash benches/edit.sh --clean         # delete $SCRATCH
#
# Steps, each REPS times under /usr/bin/time -v (wall from a nanosecond clock, median reported;
# peak RSS the largest over the reps; page cache warm: the inputs are read once first):
#   edit   weightport edit M --set 'model.layers.3.self_attn.q_proj.weight[1024:1152]=V'
#          (journal, fsyncs and read-back included); V alternates 0 and 1 so every rep writes
#   torch  load -> t[1024:1152] = V -> save_file (benches/py_edit.py), the same edit
#   diff   weightport diff A B, B a copy of A with that edit      vs   cat A B > /dev/null
#   slice  weightport slice M 'model.embed_tokens.weight[0:8]' -o rows.npy
# The table goes to stdout and $SCRATCH/edit-results.md.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
SCRATCH="${SCRATCH:-/work/scratch/i32-edit/bench}"
REPS="${REPS:-5}"
TORCH_REPS="${TORCH_REPS:-3}"
PYTHON="${PYTHON:-python3}"
WP="${WP:-$ROOT/target/release/weightport}"
T='model.layers.3.self_attn.q_proj.weight'

if [[ "${1:-}" == "--clean" ]]; then rm -rf "$SCRATCH"; exit 0; fi
[[ -x "$WP" ]] || { echo "no $WP: cargo build --release first (or WP=...)" >&2; exit 1; }
mkdir -p "$SCRATCH"
M="$SCRATCH/model.safetensors"
[[ -f "$M" ]] || "$PYTHON" "$HERE/gen_llama.py" "$M" --layers 5 --writer stream
B="$SCRATCH/edited.safetensors"
if [[ ! -f "$B" ]]; then cp "$M" "$B"; "$WP" edit "$B" --set "$T[1024:1152]=0" >/dev/null; fi
cat "$M" "$B" > /dev/null

now() { date +%s%N; }
# run NAME CMD...: REPS timed runs; prints "NAME median_s peak_rss_mib".
run() {
    local name=$1; shift
    local times=() rss=0 i t0 t1 r
    for ((i = 0; i < REPS; i++)); do
        t0=$(now)
        /usr/bin/time -v -o "$SCRATCH/time.txt" "$@" > /dev/null 2>> "$SCRATCH/stderr.txt" || true
        t1=$(now)
        times+=($(( t1 - t0 )))
        r=$(awk '/Maximum resident/ {print $NF}' "$SCRATCH/time.txt")
        (( r > rss )) && rss=$r
    done
    local med
    med=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    printf '| %s | %.4f | %.1f |\n' "$name" "$(echo "$med / 1000000000" | bc -l)" "$(echo "$rss / 1024" | bc -l)"
}

# The edit alternates its value, so no rep finds the bytes already as wanted (which writes nothing).
cat > "$SCRATCH/edit_once.sh" <<EOF
#!/usr/bin/env bash
v=\$(cat "$SCRATCH/v" 2>/dev/null || echo 0); echo \$(( 1 - v )) > "$SCRATCH/v"
exec "$WP" edit "$M" --set "$T[1024:1152]=\$v"
EOF
chmod +x "$SCRATCH/edit_once.sh"

{
    echo "| step | wall s (median of $REPS) | peak RSS MiB |"
    echo "|---|---|---|"
    run "weightport edit (128 rows of q_proj, journal + fsync + read-back)" "$SCRATCH/edit_once.sh"
    REPS=$TORCH_REPS run "torch load -> modify -> save_file" "$PYTHON" "$HERE/py_edit.py" "$M" "$SCRATCH/py_out.safetensors" "$T" 1024 1152
    run "weightport diff A B (one tensor differs)" "$WP" diff "$M" "$B"
    run "cat A B > /dev/null (read both once)" sh -c "cat '$M' '$B' > /dev/null"
    run "weightport slice 8 rows of the embedding -> .npy" sh -c "rm -f '$SCRATCH/rows.npy'; exec '$WP' slice '$M' 'model.embed_tokens.weight[0:8]' -o '$SCRATCH/rows.npy'"
} | tee "$SCRATCH/edit-results.md"
rm -f "$SCRATCH/py_out.safetensors"
