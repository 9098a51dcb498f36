//! The notifier: changes announced when they commit, to every instance.

use super::*;

#[tokio::test]
async fn approval_changes_are_announced_when_they_commit_and_only_then() {
    use toolgate_core::Gate;

    on_both(|store| async move {
        let a = store.create_tenant("notify-a").await.expect("tenant");
        let b = store.create_tenant("notify-b").await.expect("tenant");
        let asker = PrincipalId::new();
        let mut changes = store.watch_changes().await.expect("watch");

        let request = approval_request(a.id, asker, Duration::from_secs(60));
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
            .gate_approval(&approval_request(b.id, asker, Duration::from_secs(60)))
            .await
            .expect("gate")
        else {
            panic!("a new call waits");
        };
        assert_eq!(announced(&mut changes).await, Change::Approvals(b.id));

        let decision = decision(true);
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
            .gate_approval(&approval_request(
                tenant.id,
                PrincipalId::new(),
                Duration::from_secs(60),
            ))
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
            status: toolgate_core::stores::RunStatus::Completed,
            output: Some("done".into()),
            best_effort: false,
            error: None,
            usage: Default::default(),
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
