//! `/mcp`: rmcp's Streamable HTTP service behind the same bearer authentication as REST,
//! with each session bound to the principal that opened it, and the RFC 9728
//! protected-resource metadata that tells OAuth-capable clients where tokens come from.
//!
//! rmcp does the protocol: POST (JSON or SSE answers), GET (server-to-client stream),
//! DELETE (end of session), `MCP-Protocol-Version`, sessions for versions before
//! 2026-07-28 and stateless requests from 2026-07-28 on, `Host` and `Origin` checks, the
//! body limit and JSON-RPC errors for malformed input. This module only decides who may
//! reach it.

use toolgate_mcp::sessions::{self, CALLER, Sessions, StoredSessions, prune};

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolgate_core::auth::scopes;
use toolgate_core::{ErrorKind, ToolError};
use toolgate_mcp::{McpAdapter, McpCaller};
use toolgate_store::Store;
use tower::service_fn;

use crate::config::Config;
use crate::error::ApiError;
use crate::request_id::RequestId;
use crate::state::AppState;

mod answers;
mod probe;

use answers::{
    body_error, duplicate_id, parse_error, rpc_error, same_version, unauthorized, version_mismatch,
};
use probe::{Operation, Probe, Target, probe, server_span};

const SESSION_HEADER: &str = "mcp-session-id";
const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
/// Where clients find the metadata for the `/mcp` resource (RFC 9728 §3.1).
const METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";

/// The authentication layer's state, cloned for every request (hence one `Arc`).
#[derive(Clone)]
struct Guard(Arc<GuardInner>);

impl std::ops::Deref for Guard {
    type Target = GuardInner;

    fn deref(&self) -> &GuardInner {
        &self.0
    }
}

struct GuardInner {
    state: AppState,
    sessions: Arc<Sessions<Store>>,
    public_url: Option<String>,
    authorization_servers: Vec<String>,
    max_body_bytes: usize,
    /// `<session>\0<JSON-RPC id>` of every session request still being answered.
    in_flight: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

/// A session request's id, held while its answer is being sent.
struct InFlight {
    ids: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    key: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
    }
}

impl GuardInner {
    /// Claims request `id` of `session` while it is answered; `None` when a request of
    /// that session with that id is still in flight.
    fn claim(&self, session: &str, id: &serde_json::Value) -> Option<InFlight> {
        let key = format!("{session}\0{id}");
        let mut ids = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        ids.insert(key.clone()).then(|| InFlight {
            ids: self.in_flight.clone(),
            key,
        })
    }
}

