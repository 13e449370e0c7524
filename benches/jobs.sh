#!/usr/bin/env bash
# weightport job benchmark (issue 17): an HF release → its published set in one job, against
# three separate weightport runs and against llama.cpp's own chain.
#
#   bash benches/jobs.sh            # build inputs if missing, run the three ways, print a table
#   bash benches/jobs.sh --clean    # delete this script's scratch files (run.sh's and gguf.sh's
#                                   # inputs are kept)
#
# The set: a safetensors repo (--shard-size $SHARD_SIZE), a Q8_0 GGUF and a Q4_K_M GGUF (both
# --outtype f16 --quant T, which equals convert_hf_to_gguf.py --outtype f16 + llama-quantize T).
#   job:        `weightport --threads $THREADS run job.toml` (one job file, the three outputs,
#               made from one read of the release: each input byte taken once)
#   separate:   three `weightport --threads $THREADS convert HF -o ...` runs, one after another
#               (each timed; the row "separate: total" is their sum, "slowest" the largest)
#   reference:  `convert_hf_to_gguf.py HF --outtype f16`, then `llama-quantize F16 Q8_0` and
#               `llama-quantize F16 Q4_K_M` (one `sh -c` run; the repo output has no reference
#               step: the input already is safetensors)
# Every output's sha256 is compared: job against separate (every file of the repo too), both
# GGUFs against the reference's. The target of issue 17 is printed under the table: job wall
# ≤ 1.2 × the slowest separate run, peak RSS ≤ 256 MiB; and the input tensor bytes each way
# read (`read_bytes` of --json: the job's, the separate runs' summed).
#
# Each way runs REPS times under /usr/bin/time -v (median wall from a nanosecond clock, peak RSS =
# max over reps); `sync` before every rep, outside the timed region; inputs pre-read
# (cat > /dev/null). Outputs are deleted before every rep.
#
# Inputs: the same as benches/gguf.sh's section B (generated here if missing):
# $SCRATCH/llama-$TAG.safetensors from benches/gen_llama.py hard-linked into
# $SCRATCH/hf-$TAG/llama/ with a config.json from benches/llama_config.py and the tokenizer of
# fixtures/good/arch/llama. The default shape is the 2.4 GiB bench model (5 layers, hidden
# 4096). A quick check on a small model:
#   LAYERS=2 HIDDEN=256 INTERMEDIATE=512 VOCAB=1000 SHARD_SIZE=2MB bash benches/jobs.sh
#
# Environment (defaults):
#   SCRATCH=/tmp/wp-bench  WP=<repo>/target/release/weightport  REPS=1  THREADS=2
#   SHARD_SIZE=500MB  LAYERS=5  HIDDEN=4096  INTERMEDIATE=11008  VOCAB=32000  HEADS=HIDDEN/128
#   LLAMA_DIR=$HOME/llama/llama_cpp_python-0.3.36/vendor/llama.cpp (convert_hf_to_gguf.py,
#             gguf-py/) and QUANTIZE=$LLAMA_DIR/build/bin/llama-quantize (or LLAMA_BIN=dir)
#   PYTHON=$HOME/ref/bin/python if present, else python3 (torch, numpy, safetensors,
#          transformers, sentencepiece)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH="${SCRATCH:-/tmp/wp-bench}"
WP="${WP:-$ROOT/target/release/weightport}"
LLAMA_DIR="${LLAMA_DIR:-$HOME/llama/llama_cpp_python-0.3.36/vendor/llama.cpp}"
if [[ -n "${LLAMA_BIN:-}" ]]; then QUANTIZE="${QUANTIZE:-$LLAMA_BIN/llama-quantize}"; fi
QUANTIZE="${QUANTIZE:-$LLAMA_DIR/build/bin/llama-quantize}"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x $HOME/ref/bin/python ]]; then PYTHON=$HOME/ref/bin/python; else PYTHON=python3; fi
fi
REPS="${REPS:-1}"
THREADS="${THREADS:-2}"
SHARD_SIZE="${SHARD_SIZE:-500MB}"
LAYERS="${LAYERS:-5}"
HIDDEN="${HIDDEN:-4096}"
INTERMEDIATE="${INTERMEDIATE:-11008}"
VOCAB="${VOCAB:-32000}"
HEADS="${HEADS:-$(( HIDDEN >= 128 ? HIDDEN / 128 : 1 ))}"
FIXTURE_TOK="$ROOT/fixtures/good/arch/llama"

