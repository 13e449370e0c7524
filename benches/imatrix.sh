#!/usr/bin/env bash
# weightport `--imatrix` against `llama-quantize --imatrix`, in one run (issue 16).
#
#   bash benches/imatrix.sh            # inputs built if missing, then the table
#   bash benches/imatrix.sh --clean    # delete this script's scratch files (not gguf.sh's F16)
#
# Input: the F16 GGUF that benches/gguf.sh's section B caches (convert_hf_to_gguf.py of the
# gen_llama.py model: 5 layers, hidden 4096, ~2.4 GiB), $SCRATCH/llama-hf-5l.ref-f16.gguf; if it
# is missing, `SECTIONS=B REPS=1 bash benches/gguf.sh` makes it. F16=PATH uses another F16 GGUF.
# Importance matrix: a real one, `llama-imatrix -m F16 -f TEXT -c CTX --chunks CHUNKS` over
# fixtures/good/imatrix/text.txt (repeated to 4 copies), cached as $SCRATCH/imatrix-<tag>.gguf.
# Both tools get the same imatrix path string (llama-quantize records it in the output's
# `quantize.imatrix.file`, so identical bytes need identical paths).
#
# For each QUANTS type: `llama-quantize --imatrix IM F16 REF TYPE $THREADS` and
# `weightport --threads $THREADS convert F16 -o OUT --quant TYPE --imatrix IM --force`, REPS
# times each under /usr/bin/time -v (median wall, max peak RSS), outputs compared with cmp.
# Columns: wall s, peak RSS MiB, speedup = llama-quantize wall / weightport wall, output.
#
# Environment (defaults): SCRATCH=/tmp/wp-bench  WP=<repo>/target/release/weightport  REPS=1
#   THREADS=2  QUANTS="IQ2_XXS IQ3_XXS IQ4_XS Q4_K_M"  CTX=128  CHUNKS=4  F16=(gguf.sh's)
#   LLAMA_BIN=/root/llama-build/bin (llama-quantize, llama-imatrix)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH="${SCRATCH:-/tmp/wp-bench}"
WP="${WP:-$ROOT/target/release/weightport}"
REPS="${REPS:-1}"
THREADS="${THREADS:-2}"
QUANTS="${QUANTS:-IQ2_XXS IQ3_XXS IQ4_XS Q4_K_M}"
CTX="${CTX:-128}"
CHUNKS="${CHUNKS:-4}"
LLAMA_BIN="${LLAMA_BIN:-/root/llama-build/bin}"
F16="${F16:-$SCRATCH/llama-hf-5l.ref-f16.gguf}"
TAG="$(basename "$F16" .gguf)"
IM="$SCRATCH/imatrix-$TAG.gguf"
OUT="$SCRATCH/imatrix-out"
LOG="$SCRATCH/imatrix-logs"

if [[ "${1:-}" == "--clean" ]]; then
    rm -rf -- "$OUT" "$LOG" "$SCRATCH"/imatrix-*.gguf "$SCRATCH/imatrix-text.txt" "$SCRATCH/results-imatrix.md"
    exit 0
fi
die() { echo "imatrix.sh: $*" >&2; exit 1; }
[[ -x "$WP" ]] || die "no weightport binary at $WP (cargo build --release, or WP=...)"
for t in llama-quantize llama-imatrix; do [[ -x "$LLAMA_BIN/$t" ]] || die "no $LLAMA_BIN/$t"; done
[[ -x /usr/bin/time ]] || die "needs /usr/bin/time (GNU time) for peak RSS"
mkdir -p "$SCRATCH" "$OUT" "$LOG"

if [[ ! -s "$F16" ]]; then
    echo "imatrix.sh: making $F16 with benches/gguf.sh (section B)" >&2
    SCRATCH="$SCRATCH" SECTIONS=B REPS=1 bash "$ROOT/benches/gguf.sh" >/dev/null
fi
[[ -s "$F16" ]] || die "no F16 GGUF at $F16"

if [[ ! -s "$IM" ]]; then
    for _ in 1 2 3 4; do cat "$ROOT/fixtures/good/imatrix/text.txt"; done > "$SCRATCH/imatrix-text.txt"
    echo "imatrix.sh: llama-imatrix over $CHUNKS chunks of $CTX tokens -> $IM" >&2
    "$LLAMA_BIN/llama-imatrix" -m "$F16" -f "$SCRATCH/imatrix-text.txt" -o "$IM" -c "$CTX" \
        --chunks "$CHUNKS" -t "$THREADS" --no-ppl > "$LOG/llama-imatrix.log" 2>&1 \
        || die "llama-imatrix failed: see $LOG/llama-imatrix.log"
fi

# measure NAME OUTPUT CMD...: REPS runs; sets WALL (median) and RSS (max, MiB); returns 1 (WALL
# and RSS "-") if the command fails, its log kept in $LOG.
measure() {
    local name="$1" out="$2"; shift 2
    local walls=() rsss=() i t0 t1
    for ((i = 0; i < REPS; i++)); do
        rm -f -- "$out"; sync
        t0=$(date +%s%N)
        if ! /usr/bin/time -v -o "$LOG/$name.time" "$@" > "$LOG/$name.log" 2>&1; then
            echo "imatrix.sh: $name failed: see $LOG/$name.log" >&2
            WALL="-" RSS="-"
            return 1
        fi
        t1=$(date +%s%N)
        walls+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", (b - a) / 1e9}')")
        rsss+=("$(awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$LOG/$name.time")")
    done
    WALL="$(printf '%s\n' "${walls[@]}" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')"
    RSS="$(printf '%s\n' "${rsss[@]}" | sort -g | tail -1)"
}

cat "$F16" "$IM" > /dev/null   # warm cache
rows=("| type | tool | wall s | peak RSS MiB | speedup | output |" "|---|---|---|---|---|---|")
for q in $QUANTS; do
    ref="$OUT/ref-$q.gguf" ours="$OUT/wp-$q.gguf"
    measure "llama-quantize-$q" "$ref" "$LLAMA_BIN/llama-quantize" --imatrix "$IM" "$F16" "$ref" "$q" "$THREADS" || true
    ref_wall="$WALL" ref_rss="$RSS"
    same="failed"
    if measure "weightport-$q" "$ours" "$WP" --threads "$THREADS" convert "$F16" -o "$ours" \
        --quant "$q" --imatrix "$IM" --force; then
        same="DIFFERS"; cmp -s "$ref" "$ours" && same="identical"
    fi
    speed="$(awk -v a="$ref_wall" -v b="$WALL" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-"}')"
    rows+=("| $q | llama-quantize --imatrix IN OUT $q $THREADS | $ref_wall | $ref_rss | - | - |")
    rows+=("| $q | weightport --threads $THREADS convert --quant $q --imatrix | $WALL | $RSS | $speed | $same |")
    rm -f -- "$ref" "$ours"
done
{
    echo "F16 input: $F16 ($(stat -c %s "$F16") bytes); imatrix: $IM (llama-imatrix, $CHUNKS chunks of $CTX)"
    printf '%s\n' "${rows[@]}"
} | tee "$SCRATCH/results-imatrix.md"
