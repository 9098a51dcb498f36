//! MCP sessions and their stored SSE events, on both backends.
//!
//! As for approvals, one macro writes both implementations: ids and JSON travel as text
//! and are cast on Postgres, where every tenant's statement runs in a transaction naming
//! the tenant (row-level security) and the cross-tenant ones (finding a session by id,
//! retention) on the owner's pool.

use chrono::{DateTime, Utc};
use toolgate_core::{PrincipalId, TenantId};

use crate::batches::{BATCH, in_batches};
use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::text::{json_list, sql, uuid};
use crate::{McpEvent, McpSession, Store, StoreError};

/// Most SSE events one read of a stream returns (fewer once they hold
/// [`READ_BYTES`](crate::model::READ_BYTES)).
pub const EVENTS_PER_READ: i64 = 1_000;

/// Writes the session operations for one backend. `$cross`: the pool for statements
/// across tenants; `$once`: the macro running one statement for a tenant (see
/// [`crate::sqlite_once`]); `$u`, `$j`: the casts of a text parameter to a uuid and to
/// JSON; `$t`: of a uuid or JSON column to text; `$each`: the function expanding a JSON
/// array parameter into rows of `value`.
macro_rules! session_store {
    ($store:ty, $cross:ident, $once:ident, $u:literal, $j:literal, $t:literal, $each:literal) => {
        impl $store {
            pub async fn put_mcp_session(&self, session: &McpSession) -> Result<(), StoreError> {
                let mut tx = self.tenant_tx(session.tenant).await?;
                sqlx::query(sql(format!(
                    "insert into mcp_session (session_id, tenant_id, principal_id, initialize_params, created_at, last_used_at) \
                     values ($1, $2{u}, $3{u}, $4{j}, $5, $5)",
                    u = $u,
                    j = $j
                )))
                .bind(&session.id)
                .bind(session.tenant.to_string())
                .bind(session.principal.0.to_string())
                .bind(&session.initialize_params)
                .bind(Utc::now())
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            pub async fn mcp_session(&self, id: &str) -> Result<Option<McpSession>, StoreError> {
                let row: Option<(String, String, String, Option<String>)> = sqlx::query_as(sql(format!(
                    "select tenant_id{t}, principal_id{t}, initialize_params{t}, log_level from mcp_session where session_id = $1",
                    t = $t
                )))
                .bind(id)
                .fetch_optional(&self.$cross)
                .await?;
                row.map(|(tenant, principal, params, log_level)| {
                    Ok(McpSession {
                        id: id.to_owned(),
                        tenant: TenantId(uuid(&tenant)?),
                        principal: PrincipalId(uuid(&principal)?),
                        initialize_params: params,
                        log_level,
                    })
                })
                .transpose()
            }

            pub async fn set_mcp_session_log_level(
                &self,
                tenant: TenantId,
                id: &str,
                level: &str,
            ) -> Result<bool, StoreError> {
                let set = sql(format!(
                    "update mcp_session set log_level = $3 where session_id = $1 and tenant_id = $2{u}",
                    u = $u
                ));
                let done = $once!(self, tenant, write |conn| {
                    sqlx::query(set)
                        .bind(id)
                        .bind(tenant.to_string())
                        .bind(level)
                        .execute(conn)
                        .await?
                });
                Ok(done.rows_affected() == 1)
            }

            pub async fn delete_mcp_session(
                &self,
                tenant: TenantId,
                id: &str,
            ) -> Result<(), StoreError> {
                let mut tx = self.tenant_tx(tenant).await?;
                for table in ["mcp_session", "mcp_event"] {
                    sqlx::query(sql(format!(
                        "delete from {table} where session_id = $1 and tenant_id = $2{u}",
                        u = $u
                    )))
                    .bind(id)
                    .bind(tenant.to_string())
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            /// One statement on the session-mode call path: no transaction of its own
            /// on SQLite.
            pub async fn append_mcp_event(
                &self,
                tenant: TenantId,
                session: &str,
                stream: &str,
                message: Option<&str>,
                retry_ms: Option<i32>,
            ) -> Result<i64, StoreError> {
                let insert = sql(format!(
                    "insert into mcp_event (tenant_id, session_id, stream_id, message, retry_ms, created_at) \
                     values ($1{u}, $2, $3, $4, $5, $6) returning event_seq",
                    u = $u
                ));
                Ok($once!(self, tenant, write |conn| {
                    sqlx::query_scalar(insert)
                        .bind(tenant.to_string())
                        .bind(session)
                        .bind(stream)
                        .bind(message)
                        .bind(retry_ms)
                        .bind(Utc::now())
                        .fetch_one(conn)
                        .await?
                }))
            }

            pub async fn mcp_events_after(
                &self,
                tenant: TenantId,
                session: &str,
                seq: i64,
            ) -> Result<Vec<McpEvent>, StoreError> {
                let mut tx = self.tenant_read(tenant).await?;
                let select = sql(format!(
                    "select e.event_seq, e.message, e.retry_ms from mcp_event e \
                     join mcp_event last on last.event_seq = $3 and last.session_id = $2 and last.tenant_id = $1{u} \
                     where e.tenant_id = $1{u} and e.session_id = $2 and e.stream_id = last.stream_id and e.event_seq > $3 \
                     order by e.event_seq limit $4",
                    u = $u
                ));
                let page = {
                    let rows = sqlx::query_as::<_, (i64, Option<String>, Option<i32>)>(select)
                        .bind(tenant.to_string())
                        .bind(session)
                        .bind(seq)
                        .bind(EVENTS_PER_READ + 1)
                        .fetch(&mut *tx);
                    crate::read_bounded(rows, EVENTS_PER_READ, |r| {
                        r.1.as_ref().map_or(0, String::len)
                    })
                    .await?
                };
                tx.commit().await?;
                Ok(page
                    .items
                    .into_iter()
                    .map(|(seq, message, retry_ms)| McpEvent {
                        seq,
                        message,
                        retry_ms,
                    })
                    .collect())
            }

            pub async fn touch_mcp_sessions(
                &self,
                ids: &[String],
                at: DateTime<Utc>,
            ) -> Result<(), StoreError> {
                let _turn = self.turn().await?;
                sqlx::query(sql(format!(
                    "update mcp_session set last_used_at = $2 where session_id in (select value from {each}($1{j}))",
                    each = $each,
                    j = $j
                )))
                .bind(json_list(ids))
                .bind(at)
                .execute(&self.$cross)
                .await?;
                Ok(())
            }

            /// Ends up to `limit` of the sessions last used before `before`, the
            /// longest unused first, with their stored events; how many went.
            async fn prune_mcp_sessions(
                &self,
                before: DateTime<Utc>,
                limit: i64,
            ) -> Result<u64, StoreError> {
                let mut tx = self.cross_tx().await?;
                let gone: Vec<String> = sqlx::query_scalar(
                    "delete from mcp_session where session_id in \
                     (select session_id from mcp_session where last_used_at < $1 \
                      order by last_used_at limit $2) \
                     returning session_id",
                )
                .bind(before)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
                sqlx::query(sql(format!(
                    "delete from mcp_event where session_id in (select value from {each}($1{j}))",
                    each = $each,
                    j = $j
                )))
                .bind(json_list(&gone))
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(gone.len() as u64)
            }

            /// Drops up to `limit` of the stored events older than `before`, the
            /// oldest first; how many went.
            async fn prune_mcp_events(
                &self,
                before: DateTime<Utc>,
                limit: i64,
            ) -> Result<u64, StoreError> {
                let delete = "delete from mcp_event where event_seq in \
                     (select event_seq from mcp_event where created_at < $1 \
                      order by created_at limit $2)";
                self.delete_batch(delete, before, limit).await
            }
        }
    };
}

session_store!(
    PostgresStore,
    owner,
    postgres_once,
    "::uuid",
    "::json",
    "::text",
    "json_array_elements_text"
);
session_store!(SqliteStore, pool, sqlite_once, "", "", "", "json_each");

/// The MCP session seam of [`toolgate_core::stores`], for the MCP adapter's sessions.
#[async_trait::async_trait]
impl toolgate_core::stores::SessionStore for Store {
    /// Records an MCP session; [`StoreError::Conflict`] if the id is taken.
    async fn put_mcp_session(&self, session: &McpSession) -> Result<(), StoreError> {
        dispatch!(self, s => s.put_mcp_session(session).await)
    }

    /// The session with this id, whichever tenant it belongs to: the caller is then
    /// checked against its owner.
    async fn mcp_session(&self, id: &str) -> Result<Option<McpSession>, StoreError> {
        dispatch!(self, s => s.mcp_session(id).await)
    }

    /// Records the level this tenant's session `id` chose with `logging/setLevel`;
    /// `false` when the tenant has no such session.
    async fn set_mcp_session_log_level(
        &self,
        tenant: TenantId,
        id: &str,
        level: &str,
    ) -> Result<bool, StoreError> {
        dispatch!(self, s => s.set_mcp_session_log_level(tenant, id, level).await)
    }

    /// Ends a session: its row and its stored SSE events.
    async fn delete_mcp_session(&self, tenant: TenantId, id: &str) -> Result<(), StoreError> {
        dispatch!(self, s => s.delete_mcp_session(tenant, id).await)
    }

    /// Marks sessions `ids` as in use at `at` (an instance holding them in memory).
    async fn touch_mcp_sessions(
        &self,
        ids: &[String],
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        dispatch!(self, s => s.touch_mcp_sessions(ids, at).await)
    }

    /// Ends the sessions last seen in use before `before`, across tenants, with their
    /// stored events (retention: a client coming back gets 404 and opens a new one),
    /// a thousand sessions per transaction with a pause after each. Returns how many
    /// went.
    async fn prune_mcp_sessions(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        in_batches(
            || async move { dispatch!(self, s => s.prune_mcp_sessions(before, BATCH).await) },
        )
        .await
    }

    /// Stores one SSE event of `stream` in `session`; returns its sequence number, unique
    /// across the store (and so across gateway instances).
    async fn append_mcp_event(
        &self,
        tenant: TenantId,
        session: &str,
        stream: &str,
        message: Option<&str>,
        retry_ms: Option<i32>,
    ) -> Result<i64, StoreError> {
        dispatch!(self, s => s.append_mcp_event(tenant, session, stream, message, retry_ms).await)
    }

    /// The events after event `seq` on the same stream as it, in order; empty when `seq`
    /// is not an event of this tenant's `session`.
    async fn mcp_events_after(
        &self,
        tenant: TenantId,
        session: &str,
        seq: i64,
    ) -> Result<Vec<McpEvent>, StoreError> {
        dispatch!(self, s => s.mcp_events_after(tenant, session, seq).await)
    }

    /// Drops stored SSE events older than `before`, across tenants (retention), a
    /// thousand per statement with a pause after each: on SQLite every delete holds the
    /// audit's commits behind it. Returns how many went.
    async fn prune_mcp_events(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        in_batches(|| async move { dispatch!(self, s => s.prune_mcp_events(before, BATCH).await) })
            .await
    }
}
