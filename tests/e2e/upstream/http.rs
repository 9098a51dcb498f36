//! Upstream MCP servers over Streamable HTTP: bearer tokens, the reference server, no cross-origin redirects, sessions per tenant, progress extending deadlines.

use super::*;

/// Another gateway's `/mcp` as a Streamable HTTP upstream, reached with a bearer token:
/// its tools join this gateway's registry, and a call is audited on both sides.
#[tokio::test]
async fn an_http_upstream_is_reached_with_its_bearer_token() {
    let upstream_gw = Gateway::start().await;
    let url = upstream_gw.url("/mcp");
    let key = upstream_gw.admin_key.clone();
    let gw = Gateway::start_with(|c| {
        c.upstreams = vec![
            serde_json::from_value(json!({"name": "peer", "url": url, "bearer": key}))
                .expect("an upstream entry"),
            serde_json::from_value(json!({"name": "nokey", "url": url, "allow": ["echo"]}))
                .expect("an upstream entry"),
        ];
    })
    .await;
    let names = listed_once(&gw, "peer__echo").await;
    assert!(names.iter().any(|n| n == "peer__read_file"), "{names:?}");
    // Without its token the upstream refuses the connection: no tools from it.
    assert!(!names.iter().any(|n| n.starts_with("nokey__")), "{names:?}");

    // The caller's W3C trace context reaches the upstream (both sides audit its trace id).
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let (status, _, done) = toolgate_e2e::read(
        gw.http
            .post(gw.url("/v1/tools/peer__echo/invoke"))
            .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
            .json(&json!({"arguments": {"message": "across"}}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["structured"], json!({"message": "across"}), "{done}");
    let (_, _, upstream_audit) = upstream_gw.get("/v1/audit?adapter=mcp").await;
    let entries = upstream_audit["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 1, "{upstream_audit}");
    assert_eq!(entries[0]["trace_id"], trace, "{upstream_audit}");
    assert!(
        entries[0]["client"]
            .as_str()
            .is_some_and(|c| c.starts_with("toolgate/")),
        "{upstream_audit}"
    );
    let (_, _, audit) = gw.get("/v1/audit?tool=peer__echo").await;
    assert_eq!(
        audit["entries"].as_array().map(Vec::len),
        Some(1),
        "{audit}"
    );
    assert_eq!(audit["entries"][0]["trace_id"], trace, "{audit}");
    gw.stop().await;
    upstream_gw.stop().await;
}

/// The same reference server over Streamable HTTP (its `streamableHttp` transport, a
/// child process listening on a loopback port), configured by URL.
#[tokio::test]
async fn server_everything_over_http() {
    let mut command = tokio::process::Command::new("node");
    command.arg(everything_script()).arg("streamableHttp");
    let (mut server, port) = serve_on_free_port(command, "PORT").await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let gw = Gateway::start_with(|c| {
        c.upstreams = vec![
            serde_json::from_value(json!({"name": "everything", "url": url}))
                .expect("an upstream entry"),
        ];
    })
    .await;
    assert_everything_sums(&gw, 20, 22).await;
    assert_eq!(
        everything_echo_over_mcp(&gw, "over http").await,
        "Echo: over http"
    );
    // The upstream goes away: its tool fails as an `upstream` error, nothing hangs.
    server.kill().await.expect("kill server-everything");
    let (status, _, problem) = gw
        .invoke(
            "everything__get-sum",
            json!({"arguments": {"a": 1, "b": 1}}),
        )
        .await;
    assert_eq!(status, 502, "{problem}");
    assert_eq!(problem["type"], "urn:toolgate:error:upstream", "{problem}");
    gw.stop().await;
}

/// An operator's HTTP upstream that redirects to another origin is not followed there:
/// its configured secret header must never reach the redirect's target.
#[tokio::test]
async fn an_http_upstream_is_not_followed_to_another_origin() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let catcher = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let caught_port = catcher.local_addr().expect("addr").port();
    let caught = Arc::new(AtomicUsize::new(0));
    let seen = caught.clone();
    tokio::spawn(async move {
        let app = axum::Router::new().fallback(move || {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                axum::http::StatusCode::NOT_FOUND
            }
        });
        let _ = axum::serve(catcher, app).await;
    });
    let redirector = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let redirector_addr = redirector.local_addr().expect("addr");
    let redirected = Arc::new(AtomicUsize::new(0));
    let hits = redirected.clone();
    tokio::spawn(async move {
        // "localhost" is another origin than "127.0.0.1", whatever the port.
        let target = format!("http://localhost:{caught_port}/mcp");
        let app = axum::Router::new().fallback(move || {
            let (hits, target) = (hits.clone(), target.clone());
            async move {
                hits.fetch_add(1, Ordering::SeqCst);
                (
                    axum::http::StatusCode::TEMPORARY_REDIRECT,
                    [(axum::http::header::LOCATION, target)],
                )
            }
        });
        let _ = axum::serve(redirector, app).await;
    });
    let entry: UpstreamEntry = serde_json::from_value(json!({
        "name": "moved",
        "url": format!("http://{redirector_addr}/mcp"),
        "headers": {"x-api-key": "s3cret-upstream-key"},
    }))
    .expect("an upstream entry");
    let gw = Gateway::start_with(|c| c.upstreams = vec![entry]).await;
    for _ in 0..500 {
        if redirected.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        redirected.load(Ordering::SeqCst) > 0,
        "the gateway tried the upstream"
    );
    // Give a followed redirect ample time to arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        caught.load(Ordering::SeqCst),
        0,
        "the redirect was followed"
    );
    let (_, _, upstreams) = gw.get("/v1/upstreams").await;
    assert!(!upstreams.to_string().contains("s3cret"), "{upstreams}");
    gw.stop().await;
}

