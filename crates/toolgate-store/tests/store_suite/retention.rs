//! Pruning the audit log: rows go only up to a signed checkpoint, which becomes the
//! tenant's base; the kept chain verifies from it, and nothing above it can be deleted.

use toolgate_store::checkpoint::AuditSigner;
use toolgate_store::{AuditBase, Pruned};

use super::integrity::{all_checkpoints, seeded, tamper, verified};
use super::*;

/// The tenant id as each backend's SQL text compares it, and the cast it needs.
fn sql_tenant(store: &Store, tenant: TenantId) -> (String, &'static str) {
    match store {
        Store::Sqlite(_) => (tenant.0.hyphenated().to_string(), ""),
        Store::Postgres(_) => (tenant.0.to_string(), "::uuid"),
    }
}

fn seqs(rows: &[toolgate_store::AuditRow]) -> Vec<i64> {
    rows.iter().map(|r| r.seq).collect()
}

#[tokio::test]
async fn pruning_removes_rows_up_to_a_signed_checkpoint_and_the_rest_still_verifies() {
    on_both(|store| async move {
        let signer = AuditSigner::from_seed(&[42; 32]);
        let key = signer.public_key();
        let (tenant, rows) = seeded(&store).await;
        let principal = rows[0].principal;
        assert_eq!(store.write_checkpoints(&signer).await.expect("sign"), 1);
        tokio::time::sleep(Duration::from_millis(5)).await;
        let cutoff = chrono::Utc::now();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let newer: Vec<AuditRecord> = (0..3).map(|_| record(tenant, principal, "echo")).collect();
        store.append_audit(&newer).await.expect("append");
        store.write_checkpoints(&signer).await.expect("sign");
        let exported = all_checkpoints(&store, tenant).await;
        assert_eq!(exported.iter().map(|c| c.seq).collect::<Vec<_>>(), [5, 8]);
        let other = store.create_tenant("globex").await.expect("tenant");
        let bob = store.create_principal(other.id, &member("bob")).await.expect("principal");
        store.append_audit(&[record(other.id, bob.id, "echo")]).await.expect("append");
        store.write_checkpoints(&signer).await.expect("sign");

        // Nothing checked with no key, and no other tenant touched: acme's rows up to
        // its checkpoint signed before the cutoff go.
        let pruned = store.prune_audit(tenant, cutoff, &[key]).await.expect("prune");
        assert_eq!(
            pruned,
            Pruned { base: Some(5), moved: true, deleted: 5, checkpoints: 0, refused: None }
        );
        let base = store.audit_base(tenant).await.expect("base").expect("a base");
        assert_eq!((base.seq, base.row_hash.as_str()), (5, rows[4].row_hash.as_str()));
        assert_eq!(seqs(&store.audit_chain(tenant).await.expect("chain")), [6, 7, 8]);
        assert_eq!(verified(&store, tenant, key, &[]).await, None);
        // The export taken before, checkpoint 5 included, still agrees.
        assert_eq!(store.verify_audit(tenant, &[key], &exported).await.expect("verify"), None);
        assert_eq!(store.audit_chain(other.id).await.expect("chain").len(), 1);
        assert_eq!(store.audit_base(other.id).await.expect("base"), None);
        assert_eq!(
            store.prune_audit(other.id, cutoff, &[key]).await.expect("prune"),
            Pruned::default(),
            "globex's only checkpoint is newer than the cutoff"
        );
        // Again: nothing more to do.
        assert_eq!(
            store.prune_audit(tenant, cutoff, &[key]).await.expect("prune"),
            Pruned { base: Some(5), ..Pruned::default() }
        );
        // The chain goes on from where it was.
        store.append_audit(&[record(tenant, principal, "echo")]).await.expect("append");
        assert_eq!(seqs(&store.audit_chain(tenant).await.expect("chain")), [6, 7, 8, 9]);
        assert_eq!(verified(&store, tenant, key, &[]).await, None);
        // The base is a checkpoint like any other: signed by another key, it is forged.
        let stranger = AuditSigner::from_seed(&[7; 32]).public_key();
        assert_eq!(
            store.verify_audit(tenant, &[stranger], &[]).await.expect("verify"),
            Some(ChainBreak::Forged { seq: 5 })
        );

        // Above the base, the log is append-only as before, for the gateway and the owner.
        let (t, cast) = sql_tenant(&store, tenant);
        for owner in [false, true] {
            let refused = run_as(
                &store,
                owner,
                format!("delete from audit_log where tenant_id = '{t}'{cast} and seq = 7"),
            )
            .await;
            assert!(refused.is_err(), "deleting a kept row: {refused:?}");
        }
        // The base only moves forward, only to a checkpoint, and only as the owner.
        let Store::Sqlite(_) = &store else {
            let Store::Postgres(pg) = &store else { unreachable!() };
            assert!(
                pg.move_audit_base(tenant, 8).await.is_ok(),
                "the owner moves it to checkpoint 8"
            );
            let by_gateway = run_as(
                &store,
                false,
                format!("insert into audit_prune (tenant_id, seq, pruned_at) values ('{t}'{cast}, 9, now())"),
            )
            .await;
            assert!(by_gateway.is_err(), "the app role cannot move the base");
            // Back, or to where it is: not moved. To a row no checkpoint signed: refused.
            for seq in [3, 8] {
                assert!(!pg.move_audit_base(tenant, seq).await.expect("move"), "base to {seq}");
            }
            assert!(pg.move_audit_base(tenant, 9).await.is_err(), "base to 9");
            refused_backwards(&store, &t, cast).await;
            removed_base_is_a_gap(&store, tenant, &t, cast).await;
            return;
        };
        let Store::Sqlite(s) = &store else { unreachable!() };
        assert!(s.move_audit_base(tenant, 8).await.expect("move"), "to checkpoint 8");
        for seq in [3, 8] {
            assert!(!s.move_audit_base(tenant, seq).await.expect("move"), "base to {seq}");
        }
        assert!(s.move_audit_base(tenant, 9).await.is_err(), "base to 9");
        refused_backwards(&store, &t, cast).await;
        removed_base_is_a_gap(&store, tenant, &t, cast).await;
    })
    .await;
}

