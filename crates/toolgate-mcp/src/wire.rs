//! The MCP wire as the handler speaks it: protocol versions and methods, pages, results
//! and errors translated between rmcp's types and the core's.

use super::*;

/// The request methods of the MCP versions spoken here: a request rmcp hands to
/// `on_custom_request` under one of these names had params it could not decode.
pub(crate) const KNOWN_METHODS: &[&str] = &[
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

/// One page of `items` in the order of `key`, after the request's cursor (the last key of
/// the page before), and the cursor of the next page. Items whose key repeats an earlier
/// one's are left out: a URI two upstreams list is read from the first.
pub(crate) fn page<T>(
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
pub(crate) fn upstream_error(upstream: &str, err: rmcp::ServiceError) -> ErrorData {
    match err {
        rmcp::ServiceError::McpError(data) => data,
        other => {
            ErrorData::internal_error(format!("upstream {upstream} did not answer: {other}"), None)
        }
    }
}

/// An upstream's JSON-RPC error as the executor carries it (its code kept).
pub(crate) fn from_rpc(data: ErrorData) -> ToolError {
    ToolError::new(ErrorKind::Upstream, data.message.to_string())
        .with_details(json!({"code": data.code.0, "data": data.data}))
}

/// A relayed operation's error as the client gets it: an upstream's JSON-RPC error as
/// it was, the gateway's own (rate limited, forbidden, denied, timed out…) with its kind.
pub(crate) fn to_rpc(err: ToolError) -> ErrorData {
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

/// The session a request belongs to (its `Mcp-Session-Id`), if it is a session's.
pub(crate) fn session_id(context: &RequestContext<RoleServer>) -> Option<&str> {
    context
        .extensions
        .get::<http::request::Parts>()?
        .headers
        .get(HEADER_SESSION_ID)?
        .to_str()
        .ok()
}

pub(crate) fn caller(context: &RequestContext<RoleServer>) -> Result<McpCaller, ErrorData> {
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
pub(crate) fn client_info(context: &RequestContext<RoleServer>) -> Option<ClientInfo> {
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

pub(crate) fn success_result(done: Completed, has_output_schema: bool) -> CallToolResult {
    let content = done.output.content.into_iter().map(content_block).collect();
    let mut result = CallToolResult::success(content);
    if has_output_schema {
        result.structured_content = done.output.structured;
    }
    result
}

/// One piece of output as MCP content. Resources and links travel as the JSON they came
/// in (from an upstream server); one that is not valid MCP becomes text saying so.
pub(crate) fn content_block(content: Content) -> ContentBlock {
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

pub(crate) fn json_block(block: Value) -> ContentBlock {
    serde_json::from_value(block)
        .unwrap_or_else(|e| ContentBlock::text(format!("[content not valid MCP: {e}]")))
}
