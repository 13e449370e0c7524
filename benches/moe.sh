#!/usr/bin/env bash
# weightport MoE benchmark (issue 15): a Mixtral-shaped HF release → GGUF, against llama.cpp's
# converter (+ llama-quantize) and against cp + sync, in one run.
#
#   bash benches/moe.sh            # generate the release if missing, measure, print a table
#   bash benches/moe.sh --clean    # delete this script's scratch directory
#
# Input: benches/gen_mixtral.py's release in $SCRATCH/mixtral (default 2.38 GiB: 4 layers of 8
# experts, each layer's experts split across two shards; generated on demand, never committed).
# Steps (each REPS times; median wall, peak RSS = max over the reps from GNU time; `sync` before
# every rep outside the timed part; inputs pre-read so every tool starts with a warm cache):
#   reference: convert_hf_to_gguf.py DIR --outtype f16        (its output: REF_F16)
#   reference: llama-quantize REF_F16 OUT Q4_K_M $THREADS     and the two-step total (sum)
#   weightport --threads $THREADS convert DIR -o X --dtype f16               (cmp with REF_F16)
#   weightport --threads $THREADS convert DIR -o X --dtype f16 --quant Q4_K_M (cmp with the chain's)
#   cp + sync of REF_F16
# Columns: "/ cp+sync" = wall / cp + sync wall; "speedup" = reference wall / weightport wall (the
# converter for F16, convert + quantize for Q4_K_M); "output" = cmp against the reference file.
#
# Environment (defaults): SCRATCH=/tmp/wp-bench-moe  WP=<repo>/target/release/weightport  REPS=3
#   THREADS=2  LAYERS=4  EXPERTS=8  HIDDEN=2048  INTERMEDIATE=5632  VOCAB=32000
#   LLAMA_DIR=$HOME/llama/llama_cpp_python-0.3.36/vendor/llama.cpp (convert_hf_to_gguf.py, gguf-py/)
#   QUANTIZE=$LLAMA_DIR/build/bin/llama-quantize  PYTHON=$HOME/ref/bin/python if present, else python3
# Caveat: the reference tools do not fsync their outputs and their write-back is not timed;
# weightport fsyncs (and re-reads to verify) before it renames its output into place.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH="${SCRATCH:-/tmp/wp-bench-moe}"
WP="${WP:-$ROOT/target/release/weightport}"
LLAMA_DIR="${LLAMA_DIR:-$HOME/llama/llama_cpp_python-0.3.36/vendor/llama.cpp}"
QUANTIZE="${QUANTIZE:-$LLAMA_DIR/build/bin/llama-quantize}"
CONVERTER="$LLAMA_DIR/convert_hf_to_gguf.py"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x $HOME/ref/bin/python ]]; then PYTHON=$HOME/ref/bin/python; else PYTHON=python3; fi
fi
REPS="${REPS:-3}"
THREADS="${THREADS:-2}"
LAYERS="${LAYERS:-4}"
EXPERTS="${EXPERTS:-8}"
HIDDEN="${HIDDEN:-2048}"
INTERMEDIATE="${INTERMEDIATE:-5632}"
VOCAB="${VOCAB:-32000}"

die() { echo "moe.sh: $*" >&2; exit 1; }

