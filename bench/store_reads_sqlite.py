"""The timer statements of bench/store_reads.sh on SQLite, the zero-setup store.

A store file migrated to 0022 is filled with the same history (N runs, N/5 approvals,
N/10 API keys), each statement is timed (median of 5, all rows fetched) as it was, then
migrations 0023 and 0024 are applied and the statements are timed as the store now
writes them. Python's sqlite3 module (the system's SQLite, not the one linked into the
gateway; the planner's choices here are the same, `explain query plan` in the store's
tests checks the gateway's own). A statement taking over a second is timed once.

    python3 bench/store_reads_sqlite.py [N]
"""

import glob
import os
import sqlite3
import statistics
import sys
import tempfile
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
NOW = "2026-11-29T12:00:00.000000+00:00"

WAITING = "(status = 'pending' or (status = 'approved' and used_at is null))"
BEFORE = {
    "live runs": "select status, count(*) from run group by status order by status",
    "runs to take over": """select r.run_id from run r where (r.status = 'running' and (r.lease_until is null or r.lease_until < :now))
        or (r.status = 'awaiting_approval' and (r.cancel_requested
            or exists (select 1 from approval a where a.run_id = r.run_id and a.used_at is null
                       and (a.status <> 'pending' or a.expires_at <= :now))))
        order by r.created_at limit 16""",
}
AFTER = {
    "live runs": "select status, count(*) from run where status in ('running', 'awaiting_approval') "
    "group by status order by status",
    "runs to take over": """select r.run_id from run r where r.status in ('running', 'awaiting_approval')
        and ((r.status = 'running' and (r.lease_until is null or r.lease_until < :now))
        or (r.status = 'awaiting_approval' and (r.cancel_requested
            or exists (select 1 from approval a where a.run_id = r.run_id and a.run_id is not null
                       and a.used_at is null and (a.status <> 'pending' or a.expires_at <= :now)))))
        order by r.created_at limit 16""",
}
SAME = {
    "pending approvals": "select count(*) from approval where status = 'pending' and expires_at > :now",
    "approvals to expire": f"select approval_id from approval where {WAITING} and expires_at <= :now",
    "revoked keys (every 1 s)": "select count(*), max(revoked_at) from api_key where revoked_at is not null",
}
ORDER = ["live runs", "pending approvals", "runs to take over", "approvals to expire", "revoked keys (every 1 s)"]


def migrate(db, upto):
    for path in sorted(glob.glob(os.path.join(ROOT, "migrations/sqlite/00*.sql"))):
        number = int(os.path.basename(path)[:4])
        if upto[0] <= number <= upto[1]:
            db.executescript(open(path).read())


def fill(db):
    at = "strftime('%Y-%m-%dT%H:%M:%f+00:00', '2026-11-29 12:00:00', '-' || g || ' seconds')"
    ids = "lower(hex(randomblob(16)))"
    db.executescript(
        f"""
        insert into tenant (tenant_id, name, created_at) values ('t', 'bench', '{NOW}');
        insert into principal (principal_id, tenant_id, kind, name, roles, scopes, created_at)
            values ('p', 't', 'service_account', 'robot', '[]', '[]', '{NOW}');
        with recursive n(g) as (select 1 union all select g + 1 from n where g < {N})
        insert into run (run_id, tenant_id, agent_id, agent_name, principal_id, auth, agent_config, input,
                         status, output, owner, lease_until, created_at, finished_at)
        select {ids}, 't', {ids}, 'helper', {ids},
               '{{"tenant_name":"bench","roles":["member"],"scopes":["tools:invoke","runs:write"]}}',
               '{{"model":"m","system":"' || replace(printf('%.12c', ' '), ' ', 'You are a helpful agent. ') || '"}}',
               'Summarise the README',
               case when g % 1000 = 0 then 'running' when g % 997 = 0 then 'awaiting_approval'
                    when g % 500 = 1 then 'failed' else 'completed' end,
               replace(printf('%.40c', ' '), ' ', 'answer '),
               case when g % 1000 = 0 then 'instance-a' end,
               case when g % 1000 = 0 then '2026-11-29T13:00:00.000000+00:00' end,
               {at}, '{NOW}'
        from n;
        with recursive n(g) as (select 1 union all select g + 1 from n where g < {N // 5})
        insert into approval (approval_id, tenant_id, call_id, tool, risk, adapter, arguments, arguments_hash,
                              requester_id, requester_name, auth, status, expires_at, created_at)
        select {ids}, 't', {ids}, 'write_file', 'high', 'rest', '{{"path":"a.txt"}}', {ids}, {ids}, 'alice', '{{}}',
               case when g % 500 = 0 then 'pending' when g % 2 = 0 then 'denied' else 'expired' end,
               case when g % 500 = 0 then '2026-11-30T12:00:00.000000+00:00' else '2026-11-28T12:00:00.000000+00:00' end,
               {at}
        from n;
        with recursive n(g) as (select 1 union all select g + 1 from n where g < {N // 10})
        insert into api_key (api_key_id, tenant_id, principal_id, name, prefix, secret_hash, scopes, revoked_at, created_at)
        select {ids}, 't', 'p', 'key ' || g, 'tg_', {ids}, '[]',
               case when g % 10 = 0 then {at} end, '{NOW}'
        from n;
        """
    )


def median_ms(db, sql):
    """The median of 5 runs; a statement over a second is run once (it is quadratic)."""
    times = []
    for _ in range(5):
        started = time.perf_counter()
        db.execute(sql, {"now": NOW}).fetchall()
        times.append((time.perf_counter() - started) * 1000)
        if times[-1] > 1000:
            break
    return statistics.median(times)


def main():
    with tempfile.TemporaryDirectory() as dir:
        db = sqlite3.connect(os.path.join(dir, "toolgate.db"), isolation_level=None)
        db.execute("pragma journal_mode = wal")
        migrate(db, (1, 22))
        fill(db)
        before = {name: median_ms(db, {**BEFORE, **SAME}[name]) for name in ORDER}
        migrate(db, (23, 24))
        after = {name: median_ms(db, {**AFTER, **SAME}[name]) for name in ORDER}
    print(f"SQLite {sqlite3.sqlite_version}, N={N} runs, {N // 5} approvals, {N // 10} API keys; median of 5 (1 if over 1 s)")
    print(f"{'statement':28} {'before: ms':>12} {'after: ms':>12} {'ratio':>8}")
    for name in ORDER:
        print(f"{name:28} {before[name]:12.2f} {after[name]:12.2f} {after[name] / before[name]:8.4f}")
    timers = [n for n in ORDER if not n.startswith("revoked")]
    b, a = sum(before[n] for n in timers), sum(after[n] for n in timers)
    print(f"{'every 15 s':28} {b:12.2f} {a:12.2f} {a / b:8.4f}")


if __name__ == "__main__":
    main()
