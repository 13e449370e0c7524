#!/usr/bin/env bash
# weightport benchmark harness.
#
#   bash benches/run.sh            # generate inputs if missing, run everything, print a table
#   bash benches/run.sh --clean    # delete the scratch dir (inputs + outputs) and exit
#
# Steps, each run REPS times (median wall reported, peak RSS = max over the reps):
#   1x model (LAYERS layers, ~2.37 GiB at 5):   (a) cp  (b) weightport convert --shard-size 500MB
#                                               (c) benches/py_reshard.py 500MB  (d) weightport inspect
#   2x model (LAYERS_2X layers, ~4.26 GiB):    (a) cp  (b) weightport convert  [(c) if PY_2X=1]
#   casts of the 1x model (CASTS=1):            --dtype f32 (4.7 GiB out) and --dtype bf16, each
#                                               against cp (+ sync) of a file of the output's size
#                                               and benches/py_cast.py (load_file + .to + save_file)
#   the 1x model as .bin, .npz, compressed .npz (FORMATS=1) → safetensors, and as a sharded .bin
#                                               repo → sharded safetensors repo, against cp (+ sync)
#                                               and the Python path (benches/py_formats.py)
# plus `strace -c` of `weightport inspect` (shows it reads only the header).
# Rows for weightport are skipped (with a message) if $WP does not exist.
#
# Environment (defaults):
#   SCRATCH=/tmp/wp-bench  WP=<repo>/target/release/weightport  PYTHON=python3 (needs numpy,
#   safetensors, huggingface_hub, torch: see fixtures/gen/requirements.txt)
#   REPS=3  SHARD_SIZE=500MB  LAYERS=5  LAYERS_2X=10  RUN_2X=1  PY_2X=0
#
# Caveats: outputs are written to the page cache; the write-back is not timed (a `sync` runs
# before every rep, outside the timed region). Inputs are pre-read once (cat > /dev/null) so
# every tool starts with a warm cache.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH="${SCRATCH:-/tmp/wp-bench}"
WP="${WP:-$ROOT/target/release/weightport}"
PY="${PYTHON:-python3}"
REPS="${REPS:-3}"
SHARD="${SHARD_SIZE:-500MB}"
LAYERS="${LAYERS:-5}"
LAYERS_2X="${LAYERS_2X:-10}"
RUN_2X="${RUN_2X:-1}"
CASTS="${CASTS:-1}"
FORMATS="${FORMATS:-1}"
ONLY_CASTS="${ONLY_CASTS:-0}"
PY_2X="${PY_2X:-0}"

die() { echo "run.sh: $*" >&2; exit 1; }

