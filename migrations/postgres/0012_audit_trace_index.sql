-- Finding a trace's calls (GET /v1/audit?trace_id=…, the console's audit search) without
-- reading the tenant's whole log.
create index audit_log_tenant_trace_idx on audit_log (tenant_id, trace_id) where trace_id is not null;
