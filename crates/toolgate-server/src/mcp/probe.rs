//! What the guard reads of each `/mcp` message without parsing it whole, and what it
//! records of each: the server span and `mcp.server.operation.duration`.

use toolgate_core::context::Continued;

/// What the guard reads of a JSON-RPC message: the id of a request (it has a method and an
/// id), and the method, its target and protocol version for the server span and
/// `mcp.server.operation.duration`.
pub(super) struct Probe {
    pub(super) id: Option<serde_json::Value>,
    pub(super) method: Option<String>,
    pub(super) target: Option<Target>,
    pub(super) protocol_version: Option<String>,
    /// The W3C `traceparent` in `_meta` (SEP-414).
    pub(super) traceparent: Option<String>,
    /// The resource URIs a `subscriptions/listen` asks to watch (see
    /// `toolgate_mcp::Listening`).
    pub(super) watched: Vec<String>,
}

/// What a request names, as the MCP semantic conventions record it.
pub(super) enum Target {
    /// `tools/call`: `gen_ai.tool.name`, and the span name's target.
    Tool(String),
    /// `prompts/get`: `gen_ai.prompt.name`, and the span name's target.
    Prompt(String),
    /// `resources/read`, `resources/subscribe`, `resources/unsubscribe`:
    /// `mcp.resource.uri` (never in the span name: unbounded).
    Resource(String),
}

impl Target {
    /// The target a span name carries (`{mcp.method.name} {target}`), if any.
    fn in_name(&self) -> Option<&str> {
        match self {
            Target::Tool(name) | Target::Prompt(name) => Some(name),
            Target::Resource(_) => None,
        }
    }
}

pub(super) fn probe(body: &[u8]) -> Option<Probe> {
    use std::borrow::Cow;
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        id: Option<serde_json::Value>,
        #[serde(borrow)]
        method: Option<Cow<'a, str>>,
        #[serde(borrow)]
        params: Option<Params<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(borrow)]
        name: Option<Cow<'a, str>>,
        #[serde(borrow)]
        uri: Option<Cow<'a, str>>,
        #[serde(borrow, rename = "protocolVersion")]
        protocol_version: Option<Cow<'a, str>>,
        #[serde(borrow, rename = "_meta")]
        meta: Option<Meta<'a>>,
        notifications: Option<Notifications>,
    }
    #[derive(serde::Deserialize)]
    struct Notifications {
        #[serde(rename = "resourceSubscriptions")]
        resource_subscriptions: Option<Vec<String>>,
    }
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(borrow, rename = "io.modelcontextprotocol/protocolVersion")]
        protocol_version: Option<Cow<'a, str>>,
        #[serde(borrow)]
        traceparent: Option<Cow<'a, str>>,
    }
    let message: Message<'_> = serde_json::from_slice(body).ok()?;
    let method = message.method.map(|m| {
        if known_method(&m) {
            m.into_owned()
        } else {
            OTHER.to_owned()
        }
    });
    let (target, protocol_version, traceparent, watched) = match message.params {
        Some(params) => {
            let (meta_version, traceparent) = params
                .meta
                .map_or((None, None), |m| (m.protocol_version, m.traceparent));
            let target = match method.as_deref() {
                Some("tools/call") => params.name.map(|n| Target::Tool(n.into_owned())),
                Some("prompts/get") => params.name.map(|n| Target::Prompt(n.into_owned())),
                Some("resources/read" | "resources/subscribe" | "resources/unsubscribe") => {
                    params.uri.map(|u| Target::Resource(u.into_owned()))
                }
                _ => None,
            };
            (
                target,
                params
                    .protocol_version
                    .or(meta_version)
                    .map(Cow::into_owned),
                traceparent.map(Cow::into_owned),
                params
                    .notifications
                    .and_then(|n| n.resource_subscriptions)
                    .filter(|_| method.as_deref() == Some("subscriptions/listen"))
                    .unwrap_or_default(),
            )
        }
        None => (None, None, None, Vec::new()),
    };
    Some(Probe {
        id: method.as_ref().and(message.id),
        method,
        target,
        protocol_version,
        traceparent,
        watched,
    })
}

/// The conventions' `_OTHER`: the `mcp.method.name` of a method the gateway does not know
/// (a client's made-up method names must not make series, or span names, without end),
/// and the metric's `error.type` for an error code that is not JSON-RPC's or MCP's own.
pub(super) const OTHER: &str = "_OTHER";

/// JSON-RPC's and MCP's own error codes: the metric names these, and any other as
/// `_OTHER`.
const COMMON_CODES: [&str; 11] = [
    "-32700", "-32600", "-32601", "-32602", "-32603", "-32001", "-32002", "-32020", "-32021",
    "-32022", "-32042",
];

