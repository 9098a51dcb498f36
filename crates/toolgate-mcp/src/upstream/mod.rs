//! Upstream MCP servers federated into the registry: toolgate as an MCP *client*.
//!
//! Each configured upstream gets a supervisor task ([`start`]) that connects (a child
//! process over stdio, or Streamable HTTP), lists every page of its tools, and registers
//! each as an [`UpstreamTool`] named `<prefix><tool>` (prefix `<upstream>__` unless
//! configured). Calls then go through the executor like any tool's: audit, events,
//! deadline. Its resources, resource templates and prompts are filed in the
//! [`Catalog`](crate::catalog::Catalog) the MCP front door serves them from. The
//! supervisor re-lists on the upstream's `list_changed` notifications (tools, resources,
//! prompts), pings the upstream every 30 s (10 s to answer), and reconnects with
//! exponential backoff and jitter when the connection ends; meanwhile the upstream's tools
//! stay listed and their calls fail as `upstream` errors (its resources and prompts are
//! not listed until it is back). An upstream that fails to
//! start or dies never blocks start-up or other tools. On shutdown its tools are removed
//! and its connection ended (a child process is killed).
//!
//! Faithful relaying: content (text, image, audio, embedded resources, resource links),
//! structured content and `_meta` come back as the upstream sent them; progress the
//! upstream reports reaches the caller's progress sink; its log messages, sampling and
//! elicitation requests reach the caller's client when they can be tied to the call (see
//! `Routes`); the call's cancellation (the
//! caller's, or the executor's deadline) sends `notifications/cancelled` upstream. An
//! `isError` result is a [`ToolError`] of kind `upstream` carrying the upstream's text;
//! JSON-RPC errors map by code (-32602 → `invalid_arguments`, others → `upstream`).
//!
//! Layout: this module supervises (connect, list, vet, register, reconnect);
//! [`tool`] is an upstream tool and its call; `routes` finds the caller of what an
//! upstream says mid-call; `sessions` the per-tenant or per-principal sessions calls
//! run in; [`personal`] each caller's own credential (stored, or [`exchange`]d for
//! the caller's own token, RFC 8693); [`overrides`] renamed tools and fixed arguments.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::catalog::Catalog;
use async_trait::async_trait;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientCapabilities, ClientConfig, ClientRequest, ContentBlock, ErrorCode, ErrorData,
    Implementation, JsonRpcMessage, NumberOrString, ProgressToken, RequestId, ServerNotification,
    ServerResult,
};
use rmcp::service::{
    InboundStreamOrigin, NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleClient,
    RunningService, RxJsonRpcMessage, TxJsonRpcMessage,
};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, Transport};
use rmcp::{ClientHandler, ServiceError, ServiceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolgate_core::spec::is_valid_tool_name;
use toolgate_core::{
    CallContext, Client, Content, Effects, ErrorKind, Owner, ProgressSink, Registry, Risk, Tool,
    ToolError, ToolOutput, ToolSpec,
};

pub mod exchange;
pub mod overrides;
pub mod personal;
mod routes;
mod sessions;
pub mod tool;

pub use overrides::ToolOverride;
pub use personal::{Personal, PersonalCredential, PersonalCredentials};
use routes::*;
use sessions::*;
pub use tool::UpstreamTool;

/// How often a connected upstream is pinged, and how long it has to answer before the
/// connection is dropped and made again (an HTTP upstream that vanished closes nothing).
const PING_EVERY: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an upstream has to answer `initialize`.
const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes a stdio upstream may write before it has answered `initialize`. A server that
/// writes more is not speaking MCP (a flood of garbage): the attempt fails at once rather
/// than parsing it for as long as it writes.
const MAX_BYTES_BEFORE_INITIALIZE: u64 = 1 << 20;
/// Longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// One upstream MCP server, as the operator configured it.
#[derive(Clone, Debug)]
pub struct UpstreamConfig {
    /// `^[A-Za-z0-9_.-]+$`; names the upstream in logs, errors and the default prefix.
    pub name: String,
    /// Put before each upstream tool's name; `<name>__` when `None`, nothing when empty.
    pub prefix: Option<String>,
    pub transport: UpstreamTransport,
    /// Globs over the upstream's own tool names: only these (all when empty)…
    pub allow: Vec<String>,
    /// …and never these.
    pub deny: Vec<String>,
    /// Deadline of a call when the caller asks for none, and the longest one allowed.
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    /// Each progress report of a call moves its deadline to at least this long from
    /// then, up to `max_timeout` ([`ToolSpec::progress_extends`]).
    pub progress_extends: Option<Duration>,
    /// Who sees its tools: every tenant (the operator's upstreams) or the tenant that
    /// added it.
    pub owner: Owner,
    /// Whether log messages and requests that the transport does not tie to a call go
    /// to the one call in flight, when exactly one is (see [`Routes`]).
    pub relay_unattributed: bool,
    /// Whose MCP session an HTTP upstream's calls run in (stdio upstreams: always one
    /// shared session, their one process).
    pub sessions: SessionScope,
    /// What a changed or suspicious tool definition does; `None`: the owning tenant's
    /// policy says (tenant upstreams).
    pub pin: Option<crate::vetting::PinMode>,
    /// Who vets its tool definitions before they are offered (none: all are).
    pub vetting: crate::vetting::Vetting,
    /// Per tool (by its name at the upstream): another name, description, and
    /// arguments fixed or defaulted by the gateway.
    pub overrides: BTreeMap<String, ToolOverride>,
    /// Where each principal's own credential for this upstream is kept, when calls go
    /// out with the caller's credential rather than the upstream's (HTTP only; each
    /// principal then has a session of its own).
    pub personal: Personal,
}

/// Whose MCP session the calls of an HTTP upstream run in. What an upstream keeps per
/// session (a counter, a login, a cart) is seen by everyone who shares the session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionScope {
    /// One session for every caller: the supervisor's own, which lists the tools.
    Shared,
    /// One session per tenant (the default for the operator's HTTP upstreams): no state
    /// an upstream keeps per session crosses tenants.
    #[default]
    PerTenant,
    /// One session per principal.
    PerPrincipal,
}

