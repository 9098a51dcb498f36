//! The shared store suite: every behaviour, against embedded SQLite and real Postgres.
//!
//! Postgres tests use the server on 127.0.0.1:5432 (override with TOOLGATE_TEST_PG, an
//! admin URL): each test gets its own database, dropped afterwards.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::json;
use sqlx::Connection;
use toolgate_core::audit::{AuditRecord, AuditSink};
use toolgate_core::stores::{
    ApprovalStore as _, Change, PinStore as _, RunStore as _, SessionStore as _, UpstreamStore as _,
};
use toolgate_core::{Adapter, CallId, ErrorKind, Outcome, PrincipalId, PrincipalKind, TenantId};
use toolgate_store::{
    AuditFilter, AuditWriter, ChainBreak, McpEvent, McpSession, NewApiKey, NewPrincipal, Store,
    StoreError, UpstreamWrite,
};

fn admin_url() -> String {
    std::env::var("TOOLGATE_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A Postgres database for one test, dropped with the guard.
struct PgDb {
    name: String,
    url: String,
}

impl PgDb {
    async fn create() -> PgDb {
        let name = format!("toolgate_test_{}", uuid::Uuid::now_v7().simple());
        let mut admin = sqlx::PgConnection::connect(&admin_url())
            .await
            .expect("connect to Postgres on 127.0.0.1:5432");
        sqlx::query(sqlx::AssertSqlSafe(format!("create database {name}")))
            .execute(&mut admin)
            .await
            .expect("create db");
        let base = admin_url();
        let url = match base.rfind('/') {
            Some(i) => format!("{}/{name}", &base[..i]),
            None => panic!("admin URL has no database part: {base}"),
        };
        PgDb { name, url }
    }

    async fn drop_db(self) {
        drop(self);
    }
}

impl Drop for PgDb {
    /// Drops the database even when the test panicked before `drop_db`.
    fn drop(&mut self) {
        let name = std::mem::take(&mut self.name);
        if name.is_empty() {
            return;
        }
        let admin = admin_url();
        let _ = std::thread::spawn(move || {
            use sqlx::Connection;
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
                    let sql = format!("drop database if exists {name} with (force)");
                    let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}

/// Runs `test` against a migrated SQLite store and a migrated Postgres store.
async fn on_both<F, Fut>(test: F)
where
    F: Fn(Store) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = Store::open(None, dir.path()).await.expect("open sqlite");
    sqlite.migrate().await.expect("migrate sqlite");
    test(sqlite).await;

    let db = PgDb::create().await;
    let pg = Store::open(Some(&db.url), dir.path())
        .await
        .expect("open postgres");
    pg.migrate().await.expect("migrate postgres");
    test(pg.clone()).await;
    drop(pg);
    db.drop_db().await;
}

/// Like `on_both`, for Postgres alone (row-level security, roles, triggers).
async fn on_postgres<F, Fut>(test: F)
where
    F: FnOnce(Store, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let db = PgDb::create().await;
    let pg = Store::open(Some(&db.url), dir.path())
        .await
        .expect("open postgres");
    pg.migrate().await.expect("migrate postgres");
    test(pg.clone(), db.url.clone()).await;
    drop(pg);
    db.drop_db().await;
}

/// Tenant "acme" with its member "alice": most tests' starting point.
async fn acme_alice(store: &Store) -> (toolgate_store::Tenant, toolgate_store::Principal) {
    let a = store.create_tenant("acme").await.expect("tenant");
    let p = store
        .create_principal(a.id, &member("alice"))
        .await
        .expect("principal");
    (a, p)
}

fn member(name: &str) -> NewPrincipal {
    NewPrincipal {
        kind: PrincipalKind::User,
        name: name.into(),
        roles: vec!["member".into()],
        scopes: vec!["tools:invoke".into()],
    }
}

fn record(tenant: TenantId, principal: PrincipalId, tool: &str) -> AuditRecord {
    AuditRecord {
        call_id: CallId::new(),
        tenant,
        principal,
        adapter: Adapter::Rest,
        tool: tool.into(),
        arguments: json!({"path": "a.txt", "token": "***"}),
        arguments_hash: "ab".repeat(32),
        outcome: Outcome::Ok,
        error: None,
        duration: Duration::from_micros(1234),
        request_id: Some("req-1".into()),
        trace_id: None,
        run: None,
        client: Some("curl/8".into()),
        approval: None,
        cache: None,
        started_at: SystemTime::now(),
        finished_at: SystemTime::now() + Duration::from_micros(1234),
    }
}

#[tokio::test]
async fn tenants_principals_and_keys() {
    on_both(|store| async move {
        let a = store.create_tenant("acme").await.expect("tenant");
        let b = store.create_tenant("globex").await.expect("tenant");
        assert!(matches!(
            store.create_tenant("acme").await,
            Err(StoreError::Conflict(_))
        ));
        let alice = store
            .create_principal(a.id, &member("alice"))
            .await
            .expect("principal");
        assert!(matches!(
            store.create_principal(a.id, &member("alice")).await,
            Err(StoreError::Conflict(_))
        ));
        store
            .create_principal(b.id, &member("alice"))
            .await
            .expect("same name, other tenant");

        let (key, secret) = store
            .create_api_key(
                a.id,
                &NewApiKey {
                    principal: alice.id,
                    name: "ci".into(),
                    scopes: vec!["tools:invoke".into()],
                    expires_at: None,
                },
            )
            .await
            .expect("key");
        assert!(secret.starts_with(&key.prefix));
        let found = store
            .find_key(&secret)
            .await
            .expect("lookup")
            .expect("found");
        assert_eq!((found.key.id, found.principal.id), (key.id, alice.id));
        assert!(
            store
                .find_key("tg_not-a-key")
                .await
                .expect("lookup")
                .is_none()
        );

        // A key for a principal of another tenant cannot be made.
        let err = store
            .create_api_key(
                b.id,
                &NewApiKey {
                    principal: alice.id,
                    name: "x".into(),
                    scopes: vec![],
                    expires_at: None,
                },
            )
            .await;
        assert!(matches!(err, Err(StoreError::NotFound(_))));

        assert_eq!(store.list_principals(a.id).await.expect("list").len(), 1);
        assert_eq!(store.list_api_keys(a.id).await.expect("list").len(), 1);
        assert!(
            store.list_api_keys(b.id).await.expect("list").is_empty(),
            "tenant B sees none of A's keys"
        );
        assert!(
            !store.revoke_api_key(b.id, key.id).await.expect("revoke"),
            "B cannot revoke A's key"
        );
        assert!(store.revoke_api_key(a.id, key.id).await.expect("revoke"));
        let found = store
            .find_key(&secret)
            .await
            .expect("lookup")
            .expect("still found");
        assert!(found.key.revoked_at.is_some());
    })
    .await;
}

#[tokio::test]
async fn concurrent_records_become_exactly_one_row_each_in_a_verified_chain() {
    on_both(|store| async move {
        let a = store.create_tenant("acme").await.expect("tenant");
        let b = store.create_tenant("globex").await.expect("tenant");
        let pa = store
            .create_principal(a.id, &member("alice"))
            .await
            .expect("principal");
        let pb = store
            .create_principal(b.id, &member("bob"))
            .await
            .expect("principal");
        let (writer, task) = AuditWriter::spawn(store.clone()).expect("writer thread");
        let writer = Arc::new(writer);
        let mut calls = Vec::new();
        for i in 0..200 {
            let writer = writer.clone();
            let rec = if i % 3 == 0 {
                record(b.id, pb.id, "echo")
            } else {
                record(a.id, pa.id, "read_file")
            };
            calls.push(tokio::spawn(async move { writer.record(rec).await }));
        }
        for call in calls {
            call.await.expect("join").expect("recorded");
        }
        drop(writer);
        task.join().await;

        let rows_a = store.audit_chain(a.id).await.expect("chain");
        let rows_b = store.audit_chain(b.id).await.expect("chain");
        assert_eq!((rows_a.len(), rows_b.len()), (133, 67));
        assert!(
            rows_a
                .iter()
                .all(|r| r.tenant == a.id && r.tool == "read_file")
        );
        assert_eq!(store.verify_chain(a.id).await.expect("verify"), None);
        assert_eq!(store.verify_chain(b.id).await.expect("verify"), None);
        let row = &rows_a[0];
        assert_eq!(row.arguments, r#"{"path":"a.txt","token":"***"}"#);
        assert_eq!(
            (
                row.duration_us,
                row.client.as_deref(),
                row.request_id.as_deref()
            ),
            (1234, Some("curl/8"), Some("req-1"))
        );

        let page = store
            .list_audit(
                a.id,
                &AuditFilter {
                    tool: Some("read_file".into()),
                    ..AuditFilter::default()
                },
                10,
            )
            .await
            .expect("list");
        assert_eq!(page.len(), 10);
        assert!(page.windows(2).all(|w| w[0].seq > w[1].seq), "newest first");
        let next = store
            .list_audit(
                a.id,
                &AuditFilter {
                    before_seq: Some(page[9].seq),
                    ..AuditFilter::default()
                },
                1000,
            )
            .await
            .expect("list");
        assert_eq!(next.len(), 123);
        let none = store
            .list_audit(
                b.id,
                &AuditFilter {
                    tool: Some("read_file".into()),
                    ..AuditFilter::default()
                },
                10,
            )
            .await
            .expect("list");
        assert!(none.is_empty(), "tenant B's listing never shows A's rows");
    })
    .await;
}

#[tokio::test]
async fn unfinished_side_effect_calls_are_recovered_as_interrupted() {
    on_both(|store| async move {
        let (a, p) = acme_alice(&store).await;
        let rec = record(a.id, p.id, "write_file");
        store.record_call_intent(&rec).await.expect("intent");
        assert_eq!(store.recover_unfinished().await.expect("recover"), 1);
        assert_eq!(
            store.recover_unfinished().await.expect("recover"),
            0,
            "recovered once"
        );
        let rows = store.audit_chain(a.id).await.expect("chain");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].call_id, rec.call_id.0);
        assert_eq!(rows[0].outcome, ErrorKind::Cancelled.as_str());
        assert!(
            rows[0]
                .error
                .as_deref()
                .is_some_and(|e| e.contains("interrupted"))
        );

        // A finished call clears its own intent.
        let rec = record(a.id, p.id, "write_file");
        store.record_call_intent(&rec).await.expect("intent");
        store.append_audit(&[rec]).await.expect("append");
        assert_eq!(store.recover_unfinished().await.expect("recover"), 0);
    })
    .await;
}

#[tokio::test]
async fn tampering_is_named_by_verification() {
    // SQLite: the triggers refuse edits; someone with the file drops them first.
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(None, dir.path()).await.expect("open");
    store.migrate().await.expect("migrate");
    let (tenant, rows) = seeded(&store).await;
    let Store::Sqlite(sqlite) = &store else {
        unreachable!("opened without a URL")
    };
    let refused = sqlx::query("update audit_log set tool = 'x' where call_id = $1")
        .bind(rows[2].call_id.hyphenated().to_string())
        .execute(sqlite.pool())
        .await;
    assert!(refused.is_err(), "append-only trigger");
    sqlx::query("drop trigger audit_log_no_update")
        .execute(sqlite.pool())
        .await
        .expect("drop trigger");
    sqlx::query("update audit_log set outcome = 'ok', error = null where call_id = $1")
        .bind(rows[2].call_id.hyphenated().to_string())
        .execute(sqlite.pool())
        .await
        .expect("tamper");
    assert_eq!(
        store.verify_chain(tenant).await.expect("verify"),
        Some(ChainBreak::Altered {
            seq: 3,
            call_id: rows[2].call_id
        })
    );

    // Postgres: a superuser going around the trigger.
    on_postgres(|store, _url| async move {
        let (tenant, rows) = seeded(&store).await;
        let Store::Postgres(pg) = &store else {
            unreachable!("opened with a URL")
        };
        let mut conn = pg.owner_pool().acquire().await.expect("conn");
        sqlx::query("set session_replication_role = replica")
            .execute(&mut *conn)
            .await
            .expect("bypass triggers");
        sqlx::query("update audit_log set tool = 'something_else' where call_id = $1")
            .bind(rows[1].call_id)
            .execute(&mut *conn)
            .await
            .expect("tamper");
        sqlx::query("set session_replication_role = origin")
            .execute(&mut *conn)
            .await
            .expect("reset");
        assert_eq!(
            store.verify_chain(tenant).await.expect("verify"),
            Some(ChainBreak::Altered {
                seq: 2,
                call_id: rows[1].call_id
            })
        );
    })
    .await;
}

async fn seeded(store: &Store) -> (TenantId, Vec<toolgate_store::AuditRow>) {
    let (a, p) = acme_alice(store).await;
    let mut records: Vec<AuditRecord> = (0..5).map(|_| record(a.id, p.id, "read_file")).collect();
    records[2].outcome = Outcome::Error(ErrorKind::Forbidden);
    records[2].error = Some("missing scope".into());
    store.append_audit(&records).await.expect("append");
    let rows = store.audit_chain(a.id).await.expect("chain");
    assert_eq!(store.verify_chain(a.id).await.expect("verify"), None);
    (a.id, rows)
}

#[tokio::test]
async fn postgres_app_role_cannot_change_audit_rows_and_sees_only_its_tenant() {
    on_postgres(|store, _url| async move {
        let (a, rows) = seeded(&store).await;
        let b = store.create_tenant("globex").await.expect("tenant");
        let pb = store.create_principal(b.id, &member("bob")).await.expect("principal");
        store.append_audit(&[record(b.id, pb.id, "echo")]).await.expect("append");
        let Store::Postgres(pg) = &store else { unreachable!("postgres") };

        let mut conn = pg.app_pool().acquire().await.expect("conn");
        let role: String = sqlx::query_scalar("select current_user::text").fetch_one(&mut *conn).await.expect("role");
        assert_eq!(role, "toolgate_app");
        for sql in ["update audit_log set tool = 'x'", "delete from audit_log", "truncate audit_log"] {
            let result = sqlx::query(sql).execute(&mut *conn).await;
            assert!(result.is_err(), "{sql} must fail for the app role");
        }
        // No tenant named: row-level security shows nothing at all.
        let visible: i64 = sqlx::query_scalar("select count(*) from audit_log").fetch_one(&mut *conn).await.expect("count");
        assert_eq!(visible, 0);
        // Tenant A named: only A's rows, even without a where clause.
        let mut tx = conn.begin().await.expect("tx");
        sqlx::query("select set_config('toolgate.tenant_id', $1, true)").bind(a.to_string()).execute(&mut *tx).await.expect("set");
        let tenants: Vec<uuid::Uuid> =
            sqlx::query_scalar("select distinct tenant_id from audit_log").fetch_all(&mut *tx).await.expect("select");
        assert_eq!(tenants, [a.0]);
        let principals: i64 = sqlx::query_scalar("select count(*) from principal").fetch_one(&mut *tx).await.expect("count");
        assert_eq!(principals, 1);
        // Writing a row for another tenant is refused by the policy's check.
        let forged = sqlx::query("insert into principal (principal_id, tenant_id, kind, name, created_at) values ($1, $2, 'user', 'mallory', now())")
            .bind(uuid::Uuid::now_v7())
            .bind(b.id.0)
            .execute(&mut *tx)
            .await;
        assert!(forged.is_err(), "RLS with check");
        drop(tx);
        assert_eq!(rows.len(), 5);
    })
    .await;
}

#[tokio::test]
async fn audit_rows_read_back_as_recorded_and_filter_by_time() {
    // On SQLite the writer's rows go through a connection of its own (rusqlite), the
    // reads through sqlx: times must be written as sqlx writes them, or filters that
    // compare them as text would pick the wrong rows.
    on_both(|store| async move {
        let (a, p) = acme_alice(&store).await;
        let at = |micros: u64| SystemTime::UNIX_EPOCH + Duration::from_micros(micros);
        let mut records = Vec::new();
        // A whole second, a millisecond, a microsecond: each fraction's width differs.
        for (i, micros) in [
            1_800_000_000_000_000,
            1_800_000_001_250_000,
            1_800_000_002_000_001,
        ]
        .into_iter()
        .enumerate()
        {
            let mut r = record(a.id, p.id, &format!("tool{i}"));
            r.started_at = at(micros);
            r.finished_at = at(micros + 1_500);
            r.run = Some(toolgate_core::RunStep {
                run_id: toolgate_core::RunId::new(),
                step: 3,
            });
            r.approval = Some(toolgate_core::ApprovalId::new());
            r.error = Some("it failed".into());
            r.outcome = Outcome::Error(ErrorKind::Timeout);
            records.push(r);
        }
        store.append_audit(&records).await.expect("append");
        let rows = store
            .list_audit(a.id, &AuditFilter::default(), 10)
            .await
            .expect("list");
        assert_eq!(rows.len(), 3);
        for (row, r) in rows.iter().rev().zip(&records) {
            assert_eq!(row.call_id, r.call_id.0);
            assert_eq!(row.tool, r.tool);
            assert_eq!(SystemTime::from(row.started_at), r.started_at);
            assert_eq!(SystemTime::from(row.finished_at), r.finished_at);
            assert_eq!(row.run_id, r.run.map(|s| s.run_id));
            assert_eq!(row.step, Some(3));
            assert_eq!(row.approval_id, r.approval.map(|x| x.0));
            assert_eq!(row.outcome, "timeout");
            assert_eq!(row.error.as_deref(), Some("it failed"));
            assert_eq!(row.arguments, r#"{"path":"a.txt","token":"***"}"#);
        }
        let between = AuditFilter {
            since: Some(chrono::DateTime::from(at(1_800_000_001_000_000))),
            until: Some(chrono::DateTime::from(at(1_800_000_002_000_001))),
            ..AuditFilter::default()
        };
        let picked = store.list_audit(a.id, &between, 10).await.expect("list");
        let tools: Vec<&str> = picked.iter().map(|r| r.tool.as_str()).collect();
        assert_eq!(tools, ["tool1"]);
        assert_eq!(store.verify_chain(a.id).await.expect("verify"), None);
    })
    .await;
}

#[tokio::test]
async fn a_failed_audit_batch_writes_nothing_and_the_next_one_is_written() {
    on_both(|store| async move {
        let (a, p) = acme_alice(&store).await;
        let first = record(a.id, p.id, "echo");
        store
            .append_audit(&[first.clone(), record(a.id, p.id, "echo")])
            .await
            .expect("append");
        // The same call twice: the whole batch fails, its new record included.
        let again = [record(a.id, p.id, "echo"), first];
        assert!(store.append_audit(&again).await.is_err());
        store
            .append_audit(&[record(a.id, p.id, "read_file")])
            .await
            .expect("append after a failed batch");
        let chain = store.audit_chain(a.id).await.expect("chain");
        let tools: Vec<&str> = chain.iter().map(|r| r.tool.as_str()).collect();
        assert_eq!(tools, ["echo", "echo", "read_file"]);
        assert_eq!(store.verify_chain(a.id).await.expect("verify"), None);
    })
    .await;
}

#[tokio::test]
async fn an_audit_writer_whose_connection_is_cut_still_records_every_call() {
    on_postgres(|store, url| async move {
        let (a, p) = acme_alice(&store).await;
        let (writer, task) = AuditWriter::spawn(store.clone()).expect("writer thread");
        for _ in 0..3 {
            writer
                .record(record(a.id, p.id, "echo"))
                .await
                .expect("record");
        }
        // Every other session on the database ends: the writer's own held connection too.
        let mut admin = sqlx::PgConnection::connect(&url).await.expect("admin");
        let cut: Vec<(bool,)> = sqlx::query_as(
            "select pg_terminate_backend(pid) from pg_stat_activity \
             where datname = current_database() and pid <> pg_backend_pid()",
        )
        .fetch_all(&mut admin)
        .await
        .expect("terminate");
        assert!(!cut.is_empty(), "the writer held a connection");
        for _ in 0..3 {
            writer
                .record(record(a.id, p.id, "echo"))
                .await
                .expect("record after the cut");
        }
        drop(writer);
        task.join().await;
        assert_eq!(store.audit_chain(a.id).await.expect("chain").len(), 6);
        assert_eq!(store.verify_chain(a.id).await.expect("verify"), None);
    })
    .await;
}

#[tokio::test]
async fn two_instances_extend_one_chain_without_forking_it() {
    // Each instance's writer extends the chain from the heads it knows (Postgres: those it
    // left, checked as it writes; SQLite: read under its write lock): the other's appends
    // must be seen, not fork the chain.
    on_both(|first| async move {
        let second = first.reopen().await.expect("second instance");
        let (a, p) = acme_alice(&first).await;
        for round in 0..10 {
            let store = if round % 2 == 0 { &first } else { &second };
            let batch: Vec<AuditRecord> = (0..3).map(|_| record(a.id, p.id, "echo")).collect();
            store.append_audit(&batch).await.expect("append");
        }
        // Concurrent appends from both instances.
        let (x, y) = tokio::join!(
            async {
                for _ in 0..20 {
                    first
                        .append_audit(&[record(a.id, p.id, "echo")])
                        .await
                        .expect("append");
                }
            },
            async {
                for _ in 0..20 {
                    second
                        .append_audit(&[record(a.id, p.id, "echo")])
                        .await
                        .expect("append");
                }
            }
        );
        let ((), ()) = (x, y);
        assert_eq!(first.audit_chain(a.id).await.expect("chain").len(), 70);
        assert_eq!(first.verify_chain(a.id).await.expect("verify"), None);
    })
    .await;
}

#[tokio::test]
async fn mcp_events_replay_per_stream_and_only_for_their_tenant_and_session() {
    on_both(|store| async move {
        let a = store.create_tenant("acme").await.expect("tenant");
        let b = store.create_tenant("globex").await.expect("tenant");
        let pa = store
            .create_principal(a.id, &member("alice"))
            .await
            .expect("principal");
        store
            .put_mcp_session(&McpSession {
                id: "s1".into(),
                tenant: a.id,
                principal: pa.id,
                initialize_params: "{}".into(),
            })
            .await
            .expect("session");
        let prime = store
            .append_mcp_event(a.id, "s1", "r1", None, Some(3000))
            .await
            .expect("append");
        let other = store
            .append_mcp_event(a.id, "s1", "r2", Some("{\"other\":1}"), None)
            .await
            .expect("append");
        let first = store
            .append_mcp_event(a.id, "s1", "r1", Some("{\"n\":1}"), None)
            .await
            .expect("append");
        let second = store
            .append_mcp_event(a.id, "s1", "r1", Some("{\"n\":2}"), None)
            .await
            .expect("append");
        assert!(
            prime < other && other < first && first < second,
            "one rising sequence"
        );

        // After the priming event: the rest of its stream, in order, nothing of r2.
        let replay = store
            .mcp_events_after(a.id, "s1", prime)
            .await
            .expect("replay");
        assert_eq!(
            replay,
            [
                McpEvent {
                    seq: first,
                    message: Some("{\"n\":1}".into()),
                    retry_ms: None
                },
                McpEvent {
                    seq: second,
                    message: Some("{\"n\":2}".into()),
                    retry_ms: None
                },
            ]
        );
        assert_eq!(
            store
                .mcp_events_after(a.id, "s1", second)
                .await
                .expect("replay"),
            []
        );
        // Another tenant, another session or an unknown event: nothing.
        assert_eq!(
            store
                .mcp_events_after(b.id, "s1", prime)
                .await
                .expect("replay"),
            []
        );
        assert_eq!(
            store
                .mcp_events_after(a.id, "s2", prime)
                .await
                .expect("replay"),
            []
        );
        assert_eq!(
            store
                .mcp_events_after(a.id, "s1", second + 100)
                .await
                .expect("replay"),
            []
        );

        // Ending the session drops its events; retention drops old ones everywhere.
        store
            .append_mcp_event(a.id, "s3", "r9", Some("{}"), None)
            .await
            .expect("append");
        store.delete_mcp_session(a.id, "s1").await.expect("delete");
        assert_eq!(
            store
                .mcp_events_after(a.id, "s1", prime)
                .await
                .expect("replay"),
            []
        );
        let pruned = store
            .prune_mcp_events(chrono::Utc::now() + chrono::Duration::seconds(1))
            .await
            .expect("prune");
        assert_eq!(pruned, 1, "only s3's event was left");
    })
    .await;
}

#[tokio::test]
async fn mcp_sessions_nobody_used_within_the_retention_are_pruned_with_their_events() {
    on_both(|store| async move {
        let a = store.create_tenant("acme").await.expect("tenant");
        let pa = store
            .create_principal(a.id, &member("alice"))
            .await
            .expect("principal");
        for id in ["old", "kept"] {
            store
                .put_mcp_session(&McpSession {
                    id: id.into(),
                    tenant: a.id,
                    principal: pa.id,
                    initialize_params: "{}".into(),
                })
                .await
                .expect("session");
            store
                .append_mcp_event(a.id, id, "r1", Some("{}"), None)
                .await
                .expect("event");
        }
        let later = chrono::Utc::now() + chrono::Duration::hours(1);
        // An instance holding "kept" in memory stamps it; "old" nobody came back to.
        store
            .touch_mcp_sessions(&["kept".to_owned()], later)
            .await
            .expect("touch");
        let pruned = store
            .prune_mcp_sessions(later - chrono::Duration::minutes(1))
            .await
            .expect("prune");
        assert_eq!(pruned, 1);
        assert!(store.mcp_session("old").await.expect("read").is_none());
        assert!(store.mcp_session("kept").await.expect("read").is_some());
        // The pruned session's events went with it; the kept one's stay.
        let left = store
            .prune_mcp_events(chrono::Utc::now() + chrono::Duration::seconds(1))
            .await
            .expect("prune events");
        assert_eq!(left, 1, "only the kept session's event was left");
    })
    .await;
}

#[tokio::test]
async fn postgres_announces_a_revocation_to_every_listening_instance() {
    on_postgres(|store, url| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let elsewhere = Store::open(Some(&url), dir.path())
            .await
            .expect("second instance");
        let tenant = store.create_tenant("acme").await.expect("tenant");
        let alice = store
            .create_principal(tenant.id, &member("alice"))
            .await
            .expect("principal");
        let (key, _secret) = store
            .create_api_key(
                tenant.id,
                &NewApiKey {
                    principal: alice.id,
                    name: "k".into(),
                    scopes: vec!["tools:invoke".into()],
                    expires_at: None,
                },
            )
            .await
            .expect("key");
        let mut revoked = store
            .watch_revocations()
            .await
            .expect("listen")
            .expect("Postgres announces revocations");
        assert!(
            elsewhere
                .revoke_api_key(tenant.id, key.id)
                .await
                .expect("revoke")
        );
        tokio::time::timeout(Duration::from_secs(10), revoked.recv())
            .await
            .expect("the revocation was announced")
            .expect("still listening");
    })
    .await;
}

#[tokio::test]
async fn agents_are_per_tenant_with_unique_names() {
    on_both(|store| async move {
        let a = store.create_tenant("agents-a").await.expect("tenant");
        let b = store.create_tenant("agents-b").await.expect("tenant");
        let config = json!({"name": "helper", "provider": "p", "model": "m"});
        let agent = store
            .create_agent(a.id, "helper", &config)
            .await
            .expect("agent");
        let dup = store.create_agent(a.id, "helper", &config).await;
        assert!(matches!(dup, Err(StoreError::Conflict(_))), "{dup:?}");
        // The same name in another tenant is another agent.
        store
            .create_agent(b.id, "helper", &config)
            .await
            .expect("same name, other tenant");
        assert_eq!(store.list_agents(a.id).await.expect("list").len(), 1);
        assert!(
            store
                .get_agent(b.id, agent.id)
                .await
                .expect("get")
                .is_none()
        );
        let renamed = json!({"name": "helper2", "provider": "p", "model": "m2"});
        assert!(
            !store
                .update_agent(b.id, agent.id, "helper2", &renamed)
                .await
                .expect("update")
        );
        assert!(
            store
                .update_agent(a.id, agent.id, "helper2", &renamed)
                .await
                .expect("update")
        );
        let got = store
            .get_agent(a.id, agent.id)
            .await
            .expect("get")
            .expect("exists");
        assert_eq!((got.name.as_str(), &got.config), ("helper2", &renamed));
        assert!(!store.delete_agent(b.id, agent.id).await.expect("delete"));
        assert!(store.delete_agent(a.id, agent.id).await.expect("delete"));
        assert!(store.list_agents(a.id).await.expect("list").is_empty());
    })
    .await;
}

/// Run `run` of agent "helper" in `tenant`, owned by "instance-1" until `lease_until`.
fn new_run(
    tenant: TenantId,
    run: toolgate_core::RunId,
    lease_until: chrono::DateTime<chrono::Utc>,
) -> toolgate_store::NewRun {
    toolgate_store::NewRun {
        id: run,
        agent_id: uuid::Uuid::now_v7(),
        agent_name: "helper".into(),
        principal: PrincipalId::new(),
        auth: json!({"tenant": tenant}),
        agent_config: json!({"name": "helper"}),
        input: "hello".into(),
        owner: "instance-1".into(),
        lease_until,
        first_event: json!({"type": "run_started", "input": "hello"}),
    }
}

#[tokio::test]
async fn a_run_journal_is_ordered_single_writer_and_tenant_scoped() {
    use chrono::Utc;
    use toolgate_core::RunId;
    use toolgate_store::RunFinish;

    on_both(|store| async move {
        let a = store.create_tenant("runs-a").await.expect("tenant");
        let b = store.create_tenant("runs-b").await.expect("tenant");
        let run = RunId::new();
        let new = new_run(a.id, run, Utc::now() - chrono::Duration::seconds(1));
        store.create_run(a.id, &new).await.expect("run");
        let turn = json!({"type": "turn_started", "turn": 1});
        store
            .append_run_events(
                a.id,
                run,
                2,
                &[turn.clone(), json!({"type": "model_message"})],
                None,
                false,
            )
            .await
            .expect("event");
        // A second writer of the same position is refused.
        let again = store
            .append_run_events(a.id, run, 2, std::slice::from_ref(&turn), None, true)
            .await;
        assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
        let events = store.run_events(a.id, run, 0).await.expect("events");
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(events[1].kind, "turn_started");
        assert_eq!(
            store.run_events(a.id, run, 1).await.expect("events").len(),
            2
        );
        // Another tenant sees nothing of it.
        assert!(store.get_run(b.id, run).await.expect("get").is_none());
        assert!(
            store
                .run_events(b.id, run, 0)
                .await
                .expect("events")
                .is_empty()
        );
        assert!(!store.request_run_cancel(b.id, run).await.expect("cancel"));
        assert!(store.list_runs(b.id, 10).await.expect("list").is_empty());

        // Its lease expired: another instance takes it over, and sees a cancel request.
        let claimed = store
            .claim_orphaned_runs(
                "instance-2",
                Utc::now() + chrono::Duration::seconds(30),
                10,
                Utc::now(),
            )
            .await
            .expect("claim");
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].input, "hello");
        assert!(
            store
                .claim_orphaned_runs(
                    "instance-3",
                    Utc::now() + chrono::Duration::seconds(30),
                    10,
                    Utc::now()
                )
                .await
                .expect("claim")
                .is_empty()
        );
        assert!(store.request_run_cancel(a.id, run).await.expect("cancel"));
        let until = Utc::now() + chrono::Duration::seconds(30);
        assert!(
            store
                .renew_run_leases("instance-1", &[run], until)
                .await
                .expect("renew")
                .is_empty()
        );
        assert_eq!(
            store
                .renew_run_leases("instance-2", &[run], until)
                .await
                .expect("renew"),
            [run]
        );

        let finish = RunFinish {
            status: "completed".into(),
            output: Some("done".into()),
            best_effort: false,
            error: None,
            usage: json!({"input_tokens": 3, "output_tokens": 4}),
        };
        let last = json!({"type": "run_finished", "status": "completed"});
        store
            .append_run_events(
                a.id,
                run,
                4,
                std::slice::from_ref(&last),
                Some(&finish),
                true,
            )
            .await
            .expect("finish");
        let got = store
            .get_run(a.id, run)
            .await
            .expect("get")
            .expect("exists");
        assert_eq!(got.status, "completed");
        assert_eq!(got.output.as_deref(), Some("done"));
        assert_eq!(
            got.usage,
            Some(json!({"input_tokens": 3, "output_tokens": 4}))
        );
        assert!(got.finished_at.is_some());
        assert!(!store.request_run_cancel(a.id, run).await.expect("cancel"));
        assert_eq!(store.list_runs(a.id, 10).await.expect("list").len(), 1);
    })
    .await;
}

#[tokio::test]
async fn approvals_are_used_once_decided_once_expire_and_stay_in_their_tenant() {
    use chrono::Utc;
    use toolgate_core::policy::ApprovalRequest;
    use toolgate_core::{Gate, RunId, RunStep};
    use toolgate_store::NewRun;
    use toolgate_store::approvals::Decision;

    on_both(|store| async move {
        let a = store.create_tenant("appr-a").await.expect("tenant");
        let b = store.create_tenant("appr-b").await.expect("tenant");
        let asker = PrincipalId::new();
        let boss = PrincipalId::new();
        let request = |presented, ttl: i64| ApprovalRequest {
            tenant: a.id,
            call_id: CallId::new(),
            requester: asker,
            requester_name: "asker".into(),
            auth: json!({"tenant": a.id}),
            // MCP: the adapter whose clients make an approved call again, unpresented.
            adapter: Adapter::Mcp,
            tool: "execute_command".into(),
            risk: toolgate_core::Risk::High,
            arguments: json!({"command": "ls", "token": "***"}),
            call_arguments: json!({"command": "ls", "token": "s3cret"}),
            arguments_hash: "cd".repeat(32),
            run: None,
            agent: None,
            presented,
            expires_at: SystemTime::now() + Duration::from_secs(ttl as u64),
        };
        let Gate::Pending { approval, .. } =
            store.gate_approval(&request(None, 60)).await.expect("gate")
        else {
            panic!("a new call waits");
        };
        // The same call again waits on the same approval.
        assert!(matches!(
            store.gate_approval(&request(None, 60)).await.expect("gate"),
            Gate::Pending { approval: again, .. } if again == approval
        ));
        let pending = store
            .list_approvals(a.id, Some("pending"), 10)
            .await
            .expect("list");
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].arguments["token"], "***");
        assert_eq!(
            pending[0].call_arguments.as_ref().expect("kept")["token"],
            "s3cret"
        );

        // Another tenant neither sees nor decides it.
        assert!(
            store
                .get_approval(b.id, approval)
                .await
                .expect("get")
                .is_none()
        );
        assert!(
            store
                .list_approvals(b.id, None, 10)
                .await
                .expect("list")
                .is_empty()
        );
        let approve = Decision {
            approve: true,
            by: boss,
            by_name: "boss".into(),
            reason: "fine".into(),
        };
        assert!(matches!(
            store.decide_approval(b.id, approval, &approve).await,
            Err(StoreError::NotFound(_))
        ));
        let decided = store
            .decide_approval(a.id, approval, &approve)
            .await
            .expect("decide");
        assert_eq!(
            (decided.status.as_str(), decided.decided_by),
            ("approved", Some(boss))
        );
        // Decided once only.
        assert!(matches!(
            store.decide_approval(a.id, approval, &approve).await,
            Err(StoreError::Conflict(_))
        ));
        // Used by the next matching call, once; the call after that asks anew.
        assert_eq!(
            store.gate_approval(&request(None, 60)).await.expect("gate"),
            Gate::Approved { approval }
        );
        let used = store
            .get_approval(a.id, approval)
            .await
            .expect("get")
            .expect("found");
        assert!(
            used.used_at.is_some() && used.call_arguments.is_none(),
            "{used:?}"
        );
        assert!(matches!(
            store.gate_approval(&request(None, 60)).await.expect("gate"),
            Gate::Pending { approval: next, .. } if next != approval
        ));

        // A denial reaches the call presenting it, with the reason.
        let Gate::Pending {
            approval: second, ..
        } = store.gate_approval(&request(None, 60)).await.expect("gate")
        else {
            panic!("pending");
        };
        let deny = Decision {
            approve: false,
            reason: "not on prod".into(),
            ..approve.clone()
        };
        store
            .decide_approval(a.id, second, &deny)
            .await
            .expect("deny");
        assert_eq!(
            store
                .gate_approval(&request(Some(second), 60))
                .await
                .expect("gate"),
            Gate::Denied {
                approval: second,
                reason: "not on prod".into(),
                decided_by: Some("boss".into())
            }
        );

        // An approval past its time cannot be decided, is denied to the call presenting
        // it, and is marked expired by the sweep.
        let mut short = request(None, 0);
        short.arguments_hash = "ef".repeat(32);
        let Gate::Pending { approval: late, .. } = store.gate_approval(&short).await.expect("gate")
        else {
            panic!("pending");
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(matches!(
            store.decide_approval(a.id, late, &approve).await,
            Err(StoreError::Conflict(m)) if m.contains("expired")
        ));
        let swept = store.expire_approvals().await.expect("sweep");
        assert_eq!(swept, vec![(a.id, late)]);
        short.presented = Some(late);
        assert!(matches!(
            store.gate_approval(&short).await.expect("gate"),
            Gate::Denied {
                decided_by: None,
                ..
            }
        ));

        // A run waiting on an approval is claimed once the approval is decided.
        let run = RunId::new();
        store
            .create_run(
                a.id,
                &NewRun {
                    id: run,
                    agent_id: uuid::Uuid::now_v7(),
                    agent_name: "ops".into(),
                    principal: asker,
                    auth: json!({}),
                    agent_config: json!({}),
                    input: "go".into(),
                    owner: "i1".into(),
                    lease_until: Utc::now() + chrono::Duration::seconds(30),
                    first_event: json!({"type": "run_started"}),
                },
            )
            .await
            .expect("run");
        let pause = toolgate_store::RunFinish {
            status: "awaiting_approval".into(),
            output: None,
            best_effort: false,
            error: None,
            usage: json!({}),
        };
        store
            .append_run_events(
                a.id,
                run,
                2,
                &[json!({"type": "approval_requested"})],
                Some(&pause),
                true,
            )
            .await
            .expect("pause");
        let mut for_run = request(None, 60);
        for_run.arguments_hash = "01".repeat(32);
        for_run.run = Some(RunStep {
            run_id: run,
            step: 1,
        });
        let Gate::Pending {
            approval: run_approval,
            ..
        } = store.gate_approval(&for_run).await.expect("gate")
        else {
            panic!("pending");
        };
        let claim = || {
            store.claim_orphaned_runs(
                "i2",
                Utc::now() + chrono::Duration::seconds(30),
                10,
                Utc::now(),
            )
        };
        assert!(
            claim().await.expect("claim").is_empty(),
            "nothing decided yet"
        );
        store
            .decide_approval(a.id, run_approval, &approve)
            .await
            .expect("decide");
        let claimed = claim().await.expect("claim");
        assert_eq!(claimed.iter().map(|r| r.id).collect::<Vec<_>>(), [run]);
        assert_eq!(claimed[0].status, "running");
    })
    .await;
}