/// The `/mcp` route and the protected-resource metadata. `shutdown` ends open SSE
/// streams and sessions when the gateway stops.
pub fn router(state: AppState, config: &Config, shutdown: CancellationToken) -> Router {
    let mcp = &config.mcp;
    let sessions = Arc::new(Sessions::new(state.store.clone()));
    // Polling needs the events in the store: a result sent while its client is away is
    // kept there (rmcp's memory drops a finished request's events).
    let durable_events = mcp
        .durable_streams
        .unwrap_or(state.store.is_shared() || mcp.sse_poll_after_ms.is_some());
    let retention = Duration::from_secs(mcp.session_retention_secs);
    prune(
        state.store.clone(),
        durable_events.then(|| Duration::from_secs(mcp.event_retention_secs)),
        mcp.sessions.then_some(retention),
        shutdown.clone(),
    );
    let mut transport = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(mcp.sessions)
        // A 2026-07-28 call whose result is all it sends is answered as one JSON body;
        // one that sends progress, log messages or requests first is streamed (rmcp
        // decides on the first message). Streamed, a result that waits for its audit
        // commit goes out as head and event, then the stream's end: two writes and
        // wake-ups where JSON needs one (docs/BENCHMARKS.md).
        .with_json_response(true)
        .with_sse_retry(Some(Duration::from_millis(mcp.sse_retry_ms)))
        .with_cancellation_token(shutdown.clone())
        .with_max_request_body_bytes(config.http.max_body_bytes)
        .with_allowed_origins(mcp.allowed_origins.clone())
        .enforce_origin_validation();
    transport.session_store = Some(sessions.clone());
    transport = if mcp.allowed_hosts.iter().any(|h| h == "*") {
        transport.disable_allowed_hosts()
    } else {
        transport.with_allowed_hosts(mcp.allowed_hosts.clone())
    };
    // One service shared by reference: rmcp's own `Service` impl clones it (and its
    // configuration: host and origin lists, a cancellation token) for every request, and
    // axum clones a route's service once more.
    let stored_sessions = Arc::new(StoredSessions::new(
        state.store.clone(),
        durable_events,
        Duration::from_millis(mcp.sse_retry_ms),
        mcp.sse_poll_after_ms.map(Duration::from_millis),
        sessions::SessionLimits {
            per_principal: mcp.max_sessions_per_principal,
            per_tenant: mcp.max_sessions_per_tenant,
            idle: Duration::from_secs(mcp.session_idle_secs),
            // A polled request runs on with no stream open: only `idle` is safe then.
            dormant: Duration::from_secs(if mcp.sse_poll_after_ms.is_some() {
                mcp.session_idle_secs
            } else {
                mcp.session_dormant_secs.min(mcp.session_idle_secs)
            }),
            touch_every: sessions::touch_every(retention),
        },
        state.mcp_sessions.clone(),
    ));
    stored_sessions.sweep(shutdown.clone());
    let adapter = McpAdapter::new(state.registry.clone(), state.executor.clone())
        .with_catalog(state.catalog.clone())
        .with_approval_desk(state.decisions.clone())
        .with_session_keeping(stored_sessions.clone())
        // Checked when the configuration was loaded.
        .with_vendor_meta(config.mcp.vendor_meta().unwrap_or_default());
    let service = Arc::new(StreamableHttpService::new(
        move || Ok(adapter.for_session()),
        stored_sessions.clone(),
        transport,
    ));
    let guard = Guard(Arc::new(GuardInner {
        state,
        sessions,
        public_url: mcp
            .public_url
            .as_ref()
            .map(|u| u.trim_end_matches('/').to_owned()),
        authorization_servers: mcp.authorization_servers.clone(),
        max_body_bytes: config.http.max_body_bytes,
        in_flight: Arc::default(),
    }));
    let mcp = service_fn(move |request: Request| {
        let service = service.clone();
        async move { Ok::<_, Infallible>(service.handle(request).await) }
    });
    Router::new()
        .route_service("/mcp", mcp)
        .layer(middleware::from_fn_with_state(guard.clone(), authenticate))
        .route("/.well-known/oauth-protected-resource", get(metadata))
        .route(METADATA_PATH, get(metadata))
        .with_state(guard)
}

impl Guard {
    fn base_url(&self, headers: &HeaderMap) -> String {
        if let Some(url) = &self.public_url {
            return url.clone();
        }
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        format!("http://{host}")
    }
}