/// The JSON-RPC error of a refusal rmcp answered itself, before the handler ran (an
/// unsupported protocol version, a 2026-07-28 `_meta` missing what it must carry): a 4xx
/// whose small JSON body is the error. The response is given back whole.
pub(super) async fn refusal(
    response: axum::response::Response,
) -> (axum::response::Response, Option<toolgate_mcp::Answered>) {
    use axum::http::header;
    /// rmcp's refusals are a few hundred bytes; a larger body is not read here.
    const READ_UP_TO: u64 = 16 * 1024;
    #[derive(serde::Deserialize)]
    struct Refused {
        error: rmcp::ErrorData,
    }
    let headers = response.headers();
    let json = headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let small = http_body::Body::size_hint(response.body())
        .exact()
        .is_some_and(|length| length <= READ_UP_TO);
    if !(json && small) {
        return (response, None);
    }
    let (head, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, READ_UP_TO as usize).await else {
        return (
            axum::response::Response::from_parts(head, axum::body::Body::empty()),
            None,
        );
    };
    let answered = serde_json::from_slice::<Refused>(&bytes)
        .ok()
        .map(|r| toolgate_mcp::Answered::error(&r.error));
    let response = axum::response::Response::from_parts(head, axum::body::Body::from(bytes));
    (response, answered)
}

/// The notifications a client sends (the MCP semantic conventions' well-known names).
const NOTIFICATIONS: [&str; 4] = [
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
];

fn known_method(method: &str) -> bool {
    toolgate_mcp::is_known_method(method) || NOTIFICATIONS.contains(&method)
}

/// `network.protocol.version` of an HTTP version, as the conventions write it.
pub(super) fn http_version(version: axum::http::Version) -> Option<&'static str> {
    match version {
        axum::http::Version::HTTP_10 => Some("1.0"),
        axum::http::Version::HTTP_11 => Some("1.1"),
        axum::http::Version::HTTP_2 => Some("2"),
        axum::http::Version::HTTP_3 => Some("3"),
        _ => None,
    }
}

/// What the server span of one MCP request is made of.
pub(super) struct Request<'a> {
    pub(super) method: &'a str,
    pub(super) target: Option<&'a Target>,
    pub(super) protocol_version: Option<&'a str>,
    pub(super) id: Option<&'a serde_json::Value>,
    /// Only session traffic has one (2026-07-28 requests have none).
    pub(super) session: Option<&'a str>,
    /// The client's `traceparent`: in `_meta`, else the HTTP header.
    pub(super) traceparent: Option<&'a str>,
    /// The peer's socket address (`client.address`, `client.port`).
    pub(super) peer: Option<std::net::SocketAddr>,
    pub(super) http_version: Option<&'static str>,
}

/// The server span of one MCP request (`{mcp.method.name} {target}`, MCP semantic
/// conventions), continuing the client's `traceparent`, with the span the request's calls
/// continue (the server span, an unrecorded one when the sampler skips the trace). No
/// span when traces are not exported: the calls continue the client's own.
pub(super) fn server_span(request: &Request<'_>) -> (tracing::Span, Option<Continued>) {
    use toolgate_core::context::{Root, root, set_remote_parent};
    let parent = match root(request.traceparent) {
        Root::Off(continued) => return (tracing::Span::none(), continued),
        Root::Recorded(parent) => parent,
        Root::Skipped(continued) => return (tracing::Span::none(), Some(continued)),
    };
    let method = request.method;
    let span = tracing::info_span!(
        target: "toolgate::otel",
        "mcp",
        otel.name = tracing::field::Empty,
        otel.kind = "server",
        mcp.method.name = method,
        mcp.protocol.version = tracing::field::Empty,
        mcp.session.id = tracing::field::Empty,
        jsonrpc.request.id = tracing::field::Empty,
        gen_ai.operation.name = tracing::field::Empty,
        gen_ai.tool.name = tracing::field::Empty,
        gen_ai.prompt.name = tracing::field::Empty,
        mcp.resource.uri = tracing::field::Empty,
        client.address = tracing::field::Empty,
        client.port = tracing::field::Empty,
        network.transport = "tcp",
        network.protocol.name = "http",
        network.protocol.version = tracing::field::Empty,
        error.type = tracing::field::Empty,
        rpc.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
    );
    if span.is_disabled() {
        return (span, None);
    }
    span.record(
        "otel.name",
        match request.target.and_then(Target::in_name) {
            Some(target) => format!("{method} {target}"),
            None => method.to_owned(),
        },
    );
    if method == "tools/call" {
        span.record("gen_ai.operation.name", "execute_tool");
    }
    match request.target {
        Some(Target::Tool(tool)) => span.record("gen_ai.tool.name", tool.as_str()),
        Some(Target::Prompt(prompt)) => span.record("gen_ai.prompt.name", prompt.as_str()),
        Some(Target::Resource(uri)) => span.record("mcp.resource.uri", uri.as_str()),
        None => &span,
    };
    if let Some(version) = request.protocol_version {
        span.record("mcp.protocol.version", version);
    }
    if let Some(id) = request.id {
        match id {
            serde_json::Value::String(id) => span.record("jsonrpc.request.id", id.as_str()),
            id => span.record("jsonrpc.request.id", id.to_string()),
        };
    }
    if let Some(session) = request.session {
        span.record("mcp.session.id", session);
    }
    if let Some(peer) = request.peer {
        span.record("client.address", peer.ip().to_string());
        span.record("client.port", i64::from(peer.port()));
    }
    if let Some(version) = request.http_version {
        span.record("network.protocol.version", version);
    }
    set_remote_parent(&span, parent);
    let continued = Continued::exported(&span);
    (span, continued)
}