/// How to reach an upstream. Its `Debug` form names the keys of `env` and `headers` but
/// never their values, nor the bearer token.
#[derive(Clone)]
pub enum UpstreamTransport {
    /// A child process speaking MCP on stdin/stdout. Its environment is only `env` (plus
    /// `PATH`), never the gateway's own.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint, with static headers and an optional bearer token.
    /// `client` is the HTTP client to reach it with (a tenant's upstream gets one that
    /// connects only to vetted addresses); a plain one when `None`.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
        bearer: Option<String>,
        client: Option<reqwest::Client>,
    },
}

impl std::fmt::Debug for UpstreamTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &env.keys().collect::<Vec<_>>())
                .field("cwd", cwd)
                .finish(),
            UpstreamTransport::Http {
                url,
                headers,
                bearer,
                ..
            } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .field("bearer", &bearer.as_ref().map(|_| "***"))
                .finish(),
        }
    }
}

impl UpstreamConfig {
    pub fn prefix(&self) -> String {
        self.prefix
            .clone()
            .unwrap_or_else(|| format!("{}__", self.name))
    }
}

/// Starts one supervisor per upstream; they run until `shutdown` is cancelled, then
/// unregister their tools and end their connections (child processes are killed).
pub fn start(
    upstreams: Vec<UpstreamConfig>,
    registry: Arc<Registry>,
    catalog: Arc<Catalog>,
    shutdown: CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    upstreams
        .into_iter()
        .map(|config| spawn(config, registry.clone(), catalog.clone(), shutdown.clone()).task)
        .collect()
}

/// An upstream's name: `^[A-Za-z0-9_.-]{1,32}$`.
pub fn is_valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// One upstream's supervisor, started by [`spawn`].
pub struct Supervised {
    /// Ends after `shutdown`, once the upstream's tools are unregistered and its
    /// connection ended.
    pub task: tokio::task::JoinHandle<()>,
    /// What the supervisor last saw.
    pub status: tokio::sync::watch::Receiver<Status>,
}

/// An upstream's connection as its supervisor last saw it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Status {
    pub state: State,
    /// The gateway's names of the upstream's registered tools.
    pub tools: Vec<String>,
    /// Why the last connection attempt or listing failed, if it did.
    pub last_error: Option<String>,
    /// When `state` last changed.
    #[serde(skip)]
    pub since: std::time::SystemTime,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Not connected yet, or connecting again after the connection ended.
    Connecting,
    Connected,
}

