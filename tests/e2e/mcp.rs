//! The MCP front door, driven by rmcp's own client over Streamable HTTP, and by raw HTTP
//! where the test is about what a client must not get.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ServiceError, ServiceExt};
use serde_json::{Value, json};
use toolgate_e2e::{Gateway, PgDb, read};
use toolgate_server::config::Secret;

const VERSIONS: [ProtocolVersion; 5] = [
    ProtocolVersion::V_2024_11_05,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2026_07_28,
];

pub(crate) async fn connect(
    gw: &Gateway,
    key: &str,
    version: ProtocolVersion,
) -> RunningService<RoleClient, ClientConfig> {
    connect_as(gw, key, version, "e2e-mcp-client").await
}

async fn connect_as(
    gw: &Gateway,
    key: &str,
    version: ProtocolVersion,
    client_name: &str,
) -> RunningService<RoleClient, ClientConfig> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp")).auth_header(key),
    );
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new(client_name, "1.2.3"),
    )
    .with_protocol_version(version.clone())
    .serve(transport)
    .await
    .unwrap_or_else(|e| panic!("connect with {version}: {e}"))
}

pub(crate) fn call(name: &str, args: Value) -> CallToolRequestParams {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    CallToolRequestParams::new(name.to_owned()).with_arguments(args)
}

