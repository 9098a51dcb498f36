//! Tenants, principals, API keys (and their revocation) and agents.

use super::*;

#[tokio::test]
async fn tenants_principals_and_keys() {
    on_both(|store| async move {
        let a = store.create_tenant("acme").await.expect("tenant");
        let b = store.create_tenant("globex").await.expect("tenant");
        assert!(matches!(
            store.create_tenant("acme").await,
            Err(StoreError::Conflict(_))
        ));
        let alice = store
            .create_principal(a.id, &member("alice"))
            .await
            .expect("principal");
        assert!(matches!(
            store.create_principal(a.id, &member("alice")).await,
            Err(StoreError::Conflict(_))
        ));
        store
            .create_principal(b.id, &member("alice"))
            .await
            .expect("same name, other tenant");

        let (key, secret) = store
            .create_api_key(
                a.id,
                &NewApiKey {
                    principal: alice.id,
                    name: "ci".into(),
                    scopes: vec!["tools:invoke".into()],
                    expires_at: None,
                },
            )
            .await
            .expect("key");
        assert!(secret.starts_with(&key.prefix));
        let found = store
            .find_key(&secret)
            .await
            .expect("lookup")
            .expect("found");
        assert_eq!((found.key.id, found.principal.id), (key.id, alice.id));
        assert!(
            store
                .find_key("tg_not-a-key")
                .await
                .expect("lookup")
                .is_none()
        );

        // A key for a principal of another tenant cannot be made.
        let err = store
            .create_api_key(
                b.id,
                &NewApiKey {
                    principal: alice.id,
                    name: "x".into(),
                    scopes: vec![],
                    expires_at: None,
                },
            )
            .await;
        assert!(matches!(err, Err(StoreError::NotFound(_))));

        assert_eq!(store.list_principals(a.id).await.expect("list").len(), 1);
        assert_eq!(store.list_api_keys(a.id).await.expect("list").len(), 1);
        assert!(
            store.list_api_keys(b.id).await.expect("list").is_empty(),
            "tenant B sees none of A's keys"
        );
        assert!(
            !store.revoke_api_key(b.id, key.id).await.expect("revoke"),
            "B cannot revoke A's key"
        );
        assert!(store.revoke_api_key(a.id, key.id).await.expect("revoke"));
        let found = store
            .find_key(&secret)
            .await
            .expect("lookup")
            .expect("still found");
        assert!(found.key.revoked_at.is_some());
    })
    .await;
}

#[tokio::test]
async fn postgres_announces_a_revocation_to_every_listening_instance() {
    on_postgres(|store, url| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let elsewhere = Store::open(Some(&url), dir.path())
            .await
            .expect("second instance");
        let tenant = store.create_tenant("acme").await.expect("tenant");
        let alice = store
            .create_principal(tenant.id, &member("alice"))
            .await
            .expect("principal");
        let (key, _secret) = store
            .create_api_key(
                tenant.id,
                &NewApiKey {
                    principal: alice.id,
                    name: "k".into(),
                    scopes: vec!["tools:invoke".into()],
                    expires_at: None,
                },
            )
            .await
            .expect("key");
        let mut revoked = store
            .watch_revocations()
            .await
            .expect("listen")
            .expect("Postgres announces revocations");
        assert!(
            elsewhere
                .revoke_api_key(tenant.id, key.id)
                .await
                .expect("revoke")
        );
        tokio::time::timeout(Duration::from_secs(10), revoked.recv())
            .await
            .expect("the revocation was announced")
            .expect("still listening");
    })
    .await;
}