/// Starts one upstream's supervisor (see [`start`]).
pub fn spawn(
    config: UpstreamConfig,
    registry: Arc<Registry>,
    catalog: Arc<Catalog>,
    shutdown: CancellationToken,
) -> Supervised {
    let (status, seen) = tokio::sync::watch::channel(Status {
        state: State::Connecting,
        tools: Vec::new(),
        last_error: None,
        since: std::time::SystemTime::now(),
    });
    Supervised {
        task: tokio::spawn(supervise(config, registry, catalog, shutdown, status)),
        status: seen,
    }
}

/// Which span a request to an upstream is the child of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Under {
    /// The call's own (`execute_tool`, a federated tool call).
    Call,
    /// The request's (its server span, or the caller's): a relayed request, which has no
    /// span of the call's own.
    Request,
}

/// A client span for `method` sent to an upstream (MCP conventions: `{method} {target}`,
/// with the tool, resource or prompt it names), and the `traceparent` to send with it so
/// the upstream's spans join the trace: the span's own when traces are recorded, else
/// the call's. Disabled, and free, when the trace is not recorded.
pub(crate) fn client_span(
    ctx: &CallContext,
    under: Under,
    method: &str,
    target: &str,
) -> (tracing::Span, Option<String>) {
    if !toolgate_core::context::recorded(ctx.span.as_ref()) {
        return (tracing::Span::none(), ctx.traceparent());
    }
    let span = tracing::info_span!(
        target: "toolgate::otel",
        "mcp_client",
        otel.name = tracing::field::Empty,
        otel.kind = "client",
        mcp.method.name = method,
        gen_ai.tool.name = tracing::field::Empty,
        gen_ai.operation.name = tracing::field::Empty,
        mcp.resource.uri = tracing::field::Empty,
        gen_ai.prompt.name = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if span.is_disabled() {
        return (span, ctx.traceparent());
    }
    use toolgate_core::context::{exported_traceparent, set_remote_parent};
    span.record("otel.name", format!("{method} {target}"));
    match method {
        "tools/call" => {
            span.record("gen_ai.tool.name", target);
            span.record("gen_ai.operation.name", "execute_tool");
        }
        "resources/read" => {
            span.record("mcp.resource.uri", target);
        }
        "prompts/get" => {
            span.record("gen_ai.prompt.name", target);
        }
        _ => {}
    }
    let parent = match under {
        Under::Call => ctx.span.clone(),
        Under::Request => ctx.parent.clone(),
    };
    set_remote_parent(&span, parent);
    let traceparent = exported_traceparent(&span).or_else(|| ctx.traceparent());
    (span, traceparent)
}

fn report(status: &tokio::sync::watch::Sender<Status>, state: State, error: Option<String>) {
    status.send_modify(|s| {
        if s.state != state {
            s.since = std::time::SystemTime::now();
        }
        s.state = state;
        if error.is_some() || state == State::Connected {
            s.last_error = error;
        }
    });
}

async fn supervise(
    config: UpstreamConfig,
    registry: Arc<Registry>,
    catalog: Arc<Catalog>,
    shutdown: CancellationToken,
    status: tokio::sync::watch::Sender<Status>,
) {
    let mut backoff = FIRST_BACKOFF;
    // Tools stay registered while their upstream is away: calls then fail as `upstream`
    // errors (the connection they hold is closed) until a new connection replaces them.
    let mut registered = Vec::new();
    // Per-tenant (or per-principal) sessions for calls, kept across reconnections.
    let pool = SessionPool::new(&config, catalog.clone());
    // A definition approved by a person: list again, to offer it.
    let mut approvals = config.vetting.0.as_ref().map(|v| v.approvals());
    loop {
        let (changed_tx, mut changed) = tokio::sync::mpsc::channel(1);
        let routes = Routes::new(config.relay_unattributed);
        let connected = tokio::select! {
            _ = shutdown.cancelled() => break,
            connected = connect(&config, routes.clone(), changed_tx, catalog.clone()) => connected,
        };
        match connected {
            // The child process (stdio) lives as long as this connection: dropping it
            // kills the process.
            Ok((service, _child)) => {
                report(&status, State::Connected, None);
                let cancel = service.cancellation_token();
                let peer = service.peer().clone();
                let ended = service.waiting();
                tokio::pin!(ended);
                // List now and on every `list_changed`, ping now and then, until the
                // connection ends, stops answering, or the gateway stops.
                // Tools kept from the previous connection were listed as unavailable;
                // they are news again once listed on this one, declarations unchanged
                // or not.
                let mut carried = !registered.is_empty();
                let end = 'listing: loop {
                    // A closed service cannot list: this fails (the tools listed before
                    // stay, failing as upstream errors) and the connection's end is
                    // noticed next.
                    match rediscover(&config, &peer, &registry, &routes, &pool, &mut registered)
                        .await
                    {
                        Ok(()) => backoff = FIRST_BACKOFF,
                        Err(err) => {
                            tracing::warn!(upstream = %config.name, error = %err, "could not list the upstream's tools");
                            status.send_modify(|s| {
                                s.last_error = Some(format!("listing tools: {err}"))
                            });
                        }
                    }
                    status.send_modify(|s| s.tools.clone_from(&registered));
                    if std::mem::take(&mut carried) {
                        registry.touch(config.owner);
                    }
                    let listed = catalog.refresh(&config, &registered, &peer);
                    if let Err(err) = listed.await {
                        tracing::warn!(upstream = %config.name, error = %err, "could not list the upstream's resources and prompts");
                        status.send_modify(|s| {
                            s.last_error = Some(format!("listing resources and prompts: {err}"))
                        });
                    }
                    loop {
                        tokio::select! {
                            _ = shutdown.cancelled() => break 'listing End::Shutdown,
                            _ = &mut ended => break 'listing End::Closed,
                            Some(()) = changed.recv() => continue 'listing,
                            Ok(()) = async {
                                match approvals.as_mut() {
                                    Some(approved) => approved.changed().await,
                                    None => std::future::pending().await,
                                }
                            } => continue 'listing,
                            _ = tokio::time::sleep(PING_EVERY) => {
                                if !answers_ping(&peer).await {
                                    break 'listing End::Unresponsive;
                                }
                            }
                        }
                    }
                };
                catalog.remove(&config);
                if !registered.is_empty() {
                    // The tools stay listed, now unavailable.
                    registry.touch(config.owner);
                }
                match end {
                    End::Closed => {}
                    End::Unresponsive => {
                        tracing::warn!(upstream = %config.name, "upstream stopped answering pings");
                        cancel.cancel();
                        let _ = ended.await;
                    }
                    End::Shutdown => {
                        cancel.cancel();
                        let _ = ended.await;
                        break;
                    }
                }
                tracing::warn!(upstream = %config.name, "upstream connection ended; reconnecting");
                report(
                    &status,
                    State::Connecting,
                    Some("the connection ended".into()),
                );
            }
            Err(err) => {
                tracing::warn!(upstream = %config.name, error = %err, "could not connect to the upstream");
                report(&status, State::Connecting, Some(err));
            }
        }
        let wait = jitter(backoff);
        backoff = (backoff * 2).min(MAX_BACKOFF);
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
    }
    unregister(&config, &registry, &mut registered);
}

