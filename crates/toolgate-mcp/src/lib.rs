//! The MCP front door: an rmcp [`ServerHandler`] that shows a caller its toolset and runs
//! every `tools/call` through the one [`Executor`].
//!
//! The transport (Streamable HTTP, sessions, SSE resumption, `Origin`/`Host` checks) is
//! rmcp's own `StreamableHttpService`; the server crate mounts it at `/mcp` behind the
//! same bearer-token authentication as REST and puts an [`McpCaller`] into each request's
//! extensions. rmcp hands the request's `http::request::Parts` to the handler, so every
//! message is served as the principal whose token came with *that* HTTP request.
//!
//! Like every adapter this one only translates: MCP `tools/list` ↔ the caller's
//! [`ScopedToolset`](toolgate_core::ScopedToolset), `tools/call` ↔ [`Executor::call`] with
//! adapter `mcp`, [`ToolError`] ↔ an `isError` result (or, for an unknown tool, the JSON-RPC
//! error -32602 the 2025-11-25 specification asks for).
//!
//! # Layout
//!
//! - this file: [`McpAdapter`] and what it is built with; `handler.rs` its
//!   [`ServerHandler`] (listing, calls, relayed reads, prompts and completions,
//!   subscriptions), `listen.rs` `subscriptions/listen` streams; `elicit.rs` a held
//!   call decided by its caller through elicitation; `wire.rs` versions, methods, pages,
//!   results and errors between rmcp's types and the core's; `lists.rs` `list_changed`
//!   notifications; [`VendorMeta`] vendor `_meta` keys per client.
//! - [`sessions`]: rmcp's session store and session manager over core's
//!   [`SessionStore`](toolgate_core::stores::SessionStore) seam: sessions any instance
//!   can take over, caps per principal and tenant, dormant sessions let go of, SSE
//!   resumption and polling.
//! - [`config`]: `[mcp]`, `[[upstreams]]` and `[tenant_upstreams]`, each with what is wrong
//!   with it.
//! - [`upstream`]: upstream MCP servers (stdio and HTTP) federated into the registry.
//! - [`tenant_upstreams`]: tenants' own upstreams (MCP servers and HTTP APIs) kept in
//!   step with the store on every instance, their credentials sealed, their addresses
//!   vetted.
//! - [`catalog`], [`relay`]: upstream resources and prompts, and relaying to them.
//! - [`vetting`]: tool definitions checked and pinned (rug-pull defence); [`pins`]: the
//!   pins kept in the store, changes recorded, approvals applied.

mod elicit;
mod handler;
mod listen;
mod lists;
mod pace;
mod vendor_meta;
mod wire;

pub mod catalog;
pub mod config;
pub mod pins;
pub mod relay;
pub mod sessions;
pub mod tenant_upstreams;
pub mod upstream;
pub mod vetting;

use std::sync::Arc;

pub use listen::Listening;
use lists::*;
pub use vendor_meta::{VendorMeta, VendorPrefixes};
use wire::*;
pub use wire::{error_result, is_known_method, mcp_tool, negotiated_version};

use rmcp::model::RequestParamsMeta;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, CustomRequest, CustomResult, ErrorCode, GetPromptRequestParams,
    GetPromptResponse, Implementation, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, Reference, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, SubscriptionContext};
use rmcp::transport::common::http_header::HEADER_SESSION_ID;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use toolgate_core::context::Continued;
use toolgate_core::{
    Adapter, ApprovalId, AuthContext, CallContext, ClientInfo, Completed, Content, ErrorKind,
    Executor, Registry, TenantId, ToolError, ToolSpec, Toolset, declarations,
};

/// Tools per `tools/list` page.
pub const PAGE: usize = 100;
/// How often a session's list-change watcher checks that the session still exists.
const SESSION_CHECK: std::time::Duration = std::time::Duration::from_secs(30);
/// The `_meta` key a `tools/call` names how the cache may answer it by (`no-cache`,
/// `no-store`), and a cached tool's result says what the cache did (`hit`, `miss`,
/// `bypass`).
pub const CACHE_META: &str = "toolgate/cache";

