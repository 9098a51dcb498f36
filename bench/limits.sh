#!/usr/bin/env bash
# The cost of admission (rate and concurrency limits) and metrics, and what one tenant
# over its limit does to another.
#
# 1. REST invoke on two gateways from the same build, both SQLite with durable audit:
#    "on" with metrics recorded and rate + concurrency limits set (high enough that every
#    call is checked against its tenant, principal and tool buckets but none is refused),
#    "off" with metrics off and no limits. Alternating rounds; ratio on/off.
#    And "traced": as "on", exporting spans and metrics over OTLP/HTTP to a local
#    receiver (tests/clients/otlp_receiver.py, decoding every export; it shares the 2
#    cores); ratio traced/off. And "sampled": the same with 10 % of traces sampled
#    (OTEL_TRACES_SAMPLER=traceidratio, OTEL_TRACES_SAMPLER_ARG=0.1).
#    Beside the throughput ratios, each gateway's own CPU per call (user + system time
#    of its process over the measured window, read from /proc) against off's, and the
#    receiver's: on 2 shared cores the receiver's decoding lowers the traced gateway's
#    throughput without being the gateway's cost.
# 2. On the "on" gateway, tenant `quiet` at a steady 200 calls/s, alone and then while
#    tenant `noisy` sends 1000 calls/s against its limit of 100/s (6000 per minute, whose
#    burst it spends in the first seconds, before quiet is measured beside it), and
#    beside noisy at exactly its limit: quiet's success rate and p99 each time, in
#    FAIR_ROUNDS (3) alternated rounds with their medians, and how noisy was answered.
#
#   bench/limits.sh                         # 3 rounds of 5 s per point, c = 1, 16, 64
#   DURATION=10s ROUNDS=5 bench/limits.sh
#
# Builds the release binary, installs oha if missing, prints tables and writes them to
# bench/results/limits.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

ensure_oha
cargo build --quiet --release -p toolgate-server
WORK=$(mktemp -d)
declare -A PID
cleanup() { for p in "${PID[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

RECEIVER_PORT=$(free_port)
start_receiver "$RECEIVER_PORT"; PID[receiver]=$!
ON=$(free_port); OFF=$(free_port); TRACED=$(free_port); SAMPLED=$(free_port)
mkdir -p "$WORK/on" "$WORK/off" "$WORK/traced" "$WORK/sampled"
env -u DATABASE_URL TOOLGATE_LIMITS__TENANT_PER_MINUTE=1000000000 TOOLGATE_LIMITS__PRINCIPAL_PER_MINUTE=1000000000 \
  TOOLGATE_LIMITS__TENANT_CONCURRENCY=100000 TOOLGATE_LIMITS__TOOLS__ECHO=1000000000 \
  target/release/toolgate serve --listen "127.0.0.1:$ON" --data-dir "$WORK/on" >/dev/null 2>"$WORK/on.log" & PID[on]=$!
env -u DATABASE_URL TOOLGATE_LIMITS__TENANT_PER_MINUTE=1000000000 TOOLGATE_LIMITS__PRINCIPAL_PER_MINUTE=1000000000 \
  TOOLGATE_LIMITS__TENANT_CONCURRENCY=100000 TOOLGATE_LIMITS__TOOLS__ECHO=1000000000 \
  OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$RECEIVER_PORT" OTEL_METRIC_EXPORT_INTERVAL=5000 \
  target/release/toolgate serve --listen "127.0.0.1:$TRACED" --data-dir "$WORK/traced" >/dev/null 2>"$WORK/traced.log" & PID[traced]=$!
env -u DATABASE_URL TOOLGATE_LIMITS__TENANT_PER_MINUTE=1000000000 TOOLGATE_LIMITS__PRINCIPAL_PER_MINUTE=1000000000 \
  TOOLGATE_LIMITS__TENANT_CONCURRENCY=100000 TOOLGATE_LIMITS__TOOLS__ECHO=1000000000 \
  OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$RECEIVER_PORT" OTEL_METRIC_EXPORT_INTERVAL=5000 \
  OTEL_TRACES_SAMPLER=traceidratio OTEL_TRACES_SAMPLER_ARG=0.1 \
  target/release/toolgate serve --listen "127.0.0.1:$SAMPLED" --data-dir "$WORK/sampled" >/dev/null 2>"$WORK/sampled.log" & PID[sampled]=$!
env -u DATABASE_URL TOOLGATE_TELEMETRY__METRICS=false \
  target/release/toolgate serve --listen "127.0.0.1:$OFF" --data-dir "$WORK/off" >/dev/null 2>"$WORK/off.log" & PID[off]=$!
for _ in $(seq 100); do [ -s "$WORK/on/admin-api-key" ] && [ -s "$WORK/off/admin-api-key" ] && [ -s "$WORK/traced/admin-api-key" ] && [ -s "$WORK/sampled/admin-api-key" ] && break; sleep 0.1; done
ON_AUTH="authorization: Bearer $(cat "$WORK/on/admin-api-key")"
OFF_AUTH="authorization: Bearer $(cat "$WORK/off/admin-api-key")"
TRACED_AUTH="authorization: Bearer $(cat "$WORK/traced/admin-api-key")"
SAMPLED_AUTH="authorization: Bearer $(cat "$WORK/sampled/admin-api-key")"
wait_ready "$ON" "$ON_AUTH"; wait_ready "$OFF" "$OFF_AUTH"; wait_ready "$TRACED" "$TRACED_AUTH"; wait_ready "$SAMPLED" "$SAMPLED_AUTH"
curl -sf -H "$ON_AUTH" "http://127.0.0.1:$ON/metrics" | grep -q toolgate_tool_calls_total
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "$OFF_AUTH" "http://127.0.0.1:$OFF/metrics")" = 404 ]