if [[ "${1:-}" == "--clean" ]]; then
    [[ "$SCRATCH" == /* && "$SCRATCH" != "/" ]] || die "refusing to clean SCRATCH=$SCRATCH"
    rm -rf -- "$SCRATCH"
    echo "removed $SCRATCH"
    exit 0
fi
[[ $# == 0 ]] || die "unknown argument: $1 (only --clean)"
(( REPS >= 1 )) || die "REPS must be >= 1"
/usr/bin/time -v true >/dev/null 2>&1 || die "/usr/bin/time (GNU time, -v) is required: apt-get install -y time"
[[ -x "$WP" ]] || die "$WP not found (cargo build --release, or set WP=...)"
[[ -f "$CONVERTER" && -d "$LLAMA_DIR/gguf-py/gguf" ]] || die "no $CONVERTER or gguf-py (set LLAMA_DIR)"
[[ -x "$QUANTIZE" ]] || die "no $QUANTIZE (build llama-quantize as benches/README.md says, or set QUANTIZE=...)"
quantize_runs() { [[ "$("$QUANTIZE" --help 2>&1 || true)" == *"allowed quantization types"* ]]; }
if ! quantize_runs; then
    # No rpath in this build: find the shared libraries next to the binary.
    LD_LIBRARY_PATH="$(dirname "$QUANTIZE")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
    quantize_runs || die "$QUANTIZE does not run"
fi

# The release directory is named plainly (general.name "Mixtral"; see gguf.sh on name heuristics).
TAG="${LAYERS}l-${EXPERTS}x-h${HIDDEN}-i${INTERMEDIATE}-v${VOCAB}"
HF="$SCRATCH/$TAG/mixtral"
REF_F16="$SCRATCH/$TAG/ref-f16.gguf"
LOGS="$SCRATCH/logs"
mkdir -p "$SCRATCH" "$LOGS"
TMPD="$(mktemp -d "$SCRATCH/.moe.XXXXXX")"
OUT="$TMPD/out" KEEP="$TMPD/keep"
mkdir -p "$KEEP"
trap 'rm -rf -- "$TMPD"' EXIT

if [[ ! -s "$HF/model.safetensors.index.json" ]]; then
    echo "generating $HF ..." >&2
    "$PYTHON" "$ROOT/benches/gen_mixtral.py" "$HF" --layers "$LAYERS" --experts "$EXPERTS" \
        --hidden "$HIDDEN" --intermediate "$INTERMEDIATE" --vocab "$VOCAB" >&2
fi
in_size=$(du -cb "$HF"/*.safetensors | tail -1 | cut -f1)
free_b=$(( $(df -Pk "$SCRATCH" | awk 'NR==2 {print $4}') * 1024 ))
(( free_b > in_size * 3 )) || die "not enough free space in $SCRATCH for ~3 copies of $in_size bytes"

# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

warm "$HF"/*.safetensors
measure "convert_hf_to_gguf.py --outtype f16" "$OUT/ref.gguf" "$REF_F16" \
    env PYTHONPATH="$LLAMA_DIR/gguf-py" "$PYTHON" "$CONVERTER" "$HF" --outtype f16 --outfile "$OUT/ref.gguf"
CONV_WALL=$M_WALL CONV_RSS=$M_RSS
row "reference: convert_hf_to_gguf.py --outtype f16" - -

warm "$REF_F16"
measure "llama-quantize Q4_K_M" "$OUT/ref.gguf" "$KEEP/ref-q4km.gguf" "$QUANTIZE" "$REF_F16" "$OUT/ref.gguf" Q4_K_M "$THREADS"
row "reference: llama-quantize REF_F16 OUT Q4_K_M $THREADS" - -
TWO_WALL=$(awk -v a="$CONV_WALL" -v b="$M_WALL" 'BEGIN {printf "%.3f", a + b}')
M_WALL=$TWO_WALL M_RSS=$(maxof "$CONV_RSS" "$M_RSS") M_REPS=-
row "reference: convert + quantize (sum; RSS max)" - -

warm "$HF"/*.safetensors
measure "weightport --dtype f16" "$OUT/wp.gguf" "$KEEP/wp-f16.gguf" \
    "$WP" --threads "$THREADS" convert "$HF" -o "$OUT/wp.gguf" --dtype f16 --force
row "weightport --threads $THREADS convert DIR --dtype f16" "$CONV_WALL" "$(same "$KEEP/wp-f16.gguf" "$REF_F16")"
rm -f -- "$KEEP/wp-f16.gguf"

warm "$HF"/*.safetensors
measure "weightport --quant Q4_K_M" "$OUT/wp.gguf" "$KEEP/wp-q4km.gguf" \
    "$WP" --threads "$THREADS" convert "$HF" -o "$OUT/wp.gguf" --dtype f16 --quant Q4_K_M --force
row "weightport --threads $THREADS convert DIR --quant Q4_K_M" "$TWO_WALL" "$(same "$KEEP/wp-q4km.gguf" "$KEEP/ref-q4km.gguf")"
rm -f -- "$KEEP/wp-q4km.gguf" "$KEEP/ref-q4km.gguf"

warm "$REF_F16"
f16_size=$(stat -c %s "$REF_F16")
# shellcheck disable=SC2016  # $1 and $2 are sh -c's arguments
measure "cp + sync" - - sh -c 'cp "$1" "$2" && sync' sh "$REF_F16" "$OUT/copy.gguf"
CPSYNC=$M_WALL
row "cp + sync of the F16 output ($(( f16_size / 2**20 )) MiB)" - -

{
    echo "# weightport MoE bench $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo "host: $(uname -srm), $(nproc) cpu, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 2^20}' /proc/meminfo) RAM; scratch $SCRATCH ($(df -PT "$SCRATCH" | awk 'NR==2 {print $2}'))"
    echo "weightport: $("$WP" --version 2>/dev/null || echo "$WP"); python: $("$PYTHON" -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)' 2>/dev/null)"
    echo "release: $HF ($(( in_size / 2**20 )) MiB in $(ls "$HF"/*.safetensors | wc -l) shards; $LAYERS layers × $EXPERTS experts, hidden $HIDDEN, expert intermediate $INTERMEDIATE, vocab $VOCAB; each layer's experts in two shards)"
    echo "reps: $REPS (median wall; peak RSS = max over reps); threads $THREADS"
    echo
    print_rows "$CPSYNC"
    echo
    echo "Targets (issue 15): F16 ≤ 1.3× cp + sync; one-pass Q4_K_M ≥ 3× faster than convert + quantize at $THREADS threads; peak RSS ≤ 256 MiB."
} | tee "$SCRATCH/results-moe.md"
echo "(saved to $SCRATCH/results-moe.md)" >&2
