-- See the Postgres migration of the same number: a settled approval keeps no arguments
-- in the clear. And the index Postgres has had since 0007, which `toolgate audit prune`
-- needs to find the approvals no kept audit row names.
update approval set call_arguments = null
where status in ('denied', 'expired') and call_arguments is not null;
create index audit_log_approval_idx on audit_log (approval_id) where approval_id is not null;
