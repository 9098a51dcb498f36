//! Tenant upstreams and tool-definition pins.

use super::*;
use toolgate_store::{PinsAfter, PinsOnly};

#[tokio::test]
async fn tenant_upstreams_are_per_tenant_with_unique_names_and_revisions() {
    on_both(|store| async move {
        let a = store.create_tenant("upstreams-a").await.expect("tenant");
        let b = store.create_tenant("upstreams-b").await.expect("tenant");
        let by = store
            .create_principal(a.id, &member("ann"))
            .await
            .expect("principal")
            .id;
        let config = json!({"url": "https://mcp.example.com/mcp", "allow": [], "deny": []});
        let sealed = [7u8, 0, 255, 1];
        let new = UpstreamWrite {
            name: "docs",
            config: &config,
            credentials: Some(&sealed),
        };
        let created = store
            .create_upstream(a.id, &new, by, 16)
            .await
            .expect("create");
        assert_eq!(
            (created.revision, created.credentials.as_deref()),
            (1, Some(&sealed[..]))
        );
        assert_eq!(created.created_by, Some(by));
        let dup = store.create_upstream(a.id, &new, by, 16).await;
        assert!(matches!(dup, Err(StoreError::Conflict(_))), "{dup:?}");
        // Another tenant neither sees nor changes it, and may use the same name.
        assert!(
            store
                .get_upstream(b.id, "docs")
                .await
                .expect("get")
                .is_none()
        );
        assert!(store.list_upstreams(b.id).await.expect("list").is_empty());
        assert!(
            store
                .update_upstream(b.id, "docs", &new)
                .await
                .expect("update")
                .is_none()
        );
        assert!(!store.delete_upstream(b.id, "docs").await.expect("delete"));
        store
            .create_upstream(b.id, &new, by, 16)
            .await
            .expect("same name, other tenant");

        let changed = json!({"url": "https://mcp.example.com/v2", "allow": ["search"], "deny": []});
        let replace = UpstreamWrite {
            name: "docs",
            config: &changed,
            credentials: None,
        };
        let updated = store
            .update_upstream(a.id, "docs", &replace)
            .await
            .expect("update")
            .expect("exists");
        assert_eq!(
            (
                updated.revision,
                &updated.config,
                updated.credentials.as_ref()
            ),
            (2, &changed, None)
        );
        assert_eq!(updated.id, created.id);

        // Across tenants: every id and revision, and any one by id.
        let all = store.upstream_revisions().await.expect("revisions");
        assert_eq!(all.len(), 2);
        assert!(all.contains(&(created.id, 2)), "{all:?}");
        let read = store
            .upstream_by_id(created.id)
            .await
            .expect("by id")
            .expect("there");
        assert_eq!((read.tenant, read.revision), (a.id, 2));
        assert!(store.delete_upstream(a.id, "docs").await.expect("delete"));
        assert!(store.list_upstreams(a.id).await.expect("list").is_empty());
        assert_eq!(store.upstream_revisions().await.expect("all").len(), 1);
        assert_eq!(store.upstream_by_id(created.id).await.expect("by id"), None);
    })
    .await;
}

/// A tenant's upstreams are capped, and creations racing for the last places cannot
/// exceed the cap: counted and inserted under one lock.
#[tokio::test]
async fn concurrent_upstream_creations_never_exceed_the_tenant_cap() {
    on_both(|store| async move {
        let tenant = store.create_tenant("upstreams-cap").await.expect("tenant");
        let by = store
            .create_principal(tenant.id, &member("ann"))
            .await
            .expect("principal")
            .id;
        let mut attempts = tokio::task::JoinSet::new();
        for i in 0..8 {
            let store = store.clone();
            attempts.spawn(async move {
                let config = json!({"url": "https://mcp.example.com/mcp"});
                let name = format!("u{i}");
                let new = UpstreamWrite {
                    name: &name,
                    config: &config,
                    credentials: None,
                };
                store.create_upstream(tenant.id, &new, by, 3).await
            });
        }
        let results = attempts.join_all().await;
        let created = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(created, 3, "{results:?}");
        assert!(
            results
                .iter()
                .filter_map(|r| r.as_ref().err())
                .all(|e| matches!(e, StoreError::Conflict(m) if m.contains("the most allowed"))),
            "{results:?}"
        );
        assert_eq!(
            store.list_upstreams(tenant.id).await.expect("list").len(),
            3
        );
    })
    .await;
}

