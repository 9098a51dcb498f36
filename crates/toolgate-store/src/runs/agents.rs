//! Agents (a tenant's named agent configurations), on both backends: one macro writes
//! both, as for runs.

use chrono::{DateTime, Utc};
use serde_json::Value;
use toolgate_core::TenantId;
use uuid::Uuid;

use crate::model::AgentRecord;
use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::text::{json, sql, uuid};
use crate::{Store, StoreError};

const AGENT_CONFLICT: &str = "an agent with this name exists in your tenant";

/// `agent_id, name, config, created_at, updated_at`.
type AgentRow = (String, String, String, DateTime<Utc>, DateTime<Utc>);

/// Writes the agent operations for one backend. `$once`: the macro running one
/// statement for a tenant (see `sqlite_once`); `$now`: the time as the backend stores
/// it; `$u`, `$j`: the casts of a text parameter to a uuid and to JSON; `$t`: of a uuid
/// or JSON column to text.
macro_rules! agent_store {
    ($store:ty, $once:ident, $now:path, $u:literal, $j:literal, $t:literal) => {
        impl $store {
            pub async fn create_agent(
                &self,
                tenant: TenantId,
                name: &str,
                config: &Value,
            ) -> Result<AgentRecord, StoreError> {
                let at = $now();
                let record = AgentRecord {
                    id: Uuid::now_v7(),
                    tenant,
                    name: name.to_owned(),
                    config: config.clone(),
                    created_at: at,
                    updated_at: at,
                };
                let insert = sql(format!(
                    "insert into agent (agent_id, tenant_id, name, config, created_at, updated_at) \
                     select $1{u}, $2{u}, $3, $4{j}, $5, $5 \
                     where (select count(*) from agent where tenant_id = $2{u}) < $6",
                    u = $u,
                    j = $j
                ));
                let most = crate::Quotas::bound(self.limits.quotas.agents);
                let inserted = $once!(self, tenant, write |conn| {
                    sqlx::query(insert)
                        .bind(record.id.to_string())
                        .bind(tenant.to_string())
                        .bind(name)
                        .bind(config.to_string())
                        .bind(at)
                        .bind(most)
                        .execute(conn)
                        .await
                        .map_err(|e| StoreError::on_constraint(e, "agent_tenant_name_key", AGENT_CONFLICT))?
                });
                if inserted.rows_affected() == 0 {
                    return Err(crate::over_quota(most, "agents", "tenant_agents", "delete some first"));
                }
                Ok(record)
            }

            /// The tenant's agents, or only the one with id `only`.
            pub async fn agents(
                &self,
                tenant: TenantId,
                only: Option<Uuid>,
            ) -> Result<Vec<AgentRecord>, StoreError> {
                let select = sql(format!(
                    "select agent_id{t}, name, config{t}, created_at, updated_at from agent \
                     where tenant_id = $1{u} and ($2 is null or agent_id = $2{u}) order by name",
                    t = $t,
                    u = $u
                ));
                let rows: Vec<AgentRow> = $once!(self, tenant, |conn| {
                    sqlx::query_as(select)
                        .bind(tenant.to_string())
                        .bind(only.map(|id| id.to_string()))
                        .fetch_all(conn)
                        .await?
                });
                rows.into_iter()
                    .map(|(id, name, config, created_at, updated_at)| {
                        Ok(AgentRecord {
                            id: uuid(&id)?,
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
                let update = sql(format!(
                    "update agent set name = $3, config = $4{j}, updated_at = $5 where tenant_id = $1{u} and agent_id = $2{u}",
                    u = $u,
                    j = $j
                ));
                let done = $once!(self, tenant, write |conn| {
                    sqlx::query(update)
                        .bind(tenant.to_string())
                        .bind(agent.to_string())
                        .bind(name)
                        .bind(config.to_string())
                        .bind($now())
                        .execute(conn)
                        .await
                        .map_err(|e| StoreError::on_constraint(e, "agent_tenant_name_key", AGENT_CONFLICT))?
                });
                Ok(done.rows_affected() == 1)
            }

            pub async fn delete_agent(&self, tenant: TenantId, agent: Uuid) -> Result<bool, StoreError> {
                let delete = sql(format!(
                    "delete from agent where tenant_id = $1{u} and agent_id = $2{u}",
                    u = $u
                ));
                let done = $once!(self, tenant, write |conn| {
                    sqlx::query(delete)
                        .bind(tenant.to_string())
                        .bind(agent.to_string())
                        .execute(conn)
                        .await?
                });
                Ok(done.rows_affected() == 1)
            }
        }
    };
}

agent_store!(
    PostgresStore,
    postgres_once,
    crate::now,
    "::uuid",
    "::jsonb",
    "::text"
);
agent_store!(SqliteStore, sqlite_once, Utc::now, "", "", "");

impl Store {
    /// Creates an agent; [`StoreError::Conflict`] when the tenant has one of that name.
    pub async fn create_agent(
        &self,
        tenant: TenantId,
        name: &str,
        config: &Value,
    ) -> Result<AgentRecord, StoreError> {
        dispatch!(self, s => s.create_agent(tenant, name, config).await)
    }

    pub async fn list_agents(&self, tenant: TenantId) -> Result<Vec<AgentRecord>, StoreError> {
        dispatch!(self, s => s.agents(tenant, None).await)
    }

    pub async fn get_agent(
        &self,
        tenant: TenantId,
        agent: Uuid,
    ) -> Result<Option<AgentRecord>, StoreError> {
        let found = dispatch!(self, s => s.agents(tenant, Some(agent)).await)?;
        Ok(found.into_iter().next())
    }

    /// Replaces an agent's name and configuration; false when it does not exist.
    pub async fn update_agent(
        &self,
        tenant: TenantId,
        agent: Uuid,
        name: &str,
        config: &Value,
    ) -> Result<bool, StoreError> {
        dispatch!(self, s => s.update_agent(tenant, agent, name, config).await)
    }

    pub async fn delete_agent(&self, tenant: TenantId, agent: Uuid) -> Result<bool, StoreError> {
        dispatch!(self, s => s.delete_agent(tenant, agent).await)
    }
}
