-- SSE events of MCP sessions, for `Last-Event-ID` resumption (see the Postgres migration
-- of the same number).
create table mcp_event (
    event_seq integer primary key autoincrement,
    tenant_id text not null,
    session_id text not null,
    stream_id text not null,
    message text,
    retry_ms integer,
    created_at text not null
);
create index mcp_event_session_idx on mcp_event (session_id, stream_id, event_seq);
create index mcp_event_created_at_idx on mcp_event (created_at);