die() { echo "jobs.sh: $*" >&2; exit 1; }

TAG="${LAYERS}l"
if [[ "$HIDDEN/$INTERMEDIATE/$VOCAB" != 4096/11008/32000 ]]; then
    TAG="${LAYERS}l-h${HIDDEN}-i${INTERMEDIATE}-v${VOCAB}"
fi
IN_ST="$SCRATCH/llama-${TAG}.safetensors"
HF="$SCRATCH/hf-${TAG}/llama"
LOGS="$SCRATCH/jobs-logs"

if [[ "${1:-}" == "--clean" ]]; then
    [[ "$SCRATCH" == /* && "$SCRATCH" != "/" ]] || die "refusing to clean SCRATCH=$SCRATCH"
    rm -rf -- "$LOGS" "$SCRATCH/results-jobs.md"
    echo "removed $LOGS, $SCRATCH/results-jobs.md"
    exit 0
fi
[[ $# == 0 ]] || die "unknown argument: $1 (only --clean)"
(( REPS >= 1 )) || die "REPS must be >= 1"

/usr/bin/time -v true >/dev/null 2>&1 || die "/usr/bin/time -v (GNU time) is required: apt-get install -y time"
[[ -x "$WP" ]] || die "$WP not found or not executable (cargo build --release, or set WP=...)"
CONVERTER="$LLAMA_DIR/convert_hf_to_gguf.py"
[[ -f "$CONVERTER" && -d "$LLAMA_DIR/gguf-py/gguf" ]] || die "$CONVERTER or $LLAMA_DIR/gguf-py missing (set LLAMA_DIR)"
quantize_runs() { [[ "$("$QUANTIZE" --help 2>&1 || true)" == *"allowed quantization types"* ]]; }
if ! quantize_runs; then
    LD_LIBRARY_PATH="$(dirname "$QUANTIZE")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
    quantize_runs || die "$QUANTIZE does not run (set QUANTIZE or LLAMA_BIN)"
fi
"$PYTHON" -c "import torch, numpy, safetensors, transformers, sentencepiece" 2>/dev/null \
    || die "$PYTHON lacks torch/numpy/safetensors/transformers/sentencepiece (set PYTHON=...)"

mkdir -p "$SCRATCH" "$LOGS"
TMPD="$(mktemp -d "$SCRATCH/.jobs.XXXXXX")"
trap 'rm -rf -- "$TMPD"' EXIT

# --- inputs (as benches/gguf.sh makes them) --------------------------------------------------
if [[ ! -s "$IN_ST" ]]; then
    echo "generating $IN_ST ($LAYERS layers, hidden $HIDDEN, intermediate $INTERMEDIATE, vocab $VOCAB) ..." >&2
    "$PYTHON" "$ROOT/benches/gen_llama.py" "$IN_ST" --layers "$LAYERS" --hidden "$HIDDEN" \
        --intermediate "$INTERMEDIATE" --vocab "$VOCAB" >&2
fi
mkdir -p "$HF"
if [[ ! "$IN_ST" -ef "$HF/model.safetensors" ]]; then
    rm -f -- "$HF/model.safetensors"
    ln "$IN_ST" "$HF/model.safetensors" 2>/dev/null || cp "$IN_ST" "$HF/model.safetensors"
fi
for f in "$FIXTURE_TOK"/*; do
    b="$(basename "$f")"
    case "$b" in config.json | *.safetensors | *.index.json | *.bin | *.md) continue ;; esac
    cmp -s "$f" "$HF/$b" 2>/dev/null || cp "$f" "$HF/$b"
done
"$PYTHON" "$ROOT/benches/llama_config.py" "$HF/model.safetensors" "$HEADS" legacy >"$TMPD/config.json"
cmp -s "$TMPD/config.json" "$HF/config.json" 2>/dev/null || cp "$TMPD/config.json" "$HF/config.json"

in_size=$(stat -c %s "$IN_ST")
# at once: the kept and the current outputs of one way (repo ≈ input, Q8_0 ≈ ½, Q4_K_M ≈ ¼) and
# the reference's F16 (≈ input)
need=$(( in_size * 5 ))
free_b=$(( $(df -Pk "$SCRATCH" | awk 'NR==2 {print $4}') * 1024 ))
(( free_b > need )) || die "not enough free space in $SCRATCH: need ~$((need / 2**20)) MiB, have $((free_b / 2**20)) MiB"

# --- measurement ----------------------------------------------------------------------------
rss_of() { awk -F': ' '/Maximum resident set size/ {printf "%.1f\n", $2 / 1024}' "$1"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
maxof() { printf '%s\n' "$@" | sort -g | tail -1; }

# measure NAME OUTDIR cmd... : REPS runs, OUTDIR emptied before each; sets M_WALL, M_RSS.
measure() {
    local name=$1 dir=$2; shift 2
    local -a walls=() rsss=()
    local r t0 t1 log="$LOGS/${name// /_}.log"
    echo "-- $name ($REPS reps)" >&2
    for ((r = 1; r <= REPS; r++)); do
        rm -rf -- "$dir"; mkdir -p "$dir"
        cat "$HF"/* >/dev/null
        sync
        t0=$(date +%s%N)
        /usr/bin/time -v -o "$TMPD/time.txt" "$@" >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "$name failed (log: $log)"; }
        t1=$(date +%s%N)
        walls+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", (b - a) / 1e9}')")
        rsss+=("$(rss_of "$TMPD/time.txt")")
        echo "   rep $r: ${walls[-1]} s, ${rsss[-1]} MiB" >&2
    done
    M_WALL=$(median "${walls[@]}") M_RSS=$(maxof "${rsss[@]}")
}

declare -a ROWS=()
row() { ROWS+=("$1|$M_WALL|$M_RSS"); }

# 1. The job.
JOB_OUT="$TMPD/job"
cat >"$TMPD/job.toml" <<EOF
[defaults]
threads = $THREADS

[[job]]
input = "$HF"

[[job.output]]
path = "$JOB_OUT/repo"
shard_size = "$SHARD_SIZE"

[[job.output]]
path = "$JOB_OUT/llama-Q8_0.gguf"
outtype = "f16"
quant = "Q8_0"

[[job.output]]
path = "$JOB_OUT/llama-Q4_K_M.gguf"
outtype = "f16"
quant = "Q4_K_M"
EOF
# The state file lives beside the job file: removed before each rep so every rep makes all three.
measure "job (3 outputs)" "$JOB_OUT" sh -c 'rm -f "$1/.job.toml.state.json"; exec "$2" --json --threads "$3" run "$1/job.toml"' sh "$TMPD" "$WP" "$THREADS"
row "weightport run job.toml (repo + Q8_0 + Q4_K_M)"
JOB_WALL=$M_WALL JOB_RSS=$M_RSS
# read_bytes of --json: the input tensor bytes the job's reads took (sum over its reads).
read_of() { "$PYTHON" -c 'import json,sys
d=[json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
print(d["read_bytes"] if "read_bytes" in d else sum(r["read_bytes"] for r in d["reads"]))' "$1"; }
JOB_READ=$(read_of "$LOGS/job_(3_outputs).log")

# 2. Three separate runs.
SEP="$TMPD/sep"
rm -rf -- "$SEP"; mkdir -p "$SEP"
sep_total=0 sep_max=0 sep_rss=0 sep_read=0
one() {  # NAME OUTPUT args...
    local name=$1 out=$2; shift 2
    measure "$name" "$TMPD/cur" "$WP" --json --threads "$THREADS" convert "$HF" -o "$TMPD/cur/$out" "$@"
    row "$name"
    sep_read=$(( sep_read + $(read_of "$LOGS/${name// /_}.log") ))
    mv -- "$TMPD/cur/$out" "$SEP/$out"
    sep_total=$(awk -v a="$sep_total" -v b="$M_WALL" 'BEGIN {printf "%.3f", a + b}')
    sep_max=$(awk -v a="$sep_max" -v b="$M_WALL" 'BEGIN {print (b > a ? b : a)}')
    sep_rss=$(awk -v a="$sep_rss" -v b="$M_RSS" 'BEGIN {print (b > a ? b : a)}')
}
one "weightport convert to repo" repo --shard-size "$SHARD_SIZE"
one "weightport convert to Q8_0" llama-Q8_0.gguf --outtype f16 --quant Q8_0
one "weightport convert to Q4_K_M" llama-Q4_K_M.gguf --outtype f16 --quant Q4_K_M
M_WALL=$sep_total M_RSS=$sep_rss
row "separate: total of the three"

# 3. The reference chain, one run.
REF="$TMPD/ref"
# shellcheck disable=SC2016  # sh -c's arguments
measure "reference chain" "$REF" sh -c '
    PYTHONPATH="$1/gguf-py" "$2" "$1/convert_hf_to_gguf.py" "$3" --outtype f16 --outfile "$4/f16.gguf" &&
    "$5" "$4/f16.gguf" "$4/llama-Q8_0.gguf" Q8_0 "$6" &&
    "$5" "$4/f16.gguf" "$4/llama-Q4_K_M.gguf" Q4_K_M "$6"' \
    sh "$LLAMA_DIR" "$PYTHON" "$HF" "$REF" "$QUANTIZE" "$THREADS"
row "reference: convert_hf_to_gguf.py f16 + llama-quantize Q8_0, Q4_K_M"

# --- outputs compared -------------------------------------------------------------------------
declare -a CHECKS=()
same() { # WHAT A B
    local a b
    a=$(sha256sum <"$2" | cut -c1-64) b=$(sha256sum <"$3" | cut -c1-64)
    if [[ $a == "$b" ]]; then CHECKS+=("$1: identical (sha256 $a)"); else CHECKS+=("$1: DIFFERS ($a vs $b)"); fi
}
for f in $(cd "$JOB_OUT/repo" && ls); do same "job repo/$f vs separate" "$JOB_OUT/repo/$f" "$SEP/repo/$f"; done
[[ "$(cd "$JOB_OUT/repo" && ls)" == "$(cd "$SEP/repo" && ls)" ]] || CHECKS+=("job repo and separate repo: DIFFERENT FILE LISTS")
for q in Q8_0 Q4_K_M; do
    same "job $q vs separate" "$JOB_OUT/llama-$q.gguf" "$SEP/llama-$q.gguf"
    same "job $q vs reference" "$JOB_OUT/llama-$q.gguf" "$REF/llama-$q.gguf"
done

# --- table ------------------------------------------------------------------------------------
{
    echo "model: $IN_ST ($(( in_size / 2**20 )) MiB), threads $THREADS, reps $REPS, $(date -u +%F)"
    echo
    printf '| %-70s | %10s | %12s |\n' step "wall s" "peak RSS MiB"
    printf '|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..72})" "$(printf -- '-%.0s' {1..12})" "$(printf -- '-%.0s' {1..14})"
    for r in "${ROWS[@]}"; do
        IFS='|' read -r s w m <<<"$r"
        printf '| %-70s | %10s | %12s |\n' "$s" "$w" "$m"
    done
    echo
    ratio=$(awk -v a="$JOB_WALL" -v b="$sep_max" 'BEGIN {printf "%.2f", a / b}')
    echo "job / slowest separate run: $ratio (target ≤ 1.2); job peak RSS $JOB_RSS MiB (target ≤ 256)"
    echo "input tensor bytes read: job $JOB_READ, separate runs $sep_read in all (input file $in_size bytes)"
    printf '%s\n' "${CHECKS[@]}"
} | tee "$SCRATCH/results-jobs.md"
if printf '%s\n' "${CHECKS[@]}" | grep -q DIFFER; then exit 1; fi
