#!/usr/bin/env bash
# REST invoke, the gateway as shipped at another revision (A) vs. this working tree (B):
# both with their SQLite store and durable audit, driven alternately in one run, so that
# a change's cost is read as a ratio on the same machine at the same time.
#
#   bench/ab.sh 913ce9a                 # 3 rounds of 5 s per point, concurrency 1, 16, 64
#   DURATION=10s ROUNDS=5 bench/ab.sh HEAD~3
#   AB_POSTGRES=1 bench/ab.sh HEAD~1    # each on a Postgres database of its own (created
#                                       # on 127.0.0.1:5432 and dropped afterwards;
#                                       # BENCH_PG overrides the admin URL)
#   AB_MCP=1 bench/ab.sh HEAD~1         # MCP tools/call of echo instead, stateless
#                                       # (2026-07-28) and in one session, driven by wrk
#   AB_NEW_CONNECTIONS=1 bench/ab.sh HEAD~1  # REST, every call on a connection of its own
#
# Builds both release binaries (the other revision in a temporary git worktree, sharing
# this target directory's dependencies), installs oha if missing, prints a table and
# writes it to bench/results/ab.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

REV=${1:?usage: bench/ab.sh REVISION}
AB_MCP=${AB_MCP:-}
AB_NEW_CONNECTIONS=${AB_NEW_CONNECTIONS:-}
[ -n "$AB_NEW_CONNECTIONS" ] && OHA_FLAGS=--disable-keepalive
if [ -n "$AB_MCP" ]; then ensure_wrk; else ensure_oha; fi
WORK=$(mktemp -d)
TREE="$WORK/tree"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  git worktree remove --force "$TREE" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
STORE=SQLite
DB_A=; DB_B=
if [ -n "${AB_POSTGRES:-}" ]; then
  ADMIN=${BENCH_PG:-postgres://postgres@127.0.0.1:5432/postgres}
  DB_A=toolgate_bench_a_$$; DB_B=toolgate_bench_b_$$
  STORE=Postgres
  drop_dbs() { psql "$ADMIN" -qc "drop database if exists $DB_A with (force)" -c "drop database if exists $DB_B with (force)" || true; }
  trap 'cleanup; drop_dbs' EXIT
  psql "$ADMIN" -qc "create database $DB_A" -c "create database $DB_B"
fi
# store_env DB: the environment that points a gateway at its store.
store_env() {
  if [ -n "$1" ]; then echo "DATABASE_URL=${ADMIN%/*}/$1"; else echo "-u DATABASE_URL"; fi
}

git worktree add --quiet --detach "$TREE" "$REV"
CARGO_TARGET_DIR="$PWD/target" cargo build --quiet --release --manifest-path "$TREE/Cargo.toml" -p toolgate-server
cp target/release/toolgate "$WORK/toolgate-a"
# Both builds share one target directory, and Cargo names a workspace crate's artifacts
# the same whatever its path: A's fresh checkout left them newer than this tree's
# sources, which would pass as up to date. Make this tree's sources the newer ones.
touch crates/*/src/lib.rs
cargo build --quiet --release -p toolgate-server
cp target/release/toolgate "$WORK/toolgate-b"

A=$(free_port); B=$(free_port)
mkdir -p "$WORK/a" "$WORK/b"
env $(store_env "$DB_A") "$WORK/toolgate-a" serve --listen "127.0.0.1:$A" --data-dir "$WORK/a" >/dev/null 2>"$WORK/a.log" & pids+=($!)
env $(store_env "$DB_B") "$WORK/toolgate-b" serve --listen "127.0.0.1:$B" --data-dir "$WORK/b" >/dev/null 2>"$WORK/b.log" & pids+=($!)
for _ in $(seq 100); do [ -s "$WORK/a/admin-api-key" ] && [ -s "$WORK/b/admin-api-key" ] && break; sleep 0.1; done
A_AUTH="authorization: Bearer $(cat "$WORK/a/admin-api-key")"
B_AUTH="authorization: Bearer $(cat "$WORK/b/admin-api-key")"
wait_ready "$A" "$A_AUTH"; wait_ready "$B" "$B_AUTH"

mkdir -p bench/results
{
  echo "gateway at $(git rev-parse --short "$REV") (A) vs. this tree at $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes') (B), $STORE, durable audit, $([ -n "$AB_MCP" ] && echo "MCP tools/call" || echo "REST invoke")$([ -n "$AB_NEW_CONNECTIONS" ] && echo ", a new connection per call")"
  echo
  if [ -n "$AB_MCP" ]; then
    A_SID=$(session "$A" "$A_AUTH"); B_SID=$(session "$B" "$B_AUTH")
    echo "| mode | concurrency | B req/s | B p50 ms | B p99 ms | A req/s | A p50 ms | A p99 ms | ratio B/A |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    for mode in stateless session; do
      for c in $CONCURRENCY; do
        for r in $(seq "$ROUNDS"); do
          run a "$A" "$mode" "$c" "$r" "$A_AUTH" "$A_SID"
          run b "$B" "$mode" "$c" "$r" "$B_AUTH" "$B_SID"
        done
        row "$mode" "$c" b a
      done
    done
  else
    echo "| concurrency | B req/s | B p50 ms | B p99 ms | A req/s | A p50 ms | A p99 ms | ratio B/A |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
    for c in $CONCURRENCY; do
      for r in $(seq "$ROUNDS"); do
        measure a "$A" "$c" "$r" "$A_AUTH"
        measure b "$B" "$c" "$r" "$B_AUTH"
      done
      summarize b a "$c"
    done
  fi
  echo
  footer
} | tee bench/results/ab${AB_MCP:+-mcp}.md
