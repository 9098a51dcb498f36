//! Runs and their journals: the records and [`RunStore`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Backend;
use crate::{PrincipalId, RunId, TenantId};

/// A run's summary row.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    pub id: RunId,
    pub tenant: TenantId,
    pub agent_id: Uuid,
    pub agent_name: String,
    pub principal: PrincipalId,
    /// The caller's auth context, to resume the run as that caller.
    pub auth: crate::AuthContext,
    /// The agent's configuration when the run started.
    pub agent_config: serde_json::Value,
    pub input: String,
    pub status: RunStatus,
    pub output: Option<String>,
    pub best_effort: bool,
    pub error: Option<String>,
    /// Token counts over all the run's model calls, once it has ended or paused.
    pub usage: Option<crate::Usage>,
    pub cancel_requested: bool,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// Whether `auth` sees every run of its tenant: with `audit:read`, as it reads every call
/// in the audit log. Without it a principal sees the runs it started: a run holds its
/// input, the results of the tools it called and its answer, which are its principal's
/// and may hold what a colleague could not call for itself. Whatever the front door.
pub fn sees_every_run(auth: &crate::AuthContext) -> bool {
    auth.has_scope(crate::auth::scopes::AUDIT_READ)
}

impl RunRecord {
    /// Whether `auth` may see this run (else it is "not found", as another tenant's):
    /// one of its tenant's, started by `auth` or seen by [`sees_every_run`].
    pub fn is_visible_to(&self, auth: &crate::AuthContext) -> bool {
        self.tenant == auth.tenant && (self.principal == auth.principal.id || sees_every_run(auth))
    }

    /// The scope cancelling this run needs beyond `agents:run` and seeing it:
    /// `agents:manage` for another principal's run.
    pub fn cancelling_needs(&self, auth: &crate::AuthContext) -> Option<&'static str> {
        (self.principal != auth.principal.id).then_some(crate::auth::scopes::AGENTS_MANAGE)
    }
}

/// Where a run stands; stored and shown as its snake-case name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    /// Paused at a call that waits for a person's approval.
    AwaitingApproval,
    Completed,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::AwaitingApproval => "awaiting_approval",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        Some(match s {
            "running" => RunStatus::Running,
            "awaiting_approval" => RunStatus::AwaitingApproval,
            "completed" => RunStatus::Completed,
            "failed" => RunStatus::Failed,
            "cancelled" => RunStatus::Cancelled,
            _ => return None,
        })
    }

    /// Whether the run has ended for good (a paused run goes on later).
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunStatus::Running | RunStatus::AwaitingApproval)
    }
}

/// Compares with a status's stored name (for readers holding names, such as tests).
impl PartialEq<&str> for RunStatus {
    fn eq(&self, name: &&str) -> bool {
        self.as_str() == *name
    }
}

/// A run to start, with its first event (`run_started`, sequence 1).
#[derive(Clone, Debug)]
pub struct NewRun {
    pub id: RunId,
    pub agent_id: Uuid,
    pub agent_name: String,
    pub principal: PrincipalId,
    pub auth: crate::AuthContext,
    pub agent_config: serde_json::Value,
    pub input: String,
    /// The instance that drives it and until when (renewed while it runs).
    pub owner: String,
    pub lease_until: DateTime<Utc>,
    pub first_event: serde_json::Value,
}

/// One event of a run's journal.
#[derive(Clone, Debug, PartialEq)]
pub struct RunEventRecord {
    pub seq: i64,
    pub kind: String,
    pub payload: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

/// How a run ended: written to the run's row with its last event, and that event's
/// payload in the journal (`run_finished`), in this field order.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunFinish {
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(default)]
    pub best_effort: bool,
    pub usage: crate::Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Agent runs and their journals, with the leases that say which instance drives each.
#[async_trait]
pub trait RunStore: Backend {
    /// Records a new running run owned by `new.owner`, with its first event.
    async fn create_run(&self, tenant: TenantId, new: &NewRun) -> Result<(), Self::Error>;

