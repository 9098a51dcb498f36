//! The statements every instance runs every 15 seconds (counting and taking over live
//! runs, counting and expiring waiting approvals) read the partial indexes of what is
//! live, never a whole table: checked in each backend's own plan, Postgres's with a
//! history of finished runs and decided approvals in its statistics.

use crate::Store;

#[path = "../../../tests/harness/pgdb.rs"]
mod pgdb;

/// The periodic statements, `now` standing for their time parameters and `lock` for a
/// claim's row lock.
fn periodic(now: &str, lock: &str) -> Vec<(&'static str, String)> {
    vec![
        ("live runs", crate::instances::LIVE_RUNS.to_owned()),
        (
            "pending approvals",
            crate::instances::PENDING.replace("$1", now),
        ),
        (
            "runs to take over",
            crate::runs::claimable(lock)
                .replace("$3", "16")
                .replace("$4", now)
                .replace("$5", now),
        ),
        (
            "approvals to expire",
            format!(
                "select approval_id from approval where {} and expires_at <= {now}",
                crate::approvals::sql::WAITING
            ),
        ),
    ]
}

/// What a plan may read whole: only the partial indexes of live rows.
const LIVE_INDEXES: [&str; 3] = ["run_live_idx", "approval_waiting_idx", "approval_run_idx"];

/// Asserts that `plan` reads one of the live indexes and no line of it reads `whole`.
fn reads_what_is_live(what: &str, plan: &[&str], whole: impl Fn(&str) -> bool) {
    for line in plan {
        assert!(
            !whole(line),
            "{what}: {line:?} reads a whole table or index; plan: {plan:#?}"
        );
    }
    assert!(
        plan.iter()
            .any(|l| l.contains("run_live_idx") || l.contains("approval_waiting_idx")),
        "{what}: uses neither live index; plan: {plan:#?}"
    );
}

#[tokio::test]
async fn sqlite_reads_live_runs_and_waiting_approvals_by_their_indexes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(None, dir.path()).await.expect("open");
    store.migrate().await.expect("migrate");
    let Store::Sqlite(lite) = &store else {
        unreachable!("opened without a URL")
    };
    for (what, statement) in periodic("'2026-11-29T12:00:00Z'", "") {
        let rows: Vec<(i64, i64, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "explain query plan {statement}"
        )))
        .fetch_all(&lite.pool)
        .await
        .expect("explain");
        let plan: Vec<&str> = rows.iter().map(|r| r.3.as_str()).collect();
        // `SEARCH` seeks an index; a `SCAN` reads a table or an index whole, and may only
        // read one that holds nothing but live rows.
        reads_what_is_live(what, &plan, |line| {
            line.starts_with("SCAN") && !LIVE_INDEXES.iter().any(|i| line.contains(i))
        });
    }
}

#[tokio::test]
async fn postgres_reads_live_runs_and_waiting_approvals_by_their_indexes() {
    let db = pgdb::PgDb::create().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(Some(&db.url), dir.path()).await.expect("open");
    store.migrate().await.expect("migrate");
    let tenant = store.create_tenant("acme").await.expect("tenant").id;
    let Store::Postgres(pg) = &store else {
        unreachable!("opened with a URL")
    };
    // A history: 20,000 finished runs beside 4 running, 20,000 decided approvals beside
    // 4 pending. The planner reads a small table whole whatever its indexes; with these
    // statistics a whole read of either table is what the indexes are there to avoid.
    for statement in [
        "insert into run (run_id, tenant_id, agent_id, agent_name, principal_id, auth, \
         agent_config, input, status, created_at) \
         select gen_random_uuid(), $1, gen_random_uuid(), 'helper', gen_random_uuid(), '{}', '{}', \
         'summarise', case when g % 5000 = 0 then 'running' else 'completed' end, \
         now() - g * interval '1 second' from generate_series(1, 20000) g",
        "insert into approval (approval_id, tenant_id, call_id, tool, risk, adapter, arguments, \
         arguments_hash, requester_id, requester_name, auth, status, expires_at, created_at) \
         select gen_random_uuid(), $1, gen_random_uuid(), 'write_file', 'high', 'rest', '{}', \
         md5(g::text), gen_random_uuid(), 'alice', '{}', \
         case when g % 5000 = 0 then 'pending' when g % 2 = 0 then 'denied' else 'expired' end, \
         now() + case when g % 5000 = 0 then interval '1 day' else interval '-1 day' end, \
         now() - g * interval '1 second' from generate_series(1, 20000) g",
    ] {
        sqlx::query(statement)
            .bind(tenant.0)
            .execute(&pg.owner)
            .await
            .expect("history");
    }
    sqlx::query("analyze run, approval")
        .execute(&pg.owner)
        .await
        .expect("analyze");
    for (what, statement) in periodic("now()", " for update of r skip locked") {
        let rows: Vec<(String,)> =
            sqlx::query_as(sqlx::AssertSqlSafe(format!("explain {statement}")))
                .fetch_all(&pg.owner)
                .await
                .expect("explain");
        let plan: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        reads_what_is_live(what, &plan, |line| line.contains("Seq Scan"));
    }
    drop(store);
    db.drop_db().await;
}
