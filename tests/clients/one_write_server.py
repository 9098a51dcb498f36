"""An upstream MCP server over stdio that writes what it says about a call and the call's
result in one write: a progress report (when the call asked for progress), a log message,
then the result, on one pipe write, so the gateway reads them in one go. SDK servers
write each message on its own, and only a busy gateway reads them together; this one
makes that case happen every time. Hand-written JSON-RPC on purpose (standard library
only): the point is the byte order on the pipe, which an SDK does not let a tool choose.
Called with n = -1 its result is `{}`, with n = -2 only `_meta`: no `content`, which an
SDK would not send either.

    python3 one_write_server.py
"""

import json
import os
import sys

TOOL = {
    "name": "say_then_answer",
    "description": "Reports progress, logs one message and answers, in one write.",
    "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
}


def line(message: dict) -> bytes:
    return (json.dumps(message) + "\n").encode()


def answer(request: dict) -> bytes:
    method, rid = request.get("method"), request.get("id")
    params = request.get("params") or {}
    if method == "initialize":
        result = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}, "logging": {}},
            "serverInfo": {"name": "one-write", "version": "1.0.0"},
        }
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call":
        n = (params.get("arguments") or {}).get("n", 0)
        said = b""
        token = (params.get("_meta") or {}).get("progressToken")
        if token is not None:
            said += line({"jsonrpc": "2.0", "method": "notifications/progress",
                          "params": {"progressToken": token, "progress": 1, "total": 1}})
        said += line({"jsonrpc": "2.0", "method": "notifications/message",
                      "params": {"level": "info", "data": f"said before answer {n}"}})
        result = {"content": [{"type": "text", "text": f"answer {n}"}], "isError": False}
        if n < 0:
            # A tool that returns nothing, as some servers answer it: no `content` at all.
            result = {} if n == -1 else {"_meta": {"fixture/empty": True}}
        return said + line({"jsonrpc": "2.0", "id": rid, "result": result})
    elif rid is None:
        return b""  # a notification: nothing to answer
    elif method in ("ping", "logging/setLevel"):
        result = {}
    else:
        return line({"jsonrpc": "2.0", "id": rid,
                     "error": {"code": -32601, "message": f"no method {method}"}})
    return line({"jsonrpc": "2.0", "id": rid, "result": result})


for raw in sys.stdin:
    out = answer(json.loads(raw))
    if out:
        os.write(sys.stdout.fileno(), out)
