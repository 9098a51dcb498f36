"""Drives toolgate's /mcp with the official Python SDK client (`mcp`, pinned in
requirements.txt) and prints one JSON object describing what it saw.

    python_client.py URL TOKEN [--cancel] [--long]
"""

import json
import sys

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main(url: str, token: str, cancel: bool, long: bool) -> dict:
    seen: dict = {}
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, streamable_http_client(url, http_client=http) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            seen["server"] = init.server_info.name
            seen["protocol_version"] = init.protocol_version
            tools, cursor = [], None
            while True:
                page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            seen["tools"] = sorted(t.name for t in tools)
            echo = next(t for t in tools if t.name == "echo")
            seen["echo_read_only"] = echo.annotations.read_only_hint if echo.annotations else None
            ok = await session.call_tool("echo", {"message": "from python"})
            seen["ok"] = {
                "is_error": ok.is_error,
                "text": ok.content[0].text,
                "structured": ok.structured_content,
            }
            bad = await session.call_tool("echo", {"mesage": "typo"})
            seen["bad"] = {"is_error": bad.is_error, "error": json.loads(bad.content[0].text)["error"]}
            try:
                await session.call_tool("no_such_tool", {})
                seen["unknown"] = None
            except Exception as e:  # the SDK raises McpError for a JSON-RPC error
                err = getattr(e, "error", None)
                seen["unknown"] = getattr(err, "code", str(e))
            if cancel:
                with anyio.move_on_after(0.5) as scope:
                    await session.call_tool("sleep", {"seconds": 30})
                seen["cancelled"] = scope.cancelled_caught
                # The session still works after a cancelled call.
                again = await session.call_tool("echo", {"message": "after cancel"})
                seen["after_cancel"] = again.content[0].text
            if long:
                # Against a gateway with SSE polling on, this call's stream is closed
                # mid-call and the SDK must resume it (Last-Event-ID) to get the result.
                result = await session.call_tool("sleep", {"seconds": 1.5})
                seen["long"] = {"is_error": result.is_error, "text": result.content[0].text}
    return seen


if __name__ == "__main__":
    url, token = sys.argv[1], sys.argv[2]
    print(json.dumps(anyio.run(main, url, token, "--cancel" in sys.argv[3:], "--long" in sys.argv[3:])))