#[tokio::test]
async fn tenant_upstreams_are_per_tenant_with_unique_names_and_revisions() {
    on_both(|store| async move {
        let a = store.create_tenant("upstreams-a").await.expect("tenant");
        let b = store.create_tenant("upstreams-b").await.expect("tenant");
        let by = store
            .create_principal(a.id, &member("ann"))
            .await
            .expect("principal")
            .id;
        let config = json!({"url": "https://mcp.example.com/mcp", "allow": [], "deny": []});
        let sealed = [7u8, 0, 255, 1];
        let new = UpstreamWrite {
            name: "docs",
            config: &config,
            credentials: Some(&sealed),
        };
        let created = store
            .create_upstream(a.id, &new, by, 16)
            .await
            .expect("create");
        assert_eq!(
            (created.revision, created.credentials.as_deref()),
            (1, Some(&sealed[..]))
        );
        assert_eq!(created.created_by, Some(by));
        let dup = store.create_upstream(a.id, &new, by, 16).await;
        assert!(matches!(dup, Err(StoreError::Conflict(_))), "{dup:?}");
        // Another tenant neither sees nor changes it, and may use the same name.
        assert!(
            store
                .get_upstream(b.id, "docs")
                .await
                .expect("get")
                .is_none()
        );
        assert!(store.list_upstreams(b.id).await.expect("list").is_empty());
        assert!(
            store
                .update_upstream(b.id, "docs", &new)
                .await
                .expect("update")
                .is_none()
        );
        assert!(!store.delete_upstream(b.id, "docs").await.expect("delete"));
        store
            .create_upstream(b.id, &new, by, 16)
            .await
            .expect("same name, other tenant");

        let changed = json!({"url": "https://mcp.example.com/v2", "allow": ["search"], "deny": []});
        let replace = UpstreamWrite {
            name: "docs",
            config: &changed,
            credentials: None,
        };
        let updated = store
            .update_upstream(a.id, "docs", &replace)
            .await
            .expect("update")
            .expect("exists");
        assert_eq!(
            (
                updated.revision,
                &updated.config,
                updated.credentials.as_ref()
            ),
            (2, &changed, None)
        );
        assert_eq!(updated.id, created.id);

        // Across tenants: every id and revision, and any one by id.
        let all = store.upstream_revisions().await.expect("revisions");
        assert_eq!(all.len(), 2);
        assert!(all.contains(&(created.id, 2)), "{all:?}");
        let read = store
            .upstream_by_id(created.id)
            .await
            .expect("by id")
            .expect("there");
        assert_eq!((read.tenant, read.revision), (a.id, 2));
        assert!(store.delete_upstream(a.id, "docs").await.expect("delete"));
        assert!(store.list_upstreams(a.id).await.expect("list").is_empty());
        assert_eq!(store.upstream_revisions().await.expect("all").len(), 1);
        assert_eq!(store.upstream_by_id(created.id).await.expect("by id"), None);
    })
    .await;
}

