#!/usr/bin/env bash
# weightport I/O harness (issue 35): what each conversion path does to its output files, and its
# wall time against a durable copy of that output.
#
#   bash benches/io.sh            # build inputs if missing, count syscalls, time, print tables
#   bash benches/io.sh --clean    # delete this script's outputs (inputs are kept)
#
# Paths (2 threads): HF release -> F16 GGUF (architecture plan), the same safetensors file ->
# GGUF (generic plan), reshard into 500 MB shards, .bin -> safetensors, --dtype f32, F16 GGUF ->
# Q8_0 GGUF, plan + 2 units + finish (HF -> F16 GGUF), a job of one read (repo + F16 GGUF), and
# HF -> Q4_K_M in one pass.
#
# 1. `strace -f -c` of each path: pwrite64, openat, sync_file_range, madvise, fsync calls (of
#    every process: openat includes the shell's and the inputs'), with the `io` object of its
#    --json (weightport's own count of writes, opens and syncs of its output files).
# 2. Paired timing: the path and `cp -r REF COPY && sync` of an output of the same bytes, in turn
#    (A B A B ..., REPS pairs after one warm-up pair), wall and CPU seconds from GNU time; the
#    ratio A/B is taken pair by pair and its median printed, so a ratio holds when the shared
#    machine's speed drifts. Outputs are removed inside each timed command, so both sides pay
#    an unlink. With YARD=dd the other side is `dd if=INPUT of=COPY bs=16M conv=fsync` of the
#    path's input file instead: a durable copy that syncs only that file (issue 34's physical
#    limit for a lossless job; `sync` flushes the whole filesystem and drifts with the machine).
#
# Inputs: run.sh's $SCRATCH/llama-${LAYERS}l.safetensors (benches/gen_llama.py), gguf.sh's HF
# directory layout ($SCRATCH/hf-${LAYERS}l/llama: the file hard-linked, a config.json from
# benches/llama_config.py, the tokenizer of fixtures/good/arch/llama/) and, for the .bin path,
# $SCRATCH/llama.bin (benches/py_formats.py make-bin; skipped without torch).
#
# Environment (defaults): SCRATCH=/tmp/wp-bench WP=<repo>/target/release/weightport
# PYTHON=python3 REPS=5 LAYERS=5 PATHS="f16 generic reshard bin f32 g2g units job q4km"
# STRACE=1 TIMING=1 YARD=cp (or dd). WEIGHTPORT_KERNEL_COPY=0 turns the kernel copies of
# identity ranges off (the write path before issue 34), for before/after pairs. The machine is shared: quote the medians, the load printed with each row,
# and the syscall counts (deterministic) before the times.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH="${SCRATCH:-/tmp/wp-bench}"
WP="${WP:-$ROOT/target/release/weightport}"
PY="${PYTHON:-python3}"
REPS="${REPS:-5}"
LAYERS="${LAYERS:-5}"
PATHS="${PATHS:-f16 generic reshard bin f32 g2g units job q4km}"
YARD="${YARD:-cp}"
OUT="$SCRATCH/io-out"

die() { echo "io.sh: $*" >&2; exit 1; }
if [[ "${1:-}" == "--clean" ]]; then
    rm -rf -- "$OUT"
    echo "removed $OUT"
    exit 0
fi
[[ -x "$WP" ]] || die "$WP not found (cargo build --release, or set WP=...)"
/usr/bin/time -f %e true >/dev/null 2>&1 || die "GNU time (/usr/bin/time) is required"

ST="$SCRATCH/llama-${LAYERS}l.safetensors"
HF="$SCRATCH/hf-${LAYERS}l/llama"
BIN="$SCRATCH/llama.bin"
mkdir -p "$OUT" "$HF"
[[ -s "$ST" ]] || "$PY" "$ROOT/benches/gen_llama.py" "$ST" --layers "$LAYERS"
[[ "$HF/model.safetensors" -ef "$ST" ]] || ln -f "$ST" "$HF/model.safetensors"
for f in tokenizer.model tokenizer_config.json special_tokens_map.json generation_config.json; do
    cp "$ROOT/fixtures/good/arch/llama/$f" "$HF/$f"
done
"$PY" "$ROOT/benches/llama_config.py" "$ST" 32 legacy >"$HF/config.json"
if [[ " $PATHS " == *" bin "* && ! -s "$BIN" ]]; then
    "$PY" "$ROOT/benches/py_formats.py" make-bin "$ST" "$BIN" 2>/dev/null \
        || { echo "NOTE: no torch: the .bin path is skipped" >&2; PATHS="${PATHS/bin/}"; }
fi

