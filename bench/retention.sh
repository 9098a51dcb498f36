#!/usr/bin/env bash
# Audit retention on the embedded SQLite store (or, with PG=1, on this machine's Postgres:
# one database per copy, dropped afterwards), in one run:
# 1. `toolgate audit verify` of a long chain: seconds and peak memory, this revision
#    against BASE_BIN (an earlier revision's binaries; it read the whole chain at once),
#    alternated, each on its own copy of the same store (made by `toolgate backup`, or
#    `create database … template …` on Postgres).
# 2. `toolgate audit prune` beside a running gateway: how long each prune takes and how
#    many rows it deletes, and what it costs the calls running beside it — REST invoke
#    throughput and p99 during a prune against the same gateway without one, alternated.
#    The first prune removes the whole fill (it verifies and deletes every row); later
#    ones remove the rows of the round before.
#
#   BASE_BIN=/tmp/base bench/retention.sh   # FILL=20s of calls at c=64, 3 rounds of 5 s at C=16
#   BIN=/tmp/new BASE_BIN=/tmp/base bench/retention.sh
#   PG=1 BIN=/tmp/new BASE_BIN=/tmp/base bench/retention.sh   # the same on Postgres
#
# Writes bench/results/retention.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

FILL=${FILL:-20s}
C=${C:-16}
BASE_BIN=${BASE_BIN:-}
ensure_wrk
release_bins
WORK=$(mktemp -d)
pids=()
PG=${PG:-}
PG_SERVER=${PG_SERVER:-postgres://postgres@127.0.0.1:5432}
# db WHO: the Postgres database of the copy named WHO.
db() { echo "toolgate_bench_retention_$1"; }
# store_env DIR: the environment naming DIR's store (its own database with PG=1).
store_env() { if [ -n "$PG" ]; then echo "DATABASE_URL=$PG_SERVER/$(db "$(basename "$1")")"; else echo "BENCH_STORE=sqlite"; fi; }
sql() { psql "$PG_SERVER/postgres" -qAtc "$1"; }
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
  if [ -n "$PG" ]; then for who in fill new base; do sql "drop database if exists $(db $who)" || true; done; fi
}
trap cleanup EXIT

# serve BIN DIR PORT: a gateway signing checkpoints every second, in the background.
serve() {
  mkdir -p "$2"
  env -u DATABASE_URL "$(store_env "$2")" TOOLGATE_AUDIT__CHECKPOINT_SECS=1 "$1/toolgate" serve \
    --listen "127.0.0.1:$3" --data-dir "$2" >/dev/null 2>"$2.log" & pids+=($!)
  for _ in $(seq 100); do [ -s "$2/admin-api-key" ] && break; sleep 0.1; done
  AUTH="authorization: Bearer $(cat "$2/admin-api-key")"
  wait_ready "$3" "$AUTH"
}
stop() { kill -TERM "${pids[-1]}"; wait "${pids[-1]}" || true; unset 'pids[-1]'; }

# The fill is written by the oldest binary, so that every binary can open its copy.
FILLER=${BASE_BIN:-$BIN}
if [ -n "$PG" ]; then for who in fill new base; do sql "drop database if exists $(db $who)"; done; sql "create database $(db fill)"; fi
PORT=$(free_port)
serve "$FILLER" "$WORK/fill" "$PORT"
echo "filling the store: $FILL of calls at c=64…" >&2
DURATION=$FILL run fill "$PORT" rest 64 0 "$AUTH"
stop
for who in new ${BASE_BIN:+base}; do
  mkdir -p "$WORK/$who"
  if [ -n "$PG" ]; then
    sql "create database $(db "$who") template $(db fill)"
  else
    env -u DATABASE_URL "$FILLER/toolgate" backup --to "$WORK/$who/toolgate.db" --data-dir "$WORK/fill" >/dev/null
  fi
  cp "$WORK/fill/admin-api-key" "$WORK/fill/audit-signing-key" "$WORK/fill/upstream-credentials-key" "$WORK/$who/" 2>/dev/null || true
done
if [ -n "$PG" ]; then
  ROWS=$(psql "$PG_SERVER/$(db new)" -qAtc "select count(*) from audit_log")
else
  ROWS=$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from audit_log").fetchone()[0])' "$WORK/new/toolgate.db")
fi

# verify BIN DIR: "seconds peak-KiB" of one `audit verify`.
verify() {
  python3 - "$1/toolgate" "$2" "$(store_env "$2")" <<'PY'
import resource, subprocess, sys, time
start = time.monotonic()
name, value = sys.argv[3].split("=", 1)
done = subprocess.run([sys.argv[1], "audit", "verify", "--tenant", "default", "--data-dir", sys.argv[2]],
                      capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", name: value})
if done.returncode != 0:
    sys.exit(f"verify failed: {done.stderr}")
print(f"{time.monotonic() - start:.3f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
PY
}

{
  echo "| round | verify, this revision: s / peak MiB | ${BASE_BIN:+BASE_BIN: s / peak MiB | memory ratio |}"
  echo "|---:|---:|${BASE_BIN:+---:|---:|}"
  for r in $(seq "$ROUNDS"); do
    read -r ns nk < <(verify "$BIN" "$WORK/new")
    line="| $r | $ns / $((nk / 1024)) |"
    if [ -n "$BASE_BIN" ]; then
      read -r bs bk < <(verify "$BASE_BIN" "$WORK/base")
      line="$line $bs / $((bk / 1024)) | $(python3 -c "print(round($nk / $bk, 3))") |"
    fi
    echo "$line"
  done
} > "$WORK/verify.md"

PORT=$(free_port)
serve "$BIN" "$WORK/new" "$PORT"
: > "$WORK/prunes"
# prune: one prune up to now, timed; "seconds rows-deleted" appended to $WORK/prunes.
prune() {
  local start end out
  start=$(date +%s.%N)
  out=$(env -u DATABASE_URL "$(store_env "$WORK/new")" "$BIN/toolgate" audit prune --before "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --data-dir "$WORK/new")
  end=$(date +%s.%N)
  echo "$(python3 -c "print(round($end - $start, 3))") $(echo "$out" | sed -n 's/.*: \([0-9]*\) rows.* deleted.*/\1/p')" >> "$WORK/prunes"
}
for r in $(seq "$ROUNDS"); do
  run without "$PORT" rest "$C" "$r" "$AUTH"
  run during "$PORT" rest "$C" "$r" "$AUTH" &
  load=$!
  sleep 0.5
  prune
  wait "$load"
done

mkdir -p bench/results
{
  echo "Store: $ROWS audit rows of one tenant ($([ -n "$PG" ] && echo Postgres || echo SQLite)), filled for $FILL at c=64."
  echo
  cat "$WORK/verify.md"
  echo
  echo "| | concurrency | during a prune req/s | p50 ms | p99 ms | without req/s | p50 ms | p99 ms | ratio during/without |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  row rest "$C" during without
  echo
  echo "| prune | seconds | rows deleted |"
  echo "|---:|---:|---:|"
  n=0
  while read -r secs deleted; do
    n=$((n + 1))
    echo "| $n | $secs | $deleted |"
  done < "$WORK/prunes"
  echo
  footer
} | tee bench/results/retention.md
