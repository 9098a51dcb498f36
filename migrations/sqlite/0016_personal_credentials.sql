-- Principals' own credentials for a tenant upstream (see the Postgres migration of the
-- same number).
create table principal_credential (
    tenant_id text not null references tenant (tenant_id),
    upstream_id text not null references tenant_upstream (upstream_id) on delete cascade,
    principal_id text not null,
    credentials blob not null,
    updated_at text not null,
    primary key (upstream_id, principal_id)
);
