//! MCP sessions in the store, so that no client is pinned to one gateway instance.
//!
//! Two rmcp hooks are backed by the store, through core's seam
//! ([`toolgate_core::stores::SessionStore`]):
//! - [`Sessions`] is rmcp's `SessionStore`: each session's owner and `initialize`
//!   parameters, so another instance can replay the handshake and take the session over,
//!   and the `/mcp` guard can refuse the session to anyone but its owner.
//! - [`StoredSessions`] is the `SessionManager`: rmcp's own in-memory manager, one per
//!   session, each with an event store bound to that session and its tenant
//!   (`SessionEvents`). rmcp's event-store hook receives only a stream id and an event
//!   id, not a session; binding one store per session is what keeps a `Last-Event-ID`
//!   from replaying another session's (or tenant's) events.
//!
//! With durable streams on (the default on Postgres), every SSE event of a session is
//! committed before it is sent, and a client whose stream broke resumes it on whichever
//! instance it reaches. Off (the default on SQLite, a single instance), rmcp keeps each
//! stream's recent events in memory. Stateless (2026-07-28) requests are not replayable
//! either way: their events have no session to bind them to a caller.
//!
//! Sessions in memory are bounded: one principal may hold `mcp.max_sessions_per_principal`
//! live sessions on this instance and a tenant `mcp.max_sessions_per_tenant` (one more
//! `initialize` is refused with 429 and `Retry-After`), and a session with no request and
//! no open stream for `mcp.session_idle_secs` is let go of from memory (rmcp's own idle
//! timeout stops its worker but keeps its handle, so idle sessions piled up). A session
//! let go of stays in the store: its client coming back restores it, as on another
//! instance. A session that holds nothing beyond its `initialize` — no
//! `logging/setLevel`, no resource subscription, which live only in memory — is let go
//! of after `mcp.session_dormant_secs` already: restoring it replays the handshake and
//! gives back the very same session, while keeping it costs rmcp's tasks and channels
//! (about 110 KiB).
//!
//! SSE polling (SEP-1699, `mcp.sse_poll_after_ms`): a session request still running after
//! that long has its POST stream closed with a `retry` event; the client comes back with
//! `Last-Event-ID` and gets what was stored since, then what is stored next (looked for
//! every 50 ms, whichever instance stores it) until the answer, or until as long again has
//! passed, when it is let go of once more. Polling keeps events in the store: rmcp's
//! memory drops a request's events once it has answered, so an answer given while its
//! client was away would be lost.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::WorkerTransport;
use rmcp::transport::common::server_side_http::ServerSseMessage;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionHandle, LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
    SessionConfig,
};
use rmcp::transport::streamable_http_server::session::{
    EventId, EventStore, EventStoreError, EventStream, RestoreOutcome, SessionId, SessionManager,
    SessionState, SessionStore, SessionStoreError,
};
use tokio_util::sync::{CancellationToken, DropGuard};
use toolgate_core::stores::{McpSession, SessionStore as SessionRows};
use toolgate_core::{PrincipalId, TenantId};

/// Whose a session is: its tenant and the principal that opened it.
pub type Owner = (TenantId, PrincipalId);

tokio::task_local! {
    /// The caller of the `/mcp` request being served: rmcp persists a new session from
    /// inside that request, and the session is recorded as this caller's. The `/mcp`
    /// guard sets it around each request.
    pub static CALLER: Owner;
}

/// How often stored SSE events past their retention are dropped (when sessions are not
/// pruned more often).
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Cached session owners older than this are dropped when the cache grows large.
const OWNER_TTL: Duration = Duration::from_secs(24 * 3600);
const OWNERS_SWEEP_AT: usize = 10_000;

/// Sessions in the store (any instance can take one over), with their owners and
/// negotiated protocol versions cached: neither ever changes, so the cache is never stale
/// about them.
pub struct Sessions<S> {
    store: S,
    owners: Mutex<HashMap<String, (Known, Instant)>>,
}

/// What the guard knows of a session: whose it is, and the protocol version its
/// `initialize` agreed on.
#[derive(Clone, Debug)]
pub struct Known {
    pub owner: Owner,
    pub version: Arc<str>,
}

impl<S: SessionRows> Sessions<S> {
    pub fn new(store: S) -> Self {
        Self {
            store,
            owners: Mutex::default(),
        }
    }

    /// Session `id`, if it exists anywhere.
    pub async fn known(&self, id: &str) -> Result<Option<Known>, S::Error> {
        if let Some((known, _)) = self.lock().get(id) {
            return Ok(Some(known.clone()));
        }
        let found = self.store.mcp_session(id).await?;
        Ok(found.map(|s| {
            let requested = serde_json::from_str::<serde_json::Value>(&s.initialize_params)
                .ok()
                .and_then(|p| p.get("protocolVersion")?.as_str().map(str::to_owned))
                .unwrap_or_default();
            self.remember(id, (s.tenant, s.principal), &requested)
        }))
    }