/// Audit entries of `adapter` visible to `client`, newest first.
async fn audit(gw: &Gateway, client: &reqwest::Client, query: &str) -> Vec<Value> {
    let (status, _, page) = read(
        client
            .get(gw.url(&format!("/v1/audit?{query}")))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    page["entries"].as_array().expect("entries").clone()
}

#[tokio::test]
async fn every_protocol_version_lists_and_calls_through_the_executor() {
    let gw = Gateway::start().await;
    for version in VERSIONS {
        let client = connect(&gw, &gw.admin_key, version.clone()).await;
        let tools = client.list_all_tools().await.expect("tools/list");
        let echo = tools
            .iter()
            .find(|t| t.name == "echo")
            .unwrap_or_else(|| panic!("{version}: echo listed"));
        let annotations = echo.annotations.as_ref().expect("annotations");
        assert_eq!(annotations.read_only_hint, Some(true), "{version}");
        assert_eq!(annotations.destructive_hint, Some(false), "{version}");
        assert!(echo.output_schema.is_some(), "{version}");

        let ok = client
            .call_tool(call("echo", json!({"message": "hi"})))
            .await
            .expect("tools/call");
        assert_eq!(ok.is_error, Some(false), "{version}: {ok:?}");
        assert_eq!(
            ok.structured_content,
            Some(json!({"message": "hi"})),
            "{version}"
        );
        assert_eq!(ok.content[0].as_text().map(|t| t.text.as_str()), Some("hi"));

        // Arguments violating the schema: a result the model can read, not a protocol error.
        let bad = client
            .call_tool(call("echo", json!({"mesage": "typo"})))
            .await
            .expect("tools/call");
        assert_eq!(bad.is_error, Some(true), "{version}: {bad:?}");
        let text = bad.content[0].as_text().expect("text").text.clone();
        let error: Value = serde_json::from_str(&text).expect("JSON error");
        assert_eq!(error["error"]["kind"], "invalid_arguments", "{text}");
        assert_eq!(
            error["error"]["violations"].as_array().map(Vec::len),
            Some(2),
            "each violation listed: {text}"
        );

        // An unknown tool is a JSON-RPC error (-32602).
        match client.call_tool(call("no_such_tool", json!({}))).await {
            Err(ServiceError::McpError(e)) => assert_eq!(e.code.0, -32602, "{version}"),
            other => panic!("{version}: expected -32602, got {other:?}"),
        }
        client.cancel().await.expect("close");
    }
    // Every call is audited with adapter mcp and the client's name, unknown tool included.
    let rows = audit(&gw, &gw.http, "adapter=mcp&limit=100").await;
    assert_eq!(rows.len(), 3 * VERSIONS.len(), "{rows:#?}");
    for row in &rows {
        assert_eq!(row["adapter"], "mcp");
        assert_eq!(row["client"], "e2e-mcp-client/1.2.3", "{row}");
    }
    let outcomes = |o: &str| rows.iter().filter(|r| r["outcome"] == o).count();
    assert_eq!(outcomes("ok"), VERSIONS.len());
    assert_eq!(outcomes("invalid_arguments"), VERSIONS.len());
    assert_eq!(outcomes("not_found"), VERSIONS.len());
    gw.stop().await;
}

#[tokio::test]
async fn a_dropped_call_is_cancelled_and_audited_as_cancelled() {
    let gw = Gateway::start().await;
    for (done, version) in [ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28]
        .into_iter()
        .enumerate()
    {
        let client = connect(&gw, &gw.admin_key, version.clone()).await;
        let started = std::time::Instant::now();
        // Dropping the pending request sends notifications/cancelled (or, stateless,
        // closes the request's stream).
        let pending = client.call_tool_once(call("sleep", json!({"seconds": 30})));
        assert!(
            tokio::time::timeout(Duration::from_millis(300), pending)
                .await
                .is_err()
        );
        let mut row = None;
        for _ in 0..100 {
            let rows = audit(&gw, &gw.http, "adapter=mcp&tool=sleep").await;
            if rows.len() > done {
                row = rows.into_iter().next();
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let row = row.unwrap_or_else(|| panic!("{version}: no audit row for the cancelled call"));
        assert_eq!(row["outcome"], "cancelled", "{version}: {row}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{version}: the tool kept running"
        );
        client.cancel().await.expect("close");
    }
    gw.stop().await;
}

pub(crate) fn initialize_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
}

/// A raw 2025-11-25 session of the admin's, initialized.
pub(crate) async fn open_session(gw: &Gateway) -> String {
    let opened = post_mcp(gw, &gw.http, None, initialize_body()).await;
    assert_eq!(opened.status(), 200);
    let session = opened
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("session id")
        .to_owned();
    drop(opened);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let ack = post_mcp(gw, &gw.http, Some(&session), initialized).await;
    assert_eq!(ack.status(), 202);
    session
}

/// The events of an SSE body: (id, retry, JSON data), in order.
fn sse_events(body: &str) -> Vec<(Option<String>, Option<u64>, Option<Value>)> {
    body.split("\n\n")
        .filter(|event| !event.trim().is_empty())
        .map(|event| {
            let field = |name: &str| {
                event
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim().to_owned())
            };
            (
                field("id:"),
                field("retry:").and_then(|r| r.parse().ok()),
                field("data:").and_then(|d| serde_json::from_str(&d).ok()),
            )
        })
        .collect()
}

pub(crate) async fn post_mcp(
    gw: &Gateway,
    client: &reqwest::Client,
    session: Option<&str>,
    body: Value,
) -> reqwest::Response {
    let mut request = client
        .post(gw.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&body);
    if let Some(id) = session {
        request = request.header("mcp-session-id", id);
    }
    request.send().await.expect("request")
}

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

#[tokio::test]
async fn a_progress_token_gets_progress_notifications_before_the_result() {
    let gw = Gateway::start().await;
    let session = open_session(&gw).await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"seconds": 2.2}, "_meta": {"progressToken": "p-1"}}});
    let response = post_mcp(&gw, &gw.http, Some(&session), call).await;
    assert_eq!(response.status(), 200);
    let body = response.text().await.expect("SSE body");
    let messages: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    let progress: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(progress.len() >= 3, "one report per second: {body}");
    for p in &progress {
        assert_eq!(p["params"]["progressToken"], "p-1");
        assert_eq!(p["params"]["total"], 2.2);
    }
    let last = messages.last().expect("result");
    assert_eq!(last["id"], 7, "the result comes last: {body}");
    assert_eq!(last["result"]["isError"], false);
    gw.stop().await;
}

#[tokio::test]
async fn a_long_call_lets_go_of_its_stream_and_the_client_resumes_it() {
    fn polling(c: &mut toolgate_server::config::Config) {
        c.mcp.sse_poll_after_ms = Some(300);
        c.mcp.sse_retry_ms = 250;
    }
    // Polling keeps the events in the store, SQLite's or Postgres's.
    resumes_a_polled_call(Gateway::start_with(polling).await).await;
    let db = PgDb::create().await;
    let url = Secret::new(db.url.clone());
    let gw = Gateway::start_with(|c| {
        polling(c);
        c.database.url = Some(url);
    })
    .await;
    resumes_a_polled_call(gw).await;
    db.drop_db().await;
}

