//! MCP sessions and their SSE events.

use super::*;

#[tokio::test]
async fn mcp_events_replay_per_stream_and_only_for_their_tenant_and_session() {
    on_both(|store| async move {
        let (a, b, pa) = acme_globex_and_alice(&store).await;
        let prime = session_s1(&store, a.id, pa.id).await;
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
            put_session(&store, a.id, pa.id, id).await;
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

/// A session's `logging/setLevel` choice is kept with it, so that the session restored
/// from the store (on this instance or another) has it; only its own tenant may set it.
#[tokio::test]
async fn an_mcp_sessions_log_level_is_kept_and_only_its_tenant_sets_it() {
    on_both(|store| async move {
        let (a, b, pa) = acme_globex_and_alice(&store).await;
        let session = McpSession {
            id: "s1".into(),
            tenant: a.id,
            principal: pa.id,
            initialize_params: "{}".into(),
            log_level: None,
        };
        store.put_mcp_session(&session).await.expect("session");
        assert_eq!(
            store.mcp_session("s1").await.expect("read"),
            Some(session.clone()),
            "no level until one is chosen"
        );

        assert!(
            store
                .set_mcp_session_log_level(a.id, "s1", "error")
                .await
                .expect("set")
        );
        assert_eq!(level(&store).await.as_deref(), Some("error"));
        assert!(
            store
                .set_mcp_session_log_level(a.id, "s1", "debug")
                .await
                .expect("set again")
        );
        assert_eq!(level(&store).await.as_deref(), Some("debug"));

        // Another tenant's caller, or a session that does not exist, changes nothing.
        assert!(
            !store
                .set_mcp_session_log_level(b.id, "s1", "emergency")
                .await
                .expect("refused")
        );
        assert!(
            !store
                .set_mcp_session_log_level(a.id, "nope", "error")
                .await
                .expect("none")
        );
        assert_eq!(level(&store).await.as_deref(), Some("debug"));
    })
    .await;
}

async fn level(store: &Store) -> Option<String> {
    store
        .mcp_session("s1")
        .await
        .expect("read")
        .and_then(|s| s.log_level)
}

#[tokio::test]
async fn a_stream_of_large_events_is_read_in_bounded_parts() {
    on_both(|store| async move {
        let (a, _, pa) = acme_globex_and_alice(&store).await;
        let prime = session_s1(&store, a.id, pa.id).await;
        let big = format!("{{\"text\":\"{}\"}}", "x".repeat(1 << 20));
        let mut seqs = Vec::new();
        for _ in 0..8 {
            let seq = store
                .append_mcp_event(a.id, "s1", "r1", Some(&big), None)
                .await
                .expect("append");
            seqs.push(seq);
        }
        // Each read stops at about 4 MiB; reading on after the last gets the rest.
        let mut read = Vec::new();
        let mut after = prime;
        let mut reads = 0;
        loop {
            let part = store
                .mcp_events_after(a.id, "s1", after)
                .await
                .expect("replay");
            let Some(last) = part.last() else { break };
            assert!(
                part.len() <= 4,
                "{} events of 1 MiB in one read",
                part.len()
            );
            after = last.seq;
            read.extend(part.iter().map(|e| e.seq));
            reads += 1;
        }
        assert_eq!(read, seqs, "every event once, in order");
        assert!(reads >= 2, "{reads} reads");
    })
    .await;
}

/// Records session `id` of `principal`'s in `tenant`.
async fn put_session(store: &Store, tenant: TenantId, principal: PrincipalId, id: &str) {
    store
        .put_mcp_session(&McpSession {
            id: id.into(),
            tenant,
            principal,
            initialize_params: "{}".into(),
            log_level: None,
        })
        .await
        .expect("session");
}

/// Session `s1` of `principal`'s in `tenant`, with a priming event on stream `r1`: that
/// event's number.
async fn session_s1(store: &Store, tenant: TenantId, principal: PrincipalId) -> i64 {
    put_session(store, tenant, principal, "s1").await;
    store
        .append_mcp_event(tenant, "s1", "r1", None, Some(3000))
        .await
        .expect("append")
}

/// The retention sweeps delete in batches (a thousand rows a statement) until none is
/// left: past one batch, every expired session and event goes, and nothing kept.
#[tokio::test]
async fn retention_sweeps_go_on_past_one_batch_and_keep_what_is_kept() {
    on_both(|store| async move {
        let (a, pa) = acme_alice(&store).await;
        put_session(&store, a.id, pa.id, "kept").await;
        for _ in 0..3 {
            store
                .append_mcp_event(a.id, "kept", "r1", Some("{}"), None)
                .await
                .expect("event");
        }
        let long_ago = "'2020-01-01T00:00:00+00:00'";
        let rows = |n: usize| format!("with recursive n(i) as (select 1 union all select i + 1 from n where i < {n}) ");
        let sessions = run_as(
            &store,
            true,
            format!(
                "{}insert into mcp_session (session_id, tenant_id, principal_id, initialize_params, created_at, last_used_at) \
                 select 'old-' || i, '{}', '{}', '{{}}', {long_ago}, {long_ago} from n",
                rows(1_200),
                a.id,
                pa.id
            ),
        )
        .await
        .expect("old sessions");
        let events = run_as(
            &store,
            true,
            format!(
                "{}insert into mcp_event (tenant_id, session_id, stream_id, message, retry_ms, created_at) \
                 select '{}', 'kept', 'r1', '{{}}', null, {long_ago} from n",
                rows(2_500),
                a.id
            ),
        )
        .await
        .expect("old events");
        assert_eq!((sessions, events), (1_200, 2_500));

        let an_hour_ago = chrono::Utc::now() - chrono::Duration::hours(1);
        let pruned = store.prune_mcp_events(an_hour_ago).await.expect("events");
        assert_eq!(pruned, 2_500, "every expired event, over three batches");
        let pruned = store.prune_mcp_sessions(an_hour_ago).await.expect("sessions");
        assert_eq!(pruned, 1_200, "every expired session, over two batches");
        assert!(store.mcp_session("old-1200").await.expect("read").is_none());
        assert!(store.mcp_session("kept").await.expect("read").is_some());
        let later = chrono::Utc::now() + chrono::Duration::seconds(1);
        assert_eq!(
            store.prune_mcp_events(later).await.expect("the rest"),
            3,
            "the kept session's own events were left"
        );
    })
    .await;
}

/// This process's writers take turns at SQLite's write lock, so none waits in SQLite's
/// busy handler behind another: with the busy timeout at 0 (a writer finding the lock
/// taken fails at once), inserts, a sweep in batches and new agents all succeed beside an
/// audit writer committing batch after batch. Before turns, the first write beside it
/// failed with "database is locked"; with a busy timeout, such a write waited in the
/// handler's sleeps of up to 100 ms, and bench/mcp_sweep.sh measured one insert waiting
/// 531 ms.
#[tokio::test]
async fn writers_on_sqlite_take_turns_beside_a_busy_audit_writer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let limits = toolgate_store::StoreLimits {
        statement_timeout: Duration::ZERO,
        acquire_timeout: Duration::from_secs(30),
        ..toolgate_store::StoreLimits::default()
    };
    let store = Store::open_with(None, dir.path(), limits)
        .await
        .expect("open sqlite");
    store.migrate().await.expect("migrate");
    let (a, pa) = acme_alice(&store).await;
    put_session(&store, a.id, pa.id, "s").await;
    run_as(
        &store,
        true,
        format!(
            "with recursive n(i) as (select 1 union all select i + 1 from n where i < 2500) \
             insert into mcp_event (tenant_id, session_id, stream_id, message, retry_ms, created_at) \
             select '{}', 's', 'r1', '{{}}', null, '2020-01-01T00:00:00+00:00' from n",
            a.id
        ),
    )
    .await
    .expect("old events");

    let (writer, task) = AuditWriter::spawn(store.clone()).expect("writer thread");
    let writer = Arc::new(writer);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut callers = Vec::new();
    for _ in 0..32 {
        let (writer, stop) = (writer.clone(), stop.clone());
        callers.push(tokio::spawn(async move {
            let mut recorded = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                writer.record(record(a.id, pa.id, "echo")).await?;
                recorded += 1;
            }
            Ok::<u32, toolgate_core::audit::AuditError>(recorded)
        }));
    }
    for n in 0..300 {
        store
            .append_mcp_event(a.id, "s", "r1", Some("{}"), None)
            .await
            .unwrap_or_else(|e| panic!("insert {n} beside the audit writer: {e}"));
        if n % 30 == 0 {
            store
                .create_agent(a.id, &format!("agent-{n}"), &json!({"name": "x"}))
                .await
                .unwrap_or_else(|e| panic!("agent {n} beside the audit writer: {e}"));
        }
    }
    let an_hour_ago = chrono::Utc::now() - chrono::Duration::hours(1);
    assert_eq!(
        store.prune_mcp_events(an_hour_ago).await.expect("sweep"),
        2_500
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut recorded = 0;
    for caller in callers {
        recorded += caller.await.expect("join").expect("every record committed");
    }
    drop(writer);
    task.join().await;
    assert!(recorded > 0);
    assert_eq!(store.verify_chain(a.id).await.expect("verify"), None);
}
