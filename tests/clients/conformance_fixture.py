"""The tools the MCP conformance suite's server scenarios call, by the names and with the
results the scenarios ask for, on the official Python SDK (mcp 2.x) over stdio. The e2e
conformance test federates this server into toolgate with no prefix, so the suite checks
the gateway's relaying of each kind of content, errors, progress, log messages, sampling
and elicitation. With FIXTURE_PORT set it serves Streamable HTTP on 127.0.0.1 at that
port (path /mcp) instead of stdio.

    .venv/bin/python conformance_fixture.py
"""

import asyncio
import base64
import json
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    AudioContent,
    Completion,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    PromptReference,
    ResourceTemplateReference,
    SamplingMessage,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)

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


@server.tool()
async def test_reconnection() -> str:
    """Outlasts the gateway's SSE polling threshold in the conformance test (1 s), so the
    gateway closes the call's stream mid-call and the client resumes it (SEP-1699)."""
    await asyncio.sleep(1.5)
    return "Reconnection test completed successfully"


@server.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Sends three info log messages, 50 ms apart."""
    for i, text in enumerate(("Tool execution started", "Tool processing data", "Tool execution completed")):
        if i:
            await asyncio.sleep(0.05)
        await ctx.info(text)
    return "Logging test completed"


@server.tool()
async def test_sampling(prompt: str, ctx: Context) -> str:
    """Asks the client's model to answer `prompt` (sampling/createMessage)."""
    result = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
        max_tokens=100,
        related_request_id=ctx.request_id,
    )
    text = result.content.text if isinstance(result.content, TextContent) else str(result.content)
    return f"LLM response: {text}"


async def elicit(ctx: Context, message: str, schema: dict) -> str:
    result = await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
    return f"Elicitation completed: action={result.action}, content={result.content}"


@server.tool()
async def test_elicitation(message: str, ctx: Context) -> str:
    """Asks the client's user for a username and an email (elicitation/create)."""
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    result = await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
    return f"User response: action={result.action}, content={result.content}"


@server.tool()
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Elicits a form whose every primitive field has a default (SEP-1034)."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
            "verified": {"type": "boolean", "default": True},
        },
    }
    return await elicit(ctx, "Please review your details", schema)


@server.tool()
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Elicits a form with the five enum shapes of SEP-1330."""
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {
                "type": "string",
                "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"},
                ],
            },
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
            "titledMulti": {
                "type": "array",
                "items": {
                    "anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"},
                    ]
                },
            },
        },
    }
    return await elicit(ctx, "Please choose", schema)


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


# Resources and prompts of the resources-* and prompts-* scenarios: the gateway lists them
# beside its tools and relays reads and gets here.
@server.resource("test://static-text", name="static-text", mime_type="text/plain")
def static_text() -> str:
    """A static text resource."""
    return "This is the content of the static text resource."


@server.resource("test://static-binary", name="static-binary", mime_type="image/png")
def static_binary() -> bytes:
    """A static binary resource (a one-pixel PNG)."""
    return base64.b64decode(PNG)


@server.resource("test://watched-resource", name="watched-resource", mime_type="text/plain")
def watched_resource() -> str:
    """A resource clients may watch."""
    return "Watched resource content"


@server.resource("test://slow", name="slow", mime_type="text/plain")
async def slow_resource() -> str:
    """A resource that takes 5 s to read (toolgate's tests: a deadline)."""
    await asyncio.sleep(5)
    return "finally"


@server.resource("test://template/{id}/data", name="template-data", mime_type="application/json")
def template_data(id: str) -> str:
    """Data for an id, from a template."""
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


# Subscriptions to resources (resources/subscribe, before 2026-07-28). The gateway's
# upstream connections use these; `test_update_resource` makes the fixture announce a
# change on every connection subscribed to the URI. A connection is known by the
# SDK's connection object (each request gets a session wrapper of its own).
SUBSCRIBED: dict[str, dict[int, object]] = {}
# Subscribe requests being answered now, and the most there have been at once.
SUBSCRIBING = {"now": 0, "most": 0}


async def subscribe_resource(ctx, params: SubscribeRequestParams) -> EmptyResult:
    SUBSCRIBING["now"] += 1
    SUBSCRIBING["most"] = max(SUBSCRIBING["most"], SUBSCRIBING["now"])
    try:
        # Answered slowly, as a remote server may: what the gateway acknowledges before
        # the upstream has answered is not yet subscribed.
        await asyncio.sleep(0.2)
    finally:
        SUBSCRIBING["now"] -= 1
    SUBSCRIBED.setdefault(str(params.uri), {})[id(ctx.session._connection)] = ctx.session
    return EmptyResult()


async def unsubscribe_resource(ctx, params: UnsubscribeRequestParams) -> EmptyResult:
    SUBSCRIBED.get(str(params.uri), {}).pop(id(ctx.session._connection), None)
    return EmptyResult()


server._lowlevel_server.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe_resource)
server._lowlevel_server.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe_resource)