/// A batch of large rows (300 calls with 4 KB arguments: several statements of many
/// kilobytes in one transaction) is written whole and reads back byte for byte. On
/// Postgres over TCP the store connects through its `TCP_NODELAY` relay (a Unix socket),
/// so such statements do not wait for delayed ACKs.
#[tokio::test]
async fn a_batch_of_large_rows_is_written_whole() {
    on_both(|store| async move {
        if let Store::Postgres(pg) = &store {
            assert!(
                pg.app_pool().connect_options().get_socket().is_some(),
                "a TCP Postgres is reached through the relay"
            );
        }
        let tenant = store.create_tenant("large-rows").await.expect("tenant");
        let who = store
            .create_principal(tenant.id, &member("ann"))
            .await
            .expect("principal");
        let records: Vec<AuditRecord> = (0..300)
            .map(|i| {
                let mut r = record(tenant.id, who.id, "write_file");
                r.arguments = json!({"path": format!("f{i}.txt"), "content": "é".repeat(2048)});
                r
            })
            .collect();
        store.append_audit(&records).await.expect("append");
        let rows = store.audit_chain(tenant.id).await.expect("chain");
        assert_eq!(rows.len(), 300);
        let back: serde_json::Value = serde_json::from_str(&rows[299].arguments).expect("json");
        assert_eq!(back, records[299].arguments);
        assert_eq!(store.verify_chain(tenant.id).await.expect("verify"), None);
    })
    .await;
}

