#!/usr/bin/env bash
# weightport GGUF benchmark harness: weightport against llama.cpp's own tools, in one run.
#
#   bash benches/gguf.sh            # build inputs if missing, run sections A and B, print a table
#   bash benches/gguf.sh --clean    # delete this script's scratch files (HF repo dir, cached
#                                   # reference F16 GGUF, logs); run.sh's inputs are kept
#
# A (issue 9)  F16 GGUF → QUANTS (Q8_0 Q4_0 Q4_K_M Q6_K), for each type:
#                `llama-quantize IN OUT TYPE $THREADS` against
#                `weightport --threads $THREADS convert IN -o OUT --quant TYPE --force` (verified),
#              outputs compared with cmp; plus cp and cp + sync of the F16 input.
#              IN is the reference F16 GGUF that section B's converter writes (cached in SCRATCH).
# B (issue 10) HF safetensors repo → GGUF:
#                reference: `convert_hf_to_gguf.py DIR --outtype f16`, then
#                           `llama-quantize REF_F16 REF_Q4KM Q4_K_M $THREADS`, and the two-step total;
#                weightport: `convert DIR -o X.gguf --dtype f16` and `convert DIR -o X.gguf --quant Q4_K_M`
#                            (skipped with a NOTE if `weightport convert DIR -o x.gguf --dry-run` fails),
#                            each compared with cmp against the reference's file;
#                baseline: cp + sync of the reference F16 output.
# Steps that are the same command on the same file in A and B (llama-quantize Q4_K_M, cp + sync
# of the F16 GGUF) are measured once and listed in both sections.
#
# Each step runs REPS times (median wall reported, peak RSS = max over the reps). `sync` runs
# before every rep, outside the timed region; inputs are pre-read (cat > /dev/null) so every tool
# starts with a warm cache. Columns: "/ cp+sync" = wall / the section's cp + sync wall;
# "speedup" = reference wall / weightport wall (A: llama-quantize of the same type; B: the
# converter for F16, convert + quantize for Q4_K_M); "output" = cmp against the reference file.
#
# Inputs: $SCRATCH/llama-${LAYERS}l.safetensors (benches/gen_llama.py, the file run.sh makes;
# generated if missing) hard-linked as model.safetensors into $SCRATCH/hf-${LAYERS}l/llama/, with a
# config.json for LlamaForCausalLM derived from the safetensors header and the tokenizer files of
# fixtures/good/arch/llama/ (560-piece SentencePiece vocab; the converter pads it to vocab_size
# with [PAD] tokens). HIDDEN/INTERMEDIATE/VOCAB change the generated shape (default = run.sh's,
# ~2.37 GiB at 5 layers); a non-default shape gets its own file names.
#
# Environment (defaults):
#   SCRATCH=/tmp/wp-bench  WP=<repo>/target/release/weightport  REPS=3  THREADS=2
#   LLAMA_DIR=$HOME/llama/llama_cpp_python-0.3.36/vendor/llama.cpp  (needs build/bin/llama-quantize,
#             convert_hf_to_gguf.py, gguf-py/; the converter runs with PYTHONPATH=$LLAMA_DIR/gguf-py)
#   PYTHON=$HOME/ref/bin/python if present, else python3 (needs torch, numpy, safetensors,
#          transformers, sentencepiece: the converter's requirements)
#   SECTIONS="A B"  QUANTS="Q8_0 Q4_0 Q4_K_M Q6_K"  LAYERS=5  HIDDEN=4096  INTERMEDIATE=11008
#   VOCAB=32000  HEADS=HIDDEN/128  HF_CONFIG=legacy (torch_dtype + rope_theta, as most hub Llama
#   repos) or v5 (the key set transformers 5 writes: dtype + rope_parameters)
#
# Caveats: outputs go to the page cache and their write-back is not timed, except in the
# cp + sync rows (weightport fsyncs its outputs; llama-quantize and the converter do not).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH="${SCRATCH:-/tmp/wp-bench}"
WP="${WP:-$ROOT/target/release/weightport}"
LLAMA_DIR="${LLAMA_DIR:-$HOME/llama/llama_cpp_python-0.3.36/vendor/llama.cpp}"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x $HOME/ref/bin/python ]]; then PYTHON=$HOME/ref/bin/python; else PYTHON=python3; fi
fi
PY="$PYTHON"
REPS="${REPS:-3}"
THREADS="${THREADS:-2}"
SECTIONS="${SECTIONS:-A B}"
QUANTS="${QUANTS:-Q8_0 Q4_0 Q4_K_M Q6_K}"
LAYERS="${LAYERS:-5}"
HIDDEN="${HIDDEN:-4096}"
INTERMEDIATE="${INTERMEDIATE:-11008}"
VOCAB="${VOCAB:-32000}"
HEADS="${HEADS:-$(( HIDDEN >= 128 ? HIDDEN / 128 : 1 ))}"
HF_CONFIG="${HF_CONFIG:-legacy}"
FIXTURE_TOK="$ROOT/fixtures/good/arch/llama"

