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
//! Layout: this module supervises (connect, list, vet, register, reconnect, ping);
//! `config.rs` is what an upstream is; `connect.rs` connects (stdio or HTTP) and
//! initializes; `listing.rs` lists, vets and registers its tools; [`tool`] is an
//! upstream tool and its call; `routes` finds the caller of what an
//! upstream says mid-call; `sessions` the per-tenant or per-principal sessions calls
//! run in; [`personal`] each caller's own credential (stored, or [`exchange`]d for
//! the caller's own token, RFC 8693); [`overrides`] renamed tools and fixed arguments.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::catalog::Catalog;
use crate::pace::PerSecond;
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
use toolgate_core::backoff::Backoff;
use toolgate_core::spec::is_valid_tool_name;
use toolgate_core::{
    CallContext, Client, Content, Effects, ErrorKind, Owner, ProgressSink, Registry, Risk, Tool,
    ToolError, ToolOutput, ToolSpec,
};

mod config;
mod connect;
pub mod exchange;
mod listing;
pub mod overrides;
pub(crate) mod pages;
pub mod personal;
mod routes;
mod sessions;
pub mod tool;

pub use config::*;
use connect::*;
use listing::*;
pub use overrides::ToolOverride;
pub use personal::{Personal, PersonalCredential, PersonalCredentials};
use routes::*;
use sessions::*;
pub use tool::UpstreamTool;

/// How often a connected upstream is pinged, and how long it has to answer before the
/// connection is dropped and made again (an HTTP upstream that vanished closes nothing).
const PING_EVERY: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// An upstream's `list_changed` notifications are followed at most this often: those
/// that come sooner wait, and all that came meanwhile make one listing. An upstream that
/// announced a change after every listing kept a core busy re-listing it (with a log line
/// each time).
const RELIST_AT_MOST_EVERY: Duration = Duration::from_secs(1);
/// How long an upstream has to answer `initialize`.
const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes a stdio upstream may write before it has answered `initialize`. A server that
/// writes more is not speaking MCP (a flood of garbage): the attempt fails at once rather
/// than parsing it for as long as it writes.
const MAX_BYTES_BEFORE_INITIALIZE: u64 = 1 << 20;
/// Longest wait between reconnection attempts.
/// Reconnecting: 250 ms, doubling up to 30 s, jittered.
const RECONNECT: Backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(30));

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
    /// Tools of the last listing that were not offered, and why.
    pub notes: Vec<String>,
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
        notes: Vec::new(),
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

/// A client span for `method` sent to an upstream (MCP conventions: `{method} {target}`
/// for a tool or prompt, `{method}` alone for a resource, whose URI is an attribute), and
/// the `traceparent` to send with it so the upstream's spans join the trace: the span's own when traces are recorded, else
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
        rpc.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
    );
    if span.is_disabled() {
        return (span, ctx.traceparent());
    }
    use toolgate_core::context::{exported_traceparent, set_remote_parent};
    // A resource's URI is an attribute, never in the name: the conventions keep span
    // names low in cardinality.
    let name = match method {
        "tools/call" => {
            span.record("gen_ai.tool.name", target);
            span.record("gen_ai.operation.name", "execute_tool");
            format!("{method} {target}")
        }
        "resources/read" => {
            span.record("mcp.resource.uri", target);
            method.to_owned()
        }
        "prompts/get" => {
            span.record("gen_ai.prompt.name", target);
            format!("{method} {target}")
        }
        _ => format!("{method} {target}"),
    };
    span.record("otel.name", name);
    let parent = match under {
        Under::Call => ctx.span.clone(),
        Under::Request => ctx.parent.clone(),
    };
    set_remote_parent(&span, parent);
    let traceparent = exported_traceparent(&span).or_else(|| ctx.traceparent());
    (span, traceparent)
}