/// On SQLite, what the request path reads (a tenant's policy, its approvals and
/// upstreams) never waits for the write lock: while another connection holds it (as the
/// audit writer does, transaction after transaction, under load), those reads still
/// answer. Taking the write lock to read once stalled requests for up to seconds.
#[tokio::test]
async fn sqlite_reads_do_not_wait_for_the_write_lock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(None, dir.path()).await.expect("open sqlite");
    store.migrate().await.expect("migrate");
    let tenant = store.create_tenant("reads").await.expect("tenant");
    let mut writer = sqlx::SqliteConnection::connect(&format!(
        "sqlite://{}",
        dir.path().join("toolgate.db").display()
    ))
    .await
    .expect("second connection");
    sqlx::query("begin immediate")
        .execute(&mut writer)
        .await
        .expect("take the write lock");
    let reads = async {
        store.approval_policy(tenant.id).await.expect("policy");
        store
            .list_approvals(tenant.id, None, 10)
            .await
            .expect("approvals");
        store.list_upstreams(tenant.id).await.expect("upstreams");
    };
    // The store's busy timeout is 10 s: a read that queued for the lock would still be
    // waiting at 5.
    tokio::time::timeout(Duration::from_secs(5), reads)
        .await
        .expect("the reads waited for the write lock");
    sqlx::query("rollback")
        .execute(&mut writer)
        .await
        .expect("release");
}

