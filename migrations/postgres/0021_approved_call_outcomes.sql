-- Approved REST calls still without an outcome: every instance's heartbeat looks for
-- those started long ago (their instance stopped while making them) to give them one.
-- The set is small (calls in flight, and orphans), so the sweep reads this index alone
-- instead of the whole approval table.
create index approval_outcome_due_idx on approval (used_at)
    where status = 'approved' and adapter = 'rest' and run_id is null and result is null;
