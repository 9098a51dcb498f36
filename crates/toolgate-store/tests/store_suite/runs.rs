//! Agent runs and their journals.

use super::*;

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
        assert!(
            store
                .list_runs(b.id, Default::default(), None, 10)
                .await
                .expect("list")
                .items
                .is_empty()
        );

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
            status: toolgate_core::stores::RunStatus::Completed,
            output: Some("done".into()),
            best_effort: false,
            error: None,
            usage: toolgate_core::Usage {
                input_tokens: 3,
                output_tokens: 4,
                ..Default::default()
            },
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
            got.usage.map(|u| (u.input_tokens, u.output_tokens)),
            Some((3, 4))
        );
        assert!(got.finished_at.is_some());
        assert!(!store.request_run_cancel(a.id, run).await.expect("cancel"));
        assert_eq!(
            store
                .list_runs(a.id, Default::default(), None, 10)
                .await
                .expect("list")
                .items
                .len(),
            1
        );
    })
    .await;
}

/// A list of runs stops at about 4 MiB of what they hold (inputs of up to a request body
/// each, outputs, agent configurations), saying there is more. (Before: up to 500 runs
/// were read whole.)
#[tokio::test]
async fn a_list_of_large_runs_is_bounded_in_bytes() {
    on_both(|store| async move {
        let a = store.create_tenant("runs-big").await.expect("tenant");
        let big = "x".repeat(1 << 20);
        for _ in 0..6 {
            let mut new = new_run(a.id, toolgate_core::RunId::new(), chrono::Utc::now());
            new.input = big.clone();
            store.create_run(a.id, &new).await.expect("run");
        }
        let page = store
            .list_runs(a.id, Default::default(), None, 500)
            .await
            .expect("list");
        assert_eq!((page.items.len(), page.more), (4, true));
        let small = store
            .list_runs(a.id, Default::default(), None, 2)
            .await
            .expect("list");
        assert_eq!((small.items.len(), small.more), (2, true));
        let all = store
            .list_runs(a.id, Default::default(), None, 6)
            .await
            .expect("list");
        assert_eq!(all.items.len(), 4, "the bound holds below the limit too");
    })
    .await;
}

#[tokio::test]
async fn a_run_journal_of_large_steps_is_read_in_bounded_pages() {
    use toolgate_core::RunId;
    use toolgate_core::stores::RunStore as _;

    on_both(|store| async move {
        let a = store.create_tenant("steps-big").await.expect("tenant");
        let run = RunId::new();
        store
            .create_run(a.id, &new_run(a.id, run, chrono::Utc::now()))
            .await
            .expect("run");
        // Ten turns, each a turn_started step and a 1 MiB model message.
        let big = "x".repeat(1 << 20);
        for turn in 1..=10_i64 {
            let steps = [
                json!({"type": "turn_started", "turn": turn}),
                json!({"type": "model_message", "text": big}),
            ];
            store
                .append_run_events(a.id, run, 2 * turn, &steps, None, true)
                .await
                .expect("steps");
        }
        let first = store.run_steps(a.id, run, 0, 1_000).await.expect("steps");
        let seqs = |p: &toolgate_store::Page<toolgate_store::RunEventRecord>| {
            p.items.iter().map(|e| e.seq).collect::<Vec<_>>()
        };
        // run_started, then steps up to the one that reaches 4 MiB.
        assert_eq!(
            seqs(&first),
            [1, 2, 3, 4, 5, 6, 7, 8, 9],
            "{:?}",
            seqs(&first)
        );
        assert!(first.more);
        let next = store.run_steps(a.id, run, 9, 1_000).await.expect("steps");
        assert_eq!(seqs(&next)[0], 10);
        let few = store.run_steps(a.id, run, 0, 3).await.expect("steps");
        assert_eq!((seqs(&few), few.more), (vec![1, 2, 3], true));
        let last = store.run_steps(a.id, run, 20, 1_000).await.expect("steps");
        assert_eq!((seqs(&last), last.more), (vec![21], false));
        // A whole journal, for resuming the run, still comes whole.
        let all = store.run_events(a.id, run, 0).await.expect("events");
        assert_eq!(
            all.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (1..=21).collect::<Vec<_>>()
        );
        // The turn a step was in, without reading the messages.
        assert_eq!(store.run_turn_at(a.id, run, 1).await.expect("turn"), None);
        assert_eq!(
            store.run_turn_at(a.id, run, 2).await.expect("turn"),
            Some(1)
        );
        assert_eq!(
            store.run_turn_at(a.id, run, 15).await.expect("turn"),
            Some(7)
        );
        assert_eq!(
            store.run_turn_at(a.id, run, 99).await.expect("turn"),
            Some(10)
        );
        let b = store.create_tenant("steps-other").await.expect("tenant");
        assert!(
            store
                .run_steps(b.id, run, 0, 10)
                .await
                .expect("steps")
                .items
                .is_empty()
        );
        assert_eq!(store.run_turn_at(b.id, run, 99).await.expect("turn"), None);
    })
    .await;
}

/// Every item a list gives a caller paging `limit` at a time: each page goes on from the
/// last item of the one before, until a page says there is no more.
async fn paged<T, Fut>(
    limit: i64,
    mut read: impl FnMut(Option<toolgate_store::Before>) -> Fut,
) -> Vec<T>
where
    Fut: Future<Output = Result<toolgate_store::Page<T>, StoreError>>,
    for<'a> &'a T: Into<toolgate_store::Before>,
{
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = read(before).await.expect("page");
        assert!(
            page.items.len() as i64 <= limit,
            "{} items",
            page.items.len()
        );
        before = page.next();
        seen.extend(page.items);
        if before.is_none() {
            return seen;
        }
    }
}