/// A tenant's upstreams are capped, and creations racing for the last places cannot
/// exceed the cap: counted and inserted under one lock.
#[tokio::test]
async fn concurrent_upstream_creations_never_exceed_the_tenant_cap() {
    on_both(|store| async move {
        let tenant = store.create_tenant("upstreams-cap").await.expect("tenant");
        let by = store
            .create_principal(tenant.id, &member("ann"))
            .await
            .expect("principal")
            .id;
        let mut attempts = tokio::task::JoinSet::new();
        for i in 0..8 {
            let store = store.clone();
            attempts.spawn(async move {
                let config = json!({"url": "https://mcp.example.com/mcp"});
                let name = format!("u{i}");
                let new = UpstreamWrite {
                    name: &name,
                    config: &config,
                    credentials: None,
                };
                store.create_upstream(tenant.id, &new, by, 3).await
            });
        }
        let results = attempts.join_all().await;
        let created = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(created, 3, "{results:?}");
        assert!(
            results
                .iter()
                .filter_map(|r| r.as_ref().err())
                .all(|e| matches!(e, StoreError::Conflict(m) if m.contains("the most allowed"))),
            "{results:?}"
        );
        assert_eq!(
            store.list_upstreams(tenant.id).await.expect("list").len(),
            3
        );
    })
    .await;
}

