-- Signed checkpoints of each tenant's audit chain (hardening issue): every so often a
-- gateway signs (tenant, seq, row_hash) of the chain head with the deployment's Ed25519
-- key. Deleting the newest rows and rewriting audit_chain_head to match still leaves a
-- checkpoint naming a row that is gone, and a checkpoint cannot be forged without the key,
-- which is kept outside the database. Exported copies (`toolgate audit checkpoints`) keep
-- the evidence off the host.
create table audit_checkpoint (
    tenant_id uuid not null references tenant (tenant_id),
    seq bigint not null,
    row_hash text not null,
    key_id text not null,
    signature text not null,
    signed_at timestamptz not null,
    primary key (tenant_id, seq)
);

alter table audit_checkpoint enable row level security;
create policy tenant_isolation on audit_checkpoint using (tenant_id = toolgate_tenant()) with check (tenant_id = toolgate_tenant());
grant select, insert on audit_checkpoint to toolgate_app;
