-- wrk script for the MCP benchmark: every request is a `tools/call` of `echo` with a JSON-RPC
-- id of its own (thread number and counter), so a stateful server never sees duplicates.
-- Set MCP_STATELESS=1 to send the per-request metadata of protocol 2026-07-28.
-- A response without a JSON-RPC result (an error, or nothing) is counted as bad.
-- BENCH_REST=1 sends the REST invoke body instead (`POST /v1/tools/echo/invoke`), so the
-- REST figure in the same table comes from the same load generator.
-- done() prints one JSON line: requests, seconds, req/s, p50/p99 ms, bad and socket errors.

local threads = {}
local next_thread = 0

function setup(thread)
  thread:set("tid", next_thread)
  next_thread = next_thread + 1
  table.insert(threads, thread)
end

local meta = ""
if os.getenv("MCP_STATELESS") == "1" then
  meta = ',"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
    .. '"io.modelcontextprotocol/clientCapabilities":{},'
    .. '"io.modelcontextprotocol/clientInfo":{"name":"wrk","version":"4"}}'
end

local counter = 0
bad = 0

-- MCP_SESSIONS="id1 id2 …": each request goes to the next of these sessions in turn (many
-- sessions instead of the one in the `mcp-session-id` header).
local sessions = {}
for sid in string.gmatch(os.getenv("MCP_SESSIONS") or "", "%S+") do
  table.insert(sessions, sid)
end

local rest = os.getenv("BENCH_REST") == "1"
local rest_body = '{"arguments":{"message":"hello, toolgate"}}'

function request()
  if rest then
    return wrk.format("POST", nil, nil, rest_body)
  end
  counter = counter + 1
  local body = '{"jsonrpc":"2.0","id":"' .. tid .. "-" .. counter
    .. '","method":"tools/call","params":{"name":"echo","arguments":{"message":"hello, toolgate"}'
    .. meta .. "}}"
  if #sessions > 0 then
    local headers = {}
    for name, value in pairs(wrk.headers) do headers[name] = value end
    headers["mcp-session-id"] = sessions[counter % #sessions + 1]
    return wrk.format("POST", nil, headers, body)
  end
  return wrk.format("POST", nil, nil, body)
end

function response(status, headers, body)
  if rest then
    if status ~= 200 then bad = bad + 1 end
    return
  end
  if status ~= 200 or not string.find(body, '"result"', 1, true)
      or string.find(body, '"isError":true', 1, true) then
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  local total_bad = 0
  for _, t in ipairs(threads) do
    total_bad = total_bad + t:get("bad")
  end
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    '{"requests":%d,"seconds":%.3f,"rps":%.1f,"p50_ms":%.3f,"p99_ms":%.3f,"bad":%d,"socket_errors":%d}\n',
    summary.requests, secs, summary.requests / secs,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, total_bad,
    e.connect + e.read + e.write + e.timeout + e.status))
end
