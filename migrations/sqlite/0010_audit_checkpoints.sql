-- Signed checkpoints of each tenant's audit chain (see the Postgres migration of the same
-- number).
create table audit_checkpoint (
    tenant_id text not null references tenant (tenant_id),
    seq integer not null,
    row_hash text not null,
    key_id text not null,
    signature text not null,
    signed_at text not null,
    primary key (tenant_id, seq)
);

create trigger audit_checkpoint_no_update before update on audit_checkpoint
begin
    select raise(abort, 'audit checkpoints are append-only');
end;
create trigger audit_checkpoint_no_delete before delete on audit_checkpoint
begin
    select raise(abort, 'audit checkpoints are append-only');
end;
