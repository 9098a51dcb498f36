//! Administrative changes in the audit log beside the calls: those made over REST (keys,
//! principals, policy, agents) and those made with the `toolgate` command line, each an
//! `admin` row in the tenant's chain, without the secrets they made.

use serde_json::{Value, json};
use toolgate_e2e::{Gateway, read};

/// Administrative changes are in the audit log beside the calls, one `admin` row each in
/// the tenant's chain, naming who made it and what: principals and keys made, a key
/// revoked, the policy changed, an agent made, changed and deleted. No secret is kept (a
/// new key's secret is nowhere in the log) and the chain still verifies. (Before: none of
/// these left a trace; who lowered the approval level could not be told.)
#[tokio::test]
async fn administrative_changes_are_audited_without_their_secrets() {
    let gw = Gateway::start_with(|c| {
        let llm = crate::agents::provider(toolgate_e2e::llm::Wire::Openai, "http://127.0.0.1:9");
        c.providers.insert("llm".into(), llm);
    })
    .await;
    let (key, secret) = gw.create_key("ops", &["tools:invoke"]).await;
    gw.revoke_key(&key).await;
    gw.put_policy(json!({"level": 3})).await;
    let agent = json!({"name": "helper", "provider": "llm", "model": "m"});
    let (status, _, made) = gw.post("/v1/agents", agent).await;
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().expect("id").to_owned();
    let changed = gw
        .http
        .put(gw.url(&format!("/v1/agents/{id}")))
        .header("x-request-id", "change-agent-7")
        .json(&json!({"name": "helper", "provider": "llm", "model": "m2"}))
        .send()
        .await
        .expect("request");
    assert_eq!(changed.status(), 200);
    let deleted = gw
        .http
        .delete(gw.url(&format!("/v1/agents/{id}")))
        .send()
        .await
        .expect("request");
    assert_eq!(deleted.status(), 204);

    let (status, _, page) = gw.get("/v1/audit?adapter=admin&limit=50").await;
    assert_eq!(status, 200, "{page}");
    assert!(
        !page.to_string().contains(&secret),
        "a key's secret in {page}"
    );
    let mut rows: Vec<&Value> = page["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .collect();
    rows.sort_by_key(|r| r["seq"].as_i64());
    let operations: Vec<&str> = rows
        .iter()
        .map(|r| r["tool"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        operations,
        [
            "principals.create",
            "keys.create",
            "keys.revoke",
            "policy.update",
            "agents.create",
            "agents.update",
            "agents.delete"
        ],
        "{page}"
    );
    assert_eq!(rows[2]["arguments"]["id"], key.as_str(), "{page}");
    assert_eq!(rows[3]["arguments"]["level"], 3, "{page}");
    assert_eq!(rows[5]["arguments"]["config"]["model"], "m2", "{page}");
    // The row names the request that made the change, as the caller sent its id.
    assert_eq!(rows[5]["request_id"], "change-agent-7", "{page}");
    for row in &rows {
        assert_eq!(row["outcome"], "ok", "{row}");
        assert!(
            row["request_id"].as_str().is_some_and(|r| !r.is_empty()),
            "{row}"
        );
    }
    let verified = gw
        .http
        .post(gw.url("/v1/audit/verify"))
        .send()
        .await
        .expect("request");
    let (status, _, verdict) = read(verified).await;
    assert_eq!(status, 200, "{verdict}");
    assert_eq!(verdict["verified"], true, "{verdict}");
}

/// Runs the `toolgate` binary with `args` on `gw`'s data directory, as `user`; its stdout.
async fn toolgate_cli(gw: &Gateway, user: &str, args: &[&str]) -> String {
    let out = tokio::process::Command::new(toolgate_e2e::toolgate_binary())
        .args(args)
        .arg("--data-dir")
        .arg(gw.data.path())
        .env_remove("DATABASE_URL")
        .env_remove("SUDO_USER")
        .env("USER", user)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run toolgate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "toolgate {args:?}: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Changes made with the `toolgate` command on the database are audited as those made
/// through the API: a tenant made, a key made and revoked, each an `admin` row in the
/// tenant's chain naming the command and who ran it, never the key's secret; written by
/// the command's own process beside the running gateway's, and the chains verify.
/// (Before, only the API's changes were recorded: a key made on the host left no trace.)
#[tokio::test]
async fn changes_made_with_the_command_line_are_audited_too() {
    let gw = Gateway::start().await;
    // A call of the gateway's own beside them, in the same chain.
    let (status, _, _) = gw
        .invoke("echo", json!({"arguments": {"message": "before"}}))
        .await;
    assert_eq!(status, 200);
    let made = toolgate_cli(&gw, "ops-ann", &["tenants", "create", "initech"]).await;
    let initech = made.split('\t').next().expect("id").trim().to_owned();
    let secret = toolgate_cli(
        &gw,
        "ops-ann",
        &[
            "keys",
            "create",
            "--tenant",
            "default",
            "--principal",
            "admin",
            "--name",
            "host-made",
        ],
    )
    .await
    .trim()
    .to_owned();
    let (_, _, keys) = gw.get("/v1/keys").await;
    let key = keys
        .as_array()
        .expect("keys")
        .iter()
        .find(|k| k["name"] == "host-made")
        .expect("the key is listed")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    toolgate_cli(
        &gw,
        "ops-bob",
        &["keys", "revoke", "--tenant", "default", &key],
    )
    .await;
    let (status, _, after) = gw
        .invoke("echo", json!({"arguments": {"message": "after"}}))
        .await;
    assert_eq!(status, 200, "{after}");

    let (_, _, page) = gw.get("/v1/audit?adapter=admin&limit=100").await;
    let rows: Vec<&Value> = page["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .collect();
    let by_cli: Vec<(&str, &str)> = rows
        .iter()
        .filter(|r| {
            r["client"]
                .as_str()
                .is_some_and(|c| c.starts_with("toolgate-cli/"))
        })
        .map(|r| {
            (
                r["tool"].as_str().unwrap_or_default(),
                r["arguments"]["os_user"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        by_cli,
        [("keys.revoke", "ops-bob"), ("keys.create", "ops-ann")],
        "{page}"
    );
    let created = rows
        .iter()
        .find(|r| r["tool"] == "keys.create")
        .expect("row");
    assert_eq!(created["arguments"]["id"], key.as_str());
    assert_eq!(
        created["principal_id"],
        "00000000-0000-0000-0000-000000000000"
    );
    let (_, _, all) = gw.get("/v1/audit?limit=1000").await;
    assert!(
        !all.to_string().contains(&secret),
        "the key's secret is in the log"
    );
    let (_, _, verified) = gw.post("/v1/audit/verify", json!({})).await;
    assert_eq!(verified["verified"], true, "{verified}");

    // The new tenant's chain starts with the record of its making.
    let db = gw.data.path().join("toolgate.db");
    let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&format!(
        "sqlite://{}",
        db.display()
    ))
    .await
    .expect("open the database");
    let first: (i64, String, String, String) = sqlx::query_as(
        "select seq, tool, adapter, arguments from audit_log where tenant_id = ?1 order by seq",
    )
    .bind(&initech)
    .fetch_one(&mut conn)
    .await
    .expect("initech's first row");
    assert_eq!(
        (first.0, first.1.as_str(), first.2.as_str()),
        (1, "tenants.create", "admin")
    );
    assert!(first.3.contains("\"os_user\":\"ops-ann\""), "{}", first.3);
}
