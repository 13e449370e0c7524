#!/usr/bin/env bash
# Crash loop and disk-full runs of the release binary (issue 19, item 3). Run by hand:
#
#   bash benches/crash_loop.sh            # KILLS=50 FILLS=20 JOBS="bin gguf" SCRATCH=/tmp/wp-crash WP=target/release/weightport
#
# Two ~470 MB Llama-shaped models, A and B (benches/gen_llama.py seeds 0 and 1: 2 layers, hidden
# 2048, vocab 32000, F16), each as a torch.save `.bin` and as an HF release (model.safetensors,
# config.json from benches/llama_config.py, the tokenizer of fixtures/good/arch/llama). Jobs:
#   bin   X.bin  -> repo/       --shard-size 100MB   (5 shards + index)
#   gguf  relX/  -> out.gguf    --quant Q4_K_M       (HF release -> GGUF in one pass)
# Each job first runs uninterrupted for A and B to get the reference manifests (sha256 of every
# visible file). Then:
#   crash loop: KILLS times per job, alternating A and B over the previous round's output, the
#     job is SIGKILLed at a uniformly random point of its measured duration. The visible files
#     must then be exactly A's or B's manifest (never partial or mixed), except when a commit
#     journal says a repo commit was cut, which the next run must finish. The next run (same
#     input, --force) must succeed, leave no temp file, and give the reference manifest.
#   disk full: FILLS times per job, on a tmpfs of ~2.3x the output (mounted here, or in a user
#     namespace when not root; skipped with the reason printed when neither works), another
#     process fills the filesystem at a random point of the run. The run either succeeds with
#     the new manifest or fails with exit 1 naming "No space left", leaving the old output
#     unchanged and no temp file; after the filler is removed the next run succeeds.
# At the end every input file must be byte-identical to what it was. Needs torch (for the
# `.bin`), numpy, safetensors: PY defaults to ~/ref/bin/python.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WP="${WP:-$ROOT/target/release/weightport}"
PY="${PY:-$HOME/ref/bin/python}"
SCRATCH="${SCRATCH:-/tmp/wp-crash}"
KILLS="${KILLS:-50}"
FILLS="${FILLS:-20}"
JOBS="${JOBS:-bin gguf}"
LOG="$SCRATCH/rounds.tsv"
die() { echo "crash_loop: $*" >&2; exit 2; }
[[ -x "$WP" ]] || die "$WP not found (cargo build --release)"
"$PY" -c 'import torch, numpy, safetensors' 2>/dev/null || die "$PY lacks torch/numpy/safetensors"
mkdir -p "$SCRATCH"
: >"$LOG"

