//! Tenants' own upstreams (`/v1/upstreams`): tenant A adds an HTTP MCP server (another
//! toolgate's `/mcp`, reached with a bearer token); its tools appear to A over REST and
//! MCP and work, and tenant B can neither see nor call them, nor see, change or delete
//! the upstream. Credentials are never shown, audited or stored in the clear; addresses
//! that are not allowed are refused; two instances on one Postgres stay in step.

use std::time::Duration;

use rmcp::model::ProtocolVersion;
use serde_json::{Value, json};
use toolgate_e2e::{Gateway, PgDb, client_with_key, read};
use toolgate_server::config::{Config, Secret};

use crate::mcp::{call, connect};

mod credentials;
mod instances;
mod isolation;

const KEY: &str = "5f0c6a8e2b7d4c1f9e3a6b8d0c2e4f6a8b0d2c4e6f8a0b2c4d6e8f0a2b4c6d8e";

/// Tenant upstreams on loopback over plain HTTP, as tests need (public HTTPS only by
/// default), re-read from the store every second.
pub(crate) fn loopback(c: &mut Config) {
    c.tenant_upstreams.allow_http = true;
    c.tenant_upstreams.allowed_networks = vec!["127.0.0.0/8".into()];
    c.tenant_upstreams.sync_secs = 1;
    c.tenant_upstreams.key = Some(Secret::new(KEY));
}

pub(crate) async fn names(http: &reqwest::Client, gw: &Gateway) -> Vec<String> {
    let (status, _, body) = read(
        http.get(gw.url("/v1/tools?limit=200"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// Adds the server at `port` (a Python SDK fixture) to the admin's tenant as upstream
/// `fx` and waits until its tool `first` (as `fx__first`) is listed.
pub(crate) async fn add_fixture(gw: &Gateway, port: u16, first: &str) {
    let (status, _, created) = gw
        .post(
            "/v1/upstreams",
            json!({"name": "fx", "url": format!("http://127.0.0.1:{port}/mcp")}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let wanted = format!("fx__{first}");
    until_tools(&gw.http, gw, "fx connects", |n| n.contains(&wanted)).await;
}

/// Polls until `check` holds for the caller's tool names, or fails after 20 s.
pub(crate) async fn until_tools(
    http: &reqwest::Client,
    gw: &Gateway,
    what: &str,
    check: impl Fn(&[String]) -> bool,
) {
    let mut seen = Vec::new();
    for _ in 0..200 {
        seen = names(http, gw).await;
        if check(&seen) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: tools are {seen:?}");
}

async fn send(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = http.request(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let (status, _, body) = read(request.send().await.expect("request")).await;
    (status, body)
}

/// Counts the `notifications/tools/list_changed` a session hears.
pub(crate) struct Heard(tokio::sync::mpsc::UnboundedSender<()>);

impl rmcp::ClientHandler for Heard {
    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(());
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::default(),
            rmcp::model::Implementation::new("e2e-watcher", "1"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

/// A legacy session for `key`, and what it hears of tool list changes.
pub(crate) async fn watch(
    gw: &Gateway,
    key: &str,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, Heard>,
    tokio::sync::mpsc::UnboundedReceiver<()>,
) {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let (tx, heard) = tokio::sync::mpsc::unbounded_channel();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp")).auth_header(key),
    );
    let session = Heard(tx).serve(transport).await.expect("connect");
    (session, heard)
}