    /// Appends `events` to `run`'s journal from `first_seq` on, in one transaction; with
    /// `finish`, also ends (or pauses) the run. `durable`: the commit must reach disk
    /// before this returns (someone waits on it).
    async fn append_run_events(
        &self,
        tenant: TenantId,
        run: RunId,
        first_seq: i64,
        events: &[serde_json::Value],
        finish: Option<&RunFinish>,
        durable: bool,
    ) -> Result<(), Self::Error>;

    /// `run`'s journal after sequence `after`, in order.
    async fn run_events(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
    ) -> Result<Vec<RunEventRecord>, Self::Error>;

    /// Flags `run` for cancellation; false when it is not running or paused (or not the
    /// tenant's).
    async fn request_run_cancel(&self, tenant: TenantId, run: RunId) -> Result<bool, Self::Error>;

    /// Extends `owner`'s leases on `runs` to `until`; returns those of them flagged for
    /// cancellation.
    async fn renew_run_leases(
        &self,
        owner: &str,
        runs: &[RunId],
        until: DateTime<Utc>,
    ) -> Result<Vec<RunId>, Self::Error>;

    /// Takes over, for `owner` until `until`, at most `limit` runs that can go on: running
    /// ones whose lease ran out before `expired_before`, and paused ones that can go on (an
    /// approval decided or expired, or a cancel requested).
    async fn claim_orphaned_runs(
        &self,
        owner: &str,
        until: DateTime<Utc>,
        limit: i64,
        expired_before: DateTime<Utc>,
    ) -> Result<Vec<RunRecord>, Self::Error>;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::auth::scopes;
    use crate::{AuthContext, Principal, PrincipalKind};

    /// A member of `tenant` holding `scopes`.
    pub(crate) fn member(tenant: TenantId, scopes: &[&str]) -> AuthContext {
        AuthContext {
            tenant,
            tenant_name: "acme".into(),
            principal: Principal {
                id: PrincipalId::new(),
                name: "ann".into(),
                kind: PrincipalKind::User,
            },
            roles: vec!["member".into()],
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            key: None,
        }
    }

    fn run_of(auth: &AuthContext) -> RunRecord {
        RunRecord {
            id: RunId(Uuid::now_v7()),
            tenant: auth.tenant,
            agent_id: Uuid::now_v7(),
            agent_name: "helper".into(),
            principal: auth.principal.id,
            auth: auth.clone(),
            agent_config: serde_json::json!({}),
            input: "hi".into(),
            status: RunStatus::Running,
            output: None,
            best_effort: false,
            error: None,
            usage: None,
            cancel_requested: false,
            created_at: Utc::now(),
            finished_at: None,
        }
    }

    #[test]
    fn a_principal_sees_and_cancels_its_own_runs_and_audit_readers_see_all() {
        let tenant = TenantId::new();
        let ann = member(tenant, &[scopes::AGENTS_RUN]);
        let bob = member(tenant, &[scopes::AGENTS_RUN]);
        let auditor = member(tenant, &[scopes::AGENTS_RUN, scopes::AUDIT_READ]);
        let manager = member(
            tenant,
            &[
                scopes::AGENTS_RUN,
                scopes::AUDIT_READ,
                scopes::AGENTS_MANAGE,
            ],
        );
        let outsider = member(TenantId::new(), &[scopes::AGENTS_RUN, scopes::AUDIT_READ]);
        let anns = run_of(&ann);

        assert!(anns.is_visible_to(&ann));
        assert_eq!(anns.cancelling_needs(&ann), None);
        assert!(!anns.is_visible_to(&bob), "a colleague's run");
        assert!(anns.is_visible_to(&auditor));
        assert_eq!(
            anns.cancelling_needs(&auditor),
            Some(scopes::AGENTS_MANAGE),
            "seeing another's run is not cancelling it"
        );
        assert!(anns.is_visible_to(&manager));
        assert!(
            !anns.is_visible_to(&outsider),
            "another tenant's, whatever its scopes"
        );
        assert!(!sees_every_run(&bob) && sees_every_run(&auditor));
    }
}
