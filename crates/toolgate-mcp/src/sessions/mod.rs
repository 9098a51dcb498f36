//! MCP sessions in the store, so that no client is pinned to one gateway instance.
//!
//! Two rmcp hooks are backed by the store, through core's seam
//! ([`toolgate_core::stores::SessionStore`]):
//! - [`Sessions`] is rmcp's `SessionStore`: each session's owner and `initialize`
//!   parameters, so another instance can replay the handshake and take the session over,
//!   and the `/mcp` guard can refuse the session to anyone but its owner.
//! - [`StoredSessions`] (`manager.rs`) is the `SessionManager`: rmcp's own in-memory
//!   manager, one per session, each with an event store bound to that session and its
//!   tenant (`SessionEvents`, `events.rs`). rmcp's event-store hook receives only a stream id and an event
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
//! instance. A session that holds nothing beyond what the store keeps — its `initialize`
//! and its `logging/setLevel` choice ([`SessionKeeping`]); not a resource subscription,
//! which lives only in memory — is let go of after `mcp.session_dormant_secs` already:
//! restoring it replays the handshake, sets its level again and gives back the very same
//! session, while keeping it costs rmcp's tasks and channels (about 110 KiB).
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
#[allow(deprecated)] // logging: deprecated by SEP-2577 (2026-07-28), used before it
use rmcp::model::LoggingLevel;
use rmcp::model::{ClientJsonRpcMessage, ClientNotification, ServerJsonRpcMessage};
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

mod events;
mod manager;

use events::*;
pub use manager::{SESSION_REFUSED, SessionLimits, StoredSessions, touch_every};

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

/// What the handler tells the session manager about a session's own state: its
/// `logging/setLevel` choice, kept in the store so that the session restored from it (let
/// go of when dormant, or taken over by another instance) has it again, and state that
/// lives only in memory (a resource subscription), which keeps the session there.
#[allow(deprecated)] // logging: deprecated by SEP-2577 (2026-07-28), used before it
#[async_trait]
pub trait SessionKeeping: Send + Sync {
    /// Records `level` for `tenant`'s session `id`.
    async fn keep_level(
        &self,
        tenant: TenantId,
        id: &str,
        level: LoggingLevel,
    ) -> Result<(), String>;
    /// The level session `id` chose, if it chose one.
    async fn kept_level(&self, id: &str) -> Result<Option<LoggingLevel>, String>;
    /// Session `id` now holds state only its memory has: it is let go of after
    /// `session_idle_secs` unused, not when dormant.
    async fn hold_in_memory(&self, id: &str);
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
                log_level: None,
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
