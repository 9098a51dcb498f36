// Drives toolgate's /mcp with the official TypeScript SDK client
// (@modelcontextprotocol/sdk, pinned in package.json) and prints one JSON object
// describing what it saw.
//
//     node ts_client.mjs URL TOKEN [--cancel] [--long]
//
// --long calls `sleep` for 1.5 s: against a gateway with SSE polling on, its POST stream
// is closed mid-call and the SDK must resume it (Last-Event-ID) to get the result.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token, ...flags] = process.argv.slice(2);
const seen = {};
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "ts-sdk-e2e", version: "1.0.0" });
await client.connect(transport);
seen.server = client.getServerVersion()?.name;
const tools = [];
let cursor;
do {
  const page = await client.listTools(cursor ? { cursor } : undefined);
  tools.push(...page.tools);
  cursor = page.nextCursor;
} while (cursor);
seen.tools = tools.map((t) => t.name).sort();
seen.echo_read_only = tools.find((t) => t.name === "echo")?.annotations?.readOnlyHint ?? null;
const ok = await client.callTool({ name: "echo", arguments: { message: "from typescript" } });
seen.ok = { is_error: ok.isError ?? false, text: ok.content[0].text, structured: ok.structuredContent ?? null };
const bad = await client.callTool({ name: "echo", arguments: { mesage: "typo" } });
seen.bad = { is_error: bad.isError ?? false, error: JSON.parse(bad.content[0].text).error };
try {
  await client.callTool({ name: "no_such_tool", arguments: {} });
  seen.unknown = null;
} catch (e) {
  seen.unknown = e.code ?? String(e);
}
if (flags.includes("--cancel")) {
  const abort = new AbortController();
  setTimeout(() => abort.abort("enough"), 500);
  try {
    await client.callTool({ name: "sleep", arguments: { seconds: 30 } }, undefined, { signal: abort.signal });
    seen.cancelled = false;
  } catch {
    seen.cancelled = abort.signal.aborted;
  }
  const again = await client.callTool({ name: "echo", arguments: { message: "after cancel" } });
  seen.after_cancel = again.content[0].text;
}
if (flags.includes("--long")) {
  const long = await client.callTool({ name: "sleep", arguments: { seconds: 1.5 } });
  seen.long = { is_error: long.isError ?? false, text: long.content[0]?.text ?? null };
}
await transport.terminateSession().catch(() => {});
await client.close();
console.log(JSON.stringify(seen));
