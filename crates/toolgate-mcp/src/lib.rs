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
//! - this file: the [`ServerHandler`] (listing, calls, relayed reads, prompts and
//!   completions, subscriptions).
//! - [`sessions`]: rmcp's session store and session manager over core's
//!   [`SessionStore`](toolgate_core::stores::SessionStore) seam: sessions any instance
//!   can take over, caps per principal and tenant, dormant sessions let go of, SSE
//!   resumption and polling.
//! - [`upstream`]: upstream MCP servers (stdio and HTTP) federated into the registry.
//! - [`tenant_upstreams`]: tenants' own upstreams (MCP servers and HTTP APIs) kept in
//!   step with the store on every instance, their credentials sealed, their addresses
//!   vetted.
//! - [`catalog`], [`relay`]: upstream resources and prompts, and relaying to them.
//! - [`vetting`]: tool definitions checked and pinned (rug-pull defence); [`pins`]: the
//!   pins kept in the store, changes recorded, approvals applied.

pub mod catalog;
pub mod pins;
pub mod relay;
pub mod sessions;
pub mod tenant_upstreams;
pub mod upstream;
pub mod vetting;

use std::sync::Arc;

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
    /// The `traceparent` of the server's span for this request, when traces are
    /// exported: the call continues it (rather than the client's own `traceparent`, which
    /// that span already continues).
    pub traceparent: Option<String>,
    /// The JWT the caller signed in with, for upstreams that exchange it (RFC 8693).
    pub subject_token: Option<toolgate_core::SubjectToken>,
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
    /// Upstreams' resources and prompts.
    catalog: Arc<catalog::Catalog>,
    /// This session's resource subscriptions (see [`McpAdapter::for_session`]).
    held: Arc<catalog::Held>,
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
            held: catalog::Held::new(catalog.clone()),
            catalog,
        }
    }

    /// The handler for a new session: shares everything but the session's own state
    /// (its log level). rmcp's service factory calls this once per session.
    pub fn for_session(&self) -> Self {
        Self {
            log_level: Arc::default(),
            held: catalog::Held::new(self.catalog.clone()),
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
        self.held = catalog::Held::new(catalog.clone());
        self.catalog = catalog;
        self
    }

    /// The upstreams whose resources and prompts this request's caller may see.
    fn visible_upstreams(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<Vec<Arc<catalog::Entry>>, ErrorData> {
        let caller = caller(context)?;
        let scoped = caller.toolset.scope(self.registry.clone(), &caller.auth);
        Ok(self.catalog.visible(&caller.auth, &scoped))
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

    /// Which clients receive which vendor `_meta` keys (none by default).
    pub fn with_vendor_meta(mut self, vendor_meta: VendorMeta) -> Self {
        self.vendor_meta = Arc::new(vendor_meta);
        self
    }
}

/// Which clients see which vendor-specific `_meta` entries of tools and results.
///
/// Tools declare vendor metadata once, keyed `vendor/name` (`openai/outputTemplate`); a
/// rule names a key prefix and the clients, by `clientInfo.name` glob (case-insensitive),
/// that asked for it. An entry reaches a client only when a rule for its prefix matches
/// that client: deny by default, so a client never receives another vendor's keys and a
/// client that did not identify itself receives none.
#[derive(Clone, Debug, Default)]
pub struct VendorMeta {
    rules: Vec<(String, globset::GlobSet)>,
}

impl VendorMeta {
    /// Rules as `(key prefix, client name globs)`.
    pub fn new<P, G>(rules: impl IntoIterator<Item = (P, G)>) -> Result<Self, globset::Error>
    where
        P: Into<String>,
        G: IntoIterator,
        G::Item: AsRef<str>,
    {
        let mut built = Vec::new();
        for (prefix, globs) in rules {
            let mut set = globset::GlobSetBuilder::new();
            for glob in globs {
                set.add(
                    globset::GlobBuilder::new(glob.as_ref())
                        .case_insensitive(true)
                        .build()?,
                );
            }
            built.push((prefix.into(), set.build()?));
        }
        Ok(Self { rules: built })
    }

    /// The vendor prefixes `client` may see, matched once for a whole listing or call.
    pub fn for_client(&self, client: Option<&ClientInfo>) -> VendorPrefixes<'_> {
        VendorPrefixes(client.map_or_else(Vec::new, |client| {
            self.rules
                .iter()
                .filter(|(_, clients)| clients.is_match(&client.name))
                .map(|(prefix, _)| prefix.as_str())
                .collect()
        }))
    }

    /// `meta` as `client` may see it, for one result: no matching at all when empty.
    pub fn filter_for(
        &self,
        client: Option<&ClientInfo>,
        meta: &serde_json::Map<String, Value>,
    ) -> Option<rmcp::model::MetaObject> {
        if meta.is_empty() {
            return None;
        }
        self.for_client(client).filter(meta)
    }
}

/// The vendor `_meta` prefixes one client may see (none for an unidentified client).
pub struct VendorPrefixes<'a>(Vec<&'a str>);

