//! Upstream credentials: kept to their origin when the upstream is edited, and each principal's own.

use super::*;

/// New members of `gw`'s default tenant, each with an API key: (principal id, key).
async fn members(gw: &Gateway, names: &[&str]) -> Vec<(Value, String)> {
    let mut made = Vec::new();
    for name in names {
        let (_, _, who) = gw
            .post("/v1/principals", json!({"name": name, "roles": ["member"]}))
            .await;
        let (_, _, key) = gw
            .post("/v1/keys", json!({"name": name, "principal_id": who["id"]}))
            .await;
        made.push((
            who["id"].clone(),
            key["secret"].as_str().expect("secret").to_owned(),
        ));
    }
    made
}

/// Editing an upstream (the console's form) keeps its write-only credentials when asked,
/// sealed again for its new name, but never for another server: a changed origin must
/// send them again.
#[tokio::test]
async fn an_edited_upstream_keeps_its_credentials_only_on_its_origin() {
    let upstream = Gateway::start().await;
    let gw = Gateway::start_with(loopback).await;
    let a = gw.http.clone();
    let (status, created) = send(
        &a,
        reqwest::Method::POST,
        gw.url("/v1/upstreams"),
        Some(json!({"name": "peer", "url": upstream.url("/mcp"),
                    "bearer": upstream.admin_key, "headers": {"x-team": "alpha"}})),
    )
    .await;
    assert_eq!(status, 201, "{created}");

    let edit = |body: Value| {
        send(
            &a,
            reqwest::Method::PUT,
            gw.url("/v1/upstreams/peer"),
            Some(body),
        )
    };
    let (status, refused) = edit(json!({"name": "peer", "url": upstream.url("/mcp"),
        "bearer": "new", "keep_credentials": true}))
    .await;
    assert_eq!(status, 400, "new credentials or kept ones: {refused}");
    let elsewhere = "http://127.0.0.1:9/mcp";
    let (status, refused) =
        edit(json!({"name": "peer", "url": elsewhere, "keep_credentials": true})).await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused.to_string().contains("origin"), "{refused}");

    // Renamed and narrowed, its credentials kept: it connects with them and answers.
    let (status, edited) = edit(json!({"name": "docs", "url": upstream.url("/mcp"),
        "allow": ["echo"], "keep_credentials": true}))
    .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["bearer"], true, "{edited}");
    assert_eq!(edited["headers"], json!(["x-team"]), "{edited}");
    until_tools(&a, &gw, "the edited upstream's tools", |n| {
        n.iter().any(|t| t == "docs__echo") && !n.iter().any(|t| t.starts_with("peer__"))
    })
    .await;
    let (status, _, done) = gw
        .invoke("docs__echo", json!({"arguments": {"message": "kept"}}))
        .await;
    assert_eq!(status, 200, "the bearer went along: {done}");

    // Without keep_credentials a replacement holds what it says: no credentials.
    let (status, bare) = send(
        &a,
        reqwest::Method::PUT,
        gw.url("/v1/upstreams/docs"),
        Some(json!({"name": "docs", "url": upstream.url("/mcp")})),
    )
    .await;
    assert_eq!(status, 200, "{bare}");
    assert_eq!(bare["bearer"], false, "{bare}");
    gw.stop().await;
    upstream.stop().await;
}

