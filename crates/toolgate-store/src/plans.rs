//! The statements every instance runs on a timer (every 15 seconds: counting and taking
//! over live runs, counting and expiring waiting approvals; every second: counting
//! revoked API keys) read partial indexes of the few rows they are about, never a whole
//! table: checked in each backend's own plan, Postgres's with a history of finished runs,
//! decided approvals and unrevoked keys in its statistics.

use crate::Store;

#[path = "../../../tests/harness/pgdb.rs"]
mod pgdb;

/// The periodic statements, `now` standing for their time parameters and `lock` for a
/// claim's row lock, each with the partial index it must read.
fn periodic(now: &str, lock: &str) -> Vec<(&'static str, String, &'static str)> {
    vec![
        (
            "live runs",
            crate::instances::LIVE_RUNS.to_owned(),
            "run_live_idx",
        ),
        (
            "pending approvals",
            crate::instances::PENDING.replace("$1", now),
            "approval_waiting_idx",
        ),
        (
            "runs to take over",
            crate::runs::claimable(lock)
                .replace("$3", "16")
                .replace("$4", now)
                .replace("$5", now),
            "run_live_idx",
        ),
        (
            "approvals to expire",
            format!(
                "select approval_id from approval where {} and expires_at <= {now}",
                crate::approvals::sql::WAITING
            ),
            "approval_waiting_idx",
        ),
        (
            "revoked keys",
            crate::tenancy::REVOCATION_MARKER.to_owned(),
            "api_key_revoked_idx",
        ),
    ]
}

/// What a plan may read whole: only the partial indexes of the few rows it is about.
const LIVE_INDEXES: [&str; 4] = [
    "run_live_idx",
    "approval_waiting_idx",
    "approval_run_idx",
    "api_key_revoked_idx",
];

/// Asserts that `plan` reads `index` and no line of it reads `whole`.
fn reads_what_is_live(what: &str, plan: &[&str], index: &str, whole: impl Fn(&str) -> bool) {
    for line in plan {
        assert!(
            !whole(line),
            "{what}: {line:?} reads a whole table or index; plan: {plan:#?}"
        );
    }
    assert!(
        plan.iter().any(|l| l.contains(index)),
        "{what}: does not read {index}; plan: {plan:#?}"
    );
}

#[tokio::test]
async fn periodic_reads_use_partial_indexes_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(None, dir.path()).await.expect("open");
    store.migrate().await.expect("migrate");
    let Store::Sqlite(lite) = &store else {
        unreachable!("opened without a URL")
    };
    for (what, statement, index) in periodic("'2026-11-29T12:00:00Z'", "") {
        let rows: Vec<(i64, i64, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "explain query plan {statement}"
        )))
        .fetch_all(&lite.pool)
        .await
        .expect("explain");
        let plan: Vec<&str> = rows.iter().map(|r| r.3.as_str()).collect();
        // `SEARCH` seeks an index; a `SCAN` reads a table or an index whole, and may only
        // read one that holds nothing but live rows.
        reads_what_is_live(what, &plan, index, |line| {
            line.starts_with("SCAN") && !LIVE_INDEXES.iter().any(|i| line.contains(i))
        });
    }
}

#[tokio::test]
async fn periodic_reads_use_partial_indexes_on_postgres() {
    let db = pgdb::PgDb::create().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(Some(&db.url), dir.path()).await.expect("open");
    store.migrate().await.expect("migrate");
    let tenant = store.create_tenant("acme").await.expect("tenant").id;
    let Store::Postgres(pg) = &store else {
        unreachable!("opened with a URL")
    };
    // A history: 20,000 finished runs beside 4 running, 20,000 decided approvals beside
    // 4 pending, 20,000 keys of which 4 revoked. The planner reads a small table whole
    // whatever its indexes; with these statistics a whole read is what the indexes are
    // there to avoid.
    let principal = store
        .create_principal(
            tenant,
            &crate::NewPrincipal {
                kind: toolgate_core::PrincipalKind::ServiceAccount,
                name: "robot".into(),
                roles: vec![],
                scopes: vec![],
            },
        )
        .await
        .expect("principal")
        .id;
    sqlx::query(
        "insert into api_key (api_key_id, tenant_id, principal_id, name, prefix, secret_hash, \
         revoked_at) select gen_random_uuid(), $1, $2, 'key', 'tg_', md5(g::text), \
         case when g % 5000 = 0 then now() end from generate_series(1, 20000) g",
    )
    .bind(tenant.0)
    .bind(principal.0)
    .execute(&pg.owner)
    .await
    .expect("keys");
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
    sqlx::query("analyze run, approval, api_key")
        .execute(&pg.owner)
        .await
        .expect("analyze");
    for (what, statement, index) in periodic("now()", " for update of r skip locked") {
        let rows: Vec<(String,)> =
            sqlx::query_as(sqlx::AssertSqlSafe(format!("explain {statement}")))
                .fetch_all(&pg.owner)
                .await
                .expect("explain");
        let plan: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        reads_what_is_live(what, &plan, index, |line| line.contains("Seq Scan"));
    }
    drop(store);
    db.drop_db().await;
}