# The command of path $1 writing tag $2 (outputs removed first), and the reference output a
# durable copy of which it is timed against.
cmd() {
    local t="$2" w="$WP --threads 2"
    case "$1" in
        f16) echo "rm -f $OUT/f16-$t.gguf; $w convert $HF -o $OUT/f16-$t.gguf --dtype f16" ;;
        generic) echo "rm -f $OUT/gen-$t.gguf; $w convert $ST -o $OUT/gen-$t.gguf" ;;
        reshard) echo "rm -rf $OUT/rs-$t; $w convert $ST -o $OUT/rs-$t --shard-size 500MB" ;;
        bin) echo "rm -f $OUT/bin-$t.safetensors; $w convert $BIN -o $OUT/bin-$t.safetensors" ;;
        f32) echo "rm -f $OUT/f32-$t.safetensors; $w convert $ST -o $OUT/f32-$t.safetensors --dtype f32" ;;
        g2g) echo "rm -f $OUT/q8-$t.gguf; $w convert $OUT/ref-f16.gguf -o $OUT/q8-$t.gguf --quant Q8_0" ;;
        units) echo "rm -rf $OUT/u-$t.gguf $OUT/u-$t.plan.json; $w plan $HF -o $OUT/u-$t.gguf --dtype f16 --units 2 --plan $OUT/u-$t.plan.json >/dev/null && { $WP --threads 1 unit $OUT/u-$t.plan.json --index 0 >/dev/null & $WP --threads 1 unit $OUT/u-$t.plan.json --index 1 >/dev/null; wait; } && $w finish $OUT/u-$t.plan.json" ;;
        job) echo "rm -rf $OUT/jr-$t $OUT/jg-$t.gguf; $w convert $HF -o $OUT/jr-$t:shard_size=500MB -o $OUT/jg-$t.gguf:outtype=f16" ;;
        q4km) echo "rm -f $OUT/q4-$t.gguf; $w convert $HF -o $OUT/q4-$t.gguf --dtype f16 --quant Q4_K_M" ;;
    esac
}
ref() {
    case "$1" in
        f16 | generic | units) echo ref-f16.gguf ;; reshard) echo ref-repo ;; bin) echo ref-bin.safetensors ;;
        f32) echo ref-f32.safetensors ;; g2g) echo ref-q8.gguf ;; job) echo ref-job ;; q4km) echo ref-q4.gguf ;;
    esac
}

# The input file of path $1: what `dd` copies as the physical limit (YARD=dd).
input() {
    case "$1" in
        bin) echo "$BIN" ;; g2g) echo "$OUT/ref-f16.gguf" ;; *) echo "$ST" ;;
    esac
}

# Reference outputs (made once by weightport itself: a copy only needs the bytes' size).
[[ -s "$OUT/ref-f16.gguf" ]] || $WP convert "$HF" -o "$OUT/ref-f16.gguf" --dtype f16 >/dev/null
for p in $PATHS; do
    r="$OUT/$(ref "$p")"
    [[ -e "$r" ]] && continue
    case "$p" in
        job) mkdir -p "$r" && $WP convert "$ST" -o "$r/repo" --shard-size 500MB >/dev/null && cp "$OUT/ref-f16.gguf" "$r/" ;;
        *) sh -c "$(cmd "$p" ref)" >/dev/null && mv "$(ls -d "$OUT"/*-ref* | head -1)" "$r" ;;
    esac
done

med() { sort -g | awk '{a[NR]=$1} END {printf "%.2f", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

if [[ "${STRACE:-1}" == 1 ]] && command -v strace >/dev/null; then
    echo "| path | pwrite64 | copy_file_range | openat | sync_file_range | madvise | fsync | --json io |"
    echo "|---|---:|---:|---:|---:|---:|---:|---|"
    for p in $PATHS; do
        [[ "$p" == units ]] && continue   # several processes: see their --json io
        c="$(cmd "$p" st)"
        strace -f -c -o "$OUT/strace-$p.txt" sh -c "${c/convert /--json convert } >$OUT/io-$p.json 2>/dev/null"
        n() { awk -v s="$1" '$NF == s {print $4}' "$OUT/strace-$p.txt" | head -1; }
        io="$("$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['io'])" "$OUT/io-$p.json")"
        echo "| $p | $(n pwrite64) | $(n copy_file_range) | $(n openat) | $(n sync_file_range) | $(n madvise) | $(n fsync) | $io |"
        sh -c "$(cmd "$p" st | cut -d';' -f1)"
    done
    echo
fi

if [[ "${TIMING:-1}" == 1 ]]; then
    echo "| path | wall s (median) | copy wall s | wall / copy (median of pairs) | cpu / copy | peak RSS MiB | load |"
    echo "|---|---:|---:|---:|---:|---:|---:|---|"
    for p in $PATHS; do
        r="$(ref "$p")"
        case "$YARD" in
            dd) copy="rm -f $OUT/copy-dd; dd if=$(input "$p") of=$OUT/copy-dd bs=16M conv=fsync status=none" ;;
            *) copy="rm -rf $OUT/copy-$r; cp -r $OUT/$r $OUT/copy-$r && sync" ;;
        esac
        : >"$OUT/pairs-$p"
        for i in $(seq 0 "$REPS"); do
            a=$( { /usr/bin/time -f "%e %U %S %M" sh -c "$(cmd "$p" t) >/dev/null"; } 2>&1 | tail -1)
            b=$( { /usr/bin/time -f "%e %U %S %M" sh -c "$copy"; } 2>&1 | tail -1)
            (( i == 0 )) || echo "$a $b" >>"$OUT/pairs-$p"
        done
        col() { awk "{print $1}" "$OUT/pairs-$p" | med; }
        echo "| $p | $(col '$1') | $(col '$5') | $(col '$1/$5') | $(col '($2+$3)/($6+$7+0.001)') | $(awk '{printf "%.1f\n", $4/1024}' "$OUT/pairs-$p" | sort -g | tail -1) | $(cut -d' ' -f1-3 /proc/loadavg) |"
        rm -rf "$OUT"/*-t "$OUT"/*-t.* "$OUT"/copy-*
    done
fi