/// Per-principal upstream credentials (issue 29): an upstream that calls with each
/// caller's own credential is seen by its server (another gateway, which checks API
/// keys) with each principal's own key; a principal with none stored cannot call; the
/// upstream's own credential only lists the tools; nothing stored is ever shown.
#[tokio::test]
async fn each_principal_calls_an_upstream_with_its_own_credential() {
    let upstream = Gateway::start().await;
    // At the upstream: a key to list tools with, and one per person.
    let keys = members(&upstream, &["lister", "ann-at-upstream", "bob-at-upstream"]).await;
    let gw = Gateway::start_with(loopback).await;
    let (status, created) = send(
        &gw.http,
        reqwest::Method::POST,
        gw.url("/v1/upstreams"),
        Some(
            json!({"name": "peer", "url": upstream.url("/mcp"), "bearer": keys[0].1,
                    "personal_credentials": true}),
        ),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["personal_credentials"], true, "{created}");
    until_tools(&gw.http, &gw, "peer's tools are listed", |n| {
        n.contains(&"peer__echo".to_owned())
    })
    .await;
    // Here: Ann and Bob, and Carol who stores nothing.
    let people: Vec<reqwest::Client> = members(&gw, &["ann", "bob", "carol"])
        .await
        .iter()
        .map(|(_, key)| client_with_key(key))
        .collect();
    let mine = gw.url("/v1/upstreams/peer/credentials");
    // A credential no server would take is refused, its value never repeated.
    let huge = "h".repeat(17 << 10);
    let (status, refused) = send(
        &people[0],
        reqwest::Method::PUT,
        mine.clone(),
        Some(json!({"headers": {"x-huge": huge}})),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert!(!refused.to_string().contains("hhhh"), "{refused}");
    for (person, (_, key)) in people.iter().zip(&keys[1..]) {
        let (status, stored) = send(
            person,
            reqwest::Method::PUT,
            mine.clone(),
            Some(json!({"bearer": key})),
        )
        .await;
        assert_eq!(status, 200, "{stored}");
        assert_eq!(stored, json!({"bearer": true, "headers": []}));
        let (status, shown) = send(person, reqwest::Method::GET, mine.clone(), None).await;
        assert_eq!(status, 200, "{shown}");
        assert!(
            !shown.to_string().contains(key.as_str()),
            "write-only: {shown}"
        );
    }
    let call = |who: usize, message: &str| {
        let person = people[who].clone();
        let url = gw.url("/v1/tools/peer__echo/invoke");
        let body = json!({"arguments": {"message": message}});
        async move { send(&person, reqwest::Method::POST, url, Some(body)).await }
    };
    let (status, body) = call(0, "from ann").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(1, "from bob").await;
    assert_eq!(status, 200, "{body}");
    let (status, refused) = call(2, "from carol").await;
    assert_eq!(status, 502, "{refused}");
    assert!(
        refused["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("you stored none"),
        "{refused}"
    );
    // The upstream saw each call as its own principal.
    let (_, _, audit) = upstream.get("/v1/audit?tool=echo").await;
    let seen: Vec<(Value, Value)> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| (e["principal_id"].clone(), e["arguments"]["message"].clone()))
        .collect();
    assert!(
        seen.contains(&(keys[1].0.clone(), json!("from ann"))),
        "{seen:?}"
    );
    assert!(
        seen.contains(&(keys[2].0.clone(), json!("from bob"))),
        "{seen:?}"
    );
    assert_eq!(seen.len(), 2, "{seen:?}");
    // Forgotten: Ann's next call is refused.
    let (status, _) = send(&people[0], reqwest::Method::DELETE, mine.clone(), None).await;
    assert_eq!(status, 204);
    let (status, _) = call(0, "again").await;
    assert_eq!(status, 502);
    // Each change is in the audit log, whose it was, and no credential is.
    let (status, _, changes) = gw.get("/v1/audit?adapter=admin&limit=100").await;
    assert_eq!(status, 200, "{changes}");
    for (_, key) in &keys {
        assert!(
            !changes.to_string().contains(key.as_str()),
            "a credential in {changes}"
        );
    }
    let operations: Vec<&str> = changes["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["tool"].as_str())
        .filter(|op| op.starts_with("upstreams.") || op.starts_with("credentials."))
        .collect();
    assert_eq!(
        operations,
        [
            "credentials.delete",
            "credentials.put",
            "credentials.put",
            "upstreams.create"
        ],
        "newest first: {changes}"
    );
    gw.stop().await;
    upstream.stop().await;
}

/// The sealing key's replacement.
const NEW_KEY: &str = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9";

/// Rotating `tenant_upstreams.key`: what the old key sealed (an upstream's credential and
/// a principal's own) opens while the old key is in `previous_keys`; `toolgate upstreams
/// reseal` seals it all with the new key, and the old key can then go. A new key alone
/// (all there was before `previous_keys`) leaves the upstream failed.
#[tokio::test]
async fn the_sealing_key_rotates_without_losing_credentials() {
    let upstream = Gateway::start().await;
    let keys: Vec<String> = members(&upstream, &["lister", "ann-at-upstream"])
        .await
        .into_iter()
        .map(|(_, key)| key)
        .collect();
    let dir = tempfile::tempdir().expect("data dir");
    let keyed = |current: &'static str, previous: &'static [&'static str]| {
        let data = dir.path().to_path_buf();
        move |c: &mut Config| {
            loopback(c);
            c.data_dir = data;
            c.tenant_upstreams.key = Some(Secret::new(current));
            c.tenant_upstreams.previous_keys = previous.iter().map(|k| Secret::new(*k)).collect();
        }
    };
    let ann_calls = |gw: &Gateway, ann: &reqwest::Client| {
        let (ann, url) = (ann.clone(), gw.url("/v1/tools/peer__echo/invoke"));
        async move {
            let body = json!({"arguments": {"message": "from ann"}});
            send(&ann, reqwest::Method::POST, url, Some(body)).await
        }
    };

    let gw = Gateway::start_with(keyed(KEY, &[])).await;
    let (status, created) = send(
        &gw.http,
        reqwest::Method::POST,
        gw.url("/v1/upstreams"),
        Some(
            json!({"name": "peer", "url": upstream.url("/mcp"), "bearer": keys[0],
                    "personal_credentials": true}),
        ),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let (_, ann) = members(&gw, &["ann"]).await.remove(0);
    let ann = client_with_key(&ann);
    let (status, stored) = send(
        &ann,
        reqwest::Method::PUT,
        gw.url("/v1/upstreams/peer/credentials"),
        Some(json!({"bearer": keys[1]})),
    )
    .await;
    assert_eq!(status, 200, "{stored}");
    until_tools(&gw.http, &gw, "peer's tools", |n| {
        n.contains(&"peer__echo".to_owned())
    })
    .await;
    let (status, body) = ann_calls(&gw, &ann).await;
    assert_eq!(status, 200, "{body}");
    gw.stop().await;

    // A new key alone opens nothing the old one sealed.
    let gw = Gateway::start_with(keyed(NEW_KEY, &[])).await;
    let mut seen = Value::Null;
    for _ in 0..100 {
        let (_, _, view) = gw.get("/v1/upstreams/peer").await;
        seen = view["status"].clone();
        if seen["state"] != "starting" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen["state"], "failed", "{seen}");
    assert!(
        seen["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("do not open"),
        "{seen}"
    );
    gw.stop().await;

    // The new key with the old one as previous: everything opens; reseal moves it all.
    let gw = Gateway::start_with(keyed(NEW_KEY, &[KEY])).await;
    until_tools(&gw.http, &gw, "peer's tools with the previous key", |n| {
        n.contains(&"peer__echo".to_owned())
    })
    .await;
    let (status, body) = ann_calls(&gw, &ann).await;
    assert_eq!(status, 200, "ann's own credential opens: {body}");
    let reseal = |current: &str, previous: &[&str]| {
        let file = dir.path().join("rotate.toml");
        let previous: Vec<String> = previous.iter().map(|k| format!("{k:?}")).collect();
        std::fs::write(
            &file,
            format!(
                "[tenant_upstreams]\nkey = {current:?}\nprevious_keys = [{}]\n",
                previous.join(", ")
            ),
        )
        .expect("config");
        let data = dir.path().to_path_buf();
        async move {
            let out = tokio::process::Command::new(toolgate_e2e::toolgate_binary())
                .args(["upstreams", "reseal", "--config"])
                .arg(&file)
                .arg("--data-dir")
                .arg(data)
                .env_remove("DATABASE_URL")
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .expect("run toolgate upstreams reseal");
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            (out.status.success(), said)
        }
    };
    let (ok, said) = reseal(NEW_KEY, &[KEY]).await;
    assert!(ok, "{said}");
    assert!(said.contains("resealed 2 credentials"), "{said}");
    let (ok, said) = reseal(NEW_KEY, &[KEY]).await;
    assert!(
        ok && said.contains("resealed 0 credentials") && said.contains("2 already were"),
        "{said}"
    );
    assert!(
        !said.contains(&keys[0]) && !said.contains(&keys[1]),
        "{said}"
    );
    gw.stop().await;

    // The old key alone opens none of it now, and says which.
    let (ok, said) = reseal(KEY, &[]).await;
    assert!(!ok, "{said}");
    assert!(
        said.contains("upstream peer") && said.contains("principal"),
        "{said}"
    );

    // The new key alone: the upstream and ann's own credential work.
    let gw = Gateway::start_with(keyed(NEW_KEY, &[])).await;
    until_tools(&gw.http, &gw, "peer's tools with the new key alone", |n| {
        n.contains(&"peer__echo".to_owned())
    })
    .await;
    let (status, body) = ann_calls(&gw, &ann).await;
    assert_eq!(status, 200, "{body}");
    gw.stop().await;
    upstream.stop().await;
}
