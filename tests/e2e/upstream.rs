//! Upstream MCP federation: a real MCP server (the official Python SDK's, in
//! `tests/clients/fixture_server.py`) spawned over stdio, its tools registered under a
//! prefix and called through the executor from REST and MCP, plus an upstream that
//! cannot start, which must not hold anything up.

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use toolgate_e2e::{Gateway, sdk_clients, serve_on_free_port};
use toolgate_server::config::UpstreamEntry;

fn upstream(name: &str, command: &str, args: &[&str]) -> UpstreamEntry {
    serde_json::from_value(json!({"name": name, "command": command, "args": args}))
        .expect("an upstream entry")
}

async fn listed(gw: &Gateway) -> Vec<String> {
    let (_, _, tools) = gw.get("/v1/tools?limit=200").await;
    tools["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The tool names the admin sees once `tool` is among them (or after 15 s, whatever
/// they are then).
pub(crate) async fn listed_once(gw: &Gateway, tool: &str) -> Vec<String> {
    let mut names = Vec::new();
    for _ in 0..300 {
        names = listed(gw).await;
        if names.iter().any(|n| n == tool) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    names
}

#[tokio::test]
async fn a_stdio_upstream_joins_the_registry_and_is_called_through_the_executor() {
    let dir = sdk_clients();
    let log = tempfile::NamedTempFile::new().expect("log file");
    let python = dir.join(".venv/bin/python").display().to_string();
    let script = dir.join("fixture_server.py").display().to_string();
    let log_path = log.path().display().to_string();
    let gw = Gateway::start_with(|c| {
        let mut fixture = upstream("fx", &python, &[&script]);
        fixture.env.insert(
            "FIXTURE_LOG".into(),
            serde_json::from_value(json!(log_path)).expect("secret"),
        );
        fixture.env.insert(
            "FIXTURE_TOKEN".into(),
            serde_json::from_value(json!("t0k3n")).expect("secret"),
        );
        c.upstreams = vec![upstream("broken", "/nonexistent/mcp-server", &[]), fixture];
    })
    .await;
    // Built-in tools work at once; the upstream's arrive when it has started.
    let (status, _, _) = gw
        .invoke("echo", json!({"arguments": {"message": "up"}}))
        .await;
    assert_eq!(status, 200);
    let names = listed_once(&gw, "fx__widget").await;
    for expected in [
        "fx__add",
        "fx__picture",
        "fx__fail",
        "fx__slow",
        "fx__environment",
        "fx__widget",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    assert!(
        !names.iter().any(|n| n.starts_with("broken__")),
        "{names:?}"
    );

    // Structured output and risk derived from the upstream's hints.
    let (status, _, done) = gw
        .invoke("fx__add", json!({"arguments": {"a": 2, "b": 3}}))
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["structured"], json!({"result": 5}), "{done}");
    let (_, _, described) = gw.get("/v1/tools/fx__add").await;
    assert_eq!(described["risk"], "low", "{described}");
    let (_, _, described) = gw.get("/v1/tools/fx__fail").await;
    assert_eq!(
        described["risk"], "high",
        "an upstream tool that does not say it only reads: {described}"
    );

    // Content kinds relayed whole.
    let (status, _, done) = gw.invoke("fx__picture", json!({"arguments": {}})).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        done["content"][0],
        json!({"type": "text", "text": "a pixel"})
    );
    assert_eq!(done["content"][1]["type"], "image", "{done}");
    assert_eq!(done["content"][1]["mime_type"], "image/png", "{done}");

    // The child's environment is what was configured, not the gateway's.
    let (_, _, done) = gw.invoke("fx__environment", json!({"arguments": {}})).await;
    let seen: Value = done["content"][0]["text"]
        .as_str()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_else(|| panic!("the environment as JSON text: {done}"));
    assert_eq!(seen["FIXTURE_TOKEN"], "t0k3n", "{done}");
    assert_eq!(seen["HOME"], Value::Null, "{done}");

    // An isError result is an upstream error (502) carrying the upstream's text.
    let (status, _, problem) = gw.invoke("fx__fail", json!({"arguments": {}})).await;
    assert_eq!(status, 502, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("failed on purpose")),
        "{problem}"
    );

    // The deadline cancels the call upstream (notifications/cancelled).
    let (status, _, problem) = gw
        .post(
            "/v1/tools/fx__slow/invoke",
            json!({"arguments": {"seconds": 30}, "timeout_ms": 400}),
        )
        .await;
    assert_eq!(status, 504, "{problem}");
    let mut heard = String::new();
    for _ in 0..100 {
        heard = std::fs::read_to_string(log.path()).unwrap_or_default();
        if heard.contains("cancelled slow") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        heard.contains("cancelled slow"),
        "the upstream heard the cancellation: {heard}"
    );

    // Over MCP: the upstream's vendor _meta reaches only the clients named for it.
    for (client_name, sees_meta) in [("openai-mcp", true), ("claude-ai", false)] {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp"))
                .auth_header(gw.admin_key.clone()),
        );
        let client = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new(client_name, "1"),
        )
        .serve(transport)
        .await
        .expect("connect");
        let tools = client.list_all_tools().await.expect("tools/list");
        let widget = tools
            .iter()
            .find(|t| t.name == "fx__widget")
            .expect("fx__widget");
        assert_eq!(
            widget.meta.is_some(),
            sees_meta,
            "{client_name}: {widget:?}"
        );
        client.cancel().await.expect("close");
    }

    // The upstream dies mid-call: that call is an upstream error, the gateway reconnects
    // (a new process) and its tools work again.
    let (status, _, problem) = gw.invoke("fx__crash", json!({"arguments": {}})).await;
    assert_eq!(status, 502, "{problem}");
    let mut back = false;
    for _ in 0..200 {
        let (status, _, problem) = gw
            .invoke("fx__add", json!({"arguments": {"a": 1, "b": 1}}))
            .await;
        if status == 200 {
            back = true;
            break;
        }
        // Meanwhile the tool stays listed and fails as an upstream error, not a 404.
        assert_eq!(status, 502, "{problem}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        back,
        "the upstream's tools came back after it was restarted"
    );
    let starts = std::fs::read_to_string(log.path())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("pid "))
        .count();
    assert_eq!(starts, 2, "one restart");

    // Every call has its audit row, under the prefixed name (the attempts made while the
    // upstream was restarting are there too, as upstream errors).
    let (_, _, audit) = gw.get("/v1/audit?tool=fx__add&outcome=ok").await;
    assert_eq!(
        audit["entries"].as_array().map(Vec::len),
        Some(2),
        "{audit}"
    );

    // On shutdown the child process is ended, not left behind.
    let pid: u32 = std::fs::read_to_string(log.path())
        .expect("log")
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("pid ")?.trim().parse().ok())
        .expect("the fixture logged its pid");
    gw.stop().await;
    let mut gone = false;
    for _ in 0..100 {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Gone, or a zombie already reaped by the time we look.
        if state.is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the upstream's process {pid} outlived the gateway");
}

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

