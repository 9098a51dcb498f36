-- no-transaction
-- Approval policy and approvals (see the Postgres migration of the same number).
-- Outside a transaction because SQLite changes a CHECK constraint by rebuilding the
-- table, with foreign keys off while it does (https://sqlite.org/lang_altertable.html).
pragma foreign_keys = off;
begin;

create table tenant_policy (
    tenant_id text primary key references tenant (tenant_id),
    policy text not null,
    updated_at text not null
);

create table approval (
    approval_id text primary key,
    tenant_id text not null references tenant (tenant_id),
    call_id text not null,
    tool text not null,
    risk text not null,
    adapter text not null,
    arguments text not null,
    arguments_hash text not null,
    call_arguments text,
    requester_id text not null,
    requester_name text not null,
    auth text not null,
    run_id text,
    step integer,
    agent text,
    status text not null check (status in ('pending', 'approved', 'denied', 'expired')),
    reason text,
    decided_by text,
    decided_by_name text,
    decided_at text,
    expires_at text not null,
    created_at text not null,
    used_at text,
    result text,
    unique (tenant_id, call_id)
);
create index approval_tenant_status_idx on approval (tenant_id, status, created_at desc);
create index approval_unused_idx on approval (tenant_id, requester_id, tool, arguments_hash) where used_at is null;

alter table audit_log add column approval_id text;

create table run_new (
    run_id text primary key,
    tenant_id text not null references tenant (tenant_id),
    agent_id text not null,
    agent_name text not null,
    principal_id text not null,
    auth text not null,
    agent_config text not null,
    input text not null,
    status text not null check (status in ('running', 'awaiting_approval', 'completed', 'failed', 'cancelled')),
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
insert into run_new select * from run;
drop table run;
alter table run_new rename to run;
create index run_tenant_created_idx on run (tenant_id, created_at desc);
pragma foreign_key_check;

commit;
pragma foreign_keys = on;
