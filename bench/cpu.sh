#!/usr/bin/env bash
# Where an MCP `tools/call` spends CPU: per call, by thread, for one server under one
# load. Complements bench/mcp.sh (throughput ratios) with the cost behind them.
#
#   bench/cpu.sh                          # every server, both modes, concurrency 64, 8 s
#   SERVERS="gw noaudit" MODES=stateless DURATION=10s C=16 bench/cpu.sh
#   MODES="stateless rest" SERVERS=gw bench/cpu.sh   # the same gateway's REST invoke beside it
#   BIN=/tmp/base SERVERS=gw bench/cpu.sh     # binaries built elsewhere (another revision)
#
# Servers: gw (the gateway as shipped: SQLite, API key, durable audit), gwtraced (the same
# exporting every span and its metrics over OTLP/HTTP to tests/clients/otlp_receiver.py
# on loopback; the receiver's own CPU is printed beside), noaudit (the
# gateway without its audit sink), first (the gateway answering before its audit row
# commits; never shipped), bare (the bare rmcp echo), baresse (the same, streaming every
# stateless answer as SSE: rmcp's default). Each runs alone: started,
# warmed up for 2 s, then measured with wrk (bench/mcp_call.lua). CPU comes from
# /proc/PID/task/*/stat (user and system time), context switches from
# /proc/PID/task/*/status and write system calls (`syscw`, all threads: responses, log
# lines, the audit's WAL) from /proc/PID/io, read just before and after the measured
# run; threads are grouped by name with their numbering dropped. Modes: session, stateless (MCP) and rest
# (REST invoke of the same tool; not for bare). Prints one table per server and mode,
# and writes them to bench/results/cpu.md.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-8s}
source bench/lib.sh

SERVERS=${SERVERS:-"bare noaudit gw"}
MODES=${MODES:-"stateless session"}
C=${C:-64}

ensure_wrk
release_bins
WORK=$(mktemp -d)
pid=
rx_pid=
rx_port=
cleanup() { for p in $pid $rx_pid; do kill "$p" 2>/dev/null; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

# start SERVER PORT: runs it in the background, sets pid and AUTH.
start() {
  local dir="$WORK/$1"
  rm -rf "$dir"; mkdir -p "$dir"
  case $1 in
    gw) env -u DATABASE_URL "$BIN/toolgate" serve --listen "127.0.0.1:$2" --data-dir "$dir" >/dev/null 2>"$dir.log" & pid=$! ;;
    gwtraced) receiver
      env -u DATABASE_URL OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$rx_port" OTEL_METRIC_EXPORT_INTERVAL=5000 \
      "$BIN/toolgate" serve --listen "127.0.0.1:$2" --data-dir "$dir" >/dev/null 2>"$dir.log" & pid=$! ;;
    noaudit) env -u DATABASE_URL "$BIN/gateway-unaudited" "127.0.0.1:$2" "$dir" >/dev/null 2>"$dir.log" & pid=$! ;;
    first) env -u DATABASE_URL "$BIN/gateway-unaudited" "127.0.0.1:$2" "$dir" reply-first >/dev/null 2>"$dir.log" & pid=$! ;;
    bare) "$BIN/bare-rmcp-echo" "127.0.0.1:$2" >/dev/null 2>"$dir.log" & pid=$! ;;
    baresse) "$BIN/bare-rmcp-echo" "127.0.0.1:$2" sse >/dev/null 2>"$dir.log" & pid=$! ;;
  esac
  AUTH="x-none: none"
  if [ "${1#bare}" = "$1" ]; then
    for _ in $(seq 100); do [ -s "$dir/admin-api-key" ] && break; sleep 0.1; done
    AUTH="authorization: Bearer $(cat "$dir/admin-api-key")"
    wait_ready "$2" "$AUTH"
  else
    sleep 0.5
  fi
}

# receiver: starts the OTLP receiver once, on rx_port (its process rx_pid).
receiver() {
  if [ -z "$rx_pid" ]; then
    rx_port=$(free_port)
    start_receiver "$rx_port"
    rx_pid=$!
  fi
}

# rx_ticks: the receiver's CPU time so far (user + system ticks), 0 without one.
rx_ticks() { if [ -n "$rx_pid" ]; then ticks "$rx_pid"; else echo 0; fi; }

