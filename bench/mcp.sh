#!/usr/bin/env bash
# MCP `tools/call` through toolgate vs. a bare echo server on the same rmcp (the library's own
# ceiling, with the gateway's transport configuration), in session mode (protocol
# 2025-11-25, one session shared by all connections) and stateless (2026-07-28), beside
# the REST invoke figure of the same gateway. Also the gateway without its audit sink, to
# separate the audit's cost from the adapter's, and, stateless, the bare echo with rmcp's
# default of streaming every answer (SSE) where the gateway answers a lone result as JSON.
#
#   bench/mcp.sh                       # 3 rounds of 5 s per point, concurrency 1, 16, 64
#   BIN=/tmp/base bench/mcp.sh          # binaries built elsewhere (another revision)
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

ensure_wrk
release_bins
WORK=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

GW=$(free_port); NOAUDIT=$(free_port); BARE=$(free_port); BARESSE=$(free_port)
mkdir -p "$WORK/gw" "$WORK/noaudit"
env -u DATABASE_URL "$BIN/toolgate" serve --listen "127.0.0.1:$GW" --data-dir "$WORK/gw" >/dev/null 2>"$WORK/gw.log" & pids+=($!)
env -u DATABASE_URL "$BIN/gateway-unaudited" "127.0.0.1:$NOAUDIT" "$WORK/noaudit" >/dev/null 2>"$WORK/noaudit.log" & pids+=($!)
"$BIN/bare-rmcp-echo" "127.0.0.1:$BARE" >/dev/null & pids+=($!)
"$BIN/bare-rmcp-echo" "127.0.0.1:$BARESSE" sse >/dev/null & pids+=($!)
for _ in $(seq 100); do [ -s "$WORK/gw/admin-api-key" ] && [ -s "$WORK/noaudit/admin-api-key" ] && break; sleep 0.1; done
GW_AUTH="authorization: Bearer $(cat "$WORK/gw/admin-api-key")"
NA_AUTH="authorization: Bearer $(cat "$WORK/noaudit/admin-api-key")"
wait_ready "$GW" "$GW_AUTH"; wait_ready "$NOAUDIT" "$NA_AUTH"
REPLY_FIRST=${REPLY_FIRST:-0}
if [ "$REPLY_FIRST" = 1 ]; then
  FIRST=$(free_port); mkdir -p "$WORK/first"
  env -u DATABASE_URL "$BIN/gateway-unaudited" "127.0.0.1:$FIRST" "$WORK/first" reply-first >/dev/null 2>"$WORK/first.log" & pids+=($!)
  for _ in $(seq 100); do [ -s "$WORK/first/admin-api-key" ] && break; sleep 0.1; done
  FIRST_AUTH="authorization: Bearer $(cat "$WORK/first/admin-api-key")"
  wait_ready "$FIRST" "$FIRST_AUTH"
fi


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
