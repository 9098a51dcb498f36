"""Sequential MCP `tools/call`s of `echo` over one keep-alive connection, for
bench/instructions.sh: `python3 bench/mcp_calls.py PORT KEY|- MODE N`. MODE is `session`
(2025-11-25: initialize, then every call in that session) or `stateless` (2026-07-28). Each
call has a JSON-RPC id of its own; any answer that is not a successful result stops it."""

import http.client
import json
import sys

port, key, mode, n = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
if key != "-":
    headers["authorization"] = f"Bearer {key}"
params = {"name": "echo", "arguments": {"message": "hello, toolgate"}}


def post(body, extra=None):
    conn.request("POST", "/mcp", json.dumps(body), {**headers, **(extra or {})})
    response = conn.getresponse()
    return response, response.read()


if mode == "session":
    client = {"name": "bench", "version": "1"}
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}
    response, _ = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
    headers["mcp-session-id"] = response.getheader("mcp-session-id")
    headers["mcp-protocol-version"] = "2025-11-25"
    post({"jsonrpc": "2.0", "method": "notifications/initialized"})
else:
    headers.update({"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "echo"})
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    }
for i in range(n):
    response, data = post({"jsonrpc": "2.0", "id": f"c-{i}", "method": "tools/call", "params": params})
    if response.status != 200 or b'"result"' not in data or b'"isError":true' in data:
        sys.exit(f"call {i}: {response.status} {data[:300]!r}")
