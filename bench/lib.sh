# Shared by the benchmark scripts (sourced, not run).
#
# Each script starts two servers doing the same work, one with and one without what is
# measured, drives them alternately ROUNDS times per concurrency with oha, and reports the
# median round of each and the throughput ratio.

DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
CONCURRENCY=${CONCURRENCY:-"1 16 64"}
OHA_VERSION=1.16.0
OHA=bench/.tools/bin/oha
BODY='{"arguments":{"message":"hello, toolgate"}}'
PATH_INVOKE=/v1/tools/echo/invoke

ensure_oha() {
  if ! "$OHA" --version 2>/dev/null | grep -q "$OHA_VERSION"; then
    echo "installing oha $OHA_VERSION into bench/.tools (one-time)…" >&2
    cargo install --quiet --locked --root bench/.tools oha --version "$OHA_VERSION"
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_ready PORT [AUTH_HEADER]: until an invoke answers 200.
wait_ready() {
  local port=$1 auth=${2:-x-none: none}
  for _ in $(seq 200); do
    curl -sf -o /dev/null -X POST -H 'content-type: application/json' -H "$auth" \
      -d "$BODY" "http://127.0.0.1:$port$PATH_INVOKE" && return 0
    sleep 0.1
  done
  echo "server on port $port never became ready" >&2
  return 1
}

# measure NAME PORT CONCURRENCY ROUND [AUTH_HEADER]: into $WORK/NAME-CONCURRENCY-ROUND.json.
# OHA_FLAGS go to oha as they are (e.g. --disable-keepalive).
# With RATE set, paced at RATE calls/s, into $WORK/NAME-rRATE-ROUND.json (see `label`).
measure() {
  local auth=${5:-x-none: none}
  "$OHA" --no-tui --output-format json -z "$DURATION" -c "$3" ${RATE:+-q "$RATE"} ${OHA_FLAGS:-} -m POST \
    -H 'content-type: application/json' -H "$auth" -d "$BODY" \
    "http://127.0.0.1:$2$PATH_INVOKE" > "$WORK/$1-$(label "$3")-$4.json"
}

# label CONCURRENCY: how `measure` names a point: the concurrency, or rRATE when paced.
label() { if [ -n "${RATE:-}" ]; then echo "r$RATE"; else echo "$1"; fi; }

# ticks PID: the process's CPU time so far (user + system), in clock ticks.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# start_receiver PORT: the OTLP receiver the tests use (tests/clients/otlp_receiver.py,
# decoding every export) on PORT, in the background ($! is its process).
start_receiver() {
  tests/clients/setup.sh >/dev/null
  tests/clients/.venv-otel/bin/python tests/clients/otlp_receiver.py "$1" - >/dev/null &
}

# summarize A B CONCURRENCY: one table row, medians of A and B, ratio A/B.
summarize() {
  python3 - "$WORK" "$1" "$2" "$3" <<'PY'
import glob, json, sys
work, a, b, c = sys.argv[1:]
def load(p):
    d = json.load(open(p))
    s, pct = d["summary"], d["latencyPercentiles"]
    codes = d.get("statusCodeDistribution", {})
    bad = sum(v for k, v in codes.items() if k != "200")
    if bad:
        sys.exit(f"{p}: {bad} non-200 responses: {codes}")
    return s["requestsPerSec"], pct["p50"] * 1000, pct["p99"] * 1000
def median(name):
    runs = sorted(load(p) for p in glob.glob(f"{work}/{name}-{c}-*.json"))
    return runs[len(runs) // 2]
x, y = median(a), median(b)
print(f"| {c} | {x[0]:.0f} | {x[1]:.3f} | {x[2]:.3f} | {y[0]:.0f} | {y[1]:.3f} | {y[2]:.3f} | {x[0]/y[0]:.2f} |")
PY
}

# with_workdir: a fresh temporary $WORK and an empty pids array; on exit the processes in
# pids are stopped and $WORK removed.
with_workdir() {
  WORK=$(mktemp -d)
  pids=()
  trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
}

footer() {
  echo "(median of ${ROUNDS} alternating rounds of ${DURATION} per point; $(nproc) cores shared by servers, Postgres and load generator; $(date -u +%Y-%m-%d))"
}

ensure_wrk() {
  if ! command -v wrk >/dev/null; then
    echo "installing wrk (Debian package)…" >&2
    apt-get install -y -qq wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
  fi
}

# MCP over wrk (bench/mcp_call.lua gives each request a JSON-RPC id of its own and counts
# any response that is not a successful result). Results go to $WORK.
ACCEPT='accept: application/json, text/event-stream'
CT='content-type: application/json'

# session PORT AUTH: opens an MCP session (initialize + initialized), prints its id.
session() {
  local init='{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk","version":"4"}}}'
  local sid
  sid=$(curl -s -D - -o /dev/null -X POST -H "$2" -H "$CT" -H "$ACCEPT" -d "$init" \
    "http://127.0.0.1:$1/mcp" | tr -d '\r' | awk 'tolower($1)=="mcp-session-id:" {print $2}')
  [ -n "$sid" ] || { echo "no session from port $1" >&2; return 1; }
  curl -s -o /dev/null -X POST -H "$2" -H "$CT" -H "$ACCEPT" -H "mcp-session-id: $sid" \
    -H 'mcp-protocol-version: 2025-11-25' \
    -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' "http://127.0.0.1:$1/mcp"
  echo "$sid"
}

# run NAME PORT MODE CONCURRENCY ROUND AUTH [SESSION]: one wrk round, its JSON summary kept.
run() {
  local name=$1 port=$2 mode=$3 c=$4 round=$5 auth=$6 sid=${7:-}
  local threads=2 url="http://127.0.0.1:$port/mcp"
  [ "$c" -lt 2 ] && threads=1
  local headers=(-H "$auth" -H "$CT" -H "$ACCEPT")
  case $mode in
    session) headers+=(-H "mcp-session-id: $sid" -H 'mcp-protocol-version: 2025-11-25') ;;
    stateless) headers+=(-H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: tools/call' -H 'mcp-name: echo') ;;
    rest) url="http://127.0.0.1:$port$PATH_INVOKE"; headers=(-H "$auth" -H "$CT") ;;
  esac
  MCP_STATELESS=$([ "$mode" = stateless ] && echo 1 || echo 0) \
  BENCH_REST=$([ "$mode" = rest ] && echo 1 || echo 0) \
    wrk -t"$threads" -c"$c" -d"$DURATION" -s bench/mcp_call.lua "${headers[@]}" "$url" \
    | grep '^{' > "$WORK/$name-$mode-$c-$round.json"
}

# row MODE CONCURRENCY A B: medians of A and B, ratio A/B.
row() {
  python3 - "$WORK" "$@" <<'PY'
import glob, json, sys
work, mode, c, a, b = sys.argv[1:]
def median(name):
    runs = []
    for p in glob.glob(f"{work}/{name}-{mode}-{c}-*.json"):
        d = json.load(open(p))
        if d["bad"] or d["socket_errors"]:
            sys.exit(f"{p}: {d['bad']} bad responses, {d['socket_errors']} socket errors")
        runs.append((d["rps"], d["p50_ms"], d["p99_ms"]))
    runs.sort()
    return runs[len(runs) // 2]
x, y = median(a), median(b)
print(f"| {mode} | {c} | {x[0]:.0f} | {x[1]:.3f} | {x[2]:.3f} | {y[0]:.0f} | {y[1]:.3f} | {y[2]:.3f} | {x[0]/y[0]:.2f} |")
PY
}

# release_bins: sets BIN to the directory holding the release binaries: as given (another
# revision's, built elsewhere), else this tree's, built now.
release_bins() {
  BIN=${BIN:-}
  if [ -z "$BIN" ]; then
    cargo build --quiet --release -p toolgate-server -p toolgate-bench
    BIN=target/release
  fi
}
