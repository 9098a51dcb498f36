//! An upstream's tool as the registry holds it: one call, relayed.

use super::*;

/// A tool of an upstream server, called over the upstream's connection.
pub struct UpstreamTool {
    pub(super) spec: ToolSpec,
    pub(super) upstream: String,
    pub(super) remote: String,
    /// Arguments the gateway fixes or defaults (see [`ToolOverride`]).
    pub(super) applied: Option<ToolOverride>,
    /// The supervisor's session: calls run in it unless `pool` gives each tenant (or
    /// principal) its own.
    pub(super) peer: Peer<RoleClient>,
    pub(super) routes: Arc<Routes>,
    pub(super) pool: Option<Arc<SessionPool>>,
}

/// A call on the upstream's connection, filed in its [`Routes`] until it ends, however
/// it ends.
pub(super) struct InFlight<'a> {
    pub(super) routes: &'a Routes,
    pub(super) call: String,
    pub(super) progress: Option<String>,
}

impl<'a> InFlight<'a> {
    /// Files a call about to be sent. Until it is sent and has a request id, it is
    /// filed under its call id: counted as in flight, but not found by request id.
    pub(super) fn file(routes: &'a Routes, ctx: &CallContext) -> Self {
        let call = format!("call:{}", ctx.call_id);
        lock(&routes.calls).insert(call.clone(), ctx.peer.clone());
        Self {
            routes,
            call,
            progress: None,
        }
    }

    /// The call went out as `handle`: file it under its request id, and route what
    /// arrives under its progress token to the caller's sink, if it asked for progress.
    pub(super) fn sent(
        &mut self,
        handle: &rmcp::service::RequestHandle<RoleClient>,
        ctx: &CallContext,
    ) {
        let id = request_key(&handle.id);
        {
            let mut calls = lock(&self.routes.calls);
            let caller = calls.remove(&self.call).flatten();
            calls.insert(id.clone(), caller);
        }
        self.call = id;
        self.routes.filed.notify_waiters();
        if let Some(sink) = ctx.progress.clone() {
            let key = token_key(&handle.progress_token);
            lock(&self.routes.progress).insert(key.clone(), sink);
            self.progress = Some(key);
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        lock(&self.routes.calls).remove(&self.call);
        if let Some(key) = &self.progress {
            lock(&self.routes.progress).remove(key);
        }
    }
}

#[async_trait]
impl Tool for UpstreamTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn available(&self) -> bool {
        !self.peer.is_transport_closed()
    }

    async fn call(&self, ctx: &CallContext, args: Value) -> Result<ToolOutput, ToolError> {
        let Value::Object(args) = args else {
            return Err(ToolError::invalid_arguments("arguments must be an object"));
        };
        let args = match &self.applied {
            Some(o) => o.arguments(args)?,
            None => args,
        };
        let mut params = CallToolRequestParams::new(self.remote.clone()).with_arguments(args);
        // A client span per upstream call, child of the call's span; the upstream's own
        // spans are its children. W3C trace context travels in `_meta` (SEP-414) to every
        // upstream, and as the `traceparent` header to HTTP ones (see `Traced`).
        let (client, traceparent) = client_span(ctx, Under::Call, "tools/call", &self.remote);
        if let Some(traceparent) = traceparent {
            use rmcp::model::RequestParamsMeta;
            params.set_traceparent(&traceparent);
        }
        self.send(ctx, params, &client).await
    }
}

impl UpstreamTool {
    /// Sends the call in the caller's session and waits for its result (or its
    /// cancellation, which the upstream is told of). A failure marks the `client` span
    /// as the MCP conventions say: `tool_error` for the tool's error result, the JSON-RPC
    /// code (and `rpc.response.status_code`) for an error answer, else the error's kind.
    pub(super) async fn send(
        &self,
        ctx: &CallContext,
        params: CallToolRequestParams,
        client: &tracing::Span,
    ) -> Result<ToolOutput, ToolError> {
        let failed = |error_type: &str| toolgate_core::context::span_failed(client, error_type);
        let result = self.exchange(ctx, params).await;
        match &result {
            Ok(Ok(result)) if result.is_error == Some(true) => failed("tool_error"),
            Ok(Ok(_)) => {}
            Ok(Err(err)) => answer_failed(client, err),
            Err(err) => failed(err.kind.as_str()),
        }
        match result? {
            Ok(result) => self.output(result),
            Err(err) => Err(self.service_error(err)),
        }
    }