/// Why a connection's supervision ended.
enum End {
    Shutdown,
    Closed,
    Unresponsive,
}

async fn answers_ping(peer: &Peer<RoleClient>) -> bool {
    let ping = ClientRequest::PingRequest(rmcp::model::PingRequest {
        method: Default::default(),
        extensions: Default::default(),
    });
    matches!(
        tokio::time::timeout(PING_TIMEOUT, peer.send_request(ping)).await,
        Ok(Ok(_))
    )
}

/// Between half and all of `backoff`, so many gateways do not reconnect in step.
fn jitter(backoff: Duration) -> Duration {
    let nanos = u64::try_from(backoff.as_nanos()).unwrap_or(u64::MAX);
    let random = uuid::Uuid::new_v4().as_u128() as u64;
    Duration::from_nanos(nanos / 2 + random % (nanos / 2).max(1))
}

async fn connect(
    config: &UpstreamConfig,
    routes: Arc<Routes>,
    list_changed: tokio::sync::mpsc::Sender<()>,
    catalog: Arc<Catalog>,
) -> Result<
    (
        RunningService<RoleClient, Handler>,
        Option<tokio::process::Child>,
    ),
    String,
> {
    // Sampling is deprecated by SEP-2577 (2026-07-28); upstreams before it still use it.
    #[allow(deprecated)]
    let handler = Handler {
        // Sampling and elicitation are relayed to the calling client, when it can answer.
        info: ClientConfig::new(
            ClientCapabilities::builder()
                .enable_sampling()
                .enable_elicitation()
                .build(),
            Implementation::new("toolgate", env!("CARGO_PKG_VERSION")),
        ),
        routes: routes.clone(),
        list_changed,
        catalog,
        owner: config.owner,
        upstream: config.name.clone(),
    };
    match &config.transport {
        UpstreamTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).env_clear().envs(env);
            if !env.contains_key("PATH")
                && let Some(path) = std::env::var_os("PATH")
            {
                cmd.env("PATH", path);
            }
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            cmd.stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true);
            let mut child = cmd
                .spawn()
                .map_err(|e| format!("cannot start {command:?}: {e}"))?;
            if let Some(stderr) = child.stderr.take() {
                log_stderr(config.name.clone(), stderr);
            }
            let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                return Err("the child's stdio was not piped".into());
            };
            let budget = Arc::new(std::sync::atomic::AtomicU64::new(
                MAX_BYTES_BEFORE_INITIALIZE,
            ));
            let stdout = Capped {
                inner: stdout,
                left: budget.clone(),
            };
            let transport = Relaying {
                inner: AsyncRwTransport::new_client(stdout, stdin),
                routes,
            };
            let service = tokio::time::timeout(INITIALIZE_TIMEOUT, handler.serve(transport))
                .await
                .map_err(|_| format!("no answer to initialize within {INITIALIZE_TIMEOUT:?}"))?
                .map_err(|e| format!("initialize failed: {e}"))?;
            // Initialized: from now on the upstream may write as much as its results need.
            budget.store(u64::MAX, std::sync::atomic::Ordering::Relaxed);
            Ok((service, Some(child)))
        }
        UpstreamTransport::Http {
            url,
            headers,
            bearer,
            client,
        } => {
            let mut http = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            if let Some(token) = bearer {
                http = http.auth_header(token.clone());
            }
            for (name, value) in headers {
                let name = http::HeaderName::try_from(name.as_str())
                    .map_err(|e| format!("header {name:?}: {e}"))?;
                let value = http::HeaderValue::try_from(value.as_str())
                    .map_err(|e| format!("header {name}: {e}"))?;
                http.custom_headers.insert(name, value);
            }
            let service = tokio::time::timeout(
                INITIALIZE_TIMEOUT,
                handler.serve(Relaying {
                    inner: StreamableHttpClientTransport::with_client(
                        Traced(client.clone().unwrap_or_else(operator_client)),
                        http,
                    ),
                    routes,
                }),
            )
            .await
            .map_err(|_| format!("no answer to initialize within {INITIALIZE_TIMEOUT:?}"))?
            .map_err(|e| initialize_failure(&e))?;
            Ok((service, None))
        }
    }
}

