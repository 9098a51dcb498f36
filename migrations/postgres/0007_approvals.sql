-- Approval policy and approvals (issue 7).
--
-- A tenant's policy (ratification level, rules, self-approval, time to live) is one JSON
-- document. An approval is one call held for a person's decision: what was asked (tool,
-- masked arguments, risk, adapter, requester), who decided what and why, until when it
-- may wait, and when a call used the decision. `call_arguments` holds the arguments as
-- given, so an approved REST call can run later; it is cleared once the call is settled.

create table tenant_policy (
    tenant_id uuid primary key references tenant (tenant_id),
    policy jsonb not null,
    updated_at timestamptz not null default now()
);

create table approval (
    approval_id uuid primary key,
    tenant_id uuid not null references tenant (tenant_id),
    call_id uuid not null,
    tool text not null,
    risk text not null,
    adapter text not null,
    arguments jsonb not null,
    arguments_hash text not null,
    -- `json`, not `jsonb`: kept byte for byte, so its hash still matches the call's.
    call_arguments json,
    requester_id uuid not null,
    requester_name text not null,
    -- The requester's auth context (never a token), to run an approved call as them.
    auth jsonb not null,
    run_id uuid,
    step integer,
    agent text,
    status text not null constraint approval_status_check
        check (status in ('pending', 'approved', 'denied', 'expired')),
    reason text,
    decided_by uuid,
    decided_by_name text,
    decided_at timestamptz,
    expires_at timestamptz not null,
    created_at timestamptz not null,
    -- When a call used the decision (ran after approval, or was told it was denied).
    used_at timestamptz,
    -- For a REST call run after approval: its outcome, as GET /v1/calls/{call_id} shows it.
    result jsonb,
    constraint approval_call_key unique (tenant_id, call_id)
);
create index approval_tenant_status_idx on approval (tenant_id, status, created_at desc);
create index approval_unused_idx on approval (tenant_id, requester_id, tool, arguments_hash) where used_at is null;
create index approval_run_idx on approval (run_id) where run_id is not null and used_at is null;

alter table tenant_policy enable row level security;
create policy tenant_isolation on tenant_policy using (tenant_id = toolgate_tenant()) with check (tenant_id = toolgate_tenant());
alter table approval enable row level security;
create policy tenant_isolation on approval using (tenant_id = toolgate_tenant()) with check (tenant_id = toolgate_tenant());
grant select, insert, update on tenant_policy to toolgate_app;
grant select, insert, update on approval to toolgate_app;

-- Which approval a call asked for, used, or was refused by; for rows of adapter
-- 'approval', the one decided.
alter table audit_log add column approval_id uuid;
create index audit_log_approval_idx on audit_log (approval_id) where approval_id is not null;

-- A run waiting for a person holds no lease.
alter table run drop constraint run_status_check;
alter table run add constraint run_status_check
    check (status in ('running', 'awaiting_approval', 'completed', 'failed', 'cancelled'));
