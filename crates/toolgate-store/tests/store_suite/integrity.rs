//! The audit chain's integrity: tampering, deleted tails and the app role's limits.

use super::*;

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

pub(super) async fn seeded(store: &Store) -> (TenantId, Vec<toolgate_store::AuditRow>) {
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

/// Runs `sqls` around the store's own guards, as someone with the database would.
/// SQL naming `tenant`'s rows in `store`'s dialect: `tenant_id = '…'` (cast on Postgres).
fn tenant_is(store: &Store, tenant: TenantId) -> String {
    match store {
        Store::Sqlite(_) => format!("tenant_id = '{}'", tenant.0.hyphenated()),
        Store::Postgres(_) => format!("tenant_id = '{}'::uuid", tenant.0),
    }
}

/// What verifying `tenant`'s chain with `key` (and `exported` checkpoints) finds.
pub(super) async fn verified(
    store: &Store,
    tenant: TenantId,
    key: ed25519_dalek::VerifyingKey,
    exported: &[toolgate_store::checkpoint::Checkpoint],
) -> Option<ChainBreak> {
    store
        .verify_audit(tenant, &[key], exported)
        .await
        .expect("verify")
}

/// A tenant's few stored checkpoints, in one read.
pub(super) async fn all_checkpoints(
    store: &Store,
    tenant: TenantId,
) -> Vec<toolgate_store::checkpoint::Checkpoint> {
    let page = store
        .checkpoints(tenant, 0, 100)
        .await
        .expect("checkpoints");
    assert!(!page.more, "more than a test's few checkpoints");
    page.items
}

pub(super) async fn tamper(store: &Store, sqls: &[String]) {
    match store {
        Store::Sqlite(sqlite) => {
            for sql in [
                "drop trigger if exists audit_log_no_update",
                "drop trigger if exists audit_log_no_delete",
                "drop trigger if exists audit_checkpoint_no_update",
                "drop trigger if exists audit_checkpoint_no_delete",
                "drop trigger if exists audit_prune_no_delete",
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
        let exported = all_checkpoints(&store, tenant).await;
        assert_eq!(exported.len(), 1);
        assert_eq!(exported[0].seq, 5);
        assert_eq!(
            store
                .verify_audit(tenant, &[key], &[])
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
                .verify_audit(tenant, &[key], &[])
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
                .verify_audit(tenant, &[key], &[])
                .await
                .expect("verify"),
            None
        );
        assert_eq!(
            store
                .verify_audit(tenant, &[key], &exported)
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
                .verify_audit(tenant, &[key], std::slice::from_ref(&forged))
                .await
                .expect("verify"),
            Some(ChainBreak::Forged { seq: 3 })
        );
        // Unless that key is one the deployment's replaced (audit.previous_public_keys).
        assert_eq!(
            store
                .verify_audit(tenant, &[key, forger.public_key()], &[forged])
                .await
                .expect("verify"),
            None
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

/// A chain longer than one read (5,000 rows) is checked piece by piece: across the
/// pieces it verifies, checkpoints far apart are found, and an edit in the second piece
/// is named.
#[tokio::test]
async fn a_chain_longer_than_one_read_is_verified_piece_by_piece() {
    use toolgate_store::checkpoint::AuditSigner;
    on_both(|store| async move {
        let signer = AuditSigner::from_seed(&[42; 32]);
        let key = signer.public_key();
        let (a, p) = acme_alice(&store).await;
        for chunk in 0..12 {
            let records: Vec<AuditRecord> = (0..1000).map(|_| record(a.id, p.id, "echo")).collect();
            store.append_audit(&records).await.expect("append");
            if chunk % 5 == 0 {
                store.write_checkpoints(&signer).await.expect("sign");
            }
        }
        store
            .append_audit(&[record(a.id, p.id, "echo")])
            .await
            .expect("append");
        store.write_checkpoints(&signer).await.expect("sign");
        let seqs: Vec<i64> = all_checkpoints(&store, a.id)
            .await
            .iter()
            .map(|c| c.seq)
            .collect();
        assert_eq!(seqs, [1000, 6000, 11000, 12001]);
        assert_eq!(
            store.verify_audit(a.id, &[key], &[]).await.expect("verify"),
            None
        );

        let tenant = tenant_is(&store, a.id);
        let edited: uuid::Uuid = {
            let rows = store
                .list_audit(
                    a.id,
                    &AuditFilter {
                        after_seq: Some(7000),
                        ..AuditFilter::default()
                    },
                    1,
                )
                .await
                .expect("row");
            rows.items[0].call_id
        };
        tamper(
            &store,
            &[format!(
                "update audit_log set tool = 'other' where {tenant} and seq = 7001"
            )],
        )
        .await;
        assert_eq!(
            store.verify_audit(a.id, &[key], &[]).await.expect("verify"),
            Some(ChainBreak::Altered {
                seq: 7001,
                call_id: edited
            })
        );
    })
    .await;
}

/// More checkpoints than one read holds (1,000) are checked a part at a time: the chain
/// verifies, and a removal named only by the second part's checkpoints, or a forged one
/// there, is found. (They were read whole: a year of one a minute is half a million.)
#[tokio::test]
async fn checkpoints_beyond_one_read_are_checked_a_part_at_a_time() {
    use toolgate_store::checkpoint::AuditSigner;
    on_both(|store| async move {
        let signer = AuditSigner::from_seed(&[7; 32]);
        let key = signer.public_key();
        let (a, p) = acme_alice(&store).await;
        for _ in 0..1_050 {
            store
                .append_audit(&[record(a.id, p.id, "echo")])
                .await
                .expect("append");
            assert_eq!(store.write_checkpoints(&signer).await.expect("sign"), 1);
        }
        assert_eq!(
            store.verify_audit(a.id, &[key], &[]).await.expect("verify"),
            None
        );
        // The export reads them in parts too.
        let first = store.checkpoints(a.id, 0, 1_000).await.expect("export");
        assert_eq!((first.items.len(), first.more), (1_000, true));
        let rest = store.checkpoints(a.id, 1_000, 1_000).await.expect("export");
        let seqs: Vec<i64> = rest.items.iter().map(|c| c.seq).collect();
        assert_eq!((seqs, rest.more), ((1_001..=1_050).collect(), false));

        let tenant = tenant_is(&store, a.id);
        // The newest rows gone and the head moved back to match: only checkpoints
        // 1,045–1,050, in the second part, still name them.
        tamper(
            &store,
            &[
                format!("delete from audit_log where {tenant} and seq > 1044"),
                format!(
                    "update audit_chain_head set seq = 1044, row_hash = \
                     (select row_hash from audit_log where {tenant} and seq = 1044) where {tenant}"
                ),
            ],
        )
        .await;
        assert_eq!(
            store.verify_audit(a.id, &[key], &[]).await.expect("verify"),
            Some(ChainBreak::Truncated {
                recorded: 1045,
                found: 1044
            })
        );
        tamper(
            &store,
            &[format!(
                "update audit_checkpoint set row_hash = 'ff' || row_hash where {tenant} and seq = 1030"
            )],
        )
        .await;
        assert_eq!(
            store.verify_audit(a.id, &[key], &[]).await.expect("verify"),
            Some(ChainBreak::Forged { seq: 1030 })
        );
    })
    .await;
}
