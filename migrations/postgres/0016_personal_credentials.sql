-- Principals' own credentials for a tenant upstream (issue 29): when an upstream calls
-- with each caller's credential, each principal stores its own, sealed by the gateway
-- like the upstream's (ChaCha20-Poly1305, bound to tenant, upstream, principal and URL),
-- opaque to the database. They go with their upstream.
create table principal_credential (
    tenant_id uuid not null references tenant (tenant_id),
    upstream_id uuid not null references tenant_upstream (upstream_id) on delete cascade,
    principal_id uuid not null,
    credentials bytea not null,
    updated_at timestamptz not null default now(),
    primary key (upstream_id, principal_id)
);

alter table principal_credential enable row level security;
create policy tenant_isolation on principal_credential using (tenant_id = toolgate_tenant()) with check (tenant_id = toolgate_tenant());
grant select, insert, update, delete on principal_credential to toolgate_app;
