//! Approvals after their decision: an approval whose call can no longer run keeps no
//! arguments in the clear, an approved call not made in time lapses, and an approved
//! REST call left without an outcome is marked interrupted.

use super::approvals::stored;
use super::*;

/// An approval's arguments as the caller gave them (a secret among them) are kept only
/// while its call may still run: before, a denied or expired approval whose call was
/// never made again kept them for good.
#[tokio::test]
async fn an_approval_whose_call_can_no_longer_run_keeps_no_arguments_in_the_clear() {
    use toolgate_core::{RunId, RunStep};
    on_both(|store| async move {
        let a = store.create_tenant("clear").await.expect("tenant");
        let asker = PrincipalId::new();
        let minute = Duration::from_secs(60);
        let kept = |approval| {
            let store = &store;
            async move { stored(store, a.id, approval).await.call_arguments }
        };
        let denied = pending(&store, &approval_request(a.id, asker, minute)).await;
        assert_eq!(
            kept(denied).await,
            Some(json!({"command": "ls", "token": "s3cret"}))
        );
        store
            .decide_approval(a.id, denied, &decision(false))
            .await
            .expect("deny");
        assert_eq!(kept(denied).await, None, "kept after the denial");

        let approved = pending(&store, &approval_request(a.id, asker, minute)).await;
        store
            .decide_approval(a.id, approved, &decision(true))
            .await
            .expect("approve");
        assert!(
            kept(approved).await.is_some(),
            "the approved call still runs with them"
        );

        let late = pending(&store, &approval_request(a.id, asker, Duration::ZERO)).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            store.expire_approvals().await.expect("sweep"),
            vec![(a.id, late)]
        );
        assert_eq!(kept(late).await, None, "kept after it expired");

        let run = RunId::new();
        let mut in_run = approval_request(a.id, asker, minute);
        in_run.run = Some(RunStep {
            run_id: run,
            step: 1,
        });
        let stopped = pending(&store, &in_run).await;
        // Approved, but the run was cancelled before it made the call.
        in_run.run = Some(RunStep {
            run_id: run,
            step: 2,
        });
        in_run.arguments_hash = "ab".repeat(32);
        in_run.call_id = CallId::new();
        let unused = pending(&store, &in_run).await;
        store
            .decide_approval(a.id, unused, &decision(true))
            .await
            .expect("approve");
        let mut expired = store
            .expire_run_approvals(a.id, run, "the run was cancelled")
            .await
            .expect("expire");
        expired.sort_by_key(|id| id.0);
        let mut both = vec![stopped, unused];
        both.sort_by_key(|id| id.0);
        assert_eq!(expired, both);
        assert_eq!(
            kept(stopped).await,
            None,
            "kept after its run was cancelled"
        );
        assert_eq!(
            kept(unused).await,
            None,
            "kept, approved, after its run was cancelled"
        );
    })
    .await;
}