#[tokio::test]
async fn agents_are_per_tenant_with_unique_names() {
    on_both(|store| async move {
        let a = store.create_tenant("agents-a").await.expect("tenant");
        let b = store.create_tenant("agents-b").await.expect("tenant");
        let config = json!({"name": "helper", "provider": "p", "model": "m"});
        let agent = store
            .create_agent(a.id, "helper", &config)
            .await
            .expect("agent");
        let dup = store.create_agent(a.id, "helper", &config).await;
        assert!(matches!(dup, Err(StoreError::Conflict(_))), "{dup:?}");
        // The same name in another tenant is another agent.
        store
            .create_agent(b.id, "helper", &config)
            .await
            .expect("same name, other tenant");
        assert_eq!(store.list_agents(a.id).await.expect("list").len(), 1);
        assert!(
            store
                .get_agent(b.id, agent.id)
                .await
                .expect("get")
                .is_none()
        );
        let renamed = json!({"name": "helper2", "provider": "p", "model": "m2"});
        assert!(
            !store
                .update_agent(b.id, agent.id, "helper2", &renamed)
                .await
                .expect("update")
        );
        assert!(
            store
                .update_agent(a.id, agent.id, "helper2", &renamed)
                .await
                .expect("update")
        );
        let got = store
            .get_agent(a.id, agent.id)
            .await
            .expect("get")
            .expect("exists");
        assert_eq!((got.name.as_str(), &got.config), ("helper2", &renamed));
        assert!(!store.delete_agent(b.id, agent.id).await.expect("delete"));
        assert!(store.delete_agent(a.id, agent.id).await.expect("delete"));
        assert!(store.list_agents(a.id).await.expect("list").is_empty());
    })
    .await;
}

/// A tenant keeps at most its quotas of agents, principals and keys not revoked: the next
/// creation is refused, saying which setting, and writes nothing; another tenant is not
/// held to this one's count, and a revoked key frees its place.
#[tokio::test]
async fn a_tenant_keeps_at_most_its_quotas_of_agents_principals_and_keys() {
    let limits = toolgate_store::StoreLimits {
        quotas: toolgate_store::Quotas {
            agents: 2,
            principals: 2,
            keys: 2,
            ..toolgate_store::Quotas::default()
        },
        ..toolgate_store::StoreLimits::default()
    };
    on_both_with(limits, |store| async move {
        let (a, b) = (
            store.create_tenant("full").await.expect("tenant"),
            store.create_tenant("other").await.expect("tenant"),
        );
        let refused = |result: Result<_, StoreError>, setting: &str| match result {
            Err(StoreError::Conflict(message)) => {
                assert!(message.contains(setting), "{message}")
            }
            other => panic!("not refused: {other:?}"),
        };
        let config = json!({"name": "x"});
        for name in ["one", "two"] {
            store
                .create_agent(a.id, name, &config)
                .await
                .expect("agent");
        }
        refused(
            store.create_agent(a.id, "three", &config).await.map(|_| ()),
            "limits.tenant_agents",
        );
        assert_eq!(store.list_agents(a.id).await.expect("agents").len(), 2);
        store
            .create_agent(b.id, "three", &config)
            .await
            .expect("other tenant's");

        let ann = store
            .create_principal(a.id, &member("ann"))
            .await
            .expect("ann");
        store
            .create_principal(a.id, &member("bob"))
            .await
            .expect("bob");
        refused(
            store
                .create_principal(a.id, &member("cy"))
                .await
                .map(|_| ()),
            "limits.tenant_principals",
        );
        assert_eq!(store.list_principals(a.id).await.expect("list").len(), 2);

        let key = |name: &str| NewApiKey {
            principal: ann.id,
            name: name.into(),
            scopes: vec![],
            expires_at: None,
        };
        let (first, _) = store.create_api_key(a.id, &key("k1")).await.expect("k1");
        store.create_api_key(a.id, &key("k2")).await.expect("k2");
        refused(
            store.create_api_key(a.id, &key("k3")).await.map(|_| ()),
            "limits.tenant_keys",
        );
        assert!(store.revoke_api_key(a.id, first.id).await.expect("revoke"));
        store
            .create_api_key(a.id, &key("k3"))
            .await
            .expect("a revoked key's place");
    })
    .await;
}