impl VendorPrefixes<'_> {
    /// The entries of `meta` under these prefixes; `None` when there are none.
    pub fn filter(&self, meta: &serde_json::Map<String, Value>) -> Option<rmcp::model::MetaObject> {
        if self.0.is_empty() || meta.is_empty() {
            return None;
        }
        let seen: serde_json::Map<String, Value> = meta
            .iter()
            .filter(|(key, _)| self.0.iter().any(|p| key.starts_with(p)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        (!seen.is_empty()).then_some(rmcp::model::MetaObject(seen))
    }
}

/// One page of `items` in the order of `key`, after the request's cursor (the last key of
/// the page before), and the cursor of the next page. Items whose key repeats an earlier
/// one's are left out: a URI two upstreams list is read from the first.
fn page<T>(
    mut items: Vec<T>,
    key: impl Fn(&T) -> &str,
    request: Option<PaginatedRequestParams>,
) -> (Vec<T>, Option<String>) {
    items.sort_by(|a, b| key(a).cmp(key(b)));
    items.dedup_by(|b, a| key(a) == key(b));
    if let Some(cursor) = request.and_then(|r| r.cursor) {
        items.retain(|t| key(t) > cursor.as_str());
    }
    let next = (items.len() > PAGE).then(|| key(&items[PAGE - 1]).to_owned());
    items.truncate(PAGE);
    (items, next)
}

/// An upstream's failure to answer a relayed request: its own JSON-RPC error as it sent
/// it; anything else (the connection is gone, the answer made no sense) as an internal
/// error naming the upstream.
fn upstream_error(upstream: &str, err: rmcp::ServiceError) -> ErrorData {
    match err {
        rmcp::ServiceError::McpError(data) => data,
        other => {
            ErrorData::internal_error(format!("upstream {upstream} did not answer: {other}"), None)
        }
    }
}

/// An upstream's JSON-RPC error as the executor carries it (its code kept).
fn from_rpc(data: ErrorData) -> ToolError {
    ToolError::new(ErrorKind::Upstream, data.message.to_string())
        .with_details(json!({"code": data.code.0, "data": data.data}))
}

/// A relayed operation's error as the client gets it: an upstream's JSON-RPC error as
/// it was, the gateway's own (rate limited, forbidden, denied, timed out…) with its kind.
fn to_rpc(err: ToolError) -> ErrorData {
    let details = err.details.clone().unwrap_or(Value::Null);
    if let Some(code) = details["code"].as_i64().and_then(|c| i32::try_from(c).ok()) {
        let data = Some(details["data"].clone()).filter(|d| !d.is_null());
        return ErrorData::new(ErrorCode(code), err.message, data);
    }
    let code = match err.kind {
        ErrorKind::InvalidArguments | ErrorKind::NotFound => ErrorCode::INVALID_PARAMS,
        ErrorKind::Forbidden | ErrorKind::Denied => ErrorCode::INVALID_REQUEST,
        _ => ErrorCode::INTERNAL_ERROR,
    };
    ErrorData::new(code, err.message.clone(), Some(json!({ "error": err })))
}

fn caller(context: &RequestContext<RoleServer>) -> Result<McpCaller, ErrorData> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<McpCaller>())
        .cloned()
        // Unreachable behind the server's authentication layer; refuse rather than guess.
        .ok_or_else(|| ErrorData::new(ErrorCode::INVALID_REQUEST, "not authenticated", None))
}