/// An operator's HTTP upstream keeps state per MCP session (the fixture's `session_calls`
/// counts calls per session). By default each tenant calls in a session of its own, so
/// one tenant's calls never show in another's; `sessions = "shared"` is the old single
/// session, where they did (the hardening issue's shared counter).
#[tokio::test]
async fn an_http_upstreams_sessions_are_per_tenant_unless_shared() {
    for (scope, expect_other) in [("shared", "3"), ("per_tenant", "1")] {
        let (_server, port) = toolgate_e2e::python_server("fixture_server.py").await;
        let entry: UpstreamEntry = serde_json::from_value(json!({
            "name": "fx",
            "url": format!("http://127.0.0.1:{port}/mcp"),
            "sessions": scope,
        }))
        .expect("an upstream entry");
        let gw = Gateway::start_with(|c| c.upstreams = vec![entry]).await;
        listed_once(&gw, "fx__session_calls").await;
        let other = toolgate_e2e::client_with_key(&gw.create_tenant("other").await);
        for want in ["1", "2"] {
            let (status, _, done) = gw
                .invoke("fx__session_calls", json!({"arguments": {}}))
                .await;
            assert_eq!(status, 200, "{scope}: {done}");
            assert_eq!(done["content"][0]["text"], want, "{scope}: {done}");
        }
        let (status, _, done) = toolgate_e2e::read(
            other
                .post(gw.url("/v1/tools/fx__session_calls/invoke"))
                .json(&json!({"arguments": {}}))
                .send()
                .await
                .expect("request"),
        )
        .await;
        assert_eq!(status, 200, "{scope}: {done}");
        assert_eq!(
            done["content"][0]["text"], expect_other,
            "{scope}: the other tenant's first call: {done}"
        );
        gw.stop().await;
    }
}

/// An upstream whose calls report progress may have their deadlines extended by it
/// (`progress_extends_ms`): a call reporting every 100 ms outlives the base deadline of a
/// second, over REST and over MCP, and is cut at the maximum (3 s); the same upstream
/// without the setting cuts it at its base deadline.
#[tokio::test]
async fn progress_extends_an_upstream_calls_deadline_up_to_its_maximum() {
    let dir = sdk_clients();
    let python = dir.join(".venv/bin/python").display().to_string();
    let script = dir.join("fixture_server.py").display().to_string();
    let gw = Gateway::start_with(|c| {
        let entry = |name: &str, extends: Option<u64>| {
            let mut e = upstream(name, &python, &[&script]);
            e.timeout_secs = 1;
            e.max_timeout_secs = 3;
            e.progress_extends_ms = extends;
            e
        };
        c.upstreams = vec![entry("fx", Some(1000)), entry("plain", None)];
    })
    .await;
    for tool in ["fx__slow", "plain__slow"] {
        let names = listed_once(&gw, tool).await;
        assert!(names.iter().any(|n| n == tool), "{names:?}");
    }
    let slow = |tool: &'static str, seconds: f64| {
        let gw = &gw;
        async move {
            let started = std::time::Instant::now();
            let (status, _, body) = gw
                .invoke(tool, json!({"arguments": {"seconds": seconds}}))
                .await;
            (status, body, started.elapsed())
        }
    };
    let (status, body, _) = slow("fx__slow", 2.0).await;
    assert_eq!(status, 200, "outlived its 1 s deadline: {body}");
    let (status, body, took) = slow("fx__slow", 10.0).await;
    assert_eq!(status, 504, "{body}");
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_secs(6),
        "cut at its 3 s maximum: {took:?}"
    );
    let (status, body, took) = slow("plain__slow", 2.0).await;
    assert_eq!(status, 504, "no extension: {body}");
    assert!(
        took < Duration::from_millis(1900),
        "cut at its 1 s: {took:?}"
    );

    // Over MCP, with a client that asked for no progress of its own.
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp"))
            .auth_header(gw.admin_key.clone()),
    );
    let client = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("e2e-progress", "1.0.0"),
    )
    .serve(transport)
    .await
    .expect("connect");
    let Value::Object(args) = json!({"seconds": 2.0}) else {
        unreachable!()
    };
    let result = client
        .call_tool(rmcp::model::CallToolRequestParams::new("fx__slow").with_arguments(args))
        .await
        .expect("tools/call");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    client.cancel().await.expect("close");
    gw.stop().await;
}
