#!/usr/bin/env bash
# Agent runs: the gateway's own cost per turn with a local provider answering at once
# (one echo tool call per turn, durable audit row and journal), on embedded SQLite and on
# Postgres, against one REST tool call in the same run. See bench/src/bin/agent_turns.rs.
#
#   bench/agent.sh                 # ROUNDS (3) rounds per backend; RUNS=50 TURNS=10
#
# Needs Postgres on 127.0.0.1:5432 (user postgres; BENCH_PG overrides the admin
# URL); creates a database per round and drops it. Writes bench/results/agent.md.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
RUNS=${RUNS:-50}
TURNS=${TURNS:-10}
ADMIN=${BENCH_PG:-postgres://postgres@127.0.0.1:5432/postgres}
BASE=${ADMIN%/*}
DB=toolgate_bench_agent_$$
trap 'psql "$ADMIN" -qc "drop database if exists $DB with (force)" >/dev/null 2>&1 || true' EXIT
cargo build --quiet --release -p toolgate-bench --bin agent-turns

mkdir -p bench/results
{
  echo "| backend | overhead per turn, all-in, p50 ms | p90 ms | p99 ms | one more turn ms | fixed per run ms | model call p50 ms | REST echo invoke p50 ms | ratio per-turn/REST invoke |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  for round in $(seq "$ROUNDS"); do
    env -u DATABASE_URL target/release/agent-turns "$RUNS" "$TURNS" 2>/dev/null | grep '^| sqlite'
    psql "$ADMIN" -qc "create database $DB"
    DATABASE_URL="$BASE/$DB" target/release/agent-turns "$RUNS" "$TURNS" 2>/dev/null | grep '^| postgres'
    psql "$ADMIN" -qc "drop database $DB with (force)"
  done
} | tee bench/results/agent.md