/// Who sent one MCP HTTP request, as the server's authentication found it. Put into the
/// request's extensions before rmcp sees the request.
#[derive(Clone, Debug)]
pub struct McpCaller {
    pub auth: Arc<AuthContext>,
    pub toolset: Toolset,
    pub request_id: Option<String>,
    /// The span this request's calls continue, as the server decided it
    /// (`toolgate_core::context::root`): its own span, which continues the client's
    /// `traceparent` (`_meta`, else the HTTP header); an unrecorded one when the sampler
    /// skips the trace; the client's own when traces are not exported.
    pub continued: Option<Continued>,
    /// The JWT the caller signed in with, for upstreams that exchange it (RFC 8693).
    pub subject_token: Option<toolgate_core::SubjectToken>,
    /// How the handler answered: shared with the server, which records it.
    pub answer: Answer,
}

/// How the handler answered one request, for the server's span and
/// `mcp.server.operation.duration` (the MCP semantic conventions' `error.type` and
/// `rpc.response.status_code`): a JSON-RPC error, or a tool's result with `isError`, is
/// an HTTP 200 the server could not tell from a success. Shared by the request's
/// [`McpCaller`] clones; set once.
#[derive(Clone, Debug, Default)]
pub struct Answer(Arc<std::sync::OnceLock<Answered>>);

/// What [`Answer`] holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Answered {
    /// A result.
    Result,
    /// A `tools/call` result with `isError` set (`error.type` = `tool_error`).
    ToolError,
    /// A JSON-RPC error.
    Error { code: i32, message: String },
}

impl Answer {
    /// The answer slot of the request `context` is for (a detached one if it has none).
    pub(crate) fn of(context: &RequestContext<RoleServer>) -> Self {
        context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<McpCaller>())
            .map(|caller| caller.answer.clone())
            .unwrap_or_default()
    }

    /// Records `answered`; the first record stands.
    pub fn set(&self, answered: Answered) {
        let _ = self.0.set(answered);
    }

    pub fn get(&self) -> Option<&Answered> {
        self.0.get()
    }

    /// Records how `result` answers the request, and passes it on.
    pub(crate) fn record<T>(&self, result: Result<T, ErrorData>) -> Result<T, ErrorData> {
        self.set(Answered::of(&result));
        result
    }

    /// [`Answer::record`] for `tools/call`, whose result may be the tool's error.
    pub(crate) fn record_call(
        &self,
        result: Result<CallToolResult, ErrorData>,
    ) -> Result<CallToolResult, ErrorData> {
        self.set(match &result {
            Ok(result) if result.is_error == Some(true) => Answered::ToolError,
            other => Answered::of(other),
        });
        result
    }
}

impl Answered {
    fn of<T>(result: &Result<T, ErrorData>) -> Self {
        match result {
            Ok(_) => Answered::Result,
            Err(err) => Answered::error(err),
        }
    }

    /// A JSON-RPC error answer.
    pub fn error(err: &ErrorData) -> Self {
        Answered::Error {
            code: err.code.0,
            message: err.message.to_string(),
        }
    }
}

/// The upstreams whose resources and prompts `caller` may see.
fn visible(
    registry: &Arc<Registry>,
    catalog: &catalog::Catalog,
    caller: &McpCaller,
) -> Vec<Arc<catalog::Entry>> {
    let scoped = caller.toolset.scope(registry.clone(), &caller.auth);
    catalog.visible(&caller.auth, &scoped)
}