/// Re-sealing under a new key: every principal's own credential is read across tenants,
/// and a sealed value is replaced only while it is still the one read, leaving the
/// upstream's revision alone.
#[tokio::test]
async fn sealed_credentials_are_replaced_only_while_unchanged() {
    on_both(|store| async move {
        let mut made = Vec::new();
        for name in ["reseal-a", "reseal-b"] {
            let tenant = store.create_tenant(name).await.expect("tenant");
            let ann = store
                .create_principal(tenant.id, &member("ann"))
                .await
                .expect("principal")
                .id;
            let config = json!({"url": "https://mcp.example.com/mcp"});
            let new = UpstreamWrite {
                name: "docs",
                config: &config,
                credentials: Some(b"old"),
            };
            let upstream = store
                .create_upstream(tenant.id, &new, ann, 16)
                .await
                .expect("create")
                .id;
            store
                .put_personal_credential(tenant.id, upstream, ann, b"ann-old")
                .await
                .expect("put");
            made.push((tenant.id, upstream, ann));
        }
        let mut all = store.personal_credentials().await.expect("all");
        all.sort();
        let mut want: Vec<_> = made
            .iter()
            .map(|&(t, u, p)| (t, u, p, b"ann-old".to_vec()))
            .collect();
        want.sort();
        assert_eq!(all, want);

        let (a, upstream, ann) = made[0];
        let (b, _, _) = made[1];
        let replace = |tenant, principal, old: &'static [u8], new: &'static [u8]| {
            let store = store.clone();
            async move {
                store
                    .replace_sealed(tenant, upstream, principal, old, new)
                    .await
                    .expect("replace")
            }
        };
        assert!(
            !replace(a, None, b"stale", b"new").await,
            "not the value read"
        );
        assert!(
            !replace(b, None, b"old", b"new").await,
            "another tenant's upstream"
        );
        assert!(replace(a, None, b"old", b"new").await);
        assert!(
            !replace(a, None, b"old", b"newer").await,
            "already replaced"
        );
        let read = store
            .upstream_by_id(upstream)
            .await
            .expect("read")
            .expect("there");
        assert_eq!(
            (read.credentials.as_deref(), read.revision),
            (Some(&b"new"[..]), 1)
        );
        assert!(!replace(a, Some(ann), b"stale", b"ann-new").await);
        assert!(replace(a, Some(ann), b"ann-old", b"ann-new").await);
        assert_eq!(
            store
                .personal_credential(a, upstream, ann)
                .await
                .expect("read")
                .as_deref(),
            Some(&b"ann-new"[..])
        );
    })
    .await;
}

#[tokio::test]
async fn postgres_row_level_security_hides_other_tenants_upstreams() {
    on_postgres(|store, _url| async move {
        let config = json!({"url": "https://mcp.example.com/mcp"});
        let mut ids = Vec::new();
        for name in ["rls-a", "rls-b"] {
            let tenant = store.create_tenant(name).await.expect("tenant");
            let by = store
                .create_principal(tenant.id, &member("ann"))
                .await
                .expect("principal")
                .id;
            let new = UpstreamWrite {
                name: "docs",
                config: &config,
                credentials: Some(b"sealed"),
            };
            store
                .create_upstream(tenant.id, &new, by, 16)
                .await
                .expect("create");
            ids.push(tenant.id);
        }
        let Store::Postgres(pg) = &store else {
            unreachable!("postgres")
        };
        let mut conn = pg.app_pool().acquire().await.expect("conn");
        let visible: i64 = sqlx::query_scalar("select count(*) from tenant_upstream")
            .fetch_one(&mut *conn)
            .await
            .expect("count");
        assert_eq!(visible, 0, "no tenant named: nothing");
        let mut tx = conn.begin().await.expect("tx");
        sqlx::query("select set_config('toolgate.tenant_id', $1, true)")
            .bind(ids[0].to_string())
            .execute(&mut *tx)
            .await
            .expect("set");
        let tenants: Vec<uuid::Uuid> = sqlx::query_scalar("select tenant_id from tenant_upstream")
            .fetch_all(&mut *tx)
            .await
            .expect("select");
        assert_eq!(tenants, [ids[0].0]);
        let moved = sqlx::query("update tenant_upstream set tenant_id = $1")
            .bind(ids[1].0)
            .execute(&mut *tx)
            .await;
        assert!(
            moved.is_err(),
            "RLS with check: a row cannot be handed to another tenant"
        );
    })
    .await;
}

