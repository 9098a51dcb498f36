-- Retention of signed checkpoints. A checkpoint below a tenant's base signs a row that
-- `toolgate audit prune` removed: it proves nothing about the kept chain (verification
-- starts at the base, itself a checkpoint), and at one a minute a busy tenant stored half
-- a million a year that no prune touched. Those may now be deleted, with the rows; every
-- other change stays refused, for the connecting role too (the gateway's role has no
-- DELETE privilege on the table at all). The checkpoints the bases were moved to stay:
-- `audit_prune` names them.
create function audit_checkpoint_reject_change() returns trigger language plpgsql as $$
begin
    if tg_op = 'DELETE' then
        if old.seq < coalesce((select max(p.seq) from audit_prune p where p.tenant_id = old.tenant_id), 0) then
            return old;
        end if;
    end if;
    raise exception 'audit_checkpoint is append-only (% refused; only checkpoints below the base may be deleted)', tg_op
        using errcode = 'insufficient_privilege';
end
$$;
create trigger audit_checkpoint_append_only before update or delete on audit_checkpoint
    for each row execute function audit_checkpoint_reject_change();
create trigger audit_checkpoint_no_truncate before truncate on audit_checkpoint
    for each statement execute function audit_checkpoint_reject_change();