# tenant NAME: creates a tenant on the "on" gateway; prints its admin key.
tenant() {
  curl -sf -H "$ON_AUTH" -H 'content-type: application/json' -d "{\"name\":\"$1\"}" \
    "http://127.0.0.1:$ON/v1/tenants" | python3 -c 'import json,sys; print(json.load(sys.stdin)["admin_key"]["secret"])'
}
QUIET="authorization: Bearer $(tenant quiet)"
NOISY="authorization: Bearer $(tenant noisy)"
curl -sf -o /dev/null -X PUT -H "$NOISY" -H 'content-type: application/json' \
  -d '{"rate_limits":{"tenant_per_minute":6000}}' "http://127.0.0.1:$ON/v1/policy"

# paced NAME AUTH RATE [SECONDS]: oha at RATE calls/s for SECONDS (FAIR_SECONDS),
# concurrency 8.
FAIR_SECONDS=${FAIR_SECONDS:-30}
# the paced rate at which each gateway's CPU per call is also read
PACED=${PACED:-2000}
# noisy's quota allows 6000 calls at once: at 1000 calls/s it spends that burst in 6 s.
BURST_SECONDS=8
# rounds of quiet's three windows (alone, beside noisy at 10x, beside noisy at its limit)
FAIR_ROUNDS=${FAIR_ROUNDS:-3}
paced() {
  "$OHA" --no-tui --output-format json -z "${4:-$FAIR_SECONDS}s" -c 8 -q "$3" -m POST \
    -H 'content-type: application/json' -H "$2" -d "$BODY" \
    "http://127.0.0.1:$ON$PATH_INVOKE" > "$WORK/$1.json"
}

# metered NAME PORT CONCURRENCY ROUND AUTH: `measure` (paced with RATE set), also
# writing the CPU the gateway and the OTLP receiver spent meanwhile beside its result.
metered() {
  local gw rx
  gw=$(ticks "${PID[$1]}"); rx=$(ticks "${PID[receiver]}")
  measure "$@"
  echo "$(( $(ticks "${PID[$1]}") - gw )) $(( $(ticks "${PID[receiver]}") - rx ))" > "$WORK/$1-$(label "$3")-$4.cpu"
}

