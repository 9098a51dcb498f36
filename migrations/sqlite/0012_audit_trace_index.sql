-- Finding a trace's calls (see the Postgres migration of the same number).
create index audit_log_tenant_trace_idx on audit_log (tenant_id, trace_id) where trace_id is not null;
