-- Tenants' own upstream MCP servers (issue 6): HTTP only; the operator's upstreams live in
-- the configuration file. `config` holds everything but the credentials (URL, allow and
-- deny lists, deadlines, header names); `credentials` holds the static headers and bearer
-- token sealed by the gateway (ChaCha20-Poly1305, key from its configuration), opaque to
-- the database. `revision` grows with every change, so each gateway instance can tell
-- which of its connections are stale.
create table tenant_upstream (
    upstream_id uuid primary key,
    tenant_id uuid not null references tenant (tenant_id),
    name text not null,
    config jsonb not null,
    credentials bytea,
    revision bigint not null default 1,
    created_by uuid,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    constraint tenant_upstream_tenant_name_key unique (tenant_id, name)
);

alter table tenant_upstream enable row level security;
create policy tenant_isolation on tenant_upstream using (tenant_id = toolgate_tenant()) with check (tenant_id = toolgate_tenant());
grant select, insert, update, delete on tenant_upstream to toolgate_app;