/// Authenticates every `/mcp` request and keeps sessions with their owners.
async fn authenticate(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let (mut parts, body) = request.into_parts();
    let authenticator = &guard.state.authenticator;
    let caller = match authenticator.authenticate(&parts).await {
        Ok(caller) => caller,
        Err(err) => {
            if err.kind == ErrorKind::Unauthenticated {
                authenticator.security_event(&parts, &err.message);
            }
            return unauthorized(&guard, &parts.headers, err);
        }
    };
    let owner = (caller.auth.tenant, caller.auth.principal.id);
    let session = parts
        .headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session {
        let known = match guard.sessions.known(id).await {
            Ok(known) => known,
            Err(err) => return ApiError::from(err).into_response(),
        };
        if known.as_ref().is_some_and(|k| k.owner != owner) {
            tracing::warn!(
                tenant = %owner.0,
                principal = %owner.1,
                "refused an MCP session id presented by a principal other than its owner"
            );
            // The same answer as for an unknown session: another principal's session ids
            // are not confirmed to exist.
            return ApiError::from(ToolError::not_found("no such MCP session")).into_response();
        }
        if let Some(known) = &known
            && let Some(version) = parts.headers.get(PROTOCOL_VERSION_HEADER)
            && !same_version(version, &known.version)
        {
            return version_mismatch(version, &known.version);
        }
    }
    // A GET opens a long-lived stream (the session's, or a resumed one): counted against
    // the caller's caps, and ended when its credential stops being valid. So does a
    // `subscriptions/listen` POST (below).
    let mut stream_ticket = if parts.method == Method::GET {
        match guard
            .state
            .streams
            .admit(&caller.auth, toolgate_core::Adapter::Mcp)
        {
            Ok(ticket) => Some(ticket),
            Err(err) => return ApiError::from(err).into_response(),
        }
    } else {
        None
    };
    let authorization = parts.headers.get(header::AUTHORIZATION).cloned();
    let request_id = parts.extensions.get::<RequestId>().map(|r| r.0.to_string());
    let ending = parts.method == Method::DELETE;
    let json_post = parts.method == Method::POST
        && parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
    let answer = toolgate_mcp::Answer::default();
    parts.extensions.insert(McpCaller {
        auth: caller.auth,
        toolset: caller.toolset,
        request_id,
        continued: None,
        subject_token: caller.subject_token,
        answer: answer.clone(),
    });
    // A session request reusing the id of one still in flight would take its answer
    // (rmcp routes answers by id): the first caller's POST then waited for ever. The
    // second is refused instead.
    //
    // A JSON body is read here, whole (rmcp would read it anyway): one that fails to
    // arrive (too slow: `http.body_read_timeout_secs`, or cut off) or is too large is the
    // client's doing, answered 400 or 413 — rmcp answered a failed read with a 500.
    let mut in_flight = None;
    let mut operation = None;
    let body = if json_post {
        let bytes = match axum::body::to_bytes(body, guard.max_body_bytes).await {
            Ok(bytes) => bytes,
            Err(err) => return body_error(&err),
        };
        let probed = probe(&bytes);
        if let Some(id) = &session
            && let Some(request) = probed.as_ref().and_then(|p| p.id.as_ref())
        {
            match guard.claim(id, request) {
                Some(claim) => in_flight = Some(claim),
                None => return duplicate_id(request),
            }
        }
        if let Some(Probe {
            method: Some(method),
            target,
            protocol_version,
            id,
            traceparent,
            watched,
        }) = probed
        {
            let protocol_version = parts
                .headers
                .get(PROTOCOL_VERSION_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
                .or(protocol_version);
            // `_meta` (SEP-414, the MCP semantic conventions' carrier) before the HTTP
            // header: the server span and the request's calls continue this one.
            let traceparent = traceparent.or_else(|| {
                parts
                    .headers
                    .get("traceparent")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            });
            // A tool is named (in the span's name, its attributes and the metric) only
            // when it exists: a client's made-up names must not make series without end.
            // A prompt is named in the metric only when it was found (see `Operation`).
            let target = target.filter(|t| match t {
                Target::Tool(tool) => guard.state.registry.get(owner.0, tool).is_some(),
                Target::Prompt(_) | Target::Resource(_) => true,
            });
            let http_version = probe::http_version(parts.version);
            let (span, continued) = server_span(&probe::Request {
                method: &method,
                target: target.as_ref(),
                protocol_version: protocol_version.as_deref(),
                id: id.as_ref(),
                session: session.as_deref(),
                traceparent: traceparent.as_deref(),
                peer: parts
                    .extensions
                    .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                    .map(|c| c.0),
                http_version,
            });
            if let Some(caller) = parts.extensions.get_mut::<McpCaller>() {
                caller.continued = continued;
            }
            // A 2026-07-28 listen stream stays open as long as a session's GET stream
            // (it replaces it): the same caps and the same end on revocation.
            if method == "subscriptions/listen"
                && let Some(caller) = parts.extensions.get::<McpCaller>()
            {
                match guard
                    .state
                    .streams
                    .admit(&caller.auth, toolgate_core::Adapter::Mcp)
                {
                    Ok(ticket) => stream_ticket = Some(ticket),
                    Err(err) => return ApiError::from(err).into_response(),
                }
            }
            // A listen stream's upstream subscriptions are made before rmcp acknowledges
            // it (see `Listening`).
            if !watched.is_empty()
                && let Some(caller) = parts.extensions.get::<McpCaller>()
            {
                let state = &guard.state;
                // Boxed: this middleware's future is moved whole per request, and the
                // upstream subscribing would make it larger for every request.
                let listening = Box::pin(toolgate_mcp::Listening::ahead(
                    &watched,
                    caller,
                    &state.registry,
                    &state.catalog,
                ))
                .await;
                match listening {
                    Ok(listening) => parts.extensions.insert(listening),
                    Err(refused) => return rpc_error(id.as_ref(), refused),
                };
            }
            operation = Some(Operation {
                metrics: guard.state.telemetry.metrics().clone(),
                method,
                target,
                protocol_version,
                http_version,
                error: None,
                answer,
                started,
                span,
            });
        }
        axum::body::Body::from(bytes)
    } else {
        body
    };
    let (mut response, refused) = CALLER
        .scope(
            owner,
            sessions::SESSION_REFUSED.scope(std::cell::Cell::new(false), async {
                let response = next.run(Request::from_parts(parts, body)).await;
                let refused = sessions::SESSION_REFUSED.with(std::cell::Cell::get);
                (response, refused)
            }),
        )
        .await;
    if refused {
        let err = ToolError::new(
            ErrorKind::RateLimited,
            "you hold as many MCP sessions as one principal (or your tenant) may; end one (DELETE /mcp) or let one go idle first",
        )
        .with_retry_after(Duration::from_secs(30), false);
        return ApiError::from(err).into_response();
    }
    // rmcp answers a successful DELETE with 202; the Python SDK treats anything but 200
    // as a failed termination and logs it on every close.
    if ending && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::OK;
    }
    // rmcp answers a JSON body it cannot parse with 415 and plain text; JSON-RPC says
    // -32700, and HTTP says the media type was fine: the body was not.
    if json_post && response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return parse_error();
    }
    if let Some(operation) = &mut operation
        && !response.status().is_success()
    {
        operation.error = Some(response.status().as_u16().to_string());
        // A refusal rmcp answered itself carries a JSON-RPC error, which the operation
        // records as it does the handler's (see `Operation`'s drop).
        if operation.answer.get().is_none() {
            let refused;
            (response, refused) = Box::pin(probe::refusal(response)).await;
            if let Some(answered) = refused {
                operation.answer.set(answered);
            }
        }
    }
    // A JSON answer is complete now: the operation ends here, and the body keeps its
    // length. An SSE stream's operation ends with the stream.
    let streamed = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !streamed {
        drop(operation.take());
    }
    if in_flight.is_some() || operation.is_some() {
        // Held until the answer is sent in full (a stream's end).
        use futures::StreamExt;
        let (parts, body) = response.into_parts();
        let body = axum::body::Body::from_stream(body.into_data_stream().map(move |chunk| {
            let _ = (&in_flight, &operation);
            chunk
        }));
        response = Response::from_parts(parts, body);
    }
    if let Some(ticket) = stream_ticket
        && response.status().is_success()
    {
        return guard.state.streams.follow(ticket, authorization, response);
    }
    response
}

/// RFC 9728 protected-resource metadata for `/mcp`.
async fn metadata(State(guard): State<Guard>, headers: HeaderMap) -> Response {
    let base = guard.base_url(&headers);
    axum::Json(json!({
        "resource": format!("{base}/mcp"),
        "authorization_servers": guard.authorization_servers,
        "bearer_methods_supported": ["header"],
        "scopes_supported": scopes::ALL,
        "resource_name": "toolgate",
    }))
    .into_response()
}
