-- Pinned upstream tool definitions (see the Postgres migration of the same number).
create table tool_pin (
    owner_id text not null,
    upstream text not null,
    tool text not null,
    exported text not null,
    pinned_hash text,
    pinned text,
    pending_hash text,
    pending text,
    findings text not null default '[]',
    updated_at text not null,
    approved_by text,
    approved_at text,
    primary key (owner_id, upstream, tool)
);