/// The rmcp `Tool` for a spec: the core's MCP rendering (annotations derived from risk
/// and effects), typed.
pub fn mcp_tool(spec: &ToolSpec) -> Result<Tool, serde_json::Error> {
    serde_json::from_value(declarations::mcp(spec))
}

/// The client as it names itself: `clientInfo` of the session (legacy protocol versions),
/// or in the request's `_meta` (2026-07-28). A request outside any session that names none
/// (2026-07-28, or any version with `mcp.sessions` off) is known by its `User-Agent`, as on
/// REST; never by `peer_info()`, which rmcp fills with its own name for such a request.
fn client_info(context: &RequestContext<RoleServer>) -> Option<ClientInfo> {
    let headers = context
        .extensions
        .get::<http::request::Parts>()
        .map(|parts| &parts.headers);
    let in_session = headers.is_some_and(|h| h.contains_key(HEADER_SESSION_ID));
    let info = if in_session {
        context.client_info()
    } else {
        context.meta.client_info()
    };
    match info {
        Some(info) => Some(ClientInfo {
            name: info.name.chars().take(128).collect(),
            version: Some(info.version.chars().take(64).collect()),
        }),
        None => headers
            .and_then(|h| h.get(http::header::USER_AGENT))
            .and_then(|v| v.to_str().ok())
            .map(ClientInfo::user_agent),
    }
}

/// A failed call as the model should read it: the error as JSON (kind, message,
/// suggestion, every schema violation), in a result flagged `isError`.
pub fn error_result(err: &ToolError) -> CallToolResult {
    let body = json!({ "error": err });
    CallToolResult::error(vec![ContentBlock::text(body.to_string())])
}

fn success_result(done: Completed, has_output_schema: bool) -> CallToolResult {
    let content = done.output.content.into_iter().map(content_block).collect();
    let mut result = CallToolResult::success(content);
    if has_output_schema {
        result.structured_content = done.output.structured;
    }
    result
}

/// One piece of output as MCP content. Resources and links travel as the JSON they came
/// in (from an upstream server); one that is not valid MCP becomes text saying so.
fn content_block(content: Content) -> ContentBlock {
    match content {
        Content::Text { text } => ContentBlock::text(text),
        Content::Image { data, mime_type } => ContentBlock::image(data, mime_type),
        Content::Audio { data, mime_type } => {
            json_block(json!({"type": "audio", "data": data, "mimeType": mime_type}))
        }
        Content::Resource { resource } => {
            json_block(json!({"type": "resource", "resource": resource}))
        }
        Content::ResourceLink { link } => {
            let mut block = json!({"type": "resource_link"});
            if let (Some(block), Value::Object(fields)) = (block.as_object_mut(), link) {
                block.extend(fields);
            }
            json_block(block)
        }
    }
}

fn json_block(block: Value) -> ContentBlock {
    serde_json::from_value(block)
        .unwrap_or_else(|e| ContentBlock::text(format!("[content not valid MCP: {e}]")))
}

