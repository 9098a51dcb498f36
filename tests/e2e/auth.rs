//! Credentials: missing, malformed, unknown, revoked, under-scoped.

use serde_json::json;
use toolgate_e2e::{Gateway, client_with_key, read, toolgate_binary};

#[tokio::test]
async fn first_start_writes_the_admin_key_for_its_owner_only() {
    let gw = Gateway::start().await;
    let path = gw.data.path().join("admin-api-key");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&path).expect("key file").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    assert!(
        gw.admin_key.starts_with("tg_") && gw.admin_key.len() == 67,
        "{}",
        gw.admin_key
    );
}

#[tokio::test]
async fn missing_or_bad_credentials_are_401_with_www_authenticate() {
    let gw = Gateway::start().await;
    let bad = [
        None,
        Some("Bearer".to_owned()),
        Some("Basic dXNlcjpwYXNz".to_owned()),
        Some(format!("Bearer tg_{}", "0".repeat(64))),
        Some("Bearer not.a.jwt".to_owned()),
    ];
    for header in bad {
        let mut request = gw.anonymous.get(gw.url("/v1/tools"));
        if let Some(h) = &header {
            request = request.header("authorization", h);
        }
        let response = request.send().await.expect("request");
        assert_eq!(response.status(), 401, "{header:?}");
        let challenge = response
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().expect("ascii").to_owned())
            .unwrap_or_else(|| panic!("{header:?}: no WWW-Authenticate"));
        assert!(challenge.starts_with("Bearer"), "{challenge}");
        // RFC 6750 §3.1: no error code when no credentials came at all.
        assert_eq!(
            challenge.contains("error="),
            header.is_some(),
            "{header:?}: {challenge}"
        );
        let (_, content_type, problem) = read(response).await;
        assert_eq!(content_type, "application/problem+json");
        assert_eq!(problem["type"], "urn:toolgate:error:unauthenticated");
    }
    // Health stays open for probes.
    assert_eq!(
        gw.anonymous
            .get(gw.url("/healthz"))
            .send()
            .await
            .expect("request")
            .status(),
        200
    );
}

#[tokio::test]
async fn a_revoked_key_is_refused_at_once() {
    let gw = Gateway::start().await;
    let (status, _, created) = gw.post("/v1/keys", json!({"name": "temp"})).await;
    assert_eq!(status, 201, "{created}");
    let secret = created["secret"].as_str().expect("secret");
    let temp = client_with_key(secret);
    assert_eq!(
        temp.get(gw.url("/v1/tools"))
            .send()
            .await
            .expect("request")
            .status(),
        200
    );
    let id = created["id"].as_str().expect("id");
    gw.revoke_key(id).await;
    assert_eq!(
        temp.get(gw.url("/v1/tools"))
            .send()
            .await
            .expect("request")
            .status(),
        401
    );
    // Listings never show secrets.
    let (_, _, keys) = gw.get("/v1/keys").await;
    assert!(!keys.to_string().contains(secret));
    assert!(
        keys.as_array()
            .expect("keys")
            .iter()
            .any(|k| k["id"] == id && !k["revoked_at"].is_null())
    );
}

