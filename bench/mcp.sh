#!/usr/bin/env bash
# MCP `tools/call` through toolgate vs. a bare rmcp 3.9 echo server (the library's own
# ceiling, with the gateway's transport configuration), in session mode (protocol
# 2025-11-25, one session shared by all connections) and stateless (2026-07-28), beside
# the REST invoke figure of the same gateway. Also the gateway without its audit sink, to
# separate the audit's cost from the adapter's, and, stateless, the bare echo with rmcp's
# default of streaming every answer (SSE) where the gateway answers a lone result as JSON.
#
#   bench/mcp.sh                       # 3 rounds of 5 s per point, concurrency 1, 16, 64
#   DURATION=10s ROUNDS=5 bench/mcp.sh
#   REPLY_FIRST=1 bench/mcp.sh          # also the gateway answering before its audit row
#                                      # commits (gateway-unaudited reply-first; never shipped)
#
# Load generator: wrk (Debian package, installed if missing) with bench/mcp_call.lua, which
# gives every request a JSON-RPC id of its own and counts any response that is not a
# successful result. Prints tables and writes them to bench/results/mcp.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

if ! command -v wrk >/dev/null; then
  echo "installing wrk (Debian package)…" >&2
  apt-get install -y -qq wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
fi
cargo build --quiet --release -p toolgate-server -p toolgate-bench
WORK=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

GW=$(free_port); NOAUDIT=$(free_port); BARE=$(free_port); BARESSE=$(free_port)
mkdir -p "$WORK/gw" "$WORK/noaudit"
env -u DATABASE_URL target/release/toolgate serve --listen "127.0.0.1:$GW" --data-dir "$WORK/gw" >/dev/null 2>"$WORK/gw.log" & pids+=($!)
env -u DATABASE_URL target/release/gateway-unaudited "127.0.0.1:$NOAUDIT" "$WORK/noaudit" >/dev/null 2>"$WORK/noaudit.log" & pids+=($!)
target/release/bare-rmcp-echo "127.0.0.1:$BARE" >/dev/null & pids+=($!)
target/release/bare-rmcp-echo "127.0.0.1:$BARESSE" sse >/dev/null & pids+=($!)
for _ in $(seq 100); do [ -s "$WORK/gw/admin-api-key" ] && [ -s "$WORK/noaudit/admin-api-key" ] && break; sleep 0.1; done
GW_AUTH="authorization: Bearer $(cat "$WORK/gw/admin-api-key")"
NA_AUTH="authorization: Bearer $(cat "$WORK/noaudit/admin-api-key")"
wait_ready "$GW" "$GW_AUTH"; wait_ready "$NOAUDIT" "$NA_AUTH"
REPLY_FIRST=${REPLY_FIRST:-0}
if [ "$REPLY_FIRST" = 1 ]; then
  FIRST=$(free_port); mkdir -p "$WORK/first"
  env -u DATABASE_URL target/release/gateway-unaudited "127.0.0.1:$FIRST" "$WORK/first" reply-first >/dev/null 2>"$WORK/first.log" & pids+=($!)
  for _ in $(seq 100); do [ -s "$WORK/first/admin-api-key" ] && break; sleep 0.1; done
  FIRST_AUTH="authorization: Bearer $(cat "$WORK/first/admin-api-key")"
  wait_ready "$FIRST" "$FIRST_AUTH"
fi

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

GW_SID=$(session "$GW" "$GW_AUTH")
NA_SID=$(session "$NOAUDIT" "$NA_AUTH")
BARE_SID=$(session "$BARE" "x-none: none")
FIRST_SID=
if [ "$REPLY_FIRST" = 1 ]; then FIRST_SID=$(session "$FIRST" "$FIRST_AUTH"); fi

sid_of() { case $1 in gw) echo "$GW_SID";; noaudit) echo "$NA_SID";; bare) echo "$BARE_SID";; first) echo "$FIRST_SID";; esac; }
for c in $CONCURRENCY; do
  for r in $(seq "$ROUNDS"); do
    for mode in session stateless; do
      run bare "$BARE" "$mode" "$c" "$r" "x-none: none" "$(sid_of bare)"
      run gw "$GW" "$mode" "$c" "$r" "$GW_AUTH" "$(sid_of gw)"
      run noaudit "$NOAUDIT" "$mode" "$c" "$r" "$NA_AUTH" "$(sid_of noaudit)"
      if [ "$REPLY_FIRST" = 1 ]; then run first "$FIRST" "$mode" "$c" "$r" "$FIRST_AUTH" "$(sid_of first)"; fi
    done
    run baresse "$BARESSE" stateless "$c" "$r" "x-none: none"
    run gw "$GW" rest "$c" "$r" "$GW_AUTH"
  done
done

mkdir -p bench/results
HEAD="| mode | concurrency | A req/s | A p50 ms | A p99 ms | B req/s | B p50 ms | B p99 ms | ratio A/B |"
SEP="|---|---:|---:|---:|---:|---:|---:|---:|---:|"
{
  echo "A = toolgate MCP as shipped (API key auth, SQLite, durable audit); B = bare rmcp echo"
  echo
  echo "$HEAD"; echo "$SEP"
  for mode in session stateless; do for c in $CONCURRENCY; do row "$mode" "$c" gw bare; done; done
  echo
  echo "A = toolgate MCP without its audit sink (same auth, store, executor); B = bare rmcp echo"
  echo
  echo "$HEAD"; echo "$SEP"
  for mode in session stateless; do for c in $CONCURRENCY; do row "$mode" "$c" noaudit bare; done; done
  echo
  if [ "$REPLY_FIRST" = 1 ]; then
    echo "A = toolgate MCP answering before its audit row commits (real writer; never shipped); B = bare rmcp echo"
    echo
    echo "$HEAD"; echo "$SEP"
    for mode in session stateless; do for c in $CONCURRENCY; do row "$mode" "$c" first bare; done; done
    echo
  fi
  echo "A = toolgate MCP (stateless); B = bare rmcp echo streaming every answer as SSE (rmcp's default; the gateway and the bare echo above answer a lone result as JSON)"
  echo
  echo "$HEAD"; echo "$SEP"
  for c in $CONCURRENCY; do row stateless "$c" gw baresse; done
  for c in $CONCURRENCY; do row stateless "$c" noaudit baresse | sed 's/^| stateless |/| stateless, no audit |/'; done
  echo
  echo "A = toolgate MCP (stateless) as shipped; B = toolgate REST invoke as shipped, same wrk"
  echo
  echo "$HEAD"; echo "$SEP"
  for c in $CONCURRENCY; do
    python3 - "$WORK" "$c" <<'PY'
import glob, json, sys
work, c = sys.argv[1:]
def median(pattern):
    runs = sorted((d["rps"], d["p50_ms"], d["p99_ms"]) for d in (json.load(open(p)) for p in glob.glob(pattern)))
    return runs[len(runs) // 2]
x, y = median(f"{work}/gw-stateless-{c}-*.json"), median(f"{work}/gw-rest-{c}-*.json")
print(f"| stateless vs rest | {c} | {x[0]:.0f} | {x[1]:.3f} | {x[2]:.3f} | {y[0]:.0f} | {y[1]:.3f} | {y[2]:.3f} | {x[0]/y[0]:.2f} |")
PY
  done
  echo
  footer
} | tee bench/results/mcp.md
