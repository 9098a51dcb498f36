-- SSE events of MCP sessions, kept so that a client whose stream broke can resume it with
-- `Last-Event-ID` on any gateway instance. Unlogged: a resumption buffer, not a record
-- (the audit log is the record), so it skips the WAL; a database crash empties it, and a
-- client then re-sends its request. Rows go with their session, or after the configured
-- retention.
create unlogged table mcp_event (
    event_seq bigint generated always as identity primary key,
    tenant_id uuid not null,
    session_id text not null,
    stream_id text not null,
    -- The JSON-RPC message; null for a priming (retry-only) event.
    message text,
    retry_ms integer,
    created_at timestamptz not null default now()
);
create index mcp_event_session_idx on mcp_event (session_id, stream_id, event_seq);
create index mcp_event_created_at_idx on mcp_event (created_at);

alter table mcp_event enable row level security;
create policy tenant_isolation on mcp_event using (tenant_id = toolgate_tenant()) with check (tenant_id = toolgate_tenant());
grant select, insert, delete on mcp_event to toolgate_app;