/// Tells one session's client whenever the tools, or the upstreams' resources and
/// prompts, its tenant sees change (any change when the tenant is unknown), until the
/// session ends.
fn watch_lists(
    registry: Arc<Registry>,
    catalog: Arc<catalog::Catalog>,
    tenant: Option<TenantId>,
    peer: Peer<RoleServer>,
) {
    let mut tools = ListWatch::new(registry.changes(), move || {
        tenant.map(|t| registry.generation(t))
    });
    let mut lists = ListWatch::new(catalog.changes().subscribe(), move || {
        tenant.map(|t| catalog.changes().generation(t))
    });
    tokio::spawn(async move {
        let mut alive = tokio::time::interval(SESSION_CHECK);
        loop {
            tokio::select! {
                changed = tools.next() => {
                    if !changed || peer.notify_tool_list_changed().await.is_err() {
                        break;
                    }
                }
                changed = lists.next() => {
                    if !changed
                        || peer.notify_resource_list_changed().await.is_err()
                        || peer.notify_prompt_list_changed().await.is_err()
                    {
                        break;
                    }
                }
                _ = alive.tick() => {
                    if peer.is_transport_closed() {
                        break;
                    }
                }
            }
        }
    });
}

/// Changes to one kind of list a tenant sees: `changes` wakes on every change, to anyone's
/// list; `generation` (the tenant's count of changes, `None` when the tenant is unknown)
/// tells which were the tenant's.
struct ListWatch<F> {
    changes: tokio::sync::watch::Receiver<u64>,
    generation: F,
    seen: Option<u64>,
}

impl<F: Fn() -> Option<u64>> ListWatch<F> {
    fn new(mut changes: tokio::sync::watch::Receiver<u64>, generation: F) -> Self {
        changes.mark_unchanged();
        let seen = generation();
        Self {
            changes,
            generation,
            seen,
        }
    }

    /// Waits for the next change to the tenant's list; `false` when changes can no longer
    /// come.
    async fn next(&mut self) -> bool {
        loop {
            if self.changes.changed().await.is_err() {
                return false;
            }
            if let (Some(now), Some(last)) = ((self.generation)(), self.seen.as_mut()) {
                if now == *last {
                    continue;
                }
                *last = now;
            }
            return true;
        }
    }
}

/// The relaying handlers (and `tools/call`'s rare approval step) box their work: rmcp runs
/// every request in a task holding its dispatch future, which is as large as the largest
/// handler's, and moves it whole several times. Measured with `bench/instructions.sh`
/// (gateway without audit, stateless): memcpy per `tools/call` fell from 157k to 36k
/// instructions (bytes), 370k to 248k instructions in all.
/// The request methods of the MCP versions spoken here: a request rmcp hands to
/// `on_custom_request` under one of these names had params it could not decode.
const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "subscriptions/listen",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/list",
    "tasks/result",
    "tasks/cancel",
];

/// The protocol version the `/mcp` server answers an `initialize` asking for `requested`
/// with: rmcp's negotiation under [`McpAdapter`]'s settings (every version rmcp knows is
/// supported), which echoes a known version that still has the `initialize` handshake
/// and otherwise offers the newest one that has it.
pub fn negotiated_version(requested: &str) -> String {
    use rmcp::model::ProtocolVersion;
    ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .find(|v| v.as_str() == requested && v.has_initialize())
        .map_or(ProtocolVersion::LATEST_WITH_INITIALIZE, Clone::clone)
        .as_str()
        .to_owned()
}

/// Whether `method` is a request method of the MCP versions spoken here.
pub fn is_known_method(method: &str) -> bool {
    KNOWN_METHODS.contains(&method)
}

