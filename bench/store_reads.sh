#!/usr/bin/env bash
# What the store asks Postgres on a long history: N runs (1,000,000 by default; one in a
# thousand running, one in 997 waiting for approval, one in 500 failed, the rest
# completed), N/5 approvals (one in 500 pending, the rest decided) and N/10 API keys (one
# in ten revoked). Each statement is timed with EXPLAIN ANALYZE (the median of 5 runs,
# and the 8 kB pages it touched).
#
# 1. What every instance asks on a timer (every 15 seconds: runs still going, counted for
#    `toolgate_runs` and taken over when their instance stopped; approvals still waiting,
#    counted and expired; every second: whether an API key was revoked): on the schema of
#    migration 0022 with its statements as they were (the baseline), then after
#    migrations 0023 and 0024's partial indexes with the statements as the store now
#    writes them.
# 2. Pages of the lists newest first (GET /v1/runs: all, a caller's own — one run in a
#    hundred — and by status; GET /v1/approvals): the first page and one from the middle
#    of the history (a cursor half-way down), without migration 0025's indexes in the
#    lists' order (the baseline), then with them.
#
# 3. Part 1's statements on SQLite (bench/store_reads_sqlite.py): before the fix, one of
#    them takes minutes at N = 1,000,000, so this part does too.
#
#   bench/store_reads.sh
#   N=100000 bench/store_reads.sh
#
# Needs Postgres on 127.0.0.1:5432 (BENCH_PG overrides the admin URL); the
# database it makes is dropped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000000}
ADMIN=${BENCH_PG:-postgres://postgres@127.0.0.1:5432/postgres}
DB="tg_bench_store_reads_$$"
URL="${ADMIN%/*}/$DB"
psql "$ADMIN" -qc "create database $DB"
trap 'psql "$ADMIN" -qc "drop database if exists $DB with (force)"' EXIT
export PGOPTIONS="-c client_min_messages=warning"
q() { psql "$URL" -qAtX -v ON_ERROR_STOP=1 "$@"; }

for f in migrations/postgres/00*.sql; do
  case "$f" in *0023_* | *0024_* | *0025_*) break ;; esac
  q -f "$f" >/dev/null
done
q <<SQL
insert into tenant (tenant_id, name) values ('00000000-0000-0000-0000-0000000000aa', 'bench');
insert into run (run_id, tenant_id, agent_id, agent_name, principal_id, auth, agent_config, input,
                 status, output, owner, lease_until, created_at, finished_at)
select gen_random_uuid(), '00000000-0000-0000-0000-0000000000aa', gen_random_uuid(), 'helper',
       case when g % 100 = 0 then '00000000-0000-0000-0000-0000000000cc'::uuid else gen_random_uuid() end,
       '{"tenant_name":"bench","roles":["member"],"scopes":["tools:invoke","runs:write"]}',
       ('{"model":"m","system":"' || repeat('You are a helpful agent. ', 12) || '"}')::jsonb,
       'Summarise the README',
       case when g % 1000 = 0 then 'running' when g % 997 = 0 then 'awaiting_approval'
            when g % 500 = 1 then 'failed' else 'completed' end,
       repeat('answer ', 40),
       case when g % 1000 = 0 then 'instance-a' end,
       case when g % 1000 = 0 then now() + interval '1 hour' end,
       now() - g * interval '1 second', now()
from generate_series(1, $N) g;
insert into approval (approval_id, tenant_id, call_id, tool, risk, adapter, arguments,
                      arguments_hash, requester_id, requester_name, auth, status, expires_at,
                      created_at)
select gen_random_uuid(), '00000000-0000-0000-0000-0000000000aa', gen_random_uuid(), 'write_file',
       'high', 'rest', '{"path":"a.txt"}', md5(g::text), gen_random_uuid(), 'alice', '{}',
       case when g % 500 = 0 then 'pending' when g % 2 = 0 then 'denied' else 'expired' end,
       now() + case when g % 500 = 0 then interval '1 day' else interval '-1 day' end,
       now() - g * interval '1 second'
