-- Tenants' own upstream MCP servers (see the Postgres migration of the same number).
create table tenant_upstream (
    upstream_id text primary key,
    tenant_id text not null references tenant (tenant_id),
    name text not null,
    config text not null,
    credentials blob,
    revision integer not null default 1,
    created_by text,
    created_at text not null,
    updated_at text not null,
    unique (tenant_id, name)
);