/// The MCP handler. rmcp makes one per session (and one per stateless request); it is a
/// couple of `Arc`s.
#[derive(Clone)]
pub struct McpAdapter {
    registry: Arc<Registry>,
    executor: Executor,
    vendor_meta: Arc<VendorMeta>,
    desk: Option<Arc<dyn ApprovalDesk>>,
    /// This session's `logging/setLevel` choice (see [`McpAdapter::for_session`]).
    log_level: Arc<relay::LogLevel>,
    /// The session manager, told of a session's own state (see
    /// [`sessions::SessionKeeping`]).
    sessions: Option<Arc<dyn sessions::SessionKeeping>>,
    /// Upstreams' resources and prompts.
    catalog: Arc<catalog::Catalog>,
    /// This session's resource subscriptions (see [`McpAdapter::for_session`]).
    subscriptions: Arc<catalog::Subscriptions>,
}

/// Where the MCP front door records a caller's own decision on its call, when the
/// tenant lets callers approve their own calls and the client can ask its user
/// (elicitation).
#[async_trait::async_trait]
pub trait ApprovalDesk: Send + Sync {
    /// Whether `auth` may decide its own calls (the tenant's policy).
    async fn may_self_approve(&self, auth: &AuthContext) -> bool;
    /// Records `auth`'s decision on `approval`, as a decision made over REST would be.
    async fn decide(
        &self,
        auth: &AuthContext,
        approval: ApprovalId,
        approve: bool,
        reason: String,
    ) -> Result<(), String>;
}

impl McpAdapter {
    pub fn new(registry: Arc<Registry>, executor: Executor) -> Self {
        let catalog = Arc::<catalog::Catalog>::default();
        Self {
            registry,
            executor,
            vendor_meta: Arc::default(),
            desk: None,
            log_level: Arc::default(),
            sessions: None,
            subscriptions: catalog::Subscriptions::new(catalog.clone()),
            catalog,
        }
    }

    /// Tell `sessions` of each session's own state: its log level (kept, and given back
    /// to the session restored), its subscriptions (which keep it in memory).
    pub fn with_session_keeping(mut self, sessions: Arc<dyn sessions::SessionKeeping>) -> Self {
        self.sessions = Some(sessions);
        self
    }

    /// The handler for a new session: shares everything but the session's own state
    /// (its log level, its subscriptions). rmcp's service factory calls this once per
    /// session.
    pub fn for_session(&self) -> Self {
        Self {
            log_level: Arc::default(),
            subscriptions: catalog::Subscriptions::new(self.catalog.clone()),
            ..self.clone()
        }
    }

    /// Ask users through elicitation about calls they may approve themselves.
    pub fn with_approval_desk(mut self, desk: Arc<dyn ApprovalDesk>) -> Self {
        self.desk = Some(desk);
        self
    }

    /// Serve the resources and prompts the upstreams' supervisors file in `catalog`.
    pub fn with_catalog(mut self, catalog: Arc<catalog::Catalog>) -> Self {
        self.subscriptions = catalog::Subscriptions::new(catalog.clone());
        self.catalog = catalog;
        self
    }