#[tokio::test]
async fn postgres_row_level_security_hides_other_tenants_upstreams() {
    on_postgres(|store, _url| async move {
        let config = json!({"url": "https://mcp.example.com/mcp"});
        let mut ids = Vec::new();
        for name in ["rls-a", "rls-b"] {
            let tenant = store.create_tenant(name).await.expect("tenant");
            let by = store
                .create_principal(tenant.id, &member("ann"))
                .await
                .expect("principal")
                .id;
            let new = UpstreamWrite {
                name: "docs",
                config: &config,
                credentials: Some(b"sealed"),
            };
            store
                .create_upstream(tenant.id, &new, by, 16)
                .await
                .expect("create");
            ids.push(tenant.id);
        }
        let Store::Postgres(pg) = &store else {
            unreachable!("postgres")
        };
        let mut conn = pg.app_pool().acquire().await.expect("conn");
        let visible: i64 = sqlx::query_scalar("select count(*) from tenant_upstream")
            .fetch_one(&mut *conn)
            .await
            .expect("count");
        assert_eq!(visible, 0, "no tenant named: nothing");
        let mut tx = conn.begin().await.expect("tx");
        sqlx::query("select set_config('toolgate.tenant_id', $1, true)")
            .bind(ids[0].to_string())
            .execute(&mut *tx)
            .await
            .expect("set");
        let tenants: Vec<uuid::Uuid> = sqlx::query_scalar("select tenant_id from tenant_upstream")
            .fetch_all(&mut *tx)
            .await
            .expect("select");
        assert_eq!(tenants, [ids[0].0]);
        let moved = sqlx::query("update tenant_upstream set tenant_id = $1")
            .bind(ids[1].0)
            .execute(&mut *tx)
            .await;
        assert!(
            moved.is_err(),
            "RLS with check: a row cannot be handed to another tenant"
        );
    })
    .await;
}

#[tokio::test]
async fn postgres_audit_commits_synchronously_even_when_the_database_says_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = PgDb::create().await;
    let mut admin = sqlx::PgConnection::connect(&db.url).await.expect("admin");
    // The database's default loses acknowledged commits in a crash. A trigger notes the
    // setting inside each audit transaction, as `SHOW synchronous_commit` would.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "alter database {} set synchronous_commit = off",
        db.name
    )))
    .execute(&mut admin)
    .await
    .expect("alter database");
    let store = Store::open(Some(&db.url), dir.path()).await.expect("open");
    store.migrate().await.expect("migrate");
    for sql in [
        "create table seen_commit_mode (mode text not null)",
        "create function note_commit_mode() returns trigger language plpgsql security definer as $$ \
         begin insert into seen_commit_mode values (current_setting('synchronous_commit')); return null; end $$",
        "create trigger note_commit_mode after insert on audit_log for each row execute function note_commit_mode()",
    ] {
        sqlx::query(sql).execute(&mut admin).await.expect(sql);
    }
    let default_mode: String = sqlx::query_scalar("show synchronous_commit")
        .fetch_one(&mut sqlx::PgConnection::connect(&db.url).await.expect("conn"))
        .await
        .expect("show");
    assert_eq!(default_mode, "off", "the test's premise");

    let (a, p) = acme_alice(&store).await;
    // Both append paths: one row in autocommit, and a batch over two tenants in one
    // explicit transaction.
    store
        .append_audit(&[record(a.id, p.id, "echo")])
        .await
        .expect("append");
    let b = store.create_tenant("globex").await.expect("tenant");
    let pb = store
        .create_principal(b.id, &member("bob"))
        .await
        .expect("principal");
    store
        .append_audit(&[record(a.id, p.id, "echo"), record(b.id, pb.id, "echo")])
        .await
        .expect("append");
    let (writer, task) = AuditWriter::spawn(store.clone()).expect("writer thread");
    writer
        .record(record(a.id, p.id, "echo"))
        .await
        .expect("record");
    drop(writer);
    task.join().await;

    let modes: Vec<String> = sqlx::query_scalar("select mode from seen_commit_mode")
        .fetch_all(&mut admin)
        .await
        .expect("modes");
    assert_eq!(modes, ["on", "on", "on", "on"]);
    drop(store);
    drop(admin);
    db.drop_db().await;
}

