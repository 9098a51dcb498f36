#!/usr/bin/env bash
# One tenant's principal asking for audit summaries without pause (32 clients), beside
# another tenant's reads and calls and /readyz: with each tenant held to its share of the
# store's pool (`database.max_connections_per_tenant`, default 4) and with the share
# lifted (64, more than the pool: as before the bulkhead), in one run.
#
#   bench/noisy_reads.sh                              # embedded SQLite
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/x bench/noisy_reads.sh   # that server
#                                                     # (two databases x_4, x_64 made and dropped)
#   ROWS=20000 HAMMERERS=32 RUN_SECS=15 bench/noisy_reads.sh
#
# Prints one line per point: the noisy tenant's answers, the quiet tenant's answers and
# p50/p99, /readyz's answers.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
release_bins
ROWS=${ROWS:-20000}; HAMMERERS=${HAMMERERS:-32}; RUN_SECS=${RUN_SECS:-15}
WORK=$(mktemp -d); pids=()
PG=${DATABASE_URL:-}
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  rm -rf "$WORK"
  if [ -n "$PG" ]; then for cap in 4 64; do psql -q "${PG%/*}/postgres" -c "drop database if exists ${PG##*/}_$cap" 2>/dev/null || true; done; fi
}
trap cleanup EXIT
for cap in 4 64; do
  port=$(free_port); mkdir -p "$WORK/$cap"
  if [ -n "$PG" ]; then
    psql -q "${PG%/*}/postgres" -c "drop database if exists ${PG##*/}_$cap" -c "create database ${PG##*/}_$cap"
    export DATABASE_URL="${PG}_$cap"
  fi
  TOOLGATE_DATABASE__MAX_CONNECTIONS_PER_TENANT=$cap \
    "$BIN/toolgate" serve --listen "127.0.0.1:$port" --data-dir "$WORK/$cap" >/dev/null 2>"$WORK/$cap.log" & pids+=($!)
  for _ in $(seq 100); do [ -s "$WORK/$cap/admin-api-key" ] && break; sleep 0.1; done
  wait_ready "$port" "authorization: Bearer $(cat "$WORK/$cap/admin-api-key")"
  base="http://127.0.0.1:$port"; keyfile="$WORK/$cap/admin-api-key"
  python3 bench/noisy_reads.py "$base" "$keyfile" setup "$ROWS"
  for quiet in /v1/approvals /v1/tools/echo/invoke; do
    for hammer in 0 "$HAMMERERS"; do
      printf 'share %-2s  quiet %-22s  noisy readers %-3s  ' "$cap" "$quiet" "$hammer"
      python3 bench/noisy_reads.py "$base" "$keyfile" run "$hammer" "$RUN_SECS" "$quiet"
    done
  done
  kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
done
echo "($(nproc) cores shared by the gateway, the database and the Python clients; $(date -u +%Y-%m-%d))"
