-- Pinned upstream tool definitions (issue 29, the rug-pull defence). One row per tool of
-- an upstream: the definition last accepted (`pinned`, its hash) and, while a changed
-- or suspicious one waits for a person, that one (`pending`), with what the checks
-- found in its description. `owner_id` is the tenant owning the upstream, or the nil
-- uuid for the operator's upstreams (so no foreign key). Written by each instance's
-- upstream supervisors; read and approved over REST.
create table tool_pin (
    owner_id uuid not null,
    upstream text not null,
    tool text not null,
    exported text not null,
    pinned_hash text,
    pinned jsonb,
    pending_hash text,
    pending jsonb,
    findings jsonb not null default '[]',
    updated_at timestamptz not null default now(),
    approved_by uuid,
    approved_at timestamptz,
    primary key (owner_id, upstream, tool)
);
create index tool_pin_pending_idx on tool_pin (owner_id) where pending_hash is not null;

alter table tool_pin enable row level security;
create policy tenant_isolation on tool_pin using (owner_id = toolgate_tenant()) with check (owner_id = toolgate_tenant());
grant select, insert, update, delete on tool_pin to toolgate_app;
