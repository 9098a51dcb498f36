#!/usr/bin/env bash
# The gateway's memory while it answers reads of large rows: ROWS audit rows of ~900 kB
# each (echo calls whose message its schema refuses: refused calls are audited with
# their arguments, up to the request body's bound), then each read by a gateway started
# for it, printing its peak resident memory (VmHWM) before the read (the baseline, in the
# same run) and after it, and their ratio. This tree's gateway keeps the arguments whole
# (`audit.max_argument_bytes = 0`; by default it keeps ~64 KiB of them), so both builds
# read the same rows; builds before that setting keep them whole anyway.
#
#   bench/large_rows.sh                                   # this tree's release build
#   BEFORE=/path/to/other/release bench/large_rows.sh     # and another build's, first
#   ROWS=400 bench/large_rows.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
release_bins
ROWS=${ROWS:-400}
WORK=$(mktemp -d); pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

hwm() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }

# serve NAME BIN: a gateway on NAME's data directory; sets PORT, PID, KEY.
serve() {
  PORT=$(free_port); mkdir -p "$WORK/$1"
  env ${SERVE_ENV:-} "$2/toolgate" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/$1" >/dev/null 2>>"$WORK/$1.log" & pids+=($!)
  PID=$!
  for _ in $(seq 100); do [ -s "$WORK/$1/admin-api-key" ] && break; sleep 0.1; done
  KEY=$(cat "$WORK/$1/admin-api-key")
  wait_ready "$PORT" "authorization: Bearer $KEY"
}

FILL='
import json, sys, threading, urllib.request, urllib.error
port, key, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = json.dumps({"arguments": {"message": "x" * 900_000}}).encode()
def call():
    r = urllib.request.Request(f"http://127.0.0.1:{port}/v1/tools/echo/invoke", data=body,
        headers={"authorization": "Bearer " + key, "content-type": "application/json"})
    try:
        urllib.request.urlopen(r).read()
    except urllib.error.HTTPError as e:
        assert e.code == 400, e.code
def fill(n):
    for _ in range(n):
        call()
threads = [threading.Thread(target=fill, args=(rows // 8,)) for _ in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
'

one() {
  local name=$1 bin=$2
  serve "$name" "$bin"
  python3 -c "$FILL" "$PORT" "$KEY" "$ROWS"
  kill "$PID"; wait "$PID" 2>/dev/null || true
  # Each read by a gateway started for it: its peak is that read's alone.
  for read in "GET /v1/audit?limit=1000" "GET /v1/audit/summary?minutes=1440" "POST /v1/audit/verify"; do
    serve "$name" "$bin"
    local base started bytes peak; base=$(hwm "$PID"); started=$(date +%s.%N)
    bytes=$(curl -s -o /dev/null -w '%{size_download}' -X "${read%% *}" -H "authorization: Bearer $KEY" \
      "http://127.0.0.1:$PORT${read#* }")
    peak=$(hwm "$PID")
    printf '%-7s %-36s %8s kB before, %8s kB peak: %6.2fx  (%s bytes answered, %.2f s)\n' "$name" "$read" \
      "$base" "$peak" "$(echo "$peak / $base" | bc -l)" "$bytes" "$(echo "$(date +%s.%N) - $started" | bc -l)"
    kill "$PID"; wait "$PID" 2>/dev/null || true
  done
}

if [ -n "${BEFORE:-}" ]; then one before "$BEFORE"; fi
SERVE_ENV=TOOLGATE_AUDIT__MAX_ARGUMENT_BYTES=0 one this "$BIN"
echo "($ROWS rows of ~900 kB; each read by a gateway started for it, after one call; $(nproc) cores; $(date -u +%Y-%m-%d))"