from generate_series(1, $N / 5) g;
insert into principal (principal_id, tenant_id, kind, name, roles, scopes)
values ('00000000-0000-0000-0000-0000000000bb', '00000000-0000-0000-0000-0000000000aa',
        'service_account', 'robot', '[]', '[]');
insert into api_key (api_key_id, tenant_id, principal_id, name, prefix, secret_hash, revoked_at)
select gen_random_uuid(), '00000000-0000-0000-0000-0000000000aa',
       '00000000-0000-0000-0000-0000000000bb', 'key ' || g, 'tg_', md5(g::text) || md5((-g)::text),
       case when g % 10 = 0 then now() - g * interval '1 second' end
from generate_series(1, $N / 10) g;
vacuum analyze run; vacuum analyze approval; vacuum analyze api_key;
SQL

WAITING="(status = 'pending' or (status = 'approved' and used_at is null))"
PENDING="select count(*) from approval where status = 'pending' and expires_at > now()"
EXPIRING="select approval_id from approval where $WAITING and expires_at <= now()"
REVOKED="select count(*), max(revoked_at) from api_key where revoked_at is not null"
BEFORE_RUNS="select status, count(*) from run group by status order by status"
BEFORE_CLAIM="select r.run_id from run r where (r.status = 'running' and (r.lease_until is null or r.lease_until < now()))
  or (r.status = 'awaiting_approval' and (r.cancel_requested
      or exists (select 1 from approval a where a.run_id = r.run_id and a.used_at is null
                 and (a.status <> 'pending' or a.expires_at <= now()))))
  order by r.created_at limit 16 for update of r skip locked"
AFTER_RUNS="select status, count(*) from run where status in ('running', 'awaiting_approval') group by status order by status"
AFTER_CLAIM="select r.run_id from run r where r.status in ('running', 'awaiting_approval')
  and ((r.status = 'running' and (r.lease_until is null or r.lease_until < now()))
  or (r.status = 'awaiting_approval' and (r.cancel_requested
      or exists (select 1 from approval a where a.run_id = r.run_id and a.run_id is not null
                 and a.used_at is null and (a.status <> 'pending' or a.expires_at <= now())))))
  order by r.created_at limit 16 for update of r skip locked"

time_of() { # SQL -> "median_ms pages"
  for _ in 1 2 3 4 5; do
    q -c "explain (analyze, buffers, format json) $1" |
      python3 -c 'import json,sys
p=json.load(sys.stdin)[0]
b=p["Plan"]
print(p["Execution Time"], b.get("Shared Hit Blocks",0)+b.get("Shared Read Blocks",0))'
  done | sort -n | sed -n 3p
}

declare -A before
for what in runs pending claim expiring revoked; do
  case $what in
    runs) sql=$BEFORE_RUNS ;; pending) sql=$PENDING ;; claim) sql=$BEFORE_CLAIM ;;
    expiring) sql=$EXPIRING ;; revoked) sql=$REVOKED ;;
  esac
  before[$what]=$(time_of "$sql")
done
q -f migrations/postgres/0023_live_run_and_waiting_approval_indexes.sql >/dev/null
q -f migrations/postgres/0024_revoked_key_index.sql >/dev/null
for t in run approval api_key; do q -c "vacuum analyze $t" >/dev/null; done

echo "N=$N runs, $((N / 5)) approvals, $((N / 10)) API keys; median of 5 EXPLAIN ANALYZE runs"
printf '%-28s %22s %22s %8s\n' statement "before: ms (pages)" "after: ms (pages)" ratio
total_before=0 total_after=0
for what in runs pending claim expiring; do
  case $what in
    runs) sql=$AFTER_RUNS; name="live runs (toolgate_runs)" ;;
    pending) sql=$PENDING; name="pending approvals" ;;
    claim) sql=$AFTER_CLAIM; name="runs to take over" ;;
    expiring) sql=$EXPIRING; name="approvals to expire" ;;
  esac
  read -r bms bpages <<<"${before[$what]}"
  read -r ams apages <<<"$(time_of "$sql")"
  printf '%-28s %13.2f (%6d) %13.2f (%6d) %8.4f\n' "$name" "$bms" "$bpages" "$ams" "$apages" \
    "$(python3 -c "print($ams / $bms)")"
  total_before=$(python3 -c "print($total_before + $bms)")
  total_after=$(python3 -c "print($total_after + $ams)")