/// Pinned tool definitions: saved whole and read back per owner; approving moves the
/// waiting definition to the pin only while it is the one named by its hash.
#[tokio::test]
async fn tool_pins_round_trip_and_approve_only_the_waiting_definition() {
    on_both(|store| async move {
        let owner = uuid::Uuid::now_v7();
        let pin = pin_record(owner);
        let read = saved_pin(&store, &pin).await;
        assert_eq!(read, pin);
        assert_eq!(all_pins(&store, owner).await, std::slice::from_ref(&pin));
        assert!(all_pins(&store, uuid::Uuid::nil()).await.is_empty());
        let by = PrincipalId(uuid::Uuid::now_v7());
        let mut changes = store.watch_changes().await.expect("watch");
        assert_eq!(
            store
                .approve_tool_pin(owner, "fx", "add", "h1", by)
                .await
                .expect("approve"),
            None,
            "h1 is pinned, not waiting"
        );
        let approved = store
            .approve_tool_pin(owner, "fx", "add", "h2", by)
            .await
            .expect("approve")
            .expect("approved");
        // Announced (and the approval refused just before was not).
        assert_eq!(announced(&mut changes).await, Change::PinApproved);
        assert_eq!(approved.pinned_hash.as_deref(), Some("h2"));
        assert_eq!(approved.pinned, pin.pending);
        assert_eq!((approved.pending_hash, approved.pending), (None, None));
        assert!(approved.findings.is_empty());
        assert_eq!(approved.approved_by, Some(by));
        assert_eq!(
            store.last_pin_approval().await.expect("last"),
            approved.approved_at,
            "what other instances watch for"
        );
        store.delete_tool_pins(owner, "fx").await.expect("delete");
        assert!(all_pins(&store, owner).await.is_empty());
    })
    .await;
}

/// A listing's pins are written in one call (in several transactions past a few hundred)
/// and their hashes read back in one, for that owner's upstream only.
#[tokio::test]
async fn a_listings_pins_are_saved_together_and_their_hashes_read_in_one() {
    on_both(|store| async move {
        let owner = uuid::Uuid::now_v7();
        let pins: Vec<_> = (0..1201)
            .map(|i| {
                let mut pin = pin_record(owner);
                pin.tool = format!("tool{i}");
                pin.pinned_hash = Some(format!("p{i}"));
                pin.pending_hash = (i % 2 == 0).then(|| format!("w{i}"));
                pin
            })
            .collect();
        let mut elsewhere = pin_record(owner);
        elsewhere.upstream = "other".into();
        store
            .save_tool_pins(std::slice::from_ref(&elsewhere))
            .await
            .expect("save elsewhere");
        store.save_tool_pins(&pins).await.expect("save");
        let mut hashes = store.pin_hashes(owner, "fx").await.expect("hashes");
        hashes.sort_by_key(|h| h.tool[4..].parse::<usize>().expect("number"));
        let expected: Vec<_> = pins
            .iter()
            .map(|p| toolgate_core::stores::PinHashes {
                tool: p.tool.clone(),
                pinned_hash: p.pinned_hash.clone(),
                pending_hash: p.pending_hash.clone(),
            })
            .collect();
        assert_eq!(hashes, expected);
        assert!(
            store
                .pin_hashes(uuid::Uuid::nil(), "fx")
                .await
                .expect("hashes")
                .is_empty(),
            "another owner's upstream of the same name"
        );
        // Saved again, changed: replaced, not added.
        let mut changed = pins[7].clone();
        changed.pinned_hash = Some("again".into());
        store
            .save_tool_pins(std::slice::from_ref(&changed))
            .await
            .expect("save again");
        let read = store
            .tool_pin(owner, "fx", "tool7")
            .await
            .expect("read")
            .expect("there");
        assert_eq!(read, changed);
        assert_eq!(
            store.pin_hashes(owner, "fx").await.expect("hashes").len(),
            1201
        );
        // Read a page at a time: the waiting ones first, each part by upstream and tool.
        let mut expected: Vec<(bool, String, String)> = pins
            .iter()
            .chain(std::iter::once(&elsewhere))
            .map(|p| (p.pending_hash.is_none(), p.upstream.clone(), p.tool.clone()))
            .collect();
        expected.sort();
        let (mut paged, mut after) = (Vec::new(), None);
        loop {
            let page = store
                .tool_pins_page(owner, PinsOnly::default(), after.as_ref(), 100)
                .await
                .expect("page");
            let Some(last) = page.last() else { break };
            after = Some(PinsAfter::from(last));
            paged.extend(
                page.iter()
                    .map(|p| (p.pending_hash.is_none(), p.upstream.clone(), p.tool.clone())),
            );
        }
        assert_eq!(paged, expected);
        let only = |upstream, waiting| PinsOnly { upstream, waiting };
        for (filter, count) in [
            (only(Some("fx"), None), 1201),
            (only(Some("other"), None), 1),
            (only(None, Some(true)), 602),
            (only(Some("fx"), Some(false)), 600),
            (only(Some("nowhere"), None), 0),
        ] {
            let read = store
                .tool_pins_page(owner, filter, None, 5000)
                .await
                .expect("filtered");
            assert_eq!(read.len(), count, "{filter:?}");
        }
        store.delete_tool_pins(owner, "fx").await.expect("delete");
        store
            .delete_tool_pins(owner, "other")
            .await
            .expect("delete");
        assert!(all_pins(&store, owner).await.is_empty());
    })
    .await;
}

/// Every pin of `owner`, in one page.
async fn all_pins(store: &Store, owner: uuid::Uuid) -> Vec<toolgate_store::PinRecord> {
    store
        .tool_pins_page(owner, PinsOnly::default(), None, usize::MAX)
        .await
        .expect("list")
}
