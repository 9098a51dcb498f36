"""The tools the MCP conformance suite's server scenarios call, by the names and with the
results the scenarios ask for, on the official Python SDK (mcp 2.x) over stdio. The e2e
conformance test federates this server into toolgate with no prefix, so the suite checks
the gateway's relaying of each kind of content, errors and progress.

    .venv/bin/python conformance_fixture.py
"""

import asyncio

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import AudioContent, EmbeddedResource, ImageContent, TextContent, TextResourceContents

server = MCPServer("toolgate-conformance-fixture")

# A 1x1 red PNG, and a WAV file holding one silent sample.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQIAAAAAAA=="


@server.tool()
def test_simple_text() -> list:
    """Returns a simple text response."""
    return [TextContent(type="text", text="This is a simple text response for testing.")]


@server.tool()
def test_image_content() -> list:
    """Returns a one-pixel PNG."""
    return [ImageContent(type="image", data=PNG, mimeType="image/png")]


@server.tool()
def test_audio_content() -> list:
    """Returns a one-sample WAV."""
    return [AudioContent(type="audio", data=WAV, mimeType="audio/wav")]


@server.tool()
def test_embedded_resource() -> list:
    """Returns an embedded text resource."""
    resource = TextResourceContents(
        uri="test://embedded-resource", mimeType="text/plain", text="This is an embedded resource content."
    )
    return [EmbeddedResource(type="resource", resource=resource)]


@server.tool()
def test_multiple_content_types() -> list:
    """Returns text, an image and a resource."""
    resource = TextResourceContents(
        uri="test://mixed-content-resource", mimeType="application/json", text='{"test":"data","value":123}'
    )
    return [
        TextContent(type="text", text="Multiple content types test:"),
        ImageContent(type="image", data=PNG, mimeType="image/png"),
        EmbeddedResource(type="resource", resource=resource),
    ]


@server.tool()
def test_error_handling() -> str:
    """Always fails."""
    raise ToolError("This tool intentionally returns an error for testing")


@server.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Reports progress 0, 50 and 100 of 100."""
    for done in (0, 50, 100):
        await ctx.report_progress(done, 100)
        await asyncio.sleep(0.05)
    return "Progress test completed"


def json_schema_2020_12_tool(name: str | None = None, address: dict | None = None) -> str:
    """Tool with JSON Schema 2020-12 features"""
    return f"name={name} address={address}"


# The SDK derives a tool's input schema from its signature; the scenario checks that a
# hand-written 2020-12 schema ($schema, $defs, $ref) reaches the client unchanged.
server.add_tool(json_schema_2020_12_tool)
server._tool_manager.get_tool("json_schema_2020_12_tool").parameters = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


if __name__ == "__main__":
    server.run("stdio")
