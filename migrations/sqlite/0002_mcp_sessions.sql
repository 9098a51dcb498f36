-- MCP sessions: who opened each one, and the client's initialize parameters (see the
-- Postgres migration of the same number).
create table mcp_session (
    session_id text primary key,
    tenant_id text not null references tenant (tenant_id),
    principal_id text not null,
    initialize_params text not null,
    created_at text not null
);
create index mcp_session_tenant_id_idx on mcp_session (tenant_id);