/// The ids of `tenant`'s runs (in `status`) as a caller paging `limit` at a time sees them.
async fn runs_paged(
    store: &Store,
    tenant: TenantId,
    status: Option<toolgate_core::stores::RunStatus>,
    limit: i64,
) -> Vec<toolgate_core::RunId> {
    let runs = paged(limit, |before| {
        let filter = toolgate_store::RunFilter {
            principal: None,
            status,
        };
        store.list_runs(tenant, filter, before, limit)
    })
    .await;
    runs.into_iter().map(|r| r.id).collect()
}

/// Runs are listed a page at a time, newest first: every run once, in order, each page
/// going on from the last run of the one before, and a status filter holding across
/// pages. (Before: the newest 500 were all a caller could list, `more` a dead end.)
#[tokio::test]
async fn runs_are_listed_page_after_page() {
    use toolgate_core::RunId;
    use toolgate_core::stores::RunStatus;
    use toolgate_store::RunFinish;

    on_both(|store| async move {
        let a = store.create_tenant("runs-pages").await.expect("tenant");
        let b = store.create_tenant("runs-others").await.expect("tenant");
        let lease = chrono::Utc::now() + chrono::Duration::minutes(1);
        let mut made = Vec::new();
        for _ in 0..7 {
            let run = RunId::new();
            store
                .create_run(a.id, &new_run(a.id, run, lease))
                .await
                .expect("run");
            made.push(run);
        }
        store
            .create_run(b.id, &new_run(b.id, RunId::new(), lease))
            .await
            .expect("another tenant's run");
        let finished = [made[0], made[3], made[5]];
        for run in finished {
            let finish = RunFinish {
                status: RunStatus::Completed,
                output: Some("done".into()),
                best_effort: false,
                error: None,
                usage: toolgate_core::Usage::default(),
            };
            store
                .append_run_events(
                    a.id,
                    run,
                    2,
                    &[json!({"type": "run_finished", "status": "completed"})],
                    Some(&finish),
                    false,
                )
                .await
                .expect("finish");
        }
        made.reverse();
        assert_eq!(runs_paged(&store, a.id, None, 2).await, made);
        assert_eq!(runs_paged(&store, a.id, None, 7).await, made);
        assert_eq!(
            runs_paged(&store, a.id, Some(RunStatus::Completed), 2).await,
            made.iter()
                .filter(|r| finished.contains(r))
                .copied()
                .collect::<Vec<_>>()
        );
        assert_eq!(
            runs_paged(&store, a.id, Some(RunStatus::Running), 3).await,
            made.iter()
                .filter(|r| !finished.contains(r))
                .copied()
                .collect::<Vec<_>>()
        );
        assert!(
            runs_paged(&store, a.id, Some(RunStatus::Failed), 2)
                .await
                .is_empty()
        );
    })
    .await;
}

/// Runs and approvals made at one instant are told apart by id, across pages too: a page
/// ending among them goes on with the rest, none twice and none lost.
#[tokio::test]
async fn runs_and_approvals_of_one_instant_page_by_id() {
    use toolgate_core::RunId;

    on_both(|store| async move {
        let (a, p) = acme_alice(&store).await;
        let lease = chrono::Utc::now() + chrono::Duration::minutes(1);
        let mut runs = Vec::new();
        let mut approvals = Vec::new();
        for _ in 0..5 {
            let run = RunId::new();
            store
                .create_run(a.id, &new_run(a.id, run, lease))
                .await
                .expect("run");
            runs.push(run);
            let request = approval_request(a.id, p.id, Duration::from_secs(60));
            approvals.push(pending(&store, &request).await);
        }
        for one_instant in [
            "update run set created_at = (select min(created_at) from run)",
            "update approval set created_at = (select min(created_at) from approval)",
        ] {
            run_as(&store, true, one_instant.into())
                .await
                .expect(one_instant);
        }
        runs.sort_by_key(|r| std::cmp::Reverse(r.0));
        approvals.sort_by_key(|a| std::cmp::Reverse(a.0));
        for limit in [1, 2, 3] {
            assert_eq!(runs_paged(&store, a.id, None, limit).await, runs, "{limit}");
            for status in [None, Some("pending")] {
                let seen: Vec<_> = paged(limit, |before| {
                    store.list_approvals(a.id, status, before, limit)
                })
                .await
                .into_iter()
                .map(|r| r.id)
                .collect();
                assert_eq!(seen, approvals, "{limit} {status:?}");
            }
        }
    })
    .await;
}

/// A list of the runs one principal started holds those and no other, page after page.
#[tokio::test]
async fn runs_are_listed_by_who_started_them() {
    use toolgate_core::RunId;

    on_both(|store| async move {
        let a = store.create_tenant("runs-mine").await.expect("tenant");
        let lease = chrono::Utc::now() + chrono::Duration::minutes(1);
        let (me, colleague) = (PrincipalId::new(), PrincipalId::new());
        let mut mine = Vec::new();
        for i in 0..6 {
            let mut new = new_run(a.id, RunId::new(), lease);
            new.principal = if i % 2 == 0 { me } else { colleague };
            store.create_run(a.id, &new).await.expect("run");
            if new.principal == me {
                mine.push(new.id);
            }
        }
        mine.reverse();
        let listed = paged(2, |before| {
            let filter = toolgate_store::RunFilter {
                principal: Some(me),
                status: None,
            };
            store.list_runs(a.id, filter, before, 2)
        })
        .await;
        assert!(listed.iter().all(|r| r.principal == me));
        assert_eq!(listed.iter().map(|r| r.id).collect::<Vec<_>>(), mine);
    })
    .await;
}
