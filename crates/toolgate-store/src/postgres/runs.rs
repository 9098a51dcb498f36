//! Agents, runs and run journals on Postgres (see [`crate::runs`]).

use chrono::{DateTime, Utc};
use serde_json::Value;
use toolgate_core::{PrincipalId, RunId, TenantId};
use uuid::Uuid;

use super::{PostgresStore, now};
use crate::StoreError;
use crate::model::{AgentRecord, NewRun, RunEventRecord, RunFinish, RunRecord};
use crate::runs::{AGENT_CONFLICT, AgentRow, READY, SEQ_CONFLICT, event_kind, json};

type PgRunRow = (
    Uuid,
    Uuid,
    Uuid,
    String,
    Uuid,
    String,
    String,
    String,
    String,
    Option<String>,
    bool,
    Option<String>,
    Option<String>,
    bool,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
);

fn pg_run(r: PgRunRow) -> Result<RunRecord, StoreError> {
    Ok(RunRecord {
        id: RunId(r.0),
        tenant: TenantId(r.1),
        agent_id: r.2,
        agent_name: r.3,
        principal: PrincipalId(r.4),
        auth: json(&r.5)?,
        agent_config: json(&r.6)?,
        input: r.7,
        status: r.8,
        output: r.9,
        best_effort: r.10,
        error: r.11,
        usage: r.12.as_deref().map(json).transpose()?,
        cancel_requested: r.13,
        created_at: r.14,
        finished_at: r.15,
    })
}

/// [`RUN_COLUMNS`] with Postgres' JSON columns read as text.
const PG_RUN_COLUMNS: &str = "run_id, tenant_id, agent_id, agent_name, principal_id, auth::text, agent_config::text, input, status, output, best_effort, error, usage::text, cancel_requested, created_at, finished_at";

fn pg_run_select(filter: &str) -> String {
    format!("select {PG_RUN_COLUMNS} from run {filter}")
}

impl PostgresStore {
    pub async fn create_agent(
        &self,
        tenant: TenantId,
        name: &str,
        config: &Value,
    ) -> Result<AgentRecord, StoreError> {
        let at = now();
        let record = AgentRecord {
            id: Uuid::now_v7(),
            tenant,
            name: name.to_owned(),
            config: config.clone(),
            created_at: at,
            updated_at: at,
        };
        let mut tx = self.tenant_tx(tenant).await?;
        sqlx::query("insert into agent (agent_id, tenant_id, name, config, created_at, updated_at) values ($1, $2, $3, $4::jsonb, $5, $5)")
            .bind(record.id)
            .bind(tenant.0)
            .bind(name)
            .bind(config.to_string())
            .bind(at)
            .execute(&mut *tx)
            .await
            .map_err(|e| StoreError::on_constraint(e, "agent_tenant_name_key", AGENT_CONFLICT))?;
        tx.commit().await?;
        Ok(record)
    }