/// The checkpoints below a new base sign rows that are gone: they go with them, but for
/// the earlier bases `audit_prune` names; the rest stay append-only. Two prunes at once
/// both succeed, one of them moving the base.
#[tokio::test]
async fn checkpoints_below_the_base_go_with_its_rows_and_two_prunes_at_once_agree() {
    on_both(|store| async move {
        let signer = AuditSigner::from_seed(&[42; 32]);
        let key = signer.public_key();
        let (tenant, rows) = seeded(&store).await;
        let principal = rows[0].principal;
        let one_more = || async {
            store
                .append_audit(&[record(tenant, principal, "echo")])
                .await
                .expect("append");
            store.write_checkpoints(&signer).await.expect("sign");
        };
        store.write_checkpoints(&signer).await.expect("sign");
        one_more().await;
        one_more().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        let cutoff = chrono::Utc::now();
        tokio::time::sleep(Duration::from_millis(5)).await;
        one_more().await;
        let before = all_checkpoints(&store, tenant).await;
        assert_eq!(
            before.iter().map(|c| c.seq).collect::<Vec<_>>(),
            [5, 6, 7, 8]
        );

        let keys = [key];
        let (one, two) = tokio::join!(
            store.prune_audit(tenant, cutoff, &keys),
            store.prune_audit(tenant, cutoff, &keys),
        );
        let (one, two) = (one.expect("a prune"), two.expect("the other prune"));
        assert_eq!(
            u8::from(one.moved) + u8::from(two.moved),
            1,
            "{one:?} {two:?}"
        );
        assert_eq!((one.base, two.base), (Some(7), Some(7)));
        assert_eq!(
            (one.deleted + two.deleted, one.checkpoints + two.checkpoints),
            (7, 2)
        );
        let kept = |cps: Vec<toolgate_store::checkpoint::Checkpoint>| {
            cps.iter().map(|c| c.seq).collect::<Vec<_>>()
        };
        assert_eq!(kept(all_checkpoints(&store, tenant).await), [7, 8]);
        assert_eq!(verified(&store, tenant, key, &[]).await, None);
        // The export taken before still verifies: below the base, its signatures.
        assert_eq!(verified(&store, tenant, key, &before).await, None);

        // The base's checkpoint and those above it stay, for the owner as for the gateway.
        let (t, cast) = sql_tenant(&store, tenant);
        for owner in [false, true] {
            for seq in [7, 8] {
                let refused = run_as(
                    &store,
                    owner,
                    format!(
                        "delete from audit_checkpoint where tenant_id = '{t}'{cast} and seq = {seq}"
                    ),
                )
                .await;
                assert!(refused.is_err(), "deleting checkpoint {seq}: {refused:?}");
            }
        }

        // The next prune takes checkpoint 8 with its rows, and keeps 7: a base.
        one_more().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        let cutoff = chrono::Utc::now();
        tokio::time::sleep(Duration::from_millis(5)).await;
        one_more().await;
        assert_eq!(
            store
                .prune_audit(tenant, cutoff, &[key])
                .await
                .expect("prune"),
            Pruned {
                base: Some(9),
                moved: true,
                deleted: 2,
                checkpoints: 1,
                refused: None
            }
        );
        assert_eq!(kept(all_checkpoints(&store, tenant).await), [7, 9, 10]);
        assert_eq!(verified(&store, tenant, key, &[]).await, None);
    })
    .await;
}