impl ServerHandler for McpAdapter {
    #[allow(deprecated)] // logging: deprecated by SEP-2577 (2026-07-28), used before it
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_logging()
                .enable_completions()
                .build(),
        )
        .with_server_info(
            Implementation::new("toolgate", env!("CARGO_PKG_VERSION")).with_title("toolgate"),
        )
        .with_instructions(
            "Tools available to your credentials. Every call is authorized, time-limited and audited; \
             a failed call returns an isError result whose text is a JSON error with kind, message, \
             suggestion and, for invalid arguments, every schema violation.",
        )
    }

    /// What rmcp could not decode as a request it knows. A known method lands here when
    /// its params do not fit it: JSON-RPC calls that -32602 (invalid params), not -32601
    /// (rmcp's default, which told a client with a typo in `tools/call`'s params that
    /// `tools/call` did not exist).
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let method = request.method.as_str();
        if is_known_method(method) {
            Err(ErrorData::invalid_params(
                format!("the params of {method} do not match its schema"),
                Some(json!({ "method": method })),
            ))
        } else {
            Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("no method named {method:?}"),
                None,
            ))
        }
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let tenant = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<McpCaller>())
            .map(|caller| caller.auth.tenant);
        watch_lists(
            self.registry.clone(),
            self.catalog.clone(),
            tenant,
            context.peer,
        );
    }

    /// The lowest level of upstream log messages this session hears from its calls.
    #[allow(deprecated)] // logging is deprecated by SEP-2577 (2026-07-28), still used before it
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.log_level.set(request.level);
        Ok(())
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let upstreams = self.visible_upstreams(&context)?;
        let resources = upstreams.iter().flat_map(|u| u.resources.iter().cloned());
        let (resources, next_cursor) = page(resources.collect(), |r| &r.uri, request);
        let mut listed = ListResourcesResult::with_all_items(resources);
        listed.next_cursor = next_cursor;
        Ok(listed)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let upstreams = self.visible_upstreams(&context)?;
        let templates = upstreams.iter().flat_map(|u| u.templates.iter().cloned());
        let (templates, next_cursor) = page(templates.collect(), |t| &t.uri_template, request);
        let mut listed = ListResourceTemplatesResult::with_all_items(templates);
        listed.next_cursor = next_cursor;
        Ok(listed)
    }

    async fn read_resource(
        &self,
        mut request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        Box::pin(async move {
            let upstream = self.resource_upstream(&context, &request.uri)?;
            let args = json!({"uri": request.uri, "upstream": upstream.upstream});
            // The upstream connection is shared: the caller's `_meta` (a progress token, say)
            // stays here, where it means something.
            request.meta = None;
            let target = request.uri.clone();
            self.relay(
                &context,
                ("resources/read", &target),
                args,
                &upstream,
                request,
                |peer, request| async move { peer.read_resource_once(request).await },
            )
            .await
        })
        .await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Box::pin(async move {
            let upstream = self.resource_upstream(&context, &request.uri)?;
            if !upstream.subscribable {
                return Err(ErrorData::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!(
                        "upstream {} does not offer subscriptions to its resources",
                        upstream.upstream
                    ),
                    Some(json!({ "uri": request.uri })),
                ));
            }
            self.held
                .subscribe(
                    &upstream,
                    &request.uri,
                    catalog::Listener::Session(context.peer.clone()),
                )
                .await
                .map_err(|e| upstream_error(&upstream.upstream, e))
        })
        .await
    }

    /// Protocol 2026-07-28's `subscriptions/listen`: changes to the caller's tools,
    /// resources and prompts, and resource updates. Which URIs a caller
    /// may watch is decided in [`Self::listen`], where the caller is known; a URI it cannot
    /// see is acknowledged and never updated, as a URI that does not exist.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::builder();
        if requested.tools_list_changed == Some(true) {
            accepted = accepted.tools_list_changed();
        }
        if requested.resources_list_changed == Some(true) {
            accepted = accepted.resources_list_changed();
        }
        if requested.prompts_list_changed == Some(true) {
            accepted = accepted.prompts_list_changed();
        }
        if let Some(uris) = &requested.resource_subscriptions {
            accepted = accepted.resource_subscriptions(uris.iter().cloned());
        }
        Some(accepted.build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        Box::pin(async move {
            let request = context.request_context();
            let tenant = caller(request)?.auth.tenant;
            let sink = context.sink().clone();
            let held = catalog::Held::new(self.catalog.clone());
            let upstreams = self.visible_upstreams(request)?;
            for uri in context.accepted().resource_subscriptions.iter().flatten() {
                let Some(upstream) = catalog::serving(&upstreams, uri) else {
                    continue;
                };
                if !upstream.subscribable {
                    continue;
                }
                let listener = catalog::Listener::Stream(sink.clone());
                if let Err(err) = held.subscribe(&upstream, uri, listener).await {
                    tracing::warn!(upstream = %upstream.upstream, uri, error = %err, "could not subscribe upstream for a listen stream");
                }
            }
            let accepted = context.accepted();
            let on = |flag: Option<bool>| flag == Some(true);
            let (resources_on, prompts_on) = (
                on(accepted.resources_list_changed),
                on(accepted.prompts_list_changed),
            );
            let mut tools_on = on(accepted.tools_list_changed);
            let mut lists_on = resources_on || prompts_on;
            let registry = &self.registry;
            let mut tools = ListWatch::new(registry.changes(), || Some(registry.generation(tenant)));
            let changes = self.catalog.changes();
            let mut lists = ListWatch::new(changes.subscribe(), || Some(changes.generation(tenant)));
            loop {
                tokio::select! {
                    () = context.cancelled() => break,
                    changed = tools.next(), if tools_on => {
                        tools_on = changed && sink.notify_tool_list_changed().await.is_ok();
                    }
                    changed = lists.next(), if lists_on => {
                        lists_on = changed
                            && (!resources_on || sink.notify_resource_list_changed().await.is_ok())
                            && (!prompts_on || sink.notify_prompt_list_changed().await.is_ok());
                    }
                }
            }
            // `held` drops here: its upstream subscriptions are given back.
            Ok(())
        })
        .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.held.unsubscribe(&request.uri);
        Ok(())
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let upstreams = self.visible_upstreams(&context)?;
        let prompts = upstreams.iter().flat_map(|u| u.named_prompts());
        let (prompts, next_cursor) = page(prompts.collect(), |p| &p.name, request);
        let mut listed = ListPromptsResult::with_all_items(prompts);
        listed.next_cursor = next_cursor;
        Ok(listed)
    }

    async fn get_prompt(
        &self,
        mut request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        Box::pin(async move {
            let (upstream, remote) = self.prompt_upstream(&context, &request.name)?;
            let args = json!({"name": request.name, "arguments": request.arguments,
                              "upstream": upstream.upstream});
            request.name = remote;
            request.meta = None;
            let target = request.name.clone();
            self.relay(
                &context,
                ("prompts/get", &target),
                args,
                &upstream,
                request,
                |peer, request| async move { peer.get_prompt_once(request).await },
            )
            .await
        })
        .await
    }

    /// Argument completion for an upstream's prompt or resource template, relayed to the
    /// upstream that offers it; one that offers no completion completes nothing.
    async fn complete(
        &self,
        mut request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        Box::pin(async move {
            let upstream = match &mut request.r#ref {
                Reference::Prompt(prompt) => {
                    let (upstream, remote) = self.prompt_upstream(&context, &prompt.name)?;
                    prompt.name = remote;
                    upstream
                }
                Reference::Resource(resource) => {
                    let upstreams = self.visible_upstreams(&context)?;
                    upstreams
                        .iter()
                        .find(|u| u.has_template(&resource.uri))
                        .cloned()
                        .or_else(|| catalog::serving(&upstreams, &resource.uri))
                        .ok_or_else(|| {
                            ErrorData::invalid_params(
                                "no resource template or resource with this URI is available to your credentials",
                                Some(json!({ "uri": resource.uri })),
                            )
                        })?
                }
                other => {
                    return Err(ErrorData::invalid_params(
                        "completion is offered for prompts (ref/prompt) and resource templates (ref/resource)",
                        serde_json::to_value(other).ok(),
                    ));
                }
            };
            if !upstream.completes {
                return Ok(CompleteResult::default());
            }
            let args = json!({"ref": request.r#ref, "argument": request.argument.name,
                              "upstream": upstream.upstream});
            request.meta = None;
            let target = request.argument.name.clone();
            self.relay(&context, ("completion/complete", &target), args, &upstream, request, |peer, request| async move {
                peer.complete(request).await
            })
            .await
        })
        .await
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = caller(&context)?;
        let tools = caller
            .toolset
            .scope(self.registry.clone(), &caller.auth)
            .list();
        let (tools, next_cursor) = page(tools, |t| &t.spec().name, request);
        let client = client_info(&context);
        let vendor = self.vendor_meta.for_client(client.as_ref());
        let tools = tools
            .iter()
            .map(|t| {
                let mut tool = mcp_tool(t.spec())?;
                if !t.available() {
                    let note = "[unavailable: its upstream server is reconnecting; calls fail until it is back] ";
                    tool.description = Some(format!("{note}{}", tool.description.unwrap_or_default()).into());
                }
                tool.meta = vendor.filter(&t.spec().vendor_meta);
                Ok(tool)
            })
            .collect::<Result<Vec<Tool>, serde_json::Error>>()
            .map_err(|e| ErrorData::internal_error(format!("tool rendering: {e}"), None))?;
        let mut page = ListToolsResult::with_all_items(tools);
        page.next_cursor = next_cursor;
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = caller(&context)?;
        let tools = caller.toolset.scope(self.registry.clone(), &caller.auth);
        let known = tools.get(&request.name);
        let client = client_info(&context);
        // The server span's trace when one is exported; else the caller's W3C trace: in
        // `_meta` (SEP-414), else the HTTP `traceparent` header.
        let traceparent = caller
            .traceparent
            .clone()
            .or_else(|| context.meta.get_traceparent().map(str::to_owned))
            .or_else(|| {
                context
                    .extensions
                    .get::<http::request::Parts>()
                    .and_then(|parts| parts.headers.get("traceparent"))
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            });
        let mut ctx = CallContext::new(caller.auth.clone(), Adapter::Mcp)
            .with_client(client.clone())
            .with_trace(traceparent.as_deref());
        if let Some(id) = caller.request_id {
            ctx = ctx.with_request_id(id);
        }
        ctx.subject_token = caller.subject_token;
        // `notifications/cancelled` for this request cancels rmcp's token.
        ctx.cancel = context.ct.child_token();
        // An upstream tool's log messages, sampling and elicitation reach this client. Log
        // messages at the level of the session (`logging/setLevel`), or for a 2026-07-28
        // request (its protocol version in `_meta`), at the level in its `_meta`.
        let level = if context.meta.protocol_version().is_some() {
            Arc::new(relay::LogLevel::per_request(context.meta.log_level()))
        } else {
            self.log_level.clone()
        };
        let (peer, mut said) =
            relay::CallerPeer::new(context.peer.clone(), context.id.clone(), level);
        ctx = ctx.with_peer(Arc::new(peer));
        if let Some(token) = context.meta.get_progress_token() {
            ctx = ctx.with_progress(said.progress(token));
        }
        // `_meta: {"toolgate/cache": "no-cache" | "no-store"}`, as REST's Cache-Control.
        if let Some(mode) = context
            .meta
            .get(CACHE_META)
            .and_then(Value::as_str)
            .and_then(toolgate_core::cache::CacheMode::from_cache_control)
        {
            ctx = ctx.with_cache(mode);
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        // Unknown tools go through the executor too: the attempt is audited like any call.
        let retry = ctx.clone();
        // Progress and log messages go out as they come, and all of them before the result.
        // Boxed: rmcp holds each request's handler future in a task of its own and moves
        // it; the executor's call inline made that future, and every tools/call's
        // copies, tens of kilobytes larger (docs/BENCHMARKS.md).
        let mut outcome = said
            .along(Box::pin(self.executor.call(
                &tools,
                ctx,
                &request.name,
                args.clone(),
            )))
            .await;
        if let Err(err) = &outcome
            && err.kind == ErrorKind::ApprovalRequired
            && let Some(approval) =
                Box::pin(self.ask_user(&caller.auth, &context, &request.name, err)).await
        {
            // The user decided: the call again, presenting the decision (a new call id).
            let mut again = retry.with_approval(Some(approval));
            again.call_id = toolgate_core::CallId::new();
            outcome = said
                .along(Box::pin(self.executor.call(
                    &tools,
                    again,
                    &request.name,
                    args,
                )))
                .await;
        }
        match (outcome, known) {
            (Ok(done), Some(tool)) => {
                let mut meta = self
                    .vendor_meta
                    .filter_for(client.as_ref(), &done.output.vendor_meta);
                if let Some(status) = done.cache {
                    meta.get_or_insert_with(Default::default)
                        .insert(CACHE_META.into(), status.as_str().into());
                }
                let mut result = success_result(done, tool.spec().output_schema.is_some());
                result.meta = meta;
                Ok(result.into())
            }
            (Ok(done), None) => Ok(success_result(done, false).into()),
            (Err(err), None) if err.kind == ErrorKind::NotFound => Err(ErrorData::invalid_params(
                err.message,
                Some(json!({ "tool": request.name })),
            )),
            (Err(err), _) => Ok(error_result(&err).into()),
        }
    }
}

