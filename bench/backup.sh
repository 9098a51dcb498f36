#!/usr/bin/env bash
# `toolgate backup` on the embedded SQLite store while calls run: how long a copy takes
# and how large it is for the rows the store holds, and what it costs the calls running
# beside it — REST invoke throughput and p99 during the copy against the same gateway
# without one, alternated, in one run.
#
#   bench/backup.sh                  # FILL=20s of calls at c=64 first, then 3 rounds of 5 s at C=16
#   BIN=/tmp/base bench/backup.sh    # binaries built elsewhere (another revision)
#   NICE="nice -n 19 ionice -c 3" bench/backup.sh   # the copy run at the lowest priorities
#
# Writes bench/results/backup.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

FILL=${FILL:-20s}
C=${C:-16}
ensure_wrk
release_bins
with_workdir

PORT=$(free_port)
mkdir -p "$WORK/gw"
env -u DATABASE_URL "$BIN/toolgate" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/gw" \
  >/dev/null 2>"$WORK/gw.log" & pids+=($!)
for _ in $(seq 100); do [ -s "$WORK/gw/admin-api-key" ] && break; sleep 0.1; done
AUTH="authorization: Bearer $(cat "$WORK/gw/admin-api-key")"
wait_ready "$PORT" "$AUTH"
echo "filling the store: $FILL of calls at c=64…" >&2
DURATION=$FILL run fill "$PORT" rest 64 0 "$AUTH"

rows() {
  python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from audit_log").fetchone()[0])' "$1"
}

# backup ROUND: one copy, timed; "seconds bytes rows" appended to $WORK/copies.
backup() {
  local to="$WORK/copy-$1.db" start end
  start=$(date +%s.%N)
  env -u DATABASE_URL ${NICE:-} "$BIN/toolgate" backup --to "$to" --data-dir "$WORK/gw" >/dev/null
  end=$(date +%s.%N)
  echo "$(python3 -c "print(round($end - $start, 3))") $(stat -c %s "$to") $(rows "$to")" >> "$WORK/copies"
  rm -f "$to"
}

mkdir -p bench/results
{
  echo "| | concurrency | during a backup req/s | p50 ms | p99 ms | without req/s | p50 ms | p99 ms | ratio during/without |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  for r in $(seq "$ROUNDS"); do
    run without "$PORT" rest "$C" "$r" "$AUTH"
    run during "$PORT" rest "$C" "$r" "$AUTH" &
    load=$!
    sleep 0.5
    backup "$r"
    wait "$load"
  done
  row rest "$C" during without
  echo
  echo "| copy | seconds | bytes | audit rows in it |"
  echo "|---:|---:|---:|---:|"
  n=0
  while read -r secs bytes count; do
    n=$((n + 1))
    echo "| $n | $secs | $bytes | $count |"
  done < "$WORK/copies"
  echo
  footer
} | tee bench/results/backup.md