/// Why `initialize` failed over HTTP, down to the socket: rmcp's error ends its `source()`
/// chain at the HTTP client's error (its `Client(E)` is not marked as a source), so
/// "error sending request" would reach the operator without "connection refused".
fn initialize_failure(err: &rmcp::service::ClientInitializeError) -> String {
    use std::error::Error as _;
    let mut text = format!("initialize failed: {}", toolgate_core::error::chain(err));
    if let rmcp::service::ClientInitializeError::TransportError { error, .. } = err
        && let Some(rmcp::transport::streamable_http_client::StreamableHttpError::Client(http)) =
            error.error.downcast_ref::<rmcp::transport::streamable_http_client::StreamableHttpError<reqwest::Error>>()
        && let Some(cause) = http.source()
    {
        text.push_str(" (");
        text.push_str(&toolgate_core::error::chain(cause));
        text.push(')');
    }
    text
}

/// An HTTP client for upstream MCP servers that sends a tool call's W3C trace context
/// (its `_meta.traceparent`, set by [`UpstreamTool`]) as the `traceparent` header too, so
/// HTTP-level tracing on the upstream's side joins the caller's trace.
#[derive(Clone)]
struct Traced(reqwest::Client);

impl Traced {
    fn with_trace(
        message: &rmcp::model::ClientJsonRpcMessage,
        mut headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> HashMap<http::HeaderName, http::HeaderValue> {
        use rmcp::model::RequestParamsMeta;
        if let rmcp::model::JsonRpcMessage::Request(request) = message
            && let ClientRequest::CallToolRequest(call) = &request.request
            && let Some(value) = call
                .params
                .traceparent()
                .and_then(|t| http::HeaderValue::from_str(t).ok())
        {
            headers.insert(http::HeaderName::from_static("traceparent"), value);
        }
        headers
    }
}

impl rmcp::transport::streamable_http_client::StreamableHttpClient for Traced {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<
        rmcp::transport::streamable_http_client::StreamableHttpPostResponse,
        rmcp::transport::streamable_http_client::StreamableHttpError<Self::Error>,
    > {
        let headers = Self::with_trace(&message, custom_headers);
        self.0
            .post_message(uri, message, session_id, auth_header, headers)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<
        rmcp::transport::streamable_http_client::StreamableHttpPostResponse,
        rmcp::transport::streamable_http_client::StreamableHttpError<Self::Error>,
    > {
        let headers = Self::with_trace(&message, custom_headers);
        self.0
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                headers,
                max_sse_event_size,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<(), rmcp::transport::streamable_http_client::StreamableHttpError<Self::Error>> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<
        futures::stream::BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
        rmcp::transport::streamable_http_client::StreamableHttpError<Self::Error>,
    > {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }
}

/// A child's stdout that fails once more than its budget has been read (see
/// [`MAX_BYTES_BEFORE_INITIALIZE`]); a budget of `u64::MAX` is unlimited.
struct Capped<R> {
    inner: R,
    left: Arc<std::sync::atomic::AtomicU64>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Capped<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::sync::atomic::Ordering;
        let left = self.left.load(Ordering::Relaxed);
        if left == 0 {
            return std::task::Poll::Ready(Err(std::io::Error::other(
                "the upstream wrote more than 1 MiB that is not MCP before answering initialize",
            )));
        }
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if left != u64::MAX && matches!(polled, std::task::Poll::Ready(Ok(()))) {
            let read = (buf.filled().len() - before) as u64;
            self.left
                .store(left.saturating_sub(read), Ordering::Relaxed);
        }
        polled
    }
}

fn log_stderr(upstream: String, stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncBufReadExt;
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let line: String = line.chars().take(2000).collect();
            tracing::info!(upstream = %upstream, line, "upstream stderr");
        }
    });
}

