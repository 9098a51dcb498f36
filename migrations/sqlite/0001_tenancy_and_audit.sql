-- Tenants, principals, API keys, the audit log and security events (embedded SQLite).
-- Ids are hyphenated UUID text, times RFC 3339 text (UTC), lists JSON text, so the file
-- reads well in the sqlite3 shell. SQLite has no row-level security: the store's tenant
-- filters are the wall here, and the shared store suite checks them.

create table tenant (
    tenant_id text primary key,
    name text not null,
    created_at text not null,
    constraint tenant_name_key unique (name)
);

create table principal (
    principal_id text primary key,
    tenant_id text not null references tenant (tenant_id),
    kind text not null constraint principal_kind_check check (kind in ('user', 'service_account')),
    name text not null,
    roles text not null default '[]',
    scopes text not null default '[]',
    created_at text not null,
    constraint principal_tenant_id_name_key unique (tenant_id, name)
);

create table api_key (
    api_key_id text primary key,
    tenant_id text not null references tenant (tenant_id),
    principal_id text not null references principal (principal_id),
    name text not null,
    prefix text not null,
    secret_hash text not null constraint api_key_secret_hash_key unique,
    scopes text not null default '[]',
    expires_at text,
    last_used_at text,
    revoked_at text,
    created_at text not null
);
create index api_key_tenant_id_idx on api_key (tenant_id);

create table audit_log (
    call_id text primary key,
    tenant_id text not null references tenant (tenant_id),
    seq integer not null,
    principal_id text not null,
    adapter text not null,
    tool text not null,
    arguments text not null,
    arguments_hash text not null,
    outcome text not null,
    error text,
    duration_us integer not null,
    request_id text,
    trace_id text,
    run_id text,
    step integer,
    client text,
    started_at text not null,
    finished_at text not null,
    prev_hash text not null,
    row_hash text not null,
    constraint audit_log_tenant_id_seq_key unique (tenant_id, seq)
);
create index audit_log_tenant_started_idx on audit_log (tenant_id, started_at);

create table audit_chain_head (
    tenant_id text primary key references tenant (tenant_id),
    seq integer not null,
    row_hash text not null
);

create table call_intent (
    call_id text primary key,
    tenant_id text not null references tenant (tenant_id),
    principal_id text not null,
    adapter text not null,
    tool text not null,
    arguments text not null,
    arguments_hash text not null,
    request_id text,
    trace_id text,
    run_id text,
    step integer,
    client text,
    started_at text not null
);

create table security_event (
    security_event_id integer primary key autoincrement,
    occurred_at text not null,
    source text,
    route text not null,
    reason text not null
);

create trigger audit_log_no_update before update on audit_log
begin
    select raise(abort, 'audit_log is append-only (UPDATE refused)');
end;
create trigger audit_log_no_delete before delete on audit_log
begin
    select raise(abort, 'audit_log is append-only (DELETE refused)');
end;

create view audit_calls_per_tool_per_day as
    select tenant_id, tool, substr(started_at, 1, 10) as day, count(*) as calls,
           sum(outcome <> 'ok') as errors
    from audit_log group by tenant_id, tool, substr(started_at, 1, 10);

create view audit_error_rate as
    select tenant_id, tool, count(*) as calls,
           round(100.0 * sum(outcome <> 'ok') / count(*), 2) as error_pct
    from audit_log group by tenant_id, tool;

create view audit_slowest_tools as
    select tenant_id, tool, count(*) as calls, avg(duration_us) / 1000.0 as avg_ms,
           max(duration_us) / 1000.0 as max_ms
    from audit_log group by tenant_id, tool;
