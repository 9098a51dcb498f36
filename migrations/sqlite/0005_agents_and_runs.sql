-- Agents and their runs (see the Postgres migration of the same number).
create table agent (
    agent_id text primary key,
    tenant_id text not null references tenant (tenant_id),
    name text not null,
    config text not null,
    created_at text not null,
    updated_at text not null,
    unique (tenant_id, name)
);

create table run (
    run_id text primary key,
    tenant_id text not null references tenant (tenant_id),
    agent_id text not null,
    agent_name text not null,
    principal_id text not null,
    auth text not null,
    agent_config text not null,
    input text not null,
    status text not null check (status in ('running', 'completed', 'failed', 'cancelled')),
    output text,
    best_effort integer not null default 0,
    error text,
    usage text,
    owner text,
    lease_until text,
    cancel_requested integer not null default 0,
    created_at text not null,
    finished_at text
);
create index run_tenant_created_idx on run (tenant_id, created_at desc);

create table run_event (
    run_id text not null references run (run_id),
    tenant_id text not null,
    seq integer not null,
    kind text not null,
    payload text not null,
    created_at text not null,
    primary key (run_id, seq)
);
