//! Agents, runs and run journals on SQLite (see [`crate::runs`]).

use chrono::{DateTime, Utc};
use serde_json::Value;
use toolgate_core::stores::Change;
use toolgate_core::{PrincipalId, RunId, TenantId};
use uuid::Uuid;

use super::{SqliteStore, id, uuid};
use crate::StoreError;
use crate::model::{AgentRecord, NewRun, RunEventRecord, RunFinish, RunRecord};
use crate::runs::{AGENT_CONFLICT, AgentRow, READY, RUN_COLUMNS, json};

type SqliteRunRow = (
    String,
    String,
    String,
    String,
    String,
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

fn sqlite_run(r: SqliteRunRow) -> Result<RunRecord, StoreError> {
    Ok(RunRecord {
        id: RunId(uuid(&r.0)?),
        tenant: TenantId(uuid(&r.1)?),
        agent_id: uuid(&r.2)?,
        agent_name: r.3,
        principal: PrincipalId(uuid(&r.4)?),
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

impl SqliteStore {
    pub async fn create_agent(
        &self,
        tenant: TenantId,
        name: &str,
        config: &Value,
    ) -> Result<AgentRecord, StoreError> {
        let at = Utc::now();
        let record = AgentRecord {
            id: Uuid::now_v7(),
            tenant,
            name: name.to_owned(),
            config: config.clone(),
            created_at: at,
            updated_at: at,
        };
        sqlx::query("insert into agent (agent_id, tenant_id, name, config, created_at, updated_at) values ($1, $2, $3, $4, $5, $5)")
            .bind(id(record.id))
            .bind(id(tenant.0))
            .bind(name)
            .bind(config.to_string())
            .bind(at)
            .execute(&self.pool)
            .await
            .map_err(|e| StoreError::on_constraint(e, "agent_tenant_name_key", AGENT_CONFLICT))?;
        Ok(record)
    }

    /// The tenant's agents, or only the one with id `only`.
    pub async fn agents(
        &self,
        tenant: TenantId,
        only: Option<Uuid>,
    ) -> Result<Vec<AgentRecord>, StoreError> {
        let rows: Vec<AgentRow<String>> = sqlx::query_as(
            "select agent_id, name, config, created_at, updated_at from agent where tenant_id = $1 and ($2 is null or agent_id = $2) order by name",
        )
        .bind(id(tenant.0))
        .bind(only.map(id))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(agent, name, config, created_at, updated_at)| {
                Ok(AgentRecord {
                    id: uuid(&agent)?,
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
        let done = sqlx::query("update agent set name = $3, config = $4, updated_at = $5 where tenant_id = $1 and agent_id = $2")
            .bind(id(tenant.0))
            .bind(id(agent))
            .bind(name)
            .bind(config.to_string())
            .bind(Utc::now())
            .execute(&self.pool)
            .await
            .map_err(|e| StoreError::on_constraint(e, "agent_tenant_name_key", AGENT_CONFLICT))?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn delete_agent(&self, tenant: TenantId, agent: Uuid) -> Result<bool, StoreError> {
        let done = sqlx::query("delete from agent where tenant_id = $1 and agent_id = $2")
            .bind(id(tenant.0))
            .bind(id(agent))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn create_run(&self, tenant: TenantId, new: &NewRun) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let at = Utc::now();
        sqlx::query("insert into run (run_id, tenant_id, agent_id, agent_name, principal_id, auth, agent_config, input, status, owner, lease_until, created_at) values ($1, $2, $3, $4, $5, $6, $7, $8, 'running', $9, $10, $11)")
            .bind(id(new.id.0))
            .bind(id(tenant.0))
            .bind(id(new.agent_id))
            .bind(&new.agent_name)
            .bind(id(new.principal.0))
            .bind(new.auth.to_string())
            .bind(new.agent_config.to_string())
            .bind(&new.input)
            .bind(&new.owner)
            .bind(new.lease_until)
            .bind(at)
            .execute(&mut *tx)
            .await?;
        insert_sqlite_event(&mut tx, tenant, new.id, 1, &new.first_event, at).await?;
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
        // SQLite commits every group durably.
        _durable: bool,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let at = Utc::now();
        for (n, event) in events.iter().enumerate() {
            insert_sqlite_event(&mut tx, tenant, run, first_seq + n as i64, event, at).await?;
        }
        if let Some(f) = finish {
            sqlx::query("update run set status = $3, output = $4, best_effort = $5, error = $6, usage = $7, finished_at = case when $3 = 'awaiting_approval' then null else $8 end, owner = null, lease_until = null where tenant_id = $1 and run_id = $2")
                .bind(id(tenant.0))
                .bind(id(run.0))
                .bind(&f.status)
                .bind(&f.output)
                .bind(f.best_effort)
                .bind(&f.error)
                .bind(f.usage.to_string())
                .bind(at)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        self.announced(Change::Run { tenant, run });
        Ok(())
    }

    pub async fn get_run(
        &self,
        tenant: TenantId,
        run: RunId,
    ) -> Result<Option<RunRecord>, StoreError> {
        let row: Option<SqliteRunRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select {RUN_COLUMNS} from run where tenant_id = $1 and run_id = $2"
        )))
        .bind(id(tenant.0))
        .bind(id(run.0))
        .fetch_optional(&self.pool)
        .await?;
        row.map(sqlite_run).transpose()
    }

    pub async fn list_runs(
        &self,
        tenant: TenantId,
        limit: i64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let rows: Vec<SqliteRunRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select {RUN_COLUMNS} from run where tenant_id = $1 order by created_at desc, run_id desc limit $2"
        )))
        .bind(id(tenant.0))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(sqlite_run).collect()
    }

    pub async fn run_events(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
    ) -> Result<Vec<RunEventRecord>, StoreError> {
        let rows: Vec<(i64, String, String, DateTime<Utc>)> = sqlx::query_as(
            "select seq, kind, payload, created_at from run_event where tenant_id = $1 and run_id = $2 and seq > $3 order by seq",
        )
        .bind(id(tenant.0))
        .bind(id(run.0))
        .bind(after)
        .fetch_all(&self.pool)
        .await?;
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
        let done = sqlx::query("update run set cancel_requested = 1 where tenant_id = $1 and run_id = $2 and status in ('running', 'awaiting_approval')")
            .bind(id(tenant.0))
            .bind(id(run.0))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn renew_run_leases(
        &self,
        owner: &str,
        runs: &[RunId],
        until: DateTime<Utc>,
    ) -> Result<Vec<RunId>, StoreError> {
        let mut cancelled = Vec::new();
        for run in runs {
            let row: Option<(bool,)> = sqlx::query_as(
                "update run set lease_until = $3 where run_id = $2 and owner = $1 and status = 'running' returning cancel_requested",
            )
            .bind(owner)
            .bind(id(run.0))
            .bind(until)
            .fetch_optional(&self.pool)
            .await?;
            if row.is_some_and(|r| r.0) {
                cancelled.push(*run);
            }
        }
        Ok(cancelled)
    }

    pub async fn claim_orphaned_runs(
        &self,
        owner: &str,
        until: DateTime<Utc>,
        limit: i64,
        expired_before: DateTime<Utc>,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let rows: Vec<SqliteRunRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "update run set status = 'running', owner = $1, lease_until = $2 where run_id in (select r.run_id from run r where {READY} order by r.created_at limit $3) returning {RUN_COLUMNS}"
        )))
        .bind(owner)
        .bind(until)
        .bind(limit)
        .bind(expired_before)
        .bind(Utc::now())
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(sqlite_run).collect()
    }
}

async fn insert_sqlite_event(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
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
    sqlx::query("insert into run_event (run_id, tenant_id, seq, kind, payload, created_at) values ($1, $2, $3, $4, $5, $6)")
        .bind(id(run.0))
        .bind(id(tenant.0))
        .bind(seq)
        .bind(kind)
        .bind(event.to_string())
        .bind(at)
        .execute(&mut **tx)
        .await
        .map_err(|e| StoreError::on_constraint(e, "run_event_pkey", "another instance is writing this run"))?;
    Ok(())
}