# snapshot FILE: one line per thread: name, user ticks, system ticks, voluntary and
# involuntary context switches.
snapshot() {
  for task in /proc/"$pid"/task/*; do
    local stat name
    stat=$(cat "$task/stat" 2>/dev/null) || continue
    name=$(grep '^Name:' "$task/status" | cut -f2)
    # utime and stime are fields 14 and 15, counted after the parenthesised name.
    set -- ${stat##*) }
    echo "$name|${12}|${13}|$(awk '/^voluntary_ctxt_switches/ {v=$2} /^nonvoluntary_ctxt_switches/ {n=$2} END {print v "|" n}' "$task/status")"
  done > "$1"
}

mkdir -p bench/results
: > bench/results/cpu.md
for server in $SERVERS; do
  for mode in $MODES; do
    [ "$mode" = rest ] && [ "${server#bare}" != "$server" ] && continue
    port=$(free_port)
    start "$server" "$port"
    headers=(-H "$AUTH" -H "$CT" -H "$ACCEPT")
    url="http://127.0.0.1:$port/mcp"
    case $mode in
      session) headers+=(-H "mcp-session-id: $(session "$port" "$AUTH")" -H 'mcp-protocol-version: 2025-11-25') ;;
      stateless) headers+=(-H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: tools/call' -H 'mcp-name: echo') ;;
      rest) url="http://127.0.0.1:$port$PATH_INVOKE"; headers=(-H "$AUTH" -H "$CT") ;;
    esac
    export MCP_STATELESS=$([ "$mode" = stateless ] && echo 1 || echo 0)
    export BENCH_REST=$([ "$mode" = rest ] && echo 1 || echo 0)
    wrk -t2 -c"$C" -d2s -s bench/mcp_call.lua "${headers[@]}" "$url" >/dev/null
    snapshot "$WORK/before"
    rx_before=$(rx_ticks)
    awk '/^syscw/ {print $2}' "/proc/$pid/io" > "$WORK/syscw"
    wrk -t2 -c"$C" -d"$DURATION" -s bench/mcp_call.lua "${headers[@]}" "$url" \
      | grep '^{' > "$WORK/wrk.json"
    snapshot "$WORK/after"
    echo "receiver|$(( $(rx_ticks) - rx_before ))|0|0|0" > "$WORK/rx"
    awk '/^syscw/ {print $2}' "/proc/$pid/io" >> "$WORK/syscw"
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
    python3 - "$WORK" "$server" "$mode" "$C" "$(getconf CLK_TCK)" <<'PY' | tee -a bench/results/cpu.md
import collections, json, re, sys
work, server, mode, c, hz = sys.argv[1:]
hz = int(hz)
run = json.load(open(f"{work}/wrk.json"))
if run["bad"] or run["socket_errors"]:
    sys.exit(f"{server} {mode}: {run['bad']} bad responses, {run['socket_errors']} socket errors")
def load(path):
    groups = collections.defaultdict(lambda: [0, 0, 0, 0])
    for line in open(path):
        name, *counts = line.rstrip("\n").split("|")
        group = re.sub(r"[-_ ]?\d+$", "", name)
        for i, v in enumerate(counts):
            groups[group][i] += int(v)
    return groups
before, after = load(f"{work}/before"), load(f"{work}/after")
calls = run["requests"]
rows, total = [], [0.0, 0.0, 0.0, 0.0]
for group, counts in after.items():
    d = [a - b for a, b in zip(counts, before.get(group, [0, 0, 0, 0]))]
    per = [d[0] / hz * 1e6 / calls, d[1] / hz * 1e6 / calls, d[2] / calls, d[3] / calls]
    total = [t + p for t, p in zip(total, per)]
    if per[0] + per[1] >= 0.5 or per[2] + per[3] >= 0.05:
        rows.append((group, per))
rows.sort(key=lambda r: -(r[1][0] + r[1][1]))
w0, w1 = map(int, open(f"{work}/syscw").read().split())
print(f"{server}, {mode}, concurrency {c}: {run['rps']:.0f} req/s, p50 {run['p50_ms']:.2f} ms, p99 {run['p99_ms']:.2f} ms, {(w1 - w0) / calls:.2f} write system calls per call")
print()
print("| threads | user µs/call | system µs/call | switches/call (voluntary) | (involuntary) |")
print("|---|---:|---:|---:|---:|")
for group, p in rows + [("all", total)]:
    print(f"| {group} | {p[0]:.0f} | {p[1]:.0f} | {p[2]:.2f} | {p[3]:.2f} |")
rx = int(open(f"{work}/rx").read().split("|")[1])
if rx:
    print(f"| (the OTLP receiver, another process: user + system) | {rx / hz * 1e6 / calls:.0f} | | | |")
print()
PY
  done
done
echo "(one ${DURATION} wrk run per table after a 2 s warm-up; $(nproc) cores shared by the server and wrk; $(date -u +%Y-%m-%d))" | tee -a bench/results/cpu.md
