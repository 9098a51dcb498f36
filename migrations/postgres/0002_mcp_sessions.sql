-- MCP sessions (protocol versions before 2026-07-28 have them; 2026-07-28 is stateless):
-- who opened each one, and the client's initialize parameters, so that any gateway
-- instance can take a session over and refuse it to anyone but its owner.
create table mcp_session (
    session_id text primary key,
    tenant_id uuid not null references tenant (tenant_id),
    -- No foreign key: JWT principals are not stored as rows.
    principal_id uuid not null,
    initialize_params json not null,
    created_at timestamptz not null default now()
);
create index mcp_session_tenant_id_idx on mcp_session (tenant_id);

alter table mcp_session enable row level security;
create policy tenant_isolation on mcp_session using (tenant_id = toolgate_tenant()) with check (tenant_id = toolgate_tenant());
grant select, insert, delete on mcp_session to toolgate_app;