#[tokio::test]
async fn an_approval_whose_call_is_not_made_in_time_lapses() {
    use chrono::Utc;
    use toolgate_core::Gate;
    use toolgate_store::approvals::{ApprovalStatus, Decision};
    on_both(|store| async move {
        let a = store.create_tenant("lapse").await.expect("tenant");
        let asker = PrincipalId::new();
        let minute = Duration::from_secs(60);
        let at_once = Decision {
            use_within: Duration::ZERO,
            ..decision(true)
        };
        let get = |approval| stored(&store, a.id, approval);
        let listed = |status| {
            let store = &store;
            async move {
                store
                    .list_approvals(a.id, Some(status), None, 10)
                    .await
                    .expect("list")
                    .items
                    .into_iter()
                    .map(|r| r.id)
                    .collect::<Vec<_>>()
            }
        };

        // An MCP client coming back after its approval lapsed asks anew.
        let request = approval_request(a.id, asker, minute);
        let first = pending(&store, &request).await;
        store
            .decide_approval(a.id, first, &at_once)
            .await
            .expect("approve");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            get(first).await.effective_status(Utc::now()),
            ApprovalStatus::Expired
        );
        assert_eq!(listed("expired").await, vec![first]);
        assert!(listed("approved").await.is_empty());
        let mut retry = request.clone();
        retry.call_id = CallId::new();
        let again = pending(&store, &retry).await;
        assert_ne!(again, first, "a lapsed approval let a call run");
        let lapsed = get(first).await;
        assert_eq!(lapsed.status, ApprovalStatus::Expired);
        assert!(lapsed.call_arguments.is_none(), "{lapsed:?}");
        assert!(
            lapsed.reason.as_deref().unwrap_or("").contains("lapsed"),
            "{lapsed:?}"
        );

        // The call presenting a lapsed approval (a run resuming, an approved REST call)
        // is denied, and told why.
        let mut presenting = approval_request(a.id, asker, minute);
        let second = pending(&store, &presenting).await;
        store
            .decide_approval(a.id, second, &at_once)
            .await
            .expect("approve");
        tokio::time::sleep(Duration::from_millis(20)).await;
        presenting.presented = Some(second);
        match store.gate_approval(&presenting).await.expect("gate") {
            Gate::Denied {
                approval,
                reason,
                decided_by: None,
            } if approval == second => assert!(reason.contains("lapsed"), "{reason}"),
            other => panic!("not denied as lapsed: {other:?}"),
        }

        // The sweep marks the approvals nobody came back for and clears their
        // arguments; one still in time is kept as it was.
        let third = pending(&store, &approval_request(a.id, asker, minute)).await;
        store
            .decide_approval(a.id, third, &at_once)
            .await
            .expect("approve");
        let fresh = pending(&store, &approval_request(a.id, asker, minute)).await;
        store
            .decide_approval(a.id, fresh, &decision(true))
            .await
            .expect("approve");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            store.expire_approvals().await.expect("sweep"),
            vec![(a.id, third)]
        );
        let swept = get(third).await;
        assert_eq!(swept.status, ApprovalStatus::Expired);
        assert!(swept.call_arguments.is_none(), "{swept:?}");
        assert!(
            swept.reason.as_deref().unwrap_or("").contains("lapsed"),
            "{swept:?}"
        );
        assert!(get(fresh).await.call_arguments.is_some());
        assert_eq!(listed("approved").await, vec![fresh]);
    })
    .await;
}

/// An approved REST call that started and never got an outcome (its instance stopped)
/// gets the one the sweep gives, once it started before the given time; calls with an
/// outcome, not yet started, or made by an MCP client or a run are left alone.
#[tokio::test]
async fn an_approved_rest_call_left_without_an_outcome_is_marked_interrupted() {
    use chrono::Utc;
    use toolgate_core::{Adapter, Gate};
    on_both(|store| async move {
        let a = store.create_tenant("orphans").await.expect("tenant");
        let asker = PrincipalId::new();
        let minute = Duration::from_secs(60);
        // Asked, approved and, when `start`, made (the approval presented and used).
        let approved = |adapter: Adapter, start: bool| {
            let store = &store;
            async move {
                let mut request = approval_request(a.id, asker, minute);
                request.adapter = adapter;
                let id = pending(store, &request).await;
                store
                    .decide_approval(a.id, id, &decision(true))
                    .await
                    .expect("approve");
                if start {
                    request.presented = Some(id);
                    let gate = store.gate_approval(&request).await.expect("gate");
                    assert!(matches!(gate, Gate::Approved { .. }), "{gate:?}");
                }
                id
            }
        };
        let before = Utc::now() - chrono::Duration::seconds(1);
        let orphan = approved(Adapter::Rest, true).await;
        let finished = approved(Adapter::Rest, true).await;
        store
            .set_approval_result(a.id, finished, &json!({"status": 200}))
            .await
            .expect("result");
        let unstarted = approved(Adapter::Rest, false).await;
        let by_mcp = approved(Adapter::Mcp, true).await;
        let interrupted = json!({"status": 503, "body": {"detail": "stopped"}});
        // Started after the cut-off: perhaps still running.
        assert!(
            store
                .interrupt_approved_calls(before, &interrupted)
                .await
                .expect("sweep")
                .is_empty()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            store
                .interrupt_approved_calls(Utc::now(), &interrupted)
                .await
                .expect("sweep"),
            vec![(a.id, orphan)]
        );
        assert_eq!(
            stored(&store, a.id, orphan).await.result,
            Some(interrupted.clone())
        );
        assert_eq!(
            stored(&store, a.id, finished).await.result,
            Some(json!({"status": 200}))
        );
        for untouched in [unstarted, by_mcp] {
            assert_eq!(stored(&store, a.id, untouched).await.result, None);
        }
        // Once is enough: the next sweep finds nothing.
        assert!(
            store
                .interrupt_approved_calls(Utc::now(), &interrupted)
                .await
                .expect("sweep")
                .is_empty()
        );
    })
    .await;
}
