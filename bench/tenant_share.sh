#!/usr/bin/env bash
# The per-tenant share of the store's pool on the call path: MCP `tools/call` at c=64 on
# Postgres, session mode (2025-11-25; one session, and SESSIONS=32 sessions taken in
# turn; a session's SSE events are tenant statements) and stateless (2026-07-28), through
# one gateway with `database.max_connections_per_tenant` and `database.reserved_connections`
# at their defaults (4, and 4 of the 16 kept from all tenants) and one with the share at
# 16 and no reserve (the whole app pool, as before either existed), alternated.
#
#   bench/tenant_share.sh                       # Postgres on 127.0.0.1:5432, user postgres
#   PGURL=postgres://u@host:5432 ROUNDS=5 bench/tenant_share.sh
#
# Prints each round's wrk summary (requests/s, p50, p99) per share and mode.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
ensure_wrk
release_bins
CT='content-type: application/json'; ACCEPT='accept: application/json, text/event-stream'
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432}
WORK=$(mktemp -d); pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  rm -rf "$WORK"
  for cap in 4 16; do psql -q "$PGURL/postgres" -c "drop database if exists tg_share_$cap" 2>/dev/null || true; done
}
trap cleanup EXIT
SESSIONS=${SESSIONS:-32}
declare -A PORT AUTH SID MANY
for cap in 4 16; do
  psql -q "$PGURL/postgres" -c "drop database if exists tg_share_$cap" -c "create database tg_share_$cap"
  PORT[$cap]=$(free_port); mkdir -p "$WORK/$cap"
  reserve=(); [ "$cap" = 16 ] && reserve=(TOOLGATE_DATABASE__RESERVED_CONNECTIONS=0)
  env "${reserve[@]}" DATABASE_URL="$PGURL/tg_share_$cap" TOOLGATE_DATABASE__MAX_CONNECTIONS_PER_TENANT=$cap \
    "$BIN/toolgate" serve --listen "127.0.0.1:${PORT[$cap]}" --data-dir "$WORK/$cap" >/dev/null 2>"$WORK/$cap.log" & pids+=($!)
done
for cap in 4 16; do
  for _ in $(seq 100); do [ -s "$WORK/$cap/admin-api-key" ] && break; sleep 0.1; done
  AUTH[$cap]="authorization: Bearer $(cat "$WORK/$cap/admin-api-key")"
  wait_ready "${PORT[$cap]}" "${AUTH[$cap]}"
  SID[$cap]=$(session "${PORT[$cap]}" "${AUTH[$cap]}")
  MANY[$cap]=$(for _ in $(seq "$SESSIONS"); do session "${PORT[$cap]}" "${AUTH[$cap]}"; done | tr '\n' ' ')
done
for r in $(seq "$ROUNDS"); do
  for cap in 4 16; do
    run "share$cap" "${PORT[$cap]}" session 64 "$r" "${AUTH[$cap]}" "${SID[$cap]}"
    MCP_SESSIONS="${MANY[$cap]}" run "share$cap-${SESSIONS}sessions" "${PORT[$cap]}" session 64 "$r" "${AUTH[$cap]}" "${SID[$cap]}"
    run "share$cap" "${PORT[$cap]}" stateless 64 "$r" "${AUTH[$cap]}"
  done
done
for f in "$WORK"/*.json; do echo "$(basename "$f" .json) $(cat "$f")"; done
footer
