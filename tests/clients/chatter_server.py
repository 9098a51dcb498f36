"""A stdio MCP server that says more than anyone asked for. Standard library only: it
tests the gateway's pacing of what upstreams send, not an SDK.

- With CHATTER_FLOOD set to a file's path, from `notifications/initialized` on it writes
  log messages without pause and no call in flight, and keeps the count of those written
  (that is, read by the gateway or in the pipe) in that file.
- Its tool `chatter`, 50 ms after it is called, sends `logs` log messages and as many progress reports (0 to
  `logs` - 1, when the call has a progress token) in batches of 50 every 20 ms, then,
  50 ms later, one last progress report of `logs`, and 50 ms after that its result.
  Called with `samples`, it instead asks the client for that many samplings at once and
  answers how many were answered and how many refused.
- With CHATTER_ENDLESS_LIST set to a file's path, its `tools/list` answers every page
  with 1,000 tools and a next page, and keeps the count of pages asked for in that file.
- Of its two resources, `chatter://hot`, once subscribed to, is announced as updated
  without pause; `chatter://calm` never is. Its template `chatter://item/{n}` names as
  many more as anyone asks for; subscribing to any is answered at once.
"""

import json
import os
import sys
import threading
import time

lock = threading.Lock()


def write(text):
    with lock:
        sys.stdout.write(text)
        sys.stdout.flush()


def note(method, params):
    return json.dumps({"jsonrpc": "2.0", "method": method, "params": params}) + "\n"


def flood(count_file):
    chunk = note("notifications/message", {"level": "info", "data": "flood"}) * 100
    written = 0
    while True:
        write(chunk)
        written += 100
        if written % 1000 == 0:
            with open(count_file, "w") as f:
                f.write(str(written))


def updates(uri):
    chunk = note("notifications/resources/updated", {"uri": uri}) * 100
    while True:
        write(chunk)


answers = {}
answered = threading.Condition()


def sample(message, n):
    """Asks the client for `n` samplings at once; the result says how they were answered."""
    write("".join(
        json.dumps({"jsonrpc": "2.0", "id": f"s{i}", "method": "sampling/createMessage",
                    "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                               "maxTokens": 10}}) + "\n"
        for i in range(n)))
    with answered:
        answered.wait_for(lambda: len(answers) >= n, timeout=20)
        results = sum(1 for a in answers.values() if "result" in a)
        errors = sum(1 for a in answers.values() if "error" in a)
    result = {"content": [{"type": "text", "text": f"answered {results}, refused {errors}"}]}
    write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")


def chatter(message):
    samples = int(message["params"].get("arguments", {}).get("samples", 0))
    if samples:
        return sample(message, samples)
    n = int(message["params"].get("arguments", {}).get("logs", 0))
    token = message["params"].get("_meta", {}).get("progressToken")
    time.sleep(0.05)
    for start in range(0, n, 50):
        out = []
        for i in range(start + 1, min(start + 50, n) + 1):
            out.append(note("notifications/message", {"level": "info", "data": f"log {i}"}))
            if token is not None:
                out.append(note("notifications/progress", {"progressToken": token, "progress": i - 1}))
        write("".join(out))
        time.sleep(0.02)
    time.sleep(0.05)
    if token is not None:
        write(note("notifications/progress", {"progressToken": token, "progress": n}))
    time.sleep(0.05)
    result = {"content": [{"type": "text", "text": f"said {n}"}]}
    write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")


for raw in sys.stdin:
    message = json.loads(raw)
    method = message.get("method")
    if method is None:
        with answered:
            answers[message.get("id")] = message
            answered.notify_all()
        continue
    if "id" not in message:
        if method == "notifications/initialized" and os.environ.get("CHATTER_FLOOD"):
            threading.Thread(target=flood, args=(os.environ["CHATTER_FLOOD"],), daemon=True).start()
        continue
    if method == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}, "logging": {}, "resources": {"subscribe": True}},
            "serverInfo": {"name": "chatter", "version": "1"},
        }
    elif method == "tools/list" and os.environ.get("CHATTER_ENDLESS_LIST"):
        page = int((message.get("params") or {}).get("cursor") or 0)
        with open(os.environ["CHATTER_ENDLESS_LIST"], "w") as f:
            f.write(str(page + 1))
        tools = [{"name": f"t{page}_{i}", "inputSchema": {"type": "object"}} for i in range(1000)]
        result = {"tools": tools, "nextCursor": str(page + 1)}
    elif method == "tools/list":
        schema = {"type": "object", "properties": {"logs": {"type": "integer"}, "samples": {"type": "integer"}}}
        result = {"tools": [{"name": "chatter", "inputSchema": schema}]}
    elif method == "resources/list":
        result = {"resources": [{"uri": "chatter://hot", "name": "hot"},
                                {"uri": "chatter://calm", "name": "calm"}]}
    elif method == "resources/templates/list":
        result = {"resourceTemplates": [{"uriTemplate": "chatter://item/{n}", "name": "item"}]}
    elif method == "resources/subscribe":
        if message["params"]["uri"] == "chatter://hot":
            threading.Thread(target=updates, args=("chatter://hot",), daemon=True).start()
        result = {}
    elif method == "tools/call":
        threading.Thread(target=chatter, args=(message,), daemon=True).start()
        continue
    else:
        result = {}
    write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
