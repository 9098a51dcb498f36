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

mod calls;
mod guards;
mod stateless;

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

pub(crate) fn initialize_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
}

/// A raw 2025-11-25 session of the admin's, initialized.
pub(crate) async fn open_session(gw: &Gateway) -> String {
    open_session_with(gw, initialize_body()).await
}

/// A raw session of the admin's opened by `initialize`, initialized.
pub(crate) async fn open_session_with(gw: &Gateway, initialize: Value) -> String {
    let opened = post_mcp(gw, &gw.http, None, initialize).await;
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

/// Whether the sessions this gateway holds in memory (`toolgate_mcp_sessions`) come down
/// to `count` within 10 s, as dormant ones are let go of.
pub(crate) async fn sessions_in_memory_come_to(gw: &Gateway, count: f64) -> bool {
    for _ in 0..200 {
        if gw.metric("toolgate_mcp_sessions{").await == count {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    false
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
    let messages = messages(response).await;
    assert!(
        messages.last().is_some_and(|m| m["id"] == id),
        "{method}: no response in {messages:?}"
    );
    (content_type, messages)
}

/// The JSON-RPC messages of an answer: one JSON body, or the SSE events carrying them.
pub(crate) async fn messages(response: reqwest::Response) -> Vec<Value> {
    let text = response.text().await.expect("body");
    match serde_json::from_str(&text) {
        Ok(message) => vec![message],
        Err(_) => sse_events(&text)
            .into_iter()
            .filter_map(|(_, _, data)| data)
            .collect(),
    }
}
