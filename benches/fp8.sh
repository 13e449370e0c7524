#!/usr/bin/env bash
# weightport FP8 benchmark (issue 30): a DeepSeek-V3-shaped FP8 HF release → GGUF, against the
# pinned convert_hf_to_gguf.py (+ llama-quantize when built) and against cp + sync, in one run.
#
#   bash benches/fp8.sh            # generate the release if missing, measure, print a table
#   bash benches/fp8.sh --clean    # delete this script's scratch directory
#
# Input: benches/gen_deepseek3_fp8.py's release in $SCRATCH/deepseek3 (default 2.34 GiB: MLA,
# 1 dense + 7 MoE layers of 48 experts + a shared expert, every decoder weight F8_E4M3 with F32
# 128x128 block scales, each layer's experts in two shards; generated on demand, never committed).
# Steps (each REPS times; median wall, peak RSS = max over the reps from GNU time; `sync` before
# every rep outside the timed part; inputs pre-read so every tool starts with a warm cache):
#   reference: convert_hf_to_gguf.py DIR --outtype bf16   (benches/ref_convert.py: the reference's
#              main() with pre-tokenizer qwen2 for the made-up vocabulary; its output: REF_BF16)
#   reference: llama-quantize REF_BF16 OUT Q4_K_M $THREADS  (only when $QUANTIZE runs)
#   weightport --threads $THREADS convert DIR -o X --dtype bf16                 (cmp with REF_BF16)
#   weightport --threads $THREADS convert DIR -o X --dtype bf16 --quant Q4_K_M  (cmp with the chain's)
#   cp + sync of REF_BF16
# and then the BF16 target paired: weightport --dtype bf16 and cp + sync of REF_BF16 in turn,
# PAIRS times, the ratio taken pair by pair (the two write the same 4.5 GiB, and a disk's
# speed drifts with what was written before: cp + sync's reps run alone after minutes of
# quantization moved 3.3-8.8 s between calls, so only a paired ratio is a verdict).
# Environment (defaults): SCRATCH=/tmp/wp-bench-fp8  WP=<repo>/target/release/weightport  REPS=3
#   THREADS=2  LAYERS=8  EXPERTS=48  PAIRS=5
#   LLAMA_DIR=$HOME/llama/llama_cpp_python-0.3.36/vendor/llama.cpp (convert_hf_to_gguf.py, gguf-py/)
#   QUANTIZE=$LLAMA_DIR/build/bin/llama-quantize  PYTHON=$HOME/ref/bin/python if present, else python3
# Caveat: the reference tools do not fsync their outputs and their write-back is not timed;
# weightport fsyncs (and re-reads to verify) before it renames its output into place.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH="${SCRATCH:-/tmp/wp-bench-fp8}"
WP="${WP:-$ROOT/target/release/weightport}"
LLAMA_DIR="${LLAMA_DIR:-$HOME/llama/llama_cpp_python-0.3.36/vendor/llama.cpp}"
QUANTIZE="${QUANTIZE:-$LLAMA_DIR/build/bin/llama-quantize}"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x $HOME/ref/bin/python ]]; then PYTHON=$HOME/ref/bin/python; else PYTHON=python3; fi
fi
REPS="${REPS:-3}"
PAIRS="${PAIRS:-5}"
THREADS="${THREADS:-2}"
LAYERS="${LAYERS:-8}"
EXPERTS="${EXPERTS:-48}"

die() { echo "fp8.sh: $*" >&2; exit 1; }

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
[[ -f "$LLAMA_DIR/convert_hf_to_gguf.py" && -d "$LLAMA_DIR/gguf-py/gguf" ]] || die "no convert_hf_to_gguf.py or gguf-py in $LLAMA_DIR"
HAVE_QUANTIZE=0
if [[ -x "$QUANTIZE" ]]; then
    export LD_LIBRARY_PATH="$(dirname "$QUANTIZE")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    [[ "$("$QUANTIZE" --help 2>&1 || true)" == *"allowed quantization types"* ]] && HAVE_QUANTIZE=1
fi

HF="$SCRATCH/deepseek3"
REF_BF16="$SCRATCH/ref-bf16.gguf"
LOGS="$SCRATCH/logs"
mkdir -p "$SCRATCH" "$LOGS"
TMPD="$(mktemp -d "$SCRATCH/.fp8.XXXXXX")"
OUT="$TMPD/out" KEEP="$TMPD/keep"
mkdir -p "$KEEP"
trap 'rm -rf -- "$TMPD"' EXIT

if [[ ! -s "$HF/model.safetensors.index.json" ]]; then
    echo "generating $HF ..." >&2
    "$PYTHON" "$ROOT/benches/gen_deepseek3_fp8.py" "$HF" --layers "$LAYERS" --experts "$EXPERTS" >&2