make_inputs() {
    local x seed
    for x in A B; do
        seed=$([[ $x == A ]] && echo 0 || echo 1)
        [[ -s "$SCRATCH/$x.safetensors" ]] || "$PY" "$ROOT/benches/gen_llama.py" "$SCRATCH/$x.safetensors" \
            --layers 2 --hidden 2048 --intermediate 5632 --vocab 32000 --seed "$seed" >/dev/null
        [[ -s "$SCRATCH/$x.bin" ]] || "$PY" "$ROOT/benches/py_formats.py" make-bin "$SCRATCH/$x.safetensors" "$SCRATCH/$x.bin"
        mkdir -p "$SCRATCH/rel$x"
        ln -f "$SCRATCH/$x.safetensors" "$SCRATCH/rel$x/model.safetensors"
        cp "$ROOT"/fixtures/good/arch/llama/{tokenizer.model,tokenizer_config.json,special_tokens_map.json,generation_config.json} "$SCRATCH/rel$x/"
        "$PY" "$ROOT/benches/llama_config.py" "$SCRATCH/rel$x/model.safetensors" 16 v5 >"$SCRATCH/rel$x/config.json"
    done
    (cd "$SCRATCH" && sha256sum A.bin B.bin relA/* relB/*) >"$SCRATCH/inputs.sha256"
}

# job NAME X OUTDIR: the command line of job NAME on model X writing into OUTDIR.
job() {
    case "$1" in
        bin) echo "$WP" convert "$SCRATCH/$2.bin" -o "$3/repo" --shard-size 100MB --force ;;
        gguf) echo "$WP" convert "$SCRATCH/rel$2" -o "$3/out.gguf" --quant Q4_K_M --force ;;
    esac
}

# Visible files of an output dir with their sha256 (temps, locks and journals are hidden files).
manifest() { (cd "$1" && find . -type f ! -name '.*' | LC_ALL=C sort | xargs -r sha256sum); }
hidden() { find "$1" -name '.*' -type f | grep -v -e '\.wp-lock$' -e '/\.weightport\.lock$' || true; }
journal() { find "$1" -name '.weightport-commit.*' | head -1; }

references() {  # job: runs it on A and B uninterrupted; records manifests and the duration
    local j=$1 x t0 t1
    for x in A B; do
        rm -rf "$SCRATCH/ref-$j-$x"; mkdir -p "$SCRATCH/ref-$j-$x"
        t0=$(date +%s%N)
        $(job "$j" "$x" "$SCRATCH/ref-$j-$x") >/dev/null
        t1=$(date +%s%N)
        manifest "$SCRATCH/ref-$j-$x" >"$SCRATCH/ref-$j-$x.manifest"
        echo $(((t1 - t0) / 1000)) >"$SCRATCH/ref-$j-$x.us"
    done
    cmp -s "$SCRATCH/ref-$j-A.manifest" "$SCRATCH/ref-$j-B.manifest" && die "A and B give the same $j output"
    return 0
}

state_of() {  # dir job -> A | B | none | other
    local m; m=$(manifest "$1")
    if [[ -z "$m" ]]; then echo none
    elif [[ "$m" == "$(cat "$SCRATCH/ref-$2-A.manifest")" ]]; then echo A
    elif [[ "$m" == "$(cat "$SCRATCH/ref-$2-B.manifest")" ]]; then echo B
    else echo other; fi
}

crash_loop() {
    local j=$1 out="$SCRATCH/crash-$j" i x prev=none us delay pid st jr failures=0
    rm -rf "$out"; mkdir -p "$out"
    for ((i = 1; i <= KILLS; i++)); do
        x=$([[ $((i % 2)) == 1 ]] && echo A || echo B)
        us=$(cat "$SCRATCH/ref-$j-$x.us")
        delay=$(( (RANDOM * 32768 + RANDOM) % (us * 11 / 10 + 1) ))
        $(job "$j" "$x" "$out") >/dev/null 2>&1 & pid=$!
        sleep "$(printf '%d.%06d' $((delay / 1000000)) $((delay % 1000000)))"
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        st=$(state_of "$out" "$j"); jr=$(journal "$out")
        if [[ -z "$jr" && "$st" != "$prev" && "$st" != "$x" ]]; then
            echo "FAIL $j kill $i: visible output is '$st' (was $prev, writing $x)"; failures=$((failures + 1))
        fi
        printf 'kill\t%s\t%d\t%s\tdelay_us=%d\tstate=%s\tjournal=%s\ttemps=%d\n' "$j" "$i" "$x" "$delay" "$st" \
            "${jr:+yes}" "$(hidden "$out" | wc -l)" >>"$LOG"
        if ! $(job "$j" "$x" "$out") >/dev/null; then echo "FAIL $j kill $i: the next run failed"; failures=$((failures + 1)); fi
        st=$(state_of "$out" "$j")
        [[ "$st" == "$x" ]] || { echo "FAIL $j kill $i: after the next run the output is '$st'"; failures=$((failures + 1)); }
        [[ -z "$(hidden "$out")" ]] || { echo "FAIL $j kill $i: temps left: $(hidden "$out")"; failures=$((failures + 1)); }
        prev=$x
    done
    echo "crash loop $j: $KILLS SIGKILLs, $failures failures ($(grep -c "^kill	$j	.*state=none" "$LOG") before anything was visible, $(grep -c "^kill	$j	.*journal=yes" "$LOG") inside a repo commit)"
    return "$failures"
}

mount_tmpfs() {  # dir size -> mounts a tmpfs (root) or prints why not
    mkdir -p "$1"
    if mount -t tmpfs -o "size=$2" tmpfs "$1" 2>/dev/null; then return 0; fi
    echo "disk full: SKIPPED, cannot mount a tmpfs at $1 (not root: $(id -un))"
    return 1
}

disk_full() {
    local j=$1 mnt="$SCRATCH/full-$j" i size us delay pid rc err st failures=0 hit=0
    size=$(du -sb "$SCRATCH/ref-$j-A" | cut -f1)
    size=$((size * 23 / 10 + 8 * 1048576))
    mount_tmpfs "$mnt" "$size" || return 0
    for ((i = 1; i <= FILLS; i++)); do
        rm -rf "$mnt/out"; mkdir -p "$mnt/out"
        $(job "$j" B "$mnt/out") >/dev/null  # the old output
        us=$(cat "$SCRATCH/ref-$j-A.us")
        delay=$(( (RANDOM * 32768 + RANDOM) % (us + 1) ))
        $(job "$j" A "$mnt/out") >/dev/null 2>"$SCRATCH/err.txt" & pid=$!
        sleep "$(printf '%d.%06d' $((delay / 1000000)) $((delay % 1000000)))"
        dd if=/dev/zero of="$mnt/filler" bs=1M 2>/dev/null || true
        rc=0; wait "$pid" || rc=$?
        err=$(tr '\n' ' ' <"$SCRATCH/err.txt"); st=$(state_of "$mnt/out" "$j")
        if [[ $rc == 0 ]]; then
            [[ "$st" == A ]] || { echo "FAIL $j fill $i: exit 0 but output '$st'"; failures=$((failures + 1)); }
        else
            hit=$((hit + 1))
            [[ $rc == 1 && "$err" == *"No space left"* ]] || { echo "FAIL $j fill $i: exit $rc: $err"; failures=$((failures + 1)); }
            [[ "$st" == B ]] || { echo "FAIL $j fill $i: failed run left output '$st'"; failures=$((failures + 1)); }
        fi
        [[ -z "$(hidden "$mnt/out")" ]] || { echo "FAIL $j fill $i: temps left: $(hidden "$mnt/out")"; failures=$((failures + 1)); }
        printf 'fill\t%s\t%d\tdelay_us=%d\texit=%d\tstate=%s\t%s\n' "$j" "$i" "$delay" "$rc" "$st" "$err" >>"$LOG"
        rm -f "$mnt/filler"
        $(job "$j" A "$mnt/out") >/dev/null || { echo "FAIL $j fill $i: the run after freeing space failed"; failures=$((failures + 1)); }
        [[ "$(state_of "$mnt/out" "$j")" == A ]] || { echo "FAIL $j fill $i: run after freeing space"; failures=$((failures + 1)); }
    done
    umount "$mnt"
    echo "disk full $j: $FILLS fills, $hit runs hit ENOSPC, $failures failures"
    return "$failures"
}

make_inputs
total=0
for j in $JOBS; do
    references "$j"
    echo "$j: uninterrupted run $(cat "$SCRATCH/ref-$j-A.us") us"
    crash_loop "$j" || total=$((total + $?))
    disk_full "$j" || total=$((total + $?))
done
(cd "$SCRATCH" && sha256sum -c --quiet inputs.sha256) || { echo "FAIL: an input changed"; total=$((total + 1)); }
echo "crash_loop: $total failures (rounds in $LOG)"
[[ $total == 0 ]]