/// The database itself refuses to move a base back, whatever the store asks.
async fn refused_backwards(store: &Store, t: &str, cast: &str) {
    let back = run_as(
        store,
        true,
        format!("insert into audit_prune (tenant_id, seq, pruned_at) values ('{t}'{cast}, 5, '2026-01-01T00:00:00Z')"),
    )
    .await;
    assert!(back.is_err(), "the base moved back: {back:?}");
}

/// With the base moved to 8 and its rows not yet deleted (a prune stopped midway), the
/// chain verifies from 8 and the next prune deletes them; removing the record of the base
/// then shows as a gap from row 1.
async fn removed_base_is_a_gap(store: &Store, tenant: TenantId, t: &str, cast: &str) {
    assert_eq!(seqs(&store.audit_chain(tenant).await.expect("chain")), [9]);
    assert_eq!(store.verify_chain(tenant).await.expect("verify"), None);
    assert_eq!(
        store
            .prune_audit(tenant, chrono::Utc::now(), &[])
            .await
            .expect("prune"),
        Pruned {
            base: Some(8),
            deleted: 3,
            ..Pruned::default()
        }
    );
    let base: Option<AuditBase> = store.audit_base(tenant).await.expect("base");
    assert_eq!(base.map(|b| b.seq), Some(8));
    tamper(
        store,
        &[format!(
            "delete from audit_prune where tenant_id = '{t}'{cast}"
        )],
    )
    .await;
    assert_eq!(
        store.verify_chain(tenant).await.expect("verify"),
        Some(ChainBreak::Gap {
            expected: 1,
            found: 9
        })
    );
}

#[tokio::test]
async fn a_chain_that_does_not_verify_is_not_pruned() {
    on_both(|store| async move {
        let signer = AuditSigner::from_seed(&[42; 32]);
        let (tenant, rows) = seeded(&store).await;
        store.write_checkpoints(&signer).await.expect("sign");
        let (t, cast) = sql_tenant(&store, tenant);
        tamper(
            &store,
            &[format!(
                "update audit_log set tool = 'something_else' where tenant_id = '{t}'{cast} and seq = 2"
            )],
        )
        .await;
        let altered = ChainBreak::Altered { seq: 2, call_id: rows[1].call_id };
        let later = chrono::Utc::now() + chrono::Duration::seconds(1);
        assert_eq!(
            store.prune_audit(tenant, later, &[signer.public_key()]).await.expect("prune"),
            Pruned { refused: Some(altered.clone()), ..Pruned::default() }
        );
        assert_eq!(store.audit_chain(tenant).await.expect("chain").len(), 5);
        assert_eq!(store.verify_chain(tenant).await.expect("verify"), Some(altered));
    })
    .await;
}

/// How many failed-authentication records the store holds.
async fn security_events(store: &Store) -> i64 {
    let count = "select count(*) from security_event";
    match store {
        Store::Sqlite(s) => sqlx::query_scalar(count).fetch_one(s.pool()).await,
        Store::Postgres(pg) => sqlx::query_scalar(count).fetch_one(pg.owner_pool()).await,
    }
    .expect("count")
}

