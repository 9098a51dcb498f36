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

mod contentless;
mod http;
mod stdio;

fn upstream(name: &str, command: &str, args: &[&str]) -> UpstreamEntry {
    serde_json::from_value(json!({"name": name, "command": command, "args": args}))
        .expect("an upstream entry")
}

/// Upstream `name`: the Python fixture server `script` of `tests/clients`, on the SDK's
/// virtual environment.
fn python_upstream(name: &str, script: &str) -> UpstreamEntry {
    let dir = sdk_clients();
    let python = dir.join(".venv/bin/python").display().to_string();
    upstream(name, &python, &[&dir.join(script).display().to_string()])
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