    /// The tenant's agents, or only the one with id `only`.
    pub async fn agents(
        &self,
        tenant: TenantId,
        only: Option<Uuid>,
    ) -> Result<Vec<AgentRecord>, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows: Vec<AgentRow<Uuid>> = sqlx::query_as(
            "select agent_id, name, config::text, created_at, updated_at from agent where tenant_id = $1 and ($2::uuid is null or agent_id = $2) order by name",
        )
        .bind(tenant.0)
        .bind(only)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.into_iter()
            .map(|(id, name, config, created_at, updated_at)| {
                Ok(AgentRecord {
                    id,
                    tenant,
                    name,
                    config: json(&config)?,
                    created_at,
                    updated_at,
                })
            })
            .collect()
    }

    pub async fn update_agent(
        &self,
        tenant: TenantId,
        agent: Uuid,
        name: &str,
        config: &Value,
    ) -> Result<bool, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let done = sqlx::query("update agent set name = $3, config = $4::jsonb, updated_at = $5 where tenant_id = $1 and agent_id = $2")
            .bind(tenant.0)
            .bind(agent)
            .bind(name)
            .bind(config.to_string())
            .bind(now())
            .execute(&mut *tx)
            .await
            .map_err(|e| StoreError::on_constraint(e, "agent_tenant_name_key", AGENT_CONFLICT))?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn delete_agent(&self, tenant: TenantId, agent: Uuid) -> Result<bool, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let done = sqlx::query("delete from agent where tenant_id = $1 and agent_id = $2")
            .bind(tenant.0)
            .bind(agent)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn create_run(&self, tenant: TenantId, new: &NewRun) -> Result<(), StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let at = now();
        sqlx::query("insert into run (run_id, tenant_id, agent_id, agent_name, principal_id, auth, agent_config, input, status, owner, lease_until, created_at) values ($1, $2, $3, $4, $5, $6::jsonb, $7::jsonb, $8, 'running', $9, $10, $11)")
            .bind(new.id.0)
            .bind(tenant.0)
            .bind(new.agent_id)
            .bind(&new.agent_name)
            .bind(new.principal.0)
            .bind(new.auth.to_string())
            .bind(new.agent_config.to_string())
            .bind(&new.input)
            .bind(&new.owner)
            .bind(new.lease_until)
            .bind(at)
            .execute(&mut *tx)
            .await?;
        insert_pg_event(&mut tx, tenant, new.id, 1, &new.first_event, at).await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn append_run_events(
        &self,
        tenant: TenantId,
        run: RunId,
        first_seq: i64,
        events: &[Value],
        finish: Option<&RunFinish>,
        durable: bool,
    ) -> Result<(), StoreError> {
        let kinds: Vec<&str> = events.iter().map(event_kind).collect();
        let payloads: Vec<String> = events.iter().map(Value::to_string).collect();
        let append =
            sqlx::query("select toolgate_append_run_events($1, $2, $3, $4, $5::jsonb[], $6)")
                .bind(tenant.0)
                .bind(run.0)
                .bind(first_seq)
                .bind(kinds)
                .bind(payloads)
                .bind(durable || finish.is_some());
        let Some(f) = finish else {
            // The common case: one statement, one round trip, one commit.
            append
                .execute(&self.app)
                .await
                .map_err(|e| StoreError::on_constraint(e, "run_event_pkey", SEQ_CONFLICT))?;
            return Ok(());
        };
        let mut tx = self.tenant_tx(tenant).await?;
        append
            .execute(&mut *tx)
            .await
            .map_err(|e| StoreError::on_constraint(e, "run_event_pkey", SEQ_CONFLICT))?;
        sqlx::query("update run set status = $3, output = $4, best_effort = $5, error = $6, usage = $7::jsonb, finished_at = case when $3 = 'awaiting_approval' then null else $8 end, owner = null, lease_until = null where tenant_id = $1 and run_id = $2")
            .bind(tenant.0)
            .bind(run.0)
            .bind(&f.status)
            .bind(&f.output)
            .bind(f.best_effort)
            .bind(&f.error)
            .bind(f.usage.to_string())
            .bind(now())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn get_run(
        &self,
        tenant: TenantId,
        run: RunId,
    ) -> Result<Option<RunRecord>, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let row: Option<PgRunRow> = sqlx::query_as(sqlx::AssertSqlSafe(pg_run_select(
            "where tenant_id = $1 and run_id = $2",
        )))
        .bind(tenant.0)
        .bind(run.0)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        row.map(pg_run).transpose()
    }

    pub async fn list_runs(
        &self,
        tenant: TenantId,
        limit: i64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows: Vec<PgRunRow> = sqlx::query_as(sqlx::AssertSqlSafe(pg_run_select(
            "where tenant_id = $1 order by created_at desc, run_id desc limit $2",
        )))
        .bind(tenant.0)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.into_iter().map(pg_run).collect()
    }

    pub async fn run_events(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
    ) -> Result<Vec<RunEventRecord>, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows: Vec<(i64, String, String, DateTime<Utc>)> = sqlx::query_as(
            "select seq, kind, payload::text, created_at from run_event where tenant_id = $1 and run_id = $2 and seq > $3 order by seq",
        )
        .bind(tenant.0)
        .bind(run.0)
        .bind(after)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.into_iter()
            .map(|(seq, kind, payload, created_at)| {
                Ok(RunEventRecord {
                    seq,
                    kind,
                    payload: json(&payload)?,
                    created_at,
                })
            })
            .collect()
    }

    pub async fn request_run_cancel(
        &self,
        tenant: TenantId,
        run: RunId,
    ) -> Result<bool, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let done = sqlx::query("update run set cancel_requested = true where tenant_id = $1 and run_id = $2 and status in ('running', 'awaiting_approval')")
            .bind(tenant.0)
            .bind(run.0)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn renew_run_leases(
        &self,
        owner: &str,
        runs: &[RunId],
        until: DateTime<Utc>,
    ) -> Result<Vec<RunId>, StoreError> {
        let ids: Vec<Uuid> = runs.iter().map(|r| r.0).collect();
        let rows: Vec<(Uuid, bool)> = sqlx::query_as(
            "update run set lease_until = $3 where run_id = any($2) and owner = $1 and status = 'running' returning run_id, cancel_requested",
        )
        .bind(owner)
        .bind(&ids)
        .bind(until)
        .fetch_all(&self.owner)
        .await?;
        Ok(rows
            .into_iter()
            .filter(|r| r.1)
            .map(|r| RunId(r.0))
            .collect())
    }

    pub async fn claim_orphaned_runs(
        &self,
        owner: &str,
        until: DateTime<Utc>,
        limit: i64,
        expired_before: DateTime<Utc>,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let rows: Vec<PgRunRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "update run set status = 'running', owner = $1, lease_until = $2 where run_id in (select r.run_id from run r where {READY} order by r.created_at limit $3 for update of r skip locked) returning {PG_RUN_COLUMNS}"
        )))
        .bind(owner)
        .bind(until)
        .bind(limit)
        .bind(expired_before)
        .bind(now())
        .fetch_all(&self.owner)
        .await?;
        rows.into_iter().map(pg_run).collect()
    }
}

async fn insert_pg_event(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    tenant: TenantId,
    run: RunId,
    seq: i64,
    event: &Value,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    sqlx::query("insert into run_event (run_id, tenant_id, seq, kind, payload, created_at) values ($1, $2, $3, $4, $5::jsonb, $6)")
        .bind(run.0)
        .bind(tenant.0)
        .bind(seq)
        .bind(kind)
        .bind(event.to_string())
        .bind(at)
        .execute(&mut **tx)
        .await
        .map_err(|e| StoreError::on_constraint(e, "run_event_pkey", "another instance is writing this run"))?;
    Ok(())
}