/// Lists every page of the upstream's tools and puts those the allow/deny lists admit in
/// place of the ones registered before, in one step; a name taken by another tool is
/// reported, never overwritten.
async fn rediscover(
    config: &UpstreamConfig,
    peer: &Peer<RoleClient>,
    registry: &Registry,
    routes: &Arc<Routes>,
    pool: &Option<Arc<SessionPool>>,
    registered: &mut Vec<String>,
) -> Result<(), ServiceError> {
    let tools = peer.list_all_tools().await?;
    // Configurations are checked before they get here; should a bad glob slip through,
    // nothing is registered rather than a `deny` that denies nothing.
    let Some(admitted) = admitted(&config.allow, &config.deny) else {
        tracing::error!(upstream = %config.name, "an allow or deny glob is invalid; no tool of this upstream is offered");
        unregister(config, registry, registered);
        return Ok(());
    };
    let prefix = config.prefix();
    // Tools of other sources the same callers see: a description naming one may be
    // steering the model to it.
    let others: Vec<String> = match &config.vetting.0 {
        None => Vec::new(),
        Some(_) => {
            let ours: std::collections::HashSet<&String> = registered.iter().collect();
            let seen = match config.owner {
                Owner::Tenant(tenant) => registry.list(tenant),
                Owner::Everyone => registry.list(toolgate_core::TenantId(uuid::Uuid::nil())),
            };
            seen.iter()
                .map(|t| t.spec().name.clone())
                .filter(|n| !ours.contains(n))
                .collect()
        }
    };
    let mut found: Vec<Arc<dyn Tool>> = Vec::new();
    // One skeleton per name in this listing: a look-alike of a tool offered before (or
    // listed earlier) is refused, even while that tool is withheld for approval.
    let mut looks: HashMap<String, String> = registered
        .iter()
        .map(|n| (toolgate_core::registry::skeleton(n), n.clone()))
        .collect();
    for tool in tools {
        let remote = tool.name.to_string();
        if !admitted(&remote) {
            continue;
        }
        let applied = config.overrides.get(&remote).cloned();
        let name = format!(
            "{prefix}{}",
            applied
                .as_ref()
                .and_then(|o| o.name.as_deref())
                .unwrap_or(&remote)
        );
        if !is_valid_tool_name(&name) {
            // Logged escaped and cut: an upstream's name must not write log lines of its own.
            let shown: String = name.chars().take(128).collect();
            tracing::warn!(upstream = %config.name, tool = ?shown, "skipped an upstream tool whose name is not valid here");
            continue;
        }
        let look = toolgate_core::registry::skeleton(&name);
        match looks.get(&look) {
            Some(other) if other != &name => {
                tracing::warn!(upstream = %config.name, tool = %name, like = %other, "refused an upstream tool whose name could pass for another");
                continue;
            }
            _ => {
                looks.insert(look, name.clone());
            }
        }
        let mut spec = spec_for(config, &name, &tool);
        if let Some(o) = &applied {
            if let Some(description) = &o.description {
                spec.description.clone_from(description);
            }
            spec.input_schema = o.schema(&spec.input_schema);
        }
        if let Some(vet) = &config.vetting.0 {
            let definition = crate::vetting::definition(&tool);
            let offered = vet
                .vet(
                    &crate::vetting::Definition {
                        owner: config.owner,
                        upstream: config.name.clone(),
                        tool: remote.clone(),
                        exported: name.clone(),
                        hash: toolgate_core::audit::hash_json(&definition),
                        findings: crate::vetting::findings(
                            tool.description.as_deref().unwrap_or_default(),
                            &others,
                        ),
                        definition,
                    },
                    config.pin,
                )
                .await;
            if !offered {
                tracing::warn!(upstream = %config.name, tool = %name, "upstream tool withheld: its definition awaits approval");
                continue;
            }
        }
        found.push(Arc::new(UpstreamTool {
            spec,
            upstream: config.name.clone(),
            remote,
            applied,
            peer: peer.clone(),
            routes: routes.clone(),
            pool: pool.clone(),
        }));
    }
    let previous = std::mem::take(registered);
    for (name, result) in registry.replace(config.owner, &previous, found) {
        match result {
            Ok(()) => registered.push(name),
            Err(err) => {
                tracing::warn!(upstream = %config.name, tool = ?name, error = %err, "upstream tool not registered")
            }
        }
    }
    tracing::info!(upstream = %config.name, tools = registered.len(), "upstream tools registered");
    Ok(())
}

