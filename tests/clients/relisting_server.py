"""A stdio MCP server that announces `notifications/tools/list_changed` after every
`tools/list` it answers, and counts those lists in the file named by RELIST_COUNT.
With RELIST_DRIFT set, its tool's description changes at every listing too (a new
definition each time); RELIST_TOOLS=N lists N tools (`ping` and `tool1`…), the same each
time; RELIST_FRESH=N lists `ping` and N tools named anew at each listing (`t1_0`… at the
first, `t2_0`… at the second). Standard library only: it tests the gateway's supervisor,
not an SDK."""

import json
import os
import sys

count_file = os.environ["RELIST_COUNT"]
drift = "RELIST_DRIFT" in os.environ
more = [
    {"name": f"tool{i}", "description": f"tool number {i}", "inputSchema": {"type": "object"}}
    for i in range(1, int(os.environ.get("RELIST_TOOLS", "1")))
]
fresh = int(os.environ.get("RELIST_FRESH", "0"))
listed = 0
for raw in sys.stdin:
    message = json.loads(raw)
    if "id" not in message:
        continue
    method = message["method"]
    if method == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "relisting", "version": "1"},
        }
    elif method == "tools/list":
        tool = {"name": "ping", "inputSchema": {"type": "object"}}
        if drift:
            tool["description"] = f"pings (version {listed})"
        named = [
            {"name": f"t{listed + 1}_{i}", "inputSchema": {"type": "object"}}
            for i in range(fresh)
        ]
        result = {"tools": [tool] + more + named}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "pong"}]}
    else:
        result = {}
    out = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n"
    if method == "tools/list":
        listed += 1
        with open(count_file, "w") as f:
            f.write(str(listed))
        changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        out += json.dumps(changed) + "\n"
    sys.stdout.write(out)
    sys.stdout.flush()