done
printf '%-28s %13.2f %8s %13.2f %8s %8.4f\n' "every 15 s, per instance" "$total_before" "" \
  "$total_after" "" "$(python3 -c "print($total_after / $total_before)")"
read -r bms bpages <<<"${before[revoked]}"
read -r ams apages <<<"$(time_of "$REVOKED")"
printf '%-28s %13.2f (%6d) %13.2f (%6d) %8.4f\n' "revoked keys (every 1 s)" "$bms" "$bpages" "$ams" \
  "$apages" "$(python3 -c "print($ams / $bms)")"

# 2. Pages of the lists, as the store writes them (a page is limit + 1 rows: the last says
# there is more). The middle page's cursor: the run and approval half-way down.
T="'00000000-0000-0000-0000-0000000000aa'"
ME="'00000000-0000-0000-0000-0000000000cc'"
IFS='|' read -r RUN_AT RUN_ID <<<"$(q -F '|' -c "select created_at, run_id from run order by created_at desc, run_id desc offset $((N / 2)) limit 1")"
IFS='|' read -r APPROVAL_AT APPROVAL_ID <<<"$(q -F '|' -c "select created_at, approval_id from approval order by created_at desc, approval_id desc offset $((N / 10)) limit 1")"
after_run="and created_at <= '$RUN_AT' and (created_at < '$RUN_AT' or run_id < '$RUN_ID')"
after_approval="and created_at <= '$APPROVAL_AT' and (created_at < '$APPROVAL_AT' or approval_id < '$APPROVAL_ID')"
list() { # WHAT -> SQL
  case $1 in
    runs-first) echo "select * from run where tenant_id = $T order by created_at desc, run_id desc limit 51" ;;
    runs-middle) echo "select * from run where tenant_id = $T $after_run order by created_at desc, run_id desc limit 51" ;;
    mine-first) echo "select * from run where tenant_id = $T and principal_id = $ME order by created_at desc, run_id desc limit 51" ;;
    mine-middle) echo "select * from run where tenant_id = $T and principal_id = $ME $after_run order by created_at desc, run_id desc limit 51" ;;
    failed-first) echo "select * from run where tenant_id = $T and status = 'failed' order by created_at desc, run_id desc limit 51" ;;
    failed-middle) echo "select * from run where tenant_id = $T and status = 'failed' $after_run order by created_at desc, run_id desc limit 51" ;;
    approvals-first) echo "select * from approval where tenant_id = $T order by created_at desc, approval_id desc limit 101" ;;
    approvals-middle) echo "select * from approval where tenant_id = $T $after_approval order by created_at desc, approval_id desc limit 101" ;;
  esac
}
LISTS="runs-first runs-middle mine-first mine-middle failed-first failed-middle approvals-first approvals-middle"
declare -A listed
for what in $LISTS; do listed[$what]=$(time_of "$(list "$what")"); done
q -f migrations/postgres/0025_list_indexes.sql >/dev/null
for t in run approval; do q -c "vacuum analyze $t" >/dev/null; done
echo
printf '%-28s %22s %22s %8s\n' "page (limit 50; 100)" "before: ms (pages)" "after: ms (pages)" ratio
for what in $LISTS; do
  read -r bms bpages <<<"${listed[$what]}"
  read -r ams apages <<<"$(time_of "$(list "$what")")"
  printf '%-28s %13.2f (%6d) %13.2f (%6d) %8.4f\n' "$what" "$bms" "$bpages" "$ams" "$apages" \
    "$(python3 -c "print($ams / $bms)")"
done

# 3. The timer statements on SQLite, the zero-setup store (a file of its own).
echo
python3 bench/store_reads_sqlite.py "$N"