fn unregister(config: &UpstreamConfig, registry: &Registry, registered: &mut Vec<String>) {
    registry.replace(config.owner, registered, Vec::new());
    registered.clear();
}

/// The HTTP client of an operator's upstream (tenant upstreams bring their own, which
/// follows no redirect at all). A redirect is followed only within the upstream's own
/// origin (scheme, host and port), at most five times: the upstream's configured headers
/// and token go along with every request, and must never reach another server.
fn operator_client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let policy = reqwest::redirect::Policy::custom(|attempt| {
                let same_origin = attempt
                    .previous()
                    .first()
                    .is_some_and(|first| first.origin() == attempt.url().origin());
                if !same_origin {
                    let to = attempt.url().origin().ascii_serialization();
                    attempt.error(format!(
                        "refused a redirect to another origin ({to}): the upstream's credentials would follow it"
                    ))
                } else if attempt.previous().len() > 5 {
                    attempt.error("more than five redirects")
                } else {
                    attempt.follow()
                }
            });
            reqwest::Client::builder()
                .redirect(policy)
                .connect_timeout(std::time::Duration::from_secs(10))
                .build()
                // Not `unwrap_or_default`: the default client follows any redirect. A
                // builder fails only where the TLS backend cannot start, and then
                // `Client::default()` panics the same way.
                .expect("an HTTP client with a redirect policy builds")
        })
        .clone()
}

/// Why `pattern` is not a valid tool-name glob, if it is not.
pub fn glob_problem(pattern: &str) -> Option<String> {
    globset::Glob::new(pattern).err().map(|e| e.to_string())
}

/// Whether a source's tool of this (remote, unprefixed) name is offered: matched by an
/// `allow` glob (any name when there are none) and by no `deny` glob. `None` when a
/// glob is invalid.
pub fn admitted(allow: &[String], deny: &[String]) -> Option<impl Fn(&str) -> bool + use<>> {
    let (Ok(allow_set), Ok(deny_set)) = (globs(allow), globs(deny)) else {
        return None;
    };
    let any = allow.is_empty();
    Some(move |name: &str| (any || allow_set.is_match(name)) && !deny_set.is_match(name))
}

