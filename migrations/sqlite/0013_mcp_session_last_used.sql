-- When each MCP session was last seen in use (see the Postgres migration of the same number).
alter table mcp_session add column last_used_at text;
update mcp_session set last_used_at = created_at;
create index mcp_session_last_used_idx on mcp_session (last_used_at);
