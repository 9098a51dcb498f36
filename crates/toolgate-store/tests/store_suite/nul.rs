//! U+0000 (NUL) from clients, tools and models: Postgres's `text` cannot hold it and its
//! `jsonb` refuses `\u0000`. Before, one NUL in an MCP client's name failed the call's
//! audit row (and with it the call, and the audit batch it shared); in a tool's output it
//! failed the run journal.

use super::*;

const STANDIN: &str = "\u{FFFD}";

#[tokio::test]
async fn an_audit_row_holding_nul_is_stored_with_it_replaced_and_its_chain_verifies() {
    on_both(|store| async move {
        let (a, p) = acme_alice(&store).await;
        let mut rec = record(a.id, p.id, "ec\0ho");
        rec.arguments = json!({"message": "a\0b", "k\0": 1});
        rec.error = Some("'k\0' was unexpected".into());
        rec.outcome = Outcome::Error(ErrorKind::InvalidArguments);
        rec.client = Some("evil\0client 1".into());
        rec.request_id = Some("req\0".into());
        // A call with side effects records its intent first: the same fields.
        store.record_call_intent(&rec).await.expect("intent");
        store
            .append_audit(std::slice::from_ref(&rec))
            .await
            .expect("append");
        let rows = store.audit_chain(a.id).await.expect("chain");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].tool, format!("ec{STANDIN}ho"));
        assert_eq!(
            rows[0].error.as_deref(),
            Some(&*format!("'k{STANDIN}' was unexpected"))
        );
        assert_eq!(
            rows[0].client.as_deref(),
            Some(&*format!("evil{STANDIN}client 1"))
        );
        assert_eq!(
            rows[0].request_id.as_deref(),
            Some(&*format!("req{STANDIN}"))
        );
        // The arguments are JSON text: the escape `\u0000` is kept as sent.
        let arguments: serde_json::Value = serde_json::from_str(&rows[0].arguments).expect("json");
        assert_eq!(arguments, rec.arguments);
        assert_eq!(store.verify_chain(a.id).await.expect("verify"), None);
        assert_eq!(store.recover_unfinished().await.expect("recover"), 0);
    })
    .await;
}

#[tokio::test]
async fn a_run_journal_and_its_end_holding_nul_are_stored_with_it_replaced() {
    use chrono::Utc;
    use toolgate_core::RunId;
    use toolgate_store::RunFinish;

    on_both(|store| async move {
        let a = store.create_tenant("nul-runs").await.expect("tenant");
        let run = RunId::new();
        let new = new_run(a.id, run, Utc::now() + chrono::Duration::seconds(30));
        store.create_run(a.id, &new).await.expect("run");
        let result = json!({"type": "tool_result", "output": "x\0y", "k\0": ["\0"]});
        let finish = RunFinish {
            status: toolgate_core::stores::RunStatus::Completed,
            output: Some("done\0".into()),
            best_effort: false,
            error: Some("e\0".into()),
            usage: toolgate_core::Usage::default(),
        };
        store
            .append_run_events(a.id, run, 2, &[result], Some(&finish), true)
            .await
            .expect("events with a NUL");
        let events = store.run_events(a.id, run, 1).await.expect("events");
        assert_eq!(
            events[0].payload,
            json!({"type": "tool_result", "output": format!("x{STANDIN}y"), format!("k{STANDIN}"): [STANDIN]})
        );
        let ended = store.get_run(a.id, run).await.expect("get").expect("run");
        assert_eq!(ended.output.as_deref(), Some(&*format!("done{STANDIN}")));
        assert_eq!(ended.error.as_deref(), Some(&*format!("e{STANDIN}")));
    })
    .await;
}

#[tokio::test]
async fn a_name_holding_nul_is_refused_as_invalid_on_postgres() {
    on_postgres(|store, _| async move {
        let a = store.create_tenant("nul-names").await.expect("tenant");
        let made = store.create_principal(a.id, &member("al\0ice")).await;
        assert!(matches!(made, Err(StoreError::Invalid(_))), "{made:?}");
    })
    .await;
}

#[tokio::test]
async fn a_held_call_holding_nul_waits_for_approval_with_its_arguments_kept() {
    use toolgate_core::Gate;
    use toolgate_core::policy::ApprovalRequest;

    on_both(|store| async move {
        let a = store.create_tenant("nul-held").await.expect("tenant");
        let arguments = json!({"command": "echo a\0b"});
        let request = ApprovalRequest {
            tenant: a.id,
            call_id: CallId::new(),
            requester: PrincipalId::new(),
            requester_name: "asker".into(),
            auth: caller(a.id),
            adapter: Adapter::Rest,
            tool: "execute_command".into(),
            risk: toolgate_core::Risk::High,
            arguments: arguments.clone(),
            call_arguments: arguments.clone(),
            arguments_hash: "aa".repeat(32),
            run: None,
            agent: None,
            presented: None,
            expires_at: SystemTime::now() + Duration::from_secs(60),
        };
        let Gate::Pending { approval, .. } = store.gate_approval(&request).await.expect("gate")
        else {
            panic!("a new request waits");
        };
        let held = store
            .get_approval(a.id, approval)
            .await
            .expect("get")
            .expect("held");
        // Shown to the approver with the character replaced; released to the call as sent
        // (`json`, kept as written: its hash still matches the call's).
        assert_eq!(
            held.arguments,
            json!({"command": format!("echo a{STANDIN}b")})
        );
        assert_eq!(held.call_arguments, Some(arguments));
    })
    .await;
}

#[tokio::test]
async fn an_upstream_definition_holding_nul_is_pinned_with_it_replaced() {
    on_both(|store| async move {
        let owner = uuid::Uuid::now_v7();
        let pin = toolgate_store::PinRecord {
            pinned: Some(json!({"name": "add", "description": "Adds.\0"})),
            findings: vec!["hidden \0 characters".into()],
            ..pin_record(owner)
        };
        let read = saved_pin(&store, &pin).await;
        assert_eq!(
            read.pinned,
            Some(json!({"name": "add", "description": format!("Adds.{STANDIN}")}))
        );
        assert_eq!(read.findings, [format!("hidden {STANDIN} characters")]);
    })
    .await;
}
