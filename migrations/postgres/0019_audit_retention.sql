-- Retention of the audit log (`toolgate audit prune`). The log stays append-only above a
-- tenant's *base*: a signed checkpoint rows may be removed up to, once the base is
-- recorded here. Each move of the base is a row of its own, kept forever: pruning is
-- never silent, the base only moves forward, and only to a checkpoint (the foreign key),
-- whose signature `toolgate audit verify` checks like any other. The chain is then
-- verified from the base: the first kept row must link to the checkpoint's hash.
--
-- The gateway's role may read the base, not move it, and still deletes nothing: pruning
-- runs as the connecting (owner) role, as migrations do.
create table audit_prune (
    tenant_id uuid not null references tenant (tenant_id),
    seq bigint not null,
    pruned_at timestamptz not null,
    primary key (tenant_id, seq),
    foreign key (tenant_id, seq) references audit_checkpoint (tenant_id, seq)
);

create function audit_prune_only_forward() returns trigger language plpgsql as $$
begin
    if tg_op <> 'INSERT' then
        raise exception 'audit_prune is append-only (% refused)', tg_op
            using errcode = 'insufficient_privilege';
    end if;
    if new.seq <= coalesce((select max(p.seq) from audit_prune p where p.tenant_id = new.tenant_id), 0) then
        raise exception 'the audit base of tenant % only moves forward', new.tenant_id
            using errcode = 'insufficient_privilege';
    end if;
    return new;
end
$$;
create trigger audit_prune_only_forward before insert or update or delete on audit_prune
    for each row execute function audit_prune_only_forward();
create trigger audit_prune_no_truncate before truncate on audit_prune
    for each statement execute function audit_prune_only_forward();

-- Rows at or below the tenant's base may be deleted; every other change stays refused
-- (the same triggers as before: `audit_log_append_only`, `audit_log_no_truncate`).
create or replace function audit_log_reject_change() returns trigger language plpgsql as $$
begin
    if tg_op = 'DELETE' then
        if old.seq <= coalesce((select max(p.seq) from audit_prune p where p.tenant_id = old.tenant_id), 0) then
            return old;
        end if;
    end if;
    raise exception 'audit_log is append-only (% refused)', tg_op
        using errcode = 'insufficient_privilege';
end
$$;

alter table audit_prune enable row level security;
create policy tenant_isolation on audit_prune using (tenant_id = toolgate_tenant());
grant select on audit_prune to toolgate_app;