/// An approval belongs to the one call that asked for it: two runs holding the same call
/// get one approval each, a run never takes another's (nor an MCP or REST call's), a REST
/// denial never lands on a later agent call, and a cancelled run's approvals expire.
#[tokio::test]
async fn approvals_are_bound_to_the_call_that_asked() {
    use toolgate_core::policy::ApprovalRequest;
    use toolgate_core::{Gate, RunId, RunStep};
    use toolgate_store::approvals::Decision;

    on_both(|store| async move {
        let a = store.create_tenant("bound").await.expect("tenant");
        let asker = PrincipalId::new();
        let request = |adapter: Adapter, run: Option<RunId>, presented| ApprovalRequest {
            tenant: a.id,
            call_id: CallId::new(),
            requester: asker,
            requester_name: "asker".into(),
            auth: json!({}),
            adapter,
            tool: "execute_command".into(),
            risk: toolgate_core::Risk::High,
            arguments: json!({"command": "deploy"}),
            call_arguments: json!({"command": "deploy"}),
            arguments_hash: "aa".repeat(32),
            run: run.map(|run_id| RunStep { run_id, step: 1 }),
            agent: run.map(|_| "ops".into()),
            presented,
            expires_at: SystemTime::now() + Duration::from_secs(60),
        };
        let pending = |gate: Gate| match gate {
            Gate::Pending { approval, .. } => approval,
            other => panic!("pending, not {other:?}"),
        };
        let decide = |approval, approve: bool| {
            let store = store.clone();
            async move {
                store
                    .decide_approval(
                        a.id,
                        approval,
                        &Decision {
                            approve,
                            by: PrincipalId::new(),
                            by_name: "boss".into(),
                            reason: "decided".into(),
                        },
                    )
                    .await
                    .expect("decide")
            }
        };
        let gate = |r: ApprovalRequest| {
            let store = store.clone();
            async move { store.gate_approval(&r).await.expect("gate") }
        };

        // Two runs, the same held call: one approval each.
        let (run1, run2) = (RunId::new(), RunId::new());
        let first = pending(gate(request(Adapter::Agent, Some(run1), None)).await);
        let second = pending(gate(request(Adapter::Agent, Some(run2), None)).await);
        assert_ne!(first, second);
        decide(first, true).await;
        // The second run presenting the first's approval does not get it.
        assert!(matches!(
            gate(request(Adapter::Agent, Some(run2), Some(first))).await,
            Gate::Pending { .. }
        ));
        // Neither does an MCP call making the same call again.
        let mcp = gate(request(Adapter::Mcp, None, None)).await;
        assert!(
            matches!(mcp, Gate::Pending { approval, .. } if approval != first),
            "{mcp:?}"
        );
        // The first run, presenting its own, does; the second still waits on its own.
        assert_eq!(
            gate(request(Adapter::Agent, Some(run1), Some(first))).await,
            Gate::Approved { approval: first }
        );
        assert_eq!(
            store
                .get_approval(a.id, second)
                .await
                .expect("get")
                .expect("found")
                .status,
            "pending"
        );

        // An MCP approval is never used by an agent run's call.
        let for_mcp = match mcp {
            Gate::Pending { approval, .. } => approval,
            _ => unreachable!("checked above"),
        };
        decide(for_mcp, true).await;
        let run3 = RunId::new();
        assert!(matches!(
            gate(request(Adapter::Agent, Some(run3), None)).await,
            Gate::Pending { approval, .. } if approval != for_mcp
        ));
        // ...while the MCP client making its call again uses it.
        assert_eq!(
            gate(request(Adapter::Mcp, None, None)).await,
            Gate::Approved { approval: for_mcp }
        );

        // A REST denial does not land on a later agent call nobody saw, nor on a REST
        // call that does not present it.
        let rest = pending(gate(request(Adapter::Rest, None, None)).await);
        decide(rest, false).await;
        let run4 = RunId::new();
        assert!(matches!(
            gate(request(Adapter::Agent, Some(run4), None)).await,
            Gate::Pending { .. }
        ));
        assert!(matches!(
            gate(request(Adapter::Rest, None, None)).await,
            Gate::Pending { approval, .. } if approval != rest
        ));
        assert!(matches!(
            gate(request(Adapter::Rest, None, Some(rest))).await,
            Gate::Denied { approval, .. } if approval == rest
        ));

        // A cancelled run's approvals expire; other runs' stay.
        let expired = store
            .expire_run_approvals(a.id, run2, "the run was cancelled")
            .await
            .expect("expire");
        assert_eq!(expired, [second]);
        let record = store
            .get_approval(a.id, second)
            .await
            .expect("get")
            .expect("found");
        assert_eq!(record.status, "expired");
        assert_eq!(
            store
                .expire_run_approvals(a.id, run2, "again")
                .await
                .expect("expire"),
            []
        );
    })
    .await;
}

/// Runs `sqls` around the store's own guards, as someone with the database would.
async fn tamper(store: &Store, sqls: &[String]) {
    match store {
        Store::Sqlite(sqlite) => {
            for sql in [
                "drop trigger if exists audit_log_no_delete",
                "drop trigger if exists audit_checkpoint_no_delete",
            ] {
                sqlx::query(sql).execute(sqlite.pool()).await.expect(sql);
            }
            for sql in sqls {
                sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                    .execute(sqlite.pool())
                    .await
                    .expect("tamper");
            }
        }
        Store::Postgres(pg) => {
            let mut conn = pg.owner_pool().acquire().await.expect("conn");
            sqlx::query("set session_replication_role = replica")
                .execute(&mut *conn)
                .await
                .expect("bypass triggers");
            for sql in sqls {
                sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                    .execute(&mut *conn)
                    .await
                    .expect("tamper");
            }
            sqlx::query("set session_replication_role = origin")
                .execute(&mut *conn)
                .await
                .expect("reset");
        }
    }
}

/// Removing a tenant's newest rows — or all of them — is detected against the stored
/// chain head; rewriting the head to match is detected by a signed checkpoint; deleting
/// the checkpoints too, by an exported copy; a checkpoint signed by another key is forged.
#[tokio::test]
async fn tail_truncation_is_detected_by_the_head_and_by_signed_checkpoints() {
    use toolgate_store::checkpoint::AuditSigner;
    on_both(|store| async move {
        let signer = AuditSigner::from_seed(&[42; 32]);
        let key = signer.public_key();
        let (tenant, rows) = seeded(&store).await;
        assert_eq!(store.write_checkpoints(&signer).await.expect("sign"), 1);
        assert_eq!(
            store.write_checkpoints(&signer).await.expect("sign"),
            0,
            "nothing moved"
        );
        let exported = store.checkpoints(tenant).await.expect("export");
        assert_eq!(exported.len(), 1);
        assert_eq!(exported[0].seq, 5);
        assert_eq!(
            store
                .verify_audit(tenant, Some(&key), &[])
                .await
                .expect("verify"),
            None
        );
        let t = match &store {
            Store::Sqlite(_) => tenant.0.hyphenated().to_string(),
            Store::Postgres(_) => tenant.0.to_string(),
        };
        let cast = if matches!(store, Store::Postgres(_)) {
            "::uuid"
        } else {
            ""
        };

        // The newest two rows go: the head still says 5.
        tamper(
            &store,
            &[format!(
                "delete from audit_log where tenant_id = '{t}'{cast} and seq > 3"
            )],
        )
        .await;
        assert_eq!(
            store.verify_chain(tenant).await.expect("verify"),
            Some(ChainBreak::Truncated {
                recorded: 5,
                found: 3
            })
        );
        // The head rewritten to match: the signed checkpoint still names row 5.
        tamper(&store, &[format!(
            "update audit_chain_head set seq = 3, row_hash = '{}' where tenant_id = '{t}'{cast}",
            rows[2].row_hash
        )])
        .await;
        assert_eq!(
            store
                .verify_audit(tenant, Some(&key), &[])
                .await
                .expect("verify"),
            Some(ChainBreak::Truncated {
                recorded: 5,
                found: 3
            })
        );
        // The checkpoints deleted as well: the exported copy still tells.
        tamper(
            &store,
            &[format!(
                "delete from audit_checkpoint where tenant_id = '{t}'{cast}"
            )],
        )
        .await;
        assert_eq!(
            store
                .verify_audit(tenant, Some(&key), &[])
                .await
                .expect("verify"),
            None
        );
        assert_eq!(
            store
                .verify_audit(tenant, Some(&key), &exported)
                .await
                .expect("verify"),
            Some(ChainBreak::Truncated {
                recorded: 5,
                found: 3
            })
        );
        // A checkpoint signed by someone else's key, for the shortened chain: forged.
        let forger = AuditSigner::from_seed(&[7; 32]);
        let forged = forger.sign(tenant, 3, &rows[2].row_hash);
        assert_eq!(
            store
                .verify_audit(tenant, Some(&key), &[forged])
                .await
                .expect("verify"),
            Some(ChainBreak::Forged { seq: 3 })
        );
        // Every row gone, the head left: detected.
        tamper(
            &store,
            &[format!(
                "delete from audit_log where tenant_id = '{t}'{cast}"
            )],
        )
        .await;
        assert_eq!(
            store.verify_chain(tenant).await.expect("verify"),
            Some(ChainBreak::Truncated {
                recorded: 3,
                found: 0
            })
        );
    })
    .await;
}