async fn resumes_a_polled_call(gw: Gateway) {
    let session = open_session(&gw).await;
    // A call shorter than the threshold answers on its own stream.
    let echo = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "quick"}}});
    let body = post_mcp(&gw, &gw.http, Some(&session), echo)
        .await
        .text()
        .await
        .expect("SSE body");
    assert!(
        sse_events(&body).iter().any(|(_, _, data)| data
            .as_ref()
            .is_some_and(|d| d["id"] == 8 && d["result"]["isError"] == false)),
        "{body}"
    );

    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"seconds": 1.5}, "_meta": {"progressToken": "p-9"}}});
    let first = post_mcp(&gw, &gw.http, Some(&session), call).await;
    assert_eq!(first.status(), 200);
    let body = first.text().await.expect("the stream ends before the call");
    let events = sse_events(&body);
    let (last_id, retry, _) = events.last().expect("events").clone();
    assert_eq!(
        retry,
        Some(250),
        "the stream ends telling when to come back: {body}"
    );
    assert!(
        !events
            .iter()
            .any(|(_, _, d)| d.as_ref().is_some_and(|d| d["id"] == 9)),
        "the result came before the stream was let go: {body}"
    );

    let mut last_id = last_id.expect("an event id to resume from");
    let mut seen = Vec::new();
    let mut resumptions = 0;
    for _ in 0..40 {
        resumptions += 1;
        let resumed = gw
            .http
            .get(gw.url("/mcp"))
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", &session)
            .header("last-event-id", &last_id)
            .send()
            .await
            .expect("resume");
        assert_eq!(resumed.status(), 200);
        let events = sse_events(&resumed.text().await.expect("resumed body"));
        if let Some(id) = events.iter().rev().find_map(|(id, _, _)| id.clone()) {
            last_id = id;
        }
        seen.extend(events.into_iter().filter_map(|(_, _, data)| data));
        if seen.iter().any(|d| d["id"] == 9) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let result = seen
        .iter()
        .find(|d| d["id"] == 9)
        .unwrap_or_else(|| panic!("the result after resuming: {seen:?}"));
    assert_eq!(result["result"]["isError"], false, "{result}");
    // 1.5 s at 300 ms a stream: a resumed stream is let go of too.
    assert!(resumptions >= 2, "{resumptions} resumptions");
    assert!(
        seen.iter()
            .any(|d| d["method"] == "notifications/progress"
                && d["params"]["progressToken"] == "p-9"),
        "progress reported while the client was away reaches it: {seen:?}"
    );
    let rows = audit(&gw, &gw.http, "adapter=mcp&tool=sleep").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["outcome"], "ok", "{rows:?}");
    gw.stop().await;
}

#[tokio::test]
async fn vendor_meta_goes_only_to_the_clients_that_asked_for_it() {
    let gw = Gateway::start().await;
    for version in [ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28] {
        let openai = connect_as(&gw, &gw.admin_key, version.clone(), "openai-mcp").await;
        let tools = openai.list_all_tools().await.expect("tools/list");
        let echo = tools.iter().find(|t| t.name == "echo").expect("echo");
        let meta = serde_json::to_value(echo.meta.as_ref().expect("_meta for OpenAI's client"))
            .expect("json");
        assert_eq!(
            meta["openai/toolInvocation/invoking"], "Echoing…",
            "{version}"
        );
        openai.cancel().await.expect("close");

        let other = connect_as(&gw, &gw.admin_key, version.clone(), "claude-ai").await;
        let tools = other.list_all_tools().await.expect("tools/list");
        assert!(
            tools.iter().all(|t| t.meta.is_none()),
            "{version}: no vendor _meta for other clients: {tools:?}"
        );
        other.cancel().await.expect("close");
    }
    gw.stop().await;
}

/// A 2026-07-28 request as a stateless client sends it: no session, the client's
/// context in `_meta` (beside any `_meta` keys `params` has) and the routing headers.
/// Returns the JSON-RPC messages of the answer, the response last.
pub(crate) async fn post_stateless(
    gw: &Gateway,
    client_name: &str,
    id: u64,
    method: &str,
    params: Value,
) -> Vec<Value> {
    post_stateless_typed(gw, Some(client_name), id, method, params)
        .await
        .1
}