fi
in_size=$(du -cb "$HF"/*.safetensors | tail -1 | cut -f1)
free_b=$(( $(df -Pk "$SCRATCH" | awk 'NR==2 {print $4}') * 1024 ))
# Two BF16 outputs (about twice the FP8 input each) exist at once: the reference's and one other.
(( free_b > in_size * 4 )) || die "not enough free space in $SCRATCH for two BF16 outputs (~4x $in_size bytes)"

# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

warm "$HF"/*.safetensors
measure "convert_hf_to_gguf.py --outtype bf16" "$OUT/ref.gguf" "$REF_BF16" \
    "$PYTHON" "$ROOT/benches/ref_convert.py" "$LLAMA_DIR" qwen2 "$HF" --outtype bf16 --outfile "$OUT/ref.gguf"
CONV_WALL=$M_WALL CONV_RSS=$M_RSS
row "reference: convert_hf_to_gguf.py --outtype bf16" - -

TWO_WALL=-
if (( HAVE_QUANTIZE )); then
    warm "$REF_BF16"
    measure "llama-quantize Q4_K_M" "$OUT/ref.gguf" "$KEEP/ref-q4km.gguf" "$QUANTIZE" "$REF_BF16" "$OUT/ref.gguf" Q4_K_M "$THREADS"
    row "reference: llama-quantize REF_BF16 OUT Q4_K_M $THREADS" - -
    TWO_WALL=$(awk -v a="$CONV_WALL" -v b="$M_WALL" 'BEGIN {printf "%.3f", a + b}')
    M_WALL=$TWO_WALL M_RSS=$(maxof "$CONV_RSS" "$M_RSS") M_REPS=-
    row "reference: convert + quantize (sum; RSS max)" - -
fi

warm "$HF"/*.safetensors
measure "weightport --dtype bf16" "$OUT/wp.gguf" "$KEEP/wp-bf16.gguf" \
    "$WP" --threads "$THREADS" convert "$HF" -o "$OUT/wp.gguf" --dtype bf16 --pre-tokenizer qwen2 --force
row "weightport --threads $THREADS convert DIR --dtype bf16" "$CONV_WALL" "$(same "$KEEP/wp-bf16.gguf" "$REF_BF16")"
rm -f -- "$KEEP/wp-bf16.gguf"

warm "$HF"/*.safetensors
measure "weightport --quant Q4_K_M" "$OUT/wp.gguf" "$KEEP/wp-q4km.gguf" \
    "$WP" --threads "$THREADS" convert "$HF" -o "$OUT/wp.gguf" --dtype bf16 --quant Q4_K_M --pre-tokenizer qwen2 --force
if (( HAVE_QUANTIZE )); then q_out="$(same "$KEEP/wp-q4km.gguf" "$KEEP/ref-q4km.gguf")"; else q_out="no reference"; fi
row "weightport --threads $THREADS convert DIR --quant Q4_K_M" "$TWO_WALL" "$q_out"
rm -f -- "$KEEP/wp-q4km.gguf" "$KEEP/ref-q4km.gguf"

warm "$REF_BF16"
out_size=$(stat -c %s "$REF_BF16")
# shellcheck disable=SC2016  # $1 and $2 are sh -c's arguments
measure "cp + sync" - - sh -c 'cp "$1" "$2" && sync' sh "$REF_BF16" "$OUT/copy.gguf"
CPSYNC=$M_WALL
row "cp + sync of the BF16 output ($(( out_size / 2**20 )) MiB)" - -

echo "-- weightport --dtype bf16 and cp + sync in turn ($PAIRS pairs)" >&2
declare -a PR=()
for ((p = 1; p <= PAIRS; p++)); do
    a=$(timed "$WP" --threads "$THREADS" convert "$HF" -o "$OUT/wp.gguf" --dtype bf16 --pre-tokenizer qwen2)
    # shellcheck disable=SC2016  # $1 and $2 are sh -c's arguments
    b=$(timed sh -c 'cp "$1" "$2" && sync' sh "$REF_BF16" "$OUT/copy.gguf")
    PR+=("$(ratio "$a" "$b")")
    echo "   pair $p: weightport $a s, cp + sync $b s: ${PR[-1]}" >&2
done
rm -rf -- "$OUT"
PAIRED="$(median "${PR[@]}") (min $(printf '%s\n' "${PR[@]}" | sort -g | head -1), max $(maxof "${PR[@]}"); pairs: ${PR[*]})"

{
    echo "# weightport FP8 bench $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo "host: $(uname -srm), $(nproc) cpu, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 2^20}' /proc/meminfo) RAM, load $(cut -d' ' -f1-3 /proc/loadavg); scratch $SCRATCH"
    echo "release: $HF ($(( in_size / 2**20 )) MiB in $(ls "$HF"/*.safetensors | wc -l) shards; $LAYERS layers, $EXPERTS experts, FP8 128x128 blocks)"
    echo "reps: $REPS (median wall; peak RSS = max over reps); threads $THREADS; llama-quantize: $( (( HAVE_QUANTIZE )) && echo yes || echo "not built (converter half only)")"
    echo
    print_rows "$CPSYNC"
    echo
    echo "BF16 / cp + sync, paired in turn ($PAIRS pairs), median: $PAIRED"
    echo
    echo "Targets (issue 30): BF16 <= 1.3x cp + sync; one-pass Q4_K_M >= 3x faster than convert + llama-quantize; peak RSS <= 256 MiB."
} | tee "$SCRATCH/results-fp8.md"
echo "(saved to $SCRATCH/results-fp8.md)" >&2