    fn remember(&self, id: &str, owner: Owner, requested: &str) -> Known {
        let known = Known {
            owner,
            version: crate::negotiated_version(requested).into(),
        };
        let mut owners = self.lock();
        if owners.len() >= OWNERS_SWEEP_AT {
            owners.retain(|_, (_, at)| at.elapsed() < OWNER_TTL);
        }
        owners.insert(id.to_owned(), (known.clone(), Instant::now()));
        known
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Known, Instant)>> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A session refused (or made outside a request) as rmcp's error type.
fn refusal(why: String) -> LocalSessionManagerError {
    LocalSessionManagerError::SessionError(
        rmcp::transport::streamable_http_server::session::local::SessionError::EventStore(
            why.into(),
        ),
    )
}

/// The caller of the request being served, as the `/mcp` guard recorded it.
fn caller(action: &str) -> Result<Owner, String> {
    CALLER
        .try_with(|owner| *owner)
        .map_err(|_| format!("{action} outside an authenticated request"))
}

/// Drops stored SSE events older than `events`, and sessions nobody used for `sessions`,
/// until shutdown.
pub fn prune<S: SessionRows + Clone>(
    store: S,
    events: Option<Duration>,
    sessions: Option<Duration>,
    shutdown: CancellationToken,
) {
    if events.is_none() && sessions.is_none() {
        return;
    }
    let before = |retention: Duration| {
        chrono::Utc::now() - chrono::Duration::from_std(retention).unwrap_or(chrono::Duration::MAX)
    };
    let period = sessions.map_or(PRUNE_EVERY, touch_every);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(period);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = every.tick() => {}
            }
            if let Some(retention) = events
                && let Err(err) = store.prune_mcp_events(before(retention)).await
            {
                tracing::warn!(error = %err, "could not prune stored MCP events");
            }
            if let Some(retention) = sessions {
                match store.prune_mcp_sessions(before(retention)).await {
                    Ok(0) => {}
                    Ok(gone) => tracing::debug!(sessions = gone, "unused MCP sessions pruned"),
                    Err(err) => tracing::warn!(error = %err, "could not prune MCP sessions"),
                }
            }
        }
    });
}

