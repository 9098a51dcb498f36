# Shared by the benchmark scripts (sourced, not run).
#
# Each script starts two servers doing the same work, one with and one without what is
# measured, drives them alternately ROUNDS times per concurrency with oha, and reports the
# median round of each and the throughput ratio.

DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
CONCURRENCY=${CONCURRENCY:-"1 16 64"}
OHA_VERSION=1.16.0
OHA=bench/.tools/bin/oha
BODY='{"arguments":{"message":"hello, toolgate"}}'
PATH_INVOKE=/v1/tools/echo/invoke

ensure_oha() {
  if ! "$OHA" --version 2>/dev/null | grep -q "$OHA_VERSION"; then
    echo "installing oha $OHA_VERSION into bench/.tools (one-time)…" >&2
    cargo install --quiet --locked --root bench/.tools oha --version "$OHA_VERSION"
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_ready PORT [AUTH_HEADER]: until an invoke answers 200.
wait_ready() {
  local port=$1 auth=${2:-x-none: none}
  for _ in $(seq 200); do
    curl -sf -o /dev/null -X POST -H 'content-type: application/json' -H "$auth" \
      -d "$BODY" "http://127.0.0.1:$port$PATH_INVOKE" && return 0
    sleep 0.1
  done
  echo "server on port $port never became ready" >&2
  return 1
}

# measure NAME PORT CONCURRENCY ROUND [AUTH_HEADER]
measure() {
  local auth=${5:-x-none: none}
  "$OHA" --no-tui --output-format json -z "$DURATION" -c "$3" -m POST \
    -H 'content-type: application/json' -H "$auth" -d "$BODY" \
    "http://127.0.0.1:$2$PATH_INVOKE" > "$WORK/$1-$3-$4.json"
}

# summarize A B CONCURRENCY: one table row, medians of A and B, ratio A/B.
summarize() {
  python3 - "$WORK" "$1" "$2" "$3" <<'PY'
import glob, json, sys
work, a, b, c = sys.argv[1:]
def load(p):
    d = json.load(open(p))
    s, pct = d["summary"], d["latencyPercentiles"]
    codes = d.get("statusCodeDistribution", {})
    bad = sum(v for k, v in codes.items() if k != "200")
    if bad:
        sys.exit(f"{p}: {bad} non-200 responses: {codes}")
    return s["requestsPerSec"], pct["p50"] * 1000, pct["p99"] * 1000
def median(name):
    runs = sorted(load(p) for p in glob.glob(f"{work}/{name}-{c}-*.json"))
    return runs[len(runs) // 2]
x, y = median(a), median(b)
print(f"| {c} | {x[0]:.0f} | {x[1]:.3f} | {x[2]:.3f} | {y[0]:.0f} | {y[1]:.3f} | {y[2]:.3f} | {x[0]/y[0]:.2f} |")
PY
}

footer() {
  echo "(median of ${ROUNDS} alternating rounds of ${DURATION} per point; $(nproc) cores shared by servers, Postgres and load generator; $(date -u +%Y-%m-%d))"
}
