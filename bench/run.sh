#!/usr/bin/env bash
# REST invoke: the gateway as shipped (auth, SQLite store, durable audit) vs. a bare axum
# handler doing the same JSON echo, and the gateway without its audit sink (same auth and
# store) to separate the two costs.
#
#   bench/run.sh                      # 3 rounds of 5 s per point, concurrency 1, 16, 64
#   BIN=/tmp/base bench/run.sh          # binaries built elsewhere (another revision)
#   DURATION=10s ROUNDS=5 bench/run.sh
#
# Builds release binaries, installs oha (pinned) into bench/.tools if missing, prints
# tables and writes them to bench/results/rest.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

ensure_oha
release_bins
WORK=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

GW=$(free_port); BARE=$(free_port); NOAUDIT=$(free_port)
mkdir -p "$WORK/gw" "$WORK/noaudit"
env -u DATABASE_URL "$BIN/toolgate" serve --listen "127.0.0.1:$GW" --data-dir "$WORK/gw" >/dev/null 2>"$WORK/gw.log" & pids+=($!)
env -u DATABASE_URL "$BIN/gateway-unaudited" "127.0.0.1:$NOAUDIT" "$WORK/noaudit" >/dev/null 2>"$WORK/noaudit.log" & pids+=($!)
"$BIN/bare-echo" "127.0.0.1:$BARE" >/dev/null & pids+=($!)
for _ in $(seq 100); do [ -s "$WORK/gw/admin-api-key" ] && [ -s "$WORK/noaudit/admin-api-key" ] && break; sleep 0.1; done
GW_AUTH="authorization: Bearer $(cat "$WORK/gw/admin-api-key")"
NA_AUTH="authorization: Bearer $(cat "$WORK/noaudit/admin-api-key")"
wait_ready "$GW" "$GW_AUTH"; wait_ready "$NOAUDIT" "$NA_AUTH"; wait_ready "$BARE"

mkdir -p bench/results
{
  echo "gateway as shipped (SQLite) vs. bare axum echo"
  echo
  echo "| concurrency | gateway req/s | gateway p50 ms | gateway p99 ms | bare req/s | bare p50 ms | bare p99 ms | ratio gateway/bare |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
  for c in $CONCURRENCY; do
    for r in $(seq "$ROUNDS"); do
      measure bare "$BARE" "$c" "$r"
      measure gateway "$GW" "$c" "$r" "$GW_AUTH"
      measure noaudit "$NOAUDIT" "$c" "$r" "$NA_AUTH"
    done
    summarize gateway bare "$c"
  done
  echo
  echo "gateway without its audit sink (same auth and SQLite store) vs. bare axum echo"
  echo
  echo "| concurrency | unaudited req/s | unaudited p50 ms | unaudited p99 ms | bare req/s | bare p50 ms | bare p99 ms | ratio unaudited/bare |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
  for c in $CONCURRENCY; do summarize noaudit bare "$c"; done
  echo
  footer
} | tee bench/results/rest.md
