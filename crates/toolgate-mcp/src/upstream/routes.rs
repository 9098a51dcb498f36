//! How what an upstream says about a call in flight (progress, log messages, sampling
//! and elicitation requests) finds that call's caller.

use super::*;

/// How an upstream's messages about its in-flight calls find their call.
///
/// Progress names the call (its progress token). Sampling and elicitation requests over
/// Streamable HTTP name it too: they arrive on the response stream of the `tools/call`
/// they belong to, which rmcp records (SEP-2260). Everything else — such requests over
/// stdio, and log messages on any transport — carries nothing that ties it to a call.
/// Those go to the one call in flight when exactly one is and the upstream allows it
/// (`relay_unattributed`: on for a tenant's own upstreams, which only that tenant's calls
/// share, off by default for the operator's, which every tenant's calls share); otherwise
/// log messages are dropped and requests refused, so nothing reaches a caller it may not
/// belong to.
pub(super) struct Routes {
    pub(super) progress: Mutex<HashMap<String, ProgressSink>>,
    /// Calls in flight by their upstream request id, with their way back to the caller
    /// when their front door gave one.
    pub(super) calls: Mutex<HashMap<String, Option<Client>>>,
    /// Woken whenever a call is filed under its request id.
    pub(super) filed: tokio::sync::Notify,
    pub(super) relay_unattributed: bool,
}

impl Routes {
    pub(super) fn new(relay_unattributed: bool) -> Arc<Self> {
        Arc::new(Self {
            progress: Mutex::default(),
            calls: Mutex::default(),
            filed: tokio::sync::Notify::new(),
            relay_unattributed,
        })
    }

    /// The caller of the call an upstream request or log message belongs to.
    pub(super) async fn caller(
        &self,
        origin: Option<&InboundStreamOrigin>,
    ) -> Result<Client, String> {
        if let Some(InboundStreamOrigin::OutboundRequest(id)) = origin {
            // The request may arrive before the call that caused it is filed under its
            // request id (see `InFlight::sent`): wait a moment for that.
            let key = request_key(id);
            let until = tokio::time::Instant::now() + Duration::from_secs(1);
            loop {
                let filed = self.filed.notified();
                if let Some(found) = lock(&self.calls).get(&key) {
                    return reachable(found);
                }
                if tokio::time::timeout_at(until, filed).await.is_err() {
                    return Err("it names no call in flight".into());
                }
            }
        }
        self.only_call(origin)
    }

    /// The one call in flight, for what the transport ties to no call.
    pub(super) fn only_call(&self, origin: Option<&InboundStreamOrigin>) -> Result<Client, String> {
        if origin.is_some() {
            return Err("it was not sent in the course of a tool call".into());
        }
        if !self.relay_unattributed {
            return Err(
                "its transport does not tie it to a call, and relaying such messages is off for this upstream (relay_unattributed)"
                    .into(),
            );
        }
        let calls = lock(&self.calls);
        let mut in_flight = calls.values();
        match (in_flight.next(), in_flight.next()) {
            (Some(only), None) => reachable(only),
            (None, _) => Err("no call is in flight".into()),
            (Some(_), Some(_)) => Err(format!(
                "its transport does not tie it to a call and {} calls are in flight",
                calls.len()
            )),
        }
    }

    /// Relays a progress report or log message to the call it belongs to, if any. Called
    /// by [`Relaying`] as each is read, before whatever the upstream wrote after it.
    pub(super) fn relay(&self, notification: &ServerNotification) {
        match notification {
            ServerNotification::ProgressNotification(note) => {
                let key = token_key(&note.params.progress_token);
                let sink = lock(&self.progress).get(&key).cloned();
                if let Some(sink) = sink {
                    let _ = sink.try_send(toolgate_core::Progress {
                        progress: note.params.progress,
                        total: note.params.total,
                        message: note.params.message.clone(),
                    });
                }
            }
            ServerNotification::LoggingMessageNotification(note) => match self.only_call(None) {
                Ok(caller) => {
                    if let Ok(message) = serde_json::to_value(&note.params) {
                        caller.0.log(message);
                    }
                }
                Err(why) => {
                    tracing::debug!(reason = %why, "an upstream log message was not relayed");
                }
            },
            _ => {}
        }
    }
}

/// An upstream's transport that relays progress and log messages the moment they are
/// read. rmcp hands each notification to a task of its own but a response straight to
/// the call awaiting it, so a log message written just before a result raced it, and lost
/// whenever the call ended (leaving [`Routes`]) first: the conformance suite's three log
/// messages arrived as two about one run in five on a busy machine. Relayed here, in the
/// order the upstream wrote them, they are in the caller's queue before the result reaches
/// the call. rmcp still gets them (its progress timeouts hear them); [`Handler`] leaves
/// them alone.
///
/// It also paces the upstream: past [`UPSTREAM_MESSAGES_PER_SEC`] notifications and
/// requests in a second, the connection is not read again until the next second.
pub(super) struct Relaying<T> {
    inner: T,
    routes: Arc<Routes>,
    upstream: String,
    pace: PerSecond,
    /// The end of the last second in which reading was paused and said so.
    paused: Option<tokio::time::Instant>,
}

