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
            store
                .put_mcp_session(&McpSession {
                    id: id.into(),
                    tenant: a.id,
                    principal: pa.id,
                    initialize_params: "{}".into(),
                    log_level: None,
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

/// Session `s1` of `principal`'s in `tenant`, with a priming event on stream `r1`: that
/// event's number.
async fn session_s1(store: &Store, tenant: TenantId, principal: PrincipalId) -> i64 {
    store
        .put_mcp_session(&McpSession {
            id: "s1".into(),
            tenant,
            principal,
            initialize_params: "{}".into(),
            log_level: None,
        })
        .await
        .expect("session");
    store
        .append_mcp_event(tenant, "s1", "r1", None, Some(3000))
        .await
        .expect("append")
}
