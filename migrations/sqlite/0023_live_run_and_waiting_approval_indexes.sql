-- The live runs and waiting approvals every 15 seconds' reads need (see the Postgres
-- migration of the same number): without them each read scanned the whole table. And
-- the index of a run's undecided approvals Postgres has had since 0007: without it, the
-- check for a waiting run's decision read every unused approval, for each such run.
create index run_live_idx on run (status, created_at)
    where status in ('running', 'awaiting_approval');
create index approval_waiting_idx on approval (expires_at)
    where status = 'pending' or (status = 'approved' and used_at is null);
create index approval_run_idx on approval (run_id) where run_id is not null and used_at is null;
