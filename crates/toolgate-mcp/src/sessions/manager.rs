//! rmcp's session manager, one per session: caps per principal and tenant, sessions
//! let go of when idle or dormant and restored from the store, SSE polling.

use super::*;

/// rmcp's session manager, one instance per session so that each session's events are
/// stored (and replayed) under that session and its tenant.
pub struct StoredSessions<S> {
    store: S,
    config: SessionConfig,
    /// Store each session's SSE events (resumable on any instance), or keep them in memory.
    durable_events: bool,
    /// SSE polling, when on.
    poll: Option<Polling>,
    live: tokio::sync::RwLock<HashMap<SessionId, Live>>,
    /// Sessions let go of for being dormant, with their owners and when they were last
    /// used: they still count against the caps until `limits.idle` has passed, as they
    /// would have in memory.
    dormant: Mutex<HashMap<SessionId, (Owner, Instant)>>,
    /// How many sessions `live` holds, for the metrics (read without the lock).
    count: Arc<std::sync::atomic::AtomicUsize>,
    limits: SessionLimits,
}

/// Caps on live sessions in memory, and when an unused one is let go of.
#[derive(Clone, Copy, Debug)]
pub struct SessionLimits {
    pub per_principal: usize,
    pub per_tenant: usize,
    pub idle: Duration,
    /// How soon an unused session with no state of its own is let go of.
    pub dormant: Duration,
    /// How often the sessions held here are noted in the store as in use.
    pub touch_every: Duration,
}

