//! MCP sessions and their stored stream events: the records and [`SessionStore`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::Backend;
use crate::{PrincipalId, TenantId};

/// An MCP session: who opened it, the client's `initialize` parameters (JSON) and the
/// state a restored session must get back: the level it chose with `logging/setLevel`
/// (`None` until it chooses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpSession {
    pub id: String,
    pub tenant: TenantId,
    pub principal: PrincipalId,
    pub initialize_params: String,
    pub log_level: Option<String>,
}

/// One SSE event of an MCP session's stream, kept for `Last-Event-ID` resumption.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpEvent {
    /// Position in the store's one sequence: the event id sent to the client.
    pub seq: i64,
    /// The JSON-RPC message; `None` for a priming (retry-only) event.
    pub message: Option<String>,
    pub retry_ms: Option<i32>,
}

/// MCP sessions and their stored SSE events, so that any instance can take a session
/// over and a client can resume a broken stream wherever it reconnects.
#[async_trait]
pub trait SessionStore: Backend {
    /// Records a session; a conflict if the id is taken.
    async fn put_mcp_session(&self, session: &McpSession) -> Result<(), Self::Error>;

    /// The session with this id, whichever tenant it belongs to: the caller is then
    /// checked against its owner.
    async fn mcp_session(&self, id: &str) -> Result<Option<McpSession>, Self::Error>;

    /// Records the level this tenant's session `id` chose with `logging/setLevel`;
    /// `false` when the tenant has no such session.
    async fn set_mcp_session_log_level(
        &self,
        tenant: TenantId,
        id: &str,
        level: &str,
    ) -> Result<bool, Self::Error>;

    /// Ends a session: its row and its stored SSE events.
    async fn delete_mcp_session(&self, tenant: TenantId, id: &str) -> Result<(), Self::Error>;

    /// Marks sessions `ids` as in use at `at` (an instance holding them in memory).
    async fn touch_mcp_sessions(
        &self,
        ids: &[String],
        at: DateTime<Utc>,
    ) -> Result<(), Self::Error>;

    /// Ends the sessions last seen in use before `before`, across tenants, with their
    /// stored events (retention: a client coming back gets 404 and opens a new one),
    /// a thousand sessions per transaction with a pause after each. Returns how many
    /// went.
    async fn prune_mcp_sessions(&self, before: DateTime<Utc>) -> Result<u64, Self::Error>;

    /// Stores one SSE event of `stream` in `session`; returns its sequence number, unique
    /// across the store (and so across gateway instances).
    async fn append_mcp_event(
        &self,
        tenant: TenantId,
        session: &str,
        stream: &str,
        message: Option<&str>,
        retry_ms: Option<i32>,
    ) -> Result<i64, Self::Error>;

    /// The events after event `seq` on the same stream as it, in order, as many as one
    /// bounded read returns (at least one when there are any): ask again after the last
    /// for the rest. Empty when there are none, or `seq` is not an event of this
    /// tenant's `session`.
    async fn mcp_events_after(
        &self,
        tenant: TenantId,
        session: &str,
        seq: i64,
    ) -> Result<Vec<McpEvent>, Self::Error>;

    /// Drops stored SSE events older than `before`, across tenants (retention), a
    /// thousand per statement with a pause after each: on SQLite every delete holds the
    /// audit's commits behind it. Returns how many went.
    async fn prune_mcp_events(&self, before: DateTime<Utc>) -> Result<u64, Self::Error>;
}
