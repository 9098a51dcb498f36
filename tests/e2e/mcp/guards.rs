//! What /mcp refuses: no token, another principal's session, another tenant's calls, foreign origins, malformed or repeated messages, a mismatched protocol version.

use super::*;

#[tokio::test]
async fn without_a_valid_token_mcp_answers_401_naming_the_resource_metadata() {
    let gw = Gateway::start().await;
    for (client, invalid) in [
        (gw.anonymous.clone(), false),
        (toolgate_e2e::client_with_key("tg_not_a_real_key"), true),
    ] {
        let response = post_mcp(&gw, &client, None, initialize_body()).await;
        assert_eq!(response.status(), 401);
        let challenge = response
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .expect("WWW-Authenticate")
            .to_owned();
        let expected = format!(
            r#"Bearer resource_metadata="{}/.well-known/oauth-protected-resource/mcp""#,
            gw.base
        );
        assert!(challenge.starts_with(&expected), "{challenge}");
        assert_eq!(challenge.contains("invalid_token"), invalid, "{challenge}");
    }
    let (status, _, metadata) = read(
        gw.anonymous
            .get(gw.url("/.well-known/oauth-protected-resource/mcp"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(metadata["resource"], format!("{}/mcp", gw.base));
    assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));
    gw.stop().await;
}

#[tokio::test]
async fn a_session_answers_only_the_principal_that_opened_it() {
    let gw = Gateway::start().await;
    let other_tenant = toolgate_e2e::client_with_key(&gw.create_tenant("globex").await);
    // A second principal of the same tenant.
    let (status, _, created) = gw
        .post(
            "/v1/principals",
            json!({"name": "bot", "kind": "service_account", "roles": ["member"]}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let principal = created["id"].as_str().expect("principal id");
    let (status, _, key) = gw
        .post(
            "/v1/keys",
            json!({"name": "bot-key", "principal_id": principal}),
        )
        .await;
    assert_eq!(status, 201, "{key}");
    let same_tenant = toolgate_e2e::client_with_key(key["secret"].as_str().expect("secret"));

    let session = open_session(&gw).await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    for intruder in [&other_tenant, &same_tenant] {
        let refused = post_mcp(&gw, intruder, Some(&session), list.clone()).await;
        assert_eq!(
            refused.status(),
            404,
            "a hijacked session id must be refused"
        );
        let deleted = intruder
            .delete(gw.url("/mcp"))
            .header("mcp-session-id", &session)
            .send()
            .await
            .expect("request");
        assert_eq!(deleted.status(), 404, "nor may another principal end it");
    }
    let owner = post_mcp(&gw, &gw.http, Some(&session), list).await;
    assert_eq!(owner.status(), 200);
    let body = owner.text().await.expect("body");
    assert!(body.contains("\"echo\""), "{body}");
    gw.stop().await;
}

#[tokio::test]
async fn each_tenant_sees_only_its_own_mcp_calls() {
    let gw = Gateway::start().await;
    let b_key = gw.create_tenant("initech").await;
    let b_http = toolgate_e2e::client_with_key(&b_key);
    let a = connect(&gw, &gw.admin_key, ProtocolVersion::V_2025_11_25).await;
    let b = connect(&gw, &b_key, ProtocolVersion::V_2026_07_28).await;
    a.call_tool(call("echo", json!({"message": "from a"})))
        .await
        .expect("a calls");
    for _ in 0..2 {
        b.call_tool(call("echo", json!({"message": "from b"})))
            .await
            .expect("b calls");
    }
    let a_rows = audit(&gw, &gw.http, "adapter=mcp").await;
    let b_rows = audit(&gw, &b_http, "adapter=mcp").await;
    assert_eq!(a_rows.len(), 1, "{a_rows:#?}");
    assert_eq!(b_rows.len(), 2, "{b_rows:#?}");
    a.cancel().await.expect("close");
    b.cancel().await.expect("close");
    gw.stop().await;
}

#[tokio::test]
async fn a_foreign_origin_is_refused() {
    let gw = Gateway::start().await;
    let port = gw.base.rsplit(':').next().expect("port").to_owned();
    for (origin, status) in [
        ("https://evil.example", 403),
        ("http://localhost.evil.example", 403),
        ("https://127.0.0.1", 403),
        (&*format!("http://127.0.0.1:{port}"), 200),
        ("http://localhost:3000", 200),
    ] {
        let response = gw
            .http
            .post(gw.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("origin", origin)
            .json(&initialize_body())
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), status, "{origin}");
    }
    gw.stop().await;
}

// Malformed input gets JSON-RPC errors, never a crash or a hang.
#[tokio::test]
async fn malformed_messages_get_errors() {
    let gw = Gateway::start().await;
    let garbage = gw
        .http
        .post(gw.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("request");
    // 400 with JSON-RPC's parse error, not rmcp's 415 in plain text.
    let (status, _, body) = read(garbage).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], -32700, "{body}");
    assert_eq!(body["id"], Value::Null, "{body}");
    // A known method with params that do not fit it: -32602, not "method not found".
    let session = open_session(&gw).await;
    for (params, code) in [
        (json!({"name": 5}), -32602),
        (json!({"arguments": {}}), -32602),
    ] {
        let response = post_mcp(
            &gw,
            &gw.http,
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}),
        )
        .await;
        let text = response.text().await.expect("body");
        let error = sse_events(&text)
            .into_iter()
            .find_map(|(_, _, data)| data.filter(|d| d["id"] == 7))
            .unwrap_or_else(|| panic!("an answer to 7 in {text}"));
        assert_eq!(error["error"]["code"], code, "{params}: {error}");
    }
    let unknown_method = post_mcp(
        &gw,
        &gw.http,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 8, "method": "tools/frobnicate", "params": {}}),
    )
    .await;
    let text = unknown_method.text().await.expect("body");
    assert!(text.contains("-32601"), "{text}");
    let too_big = gw
        .http
        .post(gw.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(vec![b' '; 2 * 1024 * 1024])
        .send()
        .await
        .expect("request");
    assert_eq!(too_big.status(), 413);
    // A request on a session that was never opened.
    let unknown = post_mcp(
        &gw,
        &gw.http,
        Some("no-such-session"),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    assert_eq!(unknown.status(), 404);
    gw.stop().await;
}

/// A session request reusing the id of one still being answered is refused (-32600);
/// the first gets its own answer (it used to lose it to the second and hang), and the id
/// is free again once that answer is sent.
#[tokio::test]
async fn reusing_an_in_flight_request_id_is_refused_and_loses_nothing() {
    let gw = Gateway::start().await;
    let session = open_session(&gw).await;
    let call = |name: &str, args: Value| {
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": name, "arguments": args}})
    };
    let slow = async {
        post_mcp(
            &gw,
            &gw.http,
            Some(&session),
            call("sleep", json!({"seconds": 2})),
        )
        .await
        .text()
        .await
        .expect("body")
    };
    let second = async {
        // Once the slow call is in flight.
        tokio::time::sleep(Duration::from_millis(300)).await;
        read(
            post_mcp(
                &gw,
                &gw.http,
                Some(&session),
                call("echo", json!({"message": "second"})),
            )
            .await,
        )
        .await
    };
    let (first, (status, _, body)) =
        tokio::time::timeout(Duration::from_secs(30), futures::future::join(slow, second))
            .await
            .expect("both are answered");
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(body["id"], 7);
    let answer = sse_events(&first)
        .into_iter()
        .find_map(|(_, _, data)| data.filter(|d| d["id"] == 7))
        .unwrap_or_else(|| panic!("an answer to 7 in {first}"));
    assert!(answer.get("result").is_some(), "{answer}");
    let again = post_mcp(
        &gw,
        &gw.http,
        Some(&session),
        call("echo", json!({"message": "again"})),
    )
    .await;
    assert_eq!(again.status(), 200);
    assert!(again.text().await.expect("body").contains("again"));
    gw.stop().await;
}

/// A session request whose `MCP-Protocol-Version` header names a version other than the
/// one its session negotiated is refused (400, -32600, naming the negotiated one), on the
/// instance that opened the session and on another that loads it from the store. No
/// header, or `2025-03-26` (the version the specification says to assume without one),
/// is the session's own version.
#[tokio::test]
async fn a_protocol_version_header_other_than_the_sessions_is_refused() {
    let db = PgDb::create().await;
    let url = db.url.clone();
    let first = Gateway::start_with(|c| c.database.url = Some(Secret::new(url.clone()))).await;
    let key_file = first.data.path().join("admin-api-key");
    let second = Gateway::start_with(|c| {
        c.database.url = Some(Secret::new(url.clone()));
        c.auth.admin_key_file = Some(key_file);
    })
    .await;
    let post = |gw: &Gateway, session: Option<&str>, version: Option<&str>, body: Value| {
        let mut request = gw
            .http
            .post(gw.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(id) = session {
            request = request.header("mcp-session-id", id);
        }
        if let Some(version) = version {
            request = request.header("mcp-protocol-version", version);
        }
        request.send()
    };
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    // (asked for in initialize, what the gateway agrees on, another known version)
    for (asked, negotiated, other) in [
        ("2025-06-18", "2025-06-18", "2025-11-25"),
        ("1999-01-01", "2025-11-25", "2025-06-18"),
    ] {
        let mut init = initialize_body();
        init["params"]["protocolVersion"] = json!(asked);
        let opened = post(&first, None, None, init).await.expect("initialize");
        assert_eq!(opened.status(), 200, "{asked}");
        let session = opened.headers()["mcp-session-id"]
            .to_str()
            .expect("session id")
            .to_owned();
        let answer = opened.text().await.expect("body");
        assert!(
            answer.contains(&format!(r#""protocolVersion":"{negotiated}""#)),
            "{asked}: {answer}"
        );
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let ack = post(&first, Some(&session), Some(negotiated), initialized)
            .await
            .expect("initialized");
        assert_eq!(ack.status(), 202, "{asked}");

        for gw in [&first, &second] {
            for fine in [Some(negotiated), None, Some("2025-03-26")] {
                let response = post(gw, Some(&session), fine, list.clone())
                    .await
                    .expect("tools/list");
                assert_eq!(response.status(), 200, "{asked}, header {fine:?}");
                assert!(response.text().await.expect("body").contains("read_file"));
            }
            let (status, _, body) = read(
                post(gw, Some(&session), Some(other), list.clone())
                    .await
                    .expect("sent"),
            )
            .await;
            assert_eq!(status, 400, "{asked}, header {other}: {body}");
            assert_eq!(body["error"]["code"], -32600, "{body}");
            assert_eq!(body["error"]["data"]["negotiated"], negotiated, "{body}");
        }
    }
    first.stop().await;
    second.stop().await;
}