/// Marks `client` failed by an upstream's answer, as the MCP conventions say: an error
/// answer by its JSON-RPC code (also `rpc.response.status_code`, its message the status
/// description), a request that got no answer as `upstream`.
pub(crate) fn answer_failed(client: &tracing::Span, err: &ServiceError) {
    let ServiceError::McpError(e) = err else {
        toolgate_core::context::span_failed(client, ErrorKind::Upstream.as_str());
        return;
    };
    let code = e.code.0.to_string();
    toolgate_core::context::span_failed(client, &code);
    client.record("rpc.response.status_code", code.as_str());
    client.record("otel.status_description", e.message.as_ref());
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
    let mut attempt = 0;
    // Tools stay registered while their upstream is away: calls then fail as `upstream`
    // errors (the connection they hold is closed) until a new connection replaces them.
    let mut registered = Vec::new();
    // Per-tenant (or per-principal) sessions for calls, kept across reconnections, and
    // the changes to the upstream's lists they hear of.
    let (pool_changed_tx, mut pool_changed) = tokio::sync::mpsc::channel(1);
    let pool = SessionPool::new(&config, catalog.clone(), pool_changed_tx);
    // A definition approved by a person: list again, to offer it.
    let mut approvals = config.vetting.0.as_ref().map(|v| v.approvals());
    // When the next listing may come, on this connection or the next (see `Drift`).
    let mut drift = Drift::default();
    let mut next_listing = tokio::time::Instant::now();
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
                // A person's approval is listed at once.
                let mut at_once = false;
                let end = 'listing: loop {
                    // The pause before the next listing may be minutes (see `Drift`): the
                    // upstream is pinged meanwhile, as while it is quiet.
                    if !std::mem::take(&mut at_once) {
                        loop {
                            tokio::select! {
                                _ = shutdown.cancelled() => break 'listing End::Shutdown,
                                _ = &mut ended => break 'listing End::Closed,
                                _ = tokio::time::sleep_until(next_listing) => break,
                                _ = tokio::time::sleep(PING_EVERY) => {
                                    if !answers_ping(&peer).await {
                                        break 'listing End::Unresponsive;
                                    }
                                }
                            }
                        }
                    }
                    // A closed service cannot list: this fails (the tools listed before
                    // stay, failing as upstream errors) and the connection's end is
                    // noticed next.
                    let listing = rediscover(
                        &config,
                        &peer,
                        &registry,
                        &routes,
                        &pool,
                        &mut registered,
                        &mut drift,
                    );
                    match listing.await {
                        Ok(notes) => {
                            attempt = 0;
                            status.send_modify(|s| s.notes = notes.into_vec());
                        }
                        Err(err) => {
                            // Read to its bounds, maybe: as costly as a listing that
                            // changed, and as soon listed again.
                            drift.failed();
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
                    let source = config.source();
                    let listed = catalog.refresh(&source, &registered, &peer);
                    if let Err(err) = listed.await {
                        tracing::warn!(upstream = %config.name, error = %err, "could not list the upstream's resources and prompts");
                        status.send_modify(|s| {
                            s.last_error = Some(format!("listing resources and prompts: {err}"))
                        });
                    }
                    // The upstream says its lists changed: list again, but not sooner
                    // than RELIST_AT_MOST_EVERY after the last time (longer while its
                    // definitions keep changing).
                    next_listing = tokio::time::Instant::now() + drift.pause();
                    loop {
                        tokio::select! {
                            _ = shutdown.cancelled() => break 'listing End::Shutdown,
                            _ = &mut ended => break 'listing End::Closed,
                            Some(()) = changed.recv() => break,
                            Some(()) = pool_changed.recv() => break,
                            Ok(()) = async {
                                match approvals.as_mut() {
                                    Some(approved) => approved.changed().await,
                                    None => std::future::pending().await,
                                }
                            } => {
                                at_once = true;
                                continue 'listing;
                            }
                            _ = tokio::time::sleep(PING_EVERY) => {
                                if !answers_ping(&peer).await {
                                    break 'listing End::Unresponsive;
                                }
                            }
                        }
                    }
                };
                catalog.remove(config.owner, &config.name);
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
        attempt += 1;
        let wait = RECONNECT.delay(attempt);
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
