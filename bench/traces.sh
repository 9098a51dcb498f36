#!/usr/bin/env bash
# Instructions per REST call with traces off, every trace exported, and 10 % of traces
# sampled (OTEL_TRACES_SAMPLER=traceidratio, 0.1), counted by valgrind's callgrind over
# every thread of the gateway (the OTLP receiver, tests/clients/otlp_receiver.py, is
# another process and not counted). Metrics export is off and the span batch delay 1 s,
# so the exports of the counted calls fall inside the window. Deterministic, unlike
# throughput: a change's cost reads without the machine's noise (see
# bench/instructions.sh for the caveats of counting).
#
#   bench/traces.sh              # 300 calls per gateway
#   CALLS=1000 bench/traces.sh
#
# Prints a table and writes it to bench/results/traces.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

CALLS=${CALLS:-300}
command -v valgrind >/dev/null || apt-get install -y -qq valgrind >/dev/null
cargo build --quiet --release -p toolgate-server
WORK=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
RECEIVER=$(free_port)
start_receiver "$RECEIVER"; pids+=($!)
OTLP=(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$RECEIVER" OTEL_METRICS_EXPORTER=none OTEL_BSP_SCHEDULE_DELAY=1000)

declare -A IR
for mode in off every sampled; do
  case $mode in
    off) extra=() ;;
    every) extra=("${OTLP[@]}") ;;
    sampled) extra=("${OTLP[@]}" OTEL_TRACES_SAMPLER=traceidratio OTEL_TRACES_SAMPLER_ARG=0.1) ;;
  esac
  dir="$WORK/$mode"; mkdir -p "$dir"; port=$(free_port)
  env -u DATABASE_URL "${extra[@]}" valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
    target/release/toolgate serve --listen "127.0.0.1:$port" --data-dir "$dir" >/dev/null 2>"$dir/log" & pid=$!
  for _ in $(seq 600); do [ -s "$dir/admin-api-key" ] && break; sleep 0.2; done
  key=$(cat "$dir/admin-api-key")
  for _ in $(seq 600); do python3 bench/rest_calls.py "$port" "$key" 1 2>/dev/null && break; sleep 0.2; done
  python3 bench/rest_calls.py "$port" "$key" 100
  callgrind_control -z "$pid" >/dev/null 2>&1
  python3 bench/rest_calls.py "$port" "$key" "$CALLS"
  sleep 2  # the batch processor's last export of the counted spans
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill "$pid"; wait "$pid" 2>/dev/null || true
  IR[$mode]=$(awk '/^summary:/ {s += $2} END {print s}' "$dir/cg.out.1")
done

mkdir -p bench/results
{
  echo "Instructions per REST call (callgrind, $CALLS sequential calls, all gateway threads)"
  echo
  echo "| traces | instructions per call | vs. off |"
  echo "|---|---:|---:|"
  for mode in off every sampled; do
    awk -v ir="${IR[$mode]}" -v off="${IR[off]}" -v n="$CALLS" -v m="$mode" \
      'BEGIN { printf "| %s | %.1fk | %+.1f %% |\n", m, ir / n / 1000, (ir / off - 1) * 100 }'
  done
} | tee bench/results/traces.md