/// server-everything's `echo`, federated as `everything__echo`, called over MCP.
async fn everything_echo_over_mcp(gw: &Gateway, message: &str) -> String {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp"))
            .auth_header(gw.admin_key.clone()),
    );
    let client = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("e2e", "1"),
    )
    .serve(transport)
    .await
    .expect("connect");
    let Value::Object(args) = json!({ "message": message }) else {
        unreachable!("an object")
    };
    let echoed = client
        .call_tool(rmcp::model::CallToolRequestParams::new("everything__echo").with_arguments(args))
        .await
        .expect("tools/call");
    client.cancel().await.expect("close");
    echoed.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

/// server-everything's entry point, installed by the test setup.
fn everything_script() -> std::path::PathBuf {
    sdk_clients().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// Waits for server-everything's tools to be listed (`echo` among them), then has its
/// `get-sum` add `a` and `b` over REST.
async fn assert_everything_sums(gw: &Gateway, a: i64, b: i64) {
    let names = listed_once(gw, "everything__get-sum").await;
    assert!(names.iter().any(|n| n == "everything__echo"), "{names:?}");
    let (status, _, done) = gw
        .invoke(
            "everything__get-sum",
            json!({"arguments": {"a": a, "b": b}}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        done["content"][0]["text"],
        format!("The sum of {a} and {b} is {}.", a + b),
        "{done}"
    );
}

/// The reference server `@modelcontextprotocol/server-everything` (npm, pinned in
/// `tests/clients`) over stdio: its tools, hyphenated names and all, over REST and MCP.
#[tokio::test]
async fn server_everything_over_stdio() {
    let script = everything_script().display().to_string();
    let gw = Gateway::start_with(|c| {
        c.upstreams = vec![upstream("everything", "node", &[&script, "stdio"])];
    })
    .await;
    assert_everything_sums(&gw, 1, 2).await;
    // Resource links come back as links.
    let (status, _, done) = gw
        .invoke(
            "everything__get-resource-links",
            json!({"arguments": {"count": 2}}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["content"][1]["type"], "resource_link", "{done}");
    assert!(
        done["content"][1]["link"]["uri"]
            .as_str()
            .is_some_and(|u| u.starts_with("demo://")),
        "{done}"
    );
    // Arguments the upstream's schema refuses are refused by the gateway first.
    let (status, _, problem) = gw
        .invoke("everything__get-sum", json!({"arguments": {"a": "one"}}))
        .await;
    assert_eq!(status, 400, "{problem}");

    // Over MCP the same tool, the same answer.
    assert_eq!(
        everything_echo_over_mcp(&gw, "through two hops").await,
        "Echo: through two hops"
    );
    gw.stop().await;
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

/// Upstreams that misbehave on stdout — garbage instead of JSON-RPC, or an endless flood
/// — hold up nothing: the gateway starts, serves its own tools and stays responsive,
/// and registers nothing from them.
#[tokio::test]
async fn upstreams_writing_garbage_or_flooding_stdout_hold_nothing_up() {
    let gw = Gateway::start_with(|c| {
        c.upstreams = vec![
            upstream(
                "garbage",
                "/bin/sh",
                &[
                    "-c",
                    "echo 'this is not json-rpc'; echo '{\"jsonrpc\": 7}'; sleep 600",
                ],
            ),
            upstream("flood", "/usr/bin/yes", &["not json-rpc either"]),
        ];
    })
    .await;
    let started = std::time::Instant::now();
    for _ in 0..20 {
        let (status, _, body) = gw
            .invoke("echo", json!({"arguments": {"message": "still here"}}))
            .await;
        assert_eq!(status, 200, "{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // 20 calls and 2 s of pauses: a gateway busy parsing the flood would take far longer.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "calls slowed to a crawl: {:?}",
        started.elapsed()
    );
    let names = listed(&gw).await;
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("garbage__") || n.starts_with("flood__")),
        "{names:?}"
    );
    let (status, _, _) = gw.get("/healthz").await;
    assert_eq!(status, 200);
    gw.stop().await;
}

/// An upstream whose tool list changes (`notifications/tools/list_changed`) is listed
/// again: the new tool appears and can be called.
#[tokio::test]
async fn an_upstream_whose_tools_change_is_listed_again() {
    let dir = sdk_clients();
    let python = dir.join(".venv/bin/python").display().to_string();
    let script = dir.join("fixture_server.py").display().to_string();
    let gw = Gateway::start_with(|c| c.upstreams = vec![upstream("fx", &python, &[&script])]).await;
    let names = listed_once(&gw, "fx__grow").await;
    assert!(!names.contains(&"fx__grown".to_owned()), "{names:?}");
    let (status, _, done) = gw.invoke("fx__grow", json!({"arguments": {}})).await;
    assert_eq!(status, 200, "{done}");
    let names = listed_once(&gw, "fx__grown").await;
    assert!(names.contains(&"fx__grown".to_owned()), "{names:?}");
    let (status, _, done) = gw.invoke("fx__grown", json!({"arguments": {}})).await;
    assert_eq!(status, 200, "{done}");
    gw.stop().await;
}

/// While an upstream is away, its tools stay listed but marked unavailable (REST
/// `available: false`, a note in the MCP description), and calls fail as `upstream`
/// errors; they come back when it does. A connected MCP session hears of both changes
/// (`notifications/tools/list_changed`).
#[tokio::test]
async fn an_upstream_that_is_away_has_its_tools_marked_unavailable() {
    let dir = sdk_clients();
    let python = dir.join(".venv/bin/python").display().to_string();
    let script = dir.join("fixture_server.py").display().to_string();
    // It dies once, 1.5 s after its first start, and stays up once restarted.
    let once = tempfile::tempdir().expect("tempdir");
    let marker = once.path().join("exited").display().to_string();
    let gw = Gateway::start_with(|c| {
        let mut blink = upstream("blink", &python, &[&script]);
        for (name, value) in [
            ("FIXTURE_EXIT_AFTER", "1.5"),
            ("FIXTURE_EXIT_ONCE", &marker),
        ] {
            blink.env.insert(
                name.into(),
                serde_json::from_value(json!(value)).expect("secret"),
            );
        }
        c.upstreams = vec![blink];
    })
    .await;
    // Listed as available (a session then starts watching), away, then back.
    enum Phase {
        Up,
        Away,
        Back,
    }
    let mut phase = Phase::Up;
    let mut watcher = None;
    for _ in 0..2000 {
        let (status, _, tool) = gw.get("/v1/tools/blink__add").await;
        if status == 200 {
            let available = tool["available"]
                .as_bool()
                .unwrap_or_else(|| panic!("no `available` field: {tool}"));
            match (&phase, available) {
                (Phase::Up, true) if watcher.is_none() => {
                    watcher = Some(crate::tenant_upstreams::watch(&gw, &gw.admin_key).await);
                }
                (Phase::Up, false) if watcher.is_some() => phase = Phase::Away,
                (Phase::Away, true) => {
                    phase = Phase::Back;
                    break;
                }
                _ => {}
            }
            if matches!(phase, Phase::Away) {
                let (status, _, problem) = gw
                    .invoke("blink__add", json!({"arguments": {"a": 1, "b": 2}}))
                    .await;
                // Reconnection may win the race; otherwise a clean upstream error.
                assert!(matches!(status, 200 | 502), "{status}: {problem}");
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        matches!(phase, Phase::Back),
        "listed as available, then as unavailable, then as available again"
    );
    let (session, mut heard) = watcher.expect("watching");
    let mut told = 0;
    while told < 2 {
        match tokio::time::timeout(Duration::from_secs(10), heard.recv()).await {
            Ok(Some(())) => told += 1,
            _ => break,
        }
    }
    assert_eq!(
        told, 2,
        "tools/list_changed when the upstream went away and came back"
    );
    session.cancel().await.expect("close");
    gw.stop().await;
}

/// The reference `@modelcontextprotocol/server-filesystem` (npm, pinned) over stdio,
/// confined to one directory: its tools list, read and write there, and its own refusal
/// of a path outside comes back as a clean upstream tool error.
#[tokio::test]
async fn server_filesystem_over_stdio() {
    let dir = sdk_clients();
    let script = dir
        .join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
        .display()
        .to_string();
    let shared = tempfile::tempdir().expect("shared dir");
    let root = shared.path().canonicalize().expect("canonical");
    std::fs::write(root.join("hello.txt"), "hello from the shared dir\n").expect("write");
    let root_arg = root.display().to_string();
    let gw = Gateway::start_with(|c| {
        c.upstreams = vec![upstream("files", "node", &[&script, &root_arg])];
    })
    .await;
    let names = listed_once(&gw, "files__read_text_file").await;
    assert!(
        names.iter().any(|n| n == "files__list_directory"),
        "{names:?}"
    );

    let path = root.join("hello.txt").display().to_string();
    let (status, _, done) = gw
        .invoke(
            "files__read_text_file",
            json!({"arguments": {"path": path}}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert!(
        done["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("hello from the shared dir")),
        "{done}"
    );
    let written = root.join("made.txt").display().to_string();
    let (status, _, done) = gw
        .invoke(
            "files__write_file",
            json!({"arguments": {"path": written, "content": "made upstream"}}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        std::fs::read_to_string(root.join("made.txt")).expect("made"),
        "made upstream"
    );
    let (status, _, problem) = gw
        .invoke(
            "files__read_text_file",
            json!({"arguments": {"path": "/etc/passwd"}}),
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
