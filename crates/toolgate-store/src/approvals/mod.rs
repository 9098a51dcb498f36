//! Approval policies and approvals, on both backends.
//!
//! The SQL is the same on both but for casts (Postgres keeps uuids and jsonb; SQLite
//! text), so one macro writes both implementations: ids and JSON travel as text and are
//! cast on Postgres. Every operation on one approval is one transaction, so two gateway
//! instances can never both use an approval or both decide it.

use chrono::{DateTime, Utc};
use serde_json::Value;
use toolgate_core::policy::{ApprovalRequest, Gate};
use toolgate_core::{ApprovalId, CallId, PrincipalId, RunId, TenantId};

use crate::model::{ApprovalState, Before, Page};
use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::text::{json, sql, uuid};
use crate::{Store, StoreError};

pub(crate) mod sql;

pub use toolgate_core::stores::{ApprovalRecord, ApprovalStatus, Decision};

const EXPIRED_REASON: &str = "the approval expired before anyone decided";
const LAPSED_REASON: &str = "the approval lapsed: the call it allowed was not made in time";

#[derive(sqlx::FromRow)]
struct ApprovalRow {
    approval_id: String,
    tenant_id: String,
    call_id: String,
    tool: String,
    risk: String,
    adapter: String,
    arguments: String,
    arguments_hash: String,
    call_arguments: Option<String>,
    requester_id: String,
    requester_name: String,
    auth: String,
    run_id: Option<String>,
    step: Option<i64>,
    agent: Option<String>,
    status: String,
    reason: Option<String>,
    decided_by: Option<String>,
    decided_by_name: Option<String>,
    decided_at: Option<DateTime<Utc>>,
    expires_at: DateTime<Utc>,
    created_at: DateTime<Utc>,
    used_at: Option<DateTime<Utc>>,
    result: Option<String>,
}

/// A core enum from the name it is stored by (its serde name).
fn named<T: serde::de::DeserializeOwned>(name: &str, what: &str) -> Result<T, StoreError> {
    serde_json::from_value(Value::String(name.to_owned()))
        .map_err(|_| StoreError::Corrupt(format!("stored {what} {name:?}")))
}

impl ApprovalRow {
    /// The length of what a call's size decides: what
    /// [`read_bounded`](crate::read_bounded) counts.
    fn text_bytes(&self) -> usize {
        self.arguments.len()
            + self.call_arguments.as_ref().map_or(0, String::len)
            + self.result.as_ref().map_or(0, String::len)
            + self.auth.len()
    }

    fn into_record(self) -> Result<ApprovalRecord, StoreError> {
        Ok(ApprovalRecord {
            id: ApprovalId(uuid(&self.approval_id)?),
            tenant: TenantId(uuid(&self.tenant_id)?),
            call_id: CallId(uuid(&self.call_id)?),
            tool: self.tool,
            risk: named(&self.risk, "risk")?,
            adapter: named(&self.adapter, "adapter")?,
            arguments: json(&self.arguments)?,
            arguments_hash: self.arguments_hash,
            call_arguments: self.call_arguments.as_deref().map(json).transpose()?,
            requester: PrincipalId(uuid(&self.requester_id)?),
            requester_name: self.requester_name,
            auth: json(&self.auth)?,
            run_id: self.run_id.as_deref().map(uuid).transpose()?.map(RunId),
            step: self.step,
            agent: self.agent,
            status: ApprovalStatus::parse(&self.status)
                .ok_or_else(|| StoreError::Corrupt(format!("approval status {:?}", self.status)))?,
            reason: self.reason,
            decided_by: self
                .decided_by
                .as_deref()
                .map(uuid)
                .transpose()?
                .map(PrincipalId),
            decided_by_name: self.decided_by_name,
            decided_at: self.decided_at,
            expires_at: self.expires_at,
            created_at: self.created_at,
            used_at: self.used_at,
            result: self.result.as_deref().map(json).transpose()?,
        })
    }
}

fn text(id: impl std::fmt::Display) -> String {
    id.to_string()
}

/// What [`gate`] does with the approval it found for a call.
fn settle(found: &ApprovalRecord, now: DateTime<Utc>) -> Settle {
    match found.status {
        ApprovalStatus::Pending if found.expires_at > now => Settle::Pending,
        ApprovalStatus::Pending | ApprovalStatus::Expired => Settle::Expired,
        ApprovalStatus::Approved if found.used_at.is_some() => Settle::UsedUp,
        ApprovalStatus::Approved if found.expires_at > now => Settle::UseApproval,
        ApprovalStatus::Approved => Settle::Expired,
        ApprovalStatus::Denied => Settle::Denied,
    }
}

