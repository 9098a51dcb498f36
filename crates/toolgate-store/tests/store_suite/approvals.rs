//! Approvals: bound to their call, used once, decided once, expired.

use super::*;

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
            auth: caller(a.id),
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
            .list_approvals(a.id, Some("pending"), None, 10)
            .await
            .expect("list")
            .items;
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
                .list_approvals(b.id, None, None, 10)
                .await
                .expect("list")
                .items
                .is_empty()
        );
        let approve = Decision {
            approve: true,
            by: boss,
            by_name: "boss".into(),
            reason: "fine".into(),
            use_within: Duration::from_secs(60),
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
                    auth: caller(a.id),
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
            status: toolgate_core::stores::RunStatus::AwaitingApproval,
            output: None,
            best_effort: false,
            error: None,
            usage: Default::default(),
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

/// An approval belongs to the one call that asked for it: two runs holding the same call
/// get one approval each, a run never takes another's (nor an MCP or REST call's), a REST
/// denial never lands on a later agent call, and a cancelled run's approvals expire.
#[tokio::test]
async fn approvals_are_bound_to_the_call_that_asked() {
    use toolgate_core::policy::ApprovalRequest;
    use toolgate_core::{Gate, RunId, RunStep};

    on_both(|store| async move {
        let a = store.create_tenant("bound").await.expect("tenant");
        let asker = PrincipalId::new();
        let request = |adapter: Adapter, run: Option<RunId>, presented| ApprovalRequest {
            tenant: a.id,
            call_id: CallId::new(),
            requester: asker,
            requester_name: "asker".into(),
            auth: caller(a.id),
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
                    .decide_approval(a.id, approval, &decision(approve))
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

/// Approval `id` of `tenant`, as stored.
pub(super) async fn stored(
    store: &Store,
    tenant: toolgate_core::TenantId,
    id: toolgate_core::ApprovalId,
) -> toolgate_store::approvals::ApprovalRecord {
    store
        .get_approval(tenant, id)
        .await
        .expect("get")
        .expect("found")
}

/// A list of approvals stops at about 4 MiB of what they hold (the call's masked and
/// given arguments, its result), saying there is more; their states alone list them all.
/// (Before: 500 approvals of 1 MB calls were read whole, twice over with their given
/// arguments, by every list and by every approvals stream's look.)
#[tokio::test]
async fn a_list_of_large_approvals_is_bounded_in_bytes_and_their_states_are_not() {
    on_both(|store| async move {
        let (a, p) = acme_alice(&store).await;
        let big = "x".repeat(512 * 1024);
        let made = 6;
        for _ in 0..made {
            let mut request = approval_request(a.id, p.id, Duration::from_secs(60));
            request.arguments = json!({ "content": big });
            request.call_arguments = json!({ "content": big });
            pending(&store, &request).await;
        }
        // Each holds 1 MiB (masked and given arguments): four reach the bound.
        let page = store
            .list_approvals(a.id, None, None, 500)
            .await
            .expect("list");
        assert_eq!((page.items.len(), page.more), (4, true));
        let small = store
            .list_approvals(a.id, None, None, 3)
            .await
            .expect("list");
        assert_eq!((small.items.len(), small.more), (3, true));
        let states = store.approval_states(a.id, 200).await.expect("states");
        assert_eq!(states.len(), made);
        let now = chrono::Utc::now();
        assert!(states.iter().all(|s| s.effective_status(now)
            == toolgate_store::approvals::ApprovalStatus::Pending
            && !s.used));
        // Newest first, as the list.
        let listed: Vec<_> = page.items.iter().map(|r| r.id).collect();
        let stated: Vec<_> = states.iter().take(4).map(|s| s.id).collect();
        assert_eq!(listed, stated);
    })
    .await;
}

/// Calls waiting for a person are bounded per principal and per tenant: one more is not
/// asked for (nothing written) and says whose bound it met; the same call again still
/// finds its approval, a decision or an expiry frees a place, another tenant has its own.
#[tokio::test]
async fn calls_waiting_for_approval_are_bounded_per_principal_and_per_tenant() {
    use toolgate_core::Gate;
    use toolgate_core::policy::ApprovalRequest;
    use toolgate_store::approvals::Decision;

    let limits = toolgate_store::StoreLimits {
        quotas: toolgate_store::Quotas {
            pending_approvals: 3,
            pending_approvals_per_principal: 2,
            ..toolgate_store::Quotas::default()
        },
        ..toolgate_store::StoreLimits::default()
    };
    on_both_with(limits, |store| async move {
        let (a, b) = (
            store.create_tenant("crowded").await.expect("tenant"),
            store.create_tenant("roomy").await.expect("tenant"),
        );
        let (ann, bob, cy) = (PrincipalId::new(), PrincipalId::new(), PrincipalId::new());
        let ask = |tenant: TenantId, requester: PrincipalId, n: u8, ttl: Duration| {
            let store = store.clone();
            async move {
                let request = ApprovalRequest {
                    tenant,
                    call_id: CallId::new(),
                    requester,
                    requester_name: "someone".into(),
                    auth: caller(tenant),
                    adapter: Adapter::Rest,
                    tool: "execute_command".into(),
                    risk: toolgate_core::Risk::High,
                    arguments: json!({"command": n}),
                    call_arguments: json!({"command": n}),
                    arguments_hash: format!("{n:02x}").repeat(32),
                    run: None,
                    agent: None,
                    presented: None,
                    expires_at: SystemTime::now() + ttl,
                };
                store.gate_approval(&request).await.expect("gate")
            }
        };
        let hour = Duration::from_secs(3600);
        let pending = |gate: Gate| match gate {
            Gate::Pending { approval, .. } => approval,
            other => panic!("not waiting: {other:?}"),
        };
        let crowded = |waiting, by_requester| Gate::Crowded {
            waiting,
            by_requester,
        };
        let first = pending(ask(a.id, ann, 1, hour).await);
        pending(ask(a.id, ann, 2, hour).await);
        // Ann's third waits for nobody: her own bound.
        assert_eq!(ask(a.id, ann, 3, hour).await, crowded(2, true));
        pending(ask(a.id, bob, 4, hour).await);
        // Cy has none waiting, but the tenant has three.
        assert_eq!(ask(a.id, cy, 5, hour).await, crowded(3, false));
        let listed = store
            .list_approvals(a.id, Some("pending"), None, 10)
            .await
            .expect("list")
            .items;
        assert_eq!(listed.len(), 3, "nothing written for the refused");
        // Another tenant is not held to this one's count.
        pending(ask(b.id, cy, 5, hour).await);

        // A decision frees a place.
        let deny = Decision {
            approve: false,
            by: bob,
            by_name: "bob".into(),
            reason: "no".into(),
            use_within: hour,
        };
        store
            .decide_approval(a.id, first, &deny)
            .await
            .expect("deny");
        pending(ask(a.id, cy, 5, hour).await);
        // So does an expiry: a call that waits no more is not counted.
        let b2 = store.create_tenant("expiring").await.expect("tenant");
        pending(ask(b2.id, ann, 1, Duration::from_millis(1)).await);
        pending(ask(b2.id, ann, 2, hour).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
        pending(ask(b2.id, ann, 3, hour).await);
    })
    .await;
}