/// [`post_stateless`], with the response's content type; `client_name` `None` sends no
/// `clientInfo`, and `User-Agent: ua-e2e/1` instead.
async fn post_stateless_typed(
    gw: &Gateway,
    client_name: Option<&str>,
    id: u64,
    method: &str,
    params: Value,
) -> (String, Vec<Value>) {
    let mut params = params;
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    if let Some(name) = client_name {
        meta["io.modelcontextprotocol/clientInfo"] = json!({"name": name, "version": "7.0"});
    }
    if let (Some(meta), Some(extra)) = (meta.as_object_mut(), params["_meta"].as_object()) {
        meta.extend(extra.clone());
    }
    params["_meta"] = meta;
    let mut request = gw
        .http
        .post(gw.url("/mcp"))
        .header("user-agent", "ua-e2e/1")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = params["name"].as_str() {
        request = request.header("mcp-name", name);
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let response = request.json(&body).send().await.expect("request");
    assert_eq!(response.status(), 200, "{method}");
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let text = response.text().await.expect("body");
    // JSON, or SSE events carrying it.
    let messages = match serde_json::from_str(&text) {
        Ok(message) => vec![message],
        Err(_) => sse_events(&text)
            .into_iter()
            .filter_map(|(_, _, data)| data)
            .collect(),
    };
    assert!(
        messages.last().is_some_and(|m| m["id"] == id),
        "{method}: no response in {text:?}"
    );
    (content_type, messages)
}

/// With `mcp.sessions` off, rmcp serves every protocol version statelessly: the
/// `clientInfo` of an `initialize` is gone by the next request, so calls are known by their
/// `User-Agent`, not by the name rmcp gives such a request's peer (its own).
#[tokio::test]
async fn without_sessions_legacy_calls_are_known_by_their_user_agent() {
    let gw = Gateway::start_with(|c| c.mcp.sessions = false).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "hi"}}});
    // This client's User-Agent is toolgate-e2e/1.
    let response = post_mcp(
        &gw,
        &toolgate_e2e::client_with_key(&gw.admin_key),
        None,
        call,
    )
    .await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.expect("body");
    assert!(text.contains(r#""isError":false"#), "{text}");
    let rows = audit(&gw, &gw.http, "adapter=mcp").await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["client"], "toolgate-e2e/1", "{rows:#?}");
    gw.stop().await;
}

/// A 2026-07-28 call whose result is all it sends is answered as one JSON body: nothing
/// to stream, and one write instead of a stream's head and event, then its end (split
/// apart by the wait for the audit commit). A call that sends progress first is
/// streamed, the result last.
#[tokio::test]
async fn a_stateless_result_alone_is_json_and_progress_makes_it_a_stream() {
    let gw = Gateway::start().await;
    let (content_type, messages) = post_stateless_typed(
        &gw,
        Some("json-e2e"),
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "hi"}}),
    )
    .await;
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0]["result"]["isError"], false, "{messages:?}");

    let (content_type, messages) = post_stateless_typed(
        &gw,
        Some("json-e2e"),
        2,
        "tools/call",
        json!({"name": "sleep", "arguments": {"seconds": 0.2}, "_meta": {"progressToken": "p-2"}}),
    )
    .await;
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    assert_eq!(
        messages[0]["method"], "notifications/progress",
        "{messages:?}"
    );
    assert_eq!(messages.last().expect("result")["result"]["isError"], false);
    gw.stop().await;
}

#[tokio::test]
async fn stateless_clients_are_known_by_the_client_info_in_their_meta() {
    let gw = Gateway::start().await;
    let done = post_stateless(
        &gw,
        "stateless-e2e",
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "hi"}}),
    )
    .await;
    let done = done.last().expect("response");
    assert_eq!(done["result"]["isError"], false, "{done}");
    let rows = audit(&gw, &gw.http, "adapter=mcp").await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["client"], "stateless-e2e/7.0", "{rows:#?}");

    // One that names no client is known by its User-Agent, as on REST, not by the
    // name rmcp gives a stateless request's peer (its own).
    let (_, done) = post_stateless_typed(
        &gw,
        None,
        3,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "hi"}}),
    )
    .await;
    assert_eq!(done.last().expect("response")["result"]["isError"], false);
    let rows = audit(&gw, &gw.http, "adapter=mcp").await;
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[0]["client"], "ua-e2e/1", "{rows:#?}");

    // Client-aware rendering reads the same clientInfo.
    for (client, vendor) in [("openai-mcp", true), ("claude-ai", false)] {
        let listed = post_stateless(&gw, client, 2, "tools/list", json!({})).await;
        let tools = listed.last().expect("response")["result"]["tools"]
            .as_array()
            .expect("tools")
            .clone();
        let echo = tools.iter().find(|t| t["name"] == "echo").expect("echo");
        assert_eq!(
            echo["_meta"]["openai/toolInvocation/invoking"] == "Echoing…",
            vendor,
            "{client}: {echo}"
        );
    }
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
