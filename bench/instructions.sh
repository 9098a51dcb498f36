#!/usr/bin/env bash
# Instructions per MCP `tools/call`, counted by valgrind's callgrind: the same figure for
# the same binaries and inputs whatever else the machine is doing, so a change's cost can
# be read without the ±10% (and day-to-day 3-5x) noise of the throughput benchmarks.
#
#   bench/instructions.sh                       # bare, noaudit, gw; both modes; 300 calls
#   SERVERS="gw" MODES=stateless CALLS=1000 bench/instructions.sh
#   BIN=/tmp/base bench/instructions.sh         # binaries built elsewhere (another
#                                               # revision), not built here
#
# Each server runs under callgrind; 100 calls warm it up, the counters are zeroed, CALLS
# sequential calls (one connection, bench/mcp_calls.py) are counted, and the counters are
# dumped. Concurrency 1, so the gateway's audit commits one record per batch: its audit
# figure here is the per-batch cost, the worst case. Caveats: valgrind counts a
# `rep movsb` copy by the byte and hides SHA-NI from sha2 (which then hashes in software),
# so copies and hashing weigh more here than in time (the table also gives the count
# without memcpy/memmove). Prints a table and writes it to
# bench/results/instructions.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

SERVERS=${SERVERS:-"bare noaudit gw"}
MODES=${MODES:-"stateless session"}
CALLS=${CALLS:-300}
BIN=${BIN:-}
command -v valgrind >/dev/null || apt-get install -y -qq valgrind >/dev/null
if [ -z "$BIN" ]; then
  cargo build --quiet --release -p toolgate-server -p toolgate-bench
  BIN=target/release
fi
WORK=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

declare -A IR COPY
for server in $SERVERS; do
  for mode in $MODES; do
    dir="$WORK/$server-$mode"; mkdir -p "$dir"; port=$(free_port)
    case $server in
      gw) cmd=("$BIN/toolgate" serve --listen "127.0.0.1:$port" --data-dir "$dir") ;;
      noaudit) cmd=("$BIN/gateway-unaudited" "127.0.0.1:$port" "$dir") ;;
      bare) cmd=("$BIN/bare-rmcp-echo" "127.0.0.1:$port") ;;
    esac
    env -u DATABASE_URL valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" "${cmd[@]}" \
      >/dev/null 2>"$dir/log" & pid=$!
    key=-
    if [ "$server" != bare ]; then
      for _ in $(seq 600); do [ -s "$dir/admin-api-key" ] && break; sleep 0.2; done
      key=$(cat "$dir/admin-api-key")
    fi
    for _ in $(seq 600); do python3 bench/mcp_calls.py "$port" "$key" "$mode" 1 2>/dev/null && break; sleep 0.2; done
    python3 bench/mcp_calls.py "$port" "$key" "$mode" 100
    callgrind_control -z "$pid" >/dev/null
    python3 bench/mcp_calls.py "$port" "$key" "$mode" "$CALLS"
    callgrind_control -d "$pid" >/dev/null
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
    IR[$server-$mode]=$(awk '/^summary:/ {s += $2} END {print s}' "$dir/cg.out.1")
    COPY[$server-$mode]=$(callgrind_annotate --inclusive=no --auto=no --threshold=100 "$dir/cg.out.1" 2>/dev/null \
      | awk '/__mem(cpy|move)/ {gsub(",", "", $1); s += $1} END {print s + 0}')
  done
done

mkdir -p bench/results
{
  echo "| server | mode | instructions per call | ratio to bare rmcp | of which memcpy | without memcpy | ratio without memcpy |"
  echo "|---|---|---:|---:|---:|---:|---:|"
  for mode in $MODES; do
    for server in $SERVERS; do
      all=${IR[$server-$mode]}; copy=${COPY[$server-$mode]}
      ratio=-; ratio_rest=-
      if [ -n "${IR[bare-$mode]:-}" ]; then
        ratio=$(python3 -c "print(f'{$all / ${IR[bare-$mode]}:.2f}')")
        ratio_rest=$(python3 -c "print(f'{($all - $copy) / (${IR[bare-$mode]} - ${COPY[bare-$mode]}):.2f}')")
      fi
      echo "| $server | $mode | $(( all / CALLS )) | $ratio | $(( copy / CALLS )) | $(( (all - copy) / CALLS )) | $ratio_rest |"
    done
  done
  echo
  echo "(callgrind, $CALLS sequential calls after 100 to warm up, one connection; $(date -u +%Y-%m-%d))"
} | tee bench/results/instructions.md