/// What an upstream may send of its own accord (notifications and requests) in a second.
/// Beyond it the gateway stops reading the connection until the next second, so a flood
/// costs the gateway neither its cores nor its callers' streams: the upstream's writes
/// wait on their full pipe or socket, and so do its own results behind them. Measured
/// before (session 21): an upstream writing log messages without pause took 1.4 of the
/// gateway's 2 cores, and one call's progress reached its client at 54,000 a second.
pub(super) const UPSTREAM_MESSAGES_PER_SEC: u32 = 2000;

impl<T> Relaying<T> {
    pub(super) fn new(inner: T, routes: Arc<Routes>, upstream: &str) -> Self {
        Self {
            inner,
            routes,
            upstream: upstream.to_owned(),
            pace: PerSecond::new(UPSTREAM_MESSAGES_PER_SEC),
            paused: None,
        }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Relaying<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        // rmcp may drop this future for another event and call again: nothing has been
        // taken from the upstream before this wait, and its end is kept in `pace`.
        if let Some(until) = self.pace.spent_until(tokio::time::Instant::now()) {
            if self.paused != Some(until) {
                self.paused = Some(until);
                tracing::warn!(
                    upstream = %self.upstream,
                    "the upstream sent more than {UPSTREAM_MESSAGES_PER_SEC} notifications and requests in a second; not reading it until the next"
                );
            }
            tokio::time::sleep_until(until).await;
        }
        let message = self.inner.receive().await?;
        match &message {
            JsonRpcMessage::Notification(note) => {
                self.pace.admit(tokio::time::Instant::now());
                self.routes.relay(&note.notification);
            }
            JsonRpcMessage::Request(_) => {
                self.pace.admit(tokio::time::Instant::now());
            }
            _ => {}
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

pub(super) fn reachable(caller: &Option<Client>) -> Result<Client, String> {
    caller
        .clone()
        .ok_or_else(|| "the calling client cannot be reached (it did not call over MCP)".into())
}

/// The client side of one upstream connection: relays progress, log messages, sampling
/// and elicitation to the calls they belong to, and hears list changes.
pub(super) struct Handler {
    pub(super) info: ClientConfig,
    pub(super) routes: Arc<Routes>,
    pub(super) list_changed: tokio::sync::mpsc::Sender<()>,
    /// Where `notifications/resources/updated` go, as this upstream's.
    pub(super) catalog: Arc<Catalog>,
    pub(super) owner: Owner,
    pub(super) upstream: String,
}

impl Handler {
    /// Asks the caller of the call `context`'s request belongs to, or says why not.
    pub(super) async fn ask_caller<T: serde::de::DeserializeOwned>(
        &self,
        request: toolgate_core::ClientRequest,
        params: impl serde::Serialize,
        context: &RequestContext<RoleClient>,
    ) -> Result<T, ErrorData> {
        let refuse = |why: String| {
            ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                format!("toolgate cannot relay this {}: {why}", request.method()),
                None,
            )
        };
        let caller = self
            .routes
            .caller(context.extensions.get::<InboundStreamOrigin>())
            .await
            .map_err(refuse)?;
        let params = serde_json::to_value(params)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let answer = caller
            .0
            .request(request, params)
            .await
            .map_err(|e| ErrorData::new(ErrorCode(e.code), e.message, None))?;
        serde_json::from_value(answer).map_err(|e| {
            ErrorData::internal_error(format!("the caller's answer is not valid: {e}"), None)
        })
    }
}

// Sampling and logging are deprecated by SEP-2577 (protocol 2026-07-28); upstreams
// speaking earlier versions still use them.
#[allow(deprecated)]
impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, ErrorData> {
        self.ask_caller(toolgate_core::ClientRequest::Sampling, params, &context)
            .await
    }

    async fn create_elicitation(
        &self,
        params: rmcp::model::ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, ErrorData> {
        self.ask_caller(toolgate_core::ClientRequest::Elicitation, params, &context)
            .await
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.list_changed.try_send(());
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.catalog.updated(self.owner, &self.upstream, params.uri);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.list_changed.try_send(());
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.list_changed.try_send(());
    }
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn token_key(token: &ProgressToken) -> String {
    number_or_string(&token.0)
}

pub(super) fn request_key(id: &RequestId) -> String {
    number_or_string(id)
}

pub(super) fn number_or_string(id: &NumberOrString) -> String {
    match id {
        NumberOrString::Number(n) => n.to_string(),
        NumberOrString::String(s) => s.to_string(),
    }
}