    /// The upstreams whose resources and prompts this request's caller may see.
    fn visible_upstreams(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<Vec<Arc<catalog::Entry>>, ErrorData> {
        Ok(visible(&self.registry, &self.catalog, &caller(context)?))
    }

    /// The visible upstream offering the prompt the gateway names `name`, and the
    /// upstream's own name for it.
    fn prompt_upstream(
        &self,
        context: &RequestContext<RoleServer>,
        name: &str,
    ) -> Result<(Arc<catalog::Entry>, String), ErrorData> {
        let upstreams = self.visible_upstreams(context)?;
        upstreams
            .into_iter()
            .find_map(|u| u.remote_prompt(name).map(|remote| (u, remote)))
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    "no prompt with this name is available to your credentials",
                    Some(json!({ "prompt": name })),
                )
            })
    }

    /// The visible upstream that serves `uri` (see [`catalog::serving`]).
    fn resource_upstream(
        &self,
        context: &RequestContext<RoleServer>,
        uri: &str,
    ) -> Result<Arc<catalog::Entry>, ErrorData> {
        let upstreams = self.visible_upstreams(context)?;
        catalog::serving(&upstreams, uri).ok_or_else(|| {
            ErrorData::resource_not_found(
                "no resource with this URI is available to your credentials",
                Some(json!({ "uri": uri })),
            )
        })
    }

    /// Runs a request relayed to an upstream (`resources/read`, `prompts/get`,
    /// `completion/complete`) through the executor's [`Executor::relay`]: admitted,
    /// authorized, under the upstream's deadline, cancelled with the request, audited.
    ///
    /// `(method, target)` names it (`resources/read` and the URI, `prompts/get` and the
    /// prompt). The upstream request (`params`, handed to `send` with the upstream's
    /// connection) gets a client span of its own under the request's server span, and
    /// carries the `traceparent` in `_meta` so the upstream's spans join the trace.
    pub(crate) async fn relay<P, T, F>(
        &self,
        context: &RequestContext<RoleServer>,
        (method, target): (&str, &str),
        args: Value,
        upstream: &Arc<catalog::Entry>,
        mut params: P,
        send: impl FnOnce(rmcp::Peer<rmcp::RoleClient>, P) -> F,
    ) -> Result<T, ErrorData>
    where
        P: RequestParamsMeta,
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, rmcp::ServiceError>> + Send + 'static,
    {
        let caller = caller(context)?;
        let mut ctx = CallContext::new(caller.auth.clone(), Adapter::Mcp)
            .with_client(client_info(context))
            .continuing(caller.continued.clone());
        if let Some(id) = caller.request_id {
            ctx = ctx.with_request_id(id);
        }
        ctx.subject_token = caller.subject_token;
        ctx.cancel = context.ct.child_token();
        let (client, traceparent) =
            upstream::client_span(&ctx, upstream::Under::Request, method, target);
        if let Some(traceparent) = traceparent {
            params.set_traceparent(&traceparent);
        }
        let name = upstream.upstream.clone();
        let sent = send(upstream.peer.clone(), params);
        let answered = client.clone();
        let operation = async move {
            sent.await.map_err(|e| {
                upstream::answer_failed(&answered, &e);
                from_rpc(upstream_error(&name, e))
            })
        };
        let result = self
            .executor
            .relay(
                ctx,
                method,
                args,
                upstream.timeout,
                tracing::Instrument::instrument(operation, client.clone()),
            )
            .await;
        // The gateway's own refusals and deadline; the upstream's answers are marked
        // above, by their JSON-RPC code.
        if let Err(err) = &result
            && err.kind != ErrorKind::Upstream
        {
            toolgate_core::context::span_failed(&client, err.kind.as_str());
        }
        result.map_err(to_rpc)
    }

    /// Which clients receive which vendor `_meta` keys (none by default).
    pub fn with_vendor_meta(mut self, vendor_meta: VendorMeta) -> Self {
        self.vendor_meta = Arc::new(vendor_meta);
        self
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rmcp::service::{NotificationContext, RoleClient};
    use rmcp::{ClientHandler, ServiceExt};
    use toolgate_core::audit::NoAudit;
    use toolgate_core::{ExecutorLimits, TracingSink};

    use super::*;

    struct Watcher(tokio::sync::mpsc::UnboundedSender<()>);

    impl ClientHandler for Watcher {
        async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
            let _ = self.0.send(());
        }
    }

    fn echo(name: &str) -> Arc<dyn toolgate_core::Tool> {
        struct Named(ToolSpec);
        #[async_trait::async_trait]
        impl toolgate_core::Tool for Named {
            fn spec(&self) -> &ToolSpec {
                &self.0
            }
            async fn call(
                &self,
                _ctx: &CallContext,
                _args: Value,
            ) -> Result<toolgate_core::ToolOutput, ToolError> {
                Ok(toolgate_core::ToolOutput::text("ok"))
            }
        }
        Arc::new(Named(ToolSpec::new(
            name,
            "test",
            json!({"type": "object"}),
        )))
    }

    #[test]
    fn pages_follow_their_cursor_and_list_a_repeated_key_once() {
        let items: Vec<(String, usize)> = (0..PAGE + 5)
            .rev()
            .map(|i| (format!("k{i:04}"), i))
            .chain([("k0000".to_owned(), usize::MAX)])
            .collect();
        fn key(t: &(String, usize)) -> &str {
            &t.0
        }
        let (first, cursor) = page(items.clone(), key, None);
        assert_eq!(first.len(), PAGE);
        assert_eq!(
            first[0],
            ("k0000".to_owned(), 0),
            "the first listed keeps its key"
        );
        let cursor = cursor.expect("a next page");
        assert_eq!(cursor, format!("k{:04}", PAGE - 1));
        let (rest, next) = page(
            items,
            key,
            Some(PaginatedRequestParams::default().with_cursor(Some(cursor))),
        );
        let rest: Vec<usize> = rest.into_iter().map(|t| t.1).collect();
        assert_eq!(rest, (PAGE..PAGE + 5).collect::<Vec<_>>());
        assert_eq!(next, None);
    }

    #[test]
    fn vendor_meta_reaches_only_the_clients_named_for_its_prefix() {
        let rules = VendorMeta::new([
            ("openai/", vec!["openai*", "chatgpt*"]),
            ("acme/", vec!["acme-agent"]),
        ])
        .expect("rules");
        let meta = serde_json::from_value(json!({
            "openai/outputTemplate": "ui://widget.html",
            "acme/color": "red",
            "io.example/other": 1,
        }))
        .expect("map");
        let client = |name: &str| ClientInfo {
            name: name.into(),
            version: None,
        };
        let seen = |rules: &VendorMeta, who: Option<&ClientInfo>| {
            rules
                .for_client(who)
                .filter(&meta)
                .map(|m| Value::Object(m.0))
        };
        assert_eq!(
            seen(&rules, Some(&client("OpenAI-MCP"))),
            Some(json!({"openai/outputTemplate": "ui://widget.html"}))
        );
        assert_eq!(
            seen(&rules, Some(&client("acme-agent"))),
            Some(json!({"acme/color": "red"}))
        );
        // Anyone else, or a client that did not say who it is: nothing vendor-specific.
        assert_eq!(seen(&rules, Some(&client("claude-ai"))), None);
        assert_eq!(seen(&rules, Some(&client("acme-agent-2"))), None);
        assert_eq!(seen(&rules, None), None);
        assert_eq!(
            seen(&VendorMeta::default(), Some(&client("openai-mcp"))),
            None
        );
    }

    #[tokio::test]
    async fn sessions_hear_when_the_registry_changes() {
        let registry = Arc::new(Registry::new());
        let executor = Executor::new(
            Arc::new(TracingSink),
            Arc::new(NoAudit),
            ExecutorLimits::default(),
        );
        let (server_io, client_io) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(McpAdapter::new(registry.clone(), executor).serve(server_io));
        let (tx, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let client = Watcher(tx).serve(client_io).await.expect("client");
        let _server = server.await.expect("join").expect("server");
        // The watcher starts on `initialized`, which the client sends right after the
        // handshake; give it a moment before the first change.
        tokio::time::sleep(Duration::from_millis(100)).await;
        registry.register(echo("first")).expect("register");
        tokio::time::timeout(Duration::from_secs(5), heard.recv())
            .await
            .expect("list_changed after a registration")
            .expect("open");
        assert!(registry.unregister(toolgate_core::Owner::Everyone, "first"));
        tokio::time::timeout(Duration::from_secs(5), heard.recv())
            .await
            .expect("list_changed after an unregistration")
            .expect("open");
        client.cancel().await.expect("close");
    }
}
