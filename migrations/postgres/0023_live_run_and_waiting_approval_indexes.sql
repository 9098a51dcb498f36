-- What every instance reads every 15 seconds: the runs still going (to count them for
-- `toolgate_runs` and to take over those whose instance stopped) and the approvals still
-- waiting (to count and expire them). None of these had an index to seek with, so each
-- read scanned the whole `run` and `approval` tables, history included: with a million
-- finished runs, about half a second and a gigabyte of pages per statement, per instance,
-- growing with every run ever made. These partial indexes hold only the live rows, so
-- the reads cost what is live, not what is kept. Their predicates are the statements'
-- own terms (SQLite uses a partial index only for a term it finds as written).
create index run_live_idx on run (status, created_at)
    where status in ('running', 'awaiting_approval');
create index approval_waiting_idx on approval (expires_at)
    where status = 'pending' or (status = 'approved' and used_at is null);
