#!/usr/bin/env bash
# CI's fuzz smoke: builds every fuzz target with libFuzzer on nightly (the flags `cargo fuzz build
# -s none` uses, so cargo-fuzz need not be installed) and runs each for SECS seconds (default 10)
# from its committed, minimized corpus (fuzz/CRATE/corpus/TARGET). New inputs go to a temp dir,
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
status=0
for crate in */; do
    crate="${crate%/}"
    [[ -f "$crate/Cargo.toml" ]] || continue
    (cd "$crate" && cargo +nightly build --quiet --release --bins --target "$TRIPLE")
    for src in "$crate"/fuzz_targets/*.rs; do
        t="$(basename "$src" .rs)"
        new="$WORK/new/$t"
        rm -rf "$new"; mkdir -p "$new"
        dict=(); [[ -f "$crate/$t.dict" ]] && dict=(-dict="$crate/$t.dict")
        SECONDS=0
        if "$CARGO_TARGET_DIR/$TRIPLE/release/$t" "$new" "$crate/corpus/$t" "${dict[@]}" \
            -max_total_time="$SECS" -print_final_stats=1 -detect_leaks=0 -rss_limit_mb=3072 -timeout=30 \
            -artifact_prefix="$WORK/artifacts/$t-" >"$WORK/$t.log" 2>&1; then
            echo "fuzz smoke: $crate/$t ok ($(grep -o 'stat::number_of_executed_units: [0-9]*' "$WORK/$t.log" | awk '{print $2}') runs, $((SECONDS)) s)"
        else
            echo "fuzz smoke: $crate/$t FAILED:"; tail -40 "$WORK/$t.log"; status=1
        fi
    done
done
exit "$status"
