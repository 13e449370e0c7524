#!/usr/bin/env bash
# weightport remote benchmark (issue 33): `hf://` → Q4_K_M GGUF straight from a local Hub against
# download-then-convert.
#
#   bash benches/remote.sh            # build inputs if missing, serve them, run, print a table
#   bash benches/remote.sh --clean    # delete this script's release dir and logs (run.sh's input kept)
#
# The Hub: nginx (Debian's) on loopback over HTTPS, laid out by benches/hub_tree.py, the
# generator the remote tests use (model API listing, /resolve/ → 302 → /lfs/<sha256>, token on the
# Hub's host only), the LFS objects hard-linked to the release's files; RATE sets nginx's
# `limit_rate` per connection on /lfs/ (e.g. RATE=100m; default: none). LINK shapes the loopback
# link itself (root: `tc qdisc … tbf rate LINK` on lo for the run, removed on exit), one limit
# shared by every connection, as a real link is: LINK=800mbit is a 100 MB/s link. Prefer LINK to
# RATE for ratios: weightport fetches ranges over several connections, which a per-connection
# RATE would each give the full rate.
# Steps, each REPS times under /usr/bin/time -v (median wall, max peak RSS, "File system outputs"):
#   stream    weightport convert hf://org/llama -o OUT.gguf --quant Q4_K_M   (read-ahead on)
#   download  curl of every file of the listing (the 302 followed, the token only to the Hub)
#   local     weightport convert DOWNLOADED_DIR -o OUT.gguf --quant Q4_K_M
#   chain     download, then local (one timed command)
# and the stream's output compared with cmp against the chain's; the bytes and requests the
# stream fetched of the weights file, from nginx's access log.
# Ratios: stream / chain (target ≤ 0.7) and stream / max(download, local) (target ≤ 1.1).
# "written MiB" is the process's own file-system output (512-byte blocks of /usr/bin/time -v),
# against the output's size: the stream should write the output only (and the view's small files).
#
# Inputs: $SCRATCH/llama-${LAYERS}l.safetensors (benches/gen_llama.py: run.sh's and gguf.sh's file,
# generated if missing, ~2.37 GiB at 5 layers), hard-linked as model.safetensors into
# $SCRATCH/remote-${LAYERS}l/llama/ with a config.json from its header (llama_config.py) and the
# tokenizer of fixtures/good/arch/llama/.
#
# Environment (defaults): SCRATCH=/tmp/wp-bench WP=<repo>/target/release/weightport REPS=3
#   LAYERS=5 RATE= LINK= THREADS= (weightport's --threads; default one per core) MAX_MEMORY= (--max-memory)
#   PYTHON=python3 (numpy and safetensors, to generate the input) NGINX=/usr/sbin/nginx
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH="${SCRATCH:-/tmp/wp-bench}"
WP="${WP:-$ROOT/target/release/weightport}"
REPS="${REPS:-3}"
LAYERS="${LAYERS:-5}"
RATE="${RATE:-}"
LINK="${LINK:-}"
PY="${PYTHON:-python3}"
NGINX="${NGINX:-/usr/sbin/nginx}"
TOKEN=hf_benchtoken_0123456789abcdef
IN_ST="$SCRATCH/llama-${LAYERS}l.safetensors"
REL="$SCRATCH/remote-${LAYERS}l/llama"
LOGS="$SCRATCH/remote-logs"

die() { echo "remote.sh: $*" >&2; exit 1; }

