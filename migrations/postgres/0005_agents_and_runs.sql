-- Agents (a tenant's named model + prompt + toolset) and their runs. A run's truth is its
-- append-only event journal (`run_event`); the `run` row is a summary for listing, plus
-- what another instance needs to resume it (the caller's auth context and the agent's
-- configuration as they were at the start, and a lease saying which instance drives it).
create table agent (
    agent_id uuid primary key,
    tenant_id uuid not null references tenant (tenant_id),
    name text not null,
    config jsonb not null,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    constraint agent_tenant_name_key unique (tenant_id, name)
);

create table run (
    run_id uuid primary key,
    tenant_id uuid not null references tenant (tenant_id),
    -- No foreign key: deleting an agent keeps its runs readable.
    agent_id uuid not null,
    agent_name text not null,
    principal_id uuid not null,
    -- The caller's auth context (tenant, principal, roles, scopes; never a token).
    auth jsonb not null,
    -- The agent's configuration when the run started: edits do not change a running run.
    agent_config jsonb not null,
    input text not null,
    status text not null check (status in ('running', 'completed', 'failed', 'cancelled')),
    output text,
    best_effort boolean not null default false,
    error text,
    usage jsonb,
    -- The instance driving the run, until when; an expired lease means nobody is.
    owner text,
    lease_until timestamptz,
    cancel_requested boolean not null default false,
    created_at timestamptz not null default now(),
    finished_at timestamptz
);
create index run_tenant_created_idx on run (tenant_id, created_at desc);
create index run_running_lease_idx on run (lease_until) where status = 'running';

create table run_event (
    run_id uuid not null references run (run_id),
    tenant_id uuid not null,
    -- 1, 2, 3… per run; the SSE event id.
    seq bigint not null,
    kind text not null,
    payload jsonb not null,
    created_at timestamptz not null default now(),
    primary key (run_id, seq)
);

alter table agent enable row level security;
create policy tenant_isolation on agent using (tenant_id = toolgate_tenant()) with check (tenant_id = toolgate_tenant());
alter table run enable row level security;
create policy tenant_isolation on run using (tenant_id = toolgate_tenant()) with check (tenant_id = toolgate_tenant());
alter table run_event enable row level security;
create policy tenant_isolation on run_event using (tenant_id = toolgate_tenant()) with check (tenant_id = toolgate_tenant());

grant select, insert, update, delete on agent to toolgate_app;
grant select, insert, update on run to toolgate_app;
-- Append-only: no update or delete.
grant select, insert on run_event to toolgate_app;