#[tokio::test]
async fn missing_scopes_are_403_and_a_denied_tool_call_is_audited() {
    let gw = Gateway::start().await;
    let (status, _, member) = gw
        .post("/v1/principals", json!({"name": "viewer", "scopes": []}))
        .await;
    assert_eq!(status, 201, "{member}");
    let (status, _, key) = gw
        .post(
            "/v1/keys",
            json!({"name": "viewer", "principal_id": member["id"]}),
        )
        .await;
    assert_eq!(status, 201, "{key}");
    let viewer = client_with_key(key["secret"].as_str().expect("secret"));

    let response = viewer
        .get(gw.url("/v1/audit"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 403);
    assert_eq!(
        response
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().expect("ascii")),
        Some(r#"Bearer realm="toolgate", error="insufficient_scope", scope="audit:read""#)
    );
    let response = viewer
        .post(gw.url("/v1/tools/echo/invoke"))
        .json(&json!({"arguments": {"message": "hi"}}))
        .send()
        .await
        .expect("request");
    let (status, _, problem) = read(response).await;
    assert_eq!(
        (status, problem["type"].as_str()),
        (403, Some("urn:toolgate:error:forbidden"))
    );

    let (_, _, audit) = gw
        .get(&format!(
            "/v1/audit?principal={}",
            member["id"].as_str().expect("id")
        ))
        .await;
    let entries = audit["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 1, "{audit}");
    assert_eq!(entries[0]["outcome"], "forbidden");
    assert_eq!(entries[0]["tool"], "echo");

    // A tenant admin cannot grant scopes it lacks, nor create tenants.
    let (status, _, _) = gw
        .post(
            "/v1/principals",
            json!({"name": "x", "scopes": ["made:up"]}),
        )
        .await;
    assert_eq!(status, 403);
    let response = viewer
        .post(gw.url("/v1/tenants"))
        .json(&json!({"name": "nope"}))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 403);
}

#[tokio::test]
async fn principals_and_keys_have_bounded_names_and_roles_and_each_scope_once() {
    let gw = Gateway::start().await;
    let long = "n".repeat(129);
    for body in [
        json!({"name": long}),
        json!({"name": ""}),
        json!({"name": "r", "roles": (0..33).map(|i| format!("r{i}")).collect::<Vec<_>>()}),
        json!({"name": "r", "roles": ["member", "x".repeat(65)]}),
    ] {
        let (status, _, problem) = gw.post("/v1/principals", body.clone()).await;
        assert_eq!(status, 400, "{body}: {problem}");
    }
    let (status, _, who) = gw
        .post(
            "/v1/principals",
            json!({"name": "ci", "roles": ["member", "release-bot"],
                   "scopes": ["tools:invoke", "agents:run", "tools:invoke"]}),
        )
        .await;
    assert_eq!(status, 201, "{who}");
    assert_eq!(
        who["scopes"],
        json!(["agents:run", "tools:invoke"]),
        "{who}"
    );
    assert_eq!(who["roles"], json!(["member", "release-bot"]), "{who}");
    for name in [String::new(), long] {
        let (status, _, problem) = gw
            .post("/v1/keys", json!({"name": name, "principal_id": who["id"]}))
            .await;
        assert_eq!(status, 400, "{problem}");
    }
    let (status, _, key) = gw
        .post(
            "/v1/keys",
            json!({"name": "ci", "principal_id": who["id"],
                   "scopes": ["tools:invoke", "tools:invoke"]}),
        )
        .await;
    assert_eq!(status, 201, "{key}");
    assert_eq!(key["scopes"], json!(["tools:invoke"]), "{key}");
}

/// A client that sent its minute's worth of unknown API keys has its further keys that
/// are not cached refused (429, `Retry-After`) before the store is asked; keys in use go
/// on working, and another client behind the same trusted proxy is not held back.
#[tokio::test]
async fn a_client_guessing_api_keys_is_refused_before_the_store_is_asked() {
    let gw = Gateway::start_with(|c| {
        c.http.unknown_keys_per_minute = 3;
        c.http.trusted_proxies = vec!["127.0.0.1".into()];
    })
    .await;
    let (status, _, me) = gw.get("/v1/me").await;
    assert_eq!(status, 200, "the admin's key is in use: {me}");
    let (_, fresh) = gw.create_key("new", &["tools:invoke"]).await;
    let me_as = |secret: String, from: &'static str| {
        gw.anonymous
            .get(gw.url("/v1/me"))
            .bearer_auth(secret)
            .header("x-forwarded-for", from)
            .send()
    };
    let guess = |i: u32| format!("tg_{i:064x}");
    let guesser = "203.0.113.7";
    for i in 0..3 {
        let response = me_as(guess(i), guesser).await.expect("request");
        assert_eq!(response.status(), 401, "guess {i}");
    }
    let response = me_as(guess(3), guesser).await.expect("request");
    let (wait, _) = crate::rate_limits::rate_limited(response).await;
    assert!((1..=60).contains(&wait), "{wait}");
    // Over MCP too.
    let response = gw
        .anonymous
        .post(gw.url("/mcp"))
        .bearer_auth(guess(4))
        .header("x-forwarded-for", guesser)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 429);
    // A valid key not used yet is refused too from there; one in use is not.
    let response = me_as(fresh.clone(), guesser).await.expect("request");
    assert_eq!(response.status(), 429);
    let response = me_as(gw.admin_key.clone(), guesser).await.expect("request");
    assert_eq!(response.status(), 200);
    // Another client through the same proxy: its own count.
    let other = "198.51.100.2";
    let response = me_as(guess(5), other).await.expect("request");
    assert_eq!(response.status(), 401);
    let response = me_as(fresh.clone(), other).await.expect("request");
    assert_eq!(response.status(), 200);
    // Now in use, the new key works from the guesser's address as well.
    let response = me_as(fresh, guesser).await.expect("request");
    assert_eq!(response.status(), 200);
}

/// `toolgate keys revoke`, a process of its own on the same SQLite file, stops a key the
/// running gateway has cached: the very next request after the command returns is 401.
#[tokio::test]
async fn a_key_revoked_by_the_cli_is_refused_as_soon_as_the_command_returns() {
    let gw = Gateway::start().await;
    let (status, _, created) = gw.post("/v1/keys", json!({"name": "elsewhere"})).await;
    assert_eq!(status, 201, "{created}");
    let temp = client_with_key(created["secret"].as_str().expect("secret"));
    let list_tools = || async {
        temp.get(gw.url("/v1/tools"))
            .send()
            .await
            .expect("request")
            .status()
    };
    for _ in 0..3 {
        assert_eq!(list_tools().await, 200, "now cached");
    }
    let id = created["id"].as_str().expect("id");
    let revoked = tokio::process::Command::new(toolgate_binary())
        .args(["keys", "revoke", "--tenant", "default", id, "--data-dir"])
        .arg(gw.data.path())
        .env_remove("DATABASE_URL")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run toolgate keys revoke");
    assert!(
        revoked.status.success(),
        "{}",
        String::from_utf8_lossy(&revoked.stderr)
    );
    assert_eq!(list_tools().await, 401, "a revoked key was still accepted");
}

/// Two `Authorization` headers: which one counts is where a proxy and the gateway could
/// disagree, so the request is refused (400) on REST and /mcp, whatever the two hold.
#[tokio::test]
async fn two_authorization_headers_are_refused() {
    let gw = Gateway::start().await;
    let good = format!("Bearer {}", gw.admin_key);
    for (first, second) in [
        (good.as_str(), "Bearer nope"),
        ("Bearer nope", good.as_str()),
        (good.as_str(), good.as_str()),
    ] {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.append("authorization", first.parse().expect("value"));
        headers.append("authorization", second.parse().expect("value"));
        let response = gw
            .anonymous
            .get(gw.url("/v1/tools"))
            .headers(headers.clone())
            .send()
            .await
            .expect("request");
        let (status, content_type, problem) = read(response).await;
        assert_eq!(
            (status, content_type.as_str()),
            (400, "application/problem+json"),
            "{problem}"
        );
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("more than one Authorization")),
            "{problem}"
        );
        let response = gw
            .anonymous
            .post(gw.url("/mcp"))
            .headers(headers)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 400);
    }
}
