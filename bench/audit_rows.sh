#!/usr/bin/env bash
# The durable audit alone: the real writer's CPU per row, by thread, on SQLite and on
# Postgres (crates/toolgate-store/examples/audit_rows.rs). Issue 29's first target: the
# audit's CPU per row, all its threads, at most 6 µs.
#
#   bench/audit_rows.sh                      # both backends, concurrency 64, 8 s each
#   BACKENDS=sqlite C=16 DURATION=5 bench/audit_rows.sh
#
# Postgres: 127.0.0.1:5432, user postgres (BENCH_PG overrides the admin URL); a
# database is created for the run and dropped afterwards. Writes bench/results/audit_rows.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ADMIN=${BENCH_PG:-postgres://postgres@127.0.0.1:5432/postgres}
BACKENDS=${BACKENDS:-"sqlite postgres"}
C=${C:-64}
SECONDS_EACH=${DURATION:-8}
DB=toolgate_bench_rows_$$
cleanup() { psql "$ADMIN" -qc "drop database if exists $DB with (force)" >/dev/null 2>&1 || true; }
trap cleanup EXIT
cargo build --quiet --release -p toolgate-store --example audit_rows
BIN=${CARGO_TARGET_DIR:-target}/release/examples/audit_rows
mkdir -p bench/results
: > bench/results/audit_rows.md
for backend in $BACKENDS; do
  if [ "$backend" = postgres ]; then
    psql "$ADMIN" -qc "drop database if exists $DB with (force)" -c "create database $DB" >/dev/null
    DATABASE_URL="${ADMIN%/*}/$DB" "$BIN" postgres "$C" "$SECONDS_EACH" | tee -a bench/results/audit_rows.md
  else
    env -u DATABASE_URL "$BIN" sqlite "$C" "$SECONDS_EACH" | tee -a bench/results/audit_rows.md
  fi
  echo | tee -a bench/results/audit_rows.md
done
echo "($(nproc) cores; $(git rev-parse --short HEAD)$(git diff --quiet || echo +changes); $(date -u +%Y-%m-%d))" | tee -a bench/results/audit_rows.md