@server.tool()
def test_most_subscribing_at_once() -> str:
    """How many resources/subscribe requests this process has answered at once, at most."""
    return str(SUBSCRIBING["most"])


@server.tool()
async def test_update_resource(uri: str) -> str:
    """Announces that the resource `uri` changed, to the clients subscribed to it."""
    sessions = list(SUBSCRIBED.get(uri, {}).values())
    for session in sessions:
        await session.send_resource_updated(uri)
    return f"{len(sessions)} subscriber(s) told by process {os.getpid()}"


@server.tool()
async def test_add_resource(uri: str, ctx: Context) -> str:
    """Adds a text resource at `uri` and tells clients the resource list changed."""
    server.resource(uri, name=uri.rsplit("/", 1)[-1], mime_type="text/plain")(lambda: f"added {uri}")
    await ctx.notify_resources_changed()
    await ctx.session.send_resource_list_changed()
    return "added"


@server.tool()
async def fixture_exit() -> str:
    """Ends this server's process 50 ms from now (toolgate's tests: a connection lost)."""
    asyncio.get_running_loop().call_later(0.05, os._exit, 0)
    return "exiting"


@server.prompt()
def test_simple_prompt() -> list:
    """A simple prompt without arguments."""
    return [{"role": "user", "content": {"type": "text", "text": "This is a simple prompt for testing."}}]


@server.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> list:
    """A prompt with two required arguments."""
    text = f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
    return [{"role": "user", "content": {"type": "text", "text": text}}]


@server.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list:
    """A prompt embedding the resource it is given."""
    resource = {"uri": resourceUri, "mimeType": "text/plain", "text": "Embedded resource content for testing."}
    return [
        {"role": "user", "content": {"type": "resource", "resource": resource}},
        {"role": "user", "content": {"type": "text", "text": "Please process the embedded resource above."}},
    ]


@server.prompt()
def test_prompt_with_image() -> list:
    """A prompt with an image."""
    return [
        {"role": "user", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}},
        {"role": "user", "content": {"type": "text", "text": "Please analyze the image above."}},
    ]


# Completion (completion/complete) of test_prompt_with_arguments' arguments and of the
# template's id: the choices that start with what was typed. arg2's choices follow arg1's
# value from the request's context, so a test can see the context relayed too.
@server.completion()
async def complete(ref, argument, context) -> Completion | None:
    choices: list[str] = []
    if isinstance(ref, PromptReference) and ref.name == "test_prompt_with_arguments":
        if argument.name == "arg1":
            choices = ["hello", "help", "world"]
        elif argument.name == "arg2":
            arg1 = ((context and context.arguments) or {}).get("arg1", "")
            choices = [f"{arg1}-again", f"{arg1}-once"]
    elif isinstance(ref, ResourceTemplateReference) and ref.uri == "test://template/{id}/data":
        if argument.name == "id":
            choices = ["41", "42", "420"]
    values = [c for c in choices if c.startswith(argument.value)]
    return Completion(values=values, total=len(values), has_more=False)


if __name__ == "__main__":
    port = os.environ.get("FIXTURE_PORT")
    if port:
        server.run("streamable-http", host="127.0.0.1", port=int(port))
    else:
        server.run("stdio")
