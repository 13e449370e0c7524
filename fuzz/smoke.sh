#!/usr/bin/env bash
# CI's fuzz smoke: builds every fuzz target with libFuzzer on nightly in one cargo invocation (the
# flags `cargo fuzz build -s none` uses, so cargo-fuzz need not be installed) and runs each for
# SECS seconds (default 10), JOBS at a time (default: the CPU count), from its committed,
# minimized corpus (fuzz/CRATE/corpus/TARGET). New inputs go to a temp dir,
# never into the committed corpus. A crash fails the run and leaves the input in
# $TMPDIR/weightport-fuzz-smoke/artifacts. The long campaigns are run by hand (fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")"
SECS="${SECS:-10}"
WORK="${TMPDIR:-/tmp}/weightport-fuzz-smoke"
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz smoke: FAILED, no nightly toolchain (rustup toolchain install nightly)" >&2
    exit 1
fi
TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
export CARGO_TARGET_DIR="$WORK/target"
# A smoke run is seconds long: build time matters more than speed (no debug info, -O1).
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_OPT_LEVEL=1
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
mkdir -p "$WORK/artifacts"
# Every target of the five crates (one workspace, fuzz/Cargo.toml) in one cargo invocation.
cargo +nightly build --quiet --release --bins --target "$TRIPLE"
# `--build-only`: .ci/run builds the targets in the background while other steps run.
[ "${1:-}" = --build-only ] && exit 0

# Runs target $2 of crate $1 for SECS seconds; its verdict goes to $WORK/$2.verdict.
smoke_one() {
    local crate="$1" t="$2" new="$WORK/new/$2" dict=() start=$SECONDS
    rm -rf "$new"; mkdir -p "$new"
    [[ -f "$crate/$t.dict" ]] && dict=(-dict="$crate/$t.dict")
    if "$CARGO_TARGET_DIR/$TRIPLE/release/$t" "$new" "$crate/corpus/$t" "${dict[@]}" \
        -max_total_time="$SECS" -print_final_stats=1 -detect_leaks=0 -rss_limit_mb=3072 -timeout=30 \
        -artifact_prefix="$WORK/artifacts/$t-" >"$WORK/$t.log" 2>&1; then
        echo "fuzz smoke: $crate/$t ok ($(grep -o 'stat::number_of_executed_units: [0-9]*' "$WORK/$t.log" | awk '{print $2}') runs, $((SECONDS - start)) s)" >"$WORK/$t.verdict"
    else
        { echo "fuzz smoke: $crate/$t FAILED:"; tail -40 "$WORK/$t.log"; } >"$WORK/$t.verdict"
        return 1
    fi
}

# JOBS targets at a time (default: one per CPU; libFuzzer runs one thread), each for SECS.
JOBS="${JOBS:-$(nproc)}"
targets=()
for src in */fuzz_targets/*.rs; do
    targets+=("${src%%/*}:$(basename "$src" .rs)")
done
status=0
running=0
for ct in "${targets[@]}"; do
    if (( running >= JOBS )); then
        wait -n || status=1
        running=$((running - 1))
    fi
    smoke_one "${ct%%:*}" "${ct#*:}" &
    running=$((running + 1))
done
while (( running > 0 )); do
    wait -n || status=1
    running=$((running - 1))
done
for ct in "${targets[@]}"; do
    cat "$WORK/${ct#*:}.verdict"
done
exit "$status"
