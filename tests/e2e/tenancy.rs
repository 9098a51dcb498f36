//! Tenant isolation and the audit log, on SQLite and on Postgres.

use std::collections::HashSet;

use serde_json::{Value, json};
use toolgate_e2e::{Gateway, PgDb, client_with_key, read};

/// Every audit entry visible to `client`, following the cursor.
async fn all_audit(gw: &Gateway, client: &reqwest::Client) -> Vec<Value> {
    let mut entries = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(c) => gw.url(&format!("/v1/audit?limit=1000&cursor={c}")),
            None => gw.url("/v1/audit?limit=1000"),
        };
        let (status, _, page) = read(client.get(url).send().await.expect("request")).await;
        assert_eq!(status, 200, "{page}");
        entries.extend(page["entries"].as_array().expect("entries").iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return entries,
        }
    }
}

async fn isolation_and_exactly_one_row_per_call(gw: Gateway, database_url: Option<String>) {
    let b_key = gw.create_tenant("globex").await;
    let b = client_with_key(&b_key);
    std::fs::write(
        gw.workspace().join("a-secret.txt"),
        "only for tenant default",
    )
    .expect("write");

    // Tenant A: N concurrent calls, each answered.
    const N: usize = 120;
    let mut calls = Vec::new();
    for i in 0..N {
        let http = gw.http.clone();
        let url = gw.url("/v1/tools/echo/invoke");
        calls.push(tokio::spawn(async move {
            let response = http
                .post(url)
                .json(&json!({"arguments": {"message": format!("m{i}")}}))
                .send()
                .await;
            let (status, _, body) = read(response.expect("request")).await;
            assert_eq!(status, 200, "{body}");
            body["call_id"].as_str().expect("call id").to_owned()
        }));
    }
    let mut ids = HashSet::new();
    for call in calls {
        ids.insert(call.await.expect("join"));
    }
    // Tenant B: its own calls, and no way to A's files.
    let response = b
        .post(gw.url("/v1/tools/read_file/invoke"))
        .json(&json!({"arguments": {"path": "a-secret.txt"}}))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 404, "B's workspace has no such file");
    let response = b
        .post(gw.url("/v1/tools/read_file/invoke"))
        .json(&json!({"arguments": {"path": "../default/a-secret.txt"}}))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 400, "and cannot climb into A's");

    let a_rows = all_audit(&gw, &gw.http).await;
    let echo: HashSet<String> = a_rows
        .iter()
        .filter(|r| r["tool"] == "echo")
        .map(|r| r["call_id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(echo, ids, "exactly one row per answered call");
    assert_eq!(a_rows.len(), N);
    let row = &a_rows[0];
    assert_eq!(row["adapter"], "rest");
    assert_eq!(row["outcome"], "ok");
    assert!(row["client"].as_str().is_some(), "{row}");
    assert!(row["request_id"].as_str().is_some(), "{row}");
    assert!(
        row["arguments"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with('m'))
    );
    assert_eq!(row["arguments_hash"].as_str().map(str::len), Some(64));

    let b_rows = all_audit(&gw, &b).await;
    let (created, b_calls): (Vec<&Value>, Vec<&Value>) =
        b_rows.iter().partition(|r| r["adapter"] == "admin");
    assert_eq!(b_calls.len(), 2, "B sees only its own two calls");
    assert!(b_calls.iter().all(|r| r["tool"] == "read_file"));
    // …and, first in its chain, the operator's making it.
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(created[0]["tool"], "tenants.create");
    assert_eq!(created[0]["seq"], 1);
    // B's admin sees none of A's principals or keys, and cannot revoke A's keys.
    let (_, _, principals) = read(
        b.get(gw.url("/v1/principals"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(principals.as_array().map(Vec::len), Some(1), "{principals}");
    let (_, _, a_keys) = gw.get("/v1/keys").await;
    let a_key_id = a_keys[0]["id"].as_str().expect("id");
    let response = b
        .delete(gw.url(&format!("/v1/keys/{a_key_id}")))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 404);

    // Both chains verify, as `toolgate audit verify` would check them.
    let store = toolgate_store::Store::open(database_url.as_deref(), gw.data.path())
        .await
        .expect("open");
    for name in ["default", "globex"] {
        let tenant = store
            .find_tenant(name)
            .await
            .expect("query")
            .expect("tenant");
        assert_eq!(
            store.verify_chain(tenant.id).await.expect("verify"),
            None,
            "{name}"
        );
    }
    drop(store);
    gw.stop().await;
}

#[tokio::test]
async fn tenants_are_isolated_and_every_call_has_one_row_on_sqlite() {
    isolation_and_exactly_one_row_per_call(Gateway::start().await, None).await;
}

#[tokio::test]
async fn tenants_are_isolated_and_every_call_has_one_row_on_postgres() {
    let db = PgDb::create().await;
    let url = db.url.clone();
    let gw =
        Gateway::start_with(|c| c.database.url = Some(toolgate_server::config::Secret::new(url)))
            .await;
    isolation_and_exactly_one_row_per_call(gw, Some(db.url.clone())).await;
    db.drop_db().await;
}

/// A tenant keeps at most `limits.tenant_agents` agents: the next is a 409 naming the
/// setting, and deleting one makes room. (Before: any number; one tenant could grow the
/// database without end.)
#[tokio::test]
async fn a_tenant_keeps_at_most_its_quota_of_agents() {
    let gw = Gateway::start_with(|c| {
        c.limits.tenant_agents = 1;
        // Never asked: agents are only saved here.
        let llm = crate::agents::provider(toolgate_e2e::llm::Wire::Openai, "http://127.0.0.1:9");
        c.providers.insert("llm".into(), llm);
    })
    .await;
    let agent = |name: &str| json!({"name": name, "provider": "llm", "model": "m"});
    let (status, _, first) = gw.post("/v1/agents", agent("first")).await;
    assert_eq!(status, 201, "{first}");
    let (status, _, problem) = gw.post("/v1/agents", agent("second")).await;
    assert_eq!(status, 409, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or("")
            .contains("limits.tenant_agents"),
        "{problem}"
    );
    let response = gw
        .http
        .delete(gw.url(&format!("/v1/agents/{}", first["id"].as_str().expect("id"))))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 204);
    let (status, _, second) = gw.post("/v1/agents", agent("second")).await;
    assert_eq!(status, 201, "{second}");
}