if [[ "${1:-}" == "--clean" ]]; then
    [[ "$SCRATCH" == /* && "$SCRATCH" != "/" ]] || die "refusing to clean SCRATCH=$SCRATCH"
    rm -rf -- "$SCRATCH/remote-${LAYERS}l" "$LOGS" "$SCRATCH/results-remote.md"
    echo "removed $SCRATCH/remote-${LAYERS}l, $LOGS, $SCRATCH/results-remote.md"
    exit 0
fi
[[ $# == 0 ]] || die "unknown argument: $1 (only --clean)"
(( REPS >= 1 )) || die "REPS must be >= 1"
[[ -x "$WP" ]] || die "$WP not found or not executable (cargo build --release, or set WP=...)"
[[ -x "$NGINX" ]] || die "$NGINX not found (apt-get install nginx-light, or set NGINX=...)"
for t in curl openssl python3; do command -v $t >/dev/null || die "$t is required"; done
/usr/bin/time -v true >/dev/null 2>&1 || die "/usr/bin/time -v (GNU time) is required"

WPARGS=()
[[ -n "${THREADS:-}" ]] && WPARGS+=(--threads "$THREADS")
[[ -n "${MAX_MEMORY:-}" ]] && WPARGS+=(--max-memory "$MAX_MEMORY")

# --- inputs -----------------------------------------------------------------------------------
mkdir -p "$SCRATCH" "$LOGS" "$REL"
if [[ ! -s "$IN_ST" ]]; then
    echo "generating $IN_ST ($LAYERS layers) ..." >&2
    "$PY" "$ROOT/benches/gen_llama.py" "$IN_ST" --layers "$LAYERS" --writer stream >&2
fi
if [[ ! "$IN_ST" -ef "$REL/model.safetensors" ]]; then
    rm -f -- "$REL/model.safetensors"
    ln "$IN_ST" "$REL/model.safetensors" || die "cannot hard-link $IN_ST into $REL"
fi
for f in "$ROOT"/fixtures/good/arch/llama/*; do
    b="$(basename "$f")"
    case "$b" in config.json | *.safetensors | *.index.json) continue ;; esac
    cmp -s "$f" "$REL/$b" 2>/dev/null || cp "$f" "$REL/$b"
done
python3 "$ROOT/benches/llama_config.py" "$REL/model.safetensors" 32 legacy >"$REL/config.json"

TMPD="$(mktemp -d "$SCRATCH/.remote.XXXXXX")"
NGINX_PID=""
SHAPED=""
cleanup() {
    [[ -n "$NGINX_PID" ]] && kill "$NGINX_PID" 2>/dev/null && wait "$NGINX_PID" 2>/dev/null
    [[ -n "$SHAPED" ]] && tc qdisc del dev lo root 2>/dev/null
    rm -rf -- "$TMPD"
}
trap cleanup EXIT

if [[ -n "$LINK" ]]; then
    command -v tc >/dev/null || die "LINK needs tc (iproute2)"
    [[ "$(tc qdisc show dev lo)" == *noqueue* ]] || die "lo already has a qdisc: $(tc qdisc show dev lo)"
    # burst ≥ lo's 64 KiB MTU; latency bounds the queue, as a link's buffer does.
    tc qdisc add dev lo root tbf rate "$LINK" burst 2mb latency 100ms || die "tc on lo failed (root?)"
    SHAPED=1
fi

# --- the Hub ----------------------------------------------------------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port) PLAIN=$(free_port)
HUB="$TMPD/hub"
python3 "$ROOT/benches/hub_tree.py" "$HUB" --port "$PORT" --plain-port "$PLAIN" \
    --token "$TOKEN" --link ${RATE:+--rate "$RATE"} "llama=$REL"
"$NGINX" -e "$HUB/error.log" -p "$HUB" -c "$HUB/nginx.conf" >/dev/null &
NGINX_PID=$!
for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    sleep 0.05
done
ENDPOINT="https://127.0.0.1:$PORT"
export HF_ENDPOINT="$ENDPOINT" HF_TOKEN="$TOKEN" SSL_CERT_FILE="$HUB/ca.pem" HF_HOME="$TMPD/hf-home"

# The download step: every file of the listing, the token to the Hub only (curl -L would not
# carry a -H header across hosts either; the redirect is followed by a second, tokenless curl).
cat >"$TMPD/download.sh" <<EOF
#!/usr/bin/env bash
set -euo pipefail
dst=\$1; mkdir -p "\$dst"
api="$ENDPOINT/api/models/org/llama/revision/main"
files=\$(curl -sS --fail --cacert "$HUB/ca.pem" -H "Authorization: Bearer $TOKEN" "\$api" \\
    | python3 -c 'import json,sys; print("\n".join(s["rfilename"] for s in json.load(sys.stdin)["siblings"]))')
for f in \$files; do
    url="$ENDPOINT/org/llama/resolve/main/\$f"
    loc=\$(curl -sS --cacert "$HUB/ca.pem" -H "Authorization: Bearer $TOKEN" -o "\$dst/\$f" -w '%{redirect_url}' "\$url")
    [[ -z "\$loc" ]] || curl -sS --fail --cacert "$HUB/ca.pem" -o "\$dst/\$f" "\$loc"
done
EOF
chmod +x "$TMPD/download.sh"
DL="$TMPD/dl/llama"  # named as the repo: HF → GGUF names the model after its directory
OUT="$TMPD/out"

# --- measurement ------------------------------------------------------------------------------
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
maxof() { printf '%s\n' "$@" | sort -g | tail -1; }
declare -A WALL=() RSS=() WRITTEN=()
# measure KEY PREP cmd... : REPS runs after PREP (untimed); median wall, max RSS, max MiB written.
measure() {
    local key=$1 prep=$2; shift 2
    local -a walls=() rsss=() wr=()
    local r t0 t1
    for ((r = 1; r <= REPS; r++)); do
        eval "$prep"
        sync
        t0=$(date +%s%N)
        /usr/bin/time -v -o "$TMPD/time.txt" "$@" >"$LOGS/$key.log" 2>&1 \
            || { tail -20 "$LOGS/$key.log" >&2; die "$key failed (rep $r)"; }
        t1=$(date +%s%N)
        walls+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", (b - a) / 1e9}')")
        rsss+=("$(awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$TMPD/time.txt")")
        wr+=("$(awk -F': ' '/File system outputs/ {printf "%.1f", $2 * 512 / 1048576}' "$TMPD/time.txt")")
        echo "-- $key rep $r: ${walls[-1]} s, ${rsss[-1]} MiB RSS, ${wr[-1]} MiB written" >&2
    done
    WALL[$key]=$(median "${walls[@]}") RSS[$key]=$(maxof "${rsss[@]}") WRITTEN[$key]=$(maxof "${wr[@]}")
}
fresh() { rm -rf -- "$OUT" "$DL"; mkdir -p "$OUT"; }
stream_cmd=("$WP" "${WPARGS[@]}" convert hf://org/llama -o "$OUT/s.gguf" --quant Q4_K_M)
local_cmd=("$WP" "${WPARGS[@]}" convert "$DL" -o "$OUT/l.gguf" --quant Q4_K_M)

echo "uptime before: $(uptime)" >&2
log_lines() { wc -l <"$HUB/access.log" 2>/dev/null || echo 0; }
before_stream=$(log_lines)
measure stream fresh "${stream_cmd[@]}"
# What the stream fetched of the weights, per run, from nginx's log ($body_bytes_sent last).
fetched=$(tail -n +"$((before_stream + 1))" "$HUB/access.log" | awk -v reps="$REPS" \
    -v size="$(stat -c %s "$REL/model.safetensors")" '$1 == "GET" && $2 ~ /^\/lfs\// {n++; b += $NF}
    END {printf "%.1f MiB in %d requests per run (%.3f x the weights file)", b / reps / 1048576, n / reps, b / reps / size}')
cp "$OUT/s.gguf" "$TMPD/stream.gguf"
measure download fresh "$TMPD/download.sh" "$DL"
measure local 'rm -rf -- "$OUT"; mkdir -p "$OUT"; [[ -s $DL/model.safetensors ]] || "$TMPD/download.sh" "$DL"' "${local_cmd[@]}"
measure chain fresh bash -c "\"$TMPD/download.sh\" \"$DL\" && $(printf '%q ' "${local_cmd[@]}")"
cmp -s "$OUT/l.gguf" "$TMPD/stream.gguf" && same=identical || same=DIFFERS
out_mib=$(awk -v b="$(stat -c %s "$TMPD/stream.gguf")" 'BEGIN {printf "%.1f", b / 1048576}')
echo "uptime after: $(uptime)" >&2

# --- table ------------------------------------------------------------------------------------
larger=$(awk -v a="${WALL[download]}" -v b="${WALL[local]}" 'BEGIN {print (a > b) ? a : b}')
{
    echo "| step | wall s (median of $REPS) | peak RSS MiB | written MiB |"
    echo "|---|---|---|---|"
    for k in stream download local chain; do
        echo "| $k | ${WALL[$k]} | ${RSS[$k]} | ${WRITTEN[$k]} |"
    done
    echo
    awk -v s="${WALL[stream]}" -v c="${WALL[chain]}" -v l="$larger" 'BEGIN {
        printf "stream / chain: %.2f (target <= 0.7); stream / max(download, local): %.2f (target <= 1.1)\n", s / c, s / l }'
    echo "output: $out_mib MiB, stream's output vs the chain's: $same; RATE=${RATE:-none} LINK=${LINK:-none}"
    echo "stream fetched (nginx log): $fetched"
} | tee "$SCRATCH/results-remote.md"
