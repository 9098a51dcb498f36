#!/usr/bin/env bash
# `toolgate audit prune` on the embedded SQLite store beside a gateway held at full load:
# does it finish, how fast does it delete, and what do the calls beside it see. In one run:
# a store is filled (FILL of REST calls at c=64) and copied twice (`toolgate backup`);
# the first copy is pruned with no gateway running (the baseline); a gateway is started on
# the second, runs C concurrent REST calls for ALONE seconds (the calls' baseline), then
# again, and the same prune is started PRUNE_AFTER seconds into those calls, which stop
# when it ends (at most LOAD seconds).
# Prints each prune's seconds and rows per second, and the calls' throughput and p99
# alone and beside the prune, each with its ratio.
#
#   BIN=target/release bench/prune_beside_load.sh  # FILL=15s C=64 ALONE=10 LOAD=600 PRUNE_AFTER=3
#
# Writes bench/results/prune_beside_load.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

FILL=${FILL:-15s}
C=${C:-64}
LOAD=${LOAD:-600}
PRUNE_AFTER=${PRUNE_AFTER:-3}
ALONE=${ALONE:-10}
ensure_wrk
release_bins
with_workdir

# serve DIR PORT: a gateway signing checkpoints every second, in the background.
serve() {
  mkdir -p "$1"
  env -u DATABASE_URL TOOLGATE_AUDIT__CHECKPOINT_SECS=1 "$BIN/toolgate" serve \
    --listen "127.0.0.1:$2" --data-dir "$1" >/dev/null 2>"$1.log" & pids+=($!)
  for _ in $(seq 100); do [ -s "$1/admin-api-key" ] && break; sleep 0.1; done
  AUTH="authorization: Bearer $(cat "$1/admin-api-key")"
  wait_ready "$2" "$AUTH"
}
stop() { kill -TERM "${pids[-1]}"; wait "${pids[-1]}" || true; unset 'pids[-1]'; }
# prune DIR NAME: one prune of DIR up to now; "seconds rows" into $WORK/NAME.prune.
prune() {
  local start end out
  start=$(date +%s.%N)
  out=$(env -u DATABASE_URL "$BIN/toolgate" audit prune --before "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --data-dir "$1")
  end=$(date +%s.%N)
  echo "$(python3 -c "print(round($end - $start, 3))") $(echo "$out" | sed -n 's/.*: \([0-9]*\) rows.* deleted.*/\1/p')" > "$WORK/$2.prune"
}

PORT=$(free_port)
serve "$WORK/fill" "$PORT"
echo "filling the store: $FILL of calls at c=64…" >&2
DURATION=$FILL run fill "$PORT" rest 64 0 "$AUTH"
sleep 2 # a checkpoint of the last rows
stop
for who in alone loaded; do
  mkdir -p "$WORK/$who"
  env -u DATABASE_URL "$BIN/toolgate" backup --to "$WORK/$who/toolgate.db" --data-dir "$WORK/fill" >/dev/null
  cp "$WORK/fill/admin-api-key" "$WORK/fill/audit-signing-key" "$WORK/fill/upstream-credentials-key" "$WORK/$who/" 2>/dev/null || true
done
ROWS=$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from audit_log").fetchone()[0])' "$WORK/alone/toolgate.db")

echo "pruning the first copy, no gateway running…" >&2
prune "$WORK/alone" alone
PORT=$(free_port)
serve "$WORK/loaded" "$PORT"
echo "calls alone on the second copy for ${ALONE} s at c=$C (the calls' baseline)…" >&2
DURATION=${ALONE}s run alone "$PORT" rest "$C" 0 "$AUTH"
echo "pruning the second copy ${PRUNE_AFTER} s into calls at c=$C…" >&2
DURATION=${LOAD}s run load "$PORT" rest "$C" 0 "$AUTH" &
load=$!
sleep "$PRUNE_AFTER"
prune "$WORK/loaded" loaded
# The calls stop with the prune (wrk reports on SIGINT), so the prune ran beside them all
# along; if they had already stopped, the figures say so.
if pkill -INT -x wrk -P "$load"; then echo yes > "$WORK/beside"; else echo no > "$WORK/beside"; fi
wait "$load"
stop

mkdir -p bench/results
python3 - "$WORK" "$ROWS" "$C" "$LOAD" <<'PY' | tee bench/results/prune_beside_load.md
import json, sys
work, rows, c, load = sys.argv[1:]
def prune(name):
    secs, deleted = open(f"{work}/{name}.prune").read().split()
    return float(secs), int(deleted)
(a_s, a_n), (l_s, l_n) = prune("alone"), prune("loaded")
def calls(name):
    d = json.load(open(f"{work}/{name}-rest-{c}-0.json"))
    if d["bad"] or d["socket_errors"]:
        sys.exit(f"{name}: {d['bad']} bad responses, {d['socket_errors']} socket errors")
    return d
alone, beside = calls("alone"), calls("load")
print(f"Store: {rows} audit rows of one tenant (SQLite) before the prunes.\n")
print("| prune | seconds | rows deleted | rows/s |")
print("|---|---:|---:|---:|")
print(f"| no gateway running (baseline) | {a_s} | {a_n:,} | {a_n / a_s:,.0f} |")
print(f"| beside {c} calls at a time | {l_s} | {l_n:,} | {l_n / l_s:,.0f} |")
print(f"| ratio beside / alone | | | **{(l_n / l_s) / (a_n / a_s):.2f}** |\n")
print(f"| calls at c={c} | req/s | p50 ms | p99 ms |")
print("|---|---:|---:|---:|")
if open(f"{work}/beside").read().strip() != "yes":
    print(f"**The calls stopped ({load} s) before the prune ended: part of it ran alone.**\n")
for name, d in (("alone (baseline)", alone), (f"beside the prune ({beside['seconds']:.1f} s)", beside)):
    print(f"| {name} | {d['rps']:,.0f} | {d['p50_ms']} | {d['p99_ms']} |")
print(f"| ratio beside / alone | **{beside['rps'] / alone['rps']:.2f}** | "
      f"{beside['p50_ms'] / alone['p50_ms']:.2f} | {beside['p99_ms'] / alone['p99_ms']:.2f} |\n")
print("Every call answered 200.")
PY
echo "(one run; $(nproc) cores shared by the gateway, the prune and wrk; $(date -u +%Y-%m-%d))" | tee -a bench/results/prune_beside_load.md
