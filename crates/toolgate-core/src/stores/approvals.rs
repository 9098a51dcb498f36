//! Approval policies and approvals: the records and [`ApprovalStore`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::Backend;
use crate::policy::{ApprovalRequest, Gate};
use crate::{ApprovalId, CallId, PrincipalId, RunId, TenantId};

/// One approval as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct ApprovalRecord {
    pub id: ApprovalId,
    pub tenant: TenantId,
    pub call_id: CallId,
    pub tool: String,
    pub risk: crate::Risk,
    pub adapter: crate::Adapter,
    /// Secret fields masked.
    pub arguments: serde_json::Value,
    pub arguments_hash: String,
    /// As given; `None` once the call is settled.
    pub call_arguments: Option<serde_json::Value>,
    pub requester: PrincipalId,
    pub requester_name: String,
    pub auth: crate::AuthContext,
    pub run_id: Option<RunId>,
    pub step: Option<i64>,
    pub agent: Option<String>,
    pub status: ApprovalStatus,
    pub reason: Option<String>,
    pub decided_by: Option<PrincipalId>,
    pub decided_by_name: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    /// Until a decision: when it expires undecided. Once approved: when the approval
    /// lapses if the call it allows has not been made.
    pub expires_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub used_at: Option<DateTime<Utc>>,
    pub result: Option<serde_json::Value>,
}

impl ApprovalRecord {
    /// Whether `auth` may read this approval (else it is "not found"): one of its
    /// tenant's, asked for by `auth`, or read by someone who may decide approvals or
    /// reads the audit log.
    pub fn is_visible_to(&self, auth: &crate::AuthContext) -> bool {
        use crate::auth::scopes;
        self.tenant == auth.tenant
            && (self.requester == auth.principal.id
                || auth.has_scope(scopes::APPROVALS_DECIDE)
                || auth.has_scope(scopes::AUDIT_READ))
    }

    /// Pending and not yet past its time.
    pub fn is_open(&self, now: DateTime<Utc>) -> bool {
        self.status == ApprovalStatus::Pending && self.expires_at > now
    }

    /// The status a reader should see: a pending approval past its time, or an approved
    /// one whose call was not made in time (it lapsed), is expired even before the sweep
    /// marks it.
    pub fn effective_status(&self, now: DateTime<Utc>) -> ApprovalStatus {
        self.status
            .effective(self.used_at.is_some(), self.expires_at, now)
    }
}

impl ApprovalStatus {
    /// The status a reader should see at `now` of an approval stored with this one,
    /// `used` or not, expiring at `expires_at` (see [`ApprovalRecord::effective_status`]).
    pub fn effective(self, used: bool, expires_at: DateTime<Utc>, now: DateTime<Utc>) -> Self {
        let waiting = match self {
            ApprovalStatus::Pending => true,
            ApprovalStatus::Approved => !used,
            ApprovalStatus::Denied | ApprovalStatus::Expired => false,
        };
        if waiting && expires_at <= now {
            ApprovalStatus::Expired
        } else {
            self
        }
    }
}

/// Where an approval stands; stored and shown as its lower-case name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Denied,
    Expired,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Expired => "expired",
        }
    }

    /// The status named `name`, as stored.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Pending, Self::Approved, Self::Denied, Self::Expired]
            .into_iter()
            .find(|s| s.as_str() == name)
    }
}

impl std::fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compares with a status's stored name (for readers holding names, such as tests).
impl PartialEq<&str> for ApprovalStatus {
    fn eq(&self, name: &&str) -> bool {
        self.as_str() == *name
    }
}

/// A person's decision.
#[derive(Clone, Debug)]
pub struct Decision {
    pub approve: bool,
    pub by: PrincipalId,
    pub by_name: String,
    pub reason: String,
    /// An approval lapses when the call it allows is not made within this time of the
    /// decision (the tenant's approval time): nobody's yes stays good for ever, and the
    /// call's unmasked arguments are not kept for a call never made.
    pub use_within: std::time::Duration,
}

