//! Agents, runs and run journals, on both backends: what they share here, each
//! backend's queries in `postgres/runs.rs` and `sqlite/runs.rs`.
//!
//! A run's events are numbered 1, 2, 3… by the one instance that holds the run's lease;
//! the primary key `(run_id, seq)` refuses a second writer. The last event and the run's
//! end state are written in one transaction. Leases and orphan claims span tenants by
//! nature (an instance drives runs of every tenant) and use the owner pool on Postgres.

use chrono::{DateTime, Utc};
use serde_json::Value;
use toolgate_core::{RunId, TenantId};
use uuid::Uuid;

use crate::model::{AgentRecord, NewRun, RunEventRecord, RunFinish, RunRecord};
use crate::{Store, StoreError};

/// Runs an instance may take over: running ones whose lease ended before `$4`, and ones
/// waiting for approval that can go on (a decision not yet used, an approval expired by
/// `$5`, or a cancel request).
pub(crate) const READY: &str = "(r.status = 'running' and (r.lease_until is null or r.lease_until < $4)) \
    or (r.status = 'awaiting_approval' and (r.cancel_requested \
        or exists (select 1 from approval a where a.run_id = r.run_id and a.used_at is null \
                   and (a.status <> 'pending' or a.expires_at <= $5))))";

pub(crate) const AGENT_CONFLICT: &str = "an agent with this name exists in your tenant";
pub(crate) const SEQ_CONFLICT: &str = "another instance is writing this run";

pub(crate) fn event_kind(event: &Value) -> &str {
    event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
}

pub(crate) fn json(text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("stored JSON: {e}")))
}

/// `agent_id, name, config, created_at, updated_at`, with the id as each backend stores it.
pub(crate) type AgentRow<Id> = (Id, String, String, DateTime<Utc>, DateTime<Utc>);

/// Columns of `run`, JSON as text, in [`RunRow`] order.
pub(crate) const RUN_COLUMNS: &str = "run_id, tenant_id, agent_id, agent_name, principal_id, auth, agent_config, input, status, output, best_effort, error, usage, cancel_requested, created_at, finished_at";

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

    pub async fn get_run(
        &self,
        tenant: TenantId,
        run: RunId,
    ) -> Result<Option<RunRecord>, StoreError> {
        dispatch!(self, s => s.get_run(tenant, run).await)
    }

    /// The tenant's latest runs, newest first.
    pub async fn list_runs(
        &self,
        tenant: TenantId,
        limit: i64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        dispatch!(self, s => s.list_runs(tenant, limit).await)
    }
}

/// The run seam of [`toolgate_core::stores`], for the agent crate's run supervisor.
#[async_trait::async_trait]
impl toolgate_core::stores::RunStore for Store {
    /// Records a new run and its first event (sequence 1), in one transaction.
    async fn create_run(&self, tenant: TenantId, new: &NewRun) -> Result<(), StoreError> {
        dispatch!(self, s => s.create_run(tenant, new).await)
    }

    /// Appends `events` to a run's journal, numbered from `first_seq`, in one
    /// transaction; with `finish`, also ends the run in it. [`StoreError::Conflict`]
    /// when a number is taken (another instance writes the run). Not `durable`: on
    /// Postgres the commit does not wait for its WAL flush (a crash may lose these events,
    /// never a later durable one's predecessors); a run's end is always durable.
    async fn append_run_events(
        &self,
        tenant: TenantId,
        run: RunId,
        first_seq: i64,
        events: &[Value],
        finish: Option<&RunFinish>,
        durable: bool,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.append_run_events(tenant, run, first_seq, events, finish, durable).await)
    }

    /// A run's events after sequence `after`, in order.
    async fn run_events(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
    ) -> Result<Vec<RunEventRecord>, StoreError> {
        dispatch!(self, s => s.run_events(tenant, run, after).await)
    }

    /// Marks a running run for cancellation (its driver sees it at the next lease
    /// renewal); false when it is not running.
    async fn request_run_cancel(&self, tenant: TenantId, run: RunId) -> Result<bool, StoreError> {
        dispatch!(self, s => s.request_run_cancel(tenant, run).await)
    }

    /// Extends `owner`'s leases on `runs`; returns those whose cancellation was asked.
    async fn renew_run_leases(
        &self,
        owner: &str,
        runs: &[RunId],
        until: DateTime<Utc>,
    ) -> Result<Vec<RunId>, StoreError> {
        dispatch!(self, s => s.renew_run_leases(owner, runs, until).await)
    }

    /// Takes over running runs whose lease ended before `expired_before` (their instance
    /// stopped), and runs waiting for approval that can go on (see [`READY`]): at most
    /// `limit`, each set running and leased to `owner` until `until`.
    async fn claim_orphaned_runs(
        &self,
        owner: &str,
        until: DateTime<Utc>,
        limit: i64,
        expired_before: DateTime<Utc>,
    ) -> Result<Vec<RunRecord>, StoreError> {
        dispatch!(self, s => s.claim_orphaned_runs(owner, until, limit, expired_before).await)
    }
}