/// Pinned tool definitions: saved whole and read back per owner; approving moves the
/// waiting definition to the pin only while it is the one named by its hash.
#[tokio::test]
async fn tool_pins_round_trip_and_approve_only_the_waiting_definition() {
    on_both(|store| async move {
        let owner = uuid::Uuid::now_v7();
        let pin = toolgate_store::PinRecord {
            owner,
            upstream: "fx".into(),
            tool: "add".into(),
            exported: "fx__add".into(),
            pinned_hash: Some("h1".into()),
            pinned: Some(serde_json::json!({"name": "add", "description": "Adds."})),
            pending_hash: Some("h2".into()),
            pending: Some(serde_json::json!({"name": "add", "description": "Adds. <IMPORTANT>"})),
            findings: vec!["instructions to the model".into()],
            updated_at: chrono::DateTime::from_timestamp_micros(1_700_000_000_000_000)
                .expect("time"),
            approved_by: None,
            approved_at: None,
        };
        store.save_tool_pin(&pin).await.expect("save");
        let read = store
            .tool_pin(owner, "fx", "add")
            .await
            .expect("read")
            .expect("there");
        assert_eq!(read, pin);
        assert_eq!(
            store.tool_pins(owner).await.expect("list"),
            std::slice::from_ref(&pin)
        );
        assert!(
            store
                .tool_pins(uuid::Uuid::nil())
                .await
                .expect("list")
                .is_empty()
        );
        let by = PrincipalId(uuid::Uuid::now_v7());
        let mut changes = store.watch_changes().await.expect("watch");
        assert_eq!(
            store
                .approve_tool_pin(owner, "fx", "add", "h1", by)
                .await
                .expect("approve"),
            None,
            "h1 is pinned, not waiting"
        );
        let approved = store
            .approve_tool_pin(owner, "fx", "add", "h2", by)
            .await
            .expect("approve")
            .expect("approved");
        // Announced (and the approval refused just before was not).
        assert_eq!(announced(&mut changes).await, Change::PinApproved);
        assert_eq!(approved.pinned_hash.as_deref(), Some("h2"));
        assert_eq!(approved.pinned, pin.pending);
        assert_eq!((approved.pending_hash, approved.pending), (None, None));
        assert!(approved.findings.is_empty());
        assert_eq!(approved.approved_by, Some(by));
        assert_eq!(
            store.last_pin_approval().await.expect("last"),
            approved.approved_at,
            "what other instances watch for"
        );
        store.delete_tool_pins(owner, "fx").await.expect("delete");
        assert!(store.tool_pins(owner).await.expect("list").is_empty());
    })
    .await;
}

/// A call of `requester` in `tenant` asking for approval.
fn approval_request(
    tenant: TenantId,
    requester: PrincipalId,
) -> toolgate_core::policy::ApprovalRequest {
    toolgate_core::policy::ApprovalRequest {
        tenant,
        call_id: CallId::new(),
        requester,
        requester_name: "asker".into(),
        auth: json!({"tenant": tenant}),
        adapter: Adapter::Mcp,
        tool: "execute_command".into(),
        risk: toolgate_core::Risk::High,
        arguments: json!({"command": "ls"}),
        call_arguments: json!({"command": "ls"}),
        arguments_hash: "ab".repeat(32),
        run: None,
        agent: None,
        presented: None,
        expires_at: SystemTime::now() + Duration::from_secs(60),
    }
}

/// The next change announced to `changes`.
async fn announced(changes: &mut toolgate_core::stores::Changes) -> Change {
    tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("a change was announced")
        .expect("the store is still there")
}

#[tokio::test]
async fn approval_changes_are_announced_when_they_commit_and_only_then() {
    use toolgate_core::Gate;
    use toolgate_store::approvals::Decision;

    on_both(|store| async move {
        let a = store.create_tenant("notify-a").await.expect("tenant");
        let b = store.create_tenant("notify-b").await.expect("tenant");
        let asker = PrincipalId::new();
        let mut changes = store.watch_changes().await.expect("watch");

        let request = approval_request(a.id, asker);
        let Gate::Pending { approval, .. } = store.gate_approval(&request).await.expect("gate")
        else {
            panic!("a new call waits");
        };
        assert_eq!(announced(&mut changes).await, Change::Approvals(a.id));
        // The same call again finds the same pending approval: nothing changed, nothing is
        // announced (the next announcement is tenant b's).
        store.gate_approval(&request).await.expect("gate");
        let Gate::Pending {
            approval: other, ..
        } = store
            .gate_approval(&approval_request(b.id, asker))
            .await
            .expect("gate")
        else {
            panic!("a new call waits");
        };
        assert_eq!(announced(&mut changes).await, Change::Approvals(b.id));

        let decision = Decision {
            approve: true,
            by: PrincipalId::new(),
            by_name: "boss".into(),
            reason: "fine".into(),
        };
        store
            .decide_approval(a.id, approval, &decision)
            .await
            .expect("decide");
        assert_eq!(announced(&mut changes).await, Change::Approvals(a.id));
        // A decision refused (decided already) changes nothing and announces nothing.
        assert!(matches!(
            store.decide_approval(a.id, approval, &decision).await,
            Err(StoreError::Conflict(_))
        ));
        store
            .set_approval_result(b.id, other, &json!({"status": 200}))
            .await
            .expect("result");
        assert_eq!(announced(&mut changes).await, Change::Approvals(b.id));
    })
    .await;
}

#[tokio::test]
async fn postgres_announces_approval_changes_to_every_instance() {
    on_postgres(|store, url| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let elsewhere = Store::open(Some(&url), dir.path())
            .await
            .expect("second instance");
        let tenant = store.create_tenant("acme").await.expect("tenant");
        let mut here = store.watch_changes().await.expect("watch");
        let mut there = elsewhere.watch_changes().await.expect("watch");
        elsewhere
            .gate_approval(&approval_request(tenant.id, PrincipalId::new()))
            .await
            .expect("gate");
        assert_eq!(announced(&mut here).await, Change::Approvals(tenant.id));
        assert_eq!(announced(&mut there).await, Change::Approvals(tenant.id));
    })
    .await;
}

#[tokio::test]
async fn a_runs_new_steps_are_announced_to_every_instance() {
    use toolgate_core::RunId;
    use toolgate_store::RunFinish;

    // On Postgres the second store is another instance (its own pools and listener); on
    // SQLite, with one instance per file, it is the same process's store reopened.
    on_both(|store| async move {
        let elsewhere = store.reopen().await.expect("second instance");
        let tenant = store.create_tenant("runs-notify").await.expect("tenant");
        let run = RunId::new();
        let new = new_run(
            tenant.id,
            run,
            chrono::Utc::now() + chrono::Duration::seconds(30),
        );
        store.create_run(tenant.id, &new).await.expect("run");
        let mut here = store.watch_changes().await.expect("watch");
        let turn = json!({"type": "turn_started", "turn": 1});
        // A step alone (Postgres: one statement in autocommit), then the run's end (with
        // the run row, in one transaction): each announced when it commits.
        elsewhere
            .append_run_events(tenant.id, run, 2, &[turn], None, false)
            .await
            .expect("step");
        assert_eq!(
            announced(&mut here).await,
            Change::Run {
                tenant: tenant.id,
                run
            }
        );
        let finish = RunFinish {
            status: "completed".into(),
            output: Some("done".into()),
            best_effort: false,
            error: None,
            usage: json!({}),
        };
        elsewhere
            .append_run_events(
                tenant.id,
                run,
                3,
                &[json!({"type": "run_finished"})],
                Some(&finish),
                true,
            )
            .await
            .expect("end");
        assert_eq!(
            announced(&mut here).await,
            Change::Run {
                tenant: tenant.id,
                run
            }
        );
    })
    .await;
}

#[tokio::test]
async fn the_audit_writer_announces_each_batch_to_this_instance() {
    on_both(|store| async move {
        let (a, p) = acme_alice(&store).await;
        let mut changes = store.watch_changes().await.expect("watch");
        let (writer, task) = AuditWriter::spawn(store.clone()).expect("writer thread");
        writer
            .record(record(a.id, p.id, "echo"))
            .await
            .expect("record");
        assert_eq!(announced(&mut changes).await, Change::Audit(a.id));
        drop(writer);
        task.join().await;
    })
    .await;
}
