//! The baseline for the MCP benchmark: a bare rmcp Streamable HTTP server (the gateway's
//! rmcp version) with one `echo` tool answering like the gateway's (the message as
//! text, and as structured content under its output schema), with TCP_NODELAY like the
//! gateway, and nothing else: no auth, no audit, no executor. The library's own
//! ceiling, which is what the gateway's MCP path is measured against.
//!
//! Usage: `bare-rmcp-echo ADDR [sse]`; prints `listening ADDR` when ready. Serves `/mcp`
//! in rmcp's legacy session mode, so clients negotiating 2025-11-25 or older get sessions
//! and 2026-07-28 clients are served statelessly, and with rmcp's `json_response`, so a
//! stateless result goes out as one JSON body: the gateway's transport configuration.
//! `sse` streams every stateless answer instead (rmcp's default), for comparison.

use std::sync::Arc;

use axum::Router;
use axum::serve::ListenerExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Clone)]
struct Echo {
    tool: Arc<Tool>,
}

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![(*self.tool).clone()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let message = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("message"))
            .and_then(Value::as_str)
            .ok_or_else(|| ErrorData::invalid_params("message: a string is required", None))?
            .to_owned();
        let mut result = CallToolResult::success(vec![ContentBlock::text(message.clone())]);
        result.structured_content = Some(json!({ "message": message }));
        Ok(result.into())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18082".to_owned());
    let json_response = std::env::args().nth(2).as_deref() != Some("sse");
    let tool: Tool = serde_json::from_value(json!({
        "name": "echo",
        "description": "Returns the message it is given.",
        "inputSchema": {
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "required": ["message"],
            "additionalProperties": false
        },
        "outputSchema": {
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "required": ["message"]
        }
    }))?;
    let handler = Echo {
        tool: Arc::new(tool),
    };
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(true)
            .with_json_response(json_response),
    );
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening {}", listener.local_addr()?);
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, Router::new().route_service("/mcp", service)).await?;
    Ok(())
}