# cpu_row A B LABEL: the gateway's CPU per answered call (median round) of A and of B,
# their ratio, and the receiver's CPU per call while A was measured. LABEL is the
# concurrency, or rRATE.
cpu_row() {
  python3 - "$WORK" "$1" "$2" "$3" "$(getconf CLK_TCK)" <<'PY'
import glob, json, sys
work, a, b, c, hz = sys.argv[1:]
def per_call(name):
    runs = []
    for p in glob.glob(f"{work}/{name}-{c}-*.json"):
        calls = sum(json.load(open(p)).get("statusCodeDistribution", {}).values())
        gw, rx = map(int, open(p[:-5] + ".cpu").read().split())
        runs.append((gw / int(hz) * 1e6 / calls, rx / int(hz) * 1e6 / calls))
    runs.sort()
    return runs[len(runs) // 2]
x, y = per_call(a), per_call(b)
print(f"| {c} | {a} | {x[0]:.1f} | {y[0]:.1f} | {x[0]/y[0]:.2f} | {x[1]:.1f} |")
PY
}

mkdir -p bench/results
{
  echo "REST invoke, metrics + rate and concurrency limits on vs. off (same build, SQLite, durable audit)"
  echo
  echo "| concurrency | on req/s | on p50 ms | on p99 ms | off req/s | off p50 ms | off p99 ms | ratio on/off |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
  for c in $CONCURRENCY; do
    for r in $(seq "$ROUNDS"); do
      metered off "$OFF" "$c" "$r" "$OFF_AUTH"
      metered on "$ON" "$c" "$r" "$ON_AUTH"
      metered traced "$TRACED" "$c" "$r" "$TRACED_AUTH"
      metered sampled "$SAMPLED" "$c" "$r" "$SAMPLED_AUTH"
    done
    summarize on off "$c"
  done
  echo
  echo "the same, with traces and metrics exported over OTLP/HTTP to a local receiver (traced) vs. off"
  echo
  echo "| concurrency | traced req/s | traced p50 ms | traced p99 ms | off req/s | off p50 ms | off p99 ms | ratio traced/off |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
  for c in $CONCURRENCY; do summarize traced off "$c"; done
  echo
  echo "the same with 10 % of traces sampled (sampled) vs. off"
  echo
  echo "| concurrency | sampled req/s | sampled p50 ms | sampled p99 ms | off req/s | off p50 ms | off p99 ms | ratio sampled/off |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
  for c in $CONCURRENCY; do summarize sampled off "$c"; done
  echo
  echo "the gateway's own CPU per call (user + system, all its threads), against off; the OTLP receiver's beside it (it shares the cores, so it weighs on the throughput ratios above)"
  echo
  echo "| concurrency | gateway | its µs per call | off's µs per call | ratio | receiver µs per call |"
  echo "|---:|---|---:|---:|---:|---:|"
  for c in $CONCURRENCY; do for g in on traced sampled; do cpu_row "$g" off "$c"; done; done
  echo
  # At full load the gateways run at different rates (the receiver takes the traced
  # one's cores), and the audit's batches, so its CPU per row, depend on the rate: at
  # one paced rate below saturation, each call's cost is read at equal load.
  for r in $(seq "$ROUNDS"); do
    for g in off on traced sampled; do
      port=${g^^}; auth=${g^^}_AUTH
      RATE=$PACED metered "$g" "${!port}" 64 "$r" "${!auth}"
    done
  done
  echo "the same at a paced $PACED calls/s (c=64) for every gateway"
  echo
  echo "| rate | gateway | its µs per call | off's µs per call | ratio | receiver µs per call |"
  echo "|---:|---|---:|---:|---:|---:|"
  for g in on traced sampled; do cpu_row "$g" off "r$PACED"; done
  echo
  # Rounds of the three windows, alternated, so that one slow window of this shared
  # machine does not decide the ratio alone (the medians do).
  for r in $(seq "$FAIR_ROUNDS"); do
    paced "quiet-alone-$r" "$QUIET" 200
    # Quiet is measured beside noisy once noisy has spent its burst: the burst is within
    # noisy's quota (load any tenant may send), what follows is 10x its steady limit.
    paced "noisy-$r" "$NOISY" 1000 $((FAIR_SECONDS + BURST_SECONDS)) & noisy=$!
    sleep "$BURST_SECONDS"
    paced "quiet-shared-$r" "$QUIET" 200
    wait "$noisy"
    # And beside noisy at its steady limit (100 calls/s, all answered): what noisy's own
    # quota costs quiet, against which the 900 refused calls a second above are the excess.
    paced "noisy-at-limit-$r" "$NOISY" 100 $((FAIR_SECONDS + 2)) & noisy=$!
    sleep 2
    paced "quiet-at-limit-$r" "$QUIET" 200
    wait "$noisy"
  done
  echo "tenant quiet at 200 calls/s (${FAIR_SECONDS}s, c=8): alone; while tenant noisy sends 1000 calls/s against its limit of 100/s (after the first ${BURST_SECONDS}s, in which noisy spends the burst its quota allows); while noisy sends 100 calls/s, its limit; ${FAIR_ROUNDS} alternated rounds"
  echo
  python3 - "$WORK" "$FAIR_ROUNDS" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def load(name):
    d = json.load(open(f"{work}/{name}.json"))
    codes = d.get("statusCodeDistribution", {})
    return d["latencyPercentiles"]["p99"] * 1000, codes
def window(kind):
    runs = [load(f"{kind}-{r}") for r in range(1, rounds + 1)]
    calls = sum(sum(codes.values()) for _, codes in runs)
    ok = sum(codes.get("200", 0) for _, codes in runs)
    p99s = [p for p, _ in runs]
    return calls, ok / calls * 100, p99s, statistics.median(p99s)
alone, at_limit, shared = window("quiet-alone"), window("quiet-at-limit"), window("quiet-shared")
print("| quiet | calls | success % | p99 ms, each round | median p99 ms |")
print("|---|---:|---:|---|---:|")
for label, w in [("alone", alone), ("beside noisy at its limit (100 calls/s)", at_limit), ("beside noisy at 10x its limit", shared)]:
    print(f"| {label} | {w[0]} | {w[1]:.2f} | {', '.join(f'{p:.2f}' for p in w[2])} | {w[3]:.3f} |")
print(f"| ratio 10x/alone | | {shared[1]/alone[1]:.3f} | {', '.join(f'{s/a:.2f}' for s, a in zip(shared[2], alone[2]))} | {shared[3]/alone[3]:.2f} |")
print(f"| ratio 10x/at its limit | | {shared[1]/at_limit[1]:.3f} | {', '.join(f'{s/a:.2f}' for s, a in zip(shared[2], at_limit[2]))} | {shared[3]/at_limit[3]:.2f} |")
print()
noisy = {}
for r in range(1, rounds + 1):
    for code, n in load(f"noisy-{r}")[1].items():
        noisy[code] = noisy.get(code, 0) + n
print(f"noisy at 10x: {sum(noisy.values())} calls, answered {dict(sorted(noisy.items()))} (429: refused at admission)")
PY
  echo
  echo "refusals counted at /metrics: $(curl -sf -H "$ON_AUTH" "http://127.0.0.1:$ON/metrics" | awk '/^toolgate_admission_rejections_total/ {s += $NF} END {print s}')"
  echo
  footer
} | tee bench/results/limits.md
