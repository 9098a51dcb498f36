//! MCP sessions in the store, so that no client is pinned to one gateway instance.
//!
//! Two rmcp hooks are backed by the [`Store`]:
//! - [`Sessions`] is rmcp's `SessionStore`: each session's owner and `initialize`
//!   parameters, so another instance can replay the handshake and take the session over,
//!   and the `/mcp` guard can refuse the session to anyone but its owner.
//! - [`StoredSessions`] is the `SessionManager`: rmcp's own in-memory manager, one per
//!   session, each with an event store bound to that session and its tenant
//!   ([`SessionEvents`]). rmcp's event-store hook receives only a stream id and an event
//!   id, not a session; binding one store per session is what keeps a `Last-Event-ID`
//!   from replaying another session's (or tenant's) events.
//!
//! With durable streams on (the default on Postgres), every SSE event of a session is
//! committed before it is sent, and a client whose stream broke resumes it on whichever
//! instance it reaches. Off (the default on SQLite, a single instance), rmcp keeps each
//! stream's recent events in memory. Stateless (2026-07-28) requests are not replayable
//! either way: their events have no session to bind them to a caller.

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
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker, SessionConfig,
};
use rmcp::transport::streamable_http_server::session::{
    EventId, EventStore, EventStoreError, EventStream, RestoreOutcome, SessionId, SessionManager,
    SessionState, SessionStore, SessionStoreError,
};
use toolgate_core::TenantId;
use toolgate_store::{McpSession, Store, StoreError};

use super::{CALLER, Owner};

/// Cached session owners older than this are dropped when the cache grows large.
const OWNER_TTL: Duration = Duration::from_secs(24 * 3600);
const OWNERS_SWEEP_AT: usize = 10_000;

/// Sessions in the store (any instance can take one over), with their owners cached:
/// ownership never changes, so the cache is never stale about it.
pub(super) struct Sessions {
    store: Store,
    owners: Mutex<HashMap<String, (Owner, Instant)>>,
}

impl Sessions {
    pub(super) fn new(store: Store) -> Self {
        Self {
            store,
            owners: Mutex::default(),
        }
    }

    /// Who opened session `id`, if it exists anywhere.
    pub(super) async fn owner(&self, id: &str) -> Result<Option<Owner>, StoreError> {
        if let Some((owner, _)) = self.lock().get(id) {
            return Ok(Some(*owner));
        }
        let found = self.store.mcp_session(id).await?;
        Ok(found.map(|s| {
            let owner = (s.tenant, s.principal);
            self.remember(id, owner);
            owner
        }))
    }

    fn remember(&self, id: &str, owner: Owner) {
        let mut owners = self.lock();
        if owners.len() >= OWNERS_SWEEP_AT {
            owners.retain(|_, (_, at)| at.elapsed() < OWNER_TTL);
        }
        owners.insert(id.to_owned(), (owner, Instant::now()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Owner, Instant)>> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The caller of the request being served, as the `/mcp` guard recorded it.
fn caller(action: &str) -> Result<Owner, String> {
    CALLER
        .try_with(|owner| *owner)
        .map_err(|_| format!("{action} outside an authenticated request"))
}

/// rmcp's hook for sessions that outlive one instance: the session's `initialize`
/// parameters, stored with its owner, so another instance can replay the handshake.
#[async_trait]
impl SessionStore for Sessions {
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
        self.remember(id, (tenant, principal));
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
pub(super) struct StoredSessions {
    store: Store,
    config: SessionConfig,
    /// Store each session's SSE events (resumable on any instance), or keep them in memory.
    durable_events: bool,
    live: tokio::sync::RwLock<HashMap<SessionId, Arc<LocalSessionManager>>>,
}

type ManagerResult<T> = Result<T, LocalSessionManagerError>;
type SseStream = Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>;

/// rmcp's streams are `'static` but their opaque types name the manager they came from;
/// boxing lets the per-session manager's `Arc` go while the stream lives on.
fn boxed(stream: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static) -> SseStream {
    Box::pin(stream)
}

impl StoredSessions {
    pub(super) fn new(store: Store, durable_events: bool) -> Self {
        Self {
            store,
            config: SessionConfig::default(),
            durable_events,
            live: Default::default(),
        }
    }

    /// A manager for one session of the current caller's tenant, and its event store
    /// (still to learn the session id, when the session is new).
    fn manager(&self) -> ManagerResult<(LocalSessionManager, Option<Arc<SessionEvents>>)> {
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
        });
        Ok((manager.with_event_store(events.clone()), Some(events)))
    }

    async fn get(&self, id: &SessionId) -> ManagerResult<Arc<LocalSessionManager>> {
        self.live
            .read()
            .await
            .get(id)
            .cloned()
            .ok_or_else(|| LocalSessionManagerError::SessionNotFound(id.clone()))
    }
}

impl SessionManager for StoredSessions {
    type Error = LocalSessionManagerError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> ManagerResult<(SessionId, Self::Transport)> {
        let (manager, events) = self.manager()?;
        let (id, transport) = manager.create_session().await?;
        if let Some(events) = events {
            // Nothing is sent on a session before its id is returned, so no event is
            // stored before this.
            let _ = events.session.set(id.clone());
        }
        self.live
            .write()
            .await
            .insert(id.clone(), Arc::new(manager));
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
        let manager = self.live.write().await.remove(id);
        match manager {
            Some(manager) => manager.close_session(id).await,
            None => Ok(()),
        }
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> ManagerResult<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static> {
        let manager = self.get(id).await?;
        let stream = manager.create_stream(id, message).await?;
        Ok(boxed(stream))
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
        Ok(boxed(stream))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> ManagerResult<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static> {
        let manager = self.get(id).await?;
        let stream = manager.resume(id, last_event_id).await?;
        Ok(boxed(stream))
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
        let outcome = manager.restore_session(id.clone()).await?;
        live.insert(id, Arc::new(manager));
        Ok(outcome)
    }
}

/// The SSE events of one session, in the store under its tenant. Event ids are the
/// store's sequence numbers: unique across instances, ordered within a stream.
struct SessionEvents {
    store: Store,
    tenant: TenantId,
    session: OnceLock<SessionId>,
}

impl SessionEvents {
    fn session(&self) -> Result<&str, EventStoreError> {
        Ok(self
            .session
            .get()
            .ok_or("an SSE event before its session had an id")?)
    }
}

#[async_trait]
impl EventStore for SessionEvents {
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
        let events = self
            .store
            .mcp_events_after(self.tenant, self.session()?, seq)
            .await?;
        let replay = events
            .into_iter()
            .map(|event| {
                let id = event.seq.to_string();
                Ok(match (event.message, event.retry_ms) {
                    (Some(message), _) => {
                        ServerSseMessage::new(id, serde_json::from_str(&message)?)
                    }
                    (None, retry) => ServerSseMessage::priming(
                        id,
                        Duration::from_millis(retry.unwrap_or(0).max(0) as u64),
                    ),
                })
            })
            .collect::<Result<Vec<_>, serde_json::Error>>()?;
        Ok(Box::pin(futures::stream::iter(replay)))
    }
}