/// Approval policies and approvals: calls gated atomically, decisions stored once, and
/// expiry (of those nobody decided in time, of approved ones whose call was not made in
/// time, and of those a cancelled run no longer waits for).
#[async_trait]
pub trait ApprovalStore: Backend {
    /// The tenant's approval policy document, if it set one.
    async fn approval_policy(
        &self,
        tenant: TenantId,
    ) -> Result<Option<serde_json::Value>, Self::Error>;

    /// Settles a call that needs approval, in one transaction (see
    /// [`Approvals::gate`](crate::Approvals::gate)).
    async fn gate_approval(&self, request: &ApprovalRequest) -> Result<Gate, Self::Error>;

    async fn get_approval(
        &self,
        tenant: TenantId,
        approval: ApprovalId,
    ) -> Result<Option<ApprovalRecord>, Self::Error>;

    /// Stores a person's decision on a pending approval; a conflict when it is decided
    /// or expired already.
    async fn decide_approval(
        &self,
        tenant: TenantId,
        approval: ApprovalId,
        decision: &Decision,
    ) -> Result<ApprovalRecord, Self::Error>;

    /// Keeps the outcome of the call an approval allowed (a REST call run on approval).
    async fn set_approval_result(
        &self,
        tenant: TenantId,
        approval: ApprovalId,
        result: &serde_json::Value,
    ) -> Result<(), Self::Error>;

    /// Marks approvals past their time expired: pending ones nobody decided, approved
    /// ones whose call was not made (lapsed); returns them.
    async fn expire_approvals(&self) -> Result<Vec<(TenantId, ApprovalId)>, Self::Error>;

    /// Keeps `result` as the outcome of every approved REST call, in every tenant, that
    /// started before `started_before` and has none: the instance making it stopped
    /// before keeping one. Returns them.
    async fn interrupt_approved_calls(
        &self,
        started_before: DateTime<Utc>,
        result: &serde_json::Value,
    ) -> Result<Vec<(TenantId, ApprovalId)>, Self::Error>;

    /// Expires what `run` still waits for or has yet to use, with `reason`; returns those
    /// approvals.
    async fn expire_run_approvals(
        &self,
        tenant: TenantId,
        run: RunId,
        reason: &str,
    ) -> Result<Vec<ApprovalId>, Self::Error>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::scopes;
    use crate::stores::runs::tests::member;

    #[test]
    fn an_approval_is_read_by_its_requester_its_deciders_and_audit_readers_only() {
        let tenant = TenantId::new();
        let ann = member(tenant, &[scopes::TOOLS_INVOKE]);
        let bob = member(tenant, &[scopes::TOOLS_INVOKE]);
        let decider = member(tenant, &[scopes::APPROVALS_DECIDE]);
        let auditor = member(tenant, &[scopes::AUDIT_READ]);
        let outsider = member(
            TenantId::new(),
            &[scopes::APPROVALS_DECIDE, scopes::AUDIT_READ],
        );
        let now = Utc::now();
        let record = ApprovalRecord {
            id: ApprovalId(uuid::Uuid::now_v7()),
            tenant,
            call_id: CallId::new(),
            tool: "execute_command".into(),
            risk: crate::Risk::High,
            adapter: crate::Adapter::Rest,
            arguments: serde_json::json!({}),
            arguments_hash: String::new(),
            call_arguments: None,
            requester: ann.principal.id,
            requester_name: "ann".into(),
            auth: ann.clone(),
            run_id: None,
            step: None,
            agent: None,
            status: ApprovalStatus::Pending,
            reason: None,
            decided_by: None,
            decided_by_name: None,
            decided_at: None,
            expires_at: now,
            created_at: now,
            used_at: None,
            result: None,
        };
        assert!(record.is_visible_to(&ann));
        assert!(!record.is_visible_to(&bob), "a colleague's call");
        assert!(record.is_visible_to(&decider));
        assert!(record.is_visible_to(&auditor));
        assert!(!record.is_visible_to(&outsider), "another tenant's");
    }
}
