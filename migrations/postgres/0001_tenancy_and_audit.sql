-- Tenants, principals, API keys, the audit log and security events.

-- The role the gateway works as. NOLOGIN: the gateway connects as its own login and
-- switches with SET ROLE, so no password exists for this role. Created idempotently
-- (roles are cluster-wide; several databases may run these migrations).
do $$
begin
    create role toolgate_app nologin;
exception
    when duplicate_object or unique_violation then null;
end
$$;

-- The connecting role must be able to SET ROLE toolgate_app.
do $$
begin
    execute format('grant toolgate_app to %I', current_user);
exception
    when others then null; -- already a member, or a superuser (who needs no grant)
end
$$;

create table tenant (
    tenant_id uuid primary key,
    name text not null,
    created_at timestamptz not null default now(),
    constraint tenant_name_key unique (name)
);

create table principal (
    principal_id uuid primary key,
    tenant_id uuid not null references tenant (tenant_id),
    -- 'user' or 'service_account'
    kind text not null constraint principal_kind_check check (kind in ('user', 'service_account')),
    name text not null,
    -- JSON arrays of strings
    roles jsonb not null default '[]',
    scopes jsonb not null default '[]',
    created_at timestamptz not null default now(),
    constraint principal_tenant_id_name_key unique (tenant_id, name)
);

create table api_key (
    api_key_id uuid primary key,
    tenant_id uuid not null references tenant (tenant_id),
    principal_id uuid not null references principal (principal_id),
    name text not null,
    -- The first characters of the key, shown in listings so people can tell keys apart.
    prefix text not null,
    -- SHA-256 of the whole key. Keys carry 256 random bits, so a fast hash is enough.
    secret_hash text not null constraint api_key_secret_hash_key unique,
    scopes jsonb not null default '[]',
    expires_at timestamptz,
    last_used_at timestamptz,
    revoked_at timestamptz,
    created_at timestamptz not null default now()
);
create index api_key_tenant_id_idx on api_key (tenant_id);

-- One row per tool call, from every adapter. Append-only and hash-chained per tenant.
create table audit_log (
    call_id uuid primary key,
    tenant_id uuid not null references tenant (tenant_id),
    -- Position in the tenant's chain, from 1.
    seq bigint not null,
    principal_id uuid not null,
    adapter text not null,
    tool text not null,
    -- Arguments with secret fields masked, as canonical JSON text. `json`, not `jsonb`:
    -- the text is hashed, and jsonb would re-normalize it.
    arguments json not null,
    arguments_hash text not null,
    -- 'ok' or an error category: invalid_arguments, not_found, forbidden, denied,
    -- timeout, cancelled, upstream, internal, … ('interrupted' for calls cut by a crash)
    outcome text not null,
    error text,
    duration_us bigint not null,
    request_id text,
    trace_id text,
    run_id uuid,
    step integer,
    client text,
    started_at timestamptz not null,
    finished_at timestamptz not null,
    prev_hash text not null,
    row_hash text not null,
    constraint audit_log_tenant_id_seq_key unique (tenant_id, seq)
);
create index audit_log_tenant_started_idx on audit_log (tenant_id, started_at);
create index audit_log_tenant_tool_idx on audit_log (tenant_id, tool);

-- The head of each tenant's chain, locked (FOR UPDATE) by the writer appending to it, so
-- several gateway instances extend one chain without forking it.
create table audit_chain_head (
    tenant_id uuid primary key references tenant (tenant_id),
    seq bigint not null,
    row_hash text not null
);

-- Calls with side effects that have started and not yet been recorded. A row left here
-- at start-up is a call cut short by a crash; it becomes an 'interrupted' audit row.
create table call_intent (
    call_id uuid primary key,
    tenant_id uuid not null references tenant (tenant_id),
    principal_id uuid not null,
    adapter text not null,
    tool text not null,
    arguments json not null,
    arguments_hash text not null,
    request_id text,
    trace_id text,
    run_id uuid,
    step integer,
    client text,
    started_at timestamptz not null
);

-- Failed authentication attempts: no tenant, never the presented credential.
create table security_event (
    security_event_id bigint generated always as identity primary key,
    occurred_at timestamptz not null default now(),
    source text,
    route text not null,
    reason text not null
);

-- Append-only, whoever asks.
create function audit_log_reject_change() returns trigger language plpgsql as $$
begin
    raise exception 'audit_log is append-only (% refused)', tg_op
        using errcode = 'insufficient_privilege';
end
$$;
create trigger audit_log_append_only before update or delete on audit_log
    for each row execute function audit_log_reject_change();
create trigger audit_log_no_truncate before truncate on audit_log
    for each statement execute function audit_log_reject_change();

-- Row-level security: the second wall behind the store's own tenant filters.
create function toolgate_tenant() returns uuid language sql stable as $$
    select nullif(current_setting('toolgate.tenant_id', true), '')::uuid
$$;

alter table tenant enable row level security;
create policy tenant_isolation on tenant using (tenant_id = toolgate_tenant());
alter table principal enable row level security;
create policy tenant_isolation on principal using (tenant_id = toolgate_tenant()) with check (tenant_id = toolgate_tenant());
alter table api_key enable row level security;
create policy tenant_isolation on api_key using (tenant_id = toolgate_tenant()) with check (tenant_id = toolgate_tenant());
alter table audit_log enable row level security;
create policy tenant_isolation on audit_log using (tenant_id = toolgate_tenant()) with check (tenant_id = toolgate_tenant());
alter table audit_chain_head enable row level security;
create policy tenant_isolation on audit_chain_head using (tenant_id = toolgate_tenant()) with check (tenant_id = toolgate_tenant());
alter table call_intent enable row level security;
create policy tenant_isolation on call_intent using (tenant_id = toolgate_tenant()) with check (tenant_id = toolgate_tenant());

grant usage on schema public to toolgate_app;
grant select on tenant to toolgate_app;
grant select, insert on principal to toolgate_app;
grant select, insert, update on api_key to toolgate_app;
grant select, insert on audit_log to toolgate_app;
grant select, insert, update on audit_chain_head to toolgate_app;
grant select, insert, delete on call_intent to toolgate_app;
grant insert on security_event to toolgate_app;

-- Views for common questions (docs/AUDIT.md has example queries). security_invoker: they
-- run with the caller's rights, so row-level security still applies through them.
create view audit_calls_per_tool_per_day with (security_invoker = true) as
    select tenant_id, tool, date_trunc('day', started_at) as day,
           count(*) as calls,
           count(*) filter (where outcome <> 'ok') as errors
    from audit_log group by tenant_id, tool, date_trunc('day', started_at);

create view audit_error_rate with (security_invoker = true) as
    select tenant_id, tool, count(*) as calls,
           round(100.0 * count(*) filter (where outcome <> 'ok') / count(*), 2) as error_pct
    from audit_log group by tenant_id, tool;

create view audit_slowest_tools with (security_invoker = true) as
    select tenant_id, tool, count(*) as calls,
           percentile_cont(0.5) within group (order by duration_us) / 1000.0 as p50_ms,
           percentile_cont(0.99) within group (order by duration_us) / 1000.0 as p99_ms,
           max(duration_us) / 1000.0 as max_ms
    from audit_log group by tenant_id, tool;

grant select on audit_calls_per_tool_per_day, audit_error_rate, audit_slowest_tools to toolgate_app;