fn globs(patterns: &[String]) -> Result<globset::GlobSet, globset::Error> {
    let mut set = globset::GlobSetBuilder::new();
    for pattern in patterns {
        set.add(globset::Glob::new(pattern)?);
    }
    set.build()
}

/// The gateway's declaration of an upstream tool. Risk follows the upstream's hints, read
/// the way the MCP specification defaults them (a tool that does not say it only reads is
/// taken to write, destructively, reaching the open world): read-only → low, destructive
/// → high, other writes → medium.
fn spec_for(config: &UpstreamConfig, name: &str, tool: &rmcp::model::Tool) -> ToolSpec {
    let hints = tool.annotations.as_ref();
    let read_only = hints.and_then(|a| a.read_only_hint).unwrap_or(false);
    let destructive = !read_only && hints.and_then(|a| a.destructive_hint).unwrap_or(true);
    let effects = Effects {
        writes: !read_only,
        destructive,
        idempotent: hints.and_then(|a| a.idempotent_hint).unwrap_or(false),
        open_world: hints.and_then(|a| a.open_world_hint).unwrap_or(true),
    };
    let risk = if read_only {
        Risk::Low
    } else if destructive {
        Risk::High
    } else {
        Risk::Medium
    };
    let mut spec = ToolSpec::new(
        name,
        tool.description.as_deref().unwrap_or_default(),
        Value::Object((*tool.input_schema).clone()),
    )
    .with_category(format!("upstream.{}", config.name))
    .with_risk(risk, effects)
    .with_timeouts(config.default_timeout, config.max_timeout)
    .with_progress_extension(config.progress_extends);
    if let Some(title) = tool
        .title
        .as_deref()
        .or_else(|| hints.and_then(|a| a.title.as_deref()))
    {
        spec = spec.with_title(title);
    }
    if let Some(output) = &tool.output_schema {
        spec = spec.with_output_schema(Value::Object((**output).clone()));
    }
    if let Some(meta) = &tool.meta {
        spec.vendor_meta = meta.0.clone();
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unreachable_http_upstream_is_reported_with_its_cause() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/mcp", closed.local_addr().expect("addr"));
        drop(closed);
        let config = UpstreamConfig {
            name: "gone".into(),
            prefix: None,
            transport: UpstreamTransport::Http {
                url,
                headers: BTreeMap::new(),
                bearer: None,
                client: None,
            },
            allow: Vec::new(),
            deny: Vec::new(),
            default_timeout: Duration::from_secs(5),
            max_timeout: Duration::from_secs(5),
            owner: Owner::Everyone,
            progress_extends: None,
            relay_unattributed: false,
            sessions: SessionScope::Shared,
            pin: None,
            vetting: Default::default(),
            overrides: Default::default(),
            personal: Default::default(),
        };
        let (list_changed, _) = tokio::sync::mpsc::channel(1);
        let Err(error) = connect(&config, Routes::new(false), list_changed, Catalog::new()).await
        else {
            panic!("connected to a closed port");
        };
        assert!(
            error.to_lowercase().contains("connection refused"),
            "the socket's cause is named: {error}"
        );
    }

    #[test]
    fn a_calls_traceparent_becomes_its_http_header() {
        use rmcp::model::RequestParamsMeta;
        let mut params = CallToolRequestParams::new("echo");
        params.set_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let message = rmcp::model::ClientJsonRpcMessage::request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            rmcp::model::NumberOrString::Number(1),
        );
        let headers = Traced::with_trace(&message, HashMap::new());
        assert_eq!(
            headers
                .get(&http::HeaderName::from_static("traceparent"))
                .and_then(|v| v.to_str().ok()),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
    }

    #[test]
    fn debug_output_never_shows_secrets() {
        let http = UpstreamTransport::Http {
            url: "https://mcp.example.com/mcp".into(),
            headers: [("x-api-key".to_owned(), "hunter2".to_owned())].into(),
            bearer: Some("s3cr3t-token".into()),
            client: None,
        };
        let stdio = UpstreamTransport::Stdio {
            command: "server".into(),
            args: vec![],
            env: [("TOKEN".to_owned(), "s3cr3t-env".to_owned())].into(),
            cwd: None,
        };
        let shown = format!("{http:?} {stdio:?}");
        for secret in ["hunter2", "s3cr3t-token", "s3cr3t-env"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(
            shown.contains("x-api-key") && shown.contains("TOKEN"),
            "{shown}"
        );
    }
}
