#!/usr/bin/env bash
# Units on Slurm against one process (issue 34): the same `--quant Q4_K_M` conversion
#
#   A  (slurm)  docs/units.md's Slurm recipe on a one-node cluster (.ci/slurm.sh): `plan --units 2`,
#               `sbatch --array=0-1 --cpus-per-task=1` of `weightport --threads 1 unit PLAN`, the
#               finish job `--dependency=afterok` at 2 CPUs; timed from `plan` until the finish
#               job is COMPLETED (scheduler latency included; polled every 0.1 s)
#   B  (one)    weightport --threads 2 convert IN -o OUT --quant Q4_K_M
#
# in pairs (A B A B ..., REPS pairs), printing each pair's walls and A/B, the median ratio, and
# checking the two outputs with cmp. Needs root (the cluster) and Debian's slurm-wlm + munge.
#
#   IN=DIR bash benches/units_slurm.sh          # REPS pairs on a cluster it starts (or SLURM_CONF's)
#   IN=DIR bash benches/units_slurm.sh slurm    # one run of A (for an external timer), cluster up
#   IN=DIR bash benches/units_slurm.sh one      # one run of B
#
# Environment (defaults):
#   IN       an HF release dir (required): e.g. the one benches/gguf.sh builds, or for ~1.2 GiB
#            `python benches/gen_llama.py X.safetensors --layers 2` + benches/llama_config.py + the
#            tokenizer files of fixtures/good/arch/llama (see benches/README.md)
#   WORK=/tmp/wp-bench-units-slurm  WP=<repo>/target/release/weightport  QUANT=Q4_K_M  REPS=3
#   MODE=""  (or --in-place: plan --in-place, units write into one shared file)
#
# Caveats: the input is pre-read (warm page cache); every output is fsynced by weightport.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WP="${WP:-$ROOT/target/release/weightport}"
IN="${IN:?set IN to an HF release dir}"
WORK="${WORK:-/tmp/wp-bench-units-slurm}"
QUANT="${QUANT:-Q4_K_M}"
REPS="${REPS:-3}"
MODE="${MODE:-}"

[[ -x $WP ]] || { echo "no $WP: cargo build --release, or set WP" >&2; exit 2; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", b - a}'; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# One run of the Slurm recipe into $WORK/slurm/model.gguf.
run_slurm() {
  local d="$WORK/slurm" jid fid st
  rm -rf -- "$d" && mkdir -p "$d/out"
  cat >"$d/units.sbatch" <<EOF
#!/bin/bash
#SBATCH --job-name=wp-units
#SBATCH --array=0-1
#SBATCH --cpus-per-task=1
#SBATCH --mem=2G
exec /usr/bin/time -o "$d/cpu.unit-\$SLURM_ARRAY_TASK_ID" -f "%e %U %S %M" "$WP" --threads 1 unit "$d/job.plan.json"
EOF
  (cd "$d"
   /usr/bin/time -o "$d/cpu.plan" -f "%e %U %S %M" \
     "$WP" plan "$IN" -o "$d/out/model.gguf" --quant "$QUANT" --units 2 --plan "$d/job.plan.json" $MODE >/dev/null
   jid=$(sbatch --parsable units.sbatch)
   fid=$(sbatch --parsable --job-name=wp-finish --dependency=afterok:"$jid" --cpus-per-task=2 --mem=2G \
     --wrap "exec /usr/bin/time -o \"$d/cpu.finish\" -f \"%e %U %S %M\" \"$WP\" finish \"$d/job.plan.json\"")
   while :; do
     st=$(scontrol -o show job "$fid" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
     case "$st" in
       COMPLETED) break ;;
       PENDING | CONFIGURING | RUNNING | COMPLETING) sleep 0.1 ;;
       *) echo "finish job $fid: $st" >&2; cat "$d"/slurm-*.out >&2; exit 1 ;;
     esac
   done)
}

# One run of the one process into $WORK/one/model.gguf.
run_one() {
  rm -rf -- "$WORK/one" && mkdir -p "$WORK/one"
  /usr/bin/time -o "$WORK/one/cpu" -f "%e %U %S %M" \
    "$WP" --threads 2 convert "$IN" -o "$WORK/one/model.gguf" --quant "$QUANT" >/dev/null
}

# "wall user+sys peakMiB" of a /usr/bin/time file; the Slurm run's steps, summed CPU.
cpu_of() { awk '{printf "%.2f %.2f %.0f", $1, $2 + $3, $4 / 1024}' "$1"; }
slurm_cpu() { cat "$WORK"/slurm/cpu.* | awk '{c += $2 + $3; if ($4 > m) m = $4} END {printf "%.2f %.0f", c, m / 1024}'; }

case "${1:-pairs}" in
  slurm) run_slurm; exit ;;
  one) run_one; exit ;;
  pairs) ;;
  *) echo "usage: IN=DIR $0 [pairs|slurm|one]" >&2; exit 2 ;;
esac

if [[ -z ${SLURM_CONF:-} ]]; then
  exec bash "$ROOT/.ci/slurm.sh" run bash "$0" pairs
fi
mkdir -p "$WORK"
trap 'rm -rf -- "$WORK"' EXIT
find -L "$IN" -maxdepth 1 -type f -exec cat {} + >/dev/null   # warm the page cache
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; MODE=${MODE:-parts}"
a=() b=() r=() cr=()
for i in $(seq "$REPS"); do
  sync
  t0=$(now); run_slurm; t1=$(now); a+=("$(secs "$t0" "$t1")")
  sync
  t0=$(now); run_one; t1=$(now); b+=("$(secs "$t0" "$t1")")
  cmp "$WORK/slurm/out/model.gguf" "$WORK/one/model.gguf"
  r+=("$(awk -v x="${a[-1]}" -v y="${b[-1]}" 'BEGIN {printf "%.3f", x / y}')")
  read -r sc sm <<<"$(slurm_cpu)"; read -r _ oc om <<<"$(cpu_of "$WORK/one/cpu")"
  cr+=("$(awk -v x="$sc" -v y="$oc" 'BEGIN {printf "%.3f", x / y}')")
  echo "pair $i: slurm ${a[-1]} s, one process ${b[-1]} s, wall ratio ${r[-1]}; CPU $sc s (plan $(cpu_of "$WORK/slurm/cpu.plan"), units $(cpu_of "$WORK/slurm/cpu.unit-0") / $(cpu_of "$WORK/slurm/cpu.unit-1"), finish $(cpu_of "$WORK/slurm/cpu.finish"): wall, CPU s, peak MiB) vs $oc s, ratio ${cr[-1]}; peak RSS $sm vs $om MiB; outputs identical; load $(cut -d' ' -f1 /proc/loadavg)"
done
echo "median: slurm $(median "${a[@]}") s, one process $(median "${b[@]}") s; wall ratio median $(median "${r[@]}") (min $(printf '%s\n' "${r[@]}" | sort -g | head -1), max $(printf '%s\n' "${r[@]}" | sort -g | tail -1)); CPU ratio median $(median "${cr[@]}")"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
