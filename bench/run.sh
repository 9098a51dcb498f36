#!/usr/bin/env bash
# REST invoke benchmark: toolgate vs. a bare axum handler doing the same JSON echo.
#
#   bench/run.sh                 # 3 rounds of 5 s per point, concurrency 1, 16, 64
#   DURATION=10s ROUNDS=5 bench/run.sh
#
# Builds release binaries, installs the load generator (oha, pinned) into bench/.tools if
# missing, starts both servers on loopback, drives POST .../echo/invoke on each, and
# prints req/s, p50 and p99 per concurrency with the gateway/bare throughput ratio.
# The two servers are measured alternately, ROUNDS times each, and the round with the
# median throughput is reported, so drift on a shared machine hits both alike.
# Results also land in bench/results/rest.md.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
CONCURRENCY=${CONCURRENCY:-"1 16 64"}
OHA_VERSION=1.16.0
TOOLS=bench/.tools
OHA=$TOOLS/bin/oha

if ! "$OHA" --version 2>/dev/null | grep -q "$OHA_VERSION"; then
  echo "installing oha $OHA_VERSION into $TOOLS (one-time)…" >&2
  cargo install --quiet --locked --root "$TOOLS" oha --version "$OHA_VERSION"
fi

cargo build --quiet --release -p toolgate-server -p toolgate-bench
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
GW_PORT=$(free_port)
BARE_PORT=$(free_port)
DATA=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$DATA"; }
trap cleanup EXIT

# The gateway as shipped (default log level: one line per call).
target/release/toolgate serve --listen "127.0.0.1:$GW_PORT" --data-dir "$DATA" 2>"$DATA/gateway.log" &
pids+=($!)
target/release/bare-echo "127.0.0.1:$BARE_PORT" >/dev/null &
pids+=($!)
for port in "$GW_PORT" "$BARE_PORT"; do
  for _ in $(seq 100); do
    curl -sf -o /dev/null -X POST -H 'content-type: application/json' \
      -d '{"arguments":{"message":"ping"}}' "http://127.0.0.1:$port/v1/tools/echo/invoke" && break
    sleep 0.1
  done
done

BODY='{"arguments":{"message":"hello, toolgate"}}'
run() { # name port concurrency round
  "$OHA" --no-tui --output-format json -z "$DURATION" -c "$3" -m POST \
    -H 'content-type: application/json' -d "$BODY" \
    "http://127.0.0.1:$2/v1/tools/echo/invoke" > "$DATA/$1-$3-$4.json"
}

mkdir -p bench/results
{
  echo "| concurrency | gateway req/s | gateway p50 ms | gateway p99 ms | bare req/s | bare p50 ms | bare p99 ms | ratio gateway/bare |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
  for c in $CONCURRENCY; do
    for r in $(seq "$ROUNDS"); do
      run bare "$BARE_PORT" "$c" "$r"
      run gateway "$GW_PORT" "$c" "$r"
    done
    python3 - "$DATA" "$c" <<'PY'
import glob, json, sys
def load(p):
    d = json.load(open(p))
    s, pct = d["summary"], d["latencyPercentiles"]
    codes = d.get("statusCodeDistribution", {})
    bad = sum(v for k, v in codes.items() if k != "200")
    if bad:
        sys.exit(f"{p}: {bad} non-200 responses: {codes}")
    return s["requestsPerSec"], pct["p50"] * 1000, pct["p99"] * 1000
def median(name):
    runs = sorted(load(p) for p in glob.glob(f"{sys.argv[1]}/{name}-{sys.argv[2]}-*.json"))
    return runs[len(runs) // 2]
g, b, c = median("gateway"), median("bare"), sys.argv[2]
print(f"| {c} | {g[0]:.0f} | {g[1]:.3f} | {g[2]:.3f} | {b[0]:.0f} | {b[1]:.3f} | {b[2]:.3f} | {g[0]/b[0]:.2f} |")
PY
  done
} | tee bench/results/rest.md
echo "(median of ${ROUNDS} alternating rounds of ${DURATION} per point; $(nproc) cores shared by servers and load generator; $(date -u +%Y-%m-%d))" | tee -a bench/results/rest.md
