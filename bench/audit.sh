#!/usr/bin/env bash
# Durable audit on Postgres: the gateway as shipped vs. the same gateway with its audit
# sink replaced by one that records nothing (same auth, same Postgres store for keys).
#
#   bench/audit.sh                    # 3 rounds of 5 s per point, concurrency 1, 16, 64
#   BIN=/tmp/base bench/audit.sh          # binaries built elsewhere (another revision)
#
# Needs Postgres on 127.0.0.1:5432 (user postgres; BENCH_PG overrides the admin
# URL). Creates two databases and drops them afterwards. Writes bench/results/audit.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

ADMIN=${BENCH_PG:-postgres://postgres@127.0.0.1:5432/postgres}
BASE=${ADMIN%/*}
ensure_oha
release_bins
WORK=$(mktemp -d)
DB_A=toolgate_bench_audit_$$
DB_B=toolgate_bench_noaudit_$$
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  psql "$ADMIN" -qc "drop database if exists $DB_A with (force)" -c "drop database if exists $DB_B with (force)" || true
  rm -rf "$WORK"
}
trap cleanup EXIT
psql "$ADMIN" -qc "create database $DB_A" -c "create database $DB_B"

GW=$(free_port); NOAUDIT=$(free_port)
mkdir -p "$WORK/gw" "$WORK/noaudit"
DATABASE_URL="$BASE/$DB_A" "$BIN/toolgate" serve --listen "127.0.0.1:$GW" --data-dir "$WORK/gw" >/dev/null 2>"$WORK/gw.log" & pids+=($!)
DATABASE_URL="$BASE/$DB_B" "$BIN/gateway-unaudited" "127.0.0.1:$NOAUDIT" "$WORK/noaudit" >/dev/null 2>"$WORK/noaudit.log" & pids+=($!)
for _ in $(seq 100); do [ -s "$WORK/gw/admin-api-key" ] && [ -s "$WORK/noaudit/admin-api-key" ] && break; sleep 0.1; done
GW_AUTH="authorization: Bearer $(cat "$WORK/gw/admin-api-key")"
NA_AUTH="authorization: Bearer $(cat "$WORK/noaudit/admin-api-key")"
wait_ready "$GW" "$GW_AUTH"; wait_ready "$NOAUDIT" "$NA_AUTH"

mkdir -p bench/results
{
  echo "| concurrency | audited req/s | audited p50 ms | audited p99 ms | no-audit req/s | no-audit p50 ms | no-audit p99 ms | ratio audited/no-audit |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
  for c in $CONCURRENCY; do
    for r in $(seq "$ROUNDS"); do
      measure noaudit "$NOAUDIT" "$c" "$r" "$NA_AUTH"
      measure audited "$GW" "$c" "$r" "$GW_AUTH"
    done
    summarize audited noaudit "$c"
  done
  echo
  footer
} | tee bench/results/audit.md
rows=$(psql "$BASE/$DB_A" -Atc "select count(*) from audit_log")
echo "audit rows written by the audited gateway: $rows" | tee -a bench/results/audit.md