/// rmcp's hook for sessions that outlive one instance: the session's `initialize`
/// parameters, stored with its owner, so another instance can replay the handshake.
#[async_trait]
impl<S: SessionRows> SessionStore for Sessions<S> {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some(session) = self.store.mcp_session(id).await? else {
            return Ok(None);
        };
        let params = serde_json::from_str(&session.initialize_params)?;
        Ok(Some(SessionState::new(params)))
    }

    async fn store(&self, id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let (tenant, principal) = caller("a session opened")?;
        self.store
            .put_mcp_session(&McpSession {
                id: id.to_owned(),
                tenant,
                principal,
                initialize_params: serde_json::to_string(&state.initialize_params)?,
            })
            .await?;
        self.remember(
            id,
            (tenant, principal),
            state.initialize_params.protocol_version.as_str(),
        );
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<(), SessionStoreError> {
        let (tenant, _) = caller("a session ended")?;
        self.store.delete_mcp_session(tenant, id).await?;
        self.lock().remove(id);
        Ok(())
    }
}

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
struct Live {
    manager: Arc<LocalSessionManager>,
    owner: Owner,
    used: Arc<Mutex<Instant>>,
    streams: Arc<std::sync::atomic::AtomicUsize>,
    /// Whether the session has state that lives only here: a log level, subscriptions,
    /// or a stream its client left before its end (which it may come back for).
    stateful: Arc<std::sync::atomic::AtomicBool>,
}

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
struct StreamHold {
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

type ManagerResult<T> = Result<T, LocalSessionManagerError>;
type SseStream = Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>;

/// rmcp's streams are `'static` but their opaque types name the manager they came from;
/// boxing lets the per-session manager's `Arc` go while the stream lives on.
fn boxed(stream: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static) -> SseStream {
    Box::pin(stream)
}

/// rmcp's handle on live session `id` of `manager`.
async fn session_handle(
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
    fn held(
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

    fn live(&self, manager: LocalSessionManager, owner: Owner) -> Live {
        Live {
            manager: Arc::new(manager),
            owner,
            used: Arc::new(Mutex::new(Instant::now())),
            streams: Arc::default(),
            stateful: Arc::default(),
        }
    }

    /// Notes that session `id` was asked for state a restored session would not have
    /// (a log level, a subscription), so that it is kept for `limits.idle`.
    pub async fn keep_state(&self, id: &str) {
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
        let live = self.live(manager, owner);
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

    async fn has_session(&self, id: &SessionId) -> ManagerResult<bool> {
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
            return self.with_live(id, |live| Self::held(live, stream)).await;
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
        self.with_live(id, |live| Self::held(live, stream)).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> ManagerResult<()> {
        self.get(id).await?.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> ManagerResult<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static> {
        let manager = self.get(id).await?;
        let stream = manager.create_standalone_stream(id).await?;
        // The session's stream keeps it in memory while it is open.
        self.with_live(id, |live| Self::held(live, stream)).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> ManagerResult<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static> {
        let manager = self.get(id).await?;
        let stream = manager.resume(id, last_event_id).await?;
        self.with_live(id, |live| Self::held(live, stream)).await
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
        live.insert(id, self.live(manager, owner));
        self.count
            .store(live.len(), std::sync::atomic::Ordering::Relaxed);
        Ok(outcome)
    }
}

/// The SSE events of one session, in the store under its tenant. Event ids are the
/// store's sequence numbers: unique across instances, ordered within a stream.
struct SessionEvents<S> {
    store: S,
    tenant: TenantId,
    session: OnceLock<SessionId>,
    /// SSE polling: a resumed stream follows its request for `after`.
    poll: Option<Polling>,
}

#[derive(Clone, Copy)]
struct Polling {
    /// How long a stream is held before it is let go of.
    after: Duration,
    /// The `retry` the client is told when it is.
    retry: Duration,
}

/// How often a followed stream looks for new events in the store.
const FOLLOW_EVERY: Duration = Duration::from_millis(50);

impl<S> SessionEvents<S> {
    fn session(&self) -> Result<&str, EventStoreError> {
        Ok(self
            .session
            .get()
            .ok_or("an SSE event before its session had an id")?)
    }
}

#[async_trait]
impl<S: SessionRows + Clone> EventStore for SessionEvents<S> {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<EventId, EventStoreError> {
        let message = event
            .message
            .as_deref()
            .map(serde_json::to_string)
            .transpose()?;
        let retry_ms = event
            .retry
            .map(|r| i32::try_from(r.as_millis()).unwrap_or(i32::MAX));
        let seq = self
            .store
            .append_mcp_event(
                self.tenant,
                self.session()?,
                stream_id,
                message.as_deref(),
                retry_ms,
            )
            .await?;
        Ok(seq.to_string())
    }

    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        let seq: i64 = last_event_id.parse()?;
        let session = self.session()?.to_owned();
        let replay = stored_after(&self.store, self.tenant, &session, seq).await?;
        let Some(poll) = self.poll else {
            return Ok(Box::pin(futures::stream::iter(replay)));
        };
        // Polling: follow the stream (what other instances store included) until it
        // carries its request's answer, or until it is time to let go of it as well.
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let (store, tenant) = (self.store.clone(), self.tenant);
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + poll.after;
            let (mut last, mut pending) = (seq, replay);
            loop {
                for event in pending.drain(..) {
                    last = event
                        .event_id
                        .as_deref()
                        .and_then(|id| id.parse().ok())
                        .unwrap_or(last);
                    let answer = matches!(
                        event.message.as_deref(),
                        Some(ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_))
                    );
                    if tx.send(event).await.is_err() || answer {
                        return;
                    }
                }
                if tokio::time::Instant::now() >= deadline {
                    let _ = tx
                        .send(ServerSseMessage::priming(last.to_string(), poll.retry))
                        .await;
                    return;
                }
                tokio::select! {
                    () = tx.closed() => return,
                    () = tokio::time::sleep(FOLLOW_EVERY) => {}
                }
                match stored_after(&store, tenant, &session, last).await {
                    Ok(found) => pending = found,
                    Err(err) => {
                        // The client comes back and tries again.
                        tracing::warn!(error = %err, "a resumed SSE stream could not be followed");
                        return;
                    }
                }
            }
        });
        Ok(Box::pin(futures::stream::poll_fn(move |cx| {
            rx.poll_recv(cx)
        })))
    }
}

/// The stored events of `session` after `seq`, on the stream of `seq`.
async fn stored_after<S: SessionRows>(
    store: &S,
    tenant: TenantId,
    session: &str,
    seq: i64,
) -> Result<Vec<ServerSseMessage>, EventStoreError> {
    let events = store.mcp_events_after(tenant, session, seq).await?;
    let replay = events
        .into_iter()
        .map(|event| {
            let id = event.seq.to_string();
            Ok(match (event.message, event.retry_ms) {
                (Some(message), _) => ServerSseMessage::new(id, serde_json::from_str(&message)?),
                (None, retry) => ServerSseMessage::priming(
                    id,
                    Duration::from_millis(retry.unwrap_or(0).max(0) as u64),
                ),
            })
        })
        .collect::<Result<Vec<_>, serde_json::Error>>()?;
    Ok(replay)
}
