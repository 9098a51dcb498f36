-- When each MCP session was last seen in use, so that sessions nobody came back to are
-- pruned (mcp.session_retention_secs); rows were kept forever. Instances stamp the
-- sessions they hold in memory about once a minute, and a session restored from the
-- store is in memory.
alter table mcp_session add column last_used_at timestamptz not null default now();
update mcp_session set last_used_at = created_at;
create index mcp_session_last_used_idx on mcp_session (last_used_at);