/// How often sessions in memory are noted as in use (and unused ones pruned) for a
/// retention of `retention`: a quarter of it, between 1 s and a minute.
pub fn touch_every(retention: Duration) -> Duration {
    (retention / 4).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// One live session: its rmcp manager, whose it is, when it was last used, and how many
/// of its streams are open.
pub(super) struct Live {
    manager: Arc<LocalSessionManager>,
    owner: Owner,
    used: Arc<Mutex<Instant>>,
    streams: Arc<std::sync::atomic::AtomicUsize>,
    /// Whether the session has state that lives only here: subscriptions,
    /// or a stream its client left before its end (which it may come back for).
    stateful: Arc<std::sync::atomic::AtomicBool>,
    /// False while a restored session's handshake is being replayed (see
    /// [`StoredSessions::has_session`]); dropped with the entry, which wakes its waiters.
    ready: tokio::sync::watch::Sender<bool>,
}

/// The longest a request waits for a restored session's handshake before it is sent on.
const RESTORE_WAIT: Duration = Duration::from_secs(5);

impl Live {
    fn touch(&self) {
        *self.used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }
}

/// Counts one open stream of a session while it lives; a stream dropped before its end
/// marks the session stateful.
pub(super) struct StreamHold {
    streams: Arc<std::sync::atomic::AtomicUsize>,
    used: Arc<Mutex<Instant>>,
    stateful: Arc<std::sync::atomic::AtomicBool>,
    ended: bool,
}

impl Drop for StreamHold {
    fn drop(&mut self) {
        self.streams
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        if !self.ended {
            self.stateful
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        *self.used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }
}

tokio::task_local! {
    /// Set when this `/mcp` request's `initialize` was refused for the caller's caps, so
    /// the guard answers 429 rather than rmcp's 500.
    pub static SESSION_REFUSED: std::cell::Cell<bool>;
}

pub(super) type ManagerResult<T> = Result<T, LocalSessionManagerError>;
pub(super) type SseStream = Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>;

/// rmcp's streams are `'static` but their opaque types name the manager they came from;
/// boxing lets the per-session manager's `Arc` go while the stream lives on.
pub(super) fn boxed(
    stream: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
) -> SseStream {
    Box::pin(stream)
}

/// rmcp's handle on live session `id` of `manager`.
pub(super) async fn session_handle(
    manager: &LocalSessionManager,
    id: &SessionId,
) -> ManagerResult<LocalSessionHandle> {
    manager
        .sessions
        .read()
        .await
        .get(id)
        .cloned()
        .ok_or_else(|| LocalSessionManagerError::SessionNotFound(id.clone()))
}

impl<S: SessionRows + Clone> StoredSessions<S> {
    pub fn new(
        store: S,
        durable_events: bool,
        retry: Duration,
        poll_after: Option<Duration>,
        limits: SessionLimits,
        count: Arc<std::sync::atomic::AtomicUsize>,
    ) -> Self {
        let mut config = SessionConfig::default();
        config.sse_retry = Some(retry);
        config.keep_alive = Some(limits.idle);
        Self {
            store,
            config,
            durable_events,
            poll: poll_after.map(|after| Polling { after, retry }),
            live: Default::default(),
            dormant: Mutex::default(),
            count,
            limits,
        }
    }

    /// Lets go of sessions unused (no request, no open stream) for `limits.idle`, or for
    /// `limits.dormant` when they hold no state of their own, until `stop`.
    pub fn sweep(self: &Arc<Self>, stop: CancellationToken) {
        let sessions = Arc::downgrade(self);
        let every = self
            .limits
            .dormant
            .min(self.limits.idle)
            .min(self.limits.touch_every)
            .max(Duration::from_secs(1));
        tokio::spawn(async move {
            let mut touched = Instant::now();
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(every) => {}
                }
                let Some(sessions) = sessions.upgrade() else {
                    return;
                };
                let limits = sessions.limits;
                if touched.elapsed() >= limits.touch_every {
                    touched = Instant::now();
                    sessions.touch().await;
                }
                let idle: Vec<(SessionId, Owner, Duration)> = sessions
                    .live
                    .read()
                    .await
                    .iter()
                    .filter_map(|(id, live)| {
                        let after = if live.stateful.load(std::sync::atomic::Ordering::Relaxed) {
                            limits.idle
                        } else {
                            limits.dormant
                        };
                        let unused = live.idle_for();
                        (live.streams.load(std::sync::atomic::Ordering::Relaxed) == 0
                            && unused >= after)
                            .then(|| (id.clone(), live.owner, unused))
                    })
                    .collect();
                // Noted as dormant before they go, so that a restore racing this sweep
                // clears the note rather than following it.
                {
                    let now = Instant::now();
                    let mut dormant = sessions.dormant();
                    dormant.retain(|_, (_, used)| now.duration_since(*used) < limits.idle);
                    for (id, owner, unused) in &idle {
                        if *unused < limits.idle {
                            let used = now.checked_sub(*unused).unwrap_or(now);
                            dormant.insert(id.clone(), (*owner, used));
                        }
                    }
                }
                for (id, _, _) in &idle {
                    let _ = sessions.let_go(id).await;
                }
                if !idle.is_empty() {
                    tracing::debug!(
                        sessions = idle.len(),
                        "idle MCP sessions let go of from memory"
                    );
                }
            }
        });
    }

    /// Notes every session in memory here as in use, so that retention keeps it.
    async fn touch(&self) {
        let ids: Vec<String> = self
            .live
            .read()
            .await
            .keys()
            .map(|id| id.to_string())
            .collect();
        if let Err(err) = self
            .store
            .touch_mcp_sessions(&ids, chrono::Utc::now())
            .await
        {
            tracing::warn!(error = %err, "could not note MCP sessions as in use");
        }
    }

    /// Whether `owner` may open one more session here; else notes the refusal for the
    /// guard and says why.
    async fn admit(&self, owner: Owner) -> Result<(), String> {
        let live = self.live.read().await;
        let dormant = self.dormant();
        let owners = || {
            live.values()
                .map(|l| l.owner)
                .chain(dormant.values().map(|(o, _)| *o))
        };
        let by_principal = owners().filter(|o| *o == owner).count();
        let by_tenant = owners().filter(|o| o.0 == owner.0).count();
        let refused = if by_principal >= self.limits.per_principal {
            Some(format!(
                "{by_principal} sessions open, the most one principal may hold"
            ))
        } else if by_tenant >= self.limits.per_tenant {
            Some(format!(
                "{by_tenant} sessions open in the tenant, the most it may hold"
            ))
        } else {
            None
        };
        match refused {
            Some(why) => {
                let _ = SESSION_REFUSED.try_with(|refused| refused.set(true));
                Err(why)
            }
            None => Ok(()),
        }
    }

    /// Lets go of session `id` from memory (it stays in the store).
    async fn let_go(&self, id: &SessionId) -> ManagerResult<()> {
        let mut all = self.live.write().await;
        let live = all.remove(id);
        self.count
            .store(all.len(), std::sync::atomic::Ordering::Relaxed);
        drop(all);
        match live {
            Some(live) => live.manager.close_session(id).await,
            None => Ok(()),
        }
    }

    fn dormant(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, (Owner, Instant)>> {
        self.dormant.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `stream` of session `live`, counted as open while it lives.
    fn counted(
        live: &Live,
        stream: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
    ) -> SseStream {
        live.streams
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut hold = StreamHold {
            streams: live.streams.clone(),
            used: live.used.clone(),
            stateful: live.stateful.clone(),
            ended: false,
        };
        let mut stream = Box::pin(stream);
        boxed(futures::stream::poll_fn(move |cx| {
            let hold = &mut hold; // the whole hold: its drop is the stream's end
            let next = stream.as_mut().poll_next(cx);
            if matches!(next, std::task::Poll::Ready(None)) {
                hold.ended = true;
            }
            next
        }))
    }

    /// A manager for one session of the current caller's tenant, and its event store
    /// (still to learn the session id, when the session is new).
    fn manager(&self) -> ManagerResult<(LocalSessionManager, Option<Arc<SessionEvents<S>>>)> {
        let mut manager = LocalSessionManager::default();
        manager.session_config = self.config.clone();
        if !self.durable_events {
            return Ok((manager, None));
        }
        let (tenant, _) = caller("an MCP session used").map_err(|e| {
            LocalSessionManagerError::SessionError(
                rmcp::transport::streamable_http_server::session::local::SessionError::EventStore(
                    e.into(),
                ),
            )
        })?;
        let events = Arc::new(SessionEvents {
            store: self.store.clone(),
            tenant,
            session: OnceLock::new(),
            poll: self.poll,
        });
        Ok((manager.with_event_store(events.clone()), Some(events)))
    }

    /// With polling on, closes request `request`'s stream of session `handle` once
    /// `poll.after` has passed, unless the guard returned (held by the stream) is dropped
    /// first, when the stream ended because the request finished.
    fn let_go_later(&self, handle: LocalSessionHandle, request: u64) -> Option<DropGuard> {
        let Polling { after, retry } = self.poll?;
        let done = CancellationToken::new();
        let guard = done.clone().drop_guard();
        tokio::spawn(async move {
            tokio::select! {
                () = done.cancelled() => {}
                () = tokio::time::sleep(after) => {
                    // An error means the request finished meanwhile: nothing to close.
                    if handle.close_sse_stream(request, Some(retry)).await.is_ok() {
                        tracing::debug!(request, "a long request's SSE stream closed for polling");
                    }
                }
            }
        });
        Some(guard)
    }

    /// Session `id`'s manager, the session marked used.
    async fn get(&self, id: &SessionId) -> ManagerResult<Arc<LocalSessionManager>> {
        let live = self.live.read().await;
        let found = live
            .get(id)
            .ok_or_else(|| LocalSessionManagerError::SessionNotFound(id.clone()))?;
        found.touch();
        Ok(found.manager.clone())
    }

    /// Session `id`'s entry as [`Self::get`], for what counts its streams.
    async fn with_live<T>(&self, id: &SessionId, f: impl FnOnce(&Live) -> T) -> ManagerResult<T> {
        let live = self.live.read().await;
        let found = live
            .get(id)
            .ok_or_else(|| LocalSessionManagerError::SessionNotFound(id.clone()))?;
        found.touch();
        Ok(f(found))
    }

    /// An entry for `manager`'s session, `ready` unless its handshake is still to come.
    fn live(&self, manager: LocalSessionManager, owner: Owner, ready: bool) -> Live {
        Live {
            manager: Arc::new(manager),
            owner,
            used: Arc::new(Mutex::new(Instant::now())),
            streams: Arc::default(),
            stateful: Arc::default(),
            ready: tokio::sync::watch::Sender::new(ready),
        }
    }
}

#[allow(deprecated)] // logging: deprecated by SEP-2577 (2026-07-28), used before it
#[async_trait]
impl<S: SessionRows + Clone> SessionKeeping for StoredSessions<S> {
    async fn keep_level(
        &self,
        tenant: TenantId,
        id: &str,
        level: LoggingLevel,
    ) -> Result<(), String> {
        let level = serde_json::to_value(level).map_err(|e| e.to_string())?;
        let level = level.as_str().unwrap_or_default();
        match self
            .store
            .set_mcp_session_log_level(tenant, id, level)
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!("no session {id} in this tenant")),
            Err(err) => Err(err.to_string()),
        }
    }

    async fn kept_level(&self, id: &str) -> Result<Option<LoggingLevel>, String> {
        let session = self
            .store
            .mcp_session(id)
            .await
            .map_err(|e| e.to_string())?;
        session
            .and_then(|s| s.log_level)
            .map(|level| serde_json::from_value(level.into()).map_err(|e| e.to_string()))
            .transpose()
    }

    async fn hold_in_memory(&self, id: &str) {
        if let Some(live) = self.live.read().await.get(id) {
            live.stateful
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl<S: SessionRows + Clone> SessionManager for StoredSessions<S> {
    type Error = LocalSessionManagerError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> ManagerResult<(SessionId, Self::Transport)> {
        let owner = caller("an MCP session opened").map_err(refusal)?;
        self.admit(owner).await.map_err(refusal)?;
        let (manager, events) = self.manager()?;
        let (id, transport) = manager.create_session().await?;
        if let Some(events) = events {
            // Nothing is sent on a session before its id is returned, so no event is
            // stored before this.
            let _ = events.session.set(id.clone());
        }
        let live = self.live(manager, owner, true);
        let mut all = self.live.write().await;
        all.insert(id.clone(), live);
        self.count
            .store(all.len(), std::sync::atomic::Ordering::Relaxed);
        drop(all);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> ManagerResult<ServerJsonRpcMessage> {
        self.get(id).await?.initialize_session(id, message).await
    }

    /// Whether session `id` is here and ready for requests. rmcp sends a request for a
    /// session reported present straight to its worker; while a restored session's
    /// `initialize` is being replayed, its worker would take that request for the
    /// handshake and end, failing the request and the session (seen as 500s under
    /// concurrent requests on a dormant session). So a session being restored is waited
    /// for (at most [`RESTORE_WAIT`]).
    async fn has_session(&self, id: &SessionId) -> ManagerResult<bool> {
        let mut ready = match self.live.read().await.get(id) {
            Some(live) if *live.ready.borrow() => return Ok(true),
            Some(live) => live.ready.subscribe(),
            None => return Ok(false),
        };
        if let Ok(Ok(_)) = tokio::time::timeout(RESTORE_WAIT, ready.wait_for(|r| *r)).await {
            return Ok(true);
        }
        // The restore failed (the entry went) or is stuck.
        Ok(self.live.read().await.contains_key(id))
    }

    async fn close_session(&self, id: &SessionId) -> ManagerResult<()> {
        // A client's DELETE frees the session's place; rmcp also calls this when a
        // session's worker ends (after a dormant session was let go of), outside any
        // request, and the place stays taken then.
        if caller("a session ended").is_ok() {
            self.dormant().remove(id);
        }
        self.let_go(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> ManagerResult<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static> {
        let manager = self.get(id).await?;
        if self.poll.is_none() {
            let stream = manager.create_stream(id, message).await?;
            // A request in flight keeps its session in memory.
            return self.with_live(id, |live| Self::counted(live, stream)).await;
        }
        // rmcp's `create_stream`, keeping the stream's request id to close it by.
        let handle = session_handle(&manager, id).await?;
        let receiver = handle.establish_request_wise_channel().await?;
        let request = receiver.http_request_id;
        handle.push_message(message, request).await?;
        let close = request.and_then(|request| self.let_go_later(handle, request));
        let mut events = receiver.inner;
        let stream = futures::stream::poll_fn(move |cx| {
            let _ = &close; // the timer goes when the stream does
            events.poll_recv(cx)
        });
        self.with_live(id, |live| Self::counted(live, stream)).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> ManagerResult<()> {
        let initialized = matches!(&message, ClientJsonRpcMessage::Notification(n)
            if matches!(n.notification, ClientNotification::InitializedNotification(_)));
        self.get(id).await?.accept_message(id, message).await?;
        if initialized {
            // The handshake's last message is queued: what is sent now comes after it.
            if let Some(live) = self.live.read().await.get(id) {
                live.ready.send_replace(true);
            }
        }
        Ok(())
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> ManagerResult<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static> {
        let manager = self.get(id).await?;
        let stream = manager.create_standalone_stream(id).await?;
        // The session's stream keeps it in memory while it is open.
        self.with_live(id, |live| Self::counted(live, stream)).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> ManagerResult<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static> {
        let manager = self.get(id).await?;
        let stream = manager.resume(id, last_event_id).await?;
        self.with_live(id, |live| Self::counted(live, stream)).await
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> ManagerResult<RestoreOutcome<Self::Transport>> {
        let mut live = self.live.write().await;
        if live.contains_key(&id) {
            return Ok(RestoreOutcome::AlreadyPresent);
        }
        let (manager, events) = self.manager()?;
        if let Some(events) = events {
            let _ = events.session.set(id.clone());
        }
        let owner = caller("an MCP session restored").map_err(refusal)?;
        let outcome = manager.restore_session(id.clone()).await?;
        self.dormant().remove(&id);
        // Not ready until rmcp has replayed its handshake (`initialize`, `initialized`).
        live.insert(id, self.live(manager, owner, false));
        self.count
            .store(live.len(), std::sync::atomic::Ordering::Relaxed);
        Ok(outcome)
    }
}