impl McpAdapter {
    /// Runs a request relayed to an upstream (`resources/read`, `prompts/get`,
    /// `completion/complete`) through the executor's [`Executor::relay`]: admitted,
    /// authorized, under the upstream's deadline, cancelled with the request, audited.
    ///
    /// `(method, target)` names it (`resources/read` and the URI, `prompts/get` and the
    /// prompt). The upstream request (`params`, handed to `send` with the upstream's
    /// connection) gets a client span of its own under the request's server span, and
    /// carries the `traceparent` in `_meta` so the upstream's spans join the trace.
    async fn relay<P, T, F>(
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
        let traceparent = caller
            .traceparent
            .clone()
            .or_else(|| context.meta.get_traceparent().map(str::to_owned));
        let mut ctx = CallContext::new(caller.auth.clone(), Adapter::Mcp)
            .with_client(client_info(context))
            .with_trace(traceparent.as_deref());
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
        let operation = async move { sent.await.map_err(|e| from_rpc(upstream_error(&name, e))) };
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
        if let Err(err) = &result {
            toolgate_core::context::span_failed(&client, err.kind.as_str());
        }
        result.map_err(to_rpc)
    }

    /// Asks the client's user to approve or deny a held call, when the client supports
    /// form elicitation and the tenant lets callers decide their own calls. Returns the
    /// approval once decided (either way); `None` leaves the call held.
    async fn ask_user(
        &self,
        auth: &AuthContext,
        context: &RequestContext<RoleServer>,
        tool: &str,
        err: &ToolError,
    ) -> Option<ApprovalId> {
        let desk = self.desk.as_ref()?;
        let approval: ApprovalId = err.held?.approval;
        if !context
            .peer
            .supported_elicitation_modes()
            .contains(&rmcp::service::ElicitationMode::Form)
            || !desk.may_self_approve(auth).await
        {
            return None;
        }
        let schema = rmcp::model::ElicitationSchema::builder()
            .required_bool("approve")
            .optional_string("reason")
            .description("Approve or deny this tool call")
            .build()
            .ok()?;
        let asked = context
            .peer
            .create_elicitation_with_timeout(
                rmcp::model::ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message: format!(
                        "The tool {tool} needs your approval before it runs (approval {approval}). Allow it?"
                    ),
                    requested_schema: schema,
                },
                Some(std::time::Duration::from_secs(300)),
            )
            .await
            .ok()?;
        let content = asked.content.unwrap_or_default();
        let (approve, reason) = match asked.action {
            rmcp::model::ElicitationAction::Accept => (
                content
                    .get("approve")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                content
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("decided by the user through their MCP client")
                    .to_owned(),
            ),
            rmcp::model::ElicitationAction::Decline => (false, "declined by the user".to_owned()),
            // Dismissed (or an action this version does not know): nobody decided; the
            // approval stays pending for someone else.
            _ => return None,
        };
        match desk.decide(auth, approval, approve, reason).await {
            Ok(()) => Some(approval),
            Err(e) => {
                tracing::warn!(approval_id = %approval, error = %e, "an elicited decision could not be recorded");
                None
            }
        }
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