#[tokio::test]
async fn finished_runs_and_old_security_events_go_with_the_rest_staying() {
    use toolgate_core::RunId;
    use toolgate_core::stores::RunStatus;
    use toolgate_store::{PrunedHistory, RunFinish};
    on_both(|store| async move {
        let a = store.create_tenant("acme").await.expect("tenant");
        let lease = chrono::Utc::now() + chrono::Duration::seconds(30);
        let (finished, going) = (RunId::new(), RunId::new());
        for run in [finished, going] {
            store
                .create_run(a.id, &new_run(a.id, run, lease))
                .await
                .expect("run");
        }
        let finish = RunFinish {
            status: RunStatus::Completed,
            output: Some("done".into()),
            best_effort: false,
            error: None,
            usage: toolgate_core::Usage::default(),
        };
        let last = json!({"type": "run_finished", "status": "completed"});
        store
            .append_run_events(
                a.id,
                finished,
                2,
                std::slice::from_ref(&last),
                Some(&finish),
                true,
            )
            .await
            .expect("finish");
        for route in ["/v1/tools", "/mcp"] {
            store
                .record_security_event(Some("127.0.0.1"), route, "unknown key")
                .await
                .expect("event");
        }
        let before_them = chrono::Utc::now() - chrono::Duration::seconds(60);
        assert_eq!(
            store.prune_history(before_them).await.expect("prune"),
            PrunedHistory::default(),
            "nothing is older than a minute ago"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(
            store
                .prune_history(chrono::Utc::now())
                .await
                .expect("prune"),
            PrunedHistory {
                runs: 1,
                security_events: 2,
                approvals: 0,
            }
        );
        assert!(store.get_run(a.id, finished).await.expect("get").is_none());
        let kept = store
            .get_run(a.id, going)
            .await
            .expect("get")
            .expect("still there");
        assert_eq!(kept.status, "running");
        assert_eq!(security_events(&store).await, 0);
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

/// Approvals settled before the cutoff go with the rest of the past, unless a kept audit
/// row names them (the call they let run, or held): the rows and the decision go
/// together. Pending approvals and recent ones stay.
#[tokio::test]
async fn settled_approvals_go_unless_a_kept_audit_row_names_them() {
    use toolgate_store::PrunedHistory;
    on_both(|store| async move {
        let (a, alice) = acme_alice(&store).await;
        let minute = Duration::from_secs(60);
        let request = || approval_request(a.id, alice.id, minute);
        let denied = pending(&store, &request()).await;
        let named = pending(&store, &request()).await;
        let waiting = pending(&store, &request()).await;
        for (approval, approve) in [(denied, false), (named, true)] {
            store
                .decide_approval(a.id, approval, &decision(approve))
                .await
                .expect("decide");
        }
        let mut ran = record(a.id, alice.id, "execute_command");
        ran.approval = Some(named);
        store.append_audit(&[ran]).await.expect("append");
        // Every time an approval records must be before the cutoff: the approval's own
        // expiry here is a minute away.
        let after_all = chrono::Utc::now() + chrono::Duration::seconds(120);
        assert_eq!(
            store
                .prune_history(chrono::Utc::now() - chrono::Duration::seconds(60))
                .await
                .expect("prune")
                .approvals,
            0,
            "nothing settled before a minute ago"
        );
        assert_eq!(
            store.prune_history(after_all).await.expect("prune"),
            PrunedHistory {
                approvals: 1,
                ..PrunedHistory::default()
            }
        );
        let there = |approval| {
            let store = store.clone();
            async move {
                store
                    .get_approval(a.id, approval)
                    .await
                    .expect("get")
                    .is_some()
            }
        };
        assert!(
            !there(denied).await,
            "a settled approval nothing names stayed"
        );
        assert!(
            there(named).await,
            "an approval a kept audit row names went"
        );
        assert!(there(waiting).await, "a pending approval went");
    })
    .await;
}

/// A prune that starts while another is moving the same base waits for it and finds the
/// base moved. Before, on Postgres, its insert saw no newer base in its snapshot, then met
/// the first's (committed meanwhile) in the forward-only trigger and failed; a trigger
/// that holds each insert 300 ms makes that interleaving certain.
#[tokio::test]
async fn a_prune_that_starts_while_another_moves_the_base_finds_it_moved() {
    on_both(|store| async move {
        let Store::Postgres(pg) = &store else { return };
        let signer = AuditSigner::from_seed(&[42; 32]);
        let (tenant, _) = seeded(&store).await;
        store.write_checkpoints(&signer).await.expect("sign");
        // Fires before `audit_prune_only_forward` (triggers go by name).
        for sql in [
            "create function slow_insert() returns trigger language plpgsql as \
             $$ begin perform pg_sleep(0.3); return new; end $$",
            "create trigger a_slow before insert on audit_prune \
             for each row execute function slow_insert()",
        ] {
            run_as(&store, true, sql.into())
                .await
                .expect("the slow trigger");
        }
        let first = pg.move_audit_base(tenant, 5);
        let second = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            pg.move_audit_base(tenant, 5).await
        };
        let (first, second) = tokio::join!(first, second);
        assert!(first.expect("the first prune's move"), "the first moves it");
        assert!(
            !second.expect("the second prune's move"),
            "and the second finds it moved"
        );
    })
    .await;
}
