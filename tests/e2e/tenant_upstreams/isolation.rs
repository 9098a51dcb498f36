//! A tenant's own upstream is seen, called and heard of by that tenant only.

use super::*;

#[tokio::test]
async fn a_tenants_upstream_is_seen_and_called_by_that_tenant_only() {
    let upstream = Gateway::start().await;
    let secret = upstream.admin_key.clone();
    let gw = Gateway::start_with(loopback).await;
    let a = gw.http.clone();
    let b_key = gw.create_tenant("globex").await;
    let b = client_with_key(&b_key);
    let upstreams = gw.url("/v1/upstreams");

    // Tenants may add HTTP upstreams only, on allowed addresses, with valid fields.
    for (body, pointer) in [
        (
            json!({"name": "meta", "url": "http://169.254.169.254/mcp"}),
            "/url",
        ),
        (json!({"name": "ten", "url": "http://10.1.2.3/mcp"}), "/url"),
        (
            json!({"name": "bad name!", "url": upstream.url("/mcp")}),
            "/name",
        ),
        (
            json!({"name": "hdr", "url": upstream.url("/mcp"), "headers": {"Authorization": "x"}}),
            "/headers/Authorization",
        ),
        (
            json!({"name": "hdrs", "url": upstream.url("/mcp"),
                   "headers": (0..33).map(|i| (format!("x-h{i}"), json!("v")))
                       .collect::<serde_json::Map<_, _>>()}),
            "/headers",
        ),
        (
            json!({"name": "globs", "url": upstream.url("/mcp"), "deny": ["ok*", "a[b"]}),
            "/deny/1",
        ),
        (
            // Matched as one set, a list's size is bounded.
            json!({"name": "globs", "url": upstream.url("/mcp"),
                   "allow": (0..101).map(|i| format!("t{i}*")).collect::<Vec<_>>()}),
            "/allow",
        ),
    ] {
        let (status, problem) =
            send(&a, reqwest::Method::POST, upstreams.clone(), Some(body)).await;
        assert_eq!(status, 400, "{problem}");
        assert!(
            problem["errors"]
                .as_array()
                .expect("violations")
                .iter()
                .any(|v| v["pointer"] == pointer),
            "{problem}"
        );
    }
    let (status, problem) = send(
        &a,
        reqwest::Method::POST,
        upstreams.clone(),
        Some(json!({"name": "shell", "command": "/bin/sh"})),
    )
    .await;
    assert_eq!(status, 400, "a stdio upstream is the operator's: {problem}");

    // A adds the upstream with a bearer token and a static header.
    let (status, created) = send(
        &a,
        reqwest::Method::POST,
        upstreams.clone(),
        Some(json!({
            "name": "peer",
            "url": upstream.url("/mcp"),
            "bearer": secret,
            "headers": {"x-team": "alpha-header-secret"},
            "deny": ["execute_command"],
        })),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let shown = created.to_string();
    assert!(
        !shown.contains(&secret) && !shown.contains("alpha-header-secret"),
        "{shown}"
    );
    assert_eq!(created["bearer"], true, "{created}");
    assert_eq!(created["headers"], json!(["x-team"]), "{created}");
    assert_eq!(created["prefix"], "peer__", "{created}");

    until_tools(&a, &gw, "A sees its upstream's tools", |n| {
        n.iter().any(|t| t == "peer__echo")
    })
    .await;
    let (_, listed) = send(&a, reqwest::Method::GET, gw.url("/v1/upstreams/peer"), None).await;
    assert_eq!(listed["status"]["state"], "connected", "{listed}");
    assert!(
        listed["status"]["tools"]
            .as_array()
            .is_some_and(|t| t.contains(&json!("peer__echo"))
                && !t.contains(&json!("peer__execute_command"))),
        "{listed}"
    );

    // A calls it over REST and over MCP.
    let (status, _, done) = gw
        .invoke(
            "peer__echo",
            json!({"arguments": {"message": "via a tenant upstream"}}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        done["structured"],
        json!({"message": "via a tenant upstream"})
    );
    let a_mcp = connect(&gw, &gw.admin_key, ProtocolVersion::V_2025_11_25).await;
    let a_tools = a_mcp.list_all_tools().await.expect("tools/list");
    assert!(a_tools.iter().any(|t| t.name == "peer__echo"));
    let result = a_mcp
        .call_tool(call("peer__echo", json!({"message": "over mcp"})))
        .await
        .expect("tools/call");
    assert_ne!(result.is_error, Some(true), "{result:?}");

    // B sees none of it: not the tools, not the upstream; cannot call, change or delete.
    let b_names = names(&b, &gw).await;
    assert!(
        !b_names.iter().any(|n| n.starts_with("peer__")),
        "{b_names:?}"
    );
    let (status, body) = send(
        &b,
        reqwest::Method::POST,
        gw.url("/v1/tools/peer__echo/invoke"),
        Some(json!({"arguments": {"message": "mine now"}})),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = send(
        &b,
        reqwest::Method::GET,
        gw.url("/v1/tools/peer__echo"),
        None,
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = send(&b, reqwest::Method::GET, upstreams.clone(), None).await;
    assert_eq!((status, &body["upstreams"]), (200, &json!([])), "{body}");
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let (status, body) = send(&b, method, gw.url("/v1/upstreams/peer"), None).await;
        assert_eq!(status, 404, "{body}");
    }
    let (status, body) = send(
        &b,
        reqwest::Method::PUT,
        gw.url("/v1/upstreams/peer"),
        Some(json!({"name": "peer", "url": upstream.url("/mcp")})),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let b_mcp = connect(&gw, &b_key, ProtocolVersion::V_2026_07_28).await;
    let b_tools = b_mcp.list_all_tools().await.expect("tools/list");
    assert!(!b_tools.iter().any(|t| t.name.starts_with("peer__")));
    let refused = b_mcp
        .call_tool(call("peer__echo", json!({"message": "mine now"})))
        .await;
    assert!(refused.is_err(), "an unknown tool to B: {refused:?}");

    // B's own upstream of the same name is B's alone: only the tool it allows.
    let (status, body) = send(
        &b,
        reqwest::Method::POST,
        upstreams.clone(),
        Some(json!({"name": "peer", "url": upstream.url("/mcp"), "bearer": secret, "allow": ["echo"]})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    until_tools(&b, &gw, "B sees its own upstream", |n| {
        n.iter().any(|t| t == "peer__echo") && !n.iter().any(|t| t == "peer__read_file")
    })
    .await;
    let a_names = names(&a, &gw).await;
    assert!(
        a_names.iter().any(|n| n == "peer__read_file"),
        "{a_names:?}"
    );

    // Audit rows: A's calls in A's log, none in B's, no credential anywhere.
    let (_, a_audit) = send(
        &a,
        reqwest::Method::GET,
        gw.url("/v1/audit?tool=peer__echo"),
        None,
    )
    .await;
    assert_eq!(
        a_audit["entries"].as_array().map(Vec::len),
        Some(2),
        "{a_audit}"
    );
    let (_, b_audit) = send(
        &b,
        reqwest::Method::GET,
        gw.url("/v1/audit?tool=peer__echo"),
        None,
    )
    .await;
    // B's log holds only B's own refused attempts (REST and MCP).
    let b_entries = b_audit["entries"].as_array().expect("entries");
    assert_eq!(b_entries.len(), 2, "{b_audit}");
    assert!(
        b_entries.iter().all(|e| e["outcome"] == "not_found"),
        "{b_audit}"
    );
    let audit_text = a_audit.to_string();
    assert!(!audit_text.contains(&secret) && !audit_text.contains("alpha-header-secret"));
    // At rest the credentials are sealed: the database file holds neither value.
    let mut db = std::fs::read(gw.data.path().join("toolgate.db")).expect("database file");
    db.extend(std::fs::read(gw.data.path().join("toolgate.db-wal")).unwrap_or_default());
    let db = String::from_utf8_lossy(&db);
    assert!(
        db.contains("x-team"),
        "the header's name is stored in the clear"
    );
    assert!(!db.contains(&secret) && !db.contains("alpha-header-secret"));

    // A replaces its credentials (a changed definition), then deletes the upstream.
    let (status, body) = send(
        &a,
        reqwest::Method::PUT,
        gw.url("/v1/upstreams/peer"),
        Some(
            json!({"name": "peer", "url": upstream.url("/mcp"), "bearer": "rotated-bearer-secret",
                    "headers": {"x-team": "beta-header-secret"}}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // Deleting it removes its tools from A at once.
    let (status, body) = send(
        &a,
        reqwest::Method::DELETE,
        gw.url("/v1/upstreams/peer"),
        None,
    )
    .await;
    assert_eq!(status, 204, "{body}");
    // Each change is an admin row in its tenant's log, naming the upstream and which
    // credentials it has, never their values; B's refused attempts left none in either.
    let admin_rows = |client: reqwest::Client| {
        let url = gw.url("/v1/audit?adapter=admin&limit=100");
        async move {
            let (_, page) = send(&client, reqwest::Method::GET, url, None).await;
            page["entries"]
                .as_array()
                .expect("entries")
                .iter()
                .filter(|e| {
                    e["tool"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("upstreams."))
                })
                .map(|e| {
                    (
                        e["tool"].as_str().unwrap_or_default().to_owned(),
                        e["arguments"].clone(),
                    )
                })
                .rev()
                .collect::<Vec<_>>()
        }
    };
    let a_rows = admin_rows(a.clone()).await;
    let a_ops: Vec<&str> = a_rows.iter().map(|(op, _)| op.as_str()).collect();
    assert_eq!(
        a_ops,
        ["upstreams.create", "upstreams.update", "upstreams.delete"],
        "{a_rows:?}"
    );
    assert!(
        a_rows.iter().all(|(_, args)| args["name"] == "peer"),
        "{a_rows:?}"
    );
    let b_rows = admin_rows(b.clone()).await;
    let b_ops: Vec<&str> = b_rows.iter().map(|(op, _)| op.as_str()).collect();
    assert_eq!(b_ops, ["upstreams.create"], "{b_rows:?}");
    let (_, a_log) = send(
        &a,
        reqwest::Method::GET,
        gw.url("/v1/audit?limit=1000"),
        None,
    )
    .await;
    let (_, b_log) = send(
        &b,
        reqwest::Method::GET,
        gw.url("/v1/audit?limit=1000"),
        None,
    )
    .await;
    for log in [a_log.to_string(), b_log.to_string()] {
        for value in [
            secret.as_str(),
            "alpha-header-secret",
            "rotated-bearer-secret",
            "beta-header-secret",
        ] {
            assert!(!log.contains(value), "{value} is in the log");
        }
    }
    let a_names = names(&a, &gw).await;
    assert!(
        !a_names.iter().any(|n| n.starts_with("peer__")),
        "{a_names:?}"
    );
    let (status, _, body) = gw
        .invoke("peer__echo", json!({"arguments": {"message": "gone"}}))
        .await;
    assert_eq!(status, 404, "{body}");
    let b_names = names(&b, &gw).await;
    assert!(
        b_names.iter().any(|n| n == "peer__echo"),
        "B's own stays: {b_names:?}"
    );

    // Only tenant admins manage upstreams.
    let (status, member) = send(
        &a,
        reqwest::Method::POST,
        gw.url("/v1/keys"),
        Some(json!({"name": "member", "scopes": ["tools:invoke"]})),
    )
    .await;
    assert_eq!(status, 201, "{member}");
    let member = client_with_key(member["secret"].as_str().expect("secret"));
    let (status, body) = send(&member, reqwest::Method::GET, upstreams, None).await;
    assert_eq!(status, 403, "{body}");

    a_mcp.cancel().await.expect("close");
    b_mcp.cancel().await.expect("close");
    gw.stop().await;
    upstream.stop().await;
}

/// A change to one tenant's upstream tools is news to that tenant's MCP sessions only.
#[tokio::test]
async fn only_sessions_of_the_tenant_whose_tools_changed_hear_of_it() {
    let upstream = Gateway::start().await;
    let gw = Gateway::start_with(loopback).await;
    let b_key = gw.create_tenant("globex").await;
    let b = client_with_key(&b_key);
    let (a_session, mut a_heard) = watch(&gw, &gw.admin_key).await;
    let (b_session, mut b_heard) = watch(&gw, &b_key).await;
    // Each session's watcher starts on `initialized`, sent right after the handshake.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let add = |name: &str| json!({"name": name, "url": upstream.url("/mcp"), "bearer": upstream.admin_key, "allow": ["echo"]});
    let (status, body) = send(
        &gw.http,
        reqwest::Method::POST,
        gw.url("/v1/upstreams"),
        Some(add("peer")),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    tokio::time::timeout(Duration::from_secs(20), a_heard.recv())
        .await
        .expect("A hears of its new tools")
        .expect("open");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(b_heard.try_recv().is_err(), "B heard of A's tools");
    // B's own change reaches B.
    let (status, body) = send(
        &b,
        reqwest::Method::POST,
        gw.url("/v1/upstreams"),
        Some(add("own")),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    tokio::time::timeout(Duration::from_secs(20), b_heard.recv())
        .await
        .expect("B hears of its own new tools")
        .expect("open");
    a_session.cancel().await.expect("close");
    b_session.cancel().await.expect("close");
    gw.stop().await;
    upstream.stop().await;
}
