-- What-if for crates/toolgate-store/examples/audit_rows.rs (AUDIT_ROWS_SQL), never run on a
-- real store: audit_log rebuilt WITHOUT ROWID, keyed by (tenant_id, seq), so the table and
-- the chain's unique index are one b-tree. Measured in docs/BENCHMARKS.md (wave 2, session 13).
pragma legacy_alter_table=on;
create table audit_log_x (
    call_id text not null,
    tenant_id text not null references tenant (tenant_id),
    seq integer not null,
    principal_id text not null,
    adapter text not null,
    tool text not null,
    arguments text not null,
    arguments_hash text not null,
    outcome text not null,
    error text,
    duration_us integer not null,
    request_id text,
    trace_id text,
    run_id text,
    step integer,
    client text,
    started_at text not null,
    finished_at text not null,
    prev_hash text not null,
    row_hash text not null,
    approval_id text,
    cache text,
    primary key (tenant_id, seq)
) without rowid;
drop table audit_log;
alter table audit_log_x rename to audit_log;
create unique index audit_log_call_id_key on audit_log (call_id);
create index audit_log_tenant_started_idx on audit_log (tenant_id, started_at);
create index audit_log_tenant_trace_idx on audit_log (tenant_id, trace_id) where trace_id is not null;
