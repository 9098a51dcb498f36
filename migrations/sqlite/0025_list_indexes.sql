-- As on Postgres (the migration of the same number).
-- Lists newest first, a page at a time (GET /v1/runs?status=…, a caller's own runs,
-- GET /v1/approvals?status=all): an index in their order, so a page reads its rows and the
-- next page seeks to where the last one stopped, instead of reading or sorting the
-- tenant's whole history for each.
create index run_tenant_status_created_idx on run (tenant_id, status, created_at desc);
create index run_tenant_principal_created_idx on run (tenant_id, principal_id, created_at desc);
create index approval_tenant_created_idx on approval (tenant_id, created_at desc);
