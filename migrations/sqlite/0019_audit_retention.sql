-- Retention of the audit log (see the Postgres migration of the same number): rows at
-- or below a tenant's base, a signed checkpoint recorded here, may be deleted.
create table audit_prune (
    tenant_id text not null references tenant (tenant_id),
    seq integer not null,
    pruned_at text not null,
    primary key (tenant_id, seq),
    foreign key (tenant_id, seq) references audit_checkpoint (tenant_id, seq)
);

create trigger audit_prune_only_forward before insert on audit_prune
    when new.seq <= coalesce((select max(seq) from audit_prune where tenant_id = new.tenant_id), 0)
begin
    select raise(abort, 'the audit base only moves forward');
end;
create trigger audit_prune_no_update before update on audit_prune
begin
    select raise(abort, 'audit_prune is append-only');
end;
create trigger audit_prune_no_delete before delete on audit_prune
begin
    select raise(abort, 'audit_prune is append-only');
end;

drop trigger audit_log_no_delete;
create trigger audit_log_no_delete before delete on audit_log
    when old.seq > coalesce((select max(seq) from audit_prune where tenant_id = old.tenant_id), 0)
begin
    select raise(abort, 'audit_log is append-only (DELETE refused)');
end;