    /// The upstream's answer to the call: its tool result, or the error it answered
    /// with; `Err` when the call could not be made or was cancelled.
    async fn exchange(
        &self,
        ctx: &CallContext,
        params: CallToolRequestParams,
    ) -> Result<Result<CallToolResult, ServiceError>, ToolError> {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let (peer, routes) = match &self.pool {
            Some(pool) => pool.session(ctx).await.map_err(|e| {
                self.error(
                    ErrorKind::Upstream,
                    format!("could not open a session for this call: {e}"),
                )
            })?,
            None => (self.peer.clone(), self.routes.clone()),
        };
        // Filed before it is sent, so that what the upstream says about it finds it.
        let mut in_flight = InFlight::file(&routes, ctx);
        let handle = peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| self.service_error(e))?;
        in_flight.sent(&handle, ctx);
        // Cancelled by the caller, or dropped at the executor's deadline: tell the
        // upstream (`notifications/cancelled`) so it can stop.
        let mut pending = Pending {
            peer: peer.clone(),
            id: Some(handle.id.clone()),
        };
        let response = tokio::select! {
            response = handle.await_response() => response,
            _ = ctx.cancel.cancelled() => {
                return Err(ToolError::new(ErrorKind::Cancelled, "the call was cancelled"));
            }
        };
        pending.id = None;
        match response {
            Ok(ServerResult::CallToolResult(result)) => Ok(Ok(result)),
            Ok(other) => contentless(other).map(Ok).ok_or_else(|| {
                self.error(
                    ErrorKind::Upstream,
                    "the upstream answered with something other than a tool result (input requests and tasks are not relayed yet)",
                )
            }),
            Err(err) => Ok(Err(err)),
        }
    }
}

/// A `tools/call` answer without `content`, which `ServerResult` decodes as another kind
/// of result: `{}`, `{"resultType": "complete"}` or only `_meta`. Some servers answer so
/// for a tool that returns nothing; it is an empty result, as rmcp's own client takes it
/// (`call_tool`, rmcp 3.11), and the gateway's calls do not go through that client.
fn contentless(result: ServerResult) -> Option<CallToolResult> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct MetaOnly {
        #[serde(rename = "_meta")]
        meta: rmcp::model::MetaObject,
    }
    let meta = match result {
        ServerResult::EmptyResult(_) => None,
        ServerResult::TaskAckResult(ack) => ack.meta,
        ServerResult::CustomResult(custom) => {
            Some(serde_json::from_value::<MetaOnly>(custom.0).ok()?.meta)
        }
        _ => return None,
    };
    let mut empty = CallToolResult::success(Vec::new());
    empty.meta = meta;
    Some(empty)
}

/// A request still waiting for its answer; dropping it sends `notifications/cancelled`.
pub(super) struct Pending {
    pub(super) peer: Peer<RoleClient>,
    pub(super) id: Option<RequestId>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let peer = self.peer.clone();
        tokio::spawn(async move {
            let _ = peer
                .notify_cancelled(CancelledNotificationParam::new(
                    Some(id),
                    Some("cancelled by the gateway".into()),
                ))
                .await;
        });
    }
}

impl UpstreamTool {
    pub(super) fn error(&self, kind: ErrorKind, message: impl Into<String>) -> ToolError {
        let message = format!("upstream {:?}: {}", self.upstream, message.into());
        ToolError::new(kind, message).with_details(json!({ "upstream": self.upstream }))
    }

    pub(super) fn output(&self, result: CallToolResult) -> Result<ToolOutput, ToolError> {
        let content: Vec<Content> = result.content.into_iter().map(content).collect();
        if result.is_error == Some(true) {
            let text: Vec<&str> = content
                .iter()
                .filter_map(|c| match c {
                    Content::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            let message = if text.is_empty() {
                "the tool reported an error".to_owned()
            } else {
                text.join("\n")
            };
            return Err(self.error(ErrorKind::Upstream, message));
        }
        Ok(ToolOutput {
            content,
            structured: result.structured_content,
            vendor_meta: result.meta.map(|m| m.0).unwrap_or_default(),
        })
    }

    pub(super) fn service_error(&self, err: ServiceError) -> ToolError {
        match err {
            ServiceError::McpError(e) if e.code.0 == -32602 => {
                self.error(ErrorKind::InvalidArguments, e.message.to_string())
            }
            ServiceError::McpError(e) => {
                self.error(ErrorKind::Upstream, format!("{} ({})", e.message, e.code.0))
            }
            other => self.error(ErrorKind::Upstream, other.to_string()),
        }
    }
}

/// MCP content as the gateway's. Resources and links are kept whole, as the JSON the
/// upstream sent.
pub(super) fn content(block: ContentBlock) -> Content {
    match block {
        ContentBlock::Text(t) => Content::Text { text: t.text },
        ContentBlock::Image(i) => Content::Image {
            data: i.data,
            mime_type: i.mime_type,
        },
        ContentBlock::Audio(a) => Content::Audio {
            data: a.data,
            mime_type: a.mime_type,
        },
        ContentBlock::Resource(r) => Content::Resource {
            resource: serde_json::to_value(&r.resource).unwrap_or(Value::Null),
        },
        ContentBlock::ResourceLink(link) => Content::ResourceLink {
            link: serde_json::to_value(&link).unwrap_or(Value::Null),
        },
        // rmcp's enum is non-exhaustive: a kind of content newer than this code.
        other => Content::Text {
            text: serde_json::to_string(&other)
                .unwrap_or_else(|_| "[content of a kind the gateway cannot show]".into()),
        },
    }
}
