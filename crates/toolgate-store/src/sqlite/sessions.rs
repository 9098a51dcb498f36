//! MCP sessions and their stored SSE events on SQLite.

use super::*;

impl SqliteStore {
    pub async fn put_mcp_session(&self, session: &McpSession) -> Result<(), StoreError> {
        sqlx::query(
            "insert into mcp_session (session_id, tenant_id, principal_id, initialize_params, created_at, last_used_at) values ($1, $2, $3, $4, $5, $5)",
        )
        .bind(&session.id)
        .bind(id(session.tenant.0))
        .bind(id(session.principal.0))
        .bind(&session.initialize_params)
        .bind(Utc::now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn mcp_session(&self, session: &str) -> Result<Option<McpSession>, StoreError> {
        let row: Option<(String, String, String)> = sqlx::query_as(
            "select tenant_id, principal_id, initialize_params from mcp_session where session_id = $1",
        )
        .bind(session)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|(tenant, principal, params)| {
            Ok(McpSession {
                id: session.to_owned(),
                tenant: TenantId(uuid(&tenant)?),
                principal: PrincipalId(uuid(&principal)?),
                initialize_params: params,
            })
        })
        .transpose()
    }

    pub async fn delete_mcp_session(
        &self,
        tenant: TenantId,
        session: &str,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("delete from mcp_session where session_id = $1 and tenant_id = $2")
            .bind(session)
            .bind(id(tenant.0))
            .execute(&mut *tx)
            .await?;
        sqlx::query("delete from mcp_event where session_id = $1 and tenant_id = $2")
            .bind(session)
            .bind(id(tenant.0))
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
        Ok(sqlx::query_scalar(
            "insert into mcp_event (tenant_id, session_id, stream_id, message, retry_ms, created_at) values ($1, $2, $3, $4, $5, $6) returning event_seq",
        )
        .bind(id(tenant.0))
        .bind(session)
        .bind(stream)
        .bind(message)
        .bind(retry_ms)
        .bind(Utc::now())
        .fetch_one(&self.pool)
        .await?)
    }

    pub async fn mcp_events_after(
        &self,
        tenant: TenantId,
        session: &str,
        seq: i64,
    ) -> Result<Vec<McpEvent>, StoreError> {
        let rows: Vec<(i64, Option<String>, Option<i32>)> = sqlx::query_as(
            "select e.event_seq, e.message, e.retry_ms from mcp_event e
             join mcp_event last on last.event_seq = $3 and last.session_id = $2 and last.tenant_id = $1
             where e.tenant_id = $1 and e.session_id = $2 and e.stream_id = last.stream_id and e.event_seq > $3
             order by e.event_seq",
        )
        .bind(id(tenant.0))
        .bind(session)
        .bind(seq)
        .fetch_all(&self.pool)
        .await?;
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
        sqlx::query(
            "update mcp_session set last_used_at = $2 where session_id in (select value from json_each($1))",
        )
        .bind(serde_json::to_string(ids).unwrap_or_default())
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn prune_mcp_sessions(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let gone: Vec<String> = sqlx::query_scalar(
            "delete from mcp_session where last_used_at < $1 returning session_id",
        )
        .bind(before)
        .fetch_all(&mut *tx)
        .await?;
        sqlx::query("delete from mcp_event where session_id in (select value from json_each($1))")
            .bind(serde_json::to_string(&gone).unwrap_or_default())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(gone.len() as u64)
    }

    pub async fn prune_mcp_events(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let done = sqlx::query("delete from mcp_event where created_at < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}