#[derive(Clone, Copy)]
enum Settle {
    Pending,
    Expired,
    UseApproval,
    UsedUp,
    Denied,
}

/// Why an approval that was never used expired: as stored once marked; else nobody
/// decided, or its call was not made in time after it was approved.
fn expired_reason(found: &ApprovalRecord) -> String {
    match (found.status, &found.reason) {
        (ApprovalStatus::Expired, Some(reason)) => reason.clone(),
        _ if found.decided_at.is_some() => LAPSED_REASON.to_owned(),
        _ => EXPIRED_REASON.to_owned(),
    }
}

fn denied(found: &ApprovalRecord, expired: bool) -> Gate {
    Gate::Denied {
        approval: found.id,
        reason: if expired {
            expired_reason(found)
        } else {
            found.reason.clone().unwrap_or_default()
        },
        decided_by: if expired {
            None
        } else {
            found.decided_by_name.clone()
        },
    }
}

impl Store {
    pub async fn put_approval_policy(
        &self,
        tenant: TenantId,
        policy: &Value,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.put_approval_policy(tenant, policy).await)
    }

    /// The tenant's approvals, newest first; `status` filters (`pending` = still open),
    /// `before` goes on from a previous page.
    pub async fn list_approvals(
        &self,
        tenant: TenantId,
        status: Option<&str>,
        before: Option<Before>,
        limit: i64,
    ) -> Result<Page<ApprovalRecord>, StoreError> {
        dispatch!(self, s => s.list_approvals(tenant, status, before, limit).await)
    }

    /// Where `tenant`'s newest `limit` approvals stand (newest first), without their
    /// arguments and results: what a stream of their changes compares.
    pub async fn approval_states(
        &self,
        tenant: TenantId,
        limit: i64,
    ) -> Result<Vec<ApprovalState>, StoreError> {
        dispatch!(self, s => s.approval_states(tenant, limit).await)
    }

    /// The approval a call asked for, by the call's id.
    pub async fn approval_for_call(
        &self,
        tenant: TenantId,
        call: CallId,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        dispatch!(self, s => s.approval_for_call(tenant, call).await)
    }
}

/// The approval seam of [`toolgate_core::stores`], for core's approval service and the
/// agent crate's run supervisor.
#[async_trait::async_trait]
impl toolgate_core::stores::ApprovalStore for Store {
    /// The tenant's approval policy document, if it set one.
    async fn approval_policy(&self, tenant: TenantId) -> Result<Option<Value>, StoreError> {
        dispatch!(self, s => s.approval_policy(tenant).await)
    }

    /// Settles a call that needs approval (see [`toolgate_core::Approvals::gate`]).
    async fn gate_approval(&self, request: &ApprovalRequest) -> Result<Gate, StoreError> {
        dispatch!(self, s => s.gate_approval(request).await)
    }

    async fn get_approval(
        &self,
        tenant: TenantId,
        approval: ApprovalId,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        dispatch!(self, s => s.get_approval(tenant, approval).await)
    }

    async fn decide_approval(
        &self,
        tenant: TenantId,
        approval: ApprovalId,
        decision: &Decision,
    ) -> Result<ApprovalRecord, StoreError> {
        dispatch!(self, s => s.decide_approval(tenant, approval, decision).await)
    }

    async fn set_approval_result(
        &self,
        tenant: TenantId,
        approval: ApprovalId,
        result: &Value,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.set_approval_result(tenant, approval, result).await)
    }

    async fn expire_approvals(&self) -> Result<Vec<(TenantId, ApprovalId)>, StoreError> {
        dispatch!(self, s => s.expire_approvals().await)
    }

    async fn interrupt_approved_calls(
        &self,
        started_before: DateTime<Utc>,
        result: &Value,
    ) -> Result<Vec<(TenantId, ApprovalId)>, StoreError> {
        dispatch!(self, s => s.interrupt_approved_calls(started_before, result).await)
    }

    /// Expires what `run` still waits for (see the backends' `expire_run_approvals`).
    async fn expire_run_approvals(
        &self,
        tenant: TenantId,
        run: RunId,
        reason: &str,
    ) -> Result<Vec<ApprovalId>, StoreError> {
        dispatch!(self, s => s.expire_run_approvals(tenant, run, reason).await)
    }
}