/// One MCP request or notification, recorded as `mcp.server.operation.duration` when its
/// answer has been sent in full (or the client went away).
pub(super) struct Operation {
    pub(super) metrics: toolgate_core::metrics::Metrics,
    pub(super) method: String,
    /// A tool only when it exists (see the guard); a prompt is named in the metric only
    /// when the request succeeded (one that was not found must not make a series), a
    /// resource never.
    pub(super) target: Option<Target>,
    pub(super) protocol_version: Option<String>,
    pub(super) http_version: Option<&'static str>,
    /// An HTTP-level failure: the status, when not 2xx.
    pub(super) error: Option<String>,
    /// How the handler answered, when it did: a JSON-RPC error or a tool's error result
    /// is an HTTP 200.
    pub(super) answer: toolgate_mcp::Answer,
    pub(super) started: std::time::Instant,
    /// The server span (when traces are exported): it ends with the operation.
    pub(super) span: tracing::Span,
}

impl Drop for Operation {
    fn drop(&mut self) {
        use toolgate_mcp::Answered;
        // The conventions' `error.type`: the JSON-RPC error code (whatever HTTP status
        // rmcp gave it: 404 for -32601, 400 for a malformed request), `tool_error` for a
        // tool's error result, else the HTTP status of a refused request.
        let (error, status_code, message) = match (self.answer.get(), &self.error) {
            (Some(Answered::Error { code, message }), _) => {
                let code = code.to_string();
                (Some(code.clone()), Some(code), Some(message.as_str()))
            }
            (_, Some(status)) => (Some(status.clone()), None, None),
            (Some(Answered::ToolError), None) => (Some("tool_error".to_owned()), None, None),
            (Some(Answered::Result) | None, None) => (None, None, None),
        };
        if let Some(error) = &error {
            toolgate_core::context::span_failed(&self.span, error);
        }
        if let Some(code) = &status_code {
            self.span.record("rpc.response.status_code", code.as_str());
        }
        if let Some(message) = message {
            self.span.record("otel.status_description", message);
        }
        // The metric keeps its series bounded: a relayed upstream's own error codes are
        // its to choose.
        let bounded = status_code.as_deref().map(|code| {
            if COMMON_CODES.contains(&code) {
                code
            } else {
                OTHER
            }
        });
        self.metrics
            .mcp_operation(&toolgate_core::metrics::McpOperation {
                method: &self.method,
                tool: match &self.target {
                    Some(Target::Tool(tool)) => Some(tool),
                    _ => None,
                },
                prompt: match &self.target {
                    Some(Target::Prompt(prompt)) if error.is_none() => Some(prompt),
                    _ => None,
                },
                protocol_version: self.protocol_version.as_deref(),
                http_version: self.http_version,
                error: bounded.or(error.as_deref()),
                status_code: bounded,
                duration: self.started.elapsed(),
            });
    }
}

#[cfg(test)]
mod tests {
    use super::Target;

    #[test]
    fn the_probe_names_each_requests_target_and_folds_unknown_methods_into_other() {
        let probed = super::probe(
            br#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"review"}}"#,
        )
        .expect("probed");
        assert!(matches!(probed.target, Some(Target::Prompt(ref p)) if p == "review"));
        let probed = super::probe(br#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a","name":"x"}}"#)
            .expect("probed");
        assert!(matches!(probed.target, Some(Target::Resource(ref u)) if u == "file:///a"));
        assert_eq!(probed.target.as_ref().and_then(Target::in_name), None);
        let probed = super::probe(
            br#"{"jsonrpc":"2.0","id":3,"method":"made/up","params":{"name":"echo"}}"#,
        )
        .expect("probed");
        assert_eq!(probed.method.as_deref(), Some(super::OTHER));
        assert!(probed.target.is_none());
        assert_eq!(probed.id, Some(serde_json::json!(3)), "still a request");
        let probed = super::probe(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .expect("probed");
        assert_eq!(probed.method.as_deref(), Some("notifications/initialized"));
    }

    #[test]
    fn the_probe_reads_the_meta_traceparent() {
        let body = br#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"echo","arguments":{"message":"over mcp"},"_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"e2e","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#;
        let probed = super::probe(body).expect("probed");
        assert_eq!(
            probed.traceparent.as_deref(),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        );
    }
}
