# Timing harness shared by the benchmark scripts (sourced, never run). Callers set, before
# calling `measure`: REPS, OUT (a scratch directory made empty before every rep), LOGS (one
# log per step), TMPD (the script's private temp directory) and define `die`.
#
#   measure KEY KEEP_SRC KEEP_DST cmd...   REPS runs of cmd under GNU time, each with a fresh
#       empty $OUT and a `sync` outside the timed part; sets M_WALL (median wall, s), M_RSS
#       (max peak RSS over the reps, MiB) and M_REPS (every rep's wall); moves KEEP_SRC to
#       KEEP_DST afterwards unless KEEP_SRC is `-`.
#   timed cmd...                          one run of cmd with a fresh empty $OUT and a `sync`
#       outside the timed part; prints its wall seconds (for runs paired in turn).
#   row STEP REFWALL OUTPUT               appends the last measure to ROWS.
#   print_rows CPSYNC                     the ROWS table in Markdown: wall, / cp+sync, speedup
#       (REFWALL / wall), peak RSS, output, reps.

warm() { cat "$@" > /dev/null; }
rss_of() { awk -F': ' '/Maximum resident set size/ {printf "%.1f\n", $2 / 1024}' "$1"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
maxof() { printf '%s\n' "$@" | sort -g | tail -1; }
slug() { tr -cs 'A-Za-z0-9_.-' '_' <<<"$1" | sed 's/_*$//'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-"}'; }
same() { if cmp -s -- "$1" "$2"; then echo identical; else echo DIFFERS; fi; }

M_WALL="" M_RSS="" M_REPS=""
declare -a ROWS=()

measure() {
    local key=$1 keep_src=$2 keep_dst=$3; shift 3
    local -a walls=() rsss=()
    local r t0 t1 log; log="$LOGS/$(slug "$key").log"
    echo "-- $key ($REPS reps)" >&2
    for ((r = 1; r <= REPS; r++)); do
        rm -rf -- "$OUT"; mkdir -p "$OUT"; sync
        t0=$(date +%s%N)
        /usr/bin/time -v -o "$TMPD/time.txt" "$@" >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "$key failed"; }
        t1=$(date +%s%N)
        walls+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", (b - a) / 1e9}')")
        rsss+=("$(rss_of "$TMPD/time.txt")")
        echo "   rep $r: ${walls[-1]} s, ${rsss[-1]} MiB" >&2
    done
    [[ "$keep_src" == - ]] || mv -f -- "$keep_src" "$keep_dst"
    rm -rf -- "$OUT"
    M_WALL=$(median "${walls[@]}") M_RSS=$(maxof "${rsss[@]}") M_REPS="${walls[*]}"
}

timed() {
    local t0 t1 log="$LOGS/timed.log"
    rm -rf -- "$OUT"; mkdir -p "$OUT"; sync
    t0=$(date +%s%N)
    "$@" >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "$* failed"; }
    t1=$(date +%s%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", (b - a) / 1e9}'
}

row() { ROWS+=("$1|$M_WALL|$M_RSS|$2|$3|$M_REPS"); }

print_rows() {
    local cpsync=$1 r s w p ref o reps sp
    printf '| %-52s | %9s | %9s | %9s | %12s | %-12s | %-26s |\n' step "wall s" "/ cp+sync" speedup "peak RSS MiB" output "reps (s)"
    printf '|---|---:|---:|---:|---:|---|---|\n'
    for r in "${ROWS[@]}"; do
        IFS='|' read -r s w p ref o reps <<<"$r"
        sp=-; [[ $ref =~ ^[0-9.]+$ ]] && sp="$(ratio "$ref" "$w")x"
        printf '| %-52s | %9s | %9s | %9s | %12s | %-12s | %-26s |\n' "$s" "$w" "$(ratio "$w" "$cpsync")" "$sp" "$p" "$o" "$reps"
    done
}