die() { echo "gguf.sh: $*" >&2; exit 1; }
note() { echo "NOTE: $*" >&2; }

# File names: run.sh's for its default shape, a shape-tagged name otherwise.
TAG="${LAYERS}l"
if [[ "$HIDDEN/$INTERMEDIATE/$VOCAB" != 4096/11008/32000 ]]; then
    TAG="${LAYERS}l-h${HIDDEN}-i${INTERMEDIATE}-v${VOCAB}"
fi
IN_ST="$SCRATCH/llama-${TAG}.safetensors"
# The release directory is named plainly: the reference derives general.basename/finetune/version
# from a name like llama-hf-5l (weightport writes only general.name), see the issue-10 note.
HF="$SCRATCH/hf-${TAG}/llama"
REF_F16="$SCRATCH/llama-hf-${TAG}.ref-f16.gguf"
LOGS="$SCRATCH/gguf-logs"

if [[ "${1:-}" == "--clean" ]]; then
    [[ "$SCRATCH" == /* && "$SCRATCH" != "/" ]] || die "refusing to clean SCRATCH=$SCRATCH"
    rm -rf -- "$SCRATCH/hf-${TAG}" "$REF_F16" "$LOGS" "$SCRATCH/results-gguf.md"
    echo "removed $HF, $REF_F16, $LOGS, $SCRATCH/results-gguf.md"
    exit 0
fi
[[ $# == 0 ]] || die "unknown argument: $1 (only --clean)"
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
want A || want B || die "SECTIONS=$SECTIONS: expected A, B or both"
(( REPS >= 1 )) || die "REPS must be >= 1"

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

QUANTIZE="$LLAMA_DIR/build/bin/llama-quantize"
CONVERTER="$LLAMA_DIR/convert_hf_to_gguf.py"
llama_missing() {
    cat >&2 <<EOF
gguf.sh: $1
Build the reference tools (the llama.cpp tree vendored in the llama-cpp-python 0.3.36 sdist,
CMake Release, no -march, as used for fixtures/good/quant and fixtures/good/gguf-mix):
    tar xf llama_cpp_python-0.3.36.tar.gz
    cd llama_cpp_python-0.3.36/vendor/llama.cpp
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=ON
    cmake --build build --target llama-quantize -j2
and point LLAMA_DIR at that vendor/llama.cpp (default $LLAMA_DIR).
EOF
    exit 1
}
[[ -x "$QUANTIZE" ]] || llama_missing "$QUANTIZE not found or not executable"
[[ -f "$CONVERTER" && -d "$LLAMA_DIR/gguf-py/gguf" ]] || llama_missing "$CONVERTER or $LLAMA_DIR/gguf-py missing"
quantize_runs() { [[ "$("$QUANTIZE" --help 2>&1 || true)" == *"allowed quantization types"* ]]; }
if ! quantize_runs; then
    # No rpath in this build: find the shared libraries next to the binary.
    export LD_LIBRARY_PATH="$LLAMA_DIR/build/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    quantize_runs || llama_missing "$QUANTIZE does not run (even with LD_LIBRARY_PATH=$LLAMA_DIR/build/bin)"
fi
# The converter must use the vendored gguf-py, not a gguf wheel installed in the venv.
GGUF_PY="$(PYTHONPATH="$LLAMA_DIR/gguf-py" "$PY" -c 'import gguf, os; print(os.path.dirname(gguf.__file__))' 2>/dev/null)" \
    || die "$PY cannot import gguf from $LLAMA_DIR/gguf-py"
[[ "$GGUF_PY" -ef "$LLAMA_DIR/gguf-py/gguf" ]] || die "PYTHONPATH=$LLAMA_DIR/gguf-py still imports gguf from $GGUF_PY"
"$PY" -c "import torch, numpy, safetensors, transformers, sentencepiece" 2>/dev/null \
    || die "$PY lacks torch/numpy/safetensors/transformers/sentencepiece (set PYTHON=... to the reference venv)"
[[ -x "$WP" ]] || die "$WP not found or not executable (cargo build --release, or set WP=...)"
[[ -f "$FIXTURE_TOK/tokenizer.model" ]] || die "no tokenizer fixture at $FIXTURE_TOK"

mkdir -p "$SCRATCH" "$LOGS"
TMPD="$(mktemp -d "$SCRATCH/.gguf.XXXXXX")"
OUT="$TMPD/out"    # each rep's output dir, emptied before every rep
KEEP="$TMPD/keep"  # last rep's outputs kept for cmp, deleted right after
mkdir -p "$KEEP"
trap 'rm -rf -- "$TMPD" "$REF_F16.tmp"' EXIT
rm -f -- "$LOGS"/*.log

# --- inputs -----------------------------------------------------------------------------------
if [[ ! -s "$IN_ST" ]]; then
    echo "generating $IN_ST ($LAYERS layers, hidden $HIDDEN, intermediate $INTERMEDIATE, vocab $VOCAB) ..." >&2
    "$PY" "$ROOT/benches/gen_llama.py" "$IN_ST" --layers "$LAYERS" --hidden "$HIDDEN" \
        --intermediate "$INTERMEDIATE" --vocab "$VOCAB" >&2
fi

# HF repo dir: the checkpoint hard-linked (not symlinked) as model.safetensors, a config.json
# derived from its header, and the fixture's tokenizer files. Files are only replaced when
# their content changes, so the cached reference F16 stays valid (see below).
mkdir -p "$HF"
if [[ ! "$IN_ST" -ef "$HF/model.safetensors" ]]; then
    rm -f -- "$HF/model.safetensors"
    ln "$IN_ST" "$HF/model.safetensors" 2>/dev/null || {
        note "hard link failed (other file system?): copying $IN_ST into $HF"
        cp "$IN_ST" "$HF/model.safetensors"
    }
fi
for f in "$FIXTURE_TOK"/*; do
    b="$(basename "$f")"
    case "$b" in config.json | *.safetensors | *.index.json | *.bin | *.md) continue ;; esac
    cmp -s "$f" "$HF/$b" 2>/dev/null || cp "$f" "$HF/$b"
done
"$PY" "$ROOT/benches/llama_config.py" "$HF/model.safetensors" "$HEADS" "$HF_CONFIG" >"$TMPD/config.json"
cmp -s "$TMPD/config.json" "$HF/config.json" 2>/dev/null || cp "$TMPD/config.json" "$HF/config.json"

size_of() { stat -c %s "$1"; }
in_size=$(size_of "$IN_ST")
# worst case at once: the reference F16 (~input), a kept F16 output, a rep's F16 output, a kept Q4_K_M
need=$(( in_size * 3 + in_size / 2 ))
free_b=$(( $(df -Pk "$SCRATCH" | awk 'NR==2 {print $4}') * 1024 ))
(( free_b > need )) || die "not enough free space in $SCRATCH: need ~$((need / 2**20)) MiB, have $((free_b / 2**20)) MiB"

warm() { cat "$@" > /dev/null; }

# --- measurement ------------------------------------------------------------------------------
rss_of() { awk -F': ' '/Maximum resident set size/ {printf "%.1f\n", $2 / 1024}' "$1"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
maxof() { printf '%s\n' "$@" | sort -g | tail -1; }
slug() { tr -cs 'A-Za-z0-9_.-' '_' <<<"$1" | sed 's/_*$//'; }

declare -A MEMO_WALL=() MEMO_RSS=()
M_WALL="" M_RSS="" M_OK=0

# measure KEY KEEP_SRC KEEP_DST cmd... : REPS runs, each in a fresh empty $OUT; sets M_WALL
# (median), M_RSS (max), M_OK. KEEP_SRC (a path under $OUT, or -) of the last rep is moved to
# KEEP_DST. A KEY measured before is not run again (its kept file must still exist).
measure() {
    local key=$1 keep_src=$2 keep_dst=$3; shift 3
    if [[ -n "${MEMO_WALL[$key]:-}" ]]; then
        M_WALL=${MEMO_WALL[$key]} M_RSS=${MEMO_RSS[$key]} M_OK=1
        [[ $M_WALL == FAILED ]] && M_OK=0
        echo "-- $key: measured before ($M_WALL s, $M_RSS MiB)" >&2
        return 0
    fi
    local -a walls=() rsss=()
    local r t0 t1 log; log="$LOGS/$(slug "$key").log"
    echo "-- $key ($REPS reps)" >&2
    for ((r = 1; r <= REPS; r++)); do
        rm -rf -- "$OUT"; mkdir -p "$OUT"; sync
        t0=$(date +%s%N)
        if ! /usr/bin/time -v -o "$TMPD/time.txt" "$@" >"$log" 2>&1; then
            echo "   FAILED (rep $r): $*" >&2
            tail -n 20 "$log" >&2
            rm -rf -- "$OUT"
            M_WALL=FAILED M_RSS=- M_OK=0
            MEMO_WALL[$key]=FAILED MEMO_RSS[$key]=-
            return 0
        fi
        t1=$(date +%s%N)
        walls+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", (b - a) / 1e9}')")
        rsss+=("$(rss_of "$TMPD/time.txt")")
        echo "   rep $r: ${walls[-1]} s, ${rsss[-1]} MiB" >&2
    done
    if [[ "$keep_src" != - ]]; then
        [[ -e "$keep_src" ]] || { echo "   no output $keep_src" >&2; rm -rf -- "$OUT"; M_WALL=FAILED M_RSS=- M_OK=0; return 0; }
        mv -f -- "$keep_src" "$keep_dst"
    fi
    rm -rf -- "$OUT"
    M_WALL=$(median "${walls[@]}") M_RSS=$(maxof "${rsss[@]}") M_OK=1
    MEMO_WALL[$key]=$M_WALL MEMO_RSS[$key]=$M_RSS
}

# Rows: section|step|wall|rss|reference wall (for "speedup", or -)|output column
declare -a ROWS_A=() ROWS_B=()
declare -A CPSYNC=()
declare -a NOTES=()  # printed under the table
row() {  # SECTION STEP REFWALL OUTPUT  (wall and rss from the last measure)
    local r="$2|$M_WALL|$M_RSS|$3|$4"
    if [[ $1 == A ]]; then ROWS_A+=("$r"); else ROWS_B+=("$r"); fi
}
skip_row() {  # SECTION STEP WHY
    local r="$2|skipped|-|-|$3"
    if [[ $1 == A ]]; then ROWS_A+=("$r"); else ROWS_B+=("$r"); fi
}
same() {  # A B -> identical / DIFFERS / missing
    if [[ ! -e "$1" || ! -e "$2" ]]; then echo "no file"
    elif cmp -s -- "$1" "$2"; then echo identical
    else echo DIFFERS; fi
}

# A weightport HF→GGUF output that is not a llama GGUF (e.g. general.architecture "generic" with
# the HF tensor names: the architecture mapping is not wired) is not comparable with the reference.
check_arch() {  # GGUF
    local arch
    arch=$("$WP" --json inspect "$1" 2>/dev/null | grep -o '"general.architecture":"[^"]*"' | cut -d'"' -f4 || true)
    if [[ "$arch" != llama ]]; then
        NOTES+=("weightport's HF → GGUF output $(basename "$1") has general.architecture \"${arch:-?}\", not \"llama\": weightport did not map the HF repo (tensor names, tokenizer, hparams), so its section B rows are not comparable with the reference yet.")
        note "${NOTES[-1]}"
    fi
}

# the reference converter; append the output path
CONV_CMD=(env PYTHONPATH="$LLAMA_DIR/gguf-py" "$PY" "$CONVERTER" "$HF" --outtype f16 --outfile)

CONV_KEY="convert_hf_to_gguf.py --outtype f16"
QKEY() { echo "llama-quantize $1 $THREADS"; }

# The reference F16 is valid while it is newer than every file of the HF dir.
ref_fresh() { [[ -s "$REF_F16" ]] && [[ -z "$(find "$HF" -newer "$REF_F16" -print -quit)" ]]; }

# --- section B, step 1: the reference converter (its output is section A's input) -------------
warm "$IN_ST"
conv_ok=1
if want B; then
    measure "$CONV_KEY" "$OUT/ref-f16.gguf" "$KEEP/ref-f16.gguf" "${CONV_CMD[@]}" "$OUT/ref-f16.gguf"
    row B "reference: $CONV_KEY" - -
    if [[ $M_OK == 1 ]]; then
        CONV_WALL=$M_WALL CONV_RSS=$M_RSS
        if ref_fresh && ! cmp -s "$KEEP/ref-f16.gguf" "$REF_F16"; then
            note "the converter's output differs from the cached $REF_F16 (not reproducible?); replacing it"
        fi
        mv -f -- "$KEEP/ref-f16.gguf" "$REF_F16"
    else
        conv_ok=0
    fi
elif ! ref_fresh; then
    echo "-- making the reference F16 GGUF (untimed): $REF_F16" >&2
    "${CONV_CMD[@]}" "$REF_F16.tmp" >"$LOGS/convert-ref-untimed.log" 2>&1 || { tail -n 20 "$LOGS/convert-ref-untimed.log" >&2; conv_ok=0; }
    [[ $conv_ok == 1 ]] && mv -f -- "$REF_F16.tmp" "$REF_F16"
else
    echo "-- reusing the cached reference F16 GGUF $REF_F16" >&2
fi
[[ $conv_ok == 1 && -s "$REF_F16" ]] || die "the reference converter failed (log in $LOGS); nothing else can run"
f16_size=$(size_of "$REF_F16")
CPS_KEY="cp + sync of the F16 GGUF ($(( f16_size / 2**20 )) MiB)"

# --- section A: F16 GGUF → quantized ------------------------------------------------------------
if want A; then
    warm "$REF_F16"
    measure "cp (F16 GGUF)" - - cp "$REF_F16" "$OUT/copy.gguf"
    row A "cp of the F16 input ($(( f16_size / 2**20 )) MiB)" - -
    # shellcheck disable=SC2016  # $1 and $2 are sh -c's arguments
    measure "$CPS_KEY" - - sh -c 'cp "$1" "$2" && sync' sh "$REF_F16" "$OUT/copy.gguf"
    row A "cp + sync of the F16 input" - -
    CPSYNC[A]=$M_WALL
    for t in $QUANTS; do
        warm "$REF_F16"
        measure "$(QKEY "$t")" "$OUT/ref.gguf" "$KEEP/ref-$t.gguf" "$QUANTIZE" "$REF_F16" "$OUT/ref.gguf" "$t" "$THREADS"
        row A "llama-quantize IN OUT $t $THREADS" - -
        qwall=$M_WALL; [[ $M_OK == 1 ]] || qwall=-
        measure "weightport --quant $t" "$OUT/wp.gguf" "$KEEP/wp-$t.gguf" \
            "$WP" --threads "$THREADS" convert "$REF_F16" -o "$OUT/wp.gguf" --quant "$t" --force
        if [[ $M_OK == 1 ]]; then
            row A "weightport --threads $THREADS convert --quant $t" "$qwall" "$(same "$KEEP/wp-$t.gguf" "$KEEP/ref-$t.gguf")"
        else
            row A "weightport --threads $THREADS convert --quant $t" - -
        fi
        rm -f -- "$KEEP/wp-$t.gguf"
        # section B compares against the Q4_K_M reference as well
        if [[ $t != Q4_K_M ]] || ! want B; then rm -f -- "$KEEP/ref-$t.gguf"; fi
    done
fi

# --- section B, the rest: quantize the reference, weightport's one pass, cp + sync ---------------
if want B; then
    warm "$REF_F16"
    measure "$(QKEY Q4_K_M)" "$OUT/ref.gguf" "$KEEP/ref-Q4_K_M.gguf" "$QUANTIZE" "$REF_F16" "$OUT/ref.gguf" Q4_K_M "$THREADS"
    row B "reference: llama-quantize REF_F16 OUT Q4_K_M $THREADS" - -
    TWO_WALL=-
    if [[ $M_OK == 1 ]]; then
        TWO_WALL=$(awk -v a="$CONV_WALL" -v b="$M_WALL" 'BEGIN {printf "%.3f", a + b}')
        M_WALL=$TWO_WALL M_RSS=$(maxof "$CONV_RSS" "$M_RSS")
        row B "reference: convert + quantize (sum; RSS max)" - -
    fi

    if "$WP" convert "$HF" -o "$TMPD/probe.gguf" --dry-run >"$LOGS/weightport-hf-dry-run.log" 2>&1; then
        warm "$IN_ST"
        measure "weightport HF→GGUF --dtype f16" "$OUT/wp.gguf" "$KEEP/wp-f16.gguf" \
            "$WP" --threads "$THREADS" convert "$HF" -o "$OUT/wp.gguf" --dtype f16 --force
        if [[ $M_OK == 1 ]]; then
            row B "weightport convert DIR --dtype f16" "$CONV_WALL" "$(same "$KEEP/wp-f16.gguf" "$REF_F16")"
            check_arch "$KEEP/wp-f16.gguf"
        else
            row B "weightport convert DIR --dtype f16" - -
        fi
        rm -f -- "$KEEP/wp-f16.gguf"
        warm "$IN_ST"
        measure "weightport HF→GGUF --quant Q4_K_M" "$OUT/wp.gguf" "$KEEP/wp-q4km.gguf" \
            "$WP" --threads "$THREADS" convert "$HF" -o "$OUT/wp.gguf" --dtype f16 --quant Q4_K_M --force
        if [[ $M_OK == 1 ]]; then
            row B "weightport convert DIR --quant Q4_K_M" "$TWO_WALL" "$(same "$KEEP/wp-q4km.gguf" "$KEEP/ref-Q4_K_M.gguf")"
            check_arch "$KEEP/wp-q4km.gguf"
        else
            row B "weightport convert DIR --quant Q4_K_M" - -
        fi
        rm -f -- "$KEEP/wp-q4km.gguf"
    else
        note "weightport cannot convert an HF repo to GGUF yet ($WP convert $HF -o x.gguf --dry-run failed:"
        sed 's/^/    /' "$LOGS/weightport-hf-dry-run.log" | tail -n 5 >&2
        note "the weightport rows of section B are skipped)"
        skip_row B "weightport convert DIR --dtype f16" "dry-run failed"
        skip_row B "weightport convert DIR --quant Q4_K_M" "dry-run failed"
    fi
    rm -f -- "$KEEP/ref-Q4_K_M.gguf"

    warm "$REF_F16"
    # shellcheck disable=SC2016  # $1 and $2 are sh -c's arguments
    measure "$CPS_KEY" - - sh -c 'cp "$1" "$2" && sync' sh "$REF_F16" "$OUT/copy.gguf"
    row B "cp + sync of the F16 output ($(( f16_size / 2**20 )) MiB)" - -
    CPSYNC[B]=$M_WALL
fi

# --- report -----------------------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-"}'; }
print_rows() {  # SECTION-LABEL SECTION rows...
    local label=$1 sec=$2 r s w p ref o; shift 2
    for r in "$@"; do
        IFS='|' read -r s w p ref o <<<"$r"
        local rc=- sp=-
        [[ $w =~ ^[0-9.]+$ ]] && rc=$(ratio "$w" "${CPSYNC[$sec]:-}")
        [[ $w =~ ^[0-9.]+$ && $ref =~ ^[0-9.]+$ ]] && sp="$(ratio "$ref" "$w")x"
        printf '| %-24s | %-50s | %9s | %9s | %9s | %12s | %-14s |\n' "$label" "$s" "$w" "$rc" "$sp" "$p" "$o"
    done
}
{
    echo "# weightport GGUF bench $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo "host: $(uname -srm), $(nproc) cpu, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 2^20}' /proc/meminfo) RAM; scratch $SCRATCH ($(df -PT "$SCRATCH" | awk 'NR==2 {print $2}'))"
    echo "weightport: $("$WP" --version 2>/dev/null || echo "$WP")"
    echo "llama.cpp: $LLAMA_DIR ($(git -C "$LLAMA_DIR" rev-parse --short HEAD 2>/dev/null || echo 'no git')); python: $("$PY" -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)' 2>/dev/null)"
    echo "model: $IN_ST ($(( in_size / 2**20 )) MiB; $LAYERS layers, hidden $HIDDEN, intermediate $INTERMEDIATE, vocab $VOCAB, heads $HEADS); HF dir $HF (config: $HF_CONFIG)"
    echo "reps: $REPS (median wall; peak RSS = max over reps); threads $THREADS; logs of the last rep of each step in $LOGS"
    echo
    printf '| %-24s | %-50s | %9s | %9s | %9s | %12s | %-14s |\n' section step "wall s" "/ cp+sync" speedup "peak RSS MiB" output
    printf '|%s|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..26})" "$(printf -- '-%.0s' {1..52})" "$(printf -- '-%.0s' {1..11})" \
        "$(printf -- '-%.0s' {1..11})" "$(printf -- '-%.0s' {1..11})" "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..16})"
    want A && print_rows "A: F16 GGUF -> quant" A "${ROWS_A[@]}"
    want B && print_rows "B: HF repo -> GGUF" B "${ROWS_B[@]}"
    if (( ${#NOTES[@]} )); then
        echo
        printf -- '- NOTE: %s\n' "${NOTES[@]}"
    fi
    echo
    echo "Targets: A: weightport ≥ 1.5× faster than llama-quantize per type at equal threads, peak RSS ≤ 256 MiB, output identical."
    echo "         B: weightport F16 ≤ 1.5× cp + sync ('/ cp+sync' column); HF → Q4_K_M in one pass ≥ 3× faster than convert + quantize; RSS ≤ 256 MiB."
} | tee "$SCRATCH/results-gguf.md"
echo "(saved to $SCRATCH/results-gguf.md)" >&2
