#!/usr/bin/env bash
# weightport units benchmark (issue 18): one conversion as one process at $THREADS threads
# against the same conversion as $UNITS units of one thread each, run at once on this machine
# (the same total cores), through the three commands only:
#
#   plan    weightport plan IN -o OUT --quant $QUANT --units $UNITS --plan P [--in-place]
#   units   weightport --threads 1 unit P --index I   (I = 0..UNITS-1, all at once, each with
#           its own TMPDIR)
#   finish  weightport --threads $THREADS finish P
#
# once with per-unit parts (the default: finish appends them) and once --in-place (units write
# into one shared staging file, finish appends nothing), and reports the median wall (over
# REPS) of each step, the units' total against the one
# process ("overhead" = (plan + units + finish) / one process - 1), the per-core rate
# (input bytes / wall of a --threads 1 convert) and checks the two outputs with cmp.
#
#   IN=fixtures/good/arch/llama bash benches/units.sh     # a small model: checks the script
#   bash benches/units.sh                                   # the 2.4 GiB bench release
#
# Environment (defaults):
#   IN=$SCRATCH/hf-5l/llama  the HF release benches/gguf.sh builds (run it once, e.g.
#                            `SECTIONS=B REPS=1 bash benches/gguf.sh`); any HF release dir works
#   SCRATCH=/tmp/wp-bench  WP=<repo>/target/release/weightport  QUANT=Q4_K_M
#   THREADS=2  UNITS=2  REPS=3
#
# Caveats: inputs are pre-read (warm page cache); outputs go to the page cache (weightport
# fsyncs every file it publishes, in both modes, and each unit fsyncs its part).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH="${SCRATCH:-/tmp/wp-bench}"
WP="${WP:-$ROOT/target/release/weightport}"
IN="${IN:-$SCRATCH/hf-5l/llama}"
QUANT="${QUANT:-Q4_K_M}"
THREADS="${THREADS:-2}"
UNITS="${UNITS:-2}"
REPS="${REPS:-3}"

[[ -x $WP ]] || { echo "no $WP: cargo build --release" >&2; exit 2; }
[[ -d $IN ]] || { echo "no $IN: run benches/gguf.sh once, or set IN to an HF release dir" >&2; exit 2; }
WORK="$(mktemp -d "${SCRATCH%/}.units.XXXXXX")"
trap 'rm -rf -- "$WORK"' EXIT

now() { date +%s.%N; }
# median of the arguments
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", b - a}'; }

in_bytes=$(find -L "$IN" -maxdepth 1 -type f \( -name '*.safetensors' -o -name '*.bin' \) -printf '%s\n' | awk '{s+=$1} END {print s+0}')
find -L "$IN" -maxdepth 1 -type f -exec cat {} + >/dev/null   # warm the page cache

one=() core=() plan=() units=() fin=() iplan=() iunits=() ifin=()
# plan + UNITS units at once + finish of MODE ("" = parts, --in-place); appends the three walls
# to the arrays named $2 $3 $4 and checks the output against one.gguf.
units_run() {
    local mode=$1 out="$WORK/units.gguf" P="$WORK/job.plan.json" t0 t1 pids=()
    local -n a_plan=$2 a_units=$3 a_fin=$4
    rm -rf -- "$out" "$P" "$WORK"/.units.gguf.wp-units "$WORK"/tmp-*
    sync
    t0=$(now); "$WP" plan "$IN" -o "$out" --quant "$QUANT" --units "$UNITS" --plan "$P" $mode >/dev/null; t1=$(now)
    a_plan+=("$(secs "$t0" "$t1")")
    t0=$(now)
    for i in $(seq 0 $((UNITS - 1))); do
        mkdir -p "$WORK/tmp-$i"
        TMPDIR="$WORK/tmp-$i" "$WP" --threads 1 unit "$P" --index "$i" >"$WORK/unit-$i.log" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    t1=$(now)
    a_units+=("$(secs "$t0" "$t1")")
    t0=$(now); "$WP" --threads "$THREADS" finish "$P" >/dev/null; t1=$(now)
    a_fin+=("$(secs "$t0" "$t1")")
    cmp "$WORK/one.gguf" "$out"
}

for rep in $(seq "$REPS"); do
    rm -rf -- "$WORK"/*.gguf "$WORK"/*.json "$WORK"/.*.wp-units "$WORK"/tmp-*
    sync
    t0=$(now); "$WP" --threads "$THREADS" convert "$IN" -o "$WORK/one.gguf" --quant "$QUANT" >/dev/null; t1=$(now)
    one+=("$(secs "$t0" "$t1")")
    rm -f -- "$WORK/core.gguf"; sync
    t0=$(now); "$WP" --threads 1 convert "$IN" -o "$WORK/core.gguf" --quant "$QUANT" >/dev/null; t1=$(now)
    core+=("$(secs "$t0" "$t1")")
    cmp "$WORK/one.gguf" "$WORK/core.gguf"
    rm -f -- "$WORK/core.gguf"
    units_run "" plan units fin
    units_run --in-place iplan iunits ifin
done

m_one=$(median "${one[@]}"); m_core=$(median "${core[@]}")
report() {  # LABEL plan units finish
    awk -v one="$m_one" -v plan="$2" -v units="$3" -v fin="$4" -v n="$UNITS" -v label="$1" 'BEGIN {
        total = plan + units + fin
        printf "%s:\n", label
        printf "  %-42s %9.3f\n", "plan", plan
        printf "  %-42s %9.3f\n", n " units x --threads 1, at once", units
        printf "  %-42s %9.3f\n", "finish (check, assemble, verify, commit)", fin
        printf "  %-42s %9.3f\n", "units total", total
        printf "  overhead of units vs one process: %+.1f%%  (plan + finish: %.1f%% of the one process)\n", (total / one - 1) * 100, (plan + fin) / one * 100
    }'
}
awk -v one="$m_one" -v bytes="$in_bytes" -v t="$THREADS" -v q="$QUANT" -v reps="$REPS" -v src="$IN" 'BEGIN {
    printf "input %s: %.1f MB of weights, %s, median of %d reps (outputs identical: cmp)\n", src, bytes / 1e6, q, reps
    printf "%-44s %9.3f\n", "one process, --threads " t " (wall s)", one
}'
report "parts (default)" "$(median "${plan[@]}")" "$(median "${units[@]}")" "$(median "${fin[@]}")"
report "--in-place" "$(median "${iplan[@]}")" "$(median "${iunits[@]}")" "$(median "${ifin[@]}")"
awk -v core="$m_core" -v bytes="$in_bytes" 'BEGIN {
    printf "per-core rate (--threads 1 convert, %.3f s): %.1f MB/s of input per core\n", core, bytes / 1e6 / core
}'