if [[ "${1:-}" == "--clean" ]]; then
    [[ "$SCRATCH" == /* && "$SCRATCH" != "/" ]] || die "refusing to delete SCRATCH=$SCRATCH"
    rm -rf -- "$SCRATCH"
    echo "removed $SCRATCH"
    exit 0
fi

# --- tools ------------------------------------------------------------------------------------
if ! command -v /usr/bin/time >/dev/null 2>&1; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        echo "installing GNU time (apt-get install -y time)" >&2
        apt-get install -y time >/dev/null || die "could not install GNU time"
    else
        die "/usr/bin/time (GNU time) is required: apt-get install -y time"
    fi
fi
/usr/bin/time -v true >/dev/null 2>&1 || die "/usr/bin/time does not support -v (need GNU time)"
"$PY" -c "import numpy, safetensors, huggingface_hub" 2>/dev/null \
    || die "$PY lacks numpy/safetensors/huggingface_hub (activate the venv or set PYTHON=...)"

HAVE_WP=1
if [[ ! -x "$WP" ]]; then
    HAVE_WP=0
    echo "NOTE: $WP not found or not executable: weightport rows are skipped (build with cargo build --release, or set WP=...)" >&2
fi
HAVE_STRACE=0
command -v strace >/dev/null 2>&1 && HAVE_STRACE=1

mkdir -p "$SCRATCH"
TMPD="$(mktemp -d "$SCRATCH/.run.XXXXXX")"
OUT="$SCRATCH/out"
trap 'rm -rf -- "$TMPD" "$OUT"' EXIT

# --- inputs -----------------------------------------------------------------------------------
gen_input() {  # $1 = layers -> prints path
    local layers=$1 path="$SCRATCH/llama-${1}l.safetensors"
    if [[ ! -s "$path" ]]; then
        echo "generating $path ($layers layers) ..." >&2
        "$PY" "$ROOT/benches/gen_llama.py" "$path" --layers "$layers" >&2
    fi
    echo "$path"
}

IN1="$(gen_input "$LAYERS")"
IN2=""
[[ "$RUN_2X" == 1 ]] && IN2="$(gen_input "$LAYERS_2X")"

size_of() { stat -c %s "$1"; }
need=$(( $(size_of "$IN1") * 2 ))
[[ -n "$IN2" ]] && need=$(( $(size_of "$IN2") * 2 ))
free_b=$(( $(df -Pk "$SCRATCH" | awk 'NR==2 {print $4}') * 1024 ))
(( free_b > need )) || die "not enough free space in $SCRATCH: need ~$((need / 2**20)) MiB for outputs, have $((free_b / 2**20)) MiB"

warm() { cat "$@" > /dev/null; }

# --- measurement ------------------------------------------------------------------------------
declare -a ROWS=()
declare -A CPWALL=()

rss_of() { awk -F': ' '/Maximum resident set size/ {printf "%.1f\n", $2 / 1024}' "$1"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
maxof() { printf '%s\n' "$@" | sort -g | tail -1; }

# measure MODEL LABEL cmd... : REPS runs, fresh empty $OUT each time
measure() {
    local model=$1 label=$2; shift 2
    local -a walls=() rsss=()
    local r
    echo "-- $model: $label ($REPS reps)" >&2
    for ((r = 1; r <= REPS; r++)); do
        rm -rf -- "$OUT"; mkdir -p "$OUT"; sync
        local t0 t1
        t0=$(date +%s%N)
        if ! /usr/bin/time -v -o "$TMPD/time.txt" "$@" >"$TMPD/log.txt" 2>&1; then
            echo "   FAILED (rep $r): $*" >&2
            tail -n 20 "$TMPD/log.txt" >&2
            ROWS+=("$model|$label|FAILED|-|-")
            rm -rf -- "$OUT"
            return 0
        fi
        t1=$(date +%s%N)
        # wall from our own ns clock (GNU time prints only 1/100 s); RSS from GNU time
        walls+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", (b - a) / 1e9}')")
        rsss+=("$(rss_of "$TMPD/time.txt")")
        echo "   rep $r: ${walls[-1]} s, ${rsss[-1]} MiB" >&2
    done
    rm -rf -- "$OUT"
    local w; w=$(median "${walls[@]}")
    [[ "$label" == cp ]] && CPWALL[$model]=$w
    local ratio="-"
    [[ -n "${CPWALL[$model]:-}" ]] && ratio=$(awk -v a="$w" -v b="${CPWALL[$model]}" 'BEGIN {printf (b > 0 ? "%.2f" : "-"), a / b}')
    ROWS+=("$model|$label|$w|$ratio|$(maxof "${rsss[@]}")")
}

skip_row() { ROWS+=("$1|$2|skipped|-|-"); }

bench_model() {  # $1 = label, $2 = input, $3 = run python too (0/1), $4 = run inspect (0/1)
    local model=$1 in=$2 with_py=$3 with_inspect=$4
    warm "$in"
    measure "$model" cp cp "$in" "$OUT/copy.safetensors"
    # weightport fsyncs its outputs before renaming them; this row makes cp equally durable.
    measure "$model" "cp + sync" sh -c 'cp "$1" "$2" && sync' sh "$in" "$OUT/copy.safetensors"
    if [[ $HAVE_WP == 1 ]]; then
        measure "$model" "weightport convert --no-verify" "$WP" convert "$in" -o "$OUT/conv" --shard-size "$SHARD" --force --no-verify
        measure "$model" "weightport convert --shard-size $SHARD" "$WP" convert "$in" -o "$OUT/conv" --shard-size "$SHARD" --force
    else
        skip_row "$model" "weightport convert --shard-size $SHARD"
    fi
    if [[ $with_py == 1 ]]; then
        measure "$model" "py_reshard.py $SHARD" "$PY" "$ROOT/benches/py_reshard.py" "$in" "$OUT/py" "$SHARD"
    fi
    if [[ $with_inspect == 1 ]]; then
        if [[ $HAVE_WP == 1 ]]; then
            measure "$model" "weightport inspect" "$WP" inspect "$in"
        else
            skip_row "$model" "weightport inspect"
        fi
    fi
}

bench_casts() {  # $1 = input
    local in=$1 d
    [[ $HAVE_WP == 1 ]] || { skip_row "casts" "weightport --dtype"; return 0; }
    for d in f32 bf16; do
        local model="cast ${d} (1x)"
        local ref="$SCRATCH/cast-ref-$d.safetensors"
        # A file of the output's size for the cp rows: the output itself, made once.
        [[ -s "$ref" ]] || "$WP" convert "$in" -o "$ref" --dtype "$d" --force >/dev/null
        warm "$in"; warm "$ref"
        measure "$model" cp cp "$ref" "$OUT/copy.safetensors"
        measure "$model" "cp + sync" sh -c 'cp "$1" "$2" && sync' sh "$ref" "$OUT/copy.safetensors"
        measure "$model" "weightport convert --dtype $d" "$WP" convert "$in" -o "$OUT/c.safetensors" --dtype "$d" --force
        if "$PY" -c "import torch" 2>/dev/null; then
            measure "$model" "py_cast.py (load_file+.to+save_file)" "$PY" "$ROOT/benches/py_cast.py" "$in" "$OUT/py.safetensors" "$d"
        else
            skip_row "$model" "py_cast.py (no torch)"
        fi
    done
}

bench_formats() {  # $1 = input safetensors: the same model as .bin, .npz and compressed .npz
    local in=$1 f
    [[ $HAVE_WP == 1 ]] || { skip_row "formats" "weightport"; return 0; }
    local bin="$SCRATCH/llama.bin" npz="$SCRATCH/llama.npz" npzz="$SCRATCH/llama-z.npz"
    if "$PY" -c "import torch" 2>/dev/null; then
        [[ -s "$bin" ]] || "$PY" "$ROOT/benches/py_formats.py" make-bin "$in" "$bin"
    fi
    [[ -s "$npz" ]] || "$PY" "$ROOT/benches/py_formats.py" make-npz "$in" "$npz"
    [[ -s "$npzz" ]] || "$PY" "$ROOT/benches/py_formats.py" make-npz "$in" "$npzz" -z
    for f in "$bin" "$npz" "$npzz"; do
        [[ -s "$f" ]] || continue
        local model; model="$(basename "$f") → safetensors"
        warm "$f"
        measure "$model" cp cp "$f" "$OUT/copy"
        measure "$model" "cp + sync" sh -c 'cp "$1" "$2" && sync' sh "$f" "$OUT/copy"
        measure "$model" "weightport convert" "$WP" convert "$f" -o "$OUT/c.safetensors" --force
        case "$f" in
            *.bin) measure "$model" "torch.load(weights_only)+save_file" "$PY" "$ROOT/benches/py_formats.py" bin2st "$f" "$OUT/py.safetensors" ;;
            *) measure "$model" "np.load+save_file" "$PY" "$ROOT/benches/py_formats.py" npz2st "$f" "$OUT/py.safetensors" ;;
        esac
    done    # A sharded .bin repo (500MB shards) → a sharded safetensors repo of the same shard size.
    local binrepo="$SCRATCH/llama-bin-repo"
    if "$PY" -c "import torch" 2>/dev/null; then
        [[ -s "$binrepo/pytorch_model.bin.index.json" ]] \
            || "$PY" "$ROOT/benches/py_formats.py" make-bin-repo "$in" "$binrepo" "$SHARD"
        local model="sharded .bin repo → st repo"
        warm "$binrepo"/*.bin
        measure "$model" cp cp -r "$binrepo" "$OUT/copy"
        measure "$model" "cp + sync" sh -c 'cp -r "$1" "$2" && sync' sh "$binrepo" "$OUT/copy"
        measure "$model" "weightport convert --shard-size $SHARD" "$WP" convert "$binrepo" -o "$OUT/repo" --shard-size "$SHARD" --force
        measure "$model" "torch.load per shard + split + save_file" "$PY" "$ROOT/benches/py_formats.py" binrepo2st "$binrepo" "$OUT/py" "$SHARD"
    fi
}

M1="1x (${LAYERS}L, $(( $(size_of "$IN1") / 2**20 )) MiB)"
[[ "$ONLY_CASTS" == 1 ]] || bench_model "$M1" "$IN1" 1 1
[[ "$CASTS" == 1 ]] && bench_casts "$IN1"
[[ "$FORMATS" == 1 ]] && bench_formats "$IN1"
[[ "$ONLY_CASTS" == 1 ]] && IN2=""
if [[ -n "$IN2" ]]; then
    M2="2x (${LAYERS_2X}L, $(( $(size_of "$IN2") / 2**20 )) MiB)"
    bench_model "$M2" "$IN2" "$PY_2X" 0
fi

# --- strace of inspect ------------------------------------------------------------------------
STRACE_TXT=""
if [[ $HAVE_WP == 1 && $HAVE_STRACE == 1 ]]; then
    strace -f -c -e trace=read,pread64,mmap -o "$TMPD/strace_c.txt" "$WP" inspect "$IN1" >/dev/null 2>&1 || true
    strace -f -e trace=read,pread64 -e signal=none -o "$TMPD/strace_full.txt" "$WP" inspect "$IN1" >/dev/null 2>&1 || true
    bytes=$(awk '/^[0-9]+ +(read|pread64)\(|^(read|pread64)\(/ { if (match($0, /= [0-9]+$/)) s += substr($0, RSTART + 2) } END {print s + 0}' "$TMPD/strace_full.txt")
    STRACE_TXT="$(cat "$TMPD/strace_c.txt")
total bytes returned by read/pread64 (all fds, incl. shared libraries): $bytes of a $(size_of "$IN1")-byte input"
elif [[ $HAVE_WP == 1 ]]; then
    STRACE_TXT="strace not installed: skipped"
fi

# --- report -----------------------------------------------------------------------------------
{
    echo "# weightport bench $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo "host: $(uname -srm), $(nproc) cpu, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 2^20}' /proc/meminfo) RAM; scratch $SCRATCH ($(df -PT "$SCRATCH" | awk 'NR==2 {print $2}'))"
    echo "weightport: $([[ $HAVE_WP == 1 ]] && ("$WP" --version 2>/dev/null || echo "$WP") || echo 'not built')"
    echo "python: $("$PY" -c 'import sys, safetensors, huggingface_hub; print(sys.version.split()[0], "safetensors", safetensors.__version__, "huggingface_hub", huggingface_hub.__version__)')"
    echo "reps: $REPS (median wall; peak RSS = max over reps); shard size $SHARD"
    [[ $HAVE_WP == 1 ]] || echo "weightport rows skipped: $WP does not exist"
    echo
    printf '| %-34s | %-42s | %12s | %11s | %13s |\n' model step "wall s" "ratio to cp" "peak RSS MiB"
    printf '|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..36})" "$(printf -- '-%.0s' {1..44})" "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..13})" "$(printf -- '-%.0s' {1..15})"
    for row in "${ROWS[@]}"; do
        IFS='|' read -r m s w r p <<<"$row"
        printf '| %-34s | %-42s | %12s | %11s | %13s |\n' "$m" "$s" "$w" "$r" "$p"
    done
    if [[ -n "$STRACE_TXT" ]]; then
        echo
        echo "strace -c -e trace=read,pread64,mmap $WP inspect $IN1:"
        echo '```'
        echo "$STRACE_TXT"
        echo '```'
    fi
} | tee "$SCRATCH/results.md"
echo "(saved to $SCRATCH/results.md)" >&2
