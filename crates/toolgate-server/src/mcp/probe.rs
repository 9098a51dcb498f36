//! What the guard reads of each `/mcp` message without parsing it whole, and what it
//! records of each: the server span and `mcp.server.operation.duration`.

/// What the guard reads of a JSON-RPC message: the id of a request (it has a method and an
/// id), and the method, tool and protocol version for `mcp.server.operation.duration`.
pub(super) struct Probe {
    pub(super) id: Option<serde_json::Value>,
    pub(super) method: Option<String>,
    pub(super) tool: Option<String>,
    pub(super) protocol_version: Option<String>,
    /// The W3C `traceparent` in `_meta` (SEP-414).
    pub(super) traceparent: Option<String>,
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
        #[serde(borrow, rename = "protocolVersion")]
        protocol_version: Option<Cow<'a, str>>,
        #[serde(borrow, rename = "_meta")]
        meta: Option<Meta<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(borrow, rename = "io.modelcontextprotocol/protocolVersion")]
        protocol_version: Option<Cow<'a, str>>,
        #[serde(borrow)]
        traceparent: Option<Cow<'a, str>>,
    }
    let message: Message<'_> = serde_json::from_slice(body).ok()?;
    let method = message.method.map(Cow::into_owned);
    let (tool, protocol_version, traceparent) = match message.params {
        Some(params) => {
            let (meta_version, traceparent) = params
                .meta
                .map_or((None, None), |m| (m.protocol_version, m.traceparent));
            (
                params
                    .name
                    .filter(|_| method.as_deref() == Some("tools/call"))
                    .map(Cow::into_owned),
                params
                    .protocol_version
                    .or(meta_version)
                    .map(Cow::into_owned),
                traceparent.map(Cow::into_owned),
            )
        }
        None => (None, None, None),
    };
    Some(Probe {
        id: method.as_ref().and(message.id),
        method,
        tool,
        protocol_version,
        traceparent,
    })
}

/// The server span of one MCP request (`{mcp.method.name} {target}`, MCP semantic
/// conventions), continuing the client's `traceparent`, with the `traceparent` the call
/// continues (the span's, or an unrecorded one when the sampler skips the trace). None,
/// and free, when traces are not exported.
pub(super) fn server_span(
    method: &str,
    tool: Option<&str>,
    protocol_version: Option<&str>,
    id: Option<&serde_json::Value>,
    session: Option<&str>,
    traceparent: Option<&str>,
) -> (tracing::Span, Option<String>) {
    use toolgate_core::context::{Root, exported_traceparent, root, set_remote_parent};
    let parent = match root(traceparent) {
        Root::Off => return (tracing::Span::none(), None),
        Root::Recorded(parent) => parent,
        Root::Skipped(traceparent) => return (tracing::Span::none(), Some(traceparent)),
    };
    let span = tracing::info_span!(
        target: "toolgate::otel",
        "mcp",
        otel.name = tracing::field::Empty,
        otel.kind = "server",
        mcp.method.name = method,
        mcp.protocol.version = tracing::field::Empty,
        mcp.session.id = tracing::field::Empty,
        jsonrpc.request.id = tracing::field::Empty,
        gen_ai.tool.name = tracing::field::Empty,
        network.transport = "tcp",
        network.protocol.name = "http",
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if span.is_disabled() {
        return (span, None);
    }
    span.record(
        "otel.name",
        match tool {
            Some(tool) => format!("{method} {tool}"),
            None => method.to_owned(),
        },
    );
    if let Some(tool) = tool {
        span.record("gen_ai.tool.name", tool);
    }
    if let Some(version) = protocol_version {
        span.record("mcp.protocol.version", version);
    }
    if let Some(id) = id {
        match id {
            serde_json::Value::String(id) => span.record("jsonrpc.request.id", id.as_str()),
            id => span.record("jsonrpc.request.id", id.to_string()),
        };
    }
    // Only session traffic has a session id (2026-07-28 requests have none).
    if let Some(session) = session {
        span.record("mcp.session.id", session);
    }
    set_remote_parent(&span, parent);
    let traceparent = exported_traceparent(&span);
    (span, traceparent)
}

/// One MCP request or notification, recorded as `mcp.server.operation.duration` when its
/// answer has been sent in full (or the client went away).
pub(super) struct Operation {
    pub(super) metrics: toolgate_core::metrics::Metrics,
    pub(super) method: String,
    pub(super) tool: Option<String>,
    pub(super) protocol_version: Option<String>,
    pub(super) error: Option<String>,
    pub(super) started: std::time::Instant,
    /// The server span (when traces are exported): it ends with the operation.
    pub(super) span: tracing::Span,
}

impl Drop for Operation {
    fn drop(&mut self) {
        if let Some(error) = &self.error {
            toolgate_core::context::span_failed(&self.span, error);
        }
        self.metrics.mcp_operation(
            &self.method,
            self.tool.as_deref(),
            self.protocol_version.as_deref(),
            self.error.take(),
            self.started.elapsed(),
        );
    }
}

#[cfg(test)]
mod tests {
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
