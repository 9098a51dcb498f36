//! MCP sessions and their stored SSE events on Postgres.

use super::*;

impl PostgresStore {
    pub async fn put_mcp_session(&self, session: &McpSession) -> Result<(), StoreError> {
        let mut tx = self.tenant_tx(session.tenant).await?;
        sqlx::query(
            "insert into mcp_session (session_id, tenant_id, principal_id, initialize_params) values ($1, $2, $3, $4::json)",
        )
        .bind(&session.id)
        .bind(session.tenant.0)
        .bind(session.principal.0)
        .bind(&session.initialize_params)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn mcp_session(&self, id: &str) -> Result<Option<McpSession>, StoreError> {
        let row: Option<(Uuid, Uuid, String)> = sqlx::query_as(
            "select tenant_id, principal_id, initialize_params::text from mcp_session where session_id = $1",
        )
        .bind(id)
        .fetch_optional(&self.owner)
        .await?;
        Ok(row.map(|(tenant, principal, params)| McpSession {
            id: id.to_owned(),
            tenant: TenantId(tenant),
            principal: PrincipalId(principal),
            initialize_params: params,
        }))
    }

    pub async fn delete_mcp_session(&self, tenant: TenantId, id: &str) -> Result<(), StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        sqlx::query("delete from mcp_session where session_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("delete from mcp_event where session_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn append_mcp_event(
        &self,
        tenant: TenantId,
        session: &str,
        stream: &str,
        message: Option<&str>,
        retry_ms: Option<i32>,
    ) -> Result<i64, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let seq = sqlx::query_scalar(
            "insert into mcp_event (tenant_id, session_id, stream_id, message, retry_ms) values ($1, $2, $3, $4, $5) returning event_seq",
        )
        .bind(tenant.0)
        .bind(session)
        .bind(stream)
        .bind(message)
        .bind(retry_ms)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(seq)
    }

    pub async fn mcp_events_after(
        &self,
        tenant: TenantId,
        session: &str,
        seq: i64,
    ) -> Result<Vec<McpEvent>, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows: Vec<(i64, Option<String>, Option<i32>)> = sqlx::query_as(
            "select e.event_seq, e.message, e.retry_ms from mcp_event e
             join mcp_event last on last.event_seq = $2 and last.session_id = $1
             where e.session_id = $1 and e.stream_id = last.stream_id and e.event_seq > $2
             order by e.event_seq",
        )
        .bind(session)
        .bind(seq)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(rows
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
        sqlx::query("update mcp_session set last_used_at = $2 where session_id = any($1)")
            .bind(ids)
            .bind(at)
            .execute(&self.owner)
            .await?;
        Ok(())
    }

    pub async fn prune_mcp_sessions(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut tx = self.owner.begin().await?;
        let gone: Vec<String> = sqlx::query_scalar(
            "delete from mcp_session where last_used_at < $1 returning session_id",
        )
        .bind(before)
        .fetch_all(&mut *tx)
        .await?;
        sqlx::query("delete from mcp_event where session_id = any($1)")
            .bind(&gone)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(gone.len() as u64)
    }

    pub async fn prune_mcp_events(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let done = sqlx::query("delete from mcp_event where created_at < $1")
            .bind(before)
            .execute(&self.owner)
            .await?;
        Ok(done.rows_affected())
    }
}
