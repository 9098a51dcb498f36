-- Retention of signed checkpoints (see the Postgres migration of the same number):
-- checkpoints below a tenant's base sign rows that were pruned, and may be deleted with
-- them. Those at or above the base stay append-only.
drop trigger audit_checkpoint_no_delete;
create trigger audit_checkpoint_no_delete before delete on audit_checkpoint
    when old.seq >= coalesce((select max(seq) from audit_prune where tenant_id = old.tenant_id), 0)
begin
    select raise(abort, 'audit checkpoints are append-only (only those below the base may be deleted)');
end;
