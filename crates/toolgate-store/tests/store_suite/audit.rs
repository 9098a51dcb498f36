//! The audit log: group commit, the hash chain, verification, tampering, recovery.

use super::*;

#[tokio::test]
async fn concurrent_records_become_exactly_one_row_each_in_a_verified_chain() {
    on_both(|store| async move {
        let (a, b, pa) = acme_globex_and_alice(&store).await;
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
        assert!(page.more, "more rows match");
        let page = page.items;
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
        assert!(!next.more, "the last page");
        assert_eq!(next.items.len(), 123);
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
        assert!(
            none.items.is_empty(),
            "tenant B's listing never shows A's rows"
        );
    })
    .await;
}

#[tokio::test]
async fn unfinished_side_effect_calls_are_recovered_as_interrupted() {
    on_both(|store| async move {
        let (a, p) = acme_alice(&store).await;
        let mut rec = record(a.id, p.id, "write_file");
        rec.run = Some(toolgate_core::RunStep {
            run_id: toolgate_core::RunId::new(),
            step: 7,
        });
        rec.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
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
        // The row is made from the intent alone: every field it kept reads back.
        assert_eq!(rows[0].principal, p.id);
        assert_eq!(rows[0].adapter, "rest");
        assert_eq!(rows[0].tool, "write_file");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&rows[0].arguments).expect("json"),
            rec.arguments
        );
        assert_eq!(rows[0].arguments_hash, rec.arguments_hash);
        assert_eq!(rows[0].request_id, rec.request_id);
        assert_eq!(rows[0].trace_id, rec.trace_id);
        assert_eq!(rows[0].run_id, rec.run.map(|r| r.run_id));
        assert_eq!(rows[0].step, Some(7));
        assert_eq!(rows[0].client, rec.client);
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
async fn a_read_of_large_rows_stops_at_its_byte_bound_and_the_rest_follows() {
    // Each row keeps a call's arguments, up to the request body's bound even for a call
    // that was refused: a page of 1,000 such rows, read whole, held 3 GB of the gateway.
    on_both(|store| async move {
        let (a, p) = acme_alice(&store).await;
        let big = "x".repeat(1 << 20);
        let rows = 9;
        for i in 0..rows {
            let mut r = record(a.id, p.id, &format!("tool{i}"));
            r.arguments = serde_json::json!({ "content": big });
            store.append_audit(&[r]).await.expect("append");
        }
        // Four rows of a MiB reach the 4 MiB bound: a page of 1,000 asked ends there.
        let first = store
            .list_audit(a.id, &AuditFilter::default(), 1000)
            .await
            .expect("list");
        let held: usize = first.items.iter().map(|r| r.arguments.len()).sum();
        assert!(first.more, "more rows follow");
        assert_eq!(first.items.len(), 4, "held {held} bytes");
        assert!(held <= toolgate_store::READ_BYTES + (1 << 20));
        // The cursor goes on to the others, and the last page says it is the last.
        let (mut seen, mut before, mut pages) = (first.items.len(), first.items[3].seq, 1);
        loop {
            let page = store
                .list_audit(
                    a.id,
                    &AuditFilter {
                        before_seq: Some(before),
                        ..AuditFilter::default()
                    },
                    1000,
                )
                .await
                .expect("list");
            seen += page.items.len();
            pages += 1;
            let Some(last) = page.items.last() else { break };
            before = last.seq;
            if !page.more {
                break;
            }
        }
        assert_eq!((seen, pages), (rows, 3));
        // The limit still holds below the bound, and says there is more.
        let two = store
            .list_audit(a.id, &AuditFilter::default(), 2)
            .await
            .expect("list");
        assert_eq!((two.items.len(), two.more), (2, true));
        // Verification reads the chain in such pieces and walks all of it.
        assert_eq!(store.verify_chain(a.id).await.expect("verify"), None);
        assert_eq!(store.audit_chain(a.id).await.expect("chain").len(), rows);
        // A summary's read holds none of the arguments.
        let since = chrono::DateTime::<chrono::Utc>::UNIX_EPOCH;
        let timings = store
            .audit_timings(a.id, since, 100)
            .await
            .expect("timings");
        assert_eq!(timings.len(), rows);
        assert!(timings.iter().all(|t| t.ok && t.duration_us == 1234));
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
            .expect("list")
            .items;
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
        let tools: Vec<&str> = picked.items.iter().map(|r| r.tool.as_str()).collect();
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
            .list_approvals(tenant.id, None, None, 10)
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
